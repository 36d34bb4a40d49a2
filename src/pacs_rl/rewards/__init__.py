"""Verifiable rewards: math answer equivalence (math-verify), graders by name, time limits, a process pool,
the TRL adapter and reward functions named on the command line.

Public API::

    verify(completion, answer, grader="paper", timeout=3.0, prompt=None) -> Verdict
    math_reward(completion, answer, grader="paper", timeout=3.0, prompt=None) -> float
    extract_answer(completion, grader="paper", prompt=None) -> str | None
    verify_batch(completions, answers, grader="paper", num_workers=None, timeout=3.0, progress=False,
                 prompts=None) -> BatchResult
    RewardPool(num_workers=None, timeout=3.0, ...)            # context manager, .verify_batch(...)
    math_reward_func(completions, answer, **kwargs) -> list[float]   # TRL reward function (paper grader)
    make_math_reward_func(grader="paper", timeout=3.0, pool=None, ...) -> MathRewardFunction
    load_reward_funcs("math,mypkg.rewards:my_reward", grader="paper") -> list of reward functions

A grader is ``paper`` (math-verify exactly as the PACS authors call it, the default) or ``strict`` (a
``\\boxed{}`` answer), optionally with ``+rule``s (``restatement``, ``multiple_boxed``, ``echo``,
``sci_notation``): see :mod:`pacs_rl.rewards.math_verifier`.
"""

from pacs_rl.rewards.math_verifier import (
    BASE_GRADERS,
    DEFAULT_GRADER,
    REASONS,
    RULES,
    Grader,
    Verdict,
    extract_answer,
    find_boxes,
    grader_name,
    parse_grader,
)
from pacs_rl.rewards.pool import DEFAULT_TIMEOUT, BatchResult, RewardPool, math_reward, verify, verify_batch
from pacs_rl.rewards.trl_reward import (
    MathRewardFunction,
    completion_text,
    load_reward_funcs,
    make_math_reward_func,
    math_reward_func,
)

__all__ = [
    "BASE_GRADERS",
    "DEFAULT_GRADER",
    "DEFAULT_TIMEOUT",
    "REASONS",
    "RULES",
    "BatchResult",
    "Grader",
    "MathRewardFunction",
    "RewardPool",
    "Verdict",
    "completion_text",
    "extract_answer",
    "find_boxes",
    "grader_name",
    "load_reward_funcs",
    "make_math_reward_func",
    "math_reward",
    "math_reward_func",
    "parse_grader",
    "verify",
    "verify_batch",
]
