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
from fractions import Fraction

# ------------------------------------------------------------------------------------------------ boxes
_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BRACE = re.compile(r"(?<!\\)[{}]")


def box_spans(text: str) -> list[tuple[int, int, str | None]]:
    """``(start, end, content)`` of every ``\\boxed`` (or ``\\fbox``) in ``text``, in order, in one pass.

    Nested braces are followed (``\\boxed{\\frac{1}{2}}``); the brace-less ``\\boxed 25`` reads up to the next
    whitespace or ``$``. An unclosed box (a completion cut off inside it) has content ``None``; trailing
    ``.,;:`` and LaTeX spaces are dropped from the content."""
    closing: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE.finditer(text):  # every brace's partner, once
        if m.group(0) == "{":
            stack.append(m.start())
        elif stack:
            closing[stack.pop()] = m.start()
    spans: list[tuple[int, int, str | None]] = []
    for match in _BOX_COMMAND.finditer(text):
        i = match.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            j = closing.get(i)
            if j is None:
                spans.append((match.start(), len(text), None))
            else:
                spans.append((match.start(), j + 1, strip_trailing_punctuation(text[i + 1 : j])))
        elif i > match.end():  # `\boxed 25`
            token = re.match(r"[^\s$]*", text[i : i + 200]).group(0)
            spans.append((match.start(), i + len(token), strip_trailing_punctuation(token)))
        else:
            spans.append((match.start(), match.end(), ""))
    return spans


_SPACING = r"(?:\\[,;:! ]|\\q?quad(?![A-Za-z])|~)"
_LEADING_SPACING = re.compile(rf"(?:\s|{_SPACING})+")  # matched at the start, nothing after it
_TRAILING_MARKS = ("\\qquad", "\\quad", "\\,", "\\;", "\\:", "\\!", "\\ ", "~", ".", ",", ";", ":")


def strip_trailing_punctuation(content: str) -> str:
    """``"104."`` -> ``"104"``: a sentence's punctuation and LaTeX spaces at the end are not the answer; LaTeX
    spaces at the start neither (``\\boxed{\\,55\\,}``). Read from the ends inward (no pattern anchored at the
    end, which would rescan a long run of spaces from every position)."""
    content = content.strip()
    lead = _LEADING_SPACING.match(content)
    content = content[lead.end() :] if lead else content
    changed = True
    while changed and content:  # the longest mark first: "\\," is a space, not a comma after a backslash
        changed = False
        for mark in _TRAILING_MARKS:
            if content.endswith(mark):
                content, changed = content[: -len(mark)].rstrip(), True
                break
    return content


_PAIRS = (("**", "**"), ("__", "__"), ("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ('"', '"'),
          ("“", "”"), ("'", "'"), ("‘", "’"), ("`", "`"), ("*", "*"), ("_", "_"))  # fmt: skip


def clean_answer(text: str) -> str:
    """An answer without its markdown (bold, italics, code), quotes, math delimiters and closing punctuation."""
    text = text.strip()
    for _ in range(8):
        before = text
        for opening, closing in _PAIRS:
            if (
                text.startswith(opening)
                and text.endswith(closing)
                and len(text) > len(opening) + len(closing)
            ):
                text = text[len(opening) : -len(closing)].strip()
        text = strip_trailing_punctuation(text.strip('*_`"“”‘’'))
        if text == before:
            break
    return text


# ---------------------------------------------------------------------------------------------- statements
# a verb that states a value ("26 - 0 is 26", "you get 26", "25 + 6 equals 31")
_VERB = re.compile(
    r"(?<![\w-])(?:is|are|was|equals|equal\s+to|is\s+equal\s+to|makes|gives(?:\s+us)?|gets?|got|results?\s+in"
    r"|becomes|yields|have|has|comes\s+to)(?![\w-])",
    re.IGNORECASE,
)
# where an explanation starts after a value: " (because ...)", ", since ...", " because ...", ", not 56"
# (?<!\s): a run of spaces is tried once, not from each of its positions; after a comma the letter is looked for
# first, so that the spaces are given back at most once (the same matches as a possessive run, on Python 3.10 too)
EXPLANATION = re.compile(
    r"(?<!\s)\s+\(|,\s*(?=[A-Za-z])(?!(?:or|either|maybe|perhaps|possibly)(?![\w-]))"
    r"|(?<!\s)\s+(?:because|since|as|which|so|from|given|when|where|if|and|but|then|while|with|for|in|by|using|check\w*"
    r"|verif\w*|proof)(?![\w-])",
    re.IGNORECASE,
)
_MATH_TOKEN = (
    r"(?:\\(?:text|textbf|mathrm|mbox|mathbf|operatorname)\s*\{[^{}]*\}|\\[A-Za-z]+|\\.|[0-9]"
    r"|[-+−–*/^×·÷()\[\]{}|!%'_<>=.,:;~ \t$°⋅∙]|(?<![A-Za-z])[A-Za-z](?![A-Za-z]))"
)
# A run of math tokens taken once, never re-split: the run is found inside a lookahead (which the engine does not
# re-enter) and then matched as found, which is what a possessive ``(?:token)++`` does from Python 3.11 on.
_MATH_ONLY = re.compile(rf"(?=(?P<run>(?:{_MATH_TOKEN})+))(?P=run)")
# each part stops only where the next must start (a space before a letter, a letter before a space, "/", "." or
# the end), so no run is ever split: the same matches as possessive runs
_UNIT_WORDS = re.compile(r"(?:\s+[A-Za-z]+(?:/[A-Za-z]+)?\.?){1,3}$")
_FILLER = re.compile(
    r"(?:(?:therefore|thus|hence|so|then|clearly|simply|just|indeed|exactly|obviously|now|finally|actually|that"
    r"|us|given\s+by|as\s+follows|the\s+following|equal\s+to)(?![\w-])[\s,:]*|:\s*)+",  # matched at the start
    re.IGNORECASE,
)


def value_like(text: str, digits: bool = True) -> bool:
    """``text`` is math (numbers, operators, LaTeX, one-letter names), optionally followed by up to three unit
    words, and holds a digit (or, without ``digits``, any math)."""
    head = text[:-60] + _UNIT_WORDS.sub("", text[-60:]) if text else text
    if not head.strip() or not _MATH_ONLY.fullmatch(head):
        return False
    return re.search(r"\d", head) is not None or (not digits and re.search(r"[A-Za-z\\]", head) is not None)


def _math_run_start(text: str, end: int) -> int:
    """Where the math before ``end`` starts: scanning back over numbers, operators, LaTeX commands and
    one-letter names, stopping at a word ("We have 47 + 8" -> "47 + 8")."""
    j = end
    while j > 0:
        c = text[j - 1]
        if c.isalpha():
            k = j - 1
            while k > 0 and text[k - 1].isalpha():
                k -= 1
            if k > 0 and text[k - 1] == "\\":
                j = k - 1
            elif j - k == 1 and not (k > 0 and text[k - 1] == "'"):
                j = k
            else:
                break
        elif c.isdigit() or c in " \t$\\{}()[]+-−–*/^×·÷.,|!%_~⋅∙·":
            j -= 1
        else:
            break
    while j < end and text[j] in " \t.,;:)]}":
        j += 1
    return j


def _top_level_equals(text: str) -> int:
    """The position of the first ``=`` outside brackets (not part of ``==``, ``<=``, ``>=``, ``!=``), or -1."""
    depth = 0
    for i, ch in enumerate(text):
        if text[i - 1 : i] == "\\" and ch in "()[]":
            continue  # \( \) \[ \]: math delimiters, not brackets
        if ch in "{([":
            depth += 1
        elif ch in "})]":
            depth = max(depth - 1, 0)
        elif (
            ch == "="
            and depth == 0
            and text[i - 1 : i] not in ("<", ">", "!", "=")
            and text[i + 1 : i + 2] != "="
        ):
            return i
    return -1


def _cut_explanation(text: str) -> str:
    start = len(text) - len(text.lstrip())
    cut = EXPLANATION.search(text, start + 1)
    return text[: cut.start()] if cut else text


def statement_value(text: str, verbs: bool = False) -> str | None:
    """The value a statement states, as written in it, or None: an equation chain from its first side's math to
    its last side ("We have 47 + 8 = 55." -> ``47 + 8 = 55``; an explanation after it cut off); with ``verbs``,
    the value after the last "is", "equals", "gives", "get", ... ("So, 26 - 0 is 26" -> ``26``); else the
    statement itself when it is all math ("**55**" -> ``55``)."""
    equals = _top_level_equals(text)
    if equals >= 0:
        start = _math_run_start(text, equals)
        chain = _cut_explanation(text[equals + 1 :])
        value = clean_answer(text[start : equals + 1 + len(chain)])
        last = value.rsplit("=", 1)[-1]
        return value if last.strip() and value_like(last, digits=False) and value_like(value) else None
    if verbs:
        last = None
        for m in _VERB.finditer(text):
            last = m
        if last is not None:
            rest = text[last.end() :].lstrip()
            rest = rest[_FILLER.match(rest).end() if _FILLER.match(rest) else 0 :]
            value = clean_answer(_cut_explanation(rest))
            return value if value_like(value) else None
    value = clean_answer(text)
    return value if value_like(value) else None


def statement_subject(text: str, value: str) -> str:
    """The math a value is stated of ("26 - 0" in "So, 26 - 0 is 26"), or "" when none."""
    at = text.rfind(value)
    verb = None
    for m in _VERB.finditer(text, 0, max(at, 0)):
        verb = m
    if verb is None:
        return ""
    start = _math_run_start(text, verb.start())
    return clean_answer(text[start : verb.start()])


# ------------------------------------------------------------------------------------------- arithmetic
_EVAL_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?|\.\d+)|(?P<op>\\[dt]?frac|\\times|\\cdot|\\div|[-+−–*/×·÷⋅∙^(){}\[\]])"
    r"|(?P<other>\S))"
)
_EVAL_CLEAN = re.compile(r"\$|\\left|\\right|\\[,;:! ]|\\q?quad(?![A-Za-z])|~")
_MAX_DIGITS = 200


class _NotArithmetic(Exception):
    pass


def evaluate(expr: str) -> Fraction | None:
    """The value of a plain arithmetic expression (numbers, + - × ÷ · / ^, brackets, ``\\frac``), exactly, or
    None when ``expr`` is anything else (a name, a function, a unit, a list). Bounded: no number of more than
    200 digits, no exponent above 64, no nesting deeper than 50."""
    text = _EVAL_CLEAN.sub(" ", re.sub(r"(?<=\d)(?:,|\{,\})(?=\d{3}(?!\d))", "", expr))
    tokens = []
    # stripped: trailing spaces hold no token, and each of their positions would be tried
    for m in _EVAL_TOKEN.finditer(text.strip()):
        if m.group("other") is not None or len(tokens) == 400:
            return None
        tokens.append(("num", m.group("num")) if m.group("num") is not None else ("op", m.group("op")))
    if not tokens:
        return None
    parser = _Arithmetic(tokens)
    try:
        value = parser.sum(0)
    except (_NotArithmetic, ZeroDivisionError, RecursionError):
        return None
    return value if parser.at == len(tokens) else None


class _Arithmetic:
    """A recursive-descent reader of arithmetic tokens (:func:`evaluate`)."""

    _TIMES = ("*", "×", "·", "⋅", "∙", "\\times", "\\cdot")
    _OVER = ("/", "÷", "\\div")

    def __init__(self, tokens: list[tuple[str, str]]):
        self.tokens, self.at = tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.at >= len(self.tokens) or (expected is not None and self.tokens[self.at][1] != expected):
            raise _NotArithmetic
        self.at += 1
        return self.tokens[self.at - 1]

    def sum(self, depth: int) -> Fraction:
        value = self.product(depth)
        while self.peek() in ("+", "-", "−", "–"):
            sign = self.take()[1]
            value = value + self.product(depth) if sign == "+" else value - self.product(depth)
            self.check(value)
        return value

    def product(self, depth: int) -> Fraction:
        value = self.unary(depth)
        while True:
            nxt = self.peek()
            if nxt in self._TIMES or nxt in self._OVER:
                self.take()
                right = self.unary(depth)
                value = value * right if nxt in self._TIMES else value / right
            elif nxt in ("(", "["):
                value = value * self.unary(depth)  # 2(8): a bracket after a value multiplies
            else:
                return value
            self.check(value)

    def unary(self, depth: int) -> Fraction:
        if self.peek() in ("-", "−", "–", "+"):
            sign = self.take()[1]
            value = self.unary(depth)
            return value if sign == "+" else -value
        return self.power(depth)

    def power(self, depth: int) -> Fraction:
        base = self.atom(depth)
        if self.peek() != "^":
            return base
        self.take()
        exponent = self.unary(depth + 1)
        if exponent.denominator != 1 or abs(exponent) > 64 or (base == 0 and exponent < 0):
            raise _NotArithmetic
        return self.check(base ** int(exponent))

    def atom(self, depth: int) -> Fraction:
        if depth > 50:
            raise _NotArithmetic
        kind, token = self.take()
        if kind == "num":
            return Fraction(token)
        closing = {"(": ")", "[": "]", "{": "}"}.get(token)
        if closing is not None:
            value = self.sum(depth + 1)
            self.take(closing)
            return value
        if token.endswith("frac"):
            self.take("{")
            num = self.sum(depth + 1)
            self.take("}")
            self.take("{")
            den = self.sum(depth + 1)
            self.take("}")
            return num / den
        raise _NotArithmetic

    @staticmethod
    def check(value: Fraction) -> Fraction:
        if len(str(value.numerator)) > _MAX_DIGITS or len(str(value.denominator)) > _MAX_DIGITS:
            raise _NotArithmetic
        return value


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
    r"either|than|to|up|is|are|if|else|only|exactly|some|any|each|"
    # words that change the value: "55 thousand" is not 55
    r"hundreds?|thousands?|millions?|billions?|trillions?|dozens?|squared|cubed|halves|half|thirds?|quarters?|"
    r"fourths?|fifths?|sixths?|sevenths?|eighths?|ninths?|tenths?|hundredths?|thousandths?|k|m|bn)"
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
_MAX_NUMBER_TEXT = 160  # a number, its sign, wrappers and unit words: longer text is no plain number
_WRAPPERS = re.compile(
    r"^\\(?:text|textbf|mathbf|mathrm|mbox|displaystyle)\s*\{(.*)\}$|^\{(.*)\}$", re.DOTALL
)


def unwrap(text: str) -> str:
    """``text`` without ``\\left``/``\\right``, wrappers (``\\text{}``, ``{}``) and closing punctuation."""
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
    if text is None or len(text) > _MAX_NUMBER_TEXT:
        return None
    text = unwrap(text)
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


def top_level_split(text: str, separator: str) -> list[str]:
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

    ``("55", "plain")`` for a number, or for a true equation whose last side is a number (``47 + 8 = 55``,
    ``x = 55``; ``55 = 47 + 8`` reads its number side); ``(None, "false")`` for an equation whose sides that can be
    evaluated differ (``40 + 8 = 55``, ``54 = 55``); ``(None, "several")`` for several values (``55 or 56``,
    ``54, 55``, ``\\pm 3``, number sides that differ); ``(None, "expression")`` for anything else (an operation, an
    equation with no number side, a number whose unit word changes it: ``55 thousand``)."""
    answer = unwrap(answer)
    found = _number(answer)
    if found is not None:
        return found[1], "plain"
    if "=" in answer:
        sides = [s for s in top_level_split(answer, "=") if s]
        if len({v for v in map(evaluate, sides) if v is not None}) > 1:
            return None, "false"
        numbers = [(s, v) for s in sides if (v := number_value(s)) is not None]
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
NUMBER_TOKEN = re.compile(r"(?<![A-Za-z.\\_\d])(\d+(?:\.\d+)?|\.\d+)")


# no group given back: after fewer groups another group follows, which the lookahead refuses
_THOUSANDS = re.compile(r"(?<![\d(\[,])\d{1,3}(?:(?:,|\{,\})\d{3})+(?![\d)\],]|\{,\}\d{3})")
# spaces around a comma, from the start of their run only (not from each of its positions)
_COMMA_SPACES = re.compile(r"(?:(?<!\s)\s+)?,\s*")
_SHORT_ARGUMENT = re.compile(r"(\\(?:sqrt|[dt]?frac))\s*([0-9A-Za-z])")
_SHORT_DENOMINATOR = re.compile(r"(\\[dt]?frac\s*\{[^{}]*\})\s*([0-9A-Za-z])")


def spelled_out(text: str) -> str:
    """``text`` in one spelling for the LaTeX parser: thousands separators gone, ``\\dfrac`` as ``\\frac``,
    spacing and delimiters dropped, operators in words as symbols, ``\\sqrt2`` and ``\\frac9{19}`` braced."""
    text = _SHORT_DENOMINATOR.sub(
        r"\1{\2}", _SHORT_ARGUMENT.sub(r"\1{\2}", _SHORT_ARGUMENT.sub(r"\1{\2}", text))
    )
    text = _THOUSANDS.sub(lambda m: re.sub(r",|\{,\}", "", m.group(0)), text)  # not "(12,102)": a pair
    text = _COMMA_SPACES.sub(",", text)
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
    spelled = spelled_out(unwrap(text))
    try:
        from latex2sympy2_extended import latex2sympy  # math-verify's own LaTeX parser

        return repr(_tree(latex2sympy(NUMBER_TOKEN.sub(_placeholder, spelled))))
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
        sides = top_level_split(segment, "=")
        if len(sides) > 1:
            pieces += sides
    outside = spelled_out(_MATH_SEGMENT.sub(" . ", question))
    for m in _PLAIN_MATH.finditer(outside):
        run = m.group(0).strip()
        if _OPERATOR.search(run) and len(re.findall(r"[A-Za-z0-9]+", run)) >= 2:
            pieces.append(run)
            if "=" in run:
                pieces += top_level_split(run, "=")
    return frozenset(structure_key(p) for p in pieces if p.strip())


_SIZE_TOKENS = re.compile(r"\\[A-Za-z]+|\d+|[A-Za-z]|[-+*/^=]")


def restates_question(answer: str | None, gold: str, question: str | None) -> bool:
    """The answer (or the last side of an equation it is) is the question's own expression, and the gold
    is not: "8 + 47" for "What is 47 + 8?", ``\\dbinom{8}{4}`` for "Compute $\\dbinom{8}{4}$", the polynomial
    a "factor" question gave."""
    if not answer or not question:
        return False
    if len(_SIZE_TOKENS.findall(answer)) > len(_SIZE_TOKENS.findall(question)) + 8:
        return False  # larger than the whole question: no copy of it (and nothing long is parsed)
    keys = question_keys(question)
    if not keys:
        return False
    answer = unwrap(answer)
    candidates = {answer}
    if "=" in answer and "=" not in gold:  # math-verify compares an equation's last side to a plain gold
        candidates.add(top_level_split(answer, "=")[-1])
    gold_key = structure_key(unwrap(gold))
    return any((k := structure_key(c)) in keys and k != gold_key for c in candidates if c)


# ------------------------------------------------------------------------------------------------------ forms
FORMS = {
    "plain": "one committed answer, a number where the gold is one",
    "no_box": "one answer in prose ('the answer is ...'), no box",
    "truncated": "cut off at the token limit",
    "several": "several different candidate answers (boxes that disagree, a list, a hedge)",
    "expression": "an operation or expression where the gold is a plain number; on MATH-style golds, an answer "
    "not in final form (padded, unevaluated, unsimplified where asked)",
    "restated": "the question's own expression given back as the answer",
    "none": "no answer read",
}
"""Forms of an answer, from the most to the least trusted; a paid answer in a form outside :data:`TRUSTED_FORMS`
may be the policy learning the grader rather than the task (the reward-hacking monitor counts them)."""

TRUSTED_FORMS = ("plain", "no_box")
"""The forms of an answer as a reader writes it: boxed, or in prose ("So 47 + 8 = 55."), which the ``sound``
grader's reader reads by design; the monitor's warnings and its "not plain" share count the other forms."""


def answer_form(completion: str, extracted: str | None, gold: str, question: str | None = None) -> str:
    """The form of the answer a grader read (``extracted``) in ``completion``, one of :data:`FORMS` but
    ``truncated`` (the caller knows where a completion stopped). Precedence: restated, expression, several,
    no_box, plain. A false equation ("40 + 8 = 55") takes the form of where it stands (a box or prose). Nothing
    longer than the question is parsed for the label."""
    if not extracted:
        return "none"
    if number_value(gold) is not None:
        number, form = numeric_reading(extracted)
        if number is None and form != "false":
            return "restated" if restates_question(extracted, gold, question) else form
        if number is not None and restates_question(number, gold, question):
            return "restated"
    elif restates_question(extracted, gold, question):
        return "restated"
    boxes = {re.sub(r"\s+", "", c) for _s, _e, c in box_spans(completion) if c}
    if len(boxes) > 1:
        return "several"
    if not boxes:
        return "no_box"
    return "plain"
