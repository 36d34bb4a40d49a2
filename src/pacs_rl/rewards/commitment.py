"""The grammar of a commitment, for the reading of the final answer (:mod:`pacs_rl.rewards.reader`).

It decides what a statement states and how it is phrased: the answer's name ("the answer / result / solution",
with a determiner and modifiers, or a named quantity: "the sum of 47 and 8") joined to its value by a copula (a
whole word) or a label's separator (":", "=", a dash or an arrow, or none: "Answer 55"); "X is the answer"; a line
that is only a label; a conclusion's opening word ("So", "Therefore"); the value a phrase commits to (without its
bold, quotes, ``$``, filler words and closing marks); whether a phrase's content reads as an answer; and the value
of a plain statement: an equation or a value, "<subject> is <value>" with any subject, a value and a short remark
("55, easy."), a list. A statement whose sides differ ("80 + 3 is 11") is ``false``.
"""

from __future__ import annotations

import re

from pacs_rl.rewards.answers import EXPLANATION, clean_answer, evaluate, statement_subject, statement_value
from pacs_rl.rewards.qualifiers import OR_VALUE, clause_prefix, offers_another, status_of, uncommitted
from pacs_rl.rewards.values import listed_span, listed_values, signed_numbers

_DET = r"(?:the|my|our|your|this|its|an?)"
_MOD = r"(?:final|correct|right|exact|resulting|overall|true|actual|complete|whole|real|correct\s+final)"
_STRONG = r"(?:answers?|results?|solutions?|outcome)"
_QUANTITY = r"(?:sum|difference|product|quotient|total|value)"

# what joins an answer's name to its value: a copula, a whole word and never part of another ("this" holds no
# "is"), or any separator a label takes ("Answer: 55", "Answer = 55", "Answer - 55", "Answer → 55", "answer's 55")
_COPULA = (
    r"(?P<neg>(?<![A-Za-z])(?:is\s+not|isn['’]t|was\s+not|wasn['’]t|cannot\s+be|can['’]t\s+be)|≠|\\neq?(?![A-Za-z]))"
    r"|(?<![A-Za-z])(?:is|are|was|were|would\s+be|will\s+be|should\s+be|must\s+be|(?:could|might|may)\s+be|equals"
    r"|comes\s+(?:out\s+)?to|works\s+out\s+to|becomes|remains)"
    r"|['’]s|=|:|(?:(?<=[A-Za-z*_`\"'’]\s)|(?<=[A-Za-z*_`\"'’]))(?:=>|->|[→⇒⟹⟶]|[-–—](?=\s))"
)  # an arrow or a dash right after the name: "the result of 54 - 2" holds no separator
ARROWS = ("=>", "->", "→", "⇒", "⟹", "⟶", "-", "–", "—")

# "the answer is", "the final answer to 47 + 8 is", "Final Answer:", "the sum of 47 and 8 is", "answer within is:"
PHRASE = re.compile(
    rf"(?<![\w-])(?:(?P<det>{_DET})\s+)?(?:{_MOD}\s+){{0,2}}(?P<noun>{_STRONG}|{_QUANTITY})(?![\w-])"
    r"(?P<comp>[ \t]+(?:to|for|of|in|within|between|from)(?![\w-])(?:[^=:\n.!?;,]|[.,](?=\d)){0,80}?)?"
    rf"[\s*_`\"'’]*(?P<cop>{_COPULA})(?![A-Za-z])",
    re.IGNORECASE,
)
# a label with no separator at the start of its statement: "Answer 55", "Final answer $55$", "#### 55"
BARE_LABEL = re.compile(
    rf"[\s>#*_]*(?:(?:{_DET}\s+)?(?:{_MOD}\s+){{0,2}}answer(?![\w-])[\s*_]*|#{{4}}\s*)(?=[-−+$\\\d(])",
    re.IGNORECASE,
)
# "55 is the answer", "which is the final answer", "This is the answer."
REVERSE = re.compile(
    rf"(?<![\w-])(?:is|was|as|be)\s+(?:{_DET}\s+)?(?:{_MOD}\s+){{0,2}}{_STRONG}(?![\w-])", re.IGNORECASE
)
# a line that is only a label: "Answer:", "### Final Answer", "**Final answer**", "| Answer |", "Solution:"
LABEL_ONLY = re.compile(
    rf"[\s>#*_`\"'’{{|:-]*(?:{_DET}\s+)?(?:{_MOD}\s+){{0,2}}(?:{_STRONG}|{_QUANTITY})[\s*_`\"'’:|}}]*",
    re.IGNORECASE,
)

_CONCLUSION = (
    r"(?:so|thus|therefore|hence|finally|consequently|in\s+conclusion|in\s+summary|in\s+short|in\s+total"
    r"|overall|altogether|as\s+a\s+result)(?![\w-])"
)
CONCLUSION_START = re.compile(rf"(?:^|[,;:]\s*|\s-\s)(?:and\s+)?{_CONCLUSION}[\s,:]*", re.IGNORECASE)

# "<any subject> is <value>" in a plain statement ("The value of x is 5", "The probability is 1/3", "25 + 6, which is
# 11"): the last copula of the statement, a whole word
_SUBJECT_COPULA = re.compile(
    r"(?<![\w-])(?:is|are|was|were|equals|(?:is\s+)?equal\s+to|comes\s+(?:out\s+)?to|works\s+out\s+to|becomes"
    r"|remains|(?:will|would|should|must)\s+be)(?![\w-])",
    re.IGNORECASE,
)

# subjects that name no quantity ("There are 2 numbers", "We are at 40"), and clauses that state a reason or a
# time, not the result ("since 24 is 2 times 12")
_NO_QUANTITY = re.compile(
    r"(?:there|here|i|we|you|he|she|they|since|because|as|when|while|although|though|whereas|where|after|before"
    r"|until|once)(?![\w-])",
    re.IGNORECASE,
)

_FILLER = re.compile(
    r"(?:(?:therefore|thus|hence|so|then|clearly|simply|just|indeed|exactly|obviously|now|finally|actually"
    r"|given\s+by|as\s+follows|the\s+following|that|equal\s+to|simply|:)(?![\w-])[\s,:]*)+",
    re.IGNORECASE,
)
_NOT_AN_ANSWER = {
    "correct", "right", "wrong", "incorrect", "indeed", "clear", "simple", "obvious", "given", "above",
    "below", "shown", "as", "the", "this", "that", "not", "still", "therefore", "thus", "then", "a", "an",
    "within", "in", "to", "calculated", "found", "obtained", "same", "following", "one", "boxed", "here",
    "there", "it", "its", "also", "now", "what", "how", "why", "which", "we", "you", "i", "by", "at", "for",
}  # fmt: skip


def _cut_explanation(content: str) -> str:
    cut = EXPLANATION.search(content)
    return content[: cut.start()] if cut else content


def answer_like(content: str) -> bool:
    """A phrase's content that reads as an answer: math (values joined by "or" / "and" too: several values), or
    one or two words that are not filler."""
    if not content:
        return False
    if re.search(r"[\d\\^=]", content):
        return statement_value(_CONNECTIVES.sub(",", content)) is not None
    words = content.split()
    return len(words) <= 2 and words[0].lower().strip(".,:;*_\"'") not in _NOT_AN_ANSWER


_CONNECTIVES = re.compile(r"(?<![\w-])(?:or|and|either|if\s+not)(?![\w-])|\\text\{\s*(?:or|and)\s*\}", re.I)
_HEDGE_WORD = re.compile(
    r"(?:(?:probably|maybe|perhaps|possibly|likely|presumably|approximately|approx\.?|about|around|roughly"
    r"|nearly|almost)(?![\w-])\s*)+",
    re.IGNORECASE,
)
MARK = re.compile(r"(?:\s*(?:[!✓✔✅☑]|[:;]-?[)D(]|\(\s*[✓✔]\s*\)))+$")
_CLOSING = re.compile(r"[\s\"'’`,]*(?:[}\]]+[\s\"'’`,]*)?$")


def phrase_value(text: str, pos: int) -> tuple[str, bool]:
    """The value a phrase commits to, from ``pos`` (after its copula) to the end of its statement; and whether
    another value is offered beside it ("55 or 56", "55 (or 56)", "$55$ or $56$"). A hedge word before it
    ("probably 55") is left to the statement's hedge; a closing mark ("55!", "55 ✓") and a JSON field's closing
    quote and brace (``"answer": "55"}``) are not part of it."""
    rest = re.sub(r"^[ \t]*[*_]+(?=\s)", "", text[pos:])  # the bold of "**Answer:** 55" closing
    rest = re.sub(r"(?<!\\)\$", "", rest).lstrip(" \t")  # inline math read as its text: "$a$ * $b$ = 560"
    rest = rest[_FILLER.match(rest).end() if _FILLER.match(rest) else 0 :]
    rest = rest[_HEDGE_WORD.match(rest).end() if _HEDGE_WORD.match(rest) else 0 :]
    rest = strip_end(rest.rstrip(" \t.;"), MARK)
    if rest.count("{") < rest.count("}") or rest.count("[") < rest.count("]"):
        rest = strip_end(rest, _CLOSING)
    for opening, closing in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if rest.startswith(opening):
            end = rest.find(closing, len(opening))
            if end > 0:
                inner, after = rest[len(opening) : end].strip(), rest[end + len(closing) :]
                return clean_answer(inner), offers_another(after)
            break
    cut = _cut_explanation(rest)
    return clean_answer(cut), offers_another(rest[len(cut) :]) or offers_another(cut)


def strip_end(text: str, pattern: re.Pattern) -> str:
    """``text`` without what ``pattern`` (anchored at the end) matches in its last 40 characters (a pattern
    anchored at the end, searched over a whole text, rescans a run of spaces from each of its positions)."""
    head, tail = text[:-40], text[-40:]
    return head + pattern.sub("", tail)


def noun_starts_clause(body: str, pos: int, first: int) -> bool:
    """A phrase without a determiner ("Final answer: 55", "so answer is 55") must start its clause (``first``:
    where the body's text starts); mid-clause ("the running total is 40", "a partial sum is 15") a noun names
    another quantity."""
    if pos <= first:
        return True
    return _CLAUSE_END.search(body[max(0, pos - 24) : pos]) is not None


_CLAUSE_END = re.compile(
    r"(?:[,;:(*_\"'’{]|(?<![\w-])(?:so|thus|therefore|hence|finally|and|then|now|here|is))\s*$",
    re.IGNORECASE,
)


def checked_status(text: str, value: str, hedged: bool) -> str:
    """The status of a value stated with a verb: ``false`` when what it is stated of can be evaluated and
    differs ("80 + 3 is 11"), else as hedged or not."""
    subject = statement_subject(text, value) if "=" not in value else ""
    left, right = evaluate(subject) if subject else None, evaluate(value)
    if left is not None and right is not None and left != right:
        return "false"
    return status_of(hedged)


# where a short remark after a value starts: "55 (checked twice)", "55, easy.", "55 - done"
_REMARK = re.compile(r"(?<!\s)\s*[,(;—–]|\s-\s")
_LINK = re.compile(
    r"\s*(?:equivalent\s+to|the\s+same\s+as|exactly|simply|just|now|then|still|indeed)(?![\w-])", re.I
)


def _value_before_remark(body: str) -> str | None:
    """The value of a statement that is a value and a short remark in words after it ("55 (checked twice)",
    "55, easy."), or None. A remark holds no digit and offers no other value; a unit word is no remark."""
    end = max(body.rfind(d) for d in "0123456789") + 1
    if end == 0:
        return None
    while end < len(body) and body[end] in "$*_)}]":
        end += 1
    # the remark starts right after the value: "55, easy", not "54 Actually, ..."
    m = _REMARK.match(body, end)
    if m is None:
        return None
    remark = body[m.start() :]
    if len(remark.split()) > 12 or OR_VALUE.search(remark):
        return None
    return statement_value(body[: m.start()])


def _copula_value(body: str) -> tuple[str | None, str, tuple[str, ...]]:
    """``(value, subject)`` of a statement "<subject> is <value>" with any subject ("The value of x is 5", "The
    probability is $\\frac{1}{3}$", "25 + 6, which is 11"): the statement's last copula, a whole word; the
    subject no person or "there" ("There are 2 numbers", "We are at 40" state no quantity's value); not
    negated, supposed or someone's claim; a list ("The roots are 2 and 3") with its values. ``(None, "", ())``
    for any other statement."""
    last = None
    for m in _SUBJECT_COPULA.finditer(body):
        last = m
    if last is None:
        return None, "", ()
    subject = clause_prefix(body, last.start()).strip(" \t*_\"'’")
    if not subject or _NO_QUANTITY.match(subject) or uncommitted(body, last.start()):
        return None, "", ()
    rest = body[last.end() :]
    if re.match(r"\s*(?:not|n['’]t|never)(?![\w-])", rest, re.IGNORECASE):
        return None, "", ()
    link = _LINK.match(rest)
    rest = rest[link.end() :] if link else rest
    values = listed_values(rest)
    if values:
        return listed_span(rest), subject, values
    value = statement_value(rest)
    if value is None or "=" in value:
        return None, "", ()
    if signed_numbers(subject) and signed_numbers(subject) == signed_numbers(value)[:1]:
        return None, "", ()  # "99 is 99 in decimal form", "20 is indeed 20": an identity states no result
    return value, subject, ()


# where a reason starts after a value: "The roots are 2 and 3 because 2 + 3 = 5"
REASON = re.compile(r"(?<=\S)\s+(?:because|since|as\s+(?=\S)|given\s+that|due\s+to)(?![\w-])", re.IGNORECASE)


def plain_value(text: str) -> tuple[str | None, str, tuple[str, ...]]:
    """``(value, subject, values)`` of a plain statement: a list ("2 and 3"), an equation or a value ("47 + 8 =
    55", "55", "55, easy."), a copula with any subject ("The value of x is 5"), a value and a remark ("55
    (checked twice)"); ``(None, "", ())`` for any other."""
    values = listed_values(text)
    if values:
        return listed_span(text), "", values
    found = statement_value(text)
    if found is not None and "=" not in found and (cut := _value_before_remark(text)) is not None:
        return cut, "", ()  # "55, easy."
    if found is not None:
        return found, "", ()
    found, subject, values = _copula_value(text)
    if found is not None:
        return found, subject, values
    return _value_before_remark(text), "", ()
