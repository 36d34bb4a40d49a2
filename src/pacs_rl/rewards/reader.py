"""The final answer of a completion, read as a reader reads it: the ``sound`` grader's reading.

A completion is cut into statements (lines, and sentences within a line; a box is never cut), and each statement
is read by its grammar: what value it states, of what subject, and how firmly. The statements are read in order,
keeping one *current answer* (docs/EVALUATION.md, "How `sound` reads the final answer", has every rule and every
word list that stays, with what a word outside it does):

- firmest, a closed, non-empty ``\\boxed{}``; then a **named answer**: the answer's name ("the answer / result /
  solution") joined to its value by any copula (a whole word: "is", "are", "equals", ...) or any separator a label
  takes (":", "=", "-", "→", "'s", or none: "Answer 55"), "X is the answer", a label over its value, a JSON field,
  a table cell, and a **correction** that states a value ("Wait, that's wrong: 47 + 8 = 55."); then a
  **conclusion** ("So 47 + 8 = 55.") or a named quantity ("the sum of 47 and 8 is 55"); then a **plain statement**
  of a value, with any subject ("47 + 8 = 55", "The value of x is 5.", "25 + 6, which is 11", "55, easy.");
- a later value replaces the current answer unless weaker (a plain statement never replaces a box or a named
  answer), but **the final lines must agree**: two values that surely differ, in the answer's statement and the
  last one before it that gave a value, since the last revision ("Wait", "after checking", a check that found the
  answer wrong), are several values whichever comes last (:func:`_conflict`); a box settles what came before it;
- nothing else replaces the answer: not a **check** (labelled, after a hesitation, or an equation that recovers a
  number of the answer's statement from it), not the **working after an answer given first** ("55\\n\\nHere is
  why: ..."), not an aside, not a statement with digits that states no value ("I added 34 to 34."), not a
  retraction that states no value ("Wait, no.");
- a phrase that is **negated** ("the answer is not 54"), **hypothetical** ("suppose the answer is 50"), or
  **attributed** ("John says the answer is 50") commits to nothing; a question states no answer; "There's no
  answer." withdraws the one given;
- a **hedged** statement ("probably 55", "I think the answer is 55", "about 55"), or one followed at once by a
  hedge or another value ("The answer is 55. Maybe.", "Or 56."), is refused; a **list** ("x = 2 or x = 3", "The
  roots are 2 and 3") is several values, kept in :attr:`Reading.values`: one answer where the gold is a set.

The reader never chooses among candidates by their truth (that would make the grader an answer oracle): the
final statement decides, and the grader refuses it when it is false ("40 + 8 = 55"), hedged, or several values.
The instruction's empty box (``\\boxed{}`` copied from "put your final answer within \\boxed{}") is read as
absent; HTML comments, LaTeX comment lines and code fences are not read.

Every pass is linear in the completion's length, and each statement is matched a fixed number of times. The
patterns use no possessive quantifier or atomic group (Python's ``re`` accepts them only from 3.11; the package
supports 3.10): a repeat is followed only by what it cannot match itself (``\\s*`` before a word), two repeats of
one class never touch (``[\\s*_]*(?::[\\s*_]*)?``, not ``[\\s*_]*:?[\\s*_]*``), and a pattern anchored at the end
is searched only over a bounded tail, so that a failed match gives back each character once.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field, replace
from fractions import Fraction

from pacs_rl.rewards.answers import (
    EXPLANATION,
    box_spans,
    clean_answer,
    evaluate,
    number_value,
    statement_subject,
    statement_value,
    value_like,
)

# ----------------------------------------------------------------------------------------------- vocabulary
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
_ARROWS = ("=>", "->", "→", "⇒", "⟹", "⟶", "-", "–", "—")
# "the answer is", "the final answer to 47 + 8 is", "Final Answer:", "the sum of 47 and 8 is", "answer within is:"
_PHRASE = re.compile(
    rf"(?<![\w-])(?:(?P<det>{_DET})\s+)?(?:{_MOD}\s+){{0,2}}(?P<noun>{_STRONG}|{_QUANTITY})(?![\w-])"
    r"(?P<comp>[ \t]+(?:to|for|of|in|within|between|from)(?![\w-])(?:[^=:\n.!?;,]|[.,](?=\d)){0,80}?)?"
    rf"[\s*_`\"'’]*(?P<cop>{_COPULA})(?![A-Za-z])",
    re.IGNORECASE,
)
# a label with no separator at the start of its statement: "Answer 55", "Final answer $55$", "#### 55"
_BARE_LABEL = re.compile(
    rf"[\s>#*_]*(?:(?:{_DET}\s+)?(?:{_MOD}\s+){{0,2}}answer(?![\w-])[\s*_]*|#{{4}}\s*)(?=[-−+$\\\d(])",
    re.IGNORECASE,
)
# "55 is the answer", "which is the final answer", "This is the answer."
_REVERSE = re.compile(
    rf"(?<![\w-])(?:is|was|as|be)\s+(?:{_DET}\s+)?(?:{_MOD}\s+){{0,2}}{_STRONG}(?![\w-])", re.IGNORECASE
)
# a line that is only a label: "Answer:", "### Final Answer", "**Final answer**", "| Answer |", "Solution:"
_LABEL_ONLY = re.compile(
    rf"[\s>#*_`\"'’{{|:-]*(?:{_DET}\s+)?(?:{_MOD}\s+){{0,2}}(?:{_STRONG}|{_QUANTITY})[\s*_`\"'’:|}}]*",
    re.IGNORECASE,
)
_CONCLUSION = (
    r"(?:so|thus|therefore|hence|finally|consequently|in\s+conclusion|in\s+summary|in\s+short|in\s+total"
    r"|overall|altogether|as\s+a\s+result)(?![\w-])"
)
_CONCLUSION_START = re.compile(rf"(?:^|[,;:]\s*|\s-\s)(?:and\s+)?{_CONCLUSION}[\s,:]*", re.IGNORECASE)
# a revision: what the completion said before it is withdrawn ("Wait, ...", "after checking, ..."); a hesitation
# ("Hmm, ...") is read as one too, unless what follows it checks the answer (_HESITATION)
_CORRECTION = re.compile(
    r"(?:^\s*|[,;:]\s*|\.\.\.\s*)(?:(?:and|but|no|oh),?\s+)?(?:wait|actually|oops|correction|sorry|no(?=[,.!:;])|hold\s+on"
    r"|hmm+|on\s+second\s+(?:thought|look)|let\s+me\s+(?:re\w*|correct|fix)|i\s+made\s+(?:a|an)\s+(?:mistake|error)"
    r"|that['’]?s\s+(?:wrong|incorrect|not\s+right)|that\s+is\s+(?:wrong|incorrect|not\s+right)"
    r"|(?:after|on|upon)\s+(?:re-?)?(?:check\w*|calculat\w*|comput\w*)|re-?check\w*|recalculat\w*|recomput\w*"
    r"|scratch\s+that|i\s+mean)(?![\w-])[\s,:!.]*",
    re.IGNORECASE,
)
_HESITATION = re.compile(
    r"^(?:hmm+|well|ok(?:ay)?|alright|let\s+me\s+see|let['’]s\s+see)(?![\w-])", re.IGNORECASE
)
# a check that finds the answer wrong ("54 - 8 = 46, not 47", "that is wrong"): its conclusion corrects the answer
_MISMATCH = re.compile(
    r"(?<![\w-])(?:wrong|incorrect|mistaken|mistake|an?\s+error|not\s+equal|does(?:n['’]t|\s+not)\s+(?:match|work"
    r"|check\s+out|equal)|is(?:n['’]t|\s+not)\s+(?:right|correct))(?![\w-])|,\s*not\s+[-−]?\d|≠|\\neq?(?![A-Za-z])",
    re.IGNORECASE,
)
# the working after an answer given first: "55. Here is why: ...", "Explanation: ..."; read as a check of it
_EXPLANATION_HEAD = re.compile(
    r"^(?:here(?:['’]s|\s+is)\s+(?:why|how)|to\s+see\s+(?:this|why)|(?:explanation|reasoning|working|derivation"
    r"|why|how|work(?:ed)?(?:\s+out)?)\s*(?::|$)|because(?![\w-]))",
    re.IGNORECASE,
)
# "<any subject> is <value>" in a plain statement ("The value of x is 5", "The probability is 1/3", "25 + 6, which is
# 11"): the last copula of the statement, a whole word
_SUBJECT_COPULA = re.compile(
    r"(?<![\w-])(?:is|are|was|were|equals|(?:is\s+)?equal\s+to|comes\s+(?:out\s+)?to|works\s+out\s+to|becomes"
    r"|remains|(?:will|would|should|must)\s+be)(?![\w-])",
    re.IGNORECASE,
)
# a statement that denies there is an answer withdraws the one given: "There's no answer.", "No answer."
_NO_ANSWER = re.compile(
    r"(?:so,?\s+)?(?:there\s+is|there['’]s|there\s+are|i\s+have|we\s+have)\s+no\s+(?:(?:final|real|valid)\s+)?answers?"
    r"(?![\w-])|no\s+answer[\s.!]*$",
    re.IGNORECASE,
)
# subjects that name no quantity ("There are 2 numbers", "We are at 40"), and clauses that state a reason or a
# time, not the result ("since 24 is 2 times 12")
_NO_QUANTITY = re.compile(
    r"(?:there|here|i|we|you|he|she|they|since|because|as|when|while|although|though|whereas|where|after|before"
    r"|until|once)(?![\w-])",
    re.IGNORECASE,
)
_VERIFICATION = re.compile(
    r"^(?:(?:we|i|you)\s+(?:can|may|could|will|should)\s+(?:now\s+)?(?=check|verify|confirm|double))?"
    r"(?:check(?:ing)?|verif(?:y|ying|ication)|proof|sanity\s+check|double[- ]check(?:ing)?"
    r"|let(?:['’]s|\s+us|\s+me)\s+(?:check|verify|double[- ]check|confirm)|to\s+(?:check|verify|confirm))"
    r"(?![\w-])",
    re.IGNORECASE,
)
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
_ASIDE = re.compile(r"^[\s*_]*(?:\(|\[(?!\d)|notes?\b|remarks?\b|aside\b|edit\b|p\.\s*s\.)", re.IGNORECASE)
_NOTES = re.compile(
    r"[\s*_#]*(?:notes?|remarks?|edit(?:ed)?(?:\s+by\s+[^:\n]{1,40})?)[\s*_]*(?::[\s*_]*)?", re.IGNORECASE
)
_HYPOTHETICAL = re.compile(
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
_OR_VALUE = re.compile(r"(?<![\w-])(?:or|either|if\s+not)(?![\w-])|\\pm(?![A-Za-z])|±", re.IGNORECASE)
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
# markers whose digits are not a value: list items, steps, footnotes ("1.", "2)", "Step 3:", "[1]", "(a)")
_MARKERS = re.compile(
    r"(?:[\s>|:&]+|\\(?:begin|end)\{[^{}]*\}|[-*+•](?=\s)|#{1,6}(?=\s)|\(?\d{1,3}[.)](?=\s)|\(?[A-Za-z][.)](?=\s)|\[\d{1,3}\]"
    r"|(?:step|problem|part|case|question|example)\s*\d{1,3}\s*[:.)-]?(?=\s|$))*",
    re.IGNORECASE,
)
_PRONOUN_IS = re.compile(r"(?:but\s+)?(?:it|this|that)(?:['’]s|\s+is|\s+was)\s+", re.IGNORECASE)
_PRONOUN_SUBJECT = re.compile(r"(?:this|that|it|these|those)", re.IGNORECASE)
_DIGIT = re.compile(r"(?<![A-Za-z\d])\d")  # a digit of a number, not of a name ("sepehr2010", "H2O")
_NUMBER_TOKEN = re.compile(r"(?<![\d.])\d+(?:\.\d+)?")
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


# ---------------------------------------------------------------------------------------------- statements
@dataclass(frozen=True)
class Statement:
    """A sentence or line of the completion: ``text`` is ``completion[start:end]``; ``paragraph`` counts the
    blank lines before it; ``question`` is whether it ends in a question mark."""

    start: int
    end: int
    text: str
    paragraph: int
    question: bool


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
                column = next((j for j, c in enumerate(cells) if _LABEL_ONLY.fullmatch(c)), None)
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


# -------------------------------------------------------------------------------------------- the walk
@dataclass(frozen=True)
class _Claim:
    """A value the completion gave: its statement, how firmly (0 a plain statement, 1 a conclusion or a named
    quantity, 2 an answer's name, a label or a correction, 3 a box), what it was stated of ("47 + 8" in "47 + 8 =
    55", "sum of 47 and 8"; "" for an answer's name or a box) and its value."""

    statement: int
    rank: int
    subject: str
    value: str
    key: Fraction | None  # the number it comes to (_value_key)
    numbers: frozenset[str]  # the numbers it writes


@dataclass
class _State:
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
    claims: deque[_Claim] = field(default_factory=lambda: deque(maxlen=8))  # the last values given since the
    # last revision (_commit): the final lines hold no more
    explaining: bool = False  # past "Here is why:" after an answer: the working, which gives no new answer
    check_mismatch: bool = False  # the check of this paragraph found the answer wrong


def _markers_end(text: str) -> int:
    return _MARKERS.match(text).end()


def _clause_prefix(text: str, pos: int) -> str:
    """The text of ``text``'s clause before ``pos`` (after the last comma, colon, "then" or "but"), within the
    240 characters before it."""
    last = max(pos - 240, 0)
    for m in _CLAUSE.finditer(text, last, pos):
        last = m.end()
    return text[last:pos]


def _cut_explanation(content: str) -> str:
    cut = EXPLANATION.search(content)
    return content[: cut.start()] if cut else content


def _answer_like(content: str) -> bool:
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
_MARK = re.compile(r"(?:\s*(?:[!✓✔✅☑]|[:;]-?[)D(]|\(\s*[✓✔]\s*\)))+$")
_CLOSING = re.compile(r"[\s\"'’`,]*(?:[}\]]+[\s\"'’`,]*)?$")


def _phrase_value(text: str, pos: int) -> tuple[str, bool]:
    """The value a phrase commits to, from ``pos`` (after its copula) to the end of its statement; and whether
    another value is offered beside it ("55 or 56", "55 (or 56)", "$55$ or $56$"). A hedge word before it
    ("probably 55") is left to the statement's hedge; a closing mark ("55!", "55 ✓") and a JSON field's closing
    quote and brace (``"answer": "55"}``) are not part of it."""
    rest = re.sub(r"^[ \t]*[*_]+(?=\s)", "", text[pos:])  # the bold of "**Answer:** 55" closing
    rest = re.sub(r"(?<!\\)\$", "", rest).lstrip(" \t")  # inline math read as its text: "$a$ * $b$ = 560"
    rest = rest[_FILLER.match(rest).end() if _FILLER.match(rest) else 0 :]
    rest = rest[_HEDGE_WORD.match(rest).end() if _HEDGE_WORD.match(rest) else 0 :]
    rest = _strip_end(rest.rstrip(" \t.;"), _MARK)
    if rest.count("{") < rest.count("}") or rest.count("[") < rest.count("]"):
        rest = _strip_end(rest, _CLOSING)
    for opening, closing in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if rest.startswith(opening):
            end = rest.find(closing, len(opening))
            if end > 0:
                inner, after = rest[len(opening) : end].strip(), rest[end + len(closing) :]
                return clean_answer(inner), _offers_another(after)
            break
    cut = _cut_explanation(rest)
    return clean_answer(cut), _offers_another(rest[len(cut) :]) or _offers_another(cut)


def _strip_end(text: str, pattern: re.Pattern) -> str:
    """``text`` without what ``pattern`` (anchored at the end) matches in its last 40 characters (a pattern
    anchored at the end, searched over a whole text, rescans a run of spaces from each of its positions)."""
    head, tail = text[:-40], text[-40:]
    return head + pattern.sub("", tail)


def _offers_another(text: str) -> bool:
    """Whether the text right after a value offers another one ("or 56", "(or 56)", "\\pm 3"), up to where an
    explanation starts ("75 cents since ... 75 cents or less" offers nothing)."""
    if _DOUBTED_VALUE.search(text):
        return True  # "55 so possibly 56", "55, maybe 56"
    cut = _AFTER_CLAUSE.search(text)
    text = text[: cut.start()] if cut else text
    return bool(_OR_VALUE.search(text)) and _DIGIT.search(text) is not None


def _hedged(text: str, value_start: int | None = None) -> bool:
    """A hedge in the statement ``text``, or an adverb of doubt right before its value at ``value_start``."""
    return _HEDGE.search(text) is not None or (value_start is not None and _doubted(text, value_start))


def _doubted(text: str, value_start: int) -> bool:
    """An adverb of doubt or of rounding right before the value at ``value_start`` ("probably 55")."""
    return _ADVERB_BEFORE.search(text[max(0, value_start - 48) : value_start]) is not None


def _noun_starts_clause(body: str, pos: int, first: int) -> bool:
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


def _uncommitted(body: str, pos: int) -> bool:
    """Whether the clause before ``pos`` makes a phrase commit to nothing: a hypothesis ("suppose", "if") or
    someone's claim ("John says", "I thought")."""
    clause = _clause_prefix(body, pos)
    return bool(_HYPOTHETICAL.search(clause) or _ATTRIBUTED.search(clause))


def _negated_before(body: str, pos: int) -> bool:
    return re.search(r"(?:not|n['’]t|≠|\\neq?)\s*(?:\$\s*)?$", body[max(0, pos - 12) : pos]) is not None


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


def _number_of(reading: Reading | None) -> str | None:
    """The number a reading states (the last side of an equation, when it is one number), for the check rule."""
    if reading is None:
        return None
    last = signed_numbers(reading.text.rsplit("=", 1)[-1])
    return last[-1] if len(last) == 1 else None


def _value_key(value: str) -> Fraction | None:
    """What a value comes to, for telling two values apart: the last side of an equation when it is a number
    written as one (``47 + 8 = 55``, ``55``, ``\\frac{1}{2}`` and ``0.5``), or None where the reader cannot tell
    (``2\\sqrt{3}``, ``x + 1``, ``76 - 1``: an unfinished step is no value)."""
    return number_value(value.rsplit("=", 1)[-1])


def _differ(a: str, b: str) -> bool:
    """Two values that are surely different (both come to a number, and not the same one)."""
    ka, kb = _value_key(a), _value_key(b)
    return ka is not None and kb is not None and ka != kb


def _uses_answer(value: str, state: _State) -> bool:
    """An equation whose first side uses the current answer's number ("55 - 8 = 47" after 55)."""
    number = _number_of(state.current)
    return number is not None and "=" in value and number in signed_numbers(value.split("=")[0])


def _is_verification(value: str, state: _State) -> bool:
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


def read_final_answer(completion: str) -> Reading | None:
    """The final answer of ``completion`` as this module reads it, or None when it gives none."""
    text, boxes = prepare(completion)
    state, b = _State(text=text), 0
    for i, st in enumerate(statements(text, boxes)):
        while b < len(boxes) and boxes[b][1] <= st.start:
            b += 1
        inside = []
        for box in boxes[b:]:
            if box[0] >= st.end:
                break
            inside.append(box)
        before = state.current
        state.statement_start = st.start
        _read_statement(state, i, st, inside)
        if state.current is not before and state.statement == i:
            state.numbers = frozenset(signed_numbers(st.text))
    return state.current


def _aside(state: _State, body: str) -> bool:
    """Whether ``body`` is an aside: a remark in brackets (until they close, over several sentences) or a note."""
    opened = state.aside_depth > 0 or (_ASIDE.match(body) is not None and body.lstrip(" *_")[:1] in "([")
    if opened:
        state.aside_depth = max(state.aside_depth + body.count("(") + body.count("[") - body.count(")")
                                - body.count("]"), 0)  # fmt: skip
        return True
    return _ASIDE.match(body) is not None


def _conflict(earlier: _Claim, later: _Claim) -> bool:
    """Two values of the final lines that cannot both be the answer, whichever comes last: surely different,
    and either stated of one subject ("43 - 4 = 38. So, 43 - 4 = 39."; "Therefore, 25 + 6 equals 31. ...
    25 + 6, which is 11"), or the earlier one committed and the later given no more firmly ("The answer is 55.
    The answer is 54."; "\\boxed{54}. So the answer is 55."). A box after a step or a phrase settles it: the box
    is where the instruction asks for the final answer ("the total is 448 ... the answer is \\boxed{728}")."""
    if earlier.key is None or later.key is None or earlier.key == later.key:
        return False
    return (earlier.subject != "" and earlier.subject == later.subject) or earlier.rank >= max(later.rank, 2)


def _commit(
    state: _State, i: int, reading: Reading, committed: int = 2, subject: str = "", rank: int | None = None
) -> None:
    """``reading`` becomes the current answer (``committed``: 0 a plain statement, 1 a conclusion, 2 a
    commitment; ``rank``, how firmly, as :class:`_Claim` counts it, ``committed`` unless given). A value that
    conflicts (:func:`_conflict`) with another of the final lines, the values given in its own statement and in the
    last statement before it that gave one, since the last revision, makes it several values."""
    rank = committed if rank is None else rank
    subject = re.sub(r"[\s$]", "", subject).lower()
    key = _value_key(reading.text)
    numbers = frozenset(signed_numbers(reading.text)) if key is not None else frozenset()
    claim = _Claim(i, rank, subject, reading.text, key, numbers)
    previous = max((c.statement for c in state.claims if c.statement < i), default=i)
    final_lines = [c for c in state.claims if c.statement in (i, previous)]
    conflicting = [c for c in final_lines if _conflict(c, claim)] if reading.status == "answer" else []
    if conflicting:  # unless worked from them: "Only \\boxed{361} works. ... 8 + 9 + 361 = \\boxed{378}"
        before = state.text[max(state.statement_start, reading.start - 240) : reading.start]
        used = set(signed_numbers(before))
        if any(not c.numbers & used for c in conflicting):
            reading = replace(reading, status="several")
    state.claims.append(claim)
    state.current, state.committed, state.statement = reading, committed, i
    state.pending_label, state.correcting, state.negated_phrase = -1, False, False


def _revise(state: _State) -> None:
    """A revision ("Wait", "Actually", "after checking"): the values given before it are withdrawn."""
    state.claims.clear()


def _status(hedged: bool, another: bool = False) -> str:
    return "several" if another else "hedged" if hedged else "answer"


def _checks(state: _State, body: str, first: int) -> bool:
    """A statement that checks the answer: labelled ("Check:", "Let me verify"), or a hesitation followed by a
    check ("Hmm, let me check: ...", "Hmm, 55 - 8 = 47." after 55)."""
    if _VERIFICATION.match(body, first):
        return True
    hesitation = _HESITATION.match(body[first:])
    if hesitation is None or state.current is None:
        return False
    rest = body[first + hesitation.end() :].lstrip(" \t,:;.!")
    if _VERIFICATION.match(rest):
        return True
    value = statement_value(rest)
    return value is not None and _uses_answer(value, state)


def _explains(state: _State, body: str, first: int) -> bool:
    """An explanation's head ("Here is why:", "Explanation:") after an answer given first (committed, or a number alone): the working
    that follows explains it and gives no new answer."""
    if state.current is None or _EXPLANATION_HEAD.match(body[first:]) is None:
        return False
    return state.committed == 2 or number_value(state.current.text) is not None


def _read_statement(state: _State, i: int, st: Statement, boxes: list) -> None:
    """Read one statement: a check, a box, a phrase, "X is the answer", a conclusion or correction, a plain
    value, in that order of precedence; then a hedge or another value after the current answer."""
    offset = _markers_end(st.text)
    body, at = _strip_end(st.text[offset:].rstrip(), _MARK), st.start + offset
    first = len(body) - len(body.lstrip())
    after_answer = state.current is not None and state.statement == i - 1
    content = any(ch.isalnum() for ch in body)
    aside = state.notes or st.start < state.note_line or _aside(state, body)
    if aside and _ASIDE.match(body) and body.lstrip(" *_")[:1] not in "([":  # "Note: ...; however, ..."
        line_end = state.text.find("\n", st.start)
        state.note_line = max(state.note_line, len(state.text) if line_end < 0 else line_end)
    if _NOTES.fullmatch(body):
        state.notes = True  # "Notes", "Edit by ...:", "Remark:" heading what follows
    if st.paragraph != state.verifying_paragraph:
        state.check_mismatch = False
    if not aside and _explains(state, body, first):
        state.explaining = True
    if aside or _checks(state, body, first) or (state.explaining and _EXPLANATION_HEAD.match(body[first:])):
        # "Check: ...", "(We might also ...)", "Note: ...", "Here is why: ..."
        if not aside:
            state.verifying_paragraph = st.paragraph
            if _MISMATCH.search(body):  # the check finds the answer wrong: it is withdrawn
                state.check_mismatch = True
                _revise(state)
        acted = _read_boxes(state, i, body, at, boxes, _hedged(body))  # only a box in it commits ...
        if not aside and not acted and state.check_mismatch:  # ... or a conclusion that corrects the answer
            _read_turn(state, i, body, 0, at, _hedged(body), st.paragraph)
        return
    if st.question:
        if _DIGIT.search(body) and state.committed == 0:
            state.current = None  # the last statement with digits asks a question: no value
        return
    if _NO_ANSWER.match(body[first:]):
        state.current = None  # "So 93 + 3 = 96. There's no answer.": the answer is withdrawn
        return
    if st.paragraph == state.verifying_paragraph and _MISMATCH.search(body):
        state.check_mismatch = True
        _revise(state)
    hedged = _hedged(body)
    acted = _read_boxes(state, i, body, at, boxes, hedged)
    tail_start = max(boxes[-1][1] - at, 0) if boxes else 0
    phrased = _read_phrases(state, i, body, first, at, hedged, tail_start)  # also after the statement's last
    acted = acted or phrased  # box: "\\boxed{45}. So the answer is 54." states two values
    if not acted:
        acted = _read_reverse(state, i, body, at, hedged)
    if not phrased and (not acted or boxes):
        acted = _read_turn(state, i, body, tail_start, at, hedged, st.paragraph) or acted
    if not acted:
        unclosed = any(c is None for *_, c in boxes)
        acted = _read_plain(state, i, st, body, at, unclosed)
    if not acted and after_answer and state.current is not None and state.statement == i - 1 and content:
        _read_remark(state, body, first)
    if content and state.pending_label != i:
        state.pending_label = -1


def _read_remark(state: _State, body: str, first: int) -> None:
    """The statement at once after the answer, when it gives no value of its own: a hedge ("Maybe.", "Not
    sure.") makes the answer hedged; another value offered or doubted ("Or 56.", "Or it could be 56.", "I think
    56 is possible.") makes it several values."""
    digits = _DIGIT.search(body) is not None
    remark = _HEDGE_REMARK.search(body) is not None and len(body.split()) <= 8
    offered = digits and (
        _OR_VALUE.match(body, first) is not None
        or _DOUBTED_VALUE.search(body) is not None
        or _OTHER_VALUE.search(body) is not None
        or _HEDGE.search(body) is not None
    )
    if remark or offered:
        state.current = replace(state.current, status="several" if digits else "hedged")


_OTHER_VALUE = re.compile(
    r"(?<![\w-])(?:or|either)\s+(?:(?:it|that|this)(?:['’]s|\s+is|\s+could\s+be)\s+)?[$(]*[-−]?\d",
    re.IGNORECASE,
)
# what joins the values of a list (a comma, "and", "or", "\text{ and }", "\quad"), and the brackets around them
_LIST_TOKEN = re.compile(
    r"\\text\{\s*(?:and|or|,)\s*\}|\\q?quad(?![A-Za-z])|(?<![\w-])(?:and|or)(?![\w-])|,|[{}()\[\]]",
    re.IGNORECASE,
)
_LIST_JOIN = re.compile(r",|(?<![\w-])(?:and|or)(?![\w-])|\\text\{|\\q?quad(?![A-Za-z])", re.IGNORECASE)
# what may stand between two boxes of one list: "\boxed{2}, \boxed{3}", "$\boxed{2}$ and $\boxed{3}$"
_BOX_JOIN = re.compile(
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


def _listed_values(text: str) -> tuple[str, ...]:
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


def _arithmetic(text: str) -> Fraction | None:
    """The value of plain arithmetic (:func:`evaluate`) or of a mixed number (``15\\frac{39}{40}``), or None."""
    mixed = _MIXED.fullmatch(text)
    if mixed is None:
        return evaluate(text)
    sign, whole, num, den = mixed.groups()
    if int(den) == 0:
        return None
    return (-1 if sign else 1) * (int(whole) + Fraction(int(num), int(den)))


def _read_boxes(state: _State, i: int, body: str, at: int, boxes: list, hedged: bool) -> bool:
    """Closed, non-empty boxes commit, unless negated or in a hypothesis or someone's claim; two boxes joined
    by "or" (unless both are numbers of one value), or a box followed by "(or 56)", are several values; boxes
    joined only by commas, "and" or "or" are a list (its values kept); a revision between two boxes ("\\boxed{56},
    and after checking, \\boxed{55}") withdraws the first."""
    acted, previous, listed = False, None, []
    closed = [(s - at, e - at, c) for s, e, c in boxes if c]
    for k, (start, end, content) in enumerate(closed):
        start = max(start, 0)
        if _uncommitted(body, start) or _negated_before(body, start):
            continue
        between = body[previous[0] if previous else 0 : start]
        if _CORRECTION.search(between):
            _revise(state)
            listed = []
        # "\\boxed{\\frac{1}{2}} or \\boxed{0.5}", "\\boxed{15\\frac{39}{40}} or \\boxed{\\frac{639}{40}}": one value
        same = previous is not None and _arithmetic(previous[1]) is not None
        same = same and _arithmetic(previous[1]) == _arithmetic(content)
        joined = not same and previous is not None and _OR_VALUE.search(body, previous[0], start) is not None
        if not same and previous is not None and _BOX_JOIN.fullmatch(between.replace("$", " ")):
            listed = (listed or [previous[1]]) + [content]
        else:
            listed = []
        after = body[end : closed[k + 1][0] if k + 1 < len(closed) else len(body)]
        status = _status(hedged or _doubted(body, start), joined or _offers_another(after))
        values = tuple(listed) if len(listed) >= 2 and not hedged else ()
        if values:
            status = "several"
        _commit(state, i, Reading(content, at + start, "box", status, values), rank=3)
        acted, previous = True, (end, content)
    return acted


def _read_phrases(
    state: _State, i: int, body: str, first: int, at: int, hedged: bool, since: int = 0
) -> bool:
    """Phrases naming the answer ("the answer is 55", "Final answer: 55", "Answer → 55", "the sum of 47 and 8 is
    55", "Answer 55") from ``since`` on; the last one that commits wins. A label with nothing after it
    ("Answer:") takes the next statement's value."""
    acted = False
    matches = [m for m in _PHRASE.finditer(body, since)]
    if not matches and since == 0 and (bare := _BARE_LABEL.match(body, first)) is not None:
        content, another = _phrase_value(body, bare.end())
        if content and value_like(content, digits=False) and _answer_like(content):
            values = _listed_values(body[bare.end() :])
            status = "several" if values else _status(hedged or _doubted(body, bare.end()), another)
            _commit(state, i, Reading(content, at + bare.end(), "phrase", status, values))
            return True
    for k, m in enumerate(matches):
        limit = (
            matches[k + 1].start() if k + 1 < len(matches) else len(body)
        )  # a phrase ends where the next starts
        if _CORRECTION.search(body[matches[k - 1].end() if k else since : m.start()]):
            _revise(state)  # "Wait, no. The answer is 55." (the "no." of "Wait, no." ends no statement)
        if m.group("det") is None and not _noun_starts_clause(body, m.start(), first):
            continue
        quantity = m.group("noun").lower() in ("sum", "difference", "product", "quotient", "total", "value")
        if quantity and since > 0:
            continue  # after a box, only an answer's name commits ("\\boxed{384}. The value of x was unneeded.")
        if quantity and m.group("comp") and not _DIGIT.search(m.group("comp")):
            continue  # "the sum of the ones digits is 15": another quantity
        if quantity and m.group("cop") in ("-", "–", "—"):
            continue  # "the total - 3 = 52": an operation on a quantity
        if _uncommitted(body, m.start()):
            continue
        end = m.end()
        if m.group("neg"):
            turn = re.search(
                r"(?<![\w-])but\s+|[,;]\s*(?:but\s+)?(?:it|this|that)(?:['’]s|\s+is)\s+", body[end:limit]
            )
            if turn is None:
                state.negated_phrase = True
                continue
            end += turn.end()
        content, another = _phrase_value(body[:limit], end)
        if content and m.group("cop") in _ARROWS and not value_like(content, digits=False):
            continue  # after a dash or an arrow, only math: "Answer - Suppose" names no value
        if not content:
            if not body[end:limit].strip(" \t*_:`\"'’|}"):
                state.pending_label = i  # "Answer:" at the end of its line: the value comes next
            continue
        if content.lower().startswith(("not ", "n't ")):
            state.negated_phrase = True
            continue
        if not _answer_like(content):
            continue
        start = max(body.find(content, end), end)
        values = _listed_values(body[end:limit])
        status = "several" if values else _status(hedged or _doubted(body, start), another)
        named = m.group("noun") + (m.group("comp") or "")  # "total of 2 \\cdot 8": a step's quantity
        reading = Reading(content, at + start, "phrase", status, values)
        _commit(state, i, reading, subject=named if quantity else "", rank=1 if quantity else 2)
        acted = True
    if not acted and _LABEL_ONLY.fullmatch(body):
        state.pending_label = i  # "### Final Answer", "**Answer**"
    return acted


def _read_reverse(state: _State, i: int, body: str, at: int, hedged: bool) -> bool:
    """Reverse phrases: "55 is the answer", "you get 26, which is the answer", "This is the final answer." (the
    value just stated, committed)."""
    last = None
    for m in _REVERSE.finditer(body):
        last = m
    if last is None:
        return False
    clause = _clause_prefix(body, last.start())
    if _PRONOUN_CLAUSE.fullmatch(clause):
        if not body[: last.start() - len(clause)].strip(" \t*_#>"):  # "This is the final answer."
            if state.current is None:
                return False
            _commit(state, i, state.current)
            return True
        before = body[: last.start() - len(clause)].rstrip(" ,;:")  # "..., which is the answer"
        clause = _clause_prefix(before, len(before))
        if _uncommitted(before, len(before) - len(clause)):
            return False
    elif _uncommitted(body, last.start()):
        return False
    value = statement_value(clause, verbs=True)
    if value is None:
        return False
    start = max(body.find(value), 0)
    _commit(state, i, Reading(value, at + start, "phrase", _status(hedged or _doubted(body, start))))
    return True


_PRONOUN_CLAUSE = re.compile(r"\s*(?:and\s+)?(?:which|that|this|it)\s*", re.IGNORECASE)


def _read_turn(state: _State, i: int, body: str, tail: int, at: int, hedged: bool, paragraph: int) -> bool:
    """After any box of the statement: "It is 55." right after a negated phrase; a correction ("Wait, 47 + 8 =
    55."; one that states no value waits for the next statement's); a conclusion ("So 47 + 8 = 55.",
    "Therefore, 26 - 0 is 26."). A value that checks the current answer ("So 55 - 8 = 47", "Hmm, 55 - 8 = 47")
    replaces nothing; a conclusion of a check replaces it only where the check found it wrong ("Check: 54 - 8 =
    46, not 47, so 47 + 8 = 55.")."""
    text = body[tail:]
    start = len(text) - len(text.lstrip())
    found, kind = None, ""
    if state.negated_phrase and (m := _PRONOUN_IS.match(text, start)):
        found, kind = statement_value(text[m.end() :]), "phrase"
    if found is None:
        correction = None
        for m in _CORRECTION.finditer(text):
            correction = m
        if correction is not None:
            rest = text[correction.end() :]
            found, kind = statement_value(rest, verbs=True), "correction"
            if _HESITATION.match(correction.group(0).lstrip(" ,;:.")) and (
                _VERIFICATION.match(rest) or (found is not None and _uses_answer(found, state))
            ):
                state.verifying_paragraph = paragraph  # "Hmm, 55 - 8 = 47": a check, not a correction
                return True
            state.correcting = True
            _revise(state)
    if found is None:
        conclusion = None
        for m in _CONCLUSION_START.finditer(text):
            conclusion = m
        if conclusion is not None and not _HYPOTHETICAL.match(text, conclusion.end()):
            rest = text[conclusion.end() :]
            found, kind = _listed_span(rest) or statement_value(rest, verbs=True), "conclusion"
    if found is None:
        return False
    if kind == "conclusion" and (paragraph == state.verifying_paragraph or state.explaining):
        # a conclusion of a check or of the working after the answer ("Proof: ... so s = 279/99999") concludes
        # it, unless the check found the answer wrong and this value is another one, not worked from it
        if not (state.check_mismatch and state.current is not None and _differ(found, state.current.text)):
            return True
        if _uses_answer(found, state):
            return True
        _revise(state)
        kind = "correction"
    if not _is_verification(found, state):
        start = max(text.find(found), 0)
        values = _listed_values(text[start:]) if kind == "conclusion" else ()
        status = "several" if values else _checked(text, found, hedged or _doubted(text, start))
        subject = found.split("=")[0] if "=" in found else statement_subject(text, found)
        reading = Reading(found, at + tail + start, kind, status, values)
        _commit(state, i, reading, 1 if kind == "conclusion" else 2, subject)
    return True


def _listed_span(text: str) -> str | None:
    """The text of a list stated from the start of ``text`` ("x = 2 or x = 3."), or None."""
    if not _listed_values(text):
        return None
    stop = _LIST_STOP.search(text)
    return clean_answer(text[: stop.start()] if stop else text)


def _checked(text: str, value: str, hedged: bool) -> str:
    """The status of a value stated with a verb: ``false`` when what it is stated of can be evaluated and
    differs ("80 + 3 is 11"), else as hedged or not."""
    subject = statement_subject(text, value) if "=" not in value else ""
    left, right = evaluate(subject) if subject else None, evaluate(value)
    if left is not None and right is not None and left != right:
        return "false"
    return _status(hedged)


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
    if len(remark.split()) > 12 or _OR_VALUE.search(remark):
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
    subject = _clause_prefix(body, last.start()).strip(" \t*_\"'’")
    if not subject or _NO_QUANTITY.match(subject) or _uncommitted(body, last.start()):
        return None, "", ()
    rest = body[last.end() :]
    if re.match(r"\s*(?:not|n['’]t|never)(?![\w-])", rest, re.IGNORECASE):
        return None, "", ()
    link = _LINK.match(rest)
    rest = rest[link.end() :] if link else rest
    values = _listed_values(rest)
    if values:
        return _listed_span(rest), subject, values
    value = statement_value(rest)
    if value is None or "=" in value:
        return None, "", ()
    if signed_numbers(subject) and signed_numbers(subject) == signed_numbers(value)[:1]:
        return None, "", ()  # "99 is 99 in decimal form", "20 is indeed 20": an identity states no result
    return value, subject, ()


# where a reason starts after a value: "The roots are 2 and 3 because 2 + 3 = 5"
_REASON = re.compile(r"(?<=\S)\s+(?:because|since|as\s+(?=\S)|given\s+that|due\s+to)(?![\w-])", re.IGNORECASE)


def _plain_value(text: str) -> tuple[str | None, str, tuple[str, ...]]:
    """``(value, subject, values)`` of a plain statement: a list ("2 and 3"), an equation or a value ("47 + 8 =
    55", "55", "55, easy."), a copula with any subject ("The value of x is 5"), a value and a remark ("55
    (checked twice)"); ``(None, "", ())`` for any other."""
    values = _listed_values(text)
    if values:
        return _listed_span(text), "", values
    found = statement_value(text)
    if found is not None and "=" not in found and (cut := _value_before_remark(text)) is not None:
        return cut, "", ()  # "55, easy."
    if found is not None:
        return found, "", ()
    found, subject, values = _copula_value(text)
    if found is not None:
        return found, subject, values
    return _value_before_remark(text), "", ()


def _read_plain(state: _State, i: int, st: Statement, body: str, at: int, unclosed: bool) -> bool:
    """A statement that is a plain value ("47 + 8 = 55", "55", "We have 47 + 8 = 55.", "The value of x is 5.",
    "55 (checked twice)", "2 and 3"): the answer while nothing is committed, the value of a pending label or
    correction. A statement with digits that states no value ("I added 34 to 34.") changes nothing."""
    found, subject, values = None, "", ()
    reason = _REASON.search(body)
    if reason is not None and not unclosed:  # "The roots are 2 and 3 because 2 + 3 = 5": the value before
        found, subject, values = _plain_value(body[: reason.start()])
    if found is None and not unclosed:
        found, subject, values = _plain_value(body)
    if found is None:
        return False
    hedged = _hedged(body, max(body.find(found), 0))
    status = "several" if values else _status(hedged)
    if state.correcting or state.pending_label >= 0:
        kind = "correction" if state.correcting else "label"
        if not _is_verification(found, state):
            _commit(state, i, Reading(found, at + max(body.find(found), 0), kind, status, values))
        return True
    if (
        state.committed == 2
        or st.paragraph == state.verifying_paragraph
        or state.explaining
        or _is_verification(found, state)
    ):
        return True  # a plain value replaces a plain line or a conclusion, never a commitment
    if state.tries_paragraph != st.paragraph:
        state.tries, state.tries_paragraph = {}, st.paragraph
    first_side, _, last_side = found.rpartition("=")
    key = first_side.split("=")[0].replace(" ", "") or subject.replace(" ", "").lower()
    tried = state.tries.setdefault(key, set())
    if not first_side or number_value(last_side) is not None:  # a try ends on a number, not "76 - 1"
        tried.add(last_side.replace(" ", "").rstrip("."))
    several = len(tried) > 1 or _offers_another(body[body.find(found) + len(found) :])
    reading = Reading(found, at + max(body.find(found), 0), "line", "several" if several else status, values)
    _commit(state, i, reading, 0, first_side or subject)
    return True
