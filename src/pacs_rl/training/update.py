"""The update of `PACSTrainer`: what a micro-batch's loss is given, and which optimizer steps move the policy.

- `loss_options`, `loss_batch`: the options and the batch tensors a loss takes besides the log-probs (PACS's
  reference log-probs; a baseline's TRL reference log-probs, scored rows and vLLM importance-sampling ratio).
- `old_logps`: the old policy's log-probs. While the policy has not stepped since the rollout, the loss takes the
  update's own (detached), so PACS's r̂ and ψ are exactly 0 and a baseline's ratio exactly 1, whatever computed the
  rollout's (the fp32 sampler, a forward over other rows, another dtype).
- `logps_in_pieces` (``update_token_budget``): log-prob values whose backward runs the model in pieces
  (`pacs_rl.training.logprobs`).
- `step_metrics`: a micro-batch's loss metrics, averaged over processes in one all-reduce.
- `OptimizerSteps`: the run's optimizer steps: the step of the buffered rollout, the last step that moved the
  policy, and the steps skipped (a non-finite gradient norm; no signal, `pacs_rl.training.reward_signal`), each
  skipped by dropping the gradients before ``optimizer.step()``.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch

from pacs_rl.algorithms import policy_loss_options
from pacs_rl.training.logprobs import LogpsBackwardInPieces, completion_logps
from pacs_rl.training.reward_signal import group_mixed_fraction
from pacs_rl.training.schema import PACS_OPTION_FIELDS
from pacs_rl.training.trl_fields import CLIP_OPTION_FIELDS, KL_OPTION_FIELDS

log = logging.getLogger("pacs_rl.training")


def loss_options(args, loss_type: str) -> dict[str, Any]:
    """The options the trainer passes to loss ``loss_type``: ``loss_options`` as given, then each option a config
    field fills (an entry of loss_options wins): PACS's from the fields declared with a ``loss_option``
    (training/schema.py); a baseline's clip range and length from TRL's epsilon, epsilon_high and
    max_completion_length, and with a KL term (beta > 0) its coefficient, where the loss takes them."""
    options = dict(args.loss_options)
    if loss_type == "pacs":
        fields = PACS_OPTION_FIELDS
    else:
        accepted = policy_loss_options(loss_type)
        trl = {**CLIP_OPTION_FIELDS, **(KL_OPTION_FIELDS if args.beta != 0.0 else {})}
        fields = {option: name for option, name in trl.items() if option in accepted}
    for option, name in fields.items():
        options.setdefault(option, getattr(args, name))
    return options


def loss_batch(
    loss_type: str, inputs: dict[str, Any], old_logp: torch.Tensor, beta: float
) -> dict[str, torch.Tensor | None]:
    """The batch tensors loss ``loss_type`` takes besides logp, old_logp, mask and rewards (None: not given).

    PACS (eq. 8): ref_logp, π_ref = the rollout policy ("old") or the frozen copy. A baseline: TRL's reference
    log-probs (the initial policy's, computed at rollout time) with a KL term (``beta`` ≠ 0), which completions were
    scored, and the vLLM importance-sampling ratio (TRL computes it with use_vllm and its correction)."""
    batch = {"ref_logp": None, "scored": None, "is_weights": None}
    if loss_type == "pacs":
        batch["ref_logp"] = inputs.get("pacs_ref_per_token_logps", old_logp)
    else:
        if beta != 0.0:
            batch["ref_logp"] = inputs["ref_per_token_logps"]
        batch["scored"] = inputs.get("scored")
        batch["is_weights"] = inputs.get("importance_sampling_ratio")
    return batch


def nothing_to_learn(logp: torch.Tensor) -> torch.Tensor:
    """The loss of a micro-batch without a finite group: 0, with a graph to the model (the step's norm decides)."""
    return torch.where(torch.isfinite(logp), logp, 0.0).sum() * 0.0


def old_logps(inputs: dict[str, Any], logp: torch.Tensor, policy_unchanged: bool) -> torch.Tensor:
    """The old policy's log-probs (B, T) for the loss: ``logp`` itself, detached, while the policy has not
    stepped since the rollout (``policy_unchanged``: it is the old policy then), else the rollout's (TRL's
    old_per_token_logps).

    The rollout's were computed by another computation of the same function: the fp32 sampler
    (old_logprobs_from_sampler), or a forward over other rows or in another dtype, equal to ``logp`` up to
    float rounding only. Taking ``logp`` makes PACS's r̂ = β Σ (logp − old) and ψ exactly 0, and a baseline's
    ratio exactly 1, instead of rounding noise that AdamW scales into a full step. TRL leaves the rollout's
    out when one optimizer step uses the whole rollout: the same case."""
    old = inputs.get("old_per_token_logps")
    if old is None or policy_unchanged:
        return logp.detach()
    return old


def logps_in_pieces(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
    budget: int,
    autocast: Callable,
    rollout: tuple[torch.Tensor, torch.Tensor | None] | None,
    log_entropy: Callable[[float], None],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logp, entropies) of the update with update_token_budget (pacs_rl.training.logprobs).

    logp holds the values without a graph; its backward runs the model's forward and backward in pieces of at most
    ``budget`` completion tokens. The values: ``rollout`` (the rollout's old log-probs and the fp32 sampler's
    entropies or None) while the policy has not stepped since the rollout (the same weights computed them), else
    a forward without gradient. entropies: the rollout's or that forward's; None when neither has them, and then
    the pieces compute them and hand their mean over the rows they ran to ``log_entropy``. ``autocast``: the
    accelerator's."""
    T = mask.size(1)
    if rollout is not None:
        values, entropies = rollout[0].float(), rollout[1]
    else:
        # without gradient only a piece's logits are alive (4 bytes x vocabulary per token): 4x the budget
        with torch.no_grad(), autocast():
            values, entropies = completion_logps(
                model, input_ids, attention_mask, T, temperature, 4 * budget, compute_entropy=True
            )

    def backward(grad: torch.Tensor) -> None:
        with autocast():
            _, ent = completion_logps(model, input_ids, attention_mask, T, temperature, budget,
                                      grad=grad, compute_entropy=entropies is None)  # fmt: skip
        rows = mask * grad.ne(0).any(-1, keepdim=True)  # the rows the pieces ran (no gradient: skipped)
        if ent is not None and rows.any():
            log_entropy((ent * rows).sum().item() / max(rows.sum().item(), 1.0))

    anchor = torch.zeros((), device=input_ids.device, requires_grad=True)
    return LogpsBackwardInPieces.apply(anchor, values, backward), entropies


def step_metrics(
    loss_metrics: dict[str, float],
    entropies: torch.Tensor | None,
    mask: torch.Tensor,
    rewards: torch.Tensor,
    group_size: int,
    prefix: str,
    average: Callable[[torch.Tensor], torch.Tensor],
    device,
) -> list[tuple[str, float]]:
    """A micro-batch's metrics, (name, value) in the order they are logged, each averaged over processes in one
    collective (``average``: the accelerator's mean all-reduce of a float64 tensor on ``device``).

    A loss's own metric is logged under ``prefix`` unless its name holds a "/"; PACS's critic AUC, defined on mixed
    groups only (nan without one), is averaged over those groups; entropies None: the update's pieces log the
    entropy themselves (update_token_budget)."""
    loss_metrics = dict(loss_metrics)
    auc, auc_groups = loss_metrics.pop("critic_auc", None), loss_metrics.pop("critic_auc_groups", 0)
    names = sorted(loss_metrics)
    local = [float(loss_metrics[k]) for k in names]
    entropy = float("nan")
    if entropies is not None:
        entropy = (entropies.detach() * mask).sum().item() / max(mask.sum().item(), 1.0)
    local += [rewards.float().mean().item(), group_mixed_fraction(rewards, group_size), entropy]
    local += [auc * auc_groups if auc_groups else 0.0, float(auc_groups)]
    values = average(torch.tensor(local, dtype=torch.float64, device=device)).tolist()
    out = [
        (name if "/" in name else prefix + name, value)
        for name, value in zip(names, values[: len(names)], strict=True)
    ]
    accuracy, mixed, entropy, auc_sum, auc_groups = values[len(names) :]
    if auc is not None and auc_groups > 0:
        out.append((prefix + "critic_auc", auc_sum / auc_groups))
    if entropies is not None:
        out.append(("entropy", entropy))
    out.append(("accuracy", accuracy))  # of this mini-batch's completions
    out.append(("groups/mixed_frac_minibatch", mixed))
    return out


class OptimizerSteps:
    """The run's optimizer steps, as a checkpoint keeps them (`state_dict`): ``rollout_step``, the global_step
    when the buffered rollout was sampled, and ``policy_step``, the global_step of the last optimizer step that
    moved the policy (-1: none, or unknown); the steps skipped for a non-finite gradient norm
    (``skipped_nonfinite``) and for want of a signal (``skipped_no_signal``)."""

    def __init__(self) -> None:
        self.rollout_step = -1
        self.policy_step = -1
        self.skipped_nonfinite = 0
        self.skipped_no_signal = 0

    def policy_unchanged_since_rollout(self) -> bool:
        """Whether no optimizer step has moved the policy since the buffered rollout was sampled (a skipped step
        moves nothing); False when unknown (the rollout's step not recorded)."""
        return self.rollout_step >= 0 and self.policy_step < self.rollout_step

    def end(
        self,
        model,
        grad_norm: float,
        no_signal: bool,
        global_step: int,
        *,
        grad_scaler: bool,
        deepspeed: bool,
        weight_decay: float,
    ) -> bool:
        """The optimizer step now ending, after any clipping and before ``optimizer.step()``: whether it is skipped
        for a non-finite ``grad_norm`` (as the PACS authors' actor and verl do); else, with ``no_signal``, it is
        skipped for want of a signal. A skipped step's gradients are dropped (``zero_grad(set_to_none=True)``):
        torch's optimizers leave a parameter without a gradient alone, so weights, Adam moments, step counts and
        weight decay stay exactly as they were (a zero-gradient step would still move weights through the moments
        and the decay); the learning-rate schedule and global_step advance. Under fp16 the grad scaler skips a
        non-finite step itself; under DeepSpeed the step is DeepSpeed's own and cannot be skipped from here."""
        skipped = not math.isfinite(grad_norm)
        if skipped:
            self.skipped_nonfinite += 1
            if grad_scaler:
                pass  # fp16: the grad scaler finds the inf, skips the step and lowers its scale itself
            elif deepspeed:
                warnings.warn(
                    f"gradient norm {grad_norm} at step {global_step + 1}: under DeepSpeed the optimizer step is "
                    "DeepSpeed's own and cannot be skipped from here.",
                    stacklevel=3,
                )
            else:
                model.zero_grad(set_to_none=True)  # torch optimizers skip parameters without a gradient
                log.warning(
                    "skipped optimizer step %d: gradient norm %s (%d skipped so far)",
                    global_step + 1, grad_norm, self.skipped_nonfinite,
                )  # fmt: skip
        elif no_signal:
            self.skipped_no_signal += 1
            model.zero_grad(set_to_none=True)
        if deepspeed or (not (skipped or no_signal) and self._moves_policy(model, grad_norm, weight_decay)):
            self.policy_step = global_step
        return skipped

    def _moves_policy(self, model, grad_norm: float, weight_decay: float) -> bool:
        """Whether the optimizer step about to run changes a weight: it has a gradient (a parameter without one is
        left alone), and the gradient is not all zero, or weight decay or Adam moments of an earlier moving step
        move the weights anyway. (A zero gradient on zero moments without decay moves nothing.)"""
        if not any(p.grad is not None for p in model.parameters()):
            return False
        return grad_norm != 0 or weight_decay != 0 or self.policy_step >= 0

    def state_dict(self) -> dict[str, int]:
        return {
            "num_skipped_steps": self.skipped_nonfinite,
            "num_skipped_no_signal": self.skipped_no_signal,
            "rollout_step": self.rollout_step,
            "policy_step": self.policy_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A checkpoint's (an older one lacks the steps: the rollout's step then counts as unknown)."""
        self.skipped_nonfinite = state.get("num_skipped_steps", 0)
        self.skipped_no_signal = state.get("num_skipped_no_signal", 0)
        self.rollout_step = state.get("rollout_step", -1)
        self.policy_step = state.get("policy_step", -1)


__all__ = [
    "OptimizerSteps",
    "logps_in_pieces",
    "loss_batch",
    "loss_options",
    "nothing_to_learn",
    "old_logps",
    "step_metrics",
]
