"""A setting declared once, as a dataclass field (`setting`: its default, help, check and the loss's keyword it
fills), the check builders its check is written with, and the settings generated from a loss option's
declaration (`option_setting`, `option_class`).

A check is ``check(name, value)`` -> a problem's text naming the setting and what to do, a list of them, or None;
it needs neither torch nor TRL, so every command runs it before they load (`declared_problems`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field, make_dataclass
from typing import Any

from pacs_rl.algorithms.options import LossOption


# ---------------------------------------------------------------------------------------------------- declaring
class Declared:
    """What a setting's declaration holds beyond a dataclass field's help and choices (kept out of the field's
    metadata, which argparse-based parsers such as transformers' HfArgumentParser pass to argparse whole): its
    check, ``check(name, value)`` -> a problem's text, a list of them, or None; and the loss's keyword the trainer
    fills from the setting."""

    __slots__ = ("check", "loss_option")

    def __init__(self, check: Callable[[str, Any], Any] | None = None, loss_option: str | None = None):
        self.check, self.loss_option = check, loss_option


_DECLARED: dict[Any, Declared] = {}  # dataclass field -> its declaration (a field is hashed by identity)


def setting(
    default: Any,
    help: str,
    *,
    check: Callable[[str, Any], Any] | None = None,
    choices: Iterable[str] | None = None,
    loss_option: str | None = None,
) -> Any:
    """The declaration of one setting, as a dataclass field: its default and help, and where it has them the check
    that needs no torch (``check(name, value)``: a problem's text, a list of them, or None), the choices shown in
    the help, and the loss option the trainer fills from it (``loss_option``: the loss's keyword)."""
    metadata = {"help": help, **({"choices": list(choices)} if choices else {})}
    declared = field(default=default, metadata=metadata)
    _DECLARED[declared] = Declared(check, loss_option)
    return declared


def declared(f: Any) -> Declared:
    """The declaration of dataclass field ``f`` beyond its help (an empty one for a field not made by `setting`)."""
    return _DECLARED.get(f, Declared())


def is_declared(f: Any) -> bool:
    """Whether dataclass field ``f`` was made by `setting`."""
    return f in _DECLARED


# ---------------------------------------------------------------------------------------------------- checks
# A check is ``check(name, value)`` -> a problem's text naming the setting and what to do, a list of them, or None.
Check = Callable[[str, Any], "str | list[str] | None"]


def whole(value: Any) -> bool:
    """An int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def number(value: Any) -> bool:
    """An int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def rule(ok: Callable[[Any], bool], advice: str, null: bool = False) -> Check:
    """``name=value`` + ``advice`` unless ``ok(value)`` (or the value is None, with ``null``)."""

    def check(name: str, value: Any) -> str | None:
        return None if (null and value is None) or ok(value) else f"{name}={value!r}{advice}"

    return check


def at_least(least: int, note: str = "", null: bool = False) -> Check:
    """A whole number >= ``least``, its type checked too (``null``: or None)."""
    return rule(lambda v: whole(v) and v >= least, f": give a whole number >= {least}{note}", null)


def one_of(choices: Iterable[Any], verb: str = "use", null: bool = False) -> Check:
    """One of ``choices`` (``null``: or None)."""
    choices = tuple(choices)
    return rule(lambda v: v in choices, f"; {verb} one of {list(choices)}.", null)


def bounded(ok: Callable[[float], bool], advice: str) -> Check:
    """A bound on a number (a value of another type, or None, is the type check's to refuse)."""
    return rule(lambda v: not number(v) or ok(v), advice)


def interval(
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
    whole_number: bool = False,
    note: str = "",
) -> Check:
    """A finite number (``whole_number``: an int) between ``low`` and ``high`` (each bound included unless open; None:
    no bound). None, and a value of another type, are the type check's to refuse."""

    def text(bound: float) -> str:
        return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"

    if low is not None and high is not None:
        span = f"in {'(' if open_low else '['}{text(low)}, {text(high)}{')' if open_high else ']'}"
    elif low is not None:
        span = f"{'>' if open_low else '>='} {text(low)}"
    else:
        span = f"{'<' if open_high else '<='} {text(high)}"
    what = "a whole number" if whole_number else "a number"

    def ok(v: Any) -> bool:
        if (whole_number and not whole(v)) or not math.isfinite(v):
            return False
        above = low is None or (v > low if open_low else v >= low)
        return above and (high is None or (v < high if open_high else v <= high))

    return bounded(ok, f": give {what} {span}{note}")


def typed(kind: type, check: Check | None = None) -> Check:
    """A value of type ``kind`` (bool, int, float or str; a float takes an int too, and a number is never a bool),
    then ``check``: for a setting whose value arrives typed already (from Python, from verl's config) rather than
    as text `pacs_rl.settings.reading.coerce` types."""
    plain = {float: number, int: whole}.get(kind, lambda v: isinstance(v, kind))

    def check_typed(name: str, value: Any) -> str | list[str] | None:
        if not plain(value):
            return f"{name}={value!r}: expected {kind.__name__}"
        return check(name, value) if check is not None else None

    return check_typed


def problems_found(values: Any, checks: Iterable[tuple[str, Check | None]], prefix: str = "") -> list[str]:
    """The problems ``checks`` (setting name, its check or None) find in ``values`` (an object, or a mapping: a
    setting it lacks is not checked), in their order; each names the setting as ``prefix`` + its name (``prefix``:
    where it sits in a larger config, e.g. verl's ``actor_rollout_ref.actor.policy_loss.``)."""
    get = values.get if isinstance(values, Mapping) else (lambda n, d: getattr(values, n, d))
    missing = object()
    out: list[str] = []
    for name, check in checks:
        value = get(name, missing)
        if check is None or value is missing:
            continue
        found = check(prefix + name, value)
        out += [found] if isinstance(found, str) else list(found or [])
    return out


def declared_problems(values: Any, fields: Iterable[Any], prefix: str = "") -> list[str]:
    """What the declared checks of ``fields`` (dataclass fields made by `setting`) find in ``values``
    (`problems_found`)."""
    return problems_found(values, ((f.name, declared(f).check) for f in fields), prefix)


# ---------------------------------------------------------------------------------------------------- loss options
def option_check(option: LossOption) -> Check:
    """The check of a loss option declared as plain data (`pacs_rl.algorithms.options.LossOption`): its type, then
    its choices, or its bounds (a finite number; an int option a whole one)."""
    if option.choices:
        return typed(option.type, one_of(option.choices, "choose"))
    if option.type in (int, float):
        bounds = {"open_low": option.open_low, "open_high": option.open_high, "note": option.note}
        return typed(
            option.type, interval(option.low, option.high, whole_number=option.type is int, **bounds)
        )
    return typed(option.type)


def option_setting(option: LossOption) -> Any:
    """The `setting` of a loss option declared as plain data: its default, help, check (`option_check`), choices
    and the loss's keyword (``loss_option``) the trainer fills from it."""
    choices = list(option.choices) or None
    return setting(
        option.default, option.help, check=option_check(option), choices=choices, loss_option=option.keyword
    )


def option_class(
    name: str, options: Iterable[LossOption], module: str, doc: str, **dataclass_args: Any
) -> type:
    """A dataclass ``module.name`` of one field per loss option (`option_setting`: its type, default, help and
    check), the declarations of the commands that take the options generated from the options' own."""
    fields = [(o.name, o.type, option_setting(o)) for o in options]
    namespace = {"__module__": module, "__doc__": doc}
    return make_dataclass(name, fields, namespace=namespace, **dataclass_args)


__all__ = [
    "Check",
    "Declared",
    "at_least",
    "bounded",
    "declared",
    "declared_problems",
    "interval",
    "is_declared",
    "number",
    "one_of",
    "option_check",
    "option_class",
    "option_setting",
    "problems_found",
    "rule",
    "setting",
    "typed",
    "whole",
]
