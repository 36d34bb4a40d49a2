"""Verifiable math reward: is the completion's final answer mathematically equal to the gold answer?

Graders are chosen by name. A name is a base grader, optionally followed by ``+rule`` for opt-in rules
(``paper``, ``strict``, ``paper+restatement``, ``strict+multiple_boxed``):

- ``paper`` (the default everywhere): ``math-verify`` called exactly as the PACS authors call it
  (ritzz-ai/PACS ``src/reward_function.py``): the gold answer wrapped in ``\\boxed{...}`` and parsed with
  LaTeX extraction; the whole completion parsed with plain-expression and LaTeX extraction (math-verify's
  own priorities: a boxed answer or a "final answer is ..." first, the rightmost match wins); then
  ``verify``. A gold that math-verify cannot parse scores 0, as in the authors' ``except`` branch.
- ``strict``: only an answer in ``\\boxed{}`` counts: the content of the last box, read as the paper reads a
  box. No box, an empty or an unclosed last box is "no_answer".
- ``sound`` (the training grader): the final answer as a reader reads it (:mod:`pacs_rl.rewards.reader`),
  refused when hedged, several values or a false statement; where the gold is a plain number, a number written as
  one, compared exactly; else math-verify's equality and a final form (:mod:`pacs_rl.rewards.final_form`); never
  the question's own expression unless that is the gold.

Rules (each refuses an answer the base grader found right, or changes what is read):

- ``restatement``: refuse an answer to a numeric question that is still an operation written in the
  question itself ("33 - 51" for "What is 33 - 51?"): math-verify evaluates it, so restating the question
  would be paid. Needs the question (``prompt=``); without it the rule cannot apply.
- ``multiple_boxed``: refuse a completion whose boxes hold mathematically different answers (hedging).
- ``echo``: ignore text of the completion that repeats the prompt verbatim before reading the answer.

Everything here runs without any time bound of its own (math-verify's ``signal.alarm`` timeouts are
switched off so it works in any thread). ``pacs_rl.rewards.pool`` adds the bound: an interval timer in the
thread that owns signals, or a worker process that is killed and replaced when it overruns.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from pacs_rl.rewards.answers import (
    answer_form,
    box_spans,
    number_value,
    numeric_reading,
    same_number,
    top_level_split,
)
from pacs_rl.rewards.answers import restates_question as restates_question_structure
from pacs_rl.rewards.final_form import form_problem, too_large, value_problem
from pacs_rl.rewards.graders import DEFAULT_GRADER, Grader, parse_grader
from pacs_rl.rewards.reader import read_final_answer

# math-verify logs a warning per unparseable prediction and per disabled timeout; at RL scale that floods
# the console. Failures are counted in ``Verdict.reason`` instead.
for _name in ("math_verify", "math_verify.parser", "math_verify.grader", "math_verify.metric"):
    logging.getLogger(_name).setLevel(logging.ERROR)

from math_verify import ExprExtractionConfig, LatexExtractionConfig  # noqa: E402
from math_verify import parse as _mv_parse  # noqa: E402
from math_verify import verify as _mv_verify  # noqa: E402

REASONS = (
    "correct",  # final answer equals the gold answer
    "wrong",  # an answer was read and it differs from the gold answer
    "no_answer",  # nothing to read: no box (strict), empty/unclosed last box, no number or expression
    "multiple_answers",  # sound: several values where the gold is one; rule multiple_boxed: boxes disagree
    "hedged",  # sound: the final answer is hedged ("probably 55", "The answer is 55. Maybe.")
    "not_final_form",  # sound, MATH-style gold: equal, but padded, unevaluated, unsimplified or several values
    "restatement",  # right, but only as the question's own expression (sound; rule restatement)
    "not_a_number",  # sound: the gold is a plain number and the answer read is an operation or expression
    "timeout",  # the check overran its time limit: scored 0
    "parse_error",  # the gold answer could not be parsed, or math-verify failed internally
    "empty_gold",  # the gold answer is empty or missing: a data problem, scored 0
    "worker_crash",  # the worker process died on this input (e.g. out of memory): scored 0
    "truncated",  # cut off at the token limit: never paid by the training grader (pacs_rl.rewards.cutoff)
)

# The authors' extraction targets: gold by LaTeX (wrapped in \boxed{}), predictions by expressions and LaTeX.
_GOLD_TARGETS = (LatexExtractionConfig(),)
_PRED_TARGETS = (ExprExtractionConfig(), LatexExtractionConfig())

# A plain number: -18, 3.5, 1,000, 1{,}000, 10\% (what a gold answer of a computation looks like).
_PLAIN_NUMBER = re.compile(r"\s*[-+−]?\s*(?:\d{1,3}(?:(?:,|\{,\})\d{3})+|\d+)(?:\.\d+)?\s*(?:\\?%)?\s*")
# Two numbers joined by a binary operator (33 - 51, 2*3, 4 \times 5, 6\cdot7, 8 ÷ 2), once normalized.
_NUMBER_OPERATION = re.compile(r"\d\)?[-+*/]\(?-?\d")
_THOUSANDS = re.compile(r"(?<=\d)(?:,|\{,\})(?=\d{3}(?!\d))")
_FRACTION = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_OPERATOR_SPELLINGS = (
    (re.compile(r"\\times|\\cdot|×|\bmultiplied by\b|\btimes\b"), "*"),
    (re.compile(r"\\div|÷|\bdivided by\b|\bover\b"), "/"),
    (re.compile(r"−|\bminus\b"), "-"),
    (re.compile(r"\bplus\b"), "+"),
    (re.compile(r"\\left|\\right|\$|\\[,;!: ]|\s+"), ""),
)

_MAX_EXTRACTED_CHARS = 200


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check. ``score`` is 1.0 only when ``reason == "correct"``.

    ``form``: the form of the answer read (:data:`pacs_rl.rewards.answers.FORMS`: plain, no_box, several,
    expression, restated, none), for the reward-hacking monitor; None where the check did not get that far."""

    score: float
    extracted: str | None
    reason: str
    form: str | None = None


def find_boxes(text: str) -> list[str | None]:
    """Contents of every ``\\boxed`` in ``text``, in order of appearance (:func:`answers.box_spans`): nested
    braces followed, ``\\boxed 25`` read to the next space, an unclosed box ``None``, an empty one ``""``."""
    return [content for _start, _end, content in box_spans(text)]


def remove_prompt_echo(completion: str, prompt: str | None) -> str:
    """Blank out text of ``completion`` that repeats ``prompt`` (rule ``echo``).

    The whole prompt and each of its lines of at least 16 characters are removed wherever they occur
    verbatim, so a numeral or an expression that only appears in an echoed question is not read as the
    answer. Paraphrases are not detected.
    """
    if not prompt or not completion:
        return completion
    pieces = [prompt.strip()] + [line.strip() for line in prompt.splitlines() if len(line.strip()) >= 16]
    for piece in sorted(set(pieces), key=len, reverse=True):
        if piece:
            completion = completion.replace(piece, " ")
    return completion


def _as_text(value) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _shorten(text: str | None) -> str | None:
    if text is None or len(text) <= _MAX_EXTRACTED_CHARS:
        return text
    return text[: _MAX_EXTRACTED_CHARS - 3] + "..."


def _parse_gold(answer: str) -> list:
    return _mv_parse("\\boxed{" + answer + "}", _GOLD_TARGETS, parsing_timeout=None)


def _read_box(content: str) -> list:
    """A box's content read the way the paper's call reads a completion that ends in that box."""
    return _mv_parse("\\boxed{" + content + "}", _PRED_TARGETS, parsing_timeout=None)


def _pred_string(pred: list) -> str | None:
    """The text math-verify matched (its fallback string, the last item), else the parsed value."""
    if not pred:
        return None
    return str(pred[-1]) if len(pred) > 1 else str(pred[0])


def _read(text: str, grader: Grader) -> tuple[list, str | None]:
    """(parsed prediction, the answer as text) as ``grader``'s base reads ``text``; ([], None) when none."""
    if grader.base == "sound":
        reading = read_final_answer(text)
        if reading is None:
            return [], None
        return _read_box(reading.text), reading.text
    if grader.base == "strict":
        boxes = find_boxes(text)
        if not boxes or not boxes[-1]:  # no box, or an empty/unclosed last box: nothing declared
            return [], None
        return _read_box(boxes[-1]), boxes[-1]
    pred = _mv_parse(text, _PRED_TARGETS, parsing_timeout=None)
    return pred, _pred_string(pred)


def _equal(gold: list, pred: list) -> bool:
    # The authors' math_metric calls verify(gold, pred, 6): float_rounding=6, the default.
    return bool(pred) and bool(_mv_verify(gold, pred, timeout_seconds=None))


def _expression_key(text: str) -> str:
    """An arithmetic expression in one spelling: no spaces or thousands separators, ``\\frac{a}{b}`` as
    ``a/b``, ``\\times``/``\\cdot``/"times" as ``*``, ``\\div``/"divided by" as ``/``, lower case."""
    text = _FRACTION.sub(r"\1/\2", _THOUSANDS.sub("", text.lower()))
    for pattern, replacement in _OPERATOR_SPELLINGS:
        text = pattern.sub(replacement, text)
    return text


def restates_question(answer: str | None, gold: str, question: str | None) -> bool:
    """Rule restatement: the gold is a plain number and ``answer`` is an operation on numbers that the
    question itself writes ("33 - 51" for "What is 33 - 51?", "\\frac{36}{2}" for "What is 36 / 2?",
    "4 \\times 5" for "What is 4 times 5?"), compared in one spelling (:func:`_expression_key`).

    An equation read as the answer ("180 + 24 = 204") is judged by its last side, as math-verify compares
    it; punctuation that ends the sentence ("92 + 5." for "What is 92 + 5?") is not part of the answer. A
    single number, an operation the question does not write ("20 - 2" for 12 + 6, "\\frac{1}{2}" for a
    question that mentions 1 and 2 apart), and answers to non-numeric golds are never refused.
    """
    if not answer or not question or not _PLAIN_NUMBER.fullmatch(gold):
        return False
    # the key holds no whitespace (_expression_key drops it); the sentence's closing punctuation goes too
    key = _expression_key(answer.rsplit("=", 1)[-1]).rstrip(".,;:!?").strip("()")
    if not _NUMBER_OPERATION.search(key):
        return False
    # whole numbers only: "3-5" is not in "33-51", "6*7" is in "compute6*7."
    return re.search(rf"(?<![\d.]){re.escape(key)}(?!\.?\d)", _expression_key(question)) is not None


def _boxes_disagree(text: str) -> bool:
    """Rule multiple_boxed: some non-empty box holds another answer than the last one (text or value)."""
    contents = [b for b in find_boxes(text) if b]
    if len(contents) < 2:
        return False

    def key(c: str) -> str:
        return re.sub(r"\s+|\\[,;!: ]|\\left|\\right", "", c).replace("\\dfrac", "\\frac")

    last = contents[-1]
    others = {c for c in contents[:-1] if key(c) != key(last)}
    last_read = _read_box(last)
    return any(not _equal(_read_box(c), last_read) for c in others)


def extract_answer(completion, grader: str = DEFAULT_GRADER, prompt: str | None = None) -> str | None:
    """The final answer as ``grader`` reads it, for logging; ``None`` when there is none."""
    g = parse_grader(grader)
    text = _as_text(completion)
    if "echo" in g.rules:
        text = remove_prompt_echo(text, prompt)
    try:
        return _shorten(_read(text, g)[1])
    except Exception:
        return None


def check(completion, answer, grader: str = DEFAULT_GRADER, prompt: str | None = None) -> Verdict:
    """Grade one completion against one gold answer, with no time bound (see ``pacs_rl.rewards.verify``).

    ``prompt`` (the question, or the whole prompt) is read by the ``sound`` grader and the rules ``restatement``
    and ``echo``. Never raises on model output: any failure inside math-verify becomes ``reason="parse_error"``.
    """
    g = parse_grader(grader)
    gold_text = _as_text(answer).strip()
    if not gold_text:
        return Verdict(0.0, None, "empty_gold")
    text = _as_text(completion)
    if "echo" in g.rules:
        text = remove_prompt_echo(text, prompt)
    try:
        gold = _parse_gold(gold_text)
        if g.base == "sound":
            verdict = _check_sound(text, gold_text, gold, prompt)
        else:
            verdict = _check_read(text, gold_text, gold, g, prompt)
        form = verdict.form
        if form is None and verdict.extracted is not None:
            form = answer_form(text, verdict.extracted, gold_text, prompt)
        return Verdict(verdict.score, _shorten(verdict.extracted), verdict.reason, form)
    except Exception:
        return Verdict(0.0, None, "parse_error")


def _check_read(text: str, gold_text: str, gold: list, g: Grader, prompt: str | None) -> Verdict:
    """The ``paper`` and ``strict`` graders, with their opt-in rules."""
    pred, extracted = _read(text, g)
    if not gold:  # the authors' math_metric raises here; their compute_score scores it 0
        return Verdict(0.0, extracted, "parse_error")
    if not pred:
        return Verdict(0.0, None, "no_answer", "none")
    if not _equal(gold, pred):
        return Verdict(0.0, extracted, "wrong")
    # Right by the base grader; an opt-in rule may still refuse it.
    if "multiple_boxed" in g.rules and _boxes_disagree(text):
        return Verdict(0.0, extracted, "multiple_answers")
    if "restatement" in g.rules and restates_question(extracted, gold_text, prompt):
        return Verdict(0.0, extracted, "restatement")
    return Verdict(1.0, extracted, "correct")


def _check_sound(text: str, gold_text: str, gold: list, question: str | None) -> Verdict:
    """The ``sound`` grader: the final answer as :mod:`pacs_rl.rewards.reader` reads it; refused when hedged,
    several values or a false statement; a number where the gold is one; never the question's own expression
    unless that is the gold; then equality, exact for numbers and math-verify's (in final form) otherwise."""
    reading = read_final_answer(text)
    if not gold:
        return Verdict(0.0, reading and reading.text, "parse_error")
    if reading is None:
        return Verdict(0.0, None, "no_answer", "none")
    answer, form = reading.text, "plain" if reading.kind == "box" else "no_box"
    if reading.status == "several" and reading.values and _is_list(gold_text):
        answer = ", ".join(reading.values)  # "x = 2 or x = 3" for the set {2, 3}: one list, compared as one
    elif reading.status in ("several", "hedged"):
        return Verdict(
            0.0, answer, "multiple_answers" if reading.status == "several" else "hedged", "several"
        )
    if reading.status == "false":
        return Verdict(0.0, answer, "wrong", form)
    if number_value(gold_text) is not None:  # a number, or a true equation whose last side is that number
        read, kind = numeric_reading(answer)
        if kind == "false":
            return Verdict(0.0, answer, "wrong", form)
        if read is None:
            if kind == "several":
                return Verdict(0.0, answer, "multiple_answers", "several")
            restated = restates_question(answer, gold_text, question)  # the label only: no parsing
            return Verdict(0.0, answer, "not_a_number", "restated" if restated else "expression")
        if not same_number(read, gold_text):  # exactly: math-verify's 6-decimal rounding pays 0 for 1e-7
            return Verdict(0.0, answer, "wrong", form)
        if restates_question_structure(read, gold_text, question):
            return Verdict(0.0, answer, "restatement", "restated")
        return Verdict(1.0, answer, "correct", form)
    return _check_symbolic(answer, form, gold_text, gold, question)


def _is_list(gold: str) -> bool:
    """A gold that is a list or set of values (``2, 3``, ``\\{2, 3\\}``), not one number (``1,000``)."""
    gold = gold.strip()
    if number_value(gold) is not None:
        return False
    return gold.startswith("\\{") or len(top_level_split(gold, ",")) > 1


def _check_symbolic(answer: str, form: str, gold_text: str, gold: list, question: str | None) -> Verdict:
    """A gold that is no plain number: math-verify's equality, then the final form (:mod:`final_form`); an answer
    far longer than the gold is refused before anything parses it, and one that writes a value far larger than the
    gold's before anything evaluates it."""
    if too_large(answer, gold_text) or value_problem(answer, gold_text) is not None:
        return Verdict(0.0, answer, "not_final_form", "expression")
    if not _equal(gold, _read_box(answer)):
        return Verdict(0.0, answer, "wrong", form)
    if restates_question_structure(answer, gold_text, question):
        return Verdict(0.0, answer, "restatement", "restated")
    problem = form_problem(answer, gold_text, question, _same_expression)
    if problem is not None:
        return Verdict(
            0.0, answer, "not_final_form", "several" if problem.startswith("several") else "expression"
        )
    return Verdict(1.0, answer, "correct", form)


def _same_expression(answer: str, gold: str) -> bool:
    """Two expressions equal as the paper's call compares an answer with a gold (for an equation's sides)."""
    return _equal(_parse_gold(gold), _read_box(answer))


def authors_score(completion: str, answer: str) -> float:
    """The PACS authors' own grading call (ritzz-ai/PACS ``src/reward_function.py``), as they make it:
    ``math_metric`` with LaTeX extraction for the gold and expression + LaTeX extraction for the completion,
    the gold wrapped in ``\\boxed{}``, math-verify's own ``signal.alarm`` time limits (5 s per parse and per
    comparison), and 0.0 for any error or timeout.

    The reference the ``paper`` grader is checked against (tests, ``benchmarks/grader_agreement.py``). It
    works only in a process's main thread (math-verify's alarms), and its time limits count wall-clock
    seconds, so use :func:`pacs_rl.rewards.verify` for rewards.
    """
    from math_verify.errors import TimeoutException
    from math_verify.metric import math_metric

    metric = math_metric(gold_extraction_target=_GOLD_TARGETS, pred_extraction_target=_PRED_TARGETS)
    try:
        score, _ = metric(["\\boxed{" + answer + "}"], [completion])
    except (Exception, TimeoutException):  # their compute_score: `except Exception: pass`, timeouts -> 0
        return 0.0
    return float(score)
