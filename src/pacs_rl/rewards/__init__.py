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
``\\boxed{}`` answer), optionally with ``+rule``s (``restatement``, ``multiple_boxed``, ``echo``): see
:mod:`pacs_rl.rewards.math_verifier`.
"""

from pacs_rl.lazy import lazy_face

# Imported on first use, so that `pacs_rl.rewards.graders` (grader names) stays light: math-verify and sympy
# load only when something is graded.
_EXPORTS = {
    "BASE_GRADERS": "graders",
    "DEFAULT_GRADER": "graders",
    "RULES": "graders",
    "Grader": "graders",
    "grader_name": "graders",
    "parse_grader": "graders",
    "REASONS": "math_verifier",
    "Verdict": "math_verifier",
    "extract_answer": "math_verifier",
    "find_boxes": "math_verifier",
    "DEFAULT_TIMEOUT": "pool",
    "BatchResult": "pool",
    "RewardPool": "pool",
    "math_reward": "pool",
    "verify": "pool",
    "verify_batch": "pool",
    "MathRewardFunction": "trl_reward",
    "completion_text": "trl_reward",
    "load_reward_funcs": "trl_reward",
    "make_math_reward_func": "trl_reward",
    "math_reward_func": "trl_reward",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
