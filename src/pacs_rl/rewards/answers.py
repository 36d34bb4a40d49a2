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
    r"(?:(?:\bis\b|\bwould\s+be\b|\bwill\s+be\b|\bequals\b)\s*:?|=)"
    # "Answer: 55", "**Final Answer:** 55", "My answer: 55" head a line; "check the answer: ..." is no commitment
    r"|(?:^|\n)[ \t>#*_]*(?:(?:the|my|our)\s+)?(?:final\s+)?answer\b[ \t*_]*:",
    re.IGNORECASE,
)
# words between "the answer is" and the answer ("the answer is therefore 54", "is clearly $54$", "as follows:")
_FILLER = re.compile(
    r"^(?:(?:therefore|thus|hence|so|then|clearly|simply|just|indeed|exactly|obviously|now|finally|actually|"
    r"indeed|given\s+by|as\s+follows|the\s+following)\b[\s,:]*)+",
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


_HEDGE = re.compile(r"\b(?:or|either|maybe|possibly|perhaps|probably|if\s+not)\b|\\pm|±")
_ANY_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _phrase_content(text: str, start: int) -> str:
    """The answer a phrase commits to: from ``start`` to the end of its sentence, an explanation after it cut
    off ("55, since 47 + 8 = 55" is 55). A sentence that ends in a question mark commits to nothing (""); one
    that hedges between numbers ("55 (or 56)", "$55$ or $56$") is returned whole, to be read as several."""
    rest = re.sub(r"^[ \t]*[*_]+(?=\s)", "", text[start:])  # the bold of "**Answer:** 55" closing
    rest = _FILLER.sub("", rest.lstrip(" \t"))
    if rest.startswith("\n"):  # "The answer is:\n\n$$55$$"
        rest = rest.lstrip()
    answer, after = None, rest
    for opening, closing in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if rest.startswith(opening):
            end = rest.find(closing, len(opening))
            if end > 0:
                answer, after = rest[len(opening) : end].strip(), rest[end + len(closing) :]
            break
    end = _SENTENCE_END.search(after)
    if end is not None and after[end.start()] == "?":  # "The answer is 55?"
        return ""
    sentence = after[: end.start()] if end else after
    whole = sentence if answer is None else f"{answer} {sentence}"
    if _HEDGE.search(whole) and len(_ANY_NUMBER.findall(whole)) >= 2:
        return clean_answer(whole)
    if answer is not None:
        return answer
    cut = _EXPLANATION.search(sentence)
    return clean_answer(sentence[: cut.start()] if cut else sentence)


def clean_answer(text: str) -> str:
    """An answer without its markdown bold, math delimiters and closing punctuation."""
    text = text.strip()
    changed = True
    while changed:
        before = text
        for opening, closing in (("**", "**"), ("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
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
_INTEGER = r"(?:[1-9]\d{0,2}(?:(?:,|\{,\}|\\,)\d{3})+|\d+)"
_DECIMAL = rf"(?:{_INTEGER}(?:\.\d+)?|\.\d+)"
_FRAC = r"\\[dt]?frac\s*\{\s*(?P<num>[-+−]?\s*\d+)\s*\}\s*\{\s*(?P<den>\d+)\s*\}"
_SLASH = r"(?P<snum>\d+)\s*/\s*(?P<sden>\d+)"
_FRAC_SHORT = r"\\[dt]?frac\s*(?P<fnum>\d)\s*(?P<fden>\d)"  # \frac34
# words that make a number a hedge or an operation, never a unit ("55 or more", "55 \text{ approximately}")
_NOT_UNITS = (
    r"(?:or|and|not|but|plus|minus|times|over|divided|multiplied|more|less|fewer|greater|smaller|larger|maybe|"
    r"probably|possibly|perhaps|approximately|approx|about|around|roughly|nearly|almost|so|at|least|most|"
    r"either|than|to|up|is|are|if|else|only|exactly|some|any|each)"
)
_UNIT_WORD = rf"(?!{_NOT_UNITS}\b)[A-Za-z]+(?:/[A-Za-z]+)?\.?"
_UNIT = (
    r"(?P<percent>\\?%)?(?:\^\s*\{?\\circ\}?|°"
    rf"|(?:\s|\\[,;: ]|~)*\\(?:text|mbox|mathrm)\{{\s*{_UNIT_WORD}(?:\s+{_UNIT_WORD}){{0,3}}\s*\}}"
    r"(?:\^\s*\{?\d\}?)?"
    rf"|\s+{_UNIT_WORD}(?:\s+{_UNIT_WORD}){{0,2}}(?:\^\s*\{{?\d\}}?)?)?"
)
_PLAIN_NUMBER = re.compile(
    rf"(?P<sign>{_SIGN})\s*(?:\\\$|\$)?\s*(?:(?P<dec>{_DECIMAL})|{_FRAC}|{_FRAC_SHORT}|{_SLASH})\s*{_UNIT}\s*"
)
_WRAPPERS = re.compile(
    r"^\\(?:text|textbf|mathbf|mathrm|mbox|displaystyle)\s*\{(.*)\}$|^\{(.*)\}$", re.DOTALL
)


def _unwrap(text: str) -> str:
    for command in ("\\left", "\\right", "\\!", "\\displaystyle"):
        text = text.replace(command, "")
    text = re.sub(r"^([-+−])\s*(?:\\[,;:! ]\s*)+", r"\1", clean_answer(text))
    while True:
        m = _WRAPPERS.match(text.strip())
        if not m:
            return text.strip()
        text = (m.group(1) if m.group(1) is not None else m.group(2)).strip()


def _number(text: str | None) -> tuple[Fraction, str] | None:
    """(value, the number as math-verify should read it) when ``text`` is one number written as one."""
    if text is None:
        return None
    text = _unwrap(text)
    m = _PLAIN_NUMBER.fullmatch(text)
    if not m and text.startswith("(") and text.endswith(")"):  # "(9)": one number in brackets
        m = _PLAIN_NUMBER.fullmatch(text[1:-1])
    if not m:
        return None
    sign = "-" if m.group("sign") in ("-", "−") else ""
    percent = "\\%" if m.group("percent") else ""
    if m.group("dec") is not None:
        digits = re.sub(r",|\{,\}|\\,", "", m.group("dec"))
        return (-1 if sign else 1) * Fraction(digits), f"{sign}{digits}{percent}"
    num = next(m.group(g) for g in ("num", "fnum", "snum") if m.group(g) is not None)
    den = int(next(m.group(g) for g in ("den", "fden", "sden") if m.group(g) is not None))
    num = int(num.replace("−", "-").replace(" ", ""))
    if den <= 1 or Fraction(num, den).denominator != den:  # \frac{110}{2} is an operation, not a number
        return None
    value = (-1 if sign else 1) * Fraction(num, den)
    return value, f"{sign}\\frac{{{num}}}{{{den}}}{percent}"


def same_number(answer: str, gold: str) -> bool:
    """Whether two plain numbers (:func:`number_value`) are equal, exactly (as rationals: no rounding, so
    ``0.333333`` is not ``\\frac{1}{3}``). A percent sign is read as a unit, on either side (``10\\%`` = ``10``,
    not ``0.1``): one reading per answer, so that ``5500\\%`` cannot be paid as both 5500 and 55."""
    a, g = _number(answer), _number(gold)
    return a is not None and g is not None and a[0] == g[0]


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
# a number written as such (not inside a name or a subscript: x1, x_2, \\frac12 keeps its own reading)
_NUMBER_TOKEN = re.compile(r"(?<![A-Za-z.\\_\d])(\d+(?:\.\d+)?|\.\d+)")


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


def _tree(expr) -> tuple:
    """A parsed expression as a canonical tree: sums and products flattened and sorted, ``+ 0``, ``* 1``,
    ``^1``, ``1^x`` and pairs of ``-1`` factors dropped, the sides of an equation sorted. Nothing else is
    computed: unlike sympy's own evaluation, powers of one base are not merged (``x^5/x^2`` is not ``x^3``)."""
    import sympy

    if isinstance(expr, sympy.Number):
        return ("num", str(expr))
    if not expr.args:
        return ("atom", sympy.srepr(expr))
    kids = [_tree(a) for a in expr.args]
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        kind = "Add" if isinstance(expr, sympy.Add) else "Mul"
        flat = [x for k in kids for x in (k[1] if k[0] == kind else (k,))]
        if kind == "Add":
            flat = [k for k in flat if k != ("num", "0")]
        else:
            negative = sum(k == ("num", "-1") for k in flat) % 2 == 1
            flat = [k for k in flat if k not in (("num", "1"), ("num", "-1"))] + [("num", "-1")] * negative
        if not flat:
            return ("num", "0" if kind == "Add" else "1")
        return flat[0] if len(flat) == 1 else (kind, tuple(sorted(flat, key=repr)))
    if isinstance(expr, sympy.Pow):
        base, exponent = kids
        return base if ("num", "1") in (base, exponent) else ("Pow", (base, exponent))
    if isinstance(expr, sympy.Eq):
        return ("Eq", tuple(sorted(kids, key=repr)))
    return (type(expr).__name__, tuple(kids))


@functools.lru_cache(maxsize=4096)
def structure_key(text: str) -> str:
    """One key per expression up to spelling, spacing, brackets, the order of sums and products, signs and
    neutral padding, with every number kept as itself (not computed): ``8 + 47``, ``{47+8}``, ``047 + 8``,
    ``47.0 + 8``, ``(47 + 8)\\cdot 1``, ``\\frac{47 + 8}{1}``, ``47 - -8`` share the key of ``47 + 8``;
    ``55``, ``50 + 5`` and ``x^{5}/x^{2}`` against ``x^3`` do not. Falls back to the spelled-out text where the
    LaTeX parser fails."""
    spelled = _spelled_out(_unwrap(text))
    try:
        from latex2sympy2_extended import latex2sympy  # math-verify's own LaTeX parser

        return repr(_tree(latex2sympy(_NUMBER_TOKEN.sub(_placeholder, spelled))))
    except Exception:
        return "text:" + spelled.replace(" ", "")


# math in plain text: runs of numbers, one-letter variables, operators and brackets with an operator inside
# ("What is 47 + 8?", "Factor x^2 + 5x + 6.", "(3 - 5) * 2", "12 \cdot 34" once spelled out)
_PLAIN_MATH = re.compile(
    r"(?<![A-Za-z\\])(?:[A-Za-z](?![A-Za-z])|\d+(?:\.\d+)?|\\(?:cdot|times|div)\b|[-+*/^=()\[\]{}]|[ \t])+"
)
_OPERATOR = re.compile(r"[-+*/^=]|\\(?:cdot|times|div)")
_MATH_SEGMENT = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)


@functools.lru_cache(maxsize=1024)
def question_keys(question: str | None) -> frozenset[str]:
    """The structure keys of the expressions a question writes: its LaTeX segments (and each side of an
    equation in them) and its math in plain text ("What is 47 + 8?", "Factor x^2 + 5x + 6.")."""
    if not question:
        return frozenset()
    pieces: list[str] = []
    for m in _MATH_SEGMENT.finditer(question):
        segment = next(g for g in m.groups() if g is not None)
        pieces.append(segment)
        sides = _top_level_split(segment, "=")
        if len(sides) > 1:
            pieces += sides
    outside = _spelled_out(_MATH_SEGMENT.sub(" . ", question))
    for m in _PLAIN_MATH.finditer(outside):
        run = m.group(0).strip()
        if _OPERATOR.search(run) and len(re.findall(r"[A-Za-z0-9]+", run)) >= 2:
            pieces.append(run)
            if "=" in run:
                pieces += _top_level_split(run, "=")
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
    candidates = {answer}
    if "=" in answer and "=" not in gold:  # math-verify compares an equation's last side to a plain gold
        candidates.add(_top_level_split(answer, "=")[-1])
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
