"""Verifiable rewards: math answer equivalence (math-verify), time limits, a process pool, TRL adapter.

Public API::

    verify(completion, answer, strict=False, timeout=3.0, prompt=None) -> Verdict
    math_reward(completion, answer, strict=False, timeout=3.0, prompt=None) -> float
    extract_answer(completion, strict=False, prompt=None) -> str | None
    verify_batch(completions, answers, strict=False, num_workers=None, timeout=3.0, progress=False,
                 prompts=None) -> BatchResult
    RewardPool(num_workers=None, timeout=3.0, ...)            # context manager, .verify_batch(...)
    math_reward_func(completions, answer, **kwargs) -> list[float]   # TRL reward function
    make_math_reward_func(strict=False, timeout=3.0, pool=None, ...) -> MathRewardFunction
"""

from pacs_rl.rewards.math_verifier import REASONS, Verdict, extract_answer, find_boxes
from pacs_rl.rewards.pool import DEFAULT_TIMEOUT, BatchResult, RewardPool, math_reward, verify, verify_batch
from pacs_rl.rewards.trl_reward import (
    MathRewardFunction,
    completion_text,
    make_math_reward_func,
    math_reward_func,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "REASONS",
    "BatchResult",
    "MathRewardFunction",
    "RewardPool",
    "Verdict",
    "completion_text",
    "extract_answer",
    "find_boxes",
    "make_math_reward_func",
    "math_reward",
    "math_reward_func",
    "verify",
    "verify_batch",
]
