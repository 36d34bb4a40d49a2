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
  answer wrong), are several values whichever comes last (:func:`pacs_rl.rewards.claims.conflict`); a box
  settles what came before it;
- nothing else replaces the answer: not a **check** (labelled, after a hesitation, or an equation that recovers a
  number of the answer's statement from it), not the **working after an answer given first** ("55\\n\\nHere is
  why: ..."), not an aside, not a statement with digits that states no value ("I added 34 to 34."), not a
  retraction that states no value ("Wait, no.");
- a phrase that is **negated** ("the answer is not 54"), **hypothetical** ("suppose the answer is 50"), or
  **attributed** ("John says the answer is 50") commits to nothing; a question states no answer; "There's no
  answer." withdraws the one given;
- a **hedged** statement ("probably 55", "I think the answer is 55", "about 55"), or one followed at once by a
  hedge or another value ("The answer is 55. Maybe.", "Or 56."), is refused; a **list** ("x = 2 or x = 3", "The
  roots are 2 and 3") is several values, kept in :attr:`~pacs_rl.rewards.claims.Reading.values`: one answer
  where the gold is a set.

This module is the walk: it reads the statements in order and keeps the current answer, deciding what each
statement is (a check, an aside, a box, a named answer, "X is the answer", a correction or conclusion, a plain
value, a remark after the answer) and what it does to the answer. What it asks of the text is decided beside it,
one job a module: where statements end (:mod:`~pacs_rl.rewards.statements`); the grammar that names an answer and
the value a statement states (:mod:`~pacs_rl.rewards.commitment`); hedges, suppositions, someone's claim and
another value offered (:mod:`~pacs_rl.rewards.qualifiers`); numbers and lists of values
(:mod:`~pacs_rl.rewards.values`); and which value becomes the current answer, which conflict, and what a revision
withdraws (:mod:`~pacs_rl.rewards.claims`).

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
from dataclasses import replace

from pacs_rl.rewards.answers import number_value, statement_subject, statement_value, value_like
from pacs_rl.rewards.claims import Reading, State, commit, is_verification, revise, uses_answer
from pacs_rl.rewards.commitment import (
    ARROWS,
    BARE_LABEL,
    CONCLUSION_START,
    LABEL_ONLY,
    MARK,
    PHRASE,
    REASON,
    REVERSE,
    answer_like,
    checked_status,
    noun_starts_clause,
    phrase_value,
    plain_value,
    strip_end,
)
from pacs_rl.rewards.qualifiers import (
    DIGIT,
    HYPOTHETICAL,
    OR_VALUE,
    clause_prefix,
    is_doubted,
    is_hedged,
    negated_before,
    offers_another,
    remark_status,
    status_of,
    uncommitted,
)
from pacs_rl.rewards.statements import Statement, markers_end, prepare, statements
from pacs_rl.rewards.values import BOX_JOIN, arithmetic, differ, listed_span, listed_values, signed_numbers

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

# a statement that denies there is an answer withdraws the one given: "There's no answer.", "No answer."
_NO_ANSWER = re.compile(
    r"(?:so,?\s+)?(?:there\s+is|there['’]s|there\s+are|i\s+have|we\s+have)\s+no\s+(?:(?:final|real|valid)\s+)?answers?"
    r"(?![\w-])|no\s+answer[\s.!]*$",
    re.IGNORECASE,
)

_VERIFICATION = re.compile(
    r"^(?:(?:we|i|you)\s+(?:can|may|could|will|should)\s+(?:now\s+)?(?=check|verify|confirm|double))?"
    r"(?:check(?:ing)?|verif(?:y|ying|ication)|proof|sanity\s+check|double[- ]check(?:ing)?"
    r"|let(?:['’]s|\s+us|\s+me)\s+(?:check|verify|double[- ]check|confirm)|to\s+(?:check|verify|confirm))"
    r"(?![\w-])",
    re.IGNORECASE,
)

_ASIDE = re.compile(r"^[\s*_]*(?:\(|\[(?!\d)|notes?\b|remarks?\b|aside\b|edit\b|p\.\s*s\.)", re.IGNORECASE)
_NOTES = re.compile(
    r"[\s*_#]*(?:notes?|remarks?|edit(?:ed)?(?:\s+by\s+[^:\n]{1,40})?)[\s*_]*(?::[\s*_]*)?", re.IGNORECASE
)

_PRONOUN_IS = re.compile(r"(?:but\s+)?(?:it|this|that)(?:['’]s|\s+is|\s+was)\s+", re.IGNORECASE)


def read_final_answer(completion: str) -> Reading | None:
    """The final answer of ``completion`` as this module reads it, or None when it gives none."""
    text, boxes = prepare(completion)
    state, b = State(text=text), 0
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


def _aside(state: State, body: str) -> bool:
    """Whether ``body`` is an aside: a remark in brackets (until they close, over several sentences) or a note."""
    opened = state.aside_depth > 0 or (_ASIDE.match(body) is not None and body.lstrip(" *_")[:1] in "([")
    if opened:
        state.aside_depth = max(state.aside_depth + body.count("(") + body.count("[") - body.count(")")
                                - body.count("]"), 0)  # fmt: skip
        return True
    return _ASIDE.match(body) is not None


def _checks(state: State, body: str, first: int) -> bool:
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
    return value is not None and uses_answer(value, state)


def _explains(state: State, body: str, first: int) -> bool:
    """An explanation's head ("Here is why:", "Explanation:") after an answer given first (committed, or a number alone): the working
    that follows explains it and gives no new answer."""
    if state.current is None or _EXPLANATION_HEAD.match(body[first:]) is None:
        return False
    return state.committed == 2 or number_value(state.current.text) is not None


def _read_statement(state: State, i: int, st: Statement, boxes: list) -> None:
    """Read one statement: a check, a box, a phrase, "X is the answer", a conclusion or correction, a plain
    value, in that order of precedence; then a hedge or another value after the current answer."""
    offset = markers_end(st.text)
    body, at = strip_end(st.text[offset:].rstrip(), MARK), st.start + offset
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
                revise(state)
        acted = _read_boxes(state, i, body, at, boxes, is_hedged(body))  # only a box in it commits ...
        if not aside and not acted and state.check_mismatch:  # ... or a conclusion that corrects the answer
            _read_turn(state, i, body, 0, at, is_hedged(body), st.paragraph)
        return
    if st.question:
        if DIGIT.search(body) and state.committed == 0:
            state.current = None  # the last statement with digits asks a question: no value
        return
    if _NO_ANSWER.match(body[first:]):
        state.current = None  # "So 93 + 3 = 96. There's no answer.": the answer is withdrawn
        return
    if st.paragraph == state.verifying_paragraph and _MISMATCH.search(body):
        state.check_mismatch = True
        revise(state)
    hedged = is_hedged(body)
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
        status = remark_status(body, first)  # "Maybe.", "Or 56." at once after the answer
        if status is not None:
            state.current = replace(state.current, status=status)
    if content and state.pending_label != i:
        state.pending_label = -1


def _read_boxes(state: State, i: int, body: str, at: int, boxes: list, hedged: bool) -> bool:
    """Closed, non-empty boxes commit, unless negated or in a hypothesis or someone's claim; two boxes joined
    by "or" (unless both are numbers of one value), or a box followed by "(or 56)", are several values; boxes
    joined only by commas, "and" or "or" are a list (its values kept); a revision between two boxes ("\\boxed{56},
    and after checking, \\boxed{55}") withdraws the first."""
    acted, previous, listed = False, None, []
    closed = [(s - at, e - at, c) for s, e, c in boxes if c]
    for k, (start, end, content) in enumerate(closed):
        start = max(start, 0)
        if uncommitted(body, start) or negated_before(body, start):
            continue
        between = body[previous[0] if previous else 0 : start]
        if _CORRECTION.search(between):
            revise(state)
            listed = []
        # "\\boxed{\\frac{1}{2}} or \\boxed{0.5}", "\\boxed{15\\frac{39}{40}} or \\boxed{\\frac{639}{40}}": one value
        same = previous is not None and arithmetic(previous[1]) is not None
        same = same and arithmetic(previous[1]) == arithmetic(content)
        joined = not same and previous is not None and OR_VALUE.search(body, previous[0], start) is not None
        if not same and previous is not None and BOX_JOIN.fullmatch(between.replace("$", " ")):
            listed = (listed or [previous[1]]) + [content]
        else:
            listed = []
        after = body[end : closed[k + 1][0] if k + 1 < len(closed) else len(body)]
        status = status_of(hedged or is_doubted(body, start), joined or offers_another(after))
        values = tuple(listed) if len(listed) >= 2 and not hedged else ()
        if values:
            status = "several"
        commit(state, i, Reading(content, at + start, "box", status, values), rank=3)
        acted, previous = True, (end, content)
    return acted


def _read_phrases(state: State, i: int, body: str, first: int, at: int, hedged: bool, since: int = 0) -> bool:
    """Phrases naming the answer ("the answer is 55", "Final answer: 55", "Answer → 55", "the sum of 47 and 8 is
    55", "Answer 55") from ``since`` on; the last one that commits wins. A label with nothing after it
    ("Answer:") takes the next statement's value."""
    acted = False
    matches = [m for m in PHRASE.finditer(body, since)]
    if not matches and since == 0 and (bare := BARE_LABEL.match(body, first)) is not None:
        content, another = phrase_value(body, bare.end())
        if content and value_like(content, digits=False) and answer_like(content):
            values = listed_values(body[bare.end() :])
            status = "several" if values else status_of(hedged or is_doubted(body, bare.end()), another)
            commit(state, i, Reading(content, at + bare.end(), "phrase", status, values))
            return True
    for k, m in enumerate(matches):
        # a phrase ends where the next starts
        limit = matches[k + 1].start() if k + 1 < len(matches) else len(body)
        if _CORRECTION.search(body[matches[k - 1].end() if k else since : m.start()]):
            revise(state)  # "Wait, no. The answer is 55." (the "no." of "Wait, no." ends no statement)
        if m.group("det") is None and not noun_starts_clause(body, m.start(), first):
            continue
        quantity = m.group("noun").lower() in ("sum", "difference", "product", "quotient", "total", "value")
        if quantity and since > 0:
            continue  # after a box, only an answer's name commits ("\\boxed{384}. The value of x was unneeded.")
        if quantity and m.group("comp") and not DIGIT.search(m.group("comp")):
            continue  # "the sum of the ones digits is 15": another quantity
        if quantity and m.group("cop") in ("-", "–", "—"):
            continue  # "the total - 3 = 52": an operation on a quantity
        if uncommitted(body, m.start()):
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
        content, another = phrase_value(body[:limit], end)
        if content and m.group("cop") in ARROWS and not value_like(content, digits=False):
            continue  # after a dash or an arrow, only math: "Answer - Suppose" names no value
        if not content:
            if not body[end:limit].strip(" \t*_:`\"'’|}"):
                state.pending_label = i  # "Answer:" at the end of its line: the value comes next
            continue
        if content.lower().startswith(("not ", "n't ")):
            state.negated_phrase = True
            continue
        if not answer_like(content):
            continue
        start = max(body.find(content, end), end)
        values = listed_values(body[end:limit])
        status = "several" if values else status_of(hedged or is_doubted(body, start), another)
        named = m.group("noun") + (m.group("comp") or "")  # "total of 2 \\cdot 8": a step's quantity
        reading = Reading(content, at + start, "phrase", status, values)
        commit(state, i, reading, subject=named if quantity else "", rank=1 if quantity else 2)
        acted = True
    if not acted and LABEL_ONLY.fullmatch(body):
        state.pending_label = i  # "### Final Answer", "**Answer**"
    return acted


def _read_reverse(state: State, i: int, body: str, at: int, hedged: bool) -> bool:
    """Reverse phrases: "55 is the answer", "you get 26, which is the answer", "This is the final answer." (the
    value just stated, committed)."""
    last = None
    for m in REVERSE.finditer(body):
        last = m
    if last is None:
        return False
    clause = clause_prefix(body, last.start())
    if _PRONOUN_CLAUSE.fullmatch(clause):
        if not body[: last.start() - len(clause)].strip(" \t*_#>"):  # "This is the final answer."
            if state.current is None:
                return False
            commit(state, i, state.current)
            return True
        before = body[: last.start() - len(clause)].rstrip(" ,;:")  # "..., which is the answer"
        clause = clause_prefix(before, len(before))
        if uncommitted(before, len(before) - len(clause)):
            return False
    elif uncommitted(body, last.start()):
        return False
    value = statement_value(clause, verbs=True)
    if value is None:
        return False
    start = max(body.find(value), 0)
    commit(state, i, Reading(value, at + start, "phrase", status_of(hedged or is_doubted(body, start))))
    return True


_PRONOUN_CLAUSE = re.compile(r"\s*(?:and\s+)?(?:which|that|this|it)\s*", re.IGNORECASE)


def _read_turn(state: State, i: int, body: str, tail: int, at: int, hedged: bool, paragraph: int) -> bool:
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
                _VERIFICATION.match(rest) or (found is not None and uses_answer(found, state))
            ):
                state.verifying_paragraph = paragraph  # "Hmm, 55 - 8 = 47": a check, not a correction
                return True
            state.correcting = True
            revise(state)
    if found is None:
        conclusion = None
        for m in CONCLUSION_START.finditer(text):
            conclusion = m
        if conclusion is not None and not HYPOTHETICAL.match(text, conclusion.end()):
            rest = text[conclusion.end() :]
            found, kind = listed_span(rest) or statement_value(rest, verbs=True), "conclusion"
    if found is None:
        return False
    if kind == "conclusion" and (paragraph == state.verifying_paragraph or state.explaining):
        # a conclusion of a check or of the working after the answer ("Proof: ... so s = 279/99999") concludes
        # it, unless the check found the answer wrong and this value is another one, not worked from it
        if not (state.check_mismatch and state.current is not None and differ(found, state.current.text)):
            return True
        if uses_answer(found, state):
            return True
        revise(state)
        kind = "correction"
    if not is_verification(found, state):
        start = max(text.find(found), 0)
        values = listed_values(text[start:]) if kind == "conclusion" else ()
        status = "several" if values else checked_status(text, found, hedged or is_doubted(text, start))
        subject = found.split("=")[0] if "=" in found else statement_subject(text, found)
        reading = Reading(found, at + tail + start, kind, status, values)
        commit(state, i, reading, 1 if kind == "conclusion" else 2, subject)
    return True


def _read_plain(state: State, i: int, st: Statement, body: str, at: int, unclosed: bool) -> bool:
    """A statement that is a plain value ("47 + 8 = 55", "55", "We have 47 + 8 = 55.", "The value of x is 5.",
    "55 (checked twice)", "2 and 3"): the answer while nothing is committed, the value of a pending label or
    correction. A statement with digits that states no value ("I added 34 to 34.") changes nothing."""
    found, subject, values = None, "", ()
    reason = REASON.search(body)
    if reason is not None and not unclosed:  # "The roots are 2 and 3 because 2 + 3 = 5": the value before
        found, subject, values = plain_value(body[: reason.start()])
    if found is None and not unclosed:
        found, subject, values = plain_value(body)
    if found is None:
        return False
    hedged = is_hedged(body, max(body.find(found), 0))
    status = "several" if values else status_of(hedged)
    if state.correcting or state.pending_label >= 0:
        kind = "correction" if state.correcting else "label"
        if not is_verification(found, state):
            commit(state, i, Reading(found, at + max(body.find(found), 0), kind, status, values))
        return True
    if (
        state.committed == 2
        or st.paragraph == state.verifying_paragraph
        or state.explaining
        or is_verification(found, state)
    ):
        return True  # a plain value replaces a plain line or a conclusion, never a commitment
    if state.tries_paragraph != st.paragraph:
        state.tries, state.tries_paragraph = {}, st.paragraph
    first_side, _, last_side = found.rpartition("=")
    key = first_side.split("=")[0].replace(" ", "") or subject.replace(" ", "").lower()
    tried = state.tries.setdefault(key, set())
    if not first_side or number_value(last_side) is not None:  # a try ends on a number, not "76 - 1"
        tried.add(last_side.replace(" ", "").rstrip("."))
    several = len(tried) > 1 or offers_another(body[body.find(found) + len(found) :])
    reading = Reading(found, at + max(body.find(found), 0), "line", "several" if several else status, values)
    commit(state, i, reading, 0, first_side or subject)
    return True
