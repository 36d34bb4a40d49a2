"""The rollout of `PACSTrainer`: how a rollout batch is laid out and sampled.

- `sequence_tensors`: a batch's prompt + completion tensors and the mask of the loss's tokens.
- `shuffle_groups`: whole groups permuted before a rollout batch is cut into micro-batches (PACS's ψ_i needs every
  r̂_j of its group in one micro-batch).
- `FastSampler` (``fast_sampler=True``): pacs_rl.sampling in place of TRL's generate, each prompt sampled once with
  n = G, and what it keeps of its last rollout: each completion's finish reason (`cut_offs`) and, with
  ``old_logprobs_from_sampler`` (fp32 only), the log-probs and entropies that serve as the rollout's old log-probs
  instead of a second forward over the rollout batch (`FastSampler.take_old_logps`).
- `cut_offs`: which completions were cut off at the token limit, by the one rule of pacs_rl.rewards.cutoff.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Sequence
from typing import Any

import torch

from pacs_rl.rewards.cutoff import is_cut_off
from pacs_rl.sampling import SamplingParams, TransformersSampler

# what a rollout's completions were sampled as: (their token ids, their finish reasons)
Finish = tuple[list[list[int]], list[str | None]]


def sequence_tensors(inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) of prompt + completion, each (B, P + T), and the loss mask (B, T):
    the completion mask, times TRL's tool mask when tool calls were made."""
    completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
    input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
    attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
    mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
    return input_ids, attention_mask, mask


def shuffle_groups(batch: dict[str, Any], group_size: int) -> dict[str, Any]:
    """Permute whole groups of a rollout batch in unison; rows inside a group keep their order.

    batch: values are tensors of shape (B, ...), lists of length B, 0-d tensors or None (left as is);
    rows [g·G, (g+1)·G) form group g. Uses the global torch RNG (restored on resume).
    """
    n_rows = len(
        next(v for v in batch.values() if v is not None and not (torch.is_tensor(v) and v.ndim == 0))
    )
    if n_rows % group_size != 0:
        raise ValueError(f"rollout batch of {n_rows} rows is not a whole number of groups of {group_size}")
    perm_groups = torch.randperm(n_rows // group_size)
    index = (perm_groups[:, None] * group_size + torch.arange(group_size)).reshape(-1)  # (B,)

    def permute(v):
        if v is None or (torch.is_tensor(v) and v.ndim == 0):
            return v
        if torch.is_tensor(v):
            return v[index.to(v.device)]
        return [v[i] for i in index.tolist()]

    return {k: permute(v) for k, v in batch.items()}


def cut_offs(
    completion_ids: Sequence[Sequence[int]],
    finish: Finish | None,
    max_completion_length: int | None,
    eos_token_ids: Collection[int],
) -> list[bool]:
    """Which of ``completion_ids`` were cut off at the token limit: the sampler's finish reasons when ``finish`` is
    exactly their rollout (the fast sampler's last), else the token count against ``max_completion_length`` and
    the EOS ids (TRL's generate, vLLM), by the one rule ``is_cut_off``."""
    ids = [list(c) for c in completion_ids]
    sampled, reasons = finish or (None, None)
    if sampled != ids:
        reasons = [None] * len(ids)
    return [is_cut_off(c, max_completion_length, eos_token_ids, r) for c, r in zip(ids, reasons, strict=True)]


class FastSampler:
    """The fast sampler of a training run (``fast_sampler=True``): ``model`` sampled in place by
    pacs_rl.sampling, each prompt once with n = G (TRL repeats every prompt G times).

    What it keeps of its last rollout: ``finish`` (the completions and their finish reasons, for `cut_offs`),
    ``old_logps`` (the completions, their per-token log-probs and entropies at the sampling temperature, when
    they may serve as the rollout's old log-probs; taken once, `take_old_logps`) and ``entropies`` (those
    entropies as a (B, T) tensor once taken for the update in pieces, until `pop_entropies`). ``args``: the run's
    PACSConfig (fast_sampler_dtype, fast_sampler_batch_size, old_logprobs_from_sampler, bf16, fp16)."""

    def __init__(self, model, processing_class, args):
        self.model, self.args = model, args
        self.engine = TransformersSampler(
            model, processing_class, dtype=args.fast_sampler_dtype, batch_size=args.fast_sampler_batch_size
        )
        self.finish: Finish | None = None
        self.old_logps: tuple[list[list[int]], list, list] | None = None
        self.entropies: torch.Tensor | None = None
        self._warned = False

    def generate(
        self,
        prompt_ids: list[list[int]],
        G: int,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        stop_token_ids: Collection[int],
    ) -> list[list[int]]:
        """The completions of ``prompt_ids`` (each prompt G times in a row, as TRL's RepeatSampler hands them
        over), in that order. The sampling seed is drawn from torch's global RNG, so a resumed run samples alike."""
        unique = prompt_ids[::G]
        if [p for p in unique for _ in range(G)] != list(prompt_ids):
            raise RuntimeError(
                "fast_sampler expects each prompt repeated G times in a row (TRL's RepeatSampler)"
            )
        # greedy decoding (a held-out evaluation through this engine) has no log-probs to keep
        keep_logprobs = temperature > 0 and self.logprobs_usable()
        params = SamplingParams(
            n=G,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            seed=int(torch.randint(0, 2**62, (1,)).item()),  # from the global RNG: resumes exactly
            stop_token_ids=list(stop_token_ids),
            logprobs=keep_logprobs,
            # what the training forward scores: log_softmax(z / T)
            logprob_temperature=temperature if keep_logprobs else 1.0,
        )
        samples = [s for group in self.engine.generate_ids(unique, params) for s in group]
        completions = [list(s.token_ids) for s in samples]
        self.finish = (completions, [s.finish_reason for s in samples])
        self.old_logps = (
            (completions, [s.logprobs for s in samples], [s.entropies for s in samples])
            if keep_logprobs
            else None
        )
        return completions

    def logprobs_usable(self) -> bool:
        """Whether the sampler's log-probs may serve as the rollout's old log-probs: asked for
        (`old_logprobs_from_sampler`) and computed as the training forward computes them (fp32 weights, no
        autocast on either side), so they differ from a fresh forward by float rounding only."""
        args = self.args
        if not args.old_logprobs_from_sampler:
            return False
        same = (
            not (args.bf16 or args.fp16)
            and args.fast_sampler_dtype in (None, "float32", "fp32")
            and all(p.dtype == torch.float32 for p in self.model.parameters())
        )
        if not same and not self._warned:
            self._warned = True
            warnings.warn(
                "old_logprobs_from_sampler=True needs fp32 weights, bf16=False and fast_sampler_dtype=None (the "
                "sampler must compute what the training forward computes); the old log-probs are recomputed by "
                "a forward instead.",
                stacklevel=2,
            )
        return same

    def take_old_logps(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, entropies: bool
    ) -> torch.Tensor | None:
        """The last rollout's log-probs as a (B, logits_to_keep) tensor (0 on padding) when ``input_ids`` hold
        exactly its completions; None otherwise (the caller then runs a forward). Taken once. With ``entropies``
        (the update in pieces reads them) their entropies are kept alike, until `pop_entropies`."""
        completions, logps, row_entropies = self.old_logps
        self.old_logps = None
        T = logits_to_keep
        if len(completions) != input_ids.size(0):
            return None
        out = torch.zeros((len(completions), T), dtype=torch.float32)
        ent = torch.zeros_like(out) if entropies else None
        mask = attention_mask[:, -T:].sum(-1).tolist()
        ids = input_ids[:, -T:].tolist()
        for row, (tokens, lp, h) in enumerate(zip(completions, logps, row_entropies, strict=True)):
            n = len(tokens)
            if n > T or mask[row] != n or ids[row][:n] != tokens:
                return None
            out[row, :n] = torch.tensor(lp)
            if ent is not None:
                ent[row, :n] = torch.tensor(h)
        if ent is not None:
            self.entropies = ent.to(input_ids.device)
        return out.to(input_ids.device)

    def pop_entropies(self) -> torch.Tensor | None:
        """The entropies `take_old_logps` kept (None: none), forgotten here."""
        entropies, self.entropies = self.entropies, None
        return entropies


__all__ = ["FastSampler", "cut_offs", "sequence_tensors", "shuffle_groups"]
