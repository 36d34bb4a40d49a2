"""A completion cut into statements, for the reading of the final answer (:mod:`pacs_rl.rewards.reader`).

It decides what is read and where a statement ends: HTML comments, LaTeX comment lines, code fences and the
instruction's empty box are not read (blanked, so positions stay); a markdown table's row is read as "cell: cell",
or as "Answer: <cell>" under a column headed by the answer's name; a statement ends at every newline and at ``. ! ?
;`` followed by a space outside math and boxes, never at a list number's dot or an abbreviation's; and the markers
that open a statement ("1.", "Step 3:", "[1]") are not part of its value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pacs_rl.rewards.answers import box_spans
from pacs_rl.rewards.commitment import LABEL_ONLY

# markers whose digits are not a value: list items, steps, footnotes ("1.", "2)", "Step 3:", "[1]", "(a)")
_MARKERS = re.compile(
    r"(?:[\s>|:&]+|\\(?:begin|end)\{[^{}]*\}|[-*+•](?=\s)|#{1,6}(?=\s)|\(?\d{1,3}[.)](?=\s)|\(?[A-Za-z][.)](?=\s)|\[\d{1,3}\]"
    r"|(?:step|problem|part|case|question|example)\s*\d{1,3}\s*[:.)-]?(?=\s|$))*",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Statement:
    """A sentence or line of the completion: ``text`` is ``completion[start:end]``; ``paragraph`` counts the
    blank lines before it; ``question`` is whether it ends in a question mark."""

    start: int
    end: int
    text: str
    paragraph: int
    question: bool


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def prepare(text: str) -> tuple[str, list[tuple[int, int, str | None]]]:
    """The completion as read (same length, so positions stay): HTML comments, LaTeX comment lines, code-fence
    lines and empty boxes blanked, table bars read as separators; and its boxes ``(start, end, content)``."""
    out, i = [], 0
    while (j := text.find("<!--", i)) >= 0:  # HTML comments: not read
        k = text.find("-->", j + 4)
        end = len(text) if k < 0 else k + 3
        out += [text[i:j], " " * (end - j)]
        i = end
    text = "".join(out) + text[i:]
    lines = _read_tables(text.split("\n"))
    text = "\n".join(lines)
    boxes = []
    for start, end, content in box_spans(text):
        if content is not None and not content.strip():
            text = _blank(text, start, end)  # the instruction's empty box: read the sentence without it
        else:
            boxes.append((start, end, content))
    return text, boxes


def _table_cells(line: str) -> list[str] | None:
    stripped = line.strip()
    return [c.strip() for c in stripped.strip("|").split("|")] if stripped.startswith("|") else None


def _read_tables(lines: list[str]) -> list[str]:
    """Lines as read: LaTeX comment lines and code fences blank; a markdown table's row read as "cell: cell",
    or, under a header with an answer column, as "Answer: <that cell>"."""
    out, column = [], None
    for k, line in enumerate(lines):
        stripped = line.lstrip()
        cells = _table_cells(line)
        if stripped.startswith("%") or stripped.startswith("```"):
            line = ""
        elif cells is not None and all(set(c) <= set("-: ") for c in cells):
            line = ""  # the separator under a header
        elif cells is not None:
            following = _table_cells(lines[k + 1]) if k + 1 < len(lines) else None
            if following is not None and all(set(c) <= set("-: ") for c in following) and any(following):
                column = next((j for j, c in enumerate(cells) if LABEL_ONLY.fullmatch(c)), None)
                line = ""
            elif column is not None and column < len(cells):
                line = f"Answer: {cells[column]}"
            else:
                line = ": ".join(cells)
        else:
            column = None
        out.append(line)
    return out


_BOUNDARY = re.compile(r"\n|\$\$|\$|\\[()\[\]]|[.!?;][\"'’)\]]*(?=\s|$)")
_LIST_DOT = re.compile(r"\s*(?:step\s*)?\(?(?:\d{1,3}|[A-Za-z])$", re.IGNORECASE)
_ABBREVIATION = re.compile(r"(?:e\.g|i\.e|vs|approx|cf|resp|etc|Mr|Dr|No)$", re.IGNORECASE)


def statements(text: str, boxes: list[tuple[int, int, str | None]]) -> list[Statement]:
    """``text`` cut into statements: at every newline, and at ``. ! ? ;`` followed by a space outside math
    (``$...$``, ``\\(...\\)``, ``\\[...\\]`` within a line) and outside boxes; a list number's dot ("1. ") and
    an abbreviation's ("e.g. ") cut nothing."""
    out: list[Statement] = []
    start, paragraph, in_math, b = 0, 0, False, 0
    line_start = 0

    def emit(end: int) -> None:
        piece = text[start:end]
        if piece.strip():
            out.append(Statement(start, end, piece, paragraph, piece.rstrip().endswith("?")))

    for m in _BOUNDARY.finditer(text):
        pos = m.start()
        while b < len(boxes) and boxes[b][1] <= pos:
            b += 1
        if b < len(boxes) and boxes[b][0] <= pos < boxes[b][1]:
            continue  # inside a box
        token = m.group(0)
        if token == "\n":
            emit(pos)
            if not text[line_start:pos].strip() and out:
                paragraph += 1 if out[-1].paragraph == paragraph else 0
            start, line_start, in_math = pos + 1, pos + 1, False
        elif token in ("$", "$$", "\\(", "\\)", "\\[", "\\]"):
            in_math = not in_math if token in ("$", "$$") else token in ("\\(", "\\[")
        elif not in_math:
            before = text[start:pos]
            if token.startswith(".") and (
                _LIST_DOT.match(text, line_start, pos) or _ABBREVIATION.search(before[-8:])
            ):
                continue
            emit(m.end())
            start = m.end()
    emit(len(text))
    return out


def markers_end(text: str) -> int:
    """Where the markers at the start of a statement end (list items, steps, footnotes: their digits are no
    value)."""
    return _MARKERS.match(text).end()
