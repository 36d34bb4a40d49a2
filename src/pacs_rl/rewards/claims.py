"""The current answer and the values of the final lines, for the reading of the final answer
(:mod:`pacs_rl.rewards.reader`).

It decides what a new value does to the answer read so far: it becomes the current answer, unless it conflicts with
another value of the final lines (the answer's statement and the last statement before it that gave a value, since
the last revision: two values that surely differ, stated of one subject, or the earlier committed and the later no
firmer), which makes it several values; a revision withdraws the values before it; an equation that uses the
answer's number to recover another number of its statement is a check of the answer, not a new one.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field, replace
from fractions import Fraction

from pacs_rl.rewards.values import signed_numbers, value_key


@dataclass(frozen=True)
class Reading:
    """The final answer read: its text as written (a box's content, a phrase's value, the plain statement), where
    it starts, how it was given (``box``, ``phrase``, ``label``, ``conclusion``, ``correction``, ``line``) and its
    status: ``answer``; ``hedged``; ``several`` (a column of different values, a hedge offering another, or
    different values committed in the answer's paragraph); ``false`` (a statement whose sides differ). A list of
    values joined by "and", "or" or commas in one statement ("The roots are 2 and 3") is ``several`` with its
    ``values``: one answer where the gold is a set of as many values, several values where it is one."""

    text: str
    start: int
    kind: str
    status: str = "answer"
    values: tuple[str, ...] = ()  # a list of values of one statement ("x = 2 or x = 3"): a set's members


@dataclass(frozen=True)
class Claim:
    """A value the completion gave: its statement, how firmly (0 a plain statement, 1 a conclusion or a named
    quantity, 2 an answer's name, a label or a correction, 3 a box), what it was stated of ("47 + 8" in "47 + 8 =
    55", "sum of 47 and 8"; "" for an answer's name or a box) and its value."""

    statement: int
    rank: int
    subject: str
    value: str
    key: Fraction | None  # the number it comes to (value_key)
    numbers: frozenset[str]  # the numbers it writes


@dataclass
class State:
    """What the walk (:func:`pacs_rl.rewards.reader.read_final_answer`) keeps from one statement to the next."""

    current: Reading | None = None
    committed: int = 0  # how the current answer was given: 0 a plain line, 1 a conclusion, 2 a commitment
    statement: int = -1  # index of the statement that gave the current answer
    tries: dict[str, set[str]] | None = None  # the paragraph's plain values: first side -> last sides
    tries_paragraph: int = -1
    pending_label: int = -1  # a label line waiting for its value: its start
    correcting: bool = False  # a correction marker waiting for its value
    negated_phrase: bool = False  # the last statement was a negated answer phrase ("not 54. It is 55.")
    verifying_paragraph: int = -1  # a "Check:" label's paragraph: plain statements in it are checks
    aside_depth: int = 0  # brackets of an aside still open
    notes: bool = False  # past a "Notes" / "Edit by ...:" heading: the rest is an aside
    note_line: int = -1  # where the line of a note ("Note: ...") ends: its other sentences are the note's too
    text: str = ""  # the completion as read
    statement_start: int = 0  # where the statement being read starts
    numbers: frozenset[str] = frozenset()  # the numbers written in the statement that gave the current answer
    claims: deque[Claim] = field(default_factory=lambda: deque(maxlen=8))  # the last values given since the
    # last revision (commit): the final lines hold no more
    explaining: bool = False  # past "Here is why:" after an answer: the working, which gives no new answer
    check_mismatch: bool = False  # the check of this paragraph found the answer wrong


def _number_of(reading: Reading | None) -> str | None:
    """The number a reading states (the last side of an equation, when it is one number), for the check rule."""
    if reading is None:
        return None
    last = signed_numbers(reading.text.rsplit("=", 1)[-1])
    return last[-1] if len(last) == 1 else None


def uses_answer(value: str, state: State) -> bool:
    """An equation whose first side uses the current answer's number ("55 - 8 = 47" after 55)."""
    number = _number_of(state.current)
    return number is not None and "=" in value and number in signed_numbers(value.split("=")[0])


def is_verification(value: str, state: State) -> bool:
    """An equation that uses the current answer's number to recover another number of the statement that gave
    it ("55 - 8 = 47" after "47 + 8 = 55"): a check of the answer, not a new one. The same left side again
    ("47 + 8 = 56") is another try, not a check."""
    number = _number_of(state.current)
    if number is None or "=" not in value:
        return False
    *sides, last = value.split("=")
    if sides[0].replace(" ", "") == state.current.text.split("=")[0].replace(" ", ""):
        return False
    used = any(number in signed_numbers(side) for side in sides)
    recovered = signed_numbers(last)
    return used and len(recovered) == 1 and recovered[0] != number and recovered[0] in state.numbers


def conflict(earlier: Claim, later: Claim) -> bool:
    """Two values of the final lines that cannot both be the answer, whichever comes last: surely different,
    and either stated of one subject ("43 - 4 = 38. So, 43 - 4 = 39."; "Therefore, 25 + 6 equals 31. ...
    25 + 6, which is 11"), or the earlier one committed and the later given no more firmly ("The answer is 55.
    The answer is 54."; "\\boxed{54}. So the answer is 55."). A box after a step or a phrase settles it: the box
    is where the instruction asks for the final answer ("the total is 448 ... the answer is \\boxed{728}")."""
    if earlier.key is None or later.key is None or earlier.key == later.key:
        return False
    return (earlier.subject != "" and earlier.subject == later.subject) or earlier.rank >= max(later.rank, 2)


def commit(
    state: State, i: int, reading: Reading, committed: int = 2, subject: str = "", rank: int | None = None
) -> None:
    """``reading`` becomes the current answer (``committed``: 0 a plain statement, 1 a conclusion, 2 a
    commitment; ``rank``, how firmly, as :class:`Claim` counts it, ``committed`` unless given). A value that
    conflicts (:func:`conflict`) with another of the final lines, the values given in its own statement and in the
    last statement before it that gave one, since the last revision, makes it several values."""
    rank = committed if rank is None else rank
    subject = re.sub(r"[\s$]", "", subject).lower()
    key = value_key(reading.text)
    numbers = frozenset(signed_numbers(reading.text)) if key is not None else frozenset()
    claim = Claim(i, rank, subject, reading.text, key, numbers)
    previous = max((c.statement for c in state.claims if c.statement < i), default=i)
    final_lines = [c for c in state.claims if c.statement in (i, previous)]
    conflicting = [c for c in final_lines if conflict(c, claim)] if reading.status == "answer" else []
    if conflicting:  # unless worked from them: "Only \\boxed{361} works. ... 8 + 9 + 361 = \\boxed{378}"
        before = state.text[max(state.statement_start, reading.start - 240) : reading.start]
        used = set(signed_numbers(before))
        if any(not c.numbers & used for c in conflicting):
            reading = replace(reading, status="several")
    state.claims.append(claim)
    state.current, state.committed, state.statement = reading, committed, i
    state.pending_label, state.correcting, state.negated_phrase = -1, False, False


def revise(state: State) -> None:
    """A revision ("Wait", "Actually", "after checking"): the values given before it are withdrawn."""
    state.claims.clear()
