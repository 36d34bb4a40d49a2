"""How firmly a statement commits to its value, for the reading of the final answer (:mod:`pacs_rl.rewards.reader`).

It decides whether a statement's value is hedged ("probably 55", "I think the answer is 55", "about 55"), whether
its clause makes it commit to nothing (a supposition, "suppose the answer is 50"; someone's claim, "John says the
answer is 50"; a negation right before it, "not \\boxed{54}"), whether another value is offered beside it ("55 or
56", "55, maybe 56"), and what a remark right after the answer does to it ("Maybe.", "Or 56."). It reads the text
only; which value is the answer is the walk's (:mod:`pacs_rl.rewards.reader`).
"""

from __future__ import annotations

import re

# a hedge: a belief ("I think", "not sure", "most likely") anywhere in the statement, or an adverb of doubt
# opening or closing it ("Maybe the answer is 55", "It is 55, probably."); or an adverb of doubt or of rounding
# right before the value ("probably 55", "about 55", "could be 55": _ADVERB_BEFORE)
_HEDGE = re.compile(
    r"(?<![\w-])(?:i\s+think|i\s+believe|i\s+guess|i\s+suppose|i['’]m\s+not\s+(?:sure|certain)|not\s+(?:sure|certain)"
    r"|unsure|uncertain|most\s+likely|or\s+so|or\s+thereabouts|give\s+or\s+take)(?![\w-])"
    r"|^[\s*_]*(?:maybe|perhaps|possibly|probably)(?![\w-])"
    r"|(?<![\w-])(?:maybe|perhaps|possibly|probably|i\s+think|i\s+guess)[\s.!?*_]*$",
    re.IGNORECASE,
)
_ADVERB_BEFORE = re.compile(
    r"(?<![\w\\-])(?:maybe|perhaps|possibly|probably|likely|presumably|roughly|approximately|approx\.?|nearly"
    r"|almost|about|around|(?:might|may|could)\s+be)(?:\s*(?:is|be)\s)?[\s$*_{(]*(?:\\boxed\s*\{[\s$]*)?$",
    re.IGNORECASE,
)
_HEDGE_REMARK = re.compile(
    r"(?<![\w-])(?:maybe|perhaps|possibly|probably|likely|i\s+think|i\s+believe|i\s+guess|not\s+(?:sure|certain)"
    r"|unsure|uncertain)(?![\w-])",
    re.IGNORECASE,
)

HYPOTHETICAL = re.compile(
    r"(?<![\w-])(?:if|suppose|supposing|assume|assuming|let['’]s\s+say|imagine|what\s+if|hypothetically"
    r"|unless|whether|otherwise)(?![\w-])",
    re.IGNORECASE,
)
_ATTRIBUTED = re.compile(  # someone's claim, or a past belief; "I think" / "we believe" are hedges (_HEDGE)
    r"(?<![\w-])(?:(?<!\bi\s)(?<!\bwe\s)(?:think|believe|guess)|says|said|claims?|claimed|thinks|thought"
    r"|believes|believed|suggests?|suggested|argues?|argued|guessed|insists?|insisted"
    r"|according\s+to|expects?|expected)(?![\w-])",
    re.IGNORECASE,
)
OR_VALUE = re.compile(r"(?<![\w-])(?:or|either|if\s+not)(?![\w-])|\\pm(?![A-Za-z])|±", re.IGNORECASE)
_DOUBTED_VALUE = re.compile(
    r"(?<![\w-])(?:maybe|perhaps|possibly|probably)\s*(?:[$(]+\s*)?[-−]?\d", re.IGNORECASE
)
# where the value's own clause ends after it (what follows is an explanation, not another value)
_AFTER_CLAUSE = re.compile(
    r"(?<!\s)\s+(?:because|since|as|which|when|where|if(?!\s+not)|given|while|with|for|so|but|then|and|that)(?![\w-])"
    r"|[.;!?](?=\s|$)",
    re.IGNORECASE,
)

# where a clause starts inside a statement (hypotheses and attributions are judged within their clause)
_CLAUSE = re.compile(r"[,;:(]|(?<![\w-])(?:then|but)(?![\w-])", re.IGNORECASE)

DIGIT = re.compile(r"(?<![A-Za-z\d])\d")  # a digit of a number, not of a name ("sepehr2010", "H2O")


def clause_prefix(text: str, pos: int) -> str:
    """The text of ``text``'s clause before ``pos`` (after the last comma, colon, "then" or "but"), within the
    240 characters before it."""
    last = max(pos - 240, 0)
    for m in _CLAUSE.finditer(text, last, pos):
        last = m.end()
    return text[last:pos]


def offers_another(text: str) -> bool:
    """Whether the text right after a value offers another one ("or 56", "(or 56)", "\\pm 3"), up to where an
    explanation starts ("75 cents since ... 75 cents or less" offers nothing)."""
    if _DOUBTED_VALUE.search(text):
        return True  # "55 so possibly 56", "55, maybe 56"
    cut = _AFTER_CLAUSE.search(text)
    text = text[: cut.start()] if cut else text
    return bool(OR_VALUE.search(text)) and DIGIT.search(text) is not None


def is_hedged(text: str, value_start: int | None = None) -> bool:
    """A hedge in the statement ``text``, or an adverb of doubt right before its value at ``value_start``."""
    return _HEDGE.search(text) is not None or (value_start is not None and is_doubted(text, value_start))


def is_doubted(text: str, value_start: int) -> bool:
    """An adverb of doubt or of rounding right before the value at ``value_start`` ("probably 55")."""
    return _ADVERB_BEFORE.search(text[max(0, value_start - 48) : value_start]) is not None


def uncommitted(body: str, pos: int) -> bool:
    """Whether the clause before ``pos`` makes a phrase commit to nothing: a hypothesis ("suppose", "if") or
    someone's claim ("John says", "I thought")."""
    clause = clause_prefix(body, pos)
    return bool(HYPOTHETICAL.search(clause) or _ATTRIBUTED.search(clause))


def negated_before(body: str, pos: int) -> bool:
    return re.search(r"(?:not|n['’]t|≠|\\neq?)\s*(?:\$\s*)?$", body[max(0, pos - 12) : pos]) is not None


def status_of(hedged: bool, another: bool = False) -> str:
    return "several" if another else "hedged" if hedged else "answer"


_OTHER_VALUE = re.compile(
    r"(?<![\w-])(?:or|either)\s+(?:(?:it|that|this)(?:['’]s|\s+is|\s+could\s+be)\s+)?[$(]*[-−]?\d",
    re.IGNORECASE,
)


def remark_status(body: str, first: int) -> str | None:
    """What the statement at once after the answer does to it, when it gives no value of its own: ``hedged`` for a
    hedge ("Maybe.", "Not sure."), ``several`` for another value offered or doubted ("Or 56.", "Or it could be
    56.", "I think 56 is possible."), None for anything else (``first``: where the statement's text starts)."""
    digits = DIGIT.search(body) is not None
    remark = _HEDGE_REMARK.search(body) is not None and len(body.split()) <= 8
    offered = digits and (
        OR_VALUE.match(body, first) is not None
        or _DOUBTED_VALUE.search(body) is not None
        or _OTHER_VALUE.search(body) is not None
        or _HEDGE.search(body) is not None
    )
    if remark or offered:
        return "several" if digits else "hedged"
    return None
