"""What every data source produces: :class:`Problem` rows in a :class:`ProblemSet`, or a :class:`DataError`.

Its own module so that the loaders (``loaders.py``) and the procedural tasks (``procedural.py``) share
these types without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DataError", "Problem", "ProblemSet"]


class DataError(ValueError):
    """A data source or a row in it cannot be used. The message says which and what to do."""


@dataclass
class Problem:
    """One prompt with its reference answer. ``extras`` keeps the other fields of the row.

    ``messages``: the whole prompt as chat messages, when the data gives one (a prompt column); then the
    prompt is used as is (no instruction appended) and ``problem`` is the text of its last user turn."""

    id: str
    problem: str
    answer: str
    extras: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, str]] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "problem": self.problem, "answer": self.answer, **self.extras}
        return out if self.messages is None else {**out, "messages": self.messages}


class ProblemSet(list):
    """A ``list[Problem]`` that also says where it came from and how many rows were skipped."""

    def __init__(self, items=(), source: str = "", skipped: int = 0, skip_messages: list[str] | None = None):
        super().__init__(items)
        self.source = source
        self.skipped = skipped
        self.skip_messages = list(skip_messages or [])
