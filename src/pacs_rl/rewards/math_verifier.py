"""Verifiable math reward: is the completion's final answer mathematically equal to the gold answer?

Grading follows the PACS authors' reward (ritzz-ai/PACS ``src/reward_function.py``), built on
``math-verify``: the gold answer is wrapped in ``\\boxed{...}`` and parsed as LaTeX; the prediction is read
by LaTeX and plain-expression extraction. On top of that this module adds, in this order:

1. boxed answers take precedence: when the completion holds a ``\\boxed{...}``/``\\fbox{...}``/``\\boxed x``,
   the LAST box is the answer and the rest of the text is not read;
2. anti-hacking rules (see ``docs/EVALUATION.md, "Verifier"``): an empty or unclosed last box is "no_answer"; several
   boxes with mathematically different contents score 0 ("multiple_answers"); text that repeats the
   prompt (when the prompt is given) is removed before extraction; when the gold answer is a plain number,
   an answer that is still an arithmetic expression of numbers ("33 - 51" for -18) scores 0
   ("unevaluated"): math-verify would evaluate it, so restating the question would be rewarded;
3. ``strict=True`` accepts only a non-empty last box (no plain-text fallback).

Everything here runs without any time bound of its own (math-verify's ``signal.alarm`` timeouts are
switched off so it works in any thread). ``pacs_rl.rewards.pool`` adds the bound: a wall-clock timer in
the thread that owns signals, or a worker process that is killed and replaced when it overruns.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

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
    "multiple_answers",  # several boxes with different contents (hedging): scored 0
    "unevaluated",  # the gold is a number but the answer is an expression of numbers (33 - 51): scored 0
    "timeout",  # the check overran its time limit: scored 0
    "parse_error",  # the gold answer could not be parsed, or math-verify failed internally
    "empty_gold",  # the gold answer is empty or missing: a data problem, scored 0
    "worker_crash",  # the worker process died on this input (e.g. out of memory): scored 0
)

# Gold is parsed as LaTeX (the authors wrap it in \boxed{}); predictions by plain expressions and LaTeX.
_GOLD_TARGETS = (LatexExtractionConfig(),)
_PRED_TARGETS = (ExprExtractionConfig(), LatexExtractionConfig())
_BOX_TARGETS = (LatexExtractionConfig(boxed_match_priority=0),)
_EXPR_TARGETS = (ExprExtractionConfig(),)

# A plain number: -18, 3.5, 1,000, 1{,}000, 10\% (what a gold answer of a computation looks like).
_PLAIN_NUMBER = re.compile(r"\s*[-+−]?\s*(?:\d{1,3}(?:(?:,|\{,\})\d{3})+|\d+)(?:\.\d+)?\s*(?:\\?%)?\s*")
# Two numbers joined by a binary operator: 33 - 51, 2*3, 4 \times 5, 6\cdot7, 8 ÷ 2, 29+41.
_NUMBER_OPERATION = re.compile(r"\d\s*\)?\s*(?:[-+*/×÷−]|\\times|\\cdot|\\div)\s*\(?\s*[-+−]?\s*\d")

_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_SCI_NUMBER = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+))[eE]([-+]?\d+)\s*")
_TEXT_OPTION = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf)\{\s*\(\s*([^{}()]+?)\s*\)\s*\}")
_MAX_EXTRACTED_CHARS = 200


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check. ``score`` is 1.0 only when ``reason == "correct"``."""

    score: float
    extracted: str | None
    reason: str


def find_boxes(text: str) -> list[str | None]:
    """Contents of every ``\\boxed``/``\\fbox`` in ``text``, in order of appearance.

    Handles nested braces (``\\boxed{\\frac{1}{2}}``), a space before the brace and the brace-less form
    ``\\boxed 25`` (read up to the next whitespace or ``$``, trailing ``.,;:`` dropped). An unclosed box
    (a generation cut off inside it) yields ``None``; an empty box yields ``""``.
    """
    boxes: list[str | None] = []
    for match in _BOX_COMMAND.finditer(text):
        i = match.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            depth, start = 0, i + 1
            for j in range(i, len(text)):
                if text[j] == "{" and text[j - 1] != "\\":
                    depth += 1
                elif text[j] == "}" and text[j - 1] != "\\":
                    depth -= 1
                    if depth == 0:
                        boxes.append(_strip_trailing_punctuation(text[start:j]))
                        break
            else:
                boxes.append(None)  # unclosed
        elif i > match.end():  # `\boxed 25`: a space, then a token
            boxes.append(_strip_trailing_punctuation(re.match(r"[^\s$]*", text[i:]).group(0)))
        else:
            boxes.append("")  # `\boxed` followed by neither a brace nor a space
    return boxes


def _strip_trailing_punctuation(content: str) -> str:
    # "\boxed{104.}" and "\boxed{104}" are the same answer; LaTeX spacing commands at the end too.
    return re.sub(r"(?:\s|\\[,;:! ]|[.,;:])+$", "", content.strip())


def _clean_box(content: str) -> str:
    """Undo answer wrappers math-verify reads as text: ``\\textbf{(073)}`` -> ``073``; ``4.5e33`` -> LaTeX."""
    wrapped = _TEXT_OPTION.fullmatch(content)
    if wrapped:
        content = wrapped.group(1)
    sci = _SCI_NUMBER.fullmatch(content)
    if sci:
        content = f"{sci.group(1)}\\times 10^{{{int(sci.group(2))}}}"
    return content


def remove_prompt_echo(completion: str, prompt: str | None) -> str:
    """Blank out text of ``completion`` that repeats ``prompt``.

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
    # Plain scientific notation ("3.83e35", Minerva) reads in LaTeX as 3.83·e·35: rewritten first.
    answer = _clean_box(answer)
    gold = _mv_parse("\\boxed{" + answer + "}", _GOLD_TARGETS, parsing_timeout=None)
    if not gold:  # not LaTeX: try a plain expression ("np.arcsin(10/13)" still fails: counted)
        gold = _mv_parse(answer, _EXPR_TARGETS, parsing_timeout=None)
    return gold


def _parse_box(content: str) -> list:
    content = _clean_box(content)
    parsed = _mv_parse("\\boxed{" + content + "}", _BOX_TARGETS, parsing_timeout=None)
    if not parsed:
        parsed = _mv_parse(content, _EXPR_TARGETS, parsing_timeout=None)
    return parsed


def _equal(gold: list, pred: list) -> bool:
    return bool(pred) and bool(_mv_verify(gold, pred, timeout_seconds=None))


def _normalise_box(content: str) -> str:
    content = _clean_box(content)
    return re.sub(r"\s+|\\[,;!: ]|\\left|\\right", "", content).replace("\\dfrac", "\\frac")


def _boxes_agree(contents: list[str]) -> bool:
    """True when every box holds the same answer as the last one (textually or mathematically)."""
    last = contents[-1]
    others = {c for c in contents[:-1] if _normalise_box(c) != _normalise_box(last)}
    if not others:
        return True
    last_parsed = _parse_box(last)
    return all(_equal(_parse_box(c), last_parsed) for c in others)


def extract_answer(completion: str, strict: bool = False, prompt: str | None = None) -> str | None:
    """The final answer as the verifier reads it, for logging; ``None`` when there is none.

    This is the content of the last box when there is one; otherwise (lenient mode only) the string that
    math-verify's plain-expression / LaTeX extraction picks, usually the last number in the text.
    """
    text = remove_prompt_echo(_as_text(completion), prompt)
    boxes = find_boxes(text)
    if boxes:
        return _shorten(boxes[-1]) or None
    if strict:
        return None
    try:
        pred = _mv_parse(text, _PRED_TARGETS, parsing_timeout=None)
    except Exception:
        return None
    return _shorten(_pred_string(pred))


def _pred_string(pred: list) -> str | None:
    if not pred:
        return None
    return str(pred[-1]) if len(pred) > 1 else str(pred[0])


def _unevaluated(extracted: str | None, gold_text: str) -> bool:
    """True when the gold answer is a plain number and the answer read is an operation on numbers.

    "What is 33 - 51?" answered "the answer to 33 - 51 is ..." is read as ``33 - 51``, which math-verify
    evaluates to -18: without this rule, restating the question scores 1 (an RL run on two-digit
    arithmetic learned exactly that). Answers to non-numeric golds (expressions, fractions) are untouched.
    """
    if not extracted or not _PLAIN_NUMBER.fullmatch(gold_text):
        return False
    # an equation read as the answer ("180 + 24 = 204") is judged by its last side, as math-verify compares it
    return bool(_NUMBER_OPERATION.search(extracted.rsplit("=", 1)[-1]))


def check(completion, answer, strict: bool = False, prompt: str | None = None) -> Verdict:
    """Grade one completion against one gold answer, with no time bound (see ``pacs_rl.rewards.verify``).

    Never raises on model output: any failure inside math-verify becomes ``reason="parse_error"``.
    """
    gold_text = _as_text(answer).strip()
    if not gold_text:
        return Verdict(0.0, None, "empty_gold")
    text = remove_prompt_echo(_as_text(completion), prompt)
    try:
        boxes = find_boxes(text)
        if boxes:
            if not boxes[-1]:  # empty or unclosed last box: the declared answer is nothing
                return Verdict(0.0, None, "no_answer")
            contents = [b for b in boxes if b]
            extracted = boxes[-1]
            if len(contents) > 1 and not _boxes_agree(contents):
                return Verdict(0.0, _shorten(extracted), "multiple_answers")
            pred = _parse_box(extracted)
        elif strict:
            return Verdict(0.0, None, "no_answer")
        else:
            pred = _mv_parse(text, _PRED_TARGETS, parsing_timeout=None)
            extracted = _pred_string(pred)
            if not pred:
                return Verdict(0.0, None, "no_answer")
        gold = _parse_gold(gold_text)
        if not gold:
            return Verdict(0.0, _shorten(extracted), "parse_error")
        if _unevaluated(extracted, gold_text):
            return Verdict(0.0, _shorten(extracted), "unevaluated")
        if _equal(gold, pred):
            return Verdict(1.0, _shorten(extracted), "correct")
        return Verdict(0.0, _shorten(extracted), "wrong")
    except Exception:
        return Verdict(0.0, None, "parse_error")
