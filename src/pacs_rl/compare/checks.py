"""The domain checks of compare's declared settings (``setting(..., check=...)``): each takes the setting's name and
value and returns the one-line problem, or None. None passes a check: whether a setting may be None is its type's."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Check = Callable[[str, Any], "str | None"]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def at_least(least: int) -> Check:
    """A whole number >= ``least``."""

    def check(name: str, value: Any) -> str | None:
        ok = value is None or (_number(value) and float(value).is_integer() and value >= least)
        return None if ok else f"{name}={value!r}: give a whole number >= {least}"

    return check


def within(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Check:
    """A number in [low, high], either end open where asked."""
    left, right = "(" if low_open else "[", ")" if high_open else "]"

    def check(name: str, value: Any) -> str | None:
        if value is None:
            return None
        ok = _number(value) and (value > low if low_open else value >= low)
        ok = ok and (value < high if high_open else value <= high)
        return None if ok else f"{name}={value!r}: give a number in {left}{low:g}, {high:g}{right}"

    return check


def one_of(choices: Iterable[str]) -> Check:
    """One of ``choices``."""
    allowed = list(choices)

    def check(name: str, value: Any) -> str | None:
        return None if value is None or value in allowed else f"{name}={value!r}: use one of {allowed}"

    return check
