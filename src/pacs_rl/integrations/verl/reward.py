"""A 0/1 verifier reward in verl's custom-reward-function form, for PACS runs.

    reward.custom_reward_function.path=pkg://pacs_rl.integrations.verl.reward
    reward.custom_reward_function.name=compute_score

PACS reads the reward as a label, so it must be exactly 1.0 (the final ``\\boxed{}`` answer equals the
reference, by math-verify) or 0.0 (wrong, missing, unparsable or timed out): no format bonus.
"""

from __future__ import annotations

from typing import Any

from pacs_rl.rewards import math_reward

__all__ = ["compute_score"]


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **kwargs: Any
) -> float:
    """verl's reward signature → 1.0 or 0.0. ``ground_truth`` is the reference answer of the row."""
    return float(math_reward(solution_str, "" if ground_truth is None else str(ground_truth)))
