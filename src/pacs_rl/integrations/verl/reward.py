"""A 0/1 verifier reward in verl's custom-reward-function form, for PACS runs.

    reward.custom_reward_function.path=pkg://pacs_rl.integrations.verl.reward
    reward.custom_reward_function.name=compute_score

PACS reads the reward as a label, so it must be exactly 1.0 or 0.0 (wrong, missing, unparsable or timed out):
no format bonus. It pays what ``pacs-rl train`` pays by default, the ``sound`` grader (one committed final answer,
a number where the gold is one, never the question given back; docs/EVALUATION.md); the question comes from the
row's ``extra_info.question`` (``python -m pacs_rl.integrations.verl`` writes it). Another grader:
``+reward.custom_reward_function.reward_kwargs.grader=paper`` (the paper's math-verify call).
"""

from __future__ import annotations

from typing import Any

from pacs_rl.rewards import math_reward
from pacs_rl.rewards.graders import TRAINING_GRADER

__all__ = ["compute_score"]


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    grader: str = TRAINING_GRADER,
    **kwargs: Any,
) -> float:
    """verl's reward signature → 1.0 or 0.0. ``ground_truth`` is the reference answer of the row, ``extra_info``'s
    ``question`` its problem text (without it the question check cannot apply)."""
    question = (extra_info or {}).get("question")
    gold = "" if ground_truth is None else str(ground_truth)
    return float(math_reward(solution_str, gold, grader=grader, prompt=question))
