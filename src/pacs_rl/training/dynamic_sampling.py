"""Dynamic sampling (DAPO, Yu et al. 2025, §3.2; verl's ``algorithm.filter_groups``): train only on groups whose
rewards are not all equal, and sample further prompts until the rollout batch is full again.

DAPO's rule: keep prompt q only when 0 < |{o_i : o_i is right}| < G, so that every group left holds both labels
(in general, rewards that are not all equal: verl keeps a group whose reward metric has a standard deviation
above 0). A group whose completions share one reward gives every group-relative method (GRPO, RLOO, Dr. GRPO,
PACS at ψ = 0) a zero advantage or a gradient that cancels: it takes a place in the batch and teaches nothing.

How `PACSTrainer` runs it (`fill_batch`, called from `_prepare_inputs` once per rollout batch):

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

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

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


__all__ = [
    "Filled",
    "PromptStream",
    "fill_batch",
    "merge_rollouts",
    "take_groups",
    "unequal_groups",
]
