"""Dynamic sampling (DAPO, Yu et al. 2025, §3.2; verl's ``algorithm.filter_groups``): train only on groups whose
rewards are not all equal, and sample further prompts until the rollout batch is full again.

DAPO's rule: keep prompt q only when 0 < |{o_i : o_i is right}| < G, so that every group left holds both labels
(in general, rewards that are not all equal: verl keeps a group whose reward metric has a standard deviation
above 0). A group whose completions share one reward gives every group-relative method (GRPO, RLOO, Dr. GRPO,
PACS at ψ = 0) a zero advantage or a gradient that cancels: it takes a place in the batch and teaches nothing.

How `PACSTrainer` runs it (`DynamicSampler.fill`, called from `_prepare_inputs` once per rollout batch, over
`fill_batch`):

- a *round* samples and grades one rollout batch's worth of prompts (what the process would sample anyway);
  the first round is the rollout TRL's data loader handed over, the further ones draw their prompts from
  `PromptStream` (the training set in an order of its own, reshuffled every pass, deterministic under the
  seed; where it stands is kept in checkpoints, so a resumed run draws the same prompts);
- the kept groups of the rounds fill the process's batch in the order they were sampled; the surplus of the
  last round is dropped (verl drops it too);
- after ``max_rounds`` rounds a batch still short is filled with single-label groups of the first round, so it
  keeps its size (the mini-batch split, the memory plan and every process's share stay as planned): those are
  the groups the rollout would have trained on without dynamic sampling, and a mini-batch of them alone carries
  no signal. verl's recipe stops the run with an error here instead; on a small model at the start of training
  a few rollouts without enough mixed groups are common and not a reason to stop;
- with several processes each fills its own share, and the rounds go on until every process's share is full
  (or the cap is reached), all processes sampling the same number of rounds.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

log = logging.getLogger("pacs_rl.training")

# keys of a rollout batch that hold images: their rows are not one per sequence, so groups cannot be taken out
MULTIMODAL_KEYS = frozenset(
    {
        "pixel_values",
        "image_grid_thw",
        "pixel_attention_mask",
        "spatial_shapes",
        "image_sizes",
        "token_type_ids",
        "mm_token_type_ids",
        "image_position_ids",
        "num_images",
        "num_tiles",
    }
)
LEFT_PADDED = ("prompt_ids", "prompt_mask")  # TRL pads prompts on the left, everything per token on the right


def unequal_groups(
    rewards: torch.Tensor, group_size: int, scored: torch.Tensor | None = None
) -> torch.Tensor:
    """Which groups hold rewards that are not all equal (with 0/1 rewards: both labels), (n_groups,) bool.

    rewards: (B,), B = groups × G, rows [g·G, (g+1)·G) are group g. scored: (B,) bool or None; a completion no
    reward function scored is left out of the comparison (the baselines give it advantage 0, as TRL does)."""
    grouped = rewards.float().view(-1, group_size)
    if scored is None:
        return grouped.max(dim=1).values != grouped.min(dim=1).values
    ok = scored.bool().view(-1, group_size)
    inf = torch.tensor(float("inf"), device=grouped.device)
    high = torch.where(ok, grouped, -inf).max(dim=1).values
    low = torch.where(ok, grouped, inf).min(dim=1).values
    return (ok.sum(dim=1) >= 2) & (high != low)


class PromptStream:
    """The further prompts of dynamic sampling: indices into the training set, every index once per pass, the
    order of each pass shuffled by (``seed``, pass) alone (Python's ``random`` seeded with a string: the same on
    every machine and process, and apart from torch's generator, which sampling uses). ``drawn`` is where the
    stream stands; a checkpoint keeps it."""

    def __init__(self, size: int, seed: int, shuffle: bool = True, drawn: int = 0):
        if size < 1:
            raise ValueError("dynamic sampling needs a training set with at least one prompt")
        self.size, self.seed, self.shuffle, self.drawn = size, seed, shuffle, drawn
        self._order: tuple[int, list[int]] | None = None  # (pass, its order)

    def order(self, epoch: int) -> list[int]:
        if self._order is None or self._order[0] != epoch:
            order = list(range(self.size))
            if self.shuffle:
                random.Random(f"pacs-rl dynamic sampling {self.seed} {epoch}").shuffle(order)
            self._order = (epoch, order)
        return self._order[1]

    def take(self, n: int) -> list[int]:
        """The next ``n`` indices (into the following pass when this one ends)."""
        out: list[int] = []
        while len(out) < n:
            epoch, at = divmod(self.drawn, self.size)
            chunk = self.order(epoch)[at : at + n - len(out)]
            out += chunk
            self.drawn += len(chunk)
        return out


def take_groups(batch: dict[str, Any], groups: torch.Tensor, group_size: int) -> dict[str, Any]:
    """The rows of ``groups`` (group indices, in that order) of a rollout batch: tensors of shape (B, ...) and
    lists of length B indexed, anything else (0-d tensors, None) kept as it is."""
    rows = (groups[:, None] * group_size + torch.arange(group_size)).reshape(-1)  # (len(groups) · G,)
    n_rows = batch["rewards"].size(0)

    def pick(v):
        if torch.is_tensor(v) and v.ndim > 0 and v.size(0) == n_rows:
            return v[rows.to(v.device)]
        if isinstance(v, list) and len(v) == n_rows:
            return [v[i] for i in rows.tolist()]
        return v

    return {k: pick(v) for k, v in batch.items()}


def _pad_width(t: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    """``t`` (B, w, ...) padded along dim 1 to ``width`` with ``value``, on the left or the right."""
    extra = width - t.size(1)
    if extra <= 0:
        return t
    pad = torch.full((t.size(0), extra, *t.shape[2:]), value, dtype=t.dtype, device=t.device)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


def merge_rollouts(
    parts: list[dict[str, Any]], pad_token_id: int, per_sequence: Iterable[str] = ()
) -> dict[str, Any]:
    """Rollout batches with the same keys, stacked row-wise. Per-token tensors (B, T) are padded to the widest
    part first: prompts on the left, everything else on the right, with the pad token for token ids, 1 for
    TRL's tool mask (as TRL pads it) and 0 otherwise; the keys in ``per_sequence`` hold one column per sequence
    and are not padded. Lists are concatenated; anything else is the first part's. A key some parts lack is left
    out (the fp32 sampler's entropies, kept only where its log-probs matched the rollout: the update computes
    them itself without)."""
    per_sequence = set(per_sequence)
    out: dict[str, Any] = {}
    for key, first in parts[0].items():
        if any(key not in p for p in parts):
            continue
        values = [p[key] for p in parts]
        if isinstance(first, list):
            out[key] = [x for v in values for x in v]
        elif not torch.is_tensor(first) or first.ndim == 0:
            out[key] = first
        elif first.ndim == 1 or key in per_sequence:
            out[key] = torch.cat(values)
        else:
            width = max(v.size(1) for v in values)
            value = pad_token_id if key.endswith("_ids") else 1 if key == "tool_mask" else 0
            out[key] = torch.cat([_pad_width(v, width, value, key in LEFT_PADDED) for v in values])
    return out


@dataclass
class Filled:
    """A rollout batch dynamic sampling filled: this process's rows, and what it took to fill them."""

    batch: dict[str, Any]
    rounds: int  # rollout batches sampled for it, the first included
    kept: int  # this process's groups in it whose rewards are not all equal
    padded: int  # this process's places filled with single-label groups of the first round (the cap reached)


def fill_batch(
    first: dict[str, Any],
    sample: Callable[[], dict[str, Any]],
    fewest_kept: Callable[[int], int],
    group_size: int,
    max_rounds: int,
    pad_token_id: int,
    per_sequence: Iterable[str] = (),
) -> Filled:
    """DAPO's dynamic sampling on one process's rollout batch ``first`` (rows of whole groups, with its
    ``rewards`` and, for the baselines, ``scored``). ``sample()`` samples and grades one more round;
    ``fewest_kept(k)`` is the fewest kept groups of any process when this one has ``k`` (every process calls it
    after each round below the cap, so all sample the same number of rounds)."""
    refused = sorted(MULTIMODAL_KEYS & {k for k, v in first.items() if v is not None})
    if refused:
        raise ValueError(
            f"dynamic_sampling=True takes whole groups out of a rollout batch, which this one's images "
            f"({', '.join(refused)}) do not allow: set dynamic_sampling=False for image prompts."
        )
    G = group_size
    need = first["rewards"].numel() // G
    parts, kept, rounds, batch = [], 0, 1, first
    while True:
        keep = unequal_groups(batch["rewards"], G, batch.get("scored")).nonzero()[:, 0][: need - kept]
        if keep.numel():
            parts.append(take_groups(batch, keep.cpu(), G))
            kept += keep.numel()
        if rounds >= max_rounds or fewest_kept(kept) >= need:
            break
        batch = sample()
        rounds += 1
    padded = need - kept
    if padded:  # the cap is reached: single-label groups of the first round keep the batch at its size
        single = (~unequal_groups(first["rewards"], G, first.get("scored"))).nonzero()[:, 0][:padded]
        parts.append(take_groups(first, single.cpu(), G))
    return Filled(merge_rollouts(parts, pad_token_id, per_sequence), rounds, kept, padded)


class DynamicSampler:
    """Dynamic sampling over a run: where its further prompts stand (``stream``) and what it did (``totals``:
    rollouts, groups sampled, kept and padded, rounds, seconds), both kept in checkpoints; one rollout batch of this
    process filled at a time (`fill`).

    dataset: the training set, read by index (a streamed dataset cannot be); accelerator: the run's (its processes,
    their collectives); seed, shuffle: the run's, for the prompt stream's order."""

    def __init__(self, dataset, seed: int, shuffle: bool, group_size: int, max_rounds: int, accelerator):
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise ValueError(
                f"dynamic_sampling=True draws further prompts from the training set by index, which a "
                f"{type(dataset).__name__} (a streamed dataset) cannot give: load it as a datasets.Dataset, or "
                "set dynamic_sampling=False."
            )
        self.dataset, self.group_size, self.max_rounds = dataset, group_size, max_rounds
        self.accelerator = accelerator
        self.stream = PromptStream(len(dataset), seed, shuffle=shuffle)
        self.totals: dict[str, float] = {}
        self._warned_short = False

    def prompts(self, prompts: int, columns: set[str] | None) -> list[dict[str, Any]]:
        """The next ``prompts`` training rows of this process from the prompt stream, each G times in a row (as
        TRL's RepeatSampler hands them over), with only ``columns`` (None: all, as transformers' data loader leaves
        them); every process draws the round's prompts of all and takes its own."""
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        indices = self.stream.take(prompts * world)[rank * prompts : (rank + 1) * prompts]
        rows = [dict(self.dataset[i]) for i in indices]
        if columns is not None:
            rows = [{k: v for k, v in row.items() if k in columns} for row in rows]
        return [dict(row) for row in rows for _ in range(self.group_size)]

    def fewest_kept(self, kept: int) -> int:
        """The fewest kept groups of any process, this one holding ``kept`` (a collective: every process calls it)."""
        if self.accelerator.num_processes == 1:
            return kept
        counts = self.accelerator.gather(torch.tensor([kept], device=self.accelerator.device))
        return int(counts.min().item())

    def fill(
        self,
        batch: dict[str, Any],
        sample_more: Callable[[int], dict[str, Any]],
        say: Callable[[str], None],
        pad_token_id: int,
        per_sequence: Iterable[str] = (),
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """(this process's rollout ``batch`` with only groups whose rewards are not all equal, further rounds
        sampled until it is full or max_rounds is reached; the step's figures, added to ``totals``).

        sample_more(n): n more prompts of this process sampled and graded, a rollout batch; say: a phase line."""
        started, G, rows = time.perf_counter(), self.group_size, batch["rewards"].numel()
        need, most = rows // G, self.max_rounds
        round_ = {"number": 1, "kept": 0}

        def fewest_kept(kept: int) -> int:
            round_["kept"] = self.fewest_kept(kept)
            return round_["kept"]

        def sample() -> dict[str, Any]:
            round_["number"] += 1
            say(
                f"dynamic sampling round {round_['number']} of at most {most} "
                f"({round_['kept']} of {need} groups with two different rewards so far): sampling {need} more prompts"
            )
            return sample_more(need)

        filled = fill_batch(batch, sample, fewest_kept, G, most, pad_token_id, per_sequence)
        out, acc = filled.batch, self.accelerator
        mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
        # TRL's count of the loss's tokens, over the batch kept
        out["num_items_in_batch"] = acc.gather(mask.sum()).sum()
        kept, padded = acc.reduce(
            torch.tensor([filled.kept, filled.padded], dtype=torch.float64, device=acc.device),
            reduction="sum",
        ).tolist()
        groups = rows // G * acc.num_processes
        step = {
            "groups_sampled": float(groups * filled.rounds),
            "groups_kept": kept,
            "groups_padded": padded,
            "rounds": float(filled.rounds),
            "seconds": time.perf_counter() - started,  # the further rounds: what dynamic sampling adds
        }
        self.totals["rollouts"] = self.totals.get("rollouts", 0.0) + 1
        for name, value in step.items():
            self.totals[name] = self.totals.get(name, 0.0) + value
        if padded and acc.is_main_process and not self._warned_short:
            self._warned_short = True
            log.warning(
                "dynamic sampling: %d of %d groups of this rollout batch hold both labels after %d rounds "
                "(dynamic_sampling_max_rounds); %d places filled with single-label groups (counted in "
                "dynamic_sampling/groups_padded from now on, not warned again)",
                int(kept), groups, filled.rounds, int(padded),
            )  # fmt: skip
        return out, step

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: where the prompt stream stands, the totals."""
        return {"prompts_drawn": self.stream.drawn, "dynamic_sampling_totals": dict(self.totals)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Where a checkpoint left it (one without: the start)."""
        self.stream.drawn = state.get("prompts_drawn", 0)
        self.totals = dict(state.get("dynamic_sampling_totals", {}))


__all__ = [
    "DynamicSampler",
    "Filled",
    "PromptStream",
    "fill_batch",
    "merge_rollouts",
    "take_groups",
    "unequal_groups",
]
