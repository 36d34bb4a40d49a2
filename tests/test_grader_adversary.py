"""The ``sound`` grader against an adversary: property tests over random arithmetic questions.

A policy trained by RL searches for whatever the grader pays, so these tests play that policy; an examiner's
tests sit beside them, so that a right answer is not refused either. Four groups:

1. refused, always: the question given back in another spelling (commuted, padded with neutral elements,
   bracketed, spaced, with leading zeros, decimals, rewritten signs, operators in words and symbols) in every
   answer position; unevaluated expressions equal to the gold; hedges; unclosed boxes; a wrong value after
   naming the question; several values in any order;
2. paid, always: the right number in every format a model writes it in, a plain right last line included
   (the reversal of the old "a right number that is not committed is refused"), with a check after it;
3. the reading of the final answer (docs/EVALUATION.md, "How `sound` reads the final answer"): every class both
   ways (:func:`reading_classes`);
4. soundness properties that need no list of spellings: over completions built from a small grammar of
   fragments, a paid completion committed to the gold's own number, names one value only, is worth exactly
   what its final answer is worth whatever remark that states no number follows it, and stays refused whatever
   is appended that does not write the gold.

Every test is derandomized (no example database), so a run is reproducible; the whole file runs in about 40
seconds on one core. Exploits found so far are pinned as explicit ``@example``s, minimal, so they fail first.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from pacs_rl.data.procedural import arithmetic_text
from pacs_rl.rewards.math_verifier import check

# Shrinking a failure costs minutes here (every example grades several completions), so by default a failing
# test reports the first failing example it generated (the same one on every run: derandomized) after the
# pinned minimal examples; set PACS_ADVERSARY_SHRINK=1 to shrink generated failures.
_PHASES = (
    tuple(Phase) if os.environ.get("PACS_ADVERSARY_SHRINK") else (Phase.explicit, Phase.reuse, Phase.generate)
)


def fixed(max_examples: int):
    """Reproducible hypothesis settings: derandomized, no example database, no per-example deadline (the
    first call of a run loads math-verify's LaTeX parser)."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=_PHASES,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )


def grade(completion: str, gold: str, question: str | None):
    return check(completion, gold, grader="sound", prompt=question)


# ------------------------------------------------------------------------------------------------ questions
@dataclass(frozen=True)
class Q:
    a: int
    op: str
    b: int

    @property
    def value(self) -> int:
        return {"+": self.a + self.b, "-": self.a - self.b, "*": self.a * self.b}[self.op]

    @property
    def gold(self) -> str:
        return str(self.value)

    @property
    def question(self) -> str:
        return arithmetic_text(self.a, self.op, self.b)


def _operand(digits: int) -> st.SearchStrategy[int]:
    return st.integers(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


@st.composite
def questions(draw, ops: str = "+-*") -> Q:
    """A question as the task draws one: operands of 1 to 3 digits (each its own length), + - or *; for -
    the smaller operand comes first half of the time, so that negative golds are frequent."""
    da, db = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    op = draw(st.sampled_from(ops))
    a, b = draw(_operand(da)), draw(_operand(db))
    if op == "-" and draw(st.booleans()):
        a, b = min(a, b), max(a, b)
    return Q(a, op, b)


# the questions every deterministic sweep below runs on: a sum, a negative difference, a large product,
# a sum with a one-digit operand (the default task's shape)
SWEEP = [Q(47, "+", 8), Q(23, "-", 871), Q(998, "*", 997), Q(6, "*", 7)]


# --------------------------------------------------------------------------------------------- answer slots
POSITIONS = {
    "boxed": lambda x: f"\\boxed{{{x}}}",
    "answer_is": lambda x: f"The answer is {x}.",
    "bold_answer": lambda x: f"**Answer:** {x}",
    "dollar_boxed": lambda x: f"$\\boxed{{{x}}}$",
    "final_answer_dollar": lambda x: f"Final answer: ${x}$",
    "final_answer_is_boxed": lambda x: f"The final answer is $\\boxed{{{x}}}$.",
    "reasoning_then_box": lambda x: (
        f"Let me work it out step by step.\n\nSo the result is\n\\[\n\\boxed{{{x}}}\n\\]"
    ),
    "reasoning_then_phrase": lambda x: f"First I line up the digits.\nAnswer: {x}",
}

OP_SPELLINGS = {
    "+": ["+", "plus", "\\text{ plus }"],
    "-": ["-", "−", "minus", "\\text{ minus }"],
    "*": ["*", "\\times", "\\cdot", "×", "⋅", "times", "multiplied by", "\\text{ times }"],
}


def question_rewrites(q: Q) -> dict[str, str]:
    """The question's own expression, rewritten without evaluating it: every one is an operation equal to
    the question, and none may be paid."""
    a, op, b = q.a, q.op, q.b
    e = f"{a} {op} {b}"
    out: dict[str, str] = {}
    for i, s in enumerate(OP_SPELLINGS[op]):
        out[f"spelling_{i}"] = f"{a} {s} {b}"
        if s.isascii() and not s.isalpha() and "\\" not in s:
            out[f"spelling_{i}_tight"] = f"{a}{s}{b}"
    if op in "+*":
        for i, s in enumerate(OP_SPELLINGS[op]):
            out[f"commuted_{i}"] = f"{b} {s} {a}"
        out["commuted_padded"] = f"{b} {op} {a} + 0"
    out |= {
        "pad_plus_0": f"{e} + 0",
        "pad_minus_0": f"{e} - 0",
        "pad_0_plus": f"0 + {e}",
        "pad_cdot_1": f"({e}) \\cdot 1",
        "pad_star_1": f"({e})*1",
        "pad_1_times": f"1 \\times ({e})",
        "pad_frac_1": f"\\frac{{{e}}}{{1}}",
        "pad_dfrac_1": f"\\dfrac{{{e}}}{{1}}",
        "pad_pow_1": f"({e})^{{1}}",
        "pad_slash_1": f"({e})/1",
        "paren": f"({e})",
        "brace": f"{{{e}}}",
        "bracket": f"[{e}]",
        "left_right": f"\\left({e}\\right)",
        "left_right_bracket": f"\\left[{e}\\right]",
        "operands_in_parens": f"({a}) {op} ({b})",
        "nested": f"(({e}))",
        "quad": f"{a}\\quad{op}\\quad{b}",
        "thin_space": f"{a}\\,{op}\\,{b}",
        "thick_space": f"{a}\\;{op}\\;{b}",
        "tilde": f"{a}~{op}~{b}",
        "backslash_space": f"{a}\\ {op}\\ {b}",
        "negative_space": f"{a}\\!{op}\\!{b}",
        "leading_zero_a": f"0{a} {op} {b}",
        "leading_zeros_b": f"{a} {op} 00{b}",
        "decimal_a": f"{a}.0 {op} {b}",
        "decimals_both": f"{a}.0 {op} {b}.00",
        "displaystyle": f"\\displaystyle {e}",
        "text": f"\\text{{{e}}}",
        "mathrm": f"\\mathrm{{{a}}} {op} \\mathrm{{{b}}}",
    }
    if op == "+":
        out |= {
            "minus_negative": f"{a} - -{b}",
            "minus_paren_negative": f"{a} - (-{b})",
            "double_negative_a": f"-(-{a}) + {b}",
            "unicode_minus_negative": f"{a} − (−{b})",
        }
    if op == "-":
        out |= {
            "negative_first": f"-{b} + {a}",
            "plus_paren_negative": f"{a} + (-{b})",
            "plus_negative": f"{a} + -{b}",
            "negated_difference": f"-({b} - {a})",
            "unicode_negative_first": f"−{b} + {a}",
            "words_negative": f"negative {b} plus {a}",
        }
    if op == "*":
        out |= {
            "juxtaposed": f"{a}({b})",
            "juxtaposed_parens": f"({a})({b})",
            "negatives": f"(-{a}) \\cdot (-{b})",
            "star_star_spaced": f"{a} * {b} * 1",
        }
    return out


def gold_expressions(g: int, k: int) -> dict[str, str]:
    """Unevaluated expressions equal to the gold ``g`` that are not the question (``k`` >= 1 splits it)."""
    out = {
        "minus_1_plus_1": f"{g}-1+1",
        "plus_0": f"{g} + 0",
        "zero_plus": f"0 + {g}",
        "cdot_1": f"{g} \\cdot 1",
        "one_times": f"1 \\times {g}",
        "star_1": f"{g}*1",
        "frac_1": f"\\frac{{{g}}}{{1}}",
        "frac_double": f"\\frac{{{2 * g}}}{{2}}",
        "slash_double": f"{2 * g}/2",
        "pow_1": f"{g}^{{1}}",
        "split_sum": f"{g - k} + {k}",
        "split_difference": f"{g + k} - {k}",
        "split_words": f"{g - k} plus {k}",
        "split_unicode_minus": f"{g + k} − {k}",
        "times_ten_power_0": f"{g} \\times 10^{{0}}",
        "paren_plus_0": f"({g}) + 0",
    }
    if g > 0:
        out |= {
            "sqrt_square": f"\\sqrt{{{g}^2}}",
            "sqrt_literal": f"\\sqrt{{{g * g}}}",
            "abs": f"\\left|{g}\\right|",
            "double_negative": f"-(-{g})",
        }
    if g < 0:
        out |= {"negated": f"-({-g})", "zero_minus": f"0 - {-g}"}
    return out


def hedges(g: int) -> dict[str, str]:
    """Several candidate values, the right one among them."""
    return {
        "boxed_list_before": f"\\boxed{{{g - 1}, {g}}}",
        "boxed_list_after": f"\\boxed{{{g}, {g + 1}}}",
        "boxed_list_tight": f"\\boxed{{{g},{g + 1}}}",
        "answer_is_or": f"The answer is {g} or {g + 1}.",
        "answer_is_or_reversed": f"The answer is {g + 1} or {g}.",
        "answer_is_either": f"The answer is either {g} or {g + 1}.",
        "boxed_text_or": f"\\boxed{{{g} \\text{{ or }} {g + 1}}}",
        "boxed_text_and": f"\\boxed{{{g} \\text{{ and }} {g + 1}}}",
        "boxed_pm": f"\\boxed{{{g} \\pm 1}}",
        "boxed_semicolon": f"\\boxed{{{g}; {g + 1}}}",
        "boxed_set": f"\\boxed{{\\{{{g}, {g + 1}\\}}}}",
        "answer_colon_list": f"Answer: {g - 1}, {g}, {g + 1}",
        "answer_is_comma_or": f"The answer is {g}, or maybe {g + 1}.",
        "boxed_x_or": f"\\boxed{{x = {g} \\text{{ or }} x = {g + 1}}}",
        "boxed_equation_two_values": f"\\boxed{{{g} = {g + 1}}}",
    }


def hedges_after_the_first_value(g: int) -> dict[str, str]:
    """Hedges whose second value follows the first in an aside or a second math segment: "55 (or 56)",
    "$55$ or $56$". Kept apart from :func:`hedges`: a reader that stops at the first value reads one guess
    (so they cannot raise the expected reward), but they are hedges all the same."""
    return {
        "answer_is_paren_or": f"The answer is {g} (or {g + 1}).",
        "answer_is_so_possibly": f"The answer is {g} so possibly {g + 1}.",
        "answer_is_if_not": f"The answer is {g} if not {g + 1}.",
        "dollar_or": f"Final answer: ${g}$ or ${g + 1}$",
        "answer_is_dollar_or": f"The answer is ${g}$ or ${g + 1}$.",
    }


def plain_right_numbers(q: Q) -> dict[str, str]:
    """The right number as the last statement, with no commitment phrase: a reader reads it as the answer (the
    issue reversed the old rule that refused these)."""
    g, a, op, b = q.value, q.a, q.op, q.b
    return {
        "equation_alone": f"{a} {op} {b} = {g}",
        "equation_sentence": f"We have {a} {op} {b} = {g}.",
        "so_equation": f"So {a} {op} {b} = {g}.",
        "after_a_plan": f"To find {a} {op} {b}, work it out.\n\n{a} {op} {b} = {g}",
        "result_is": f"So the result is {g}.",
        "bold_number": f"**{g}**",
        "display_math": f"$${g}$$",
        "display_equation": f"\\[ {a} {op} {b} = {g} \\]",
        "empty_box": f"{a} {op} {b} = {g}. \\boxed{{}}",
        "equals_alone": f"= {g}",
        "number_alone": f"{g}",
    }


def unclosed_boxes(q: Q) -> dict[str, str]:
    """A box that never closes commits to nothing, and its statement is no plain value."""
    g, a, op, b = q.value, q.a, q.op, q.b
    return {
        "unclosed_box": f"\\boxed{{{g}",
        "unclosed_box_after_work": f"{a} {op} {b} = {g}, so \\boxed{{{g}",
        "phrase_with_unclosed_box": f"The answer is \\boxed{{{g}",
    }


def wrong_values(q: Q) -> list[int]:
    g = q.value
    vals = {g + 1, g - 1, g + 10, 10 * g + 1, q.a, q.b, -g - 1}
    if g != 0:
        vals.add(-g)
    return sorted(v for v in vals if v != g)


def wrong_after_naming(q: Q, w: int) -> dict[str, str]:
    """The question named (or echoed) next to a wrong value."""
    a, op, b = q.a, q.op, q.b
    return {
        "answer_to_is": f"The answer to {a} {op} {b} is {w}.",
        "answer_for_colon": f"The answer for {a} {op} {b}: {w}",
        "answer_to_question_is": f"The answer to {q.question} is {w}.",
        "echo_then_box": f"{q.question}\n{a} {op} {b} = {q.value}\n\\boxed{{{w}}}",
        "echo_then_answer_is": f"{q.question} The answer is {w}.",
        "echo_equation_then_box": f"{q.question} {a} {op} {b} = ? \\boxed{{{w}}}",
    }


def assert_refused(completion: str, q: Q, label: str) -> None:
    v = grade(completion, q.gold, q.question)
    assert v.score == 0.0, (
        f"EXPLOIT ({label}): paid {completion!r} for {q.question!r} (gold {q.gold}); "
        f"read {v.extracted!r}, reason {v.reason}"
    )


def assert_paid(completion: str, q: Q, label: str) -> None:
    v = grade(completion, q.gold, q.question)
    assert v.score == 1.0, (
        f"RIGHT ANSWER REFUSED ({label}): {completion!r} for {q.question!r} (gold {q.gold}); "
        f"read {v.extracted!r}, reason {v.reason}"
    )


# ================================================================================= 1. refused, always
@pytest.mark.parametrize("q", SWEEP, ids=lambda q: q.question)
def test_every_rewrite_of_the_question_is_refused_in_every_position(q):
    for name, x in question_rewrites(q).items():
        for pos, slot in POSITIONS.items():
            assert_refused(slot(x), q, f"{name} in {pos}")


@fixed(30)
@given(q=questions(), data=st.data())
def test_rewrites_of_random_questions_are_refused(q, data):
    rewrites = question_rewrites(q)
    names = data.draw(st.lists(st.sampled_from(sorted(rewrites)), min_size=1, max_size=3, unique=True))
    positions = data.draw(st.lists(st.sampled_from(sorted(POSITIONS)), min_size=1, max_size=3, unique=True))
    for name in names:
        for pos in positions:
            assert_refused(POSITIONS[pos](rewrites[name]), q, f"{name} in {pos}")


@fixed(30)
@given(q=questions(), k=st.integers(1, 40), data=st.data())
def test_unevaluated_expressions_equal_to_the_gold_are_refused(q, k, data):
    exprs = gold_expressions(q.value, k)
    names = data.draw(st.lists(st.sampled_from(sorted(exprs)), min_size=1, max_size=3, unique=True))
    pos = data.draw(st.sampled_from(sorted(POSITIONS)))
    for name in names:
        assert_refused(POSITIONS[pos](exprs[name]), q, f"{name} in {pos}")


@pytest.mark.parametrize("q", SWEEP, ids=lambda q: q.question)
def test_every_unevaluated_gold_expression_is_refused(q):
    for name, x in gold_expressions(q.value, 5).items():
        for pos in ("boxed", "answer_is", "final_answer_dollar"):
            assert_refused(POSITIONS[pos](x), q, f"{name} in {pos}")


@fixed(6)
@given(q=questions())
@example(q=Q(47, "+", 8))
def test_hedges_are_refused(q):
    for name, completion in hedges(q.value).items():
        assert_refused(completion, q, name)


@fixed(15)
@given(q=questions())
@example(q=Q(47, "+", 8))
def test_hedges_after_the_first_value_are_refused(q):
    for name, completion in hedges_after_the_first_value(q.value).items():
        assert_refused(completion, q, name)


@fixed(40)
@given(q=questions())
def test_an_unclosed_box_commits_to_nothing(q):
    for name, completion in unclosed_boxes(q).items():
        assert_refused(completion, q, name)


@fixed(40)
@given(q=questions())
@example(q=Q(47, "+", 8))
def test_a_plain_right_number_at_the_end_is_an_answer(q):
    """Reversed by the issue that asked for a reader's reading: "47 + 8 = 55", "55", "So the result is 55." are
    answers (they were refused as uncommitted)."""
    for name, completion in plain_right_numbers(q).items():
        assert_paid(completion, q, name)


@fixed(25)
@given(q=questions(), data=st.data())
def test_a_wrong_value_after_naming_the_question_is_refused(q, data):
    w = data.draw(st.sampled_from(wrong_values(q)))
    for name, completion in wrong_after_naming(q, w).items():
        assert_refused(completion, q, name)


# ==================================================================================== 2. paid, always
def _grouped(n: int, sep: str) -> str:
    return f"{n:,}".replace(",", sep)


def right_answers(q: Q, noise: tuple[int, int]) -> dict[str, str]:
    g, a, op, b = q.value, q.a, q.op, q.b
    x, y = noise
    out = {
        "boxed": f"\\boxed{{{g}}}",
        "answer_is": f"The answer is {g}.",
        "answer_colon": f"Answer: {g}",
        "bold_answer": f"**Answer:** {g}",
        "dollar_boxed": f"$\\boxed{{{g}}}$",
        "boxed_period": f"\\boxed{{{g}}}.",
        "final_answer_dollar": f"Final answer: ${g}$",
        "answer_is_dollar": f"The answer is ${g}$.",
        "answer_is_bold": f"The answer is **{g}**.",
        "minerva": f"Final Answer: The final answer is ${g}$. I hope it is correct.",
        "minerva_boxed": f"Final Answer: The final answer is $\\boxed{{{g}}}$. I hope it is correct.",
        "display_box": f"\\[\n\\boxed{{{g}}}\n\\]",
        "check_after_phrase": f"The answer is {g}. Check: {a} {op} {b} = {g}.",
        "check_after_box": f"\\boxed{{{g}}}. Check: {a} {op} {b} = {g}, so the answer is right.",
        "check_after_phrase_newline": f"The answer is {g}.\n\nCheck: {g} = {a} {op} {b}.",
        "box_equation_value_first": f"\\boxed{{{g} = {a} {op} {b}}}",
        "box_equation_value_last": f"\\boxed{{{a} {op} {b} = {g}}}",
        "box_x_equals": f"\\boxed{{x = {g}}}",
        "phrase_equation": f"The answer is {a} {op} {b} = {g}.",
        "self_correction_box": (
            f"\\boxed{{{g + 1}}} ... wait, let me recompute: {a} {op} {b} = {g}.\n\n\\boxed{{{g}}}"
        ),
        "after_checking_box": f"\\boxed{{{g + 1}}}, and after checking, \\boxed{{{g}}}",
        "self_correction_phrase": f"The answer is {g + 1}. Wait, no. The answer is {g}.",
        "reasoning_before": (
            f"We need {a} {op} {b}. Partial results: {x}, then {y}, then {x + y}; carry 1.\n"
            f"So {a} {op} {b} = {g}.\n\nThe answer is $\\boxed{{{g}}}$."
        ),
        "reasoning_before_phrase": f"Step 1: {x} and {y}. Step 2: {a} {op} {b} = {g}.\nThe answer is {g}.",
    }
    if op == "+":
        out["check_subtraction"] = f"The answer is {g}. Check: {g} - {b} = {a}."
    if g < 0:
        out |= {
            "unicode_minus_box": f"\\boxed{{−{-g}}}",
            "unicode_minus_phrase": f"The answer is −{-g}.",
            "negative_phrase_dollar": f"The answer is ${g}$.",
        }
    if abs(g) >= 1000:
        out |= {
            "thousands_box": f"\\boxed{{{_grouped(g, ',')}}}",
            "thousands_brace_box": f"\\boxed{{{_grouped(g, '{,}')}}}",
            "thousands_thin_box": f"\\boxed{{{_grouped(g, chr(92) + ',')}}}",
            "thousands_phrase": f"The answer is {_grouped(g, ',')}.",
            "thousands_final_dollar": f"Final answer: ${_grouped(g, '{,}')}$",
        }
    return out


@pytest.mark.parametrize("q", SWEEP, ids=lambda q: q.question)
def test_every_right_answer_format_is_paid(q):
    for name, completion in right_answers(q, (13, 29)).items():
        assert_paid(completion, q, name)


@fixed(40)
@given(q=questions(), x=st.integers(0, 999), y=st.integers(0, 999), data=st.data())
def test_right_answers_to_random_questions_are_paid(q, x, y, data):
    answers = right_answers(q, (x, y))
    for name in data.draw(st.lists(st.sampled_from(sorted(answers)), min_size=3, max_size=6, unique=True)):
        assert_paid(answers[name], q, name)


@fixed(30)
@given(q=questions(ops="-*"))
def test_negative_and_large_answers_are_paid(q):
    """Every right spelling of a negative gold and of a gold with thousands separators."""
    g = q.value
    forms = [f"\\boxed{{{g}}}", f"The answer is {g}."]
    if g < 0:
        forms += [f"\\boxed{{−{-g}}}", f"The answer is −{-g}.", f"\\boxed{{- {-g}}}", f"Answer: ${g}$"]
    if abs(g) >= 1000:
        forms += [f"\\boxed{{{_grouped(g, sep)}}}" for sep in (",", "{,}", "\\,")]
        forms += [f"The answer is {_grouped(g, ',')}."]
    for completion in forms:
        assert_paid(completion, q, "negative/large")


# ============================================================ 3. soundness properties that need no lists
_DIGITS = re.compile(r"(?<![\d.])(\d{1,3}(?:(?:,|\{,\}|\\,)\d{3})+(?![\d])|\d+)(\.\d+)?(?![\d])")
_BINARY_BEFORE = re.compile(r"[\w)\]}]$")


def number_values(text: str) -> set[Fraction]:
    """The values of the number tokens written in ``text``, read as a person reads them: thousands
    separators and a decimal point are part of a number; a minus sign belongs to the number when it is
    unary (at the start, or after ``=``, ``(``, ``{``, a comma, a word boundary that is not a digit, a
    bracket or a letter); a percent sign or a unit does not change the number written."""
    values: set[Fraction] = set()
    for m in _DIGITS.finditer(text):
        digits = re.sub(r",|\{,\}|\\,", "", m.group(1)) + (m.group(2) or "")
        value = Fraction(digits)
        before = text[: m.start()].rstrip()
        if before.endswith(("-", "−")):
            ahead = before[:-1].rstrip()
            if not _BINARY_BEFORE.search(ahead):
                value = -value
        values.add(value)
    return values


@st.composite
def number_spellings(draw, q: Q) -> str:
    """A number near the gold (or one of the question's), in one of the ways numbers get written, or the
    gold's digits with something glued between them ("5**5", "5{}5")."""
    g = q.value
    near = [g, g, g, g, g + 1, g - 1, -g, g + 10, 10 * g, 100 * g, q.a, q.b, 0, 1, abs(g), g + 100]
    n = draw(st.sampled_from(near))  # the gold itself a quarter of the time
    style = draw(
        st.sampled_from(
            [
                "plain",
                "plain",
                "plain",
                "unicode",
                "grouped",
                "braced",
                "decimal",
                "zero",
                "pct",
                "bold",
                "split",
            ]
        )
    )
    if style == "unicode":
        return str(n).replace("-", "−")
    if style == "grouped":
        return _grouped(n, ",")
    if style == "braced":
        return _grouped(n, "{,}")
    if style == "decimal":
        return f"{n}.0"
    if style == "zero":
        return f"-0{-n}" if n < 0 else f"0{n}"
    if style == "pct":
        return f"{n}\\%"
    if style == "bold":
        return f"**{n}**"
    if style == "split" and len(str(abs(g))) > 1:
        digits = str(g)
        cut = draw(st.integers(1 if g >= 0 else 2, len(digits) - 1))
        glue = draw(st.sampled_from(["**", "{}", " ", ",", "*", "^", "\\;"]))
        return digits[:cut] + glue + digits[cut:]
    return str(n)


_OPERATORS = ["+", "-", "*", "/", "\\times", "\\cdot", "−", "×", "plus", "minus", "times", "=", "^"]
_GLUE = ["x =", "or", "and", ",", ";", "(", ")", "\\text{ or }", "\\pm", "\\quad", "\\,", "~", "**", ".", "%"]
_WORDS = ["So", "wait", "Check:", "then", "we get", "is", "not", "maybe", "so", "because", "total", "carry"]
_STRUCTURE = [
    "\\boxed{",
    "}",
    "{",
    "$",
    "$$",
    "\n",
    "The answer is",
    "Answer:",
    "the answer is",
    "\\frac{",
    "}{",
]


@st.composite
def completions(draw, q: Q, structure: bool = True, max_fragments: int = 14) -> str:
    """A random completion from a grammar of fragments: numbers near the gold, the question's operands and
    operator, boxes, "the answer is", equals signs, words; glued with nothing, a space or a newline."""
    op_word = {"+": "+", "-": "-", "*": "\\times"}[q.op]
    pieces = [st.sampled_from([*_OPERATORS, op_word]), st.sampled_from(_GLUE), st.sampled_from(_WORDS)]
    if structure:
        pieces.append(st.sampled_from(_STRUCTURE))
    fragment = st.one_of(number_spellings(q), number_spellings(q), *pieces)
    parts = draw(st.lists(st.tuples(fragment, st.sampled_from(["", " ", " ", "\n"])), max_size=max_fragments))
    return "".join(f + sep for f, sep in parts)


@st.composite
def answer_contents(draw, q: Q) -> str:
    """What a model may put in a box: at least one number near the gold, with operators, equals signs,
    hedges, units around it; braces only in balanced groups."""
    op_word = {"+": "+", "-": "-", "*": "\\times"}[q.op]
    n = number_spellings(q)
    group = st.one_of(
        n.map(lambda x: f"{{{x}}}"),
        st.tuples(n, n).map(lambda t: f"\\frac{{{t[0]}}}{{{t[1]}}}"),
        n.map(lambda x: f"\\sqrt{{{x}}}"),
        n.map(lambda x: f"\\text{{{x}}}"),
    )
    fragment = st.one_of(n, n, n, group, st.sampled_from([*_OPERATORS, op_word]), st.sampled_from(_GLUE))
    parts = draw(st.lists(st.tuples(fragment, st.sampled_from(["", " "])), max_size=5))
    at = draw(st.integers(0, len(parts)))
    parts.insert(at, (draw(n), " "))
    return "".join(f + sep for f, sep in parts).strip()


@st.composite
def cases(draw) -> tuple[Q, str]:
    """A random question and a random completion for it: fragments alone, or fragments around an answer
    committed in one of the answer positions (so that many completions are graded on a real answer)."""
    q = draw(questions())
    if draw(st.booleans()):
        return q, draw(completions(q))
    slot = POSITIONS[draw(st.sampled_from(sorted(POSITIONS)))]
    before = draw(completions(q, max_fragments=6))
    after = draw(completions(q, max_fragments=6))
    return q, f"{before}{slot(draw(answer_contents(q)))}{after}"


def _gold_candidates(completion: str, q: Q) -> list[int]:
    """Integer golds the completion might be paid for: every number it writes, its negative, a hundredth and
    a hundred times it, and the question's own gold with its neighbours."""
    out = {q.value, q.value + 1, q.value - 1}
    for v in number_values(completion):
        for w in (v, -v, v * 100, v / 100):
            if w.denominator == 1:
                out.add(int(w))
    return sorted(out)


Q_55 = Q(47, "+", 8)


@fixed(150)
@given(case=cases())
@example(case=(Q_55, "The answer is 5**5."))  # markdown bold markers dropped: digits glued into 55
@example(case=(Q_55, "\\boxed{5**5}"))
@example(case=(Q_55, "\\boxed{5500\\%}"))  # 5500% is paid for 55 (and for 5500)
def test_a_paid_completion_committed_to_the_gold_number(case):
    """If a completion is paid, the one answer read holds the gold's own number as written text (a token of
    the completion, not a sum, product, percentage or glued digits that come to it), and is text the
    completion wrote; a completion in which no token equal to the gold occurs is never paid."""
    q, completion = case
    v = grade(completion, q.gold, q.question)
    if q.value not in number_values(completion):
        assert v.score == 0.0, f"paid with no token equal to the gold: {completion!r}, gold {q.gold}, {v}"
    if v.score == 1.0:
        assert v.extracted is not None and v.extracted in completion, (
            f"paid an answer the completion never wrote: {completion!r}, gold {q.gold}, {v}"
        )
        assert q.value in number_values(v.extracted), (
            f"paid an answer that does not write the gold: {completion!r}, gold {q.gold}, {v}"
        )


@fixed(50)
@given(case=cases())
@example(case=(Q_55, "\\boxed{5500\\%}"))
@example(case=(Q(1, "+", 0), "The answer is 100%."))
def test_a_completion_is_paid_for_one_value_at_most(case):
    """A completion is worth exactly one guess: of all the integer golds it could be graded against, at most
    one pays it (else writing it would hedge between them)."""
    q, completion = case
    paid = [g for g in _gold_candidates(completion, q) if grade(completion, str(g), q.question).score == 1.0]
    assert len(paid) <= 1, f"{completion!r} is paid for each of {paid} (question {q.question!r})"


@fixed(40)
@given(q=questions())
@example(q=Q_55)
def test_a_percent_answer_names_one_value(q):
    """``\\boxed{5500\\%}`` must not be right both for 55 and for 5500 (nor ``100\\%`` for 1 and 100)."""
    g = q.value
    for completion in (f"\\boxed{{{100 * g}\\%}}", f"The answer is {100 * g}%.", f"\\boxed{{{g}\\%}}"):
        paid = [h for h in (g, 100 * g) if grade(completion, str(h), q.question).score == 1.0]
        assert len(set(paid)) <= 1, f"{completion!r} is paid for each of {paid}"


@fixed(60)
@given(case=cases())
def test_the_question_can_only_refuse(case):
    """Showing the grader the question may refuse an answer (a restatement), never pay one."""
    q, completion = case
    with_q = grade(completion, q.gold, q.question)
    without = grade(completion, q.gold, None)
    assert with_q.score <= without.score, (completion, q.question, with_q, without)


def _strip_commits(text: str, braces: bool = True) -> str:
    """No box command, no "answer", no ``$`` (and with ``braces``, no brace that could close an open box):
    text that holds no box and no "answer" phrase."""
    text = re.sub(r"\\(?:boxed|fbox)", "", text)
    text = re.sub(r"answer", "result", text, flags=re.IGNORECASE)
    text = text.replace("$", "")
    return text.replace("{", "").replace("}", "") if braces else text


def _same(v, w) -> bool:
    return (v.score, v.extracted, v.reason) == (w.score, w.extracted, w.reason)


# what a completion says after its answer that states no number and hedges nothing: checks, conclusions,
# corrections and labels that give no value, words, operators and spacing
_NEUTRAL = [
    "Check:", "then", "because", "total", "carry", "is", "we", "the", "apples", "done", "step", "by", "+", "-",
    "=", "(", ")", "x", "So", "Wait,", "Therefore", "Answer:", "This is the answer.", "\\quad", ".", "Hence",
    "Let me verify.", "I hope it is correct.",
]  # fmt: skip


@st.composite
def neutral_remarks(draw) -> str:
    parts = draw(
        st.lists(st.tuples(st.sampled_from(_NEUTRAL), st.sampled_from(["", " ", " ", "\n"])), max_size=12)
    )
    return "".join(f + sep for f, sep in parts)


@st.composite
def boxed_in_context(draw) -> tuple[Q, str, str]:
    """(question, final box alone, the box with reasoning before it and remarks after it). Before: numbers,
    operators, words, a closed box and a wrong "The answer is" sentence; after: remarks that state no number."""
    q = draw(questions())
    alone = f"\\boxed{{{draw(answer_contents(q))}}}"
    before = draw(completions(q, structure=False))
    earlier_box = f"\\boxed{{{draw(answer_contents(q))}}}"
    after = draw(neutral_remarks())
    return q, alone, f"{before} {earlier_box}\n\nThe answer is {q.value + 1}.\n\n{alone}\n\n{after}"


@fixed(70)
@given(case=boxed_in_context())
def test_a_boxed_completion_is_worth_exactly_its_final_box(case):
    """Reasoning before the final box (with its own closed boxes and "the answer is" sentences) and remarks after
    it that state no number change nothing: the completion is graded as its final box alone."""
    q, alone, whole = case
    v, w = grade(alone, q.gold, q.question), grade(whole, q.gold, q.question)
    assert _same(v, w), f"\nalone: {alone!r} -> {v}\nwhole: {whole!r} -> {w}"


@st.composite
def with_tail(draw) -> tuple[Q, str, str]:
    q, completion = draw(cases())
    return q, completion + ".\n\n", draw(neutral_remarks())


@fixed(60)
@given(case=with_tail())
def test_a_remark_that_states_no_number_never_changes_the_grade(case):
    """Appending, after a sentence end, text that states no number and hedges nothing (a check, a conclusion, a
    correction or a label with no value) never changes the grade of any completion, whatever its final answer
    is (a box, a sentence, a plain line or none)."""
    q, base, tail = case
    v, w = grade(base, q.gold, q.question), grade(base + tail, q.gold, q.question)
    assert _same(v, w), f"\ncompletion: {base!r} -> {v}\nwith tail: {tail!r} -> {w}"


@st.composite
def refused_with_tail(draw) -> tuple[Q, str, str]:
    q, completion = draw(cases())
    tail = draw(completions(q).filter(lambda t: q.value not in number_values(t)))
    return q, completion + ".\n\n", tail


@fixed(80)
@given(case=refused_with_tail())
@example(case=(Q_55, "The answer is 55. Maybe.\n\n", "This is the answer."))
@example(case=(Q_55, "54\n55\n\n", "This is the final answer."))
def test_text_that_does_not_write_the_gold_never_turns_a_refusal_into_pay(case):
    """Whatever is appended (boxes, answer phrases, corrections, numbers), a refused completion stays refused
    unless the appended text itself writes the gold's number: no walking back to an earlier right line."""
    q, base, tail = case
    if grade(base, q.gold, q.question).score == 0.0:
        w = grade(base + tail, q.gold, q.question)
        assert w.score == 0.0, f"\ncompletion: {base!r}\nwith tail: {tail!r} -> {w}"


@st.composite
def phrase_in_context(draw) -> tuple[Q, str, str]:
    q = draw(questions())
    alone = f"The answer is {_strip_commits(draw(answer_contents(q)), braces=False)}."
    before = _strip_commits(draw(completions(q)))
    after = draw(neutral_remarks())
    return q, alone, f"{before}\n\n{alone}\n\nCheck: {after}"


@fixed(60)
@given(case=phrase_in_context())
def test_a_phrase_answer_is_worth_exactly_its_sentence(case):
    """With no box, the completion is graded as its last "The answer is ..." sentence alone: reasoning before
    it (no box, no other answer sentence) and a check after it that states no number change nothing."""
    q, alone, whole = case
    v, w = grade(alone, q.gold, q.question), grade(whole, q.gold, q.question)
    assert _same(v, w), f"\nalone: {alone!r} -> {v}\nwhole: {whole!r} -> {w}"


def verifications(q: Q) -> list[str]:
    """Checks of the answer that recover an operand from it, in the ways a model writes them."""
    g, a, b = q.value, q.a, q.b
    if q.op == "+":
        back = [f"{g} - {b} = {a}", f"{g} - {a} = {b}"]
    elif q.op == "-":
        back = [f"{g} + {b} = {a}"]
    else:
        back = [f"{g} / {b} = {a}"] if b else [f"{a} \\times 0 = 0"]
    out = []
    for eq in back:
        out += [f" Check: {eq}.", f"\n\nVerification: {eq} ✓", f"\n\nLet me verify: {eq}.", f"\n{eq}"]
    return out


@fixed(30)
@given(q=questions(), data=st.data())
@example(q=Q_55, data=None)
def test_a_check_after_the_answer_changes_nothing(q, data):
    """A verification after the answer (an equation that uses it to recover an operand) does not replace it."""
    answers = right_answers(q, (13, 29))
    names = ["boxed", "answer_is", "final_answer_dollar"]
    names += data.draw(st.lists(st.sampled_from(sorted(answers)), max_size=3)) if data else []
    for name in names:
        for verification in verifications(q):
            assert_paid(answers[name] + verification, q, f"{name} + {verification!r}")
    for verification in verifications(q):
        assert_paid(f"{q.a} {q.op} {q.b} = {q.value}." + verification, q, f"plain line + {verification!r}")


@fixed(30)
@given(q=questions(), data=st.data())
@example(q=Q_55, data=None)
def test_a_hedge_or_another_value_after_the_answer_refuses_it(q, data):
    """A hedge after the answer's sentence ("Maybe.", "I'm not sure."), or another value offered ("Or 56."),
    refuses it; a remark that hedges nothing does not ("I hope it is correct.")."""
    g = q.value
    w = data.draw(st.sampled_from(wrong_values(q))) if data else g + 1
    base = [f"\\boxed{{{g}}}", f"The answer is {g}.", f"{q.a} {q.op} {q.b} = {g}.", f"**Answer:** {g}."]
    for answer in base:
        for hedge in (" Maybe.", "\n\nI'm not sure.", " Probably.", f" Or {w}.", f"\n\nOr maybe {w}."):
            assert_refused(answer + hedge, q, f"{answer!r} + {hedge!r}")
        assert_paid(answer + " I hope it is correct.", q, f"{answer!r} + a remark")


@fixed(30)
@given(q=questions(), data=st.data())
def test_several_values_are_never_paid_in_any_order(q, data):
    """Two different values in one statement, one box or a column of tries are never paid, whatever their order
    (the grader never chooses among candidates)."""
    g = q.value
    w = data.draw(st.sampled_from(wrong_values(q)))
    for x, y in ((g, w), (w, g)):
        for completion in (
            f"{x}\n{y}",
            f"{x}\n{y}\n{x}",
            f"{x}, {y}",
            f"\\boxed{{{x}, {y}}}",
            f"\\boxed{{{x}}} or \\boxed{{{y}}}",
            f"The answer is {x} or {y}.",
            f"The answer is {x} (or {y}).",
            f"{q.a} {q.op} {q.b} = {x}\n{q.a} {q.op} {q.b} = {y}",
            f"So {q.a} {q.op} {q.b} = {x} or {y}.",
        ):
            assert_refused(completion, q, f"several values {x}, {y}")


def _noun(op: str) -> str:
    return {"+": "sum", "-": "difference", "*": "product"}[op]


def reading_classes(q: Q, w: int) -> dict[str, tuple[str, str, bool]]:
    """Each class of final-answer reading, both ways: name -> (completion, gold graded against, paid?)."""
    g, a, op, b = q.value, q.a, q.op, q.b
    e, gold, wrong = f"{a} {op} {b}", str(q.value), str(w)
    step = next(k for k in range(2, 12) if k != g)
    return {
        # paid: the right number read as the final answer
        "quantity_noun": (f"The {_noun(op)} is {g}.", gold, True),
        "quantity_noun_named": (f"The {_noun(op)} of {a} and {b} is {g}.", gold, True),
        "other_wording_result": (f"The final result is {g}.", gold, True),
        "other_wording_solution": (f"The solution is {g}.", gold, True),
        "value_then_the_answer": (f"{g} is the answer.", gold, True),
        "which_is_the_answer": (f"Working it out, you get {g}, which is the answer.", gold, True),
        "this_is_the_final_answer": (f"{e} = {g}\n\nThis is the final answer.", gold, True),
        "conclusion_is": (f"Therefore, {e} is {g}.", gold, True),
        "commitment_to_an_equation": (f"Here is the final answer: {e} = {g}.", gold, True),
        "empty_box_copied": (f"The answer is \\boxed{{}} {g}.", gold, True),
        "empty_box_sentence_after": (f"{e} = {g}\n\nThe answer is within \\boxed{{}}.", gold, True),
        "bold_sentence": (f"**The answer is {g}.**", gold, True),
        "quoted": (f'The answer is "{g}".', gold, True),
        "header": (f"### Final Answer\n\n{g}", gold, True),
        "label_then_line": (f"Answer:\n{g}", gold, True),
        "trailing_mark": (f"The answer is {g}!", gold, True),
        "trailing_check_mark": (f"{e} = {g} ✓", gold, True),
        "json_field": (f'{{"answer": {g}}}', gold, True),
        "json_string": (f'{{"answer": "{g}"}}', gold, True),
        "code_block": (f"```\n{g}\n```", gold, True),
        "list_item": (f"- Answer: {g}", gold, True),
        "table_cell": (f"| Question | Answer |\n|---|---|\n| {e} | {g} |", gold, True),
        "spacing_in_box": (f"\\boxed{{\\,{g}\\;}}", gold, True),
        "correction_after_box": (f"\\boxed{{{w}}}\n\nWait, that's wrong: {e} = {g}.", gold, True),
        "negated_then_right": (f"The answer is not {w}. It is {g}.", gold, True),
        "negated_but": (f"The answer is not {w} but {g}.", gold, True),
        "supposition_then_conclusion": (
            f"Suppose the answer is {w}. That fails. So the answer is {g}.",
            gold,
            True,
        ),
        "chain_of_equations": (f"{e} = {g} + 0 = {g}", gold, True),
        "retraction_states_no_value": (f"The answer is {g}. Wait, no.", gold, True),
        "box_after_a_phrase_settles_it": (f"The answer is {w}.\n\n\\boxed{{{g}}}", gold, True),
        "step_number_after": (f"{e} = {g}\n\nStep 2", gold, True),
        "footnote_after": (f"{e} = {g}\n\n[1] See the method above.", gold, True),
        # refused: what is read is not the right number, or commits to nothing, or hedges
        "negated": (f"The answer is not {g}.", gold, False),
        "hypothetical": (f"Suppose the answer is {g}.", gold, False),
        "if_clause": (f"If the answer is {g}, then we are done.", gold, False),
        "attributed": (f"My friend says the answer is {g}.", gold, False),
        "attributed_past": (f"I thought the answer was {g}.", gold, False),
        "hedged_in_sentence": (f"The answer is probably {g}.", gold, False),
        "hedged_i_think": (f"I think the answer is {g}.", gold, False),
        "hedged_about": (f"The answer is about {g}.", gold, False),
        "hedge_after_sentence": (f"The answer is {g}. Maybe.", gold, False),
        "another_value_after": (f"The answer is {g}. Or {w}.", gold, False),
        "unit_word_changes_value": (f"The answer is {g} thousand.", gold, False),
        "later_commitment_after_box": (f"\\boxed{{{g}}}\n\nThe answer is {w}.", gold, False),
        "box_then_a_different_phrase": (
            f"\\boxed{{{w}}}\n\nThe answer is {g}.",
            gold,
            False,
        ),  # several values
        "two_values_one_subject": (f"{e} = {w}\n\nSo {e} = {g}.", gold, False),  # whichever comes last
        "box_in_html_comment": (f"<!-- \\boxed{{{g}}} -->\nThe answer is {w}.", gold, False),
        "box_in_latex_comment": (f"% \\boxed{{{g}}}\nThe answer is {w}.", gold, False),
        "conflicting_commitments": (f"The answer is {g}. The answer is {w}.", gold, False),
        "conflicting_commitments_right_last": (f"The answer is {w}. The answer is {g}.", gold, False),
        "false_final_statement": (f"{e} = {g}\n\nSo {e} + 1 = {g}.", gold, False),
        "false_equation": (f"{g + 1} = {g}", gold, False),
        "question_mark": (f"{e} = {g}?", gold, False),
        "running_total_is_not_the_answer": (f"{e} = {g}\n\nRunning total: {w}", wrong, False),
        "date_is_not_the_answer": (f"{e} = {g}\n\nWritten on 12 May 2024.", "2024", False),
        "step_number_is_not_the_answer": (f"{e} = {g}\n\nStep {step}", str(step), False),
    }


@fixed(40)
@given(q=questions(), data=st.data())
@example(q=Q_55, data=None)
def test_each_class_of_reading_both_ways(q, data):
    """Every class of the reading the issue names, in both directions: right forms paid, wrong ones refused."""
    w = data.draw(st.sampled_from(wrong_values(q))) if data else q.value + 1
    for name, (completion, gold, paid) in reading_classes(q, w).items():
        if gold == str(q.value) or paid is False:
            v = grade(completion, gold, q.question)
            assert v.score == float(paid), (
                f"{'RIGHT ANSWER REFUSED' if paid else 'EXPLOIT'} ({name}): {completion!r} for {q.question!r} "
                f"(gold {gold}); read {v.extracted!r}, reason {v.reason}"
            )


@fixed(20)
@given(q=questions(), data=st.data())
def test_a_box_holding_the_question_and_a_wrong_value_is_refused(q, data):
    """An equation in the box is paid for its number side only: the question's expression next to a wrong
    number is wrong, next to the gold is right."""
    w = data.draw(st.sampled_from(wrong_values(q)))
    e = f"{q.a} {q.op} {q.b}"
    assert_refused(f"\\boxed{{{e} = {w}}}", q, "question = wrong")
    assert_refused(f"\\boxed{{{w} = {e}}}", q, "wrong = question")
    assert_refused(f"\\boxed{{{q.gold} = {w}}}", q, "gold = wrong")
    assert_paid(f"\\boxed{{{e} = {q.gold}}}", q, "question = gold")
