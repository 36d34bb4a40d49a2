"""The values a statement writes, for the reading of the final answer (:mod:`pacs_rl.rewards.reader`).

It decides which numbers a text writes (a minus sign kept where it is a sign), what a value comes to when two values
are told apart (a number, or nothing the reader can tell: ``2\\sqrt{3}``, ``76 - 1``), and when a statement states
a list of values ("2 and 3", "x = 2 or x = 3", two boxes joined by a comma): its values, kept as a set's members.
"""

from __future__ import annotations

import re
from fractions import Fraction

from pacs_rl.rewards.answers import clean_answer, evaluate, number_value, value_like

_NUMBER_TOKEN = re.compile(r"(?<![\d.])\d+(?:\.\d+)?")


def signed_numbers(text: str) -> list[str]:
    """The numbers written in ``text``, a minus sign kept where it is a sign, not an operation ("5 - 10 = -5" ->
    5, 10, -5)."""
    out = []
    for m in _NUMBER_TOKEN.finditer(text):
        j = m.start()
        while j > 0 and text[j - 1] in " \t$":
            j -= 1
        sign = ""
        if j > 0 and text[j - 1] in "-−":
            k = j - 1
            while k > 0 and text[k - 1] in " \t$":
                k -= 1
            if k == 0 or not (text[k - 1].isalnum() or text[k - 1] in ")]}"):
                sign = "-"
        out.append(sign + m.group(0))
    return out


def value_key(value: str) -> Fraction | None:
    """What a value comes to, for telling two values apart: the last side of an equation when it is a number
    written as one (``47 + 8 = 55``, ``55``, ``\\frac{1}{2}`` and ``0.5``), or None where the reader cannot tell
    (``2\\sqrt{3}``, ``x + 1``, ``76 - 1``: an unfinished step is no value)."""
    return number_value(value.rsplit("=", 1)[-1])


def differ(a: str, b: str) -> bool:
    """Two values that are surely different (both come to a number, and not the same one)."""
    ka, kb = value_key(a), value_key(b)
    return ka is not None and kb is not None and ka != kb


# what joins the values of a list (a comma, "and", "or", "\text{ and }", "\quad"), and the brackets around them
_LIST_TOKEN = re.compile(
    r"\\text\{\s*(?:and|or|,)\s*\}|\\q?quad(?![A-Za-z])|(?<![\w-])(?:and|or)(?![\w-])|,|[{}()\[\]]",
    re.IGNORECASE,
)
_LIST_JOIN = re.compile(r",|(?<![\w-])(?:and|or)(?![\w-])|\\text\{|\\q?quad(?![A-Za-z])", re.IGNORECASE)
# what may stand between two boxes of one list: "\boxed{2}, \boxed{3}", "$\boxed{2}$ and $\boxed{3}$"
BOX_JOIN = re.compile(
    r"\s*(?:,\s*(?:(?:and|or)\s+)?|(?:and|or)\s+|\\text\{\s*(?:and|or|,)\s*\}\s*|\\q?quad\s*)", re.IGNORECASE
)
_NO_LIST = ("maybe", "perhaps", "possibly", "probably", "either", "not")  # where a list stops being one
_THOUSANDS_COMMA = re.compile(r"\d,\d{3}(?![\d.])")  # the comma of "995,006" separates no values
_ASSIGNED = re.compile(r"\s*([A-Za-z]|\\[A-Za-z]+)\s*=\s*")
_LIST_STOP = re.compile(
    r"[.;!?](?=\s|$)|(?<![\w-])(?:because|since|as|which|when|where|if|given|while|for|so|but|then|maybe|perhaps"
    r"|possibly|probably|either|not)(?![\w-])|\\pm|±",
    re.IGNORECASE,
)


def listed_values(text: str) -> tuple[str, ...]:
    """The values of a list stated in prose or math ("2 and 3", "x = 2 or x = 3", "$-1$, $0$, and $1$"): two or
    more values of one name (or of none), joined only by commas, "and" or "or", up to where the statement or
    an explanation ends; () for anything else (a hedge, "55, maybe 56", is no list)."""
    if _LIST_JOIN.search(text) is None:
        return ()
    stop = _LIST_STOP.search(text)
    if stop is not None and stop.group(0).lower() in _NO_LIST:
        return ()
    text = text[: stop.start()] if stop else text
    text = re.sub(r"(?<!\\)\$", " ", text)
    if text.count("{") != text.count("}") or text.count("(") != text.count(")"):
        return ()
    pieces, names, depth, last = [], set(), 0, 0
    for m in _LIST_TOKEN.finditer(text):  # split at top level only: (1, 2) and \{1, 2\} are one value
        token = m.group(0)
        if token in ("{", "(", "["):
            depth += 1
        elif token in ("}", ")", "]"):
            depth -= 1
        elif depth == 0 and not (token == "," and _THOUSANDS_COMMA.match(text, m.start() - 1)):
            if text[last : m.start()].strip() or not pieces:  # ", and" is one separator
                pieces.append(text[last : m.start()])
            last = m.end()
    pieces.append(text[last:])
    values = []
    for piece in pieces:
        named = _ASSIGNED.match(piece)
        names.add(named.group(1) if named else "")
        value = clean_answer(piece[named.end() :] if named else piece)
        if not value or not value_like(value, digits=False):
            return ()
        values.append(value)
    return tuple(values) if len(values) >= 2 and len(names) == 1 else ()


_MIXED = re.compile(r"\s*([-−]?)\s*(\d+)\s*\\[dt]?frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}\s*")


def arithmetic(text: str) -> Fraction | None:
    """The value of plain arithmetic (:func:`evaluate`) or of a mixed number (``15\\frac{39}{40}``), or None."""
    mixed = _MIXED.fullmatch(text)
    if mixed is None:
        return evaluate(text)
    sign, whole, num, den = mixed.groups()
    if int(den) == 0:
        return None
    return (-1 if sign else 1) * (int(whole) + Fraction(int(num), int(den)))


def listed_span(text: str) -> str | None:
    """The text of a list stated from the start of ``text`` ("x = 2 or x = 3."), or None."""
    if not listed_values(text):
        return None
    stop = _LIST_STOP.search(text)
    return clean_answer(text[: stop.start()] if stop else text)
