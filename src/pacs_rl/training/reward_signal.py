"""The learning signal of `PACSTrainer`'s rollouts: which rewards, which groups and which rows the loss may learn from.

- `rollout_rewards`: a rollout's rewards from its reward functions' scores (weighted; an unscorable completion, no
  reward function scoring it, set to 0), PACS's 0/1 labels checked or thresholded (`binary_labels`).
- `group_mixed_fraction`, `holds_signal`: whether groups hold two different rewards. A group whose rows share one
  reward has advantage 0 in every group baseline, and at ψ = 0 a PACS gradient of float rounding or nothing.
- `SignalGate`: the no-signal gate (``skip_no_signal_steps``): whether some micro-batch of the optimizer step in
  progress, on any process, held such a group; `no_signal_skip_note` says where it cannot act.
- `finite_rows`: the rows of the groups whose log-probs are finite (a non-finite one leaves its group out).

Dynamic sampling (DAPO: only groups with two different rewards, further prompts sampled until the batch is full)
is `pacs_rl.training.dynamic_sampling`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from pacs_rl.algorithms import finite_groups
from pacs_rl.training.dynamic_sampling import unequal_groups

log = logging.getLogger("pacs_rl.training")


def rollout_rewards(
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor,
    binary: bool,
    reject_non_binary: bool,
    func_names: Sequence[str],
) -> tuple[torch.Tensor, torch.Tensor, float | None]:
    """(rewards (B,), unscorable (B,) bool, the fraction of rewards thresholded to a label or None) of a rollout.

    rewards_per_func: (B, n_funcs), nan where a reward function did not score a completion; weights: (n_funcs,).
    A completion no reward function scored is unscorable and gets reward 0: PACS labels it 0 (every row of a group
    needs a label); the baselines leave it out of the group baseline with advantage 0, as TRL does. With
    ``binary`` (PACS) the rewards are labels: see `binary_labels`."""
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    thresholded = None
    if binary:
        rewards, thresholded = binary_labels(
            rewards, unscorable, rewards_per_func, func_names, reject_non_binary
        )
    return rewards.masked_fill(unscorable, 0.0), unscorable, thresholded


def binary_labels(
    rewards: torch.Tensor,
    unscorable: torch.Tensor,
    rewards_per_func: torch.Tensor,
    func_names: Sequence[str],
    reject: bool,
) -> tuple[torch.Tensor, float | None]:
    """PACS needs labels R ∈ {0, 1}: (the labels, None) when they are; otherwise a ValueError naming the reward
    functions (``reject``), or the rewards thresholded at 0.5 and the fraction that was not a label."""
    ok = (rewards == 0) | (rewards == 1) | unscorable
    if bool(ok.all()):
        return rewards, None
    bad = rewards[~ok]
    if reject:
        funcs = ", ".join(
            f"{name} (e.g. {rewards_per_func[~ok][0, i].item():g})" for i, name in enumerate(func_names)
        )
        raise ValueError(
            f"loss_type='pacs' treats the reward as a 0/1 label, but {bad.numel()} of {rewards.numel()} "
            f"completions got a reward outside {{0, 1}} (first: {bad[0].item():g}) from reward function(s): "
            f"{funcs}. Make the reward function return 0 or 1, or set reject_non_binary_rewards=False to "
            "threshold at 0.5."
        )
    return (rewards >= 0.5).float(), (~ok).float().mean().item()


def group_mixed_fraction(rewards: torch.Tensor, group_size: int) -> float:
    """Fraction of groups whose completions do not all share one reward. rewards: (B,), B = groups × G."""
    return unequal_groups(rewards, group_size).float().mean().item()


def holds_signal(rewards: torch.Tensor, group_size: int, valid: torch.Tensor | None = None) -> bool:
    """Whether some group holds two different rewards among its ``valid`` rows (all rows when None). rewards,
    valid: (B,), B = groups × G; an empty batch holds none."""
    if rewards.numel() == 0:
        return False
    return bool(unequal_groups(rewards, group_size, valid).any())


class SignalGate:
    """The no-signal gate of the optimizer step in progress: `note` each micro-batch's loss rows; at the step's
    end, `step_without_signal` says whether none of them, on any process, held a group of two different rewards
    (no signal, no step: docs/ALGORITHMS.md)."""

    def __init__(self) -> None:
        self.signal = False  # whether a micro-batch of the optimizer step in progress held such a group

    def note(self, rewards: torch.Tensor, group_size: int, scored: torch.Tensor | None) -> None:
        """A micro-batch's loss rows: their rewards and, for the baselines, which were scored (an unscored row's
        advantage is 0; PACS labels every row, so passes None)."""
        self.signal = self.signal or holds_signal(rewards, group_size, scored)

    def step_without_signal(self, applies: bool, accelerator) -> bool:
        """Whether the optimizer step now ending is to be skipped for want of a signal (``applies``: the gate is on
        and the step is the trainer's, not DeepSpeed's). Under several processes a collective: every process calls
        it on every step, and any process's signal counts (the gradients are averaged). Resets the mark for the
        next step."""
        signal, self.signal = self.signal, False
        if not applies:
            return False
        if accelerator.num_processes > 1:
            flag = torch.tensor([float(signal)], device=accelerator.device)
            signal = bool(accelerator.reduce(flag, reduction="sum").item() > 0)
        return not signal


def no_signal_skip_note(skip: bool, deepspeed_stage: int | None) -> str | None:
    """Why ``skip_no_signal_steps`` cannot act on this run (None: it can): under DeepSpeed the optimizer step runs
    inside DeepSpeed's backward, before the trainer sees the step's end."""
    if not skip or deepspeed_stage is None:
        return None
    return (
        f"skip_no_signal_steps=True is not applied under DeepSpeed (ZeRO-{deepspeed_stage}): DeepSpeed takes the "
        "optimizer step itself, so a mini-batch without a group of two different rewards still steps AdamW; set "
        "skip_no_signal_steps=false to say so, or train without DeepSpeed."
    )


def finite_rows(
    group_size: int, mask: torch.Tensor, rewards: torch.Tensor, **tensors: torch.Tensor | None
) -> tuple[torch.Tensor | None, float]:
    """(rows of the groups whose response tokens are finite in every given (B, T) tensor, None when all are; the
    fraction of groups left out).

    A non-finite log-prob (e.g. an fp16 overflow in the forward) must neither stop a long run nor reach the loss:
    its group is left out and counted; if the backward still makes the gradient non-finite, the optimizer step is
    skipped (`pacs_rl.training.update.OptimizerSteps`). ``is_weights`` may hold one ratio per sequence, (B, 1).
    """
    G = group_size
    token_tensors = {k: v for k, v in tensors.items() if v is not None and v.shape == mask.shape}
    ok = finite_groups(mask, G, rewards, **token_tensors)  # (n_groups,)
    seq_weights = tensors.get("is_weights")
    if seq_weights is not None and seq_weights.shape != mask.shape:  # one ratio per sequence, (B, 1)
        ok &= torch.isfinite(seq_weights.reshape(-1, G)).all(dim=1)
    left_out = 1.0 - ok.float().mean().item()
    if bool(ok.all()):
        return None, left_out
    log.warning(
        "left out %d of %d groups with non-finite log-probs from this loss", int((~ok).sum()), ok.numel()
    )
    return ok.repeat_interleave(G).nonzero()[:, 0], left_out


__all__ = [
    "SignalGate",
    "binary_labels",
    "finite_rows",
    "group_mixed_fraction",
    "holds_signal",
    "no_signal_skip_note",
    "rollout_rewards",
]
