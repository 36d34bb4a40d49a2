"""Procedurally generated tasks with exact answers: two-digit arithmetic (the project's default training
task) and reasoning-gym tasks by name.

Train / held-out separation for arithmetic is by construction, not by luck: every problem
``(a, op, b)`` belongs to exactly one split, decided by a stable hash of its text (20% held out,
:data:`HELD_OUT_FRACTION`). ``split="train"`` draws only from the train part and ``split="test"``
only from the held-out part, so the two never overlap whatever their sizes and seeds. Within one set
problems are distinct. For other sources use :func:`split_disjoint`.

Source strings (for :func:`pacs_rl.data.load_problems` and ``--benchmark``):

- ``arithmetic`` or ``arithmetic?n=100&seed=0&ops=+-*&digits=2&split=test`` (defaults shown; a bare
  ``arithmetic`` is the held-out split); ``digits=2,1`` gives the two operands different lengths
  ("What is 47 - 8?");
- ``reasoning_gym:<task>?size=200&seed=1&<option>=<value>...``: any task of ``reasoning_gym``
  (``reasoning_gym.create_dataset(task, size=..., seed=..., **options)``); its ``question`` becomes
  ``problem`` and its ``answer`` the answer. Values are parsed as int, float, true/false, else text.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

from pacs_rl.data.problems import DataError, Problem

HELD_OUT_FRACTION = 0.2
ARITHMETIC_OPS = "+-*"  # what a source string without ops= draws
ARITHMETIC_DIGITS = 2  # what a source string without digits= draws
_OP_FN = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
_ENUMERATE_LIMIT = 200_000  # problem spaces up to this size are enumerated, larger ones sampled
GYM_INSTALL = 'pip install "pacs-rl[gym]"'  # reasoning_gym is an optional extra


def arithmetic_text(a: int, op: str, b: int) -> str:
    return f"What is {a} {op} {b}?"


def is_held_out(a: int, op: str, b: int) -> bool:
    """The fixed split of the problem space: a stable hash of the text (not Python's salted hash)."""
    h = int.from_bytes(hashlib.blake2b(f"{a}{op}{b}".encode(), digest_size=8).digest(), "big")
    return (h % 10_000) < HELD_OUT_FRACTION * 10_000


def parse_digits(digits: Any) -> tuple[int, int]:
    """Operand lengths: ``2`` -> (2, 2); ``(2, 1)``, ``"2,1"`` -> (2, 1) (first operand, second operand)."""
    parts = digits.split(",") if isinstance(digits, str) else digits
    parts = [parts] if isinstance(parts, int) else list(parts)
    try:
        pair = tuple(int(str(x).strip()) for x in parts)
    except ValueError:
        pair = ()
    if len(pair) == 1:
        pair = pair * 2
    if len(pair) != 2 or not all(1 <= d <= 6 for d in pair):
        raise ValueError(
            f"digits must be a length in 1..6 or two of them for the two operands (2 or '2,1'), got {digits!r}"
        )
    return pair  # type: ignore[return-value]


def _check_args(n: int, ops: str, split: str | None) -> None:
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not ops or set(ops) - set(ARITHMETIC_OPS):
        raise ValueError(f"ops must be a non-empty combination of {ARITHMETIC_OPS!r}, got {ops!r}")
    if split not in ("train", "test", None):
        raise ValueError(f"split must be 'train', 'test' or None (whole space), got {split!r}")


def _operand_range(digits: int) -> tuple[int, int]:
    return (0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1


def _space_size(ops: str, digits: tuple[int, int]) -> int:
    (lo_a, hi_a), (lo_b, hi_b) = (_operand_range(d) for d in digits)
    return (hi_a - lo_a + 1) * (hi_b - lo_b + 1) * len(ops)


def _enumerate(ops: str, digits: tuple[int, int]):
    """Every (a, op, b) of the space, in a fixed order (op, then a, then b)."""
    (lo_a, hi_a), (lo_b, hi_b) = (_operand_range(d) for d in digits)
    return ((a, op, b) for op in ops for a in range(lo_a, hi_a + 1) for b in range(lo_b, hi_b + 1))


def arithmetic_problems(
    n: int,
    seed: int = 0,
    ops: str = ARITHMETIC_OPS,
    digits: int | str | tuple[int, int] = ARITHMETIC_DIGITS,
    split: str | None = "train",
) -> list[Problem]:
    """``n`` distinct problems "What is a op b?" with ``digits``-digit operands, deterministic by seed.

    ``digits`` is one length for both operands or a pair (first, second): ``(2, 1)`` asks "47 - 8".
    ``split="train"`` (default) and ``split="test"`` draw from disjoint parts of the problem space;
    ``split=None`` from all of it. The answer is the exact integer as a string (may be negative).
    """
    _check_args(n, ops, split)
    da, db = parse_digits(digits)
    ops = "".join(dict.fromkeys(ops))  # dedupe, keep order
    (lo_a, hi_a), (lo_b, hi_b) = _operand_range(da), _operand_range(db)
    space = _space_size(ops, (da, db))
    tag_digits = str(da) if da == db else f"{da},{db}"  # equal lengths keep their earlier seeds
    rng = random.Random(f"arithmetic/{seed}/{split}/{ops}/{tag_digits}")

    def in_split(a: int, op: str, b: int) -> bool:
        return split is None or is_held_out(a, op, b) == (split == "test")

    if space <= _ENUMERATE_LIMIT:
        pool = [t for t in _enumerate(ops, (da, db)) if in_split(*t)]
        if n > len(pool):
            raise ValueError(
                f"asked for {n} distinct problems with {tag_digits}-digit operands and ops {ops!r} in split "
                f"{split!r}, but only {len(pool)} exist; lower n or raise digits"
            )
        triples = rng.sample(pool, n)
    else:
        seen: set[tuple[int, str, int]] = set()
        triples = []
        while len(triples) < n:
            t = (rng.randint(lo_a, hi_a), rng.choice(ops), rng.randint(lo_b, hi_b))
            if t not in seen and in_split(*t):
                seen.add(t)
                triples.append(t)
    tag = split or "all"
    return [
        Problem(
            id=f"arith-{tag}-{seed}-{i}",
            problem=arithmetic_text(a, op, b),
            answer=str(_OP_FN[op](a, b)),
            extras={"a": a, "op": op, "b": b, "split": tag},
        )
        for i, (a, op, b) in enumerate(triples)
    ]


def arithmetic_pool_size(
    ops: str = ARITHMETIC_OPS,
    digits: int | str | tuple[int, int] = ARITHMETIC_DIGITS,
    split: str | None = "train",
) -> int:
    """How many distinct problems :func:`arithmetic_problems` can draw (exact when the space is
    enumerable, else the expected count, far above any training size)."""
    _check_args(0, ops, split)
    ops, digits = "".join(dict.fromkeys(ops)), parse_digits(digits)
    space = _space_size(ops, digits)
    if split is None:
        return space
    if space > _ENUMERATE_LIMIT:
        share = HELD_OUT_FRACTION if split == "test" else 1 - HELD_OUT_FRACTION
        return int(space * share)
    return sum(is_held_out(*t) == (split == "test") for t in _enumerate(ops, digits))


def arithmetic_splits(
    n_train: int,
    n_test: int,
    seed: int = 0,
    ops: str = ARITHMETIC_OPS,
    digits: int | str | tuple[int, int] = ARITHMETIC_DIGITS,
) -> tuple[list[Problem], list[Problem]]:
    """A training set and a held-out set that share no problem (different seeds, disjoint spaces)."""
    train = arithmetic_problems(n_train, seed=seed, ops=ops, digits=digits, split="train")
    test = arithmetic_problems(n_test, seed=seed + 1, ops=ops, digits=digits, split="test")
    return train, test


def _normalize(text: str) -> str:
    return " ".join(text.lower().split())


def split_disjoint(train: list[Problem], held_out: list[Problem]) -> tuple[list[Problem], int]:
    """Drop from ``train`` every problem whose text (whitespace-collapsed, lower-cased) appears in
    ``held_out`` or earlier in ``train``. Returns the kept training problems and how many were dropped."""
    seen = {_normalize(p.problem) for p in held_out}
    kept = []
    for p in train:
        key = _normalize(p.problem)
        if key not in seen:
            seen.add(key)
            kept.append(p)
    return kept, len(train) - len(kept)


# --------------------------------------------------------------------------------------------------
# Source strings


def is_procedural(source: str) -> bool:
    return source == "arithmetic" or source.startswith(("arithmetic?", "reasoning_gym:", "rg:"))


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_query(query: str) -> dict[str, Any]:
    """``"n=100&ops=+-*"`` -> ``{"n": 100, "ops": "+-*"}``. Unlike URL parsing, '+' stays '+'."""
    out: dict[str, Any] = {}
    for part in filter(None, query.split("&")):
        if "=" not in part:
            raise DataError(f"bad option {part!r}: expected key=value (e.g. seed=1)")
        key, value = part.split("=", 1)
        out[key.strip()] = _parse_value(value.strip())
    return out


def arithmetic_task(source: str, ops: Any, digits: Any) -> dict[str, Any]:
    """The arithmetic task an ``arithmetic?...`` source draws: its own ops= and digits= where it names them, else
    ``ops`` and ``digits`` (a training run's arithmetic_ops and arithmetic_digits). The run's training set and the
    held-out protocol it records read the task here, so they cannot disagree."""
    opts = parse_query(source.partition("?")[2])
    return {"ops": str(opts.get("ops", ops)), "digits": opts.get("digits", digits)}


def _import_reasoning_gym(source: str):
    """The ``reasoning_gym`` module (an optional extra), or a DataError naming ``source`` and the install."""
    try:
        import reasoning_gym
    except ImportError as e:
        raise DataError(
            f"{source!r} needs reasoning_gym, which is not installed ({e}). Install it with "
            f"{GYM_INSTALL}, or use another --benchmark."
        ) from e
    return reasoning_gym


def _gym_source(task: str, size: int, seed: int, **options: Any) -> str:
    """The source string that names these problems: ``reasoning_gym:<task>?size=..&seed=..&<options>``."""
    query = "&".join(f"{k}={v}" for k, v in {"size": size, "seed": seed, **options}.items())
    return f"reasoning_gym:{task}?{query}"


def reasoning_gym_problems(task: str, size: int = 100, seed: int = 0, **options: Any) -> list[Problem]:
    """Problems of a reasoning-gym task; extras keep its metadata (for its own scorer).

    Raises DataError when ``reasoning_gym`` is not installed, the task is unknown or an item has no answer.
    """
    source = _gym_source(task, size, seed, **options)
    reasoning_gym = _import_reasoning_gym(source)
    try:
        ds = reasoning_gym.create_dataset(task, size=size, seed=seed, **options)
    except Exception as e:
        known = sorted(reasoning_gym.factory.DATASETS)
        hint = "" if task in known else f" Known tasks include: {', '.join(known[:30])}, ..."
        raise DataError(f"reasoning_gym task {task!r} with {options or 'no options'}: {e}.{hint}") from e
    out = []
    for i, item in enumerate(ds):
        answer = item.get("answer")
        if not isinstance(answer, str) or not answer.strip():
            raise DataError(f"{source} item {i} has no usable answer ({answer!r})")
        out.append(
            Problem(
                id=f"rg-{task}-{seed}-{i}",
                problem=item["question"],
                answer=answer.strip(),
                extras={"metadata": item.get("metadata", {}), "task": task},
            )
        )
    return out


def load_procedural(source: str, split: str | None = None) -> list[Problem]:
    """Problems from an ``arithmetic?...`` or ``reasoning_gym:<task>?...`` source string."""
    if source == "arithmetic" or source.startswith("arithmetic?"):
        opts = parse_query(source.partition("?")[2])
        n = int(opts.pop("n", 100))
        seed = int(opts.pop("seed", 0))
        ops = str(opts.pop("ops", ARITHMETIC_OPS))
        digits = opts.pop("digits", ARITHMETIC_DIGITS)
        which = opts.pop("split", split or "test")
        if opts:
            raise DataError(
                f"{source!r}: unknown option(s) {', '.join(opts)}; known: n, seed, ops, digits, split"
            )
        return arithmetic_problems(
            n, seed=seed, ops=ops, digits=digits, split=None if which == "all" else which
        )
    m = re.fullmatch(r"(?:reasoning_gym|rg):([A-Za-z0-9_\-]+)(?:\?(.*))?", source)
    if not m:
        raise DataError(f"bad reasoning_gym source {source!r}; expected reasoning_gym:<task>?size=100&seed=0")
    opts = parse_query(m.group(2) or "")
    size = int(opts.pop("size", 100))
    seed = int(opts.pop("seed", 0))
    return reasoning_gym_problems(m.group(1), size=size, seed=seed, **opts)
