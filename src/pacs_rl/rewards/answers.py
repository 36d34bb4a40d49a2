"""Reading one committed final answer, and telling what form an answer takes.

The ``sound`` grader (:func:`pacs_rl.rewards.math_verifier.check`) and the reward-hacking monitor are built on
this module. The grader is sound by construction rather than by a list of bad spellings:

- it reads **one** value per completion, the last *committed* answer: the last closed, non-empty ``\\boxed{}``;
  with no box, the last "the answer is …" / "answer: …" sentence. Text after it (a check, a restated
  equation) does not replace it, and nothing else in the completion is read. So a completion is worth exactly
  what a single guess is worth: writing several candidates, or none, cannot raise its expected reward;
- where the gold answer is a plain number, the answer read must be a number written as one (an integer, a
  decimal, an irreducible fraction, with sign, thousands separators, a percent sign or a unit), or an equation
  one of whose sides is such a number. An operation in any spelling (``8 + 47``, ``\\frac{47+8}{1}``,
  ``50+5``) is refused, so a policy cannot be paid for a question it has not evaluated;
- on any data, an answer that is the question's own expression (:func:`structure_key`: the same expression
  up to spelling, spacing, brackets, order of sums and products, signs and neutral padding) is refused unless
  the gold answer is that expression too ("Compute $\\dbinom{8}{4}$" answered ``\\dbinom{8}{4}``).

What is equal to the gold is then decided by math-verify, as the paper decides it (``3/4`` = ``0.75``,
``10\\%`` = ``10``).

Nothing here loads math-verify; :func:`structure_key` imports its LaTeX parser (latex2sympy) on first use.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction

# ------------------------------------------------------------------------------------------------ committed
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


@dataclass(frozen=True)
class Candidate:
    """A committed answer: where it starts in the completion, its text, and how it was committed."""

    start: int
    text: str
    kind: str  # "box" or "phrase"


def box_spans(text: str) -> list[tuple[int, int, str | None]]:
    """``(start, end, content)`` of every ``\\boxed`` (or ``\\fbox``) in ``text``, in order.

    Nested braces are followed (``\\boxed{\\frac{1}{2}}``); the brace-less ``\\boxed 25`` reads up to the next
    whitespace or ``$``. An unclosed box (a completion cut off inside it) has content ``None``; trailing
    ``.,;:`` and LaTeX spaces are dropped from the content."""
    spans: list[tuple[int, int, str | None]] = []
    for match in _BOX_COMMAND.finditer(text):
        i = match.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            depth = 0
            for j in range(i, len(text)):
                if text[j] == "{" and text[j - 1] != "\\":
                    depth += 1
                elif text[j] == "}" and text[j - 1] != "\\":
                    depth -= 1
                    if depth == 0:
                        spans.append((match.start(), j + 1, strip_trailing_punctuation(text[i + 1 : j])))
                        break
            else:
                spans.append((match.start(), len(text), None))
        elif i > match.end():  # `\boxed 25`
            token = re.match(r"[^\s$]*", text[i:]).group(0)
            spans.append((match.start(), i + len(token), strip_trailing_punctuation(token)))
        else:
            spans.append((match.start(), match.end(), ""))
    return spans


def strip_trailing_punctuation(content: str) -> str:
    """``"104."`` -> ``"104"``: a sentence's punctuation and LaTeX spaces at the end are not the answer."""
    return re.sub(r"(?:\s|\\[,;:! ]|[.,;:])+$", "", content.strip())


# "the answer is", "The final answer is", "answer:", "the answer to 47 + 8 is", "the correct answer would be"
_PHRASE = re.compile(
    r"\banswer\b(?:\s+(?:to|for|of)\b(?:(?!\.\s)[^\n]){0,80}?)?\s*\**\s*"
    r"(?:(?:\bis\b|\bwould\s+be\b|\bwill\s+be\b|\bequals\b)\s*:?|=|:)",
    re.IGNORECASE,
)
# where a committed sentence ends: a newline, or . ! ? ; followed by a space or the end (not a decimal point)
_SENTENCE_END = re.compile(r"\n|[!?;](?=\s|$)|\.(?=\s|$)")
# where an explanation starts after the answer: " (because ...)", ", since ...", " because ..."
_EXPLANATION = re.compile(
    r"\s+\(|,\s+(?!(?:or|and|not|but|maybe|perhaps|possibly)\b)(?=[A-Za-z])"
    r"|\s+(?:because|since|as|which|so|from|given|when|where|if)\b",
    re.IGNORECASE,
)
# phrase contents that are no answer ("the answer is correct", "the answer is as follows")
_NOT_AN_ANSWER = {
    "correct", "right", "wrong", "incorrect", "indeed", "clear", "simple", "obvious", "given", "above",
    "below", "shown", "as", "the", "this", "that", "not", "still", "therefore", "thus", "then", "a", "an",
}  # fmt: skip


def _phrase_content(text: str, start: int) -> str:
    """The answer a phrase commits to: from ``start`` to the end of its sentence, explanation cut off."""
    rest = text[start:].lstrip(" \t*")
    if rest.startswith("\n"):  # "The answer is:\n\n$$55$$"
        rest = rest.lstrip()
    for opening, closing in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if rest.startswith(opening):
            end = rest.find(closing, len(opening))
            if end > 0:
                return rest[len(opening) : end].strip()
    end = _SENTENCE_END.search(rest)
    sentence = rest[: end.start()] if end else rest
    cut = _EXPLANATION.search(sentence)
    return clean_answer(sentence[: cut.start()] if cut else sentence)


def clean_answer(text: str) -> str:
    """An answer without its markdown bold, math delimiters and closing punctuation."""
    text = text.replace("**", "").strip()
    changed = True
    while changed:
        before = text
        for opening, closing in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if (
                text.startswith(opening)
                and text.endswith(closing)
                and len(text) > len(opening) + len(closing)
            ):
                text = text[len(opening) : -len(closing)].strip()
        text = strip_trailing_punctuation(text)
        changed = text != before
    return text


def _is_answer_like(content: str) -> bool:
    if not content:
        return False
    if re.search(r"[\d\\^]", content):
        return True
    words = content.split()
    return len(words) <= 2 and words[0].lower().strip(".,:;") not in _NOT_AN_ANSWER


def committed_answers(text: str) -> list[Candidate]:
    """Every committed answer of a completion, in order: closed non-empty boxes, and "the answer is …"
    sentences whose content looks like an answer (a number, LaTeX, or one or two words that are not
    "correct", "as follows" and the like) and holds no box of its own."""
    out = [Candidate(s, c, "box") for s, _e, c in box_spans(text) if c]
    for match in _PHRASE.finditer(text):
        content = _phrase_content(text, match.end())
        if "\\boxed" in content or "\\fbox" in content or not _is_answer_like(content):
            continue
        out.append(Candidate(match.end(), content, "phrase"))
    return sorted(out, key=lambda c: c.start)


def final_answer(text: str) -> Candidate | None:
    """The one answer the ``sound`` grader reads: the last closed, non-empty box; with no box, the last
    "the answer is …" sentence; else None. What follows it does not replace it."""
    candidates = committed_answers(text)
    boxes = [c for c in candidates if c.kind == "box"]
    if boxes:
        return boxes[-1]
    return candidates[-1] if candidates else None


# ---------------------------------------------------------------------------------------------- plain numbers
_SIGN = r"[-+−]?"
_INTEGER = r"(?:\d{1,3}(?:(?:,|\{,\}|\\,)\d{3})+|\d+)"
_DECIMAL = rf"(?:{_INTEGER}(?:\.\d+)?|\.\d+)"
_FRAC = r"\\[dt]?frac\s*\{\s*(?P<num>[-+−]?\s*\d+)\s*\}\s*\{\s*(?P<den>\d+)\s*\}"
_SLASH = r"(?P<snum>\d+)\s*/\s*(?P<sden>\d+)"
_UNIT = (
    r"(?P<percent>\\?%)?(?:\^\s*\{?\\circ\}?|°|\s*\\(?:text|mbox|mathrm)\{\s*[A-Za-z][A-Za-z .]*\}"
    r"|\s+(?!(?:or|and|not|but|plus|minus|times|over|divided|multiplied)\b)[A-Za-z]+\.?)?"
)
_PLAIN_NUMBER = re.compile(
    rf"(?P<sign>{_SIGN})\s*(?:\\\$|\$)?\s*(?:(?P<dec>{_DECIMAL})|{_FRAC}|{_SLASH})\s*{_UNIT}\s*"
)
_WRAPPERS = re.compile(
    r"^\\(?:text|textbf|mathbf|mathrm|mbox|displaystyle)\s*\{(.*)\}$|^\{(.*)\}$", re.DOTALL
)


def _unwrap(text: str) -> str:
    text = clean_answer(text.replace("\\left", "").replace("\\right", "").replace("\\!", ""))
    while True:
        m = _WRAPPERS.match(text.strip())
        if not m:
            return text.strip()
        text = (m.group(1) if m.group(1) is not None else m.group(2)).strip()


def _number(text: str | None) -> tuple[Fraction, str] | None:
    """(value, the number as math-verify should read it) when ``text`` is one number written as one."""
    if text is None:
        return None
    m = _PLAIN_NUMBER.fullmatch(_unwrap(text))
    if not m:
        return None
    sign = "-" if m.group("sign") in ("-", "−") else ""
    percent = "\\%" if m.group("percent") else ""
    if m.group("dec") is not None:
        digits = re.sub(r",|\{,\}|\\,", "", m.group("dec"))
        return (-1 if sign else 1) * Fraction(digits), f"{sign}{digits}{percent}"
    num = m.group("num") if m.group("num") is not None else m.group("snum")
    den = int(m.group("den") if m.group("den") is not None else m.group("sden"))
    num = int(num.replace("−", "-").replace(" ", ""))
    if den <= 1 or Fraction(num, den).denominator != den:  # \frac{110}{2} is an operation, not a number
        return None
    value = (-1 if sign else 1) * Fraction(num, den)
    return value, f"{sign}\\frac{{{num}}}{{{den}}}{percent}"


def number_value(text: str | None) -> Fraction | None:
    """The value of ``text`` when it is one number written as one, else None.

    A number: an integer or a decimal (``-55``, ``1,000``, ``1{,}000``, ``0.5``, ``055``), or an irreducible
    fraction with a denominator above 1 (``\\frac{3}{4}``, ``-\\frac{3}{4}``, ``3/4``), optionally wrapped
    (``$…$``, ``\\text{…}``, ``{…}``) and followed by a percent sign, a degree sign or a unit in words. Any
    operation is not one (``8 + 47``, ``\\frac{110}{2}``, ``5.5 \\times 10``, ``2^3``)."""
    found = _number(text)
    return None if found is None else found[0]


def _top_level_split(text: str, separator: str) -> list[str]:
    parts, depth, last = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth -= 1
        elif depth == 0 and text.startswith(separator, i):
            parts.append(text[last:i])
            last = i + len(separator)
    parts.append(text[last:])
    return [p.strip() for p in parts]


def numeric_reading(answer: str) -> tuple[str | None, str]:
    """How an answer to a numeric question reads: ``(number_text, form)``.

    ``("55", "plain")`` for a number, or for an equation whose number sides agree (``55 = 47 + 8``, ``x = 55``,
    ``47 + 8 = 55``); ``(None, "several")`` for several values (``55 or 56``, ``54, 55``, ``54 = 55``,
    ``\\pm 3``); ``(None, "expression")`` for anything else (an operation, an equation with no number side)."""
    answer = _unwrap(answer)
    found = _number(answer)
    if found is not None:
        return found[1], "plain"
    if "=" in answer:
        sides = [s for s in _top_level_split(answer, "=") if s]
        values = [(s, number_value(s)) for s in sides]
        numbers = [(s, v) for s, v in values if v is not None]
        if numbers:
            if len({v for _s, v in numbers}) > 1:
                return None, "several"
            return _number(numbers[-1][0])[1], "plain"
        return None, "expression"
    pieces = re.split(
        r"\\pm|±|\bor\b|\\text\{\s*or\s*\}|\band\b|\\text\{\s*and\s*\}|;|,\s+|,(?!\d{3})", answer
    )
    if len([p for p in pieces if p.strip()]) > 1 and sum(number_value(p) is not None for p in pieces) >= 1:
        return None, "several"
    if "\\pm" in answer or "±" in answer:
        return None, "several"
    return None, "expression"


# ---------------------------------------------------------------------------------------- structure of an answer
_SPELLINGS = (
    (re.compile(r"\\[dt]frac"), r"\\frac"),
    (re.compile(r"\\[dt]binom"), r"\\binom"),
    (re.compile(r"\\left|\\right|\\displaystyle|\$|\\[,;!: ]|\\q?quad|~"), " "),
    (re.compile(r"×|\\times|\bmultiplied\s+by\b|\btimes\b|⋅|∙|·"), r" \\cdot "),
    (re.compile(r"÷|\\div\b|\bdivided\s+by\b"), " / "),
    (re.compile(r"−|–|\bminus\b"), " - "),
    (re.compile(r"\bplus\b"), " + "),
    (re.compile(r"\[|\\\{"), "("),
    (re.compile(r"\]|\\\}"), ")"),
)
_NUMBER_TOKEN = re.compile(r"(?<![\w.\\_^])(\d+(?:\.\d+)?|\.\d+)(?![\d.]*\w)")


def _spelled_out(text: str) -> str:
    text = re.sub(r"(?<=\d)(?:,|\{,\})(?=\d{3}(?!\d))", "", text)
    for pattern, replacement in _SPELLINGS:
        text = pattern.sub(replacement, text)
    return " ".join(text.split()).strip(" .,;:!?")


def _placeholder(match: re.Match) -> str:
    value = Fraction(match.group(1))
    if value in (0, 1):  # the neutral elements stay numbers, so that "+ 0" and "\cdot 1" vanish
        return str(value)
    name = str(value).replace("/", "d")
    return f"{{q_{{{name}}}}}"


def _canonical(expr):
    """Rebuild a parsed tree with sympy's own evaluation: sums and products in one order, brackets gone,
    x + 0, x * 1, x / 1 and double negation folded. Numbers are symbols here, so nothing is computed."""
    if not getattr(expr, "args", None):
        return expr
    try:
        return expr.func(*[_canonical(a) for a in expr.args])
    except Exception:
        return expr


@functools.lru_cache(maxsize=4096)
def structure_key(text: str) -> str:
    """One key per expression up to spelling, spacing, brackets, the order of sums and products, signs and
    neutral padding, with every number kept as itself (not computed): ``8 + 47``, ``{47+8}``, ``047 + 8``,
    ``47.0 + 8``, ``(47 + 8)\\cdot 1``, ``\\frac{47 + 8}{1}``, ``47 - -8`` share the key of ``47 + 8``;
    ``55`` and ``50 + 5`` do not. Falls back to the spelled-out text where the LaTeX parser fails."""
    spelled = _spelled_out(text)
    try:
        from latex2sympy2_extended import latex2sympy  # math-verify's own LaTeX parser

        expr = latex2sympy(_NUMBER_TOKEN.sub(_placeholder, spelled))
        import sympy

        return sympy.srepr(_canonical(expr))
    except Exception:
        return "text:" + spelled.replace(" ", "")


# a run of arithmetic in plain text: "47 + 8", "(3 - 5) * 2", "12 ⋅ 34", "36 / 2", "5 plus 6"
_PLAIN_OPERATION = re.compile(
    r"[-−(\[]*\d[\d.,]*[)\]]*(?:\s*(?:[-+*/^×÷⋅−]|\\times|\\cdot|\\div|plus|minus|times|divided\s+by|multiplied\s+by)"
    r"\s*[-−(\[]*\d[\d.,]*[)\]]*)+"
)
_MATH_SEGMENT = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)


@functools.lru_cache(maxsize=1024)
def question_keys(question: str | None) -> frozenset[str]:
    """The structure keys of the expressions a question writes: its LaTeX segments (and each side of an
    equation in them) and its plain-text arithmetic ("What is 47 + 8?")."""
    if not question:
        return frozenset()
    pieces: list[str] = []
    for m in _MATH_SEGMENT.finditer(question):
        segment = next(g for g in m.groups() if g is not None)
        pieces.append(segment)
        sides = _top_level_split(segment, "=")
        if len(sides) > 1:
            pieces += sides
    outside = _MATH_SEGMENT.sub(" ", question)
    pieces += [m.group(0) for m in _PLAIN_OPERATION.finditer(_spelled_out(outside))]
    return frozenset(structure_key(p) for p in pieces if p.strip())


def restates_question(answer: str | None, gold: str, question: str | None) -> bool:
    """The answer (or the last side of an equation it is) is the question's own expression, and the gold
    is not: "8 + 47" for "What is 47 + 8?", ``\\dbinom{8}{4}`` for "Compute $\\dbinom{8}{4}$", the polynomial
    a "factor" question gave."""
    if not answer or not question:
        return False
    keys = question_keys(question)
    if not keys:
        return False
    answer = _unwrap(answer)
    sides = _top_level_split(answer, "=") if "=" in answer else [answer]
    candidates = {answer, sides[-1]}
    gold_key = structure_key(_unwrap(gold))
    return any((k := structure_key(c)) in keys and k != gold_key for c in candidates if c)


# ------------------------------------------------------------------------------------------------------ forms
FORMS = {
    "plain": "one committed answer, a number where the gold is one",
    "no_box": "one answer in prose ('the answer is ...'), no box",
    "truncated": "cut off at the token limit",
    "several": "several different candidate answers (boxes that disagree, a list, a hedge)",
    "expression": "an operation or expression where the gold is a plain number",
    "restated": "the question's own expression given back as the answer",
    "none": "no answer read",
}
"""Forms of an answer, from the most to the least trusted; a paid answer that is not ``plain`` may be the
policy learning the grader rather than the task (the reward-hacking monitor counts them)."""


def answer_form(completion: str, extracted: str | None, gold: str, question: str | None = None) -> str:
    """The form of the answer a grader read (``extracted``) in ``completion``, one of :data:`FORMS` but
    ``truncated`` (the caller knows where a completion stopped). Precedence: restated, expression, several,
    no_box, plain."""
    if not extracted:
        return "none"
    if number_value(gold) is not None:
        number, form = numeric_reading(extracted)
        if number is None:
            return "restated" if restates_question(extracted, gold, question) else form
        if restates_question(number, gold, question):
            return "restated"
    elif restates_question(extracted, gold, question):
        return "restated"
    boxes = {re.sub(r"\s+", "", c) for _s, _e, c in box_spans(completion) if c}
    if len(boxes) > 1:
        return "several"
    if not boxes:
        return "no_box"
    return "plain"
