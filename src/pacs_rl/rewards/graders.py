"""Graders by name: a base grader, optionally followed by ``+rule`` for opt-in rules.

Light on purpose (no math-verify, no sympy): command lines and configs check a grader name here before
any verifier loads. What each grader and rule does: :mod:`pacs_rl.rewards.math_verifier`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

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
