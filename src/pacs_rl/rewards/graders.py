"""Graders by name: a base grader, optionally followed by ``+rule`` for opt-in rules.

Light on purpose (no math-verify, no sympy): command lines and configs check a grader name here before
any verifier loads. What each grader and rule does: :mod:`pacs_rl.rewards.math_verifier`.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_GRADER = "paper"
TRAINING_GRADER = "sound"  # what pacs-rl train pays by default, on every dataset
BASE_GRADERS = {
    "sound": "the final answer read as a reader reads it (the last commitment, correction or conclusion, else a "
    "plain last line; refused when hedged, false or several values), a number where the gold is one, never the "
    "question's own expression, a final form on MATH-style golds; then equality (the training default)",
    "paper": "math-verify exactly as the PACS authors call it (a box or 'final answer is' first, else the "
    "last expression; the rightmost match wins)",
    "strict": "only the last \\boxed{} answer counts, read as the paper reads a box",
}
RULES = {
    "restatement": "refuse an operation written in the question ('33 - 51' for 'What is 33 - 51?') as the "
    "answer to a numeric question (needs the question)",
    "multiple_boxed": "refuse a completion whose boxes hold different answers",
    "echo": "ignore text that repeats the prompt verbatim (needs the prompt)",
}


@dataclass(frozen=True)
class Grader:
    """A base grader and its opt-in rules; ``name`` is the canonical ``base+rule+...`` form."""

    base: str
    rules: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return "+".join((self.base, *self.rules))


@functools.lru_cache(maxsize=64)
def parse_grader(name: str) -> Grader:
    """``"paper+restatement"`` -> ``Grader("paper", ("restatement",))``; rules in canonical order.

    Raises ValueError naming the unknown part and the choices."""
    parts = [p.strip() for p in str(name).split("+")]
    base, rules = parts[0], parts[1:]
    if base not in BASE_GRADERS:
        hint = f" (a rule comes after a base grader: paper+{base})" if base in RULES else ""
        raise ValueError(
            f"grader {name!r}: unknown base grader {base!r}{hint}. A grader is one of {list(BASE_GRADERS)}, "
            f"optionally followed by +rule for rules in {list(RULES)}, e.g. paper+restatement."
        )
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        raise ValueError(
            f"grader {name!r}: unknown rule(s) {unknown}; rules are {list(RULES)} (e.g. {base}+restatement)."
        )
    return Grader(base, tuple(r for r in RULES if r in rules))


def grader_name(name: str) -> str:
    """The canonical name of a grader (``"paper+echo+restatement"`` -> ``"paper+restatement+echo"``)."""
    return parse_grader(name).name


# ----------------------------------------------------------------------------------- reward functions by name
MATH_REWARD = "math"


def split_reward_specs(spec: str | Sequence[str]) -> list[str]:
    """``"math, mypkg.rewards:my_reward"`` (or a list) -> ``["math", "mypkg.rewards:my_reward"]``."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    return [s.strip() for s in items if str(s).strip()]


def reward_spec_problem(spec: str) -> str | None:
    """Why ``spec`` cannot name a reward function (None when it can): ``math``, ``package.module:function``
    or ``path/to/file.py:function``."""
    if spec == MATH_REWARD:
        return None
    module, sep, func = spec.rpartition(":")
    if not sep or not module or not func.isidentifier():
        return (
            f"{spec!r} is neither 'math' nor 'module:function' (e.g. mypkg.rewards:my_reward or "
            "path/to/rewards.py:my_reward)"
        )
    return None


# The keywords a reward function is called with in `pacs-rl train`: TRL's call (prompts, completions, completion_ids,
# trainer_state, log_extra, log_metric), every column of the trainer's dataset (training/data.py: answer, problem,
# problem_id) and PACSTrainer's ``truncated`` (which completions were cut off at the token limit).
REWARD_KEYWORDS = (
    "prompts", "completions", "completion_ids", "answer", "problem", "problem_id", "truncated", "trainer_state",
    "log_extra", "log_metric",
)  # fmt: skip


def load_reward_function(spec: str) -> Callable:
    """Import the reward function ``package.module:function`` or ``path/to/file.py:function`` (a file already
    imported is not run again).

    Raises ValueError naming the spec and what is wrong: the module or file (missing, or failing as it imports),
    the attribute (missing, not callable), or a signature that cannot take the keywords the trainer passes."""
    problem = reward_spec_problem(spec)
    if problem:
        raise ValueError(f"reward function {problem}")
    module_name, _, func_name = spec.rpartition(":")
    path = Path(module_name).expanduser()
    if module_name.endswith(".py") and not path.is_file():
        raise ValueError(f"reward function {spec!r}: file {path} does not exist")
    try:
        module = _reward_module(module_name)
    except Exception as e:  # ImportError, or whatever the module raises as it runs
        raise ValueError(
            f"reward function {spec!r}: cannot import {module_name!r} ({type(e).__name__}: {e}). Install the "
            "package, or put its folder on PYTHONPATH, or give a file: path/to/rewards.py:function."
        ) from None
    func = getattr(module, func_name, None)
    if func is None:
        raise ValueError(f"reward function {spec!r}: {module_name!r} has no attribute {func_name!r}")
    if not callable(func):
        raise ValueError(f"reward function {spec!r}: {func_name!r} is a {type(func).__name__}, not callable")
    problem = reward_call_problem(func)
    if problem:
        raise ValueError(f"reward function {spec!r}: {problem}")
    return func


def _reward_module(module_name: str):
    """The module of a reward function's spec: a .py file (loaded once under a name of its own) or a dotted name."""
    if not module_name.endswith(".py"):
        return importlib.import_module(module_name)
    path = Path(module_name).expanduser()
    name = f"_pacs_rl_reward_{path.stem}"
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == path.resolve():
        return loaded
    loader_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module  # what the file defines (dataclasses, pickling) looks its module up
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def reward_call_problem(func: Callable) -> str | None:
    """Why ``func`` cannot be called as the trainer calls a reward function, with every keyword of
    REWARD_KEYWORDS (None when it can, or when its signature cannot be read)."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # a builtin or an extension: the call itself will tell
        return None
    try:
        signature.bind(**dict.fromkeys(REWARD_KEYWORDS))
    except TypeError as e:
        name = getattr(func, "__name__", type(func).__name__)
        return (
            f"{name}{signature} cannot be called as the trainer calls a reward function, with the keywords "
            f"{', '.join(REWARD_KEYWORDS)} ({e}): take the ones it uses and **kwargs, "
            f"e.g. def {name}(completions, answer, **kwargs)"
        )
    return None
