"""A 0/1 verifier reward in verl's custom-reward-function form, for PACS runs.

    reward.custom_reward_function.path=pkg://pacs_rl.integrations.verl.reward
    reward.custom_reward_function.name=compute_score
    reward.reward_manager.source=importlib
    reward.reward_manager.name=PACSRewardManager
    reward.reward_manager.module.path=pkg://pacs_rl.integrations.verl.reward_manager

PACS reads the reward as a label, so it must be exactly 1.0 or 0.0 (wrong, missing, unparsable or timed out):
no format bonus. It pays what ``pacs-rl train`` pays by default, the ``sound`` grader (the final answer read as a
reader reads it, a number where the gold is one, never the question given back, never a cut-off response;
docs/EVALUATION.md); the question comes from the
row's ``extra_info.question`` (``python -m pacs_rl.integrations.verl`` writes it). Another grader:
``+reward.custom_reward_function.reward_kwargs.grader=paper`` (the paper's math-verify call).

A response cut at the response-length limit is never paid by the ``sound`` grader. verl hands a reward function
the decoded text only, without its length or its EOS token, so the reward manager says which responses were cut:
``PACSRewardManager`` (:mod:`.reward_manager`, verl's naive manager plus that) puts ``extra_info["truncated"]``,
decided by :func:`response_cut_off`. Without it (verl's own managers) ``compute_score`` cannot tell, and says so
once.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Sequence
from typing import Any

from pacs_rl.rewards import math_reward
from pacs_rl.rewards.cutoff import is_cut_off, refuses_cut_off
from pacs_rl.rewards.graders import TRAINING_GRADER

__all__ = ["TRUNCATED_KEY", "compute_score", "response_cut_off"]

TRUNCATED_KEY = "truncated"  # the extra_info key PACSRewardManager sets: the response was cut at the limit
_warned: set[str] = set()


def response_cut_off(
    response_ids: Sequence[int],
    attention_mask: Sequence[int],
    stop_token_ids: Collection[int],
    max_response_length: int | None = None,
) -> bool:
    """Whether a verl row's response was cut at the response-length limit: its valid tokens (the response's part
    of ``attention_mask``, the last ``len(response_ids)`` entries) reached ``max_response_length`` (default: the
    width of ``response_ids``, which verl pads to the configured length) without ending in an EOS id
    (``pacs_rl.rewards.cutoff.is_cut_off``). Lists or 1-D tensors."""
    ids = [int(t) for t in _as_list(response_ids)]
    mask = _as_list(attention_mask)[-len(ids) :] if ids else []
    valid = int(sum(int(m) for m in mask))
    return is_cut_off(ids[:valid], max_response_length or len(ids), set(stop_token_ids))


def _as_list(values) -> list:
    return values.tolist() if hasattr(values, "tolist") else list(values)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    grader: str = TRAINING_GRADER,
    **kwargs: Any,
) -> float:
    """verl's reward signature → 1.0 or 0.0. ``ground_truth`` is the reference answer of the row, ``extra_info``'s
    ``question`` its problem text (without it the question check cannot apply) and ``truncated`` whether the
    response was cut at the length limit (``PACSRewardManager`` sets it; the ``sound`` grader refuses those)."""
    info = extra_info or {}
    truncated = info.get(TRUNCATED_KEY)
    if truncated is None and refuses_cut_off(grader) and grader not in _warned:
        _warned.add(grader)
        warnings.warn(
            f"the {grader} grader refuses responses cut at the length limit, but verl's reward manager did not say "
            "which were (extra_info['truncated']); set reward.reward_manager.source=importlib, "
            "reward.reward_manager.name=PACSRewardManager, "
            "reward.reward_manager.module.path=pkg://pacs_rl.integrations.verl.reward_manager (docs/VERL.md)",
            stacklevel=2,
        )
    gold = "" if ground_truth is None else str(ground_truth)
    return float(
        math_reward(solution_str, gold, grader=grader, prompt=info.get("question"), truncated=bool(truncated))
    )
