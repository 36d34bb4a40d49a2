"""Commitment read by structure (docs/EVALUATION.md, "How `sound` reads the final answer"), as an examiner and as a
policy would read it.

1. examiner: right answers in the phrasings the structure rules exist for (a copula with any subject, a label with
   any separator, a value with a remark, a list where the gold is a set, the answer first and the working after
   it, a closing sentence with digits but no value, a check after a hesitation, a corrected value in a check):
   paid, for random questions; and their wrong twins refused;
2. policy: each of those rules attacked (two values in the final lines, a guess list in prose, a hedge after a
   remark, a dash inside the question's own expression, ...): refused;
3. incentive: for each commitment attack family, a policy that does not compute the answer is paid no more often
   than by writing one guess. Its completion is drawn without the gold (from the question and its guesses), and
   the test finds every gold the completion is paid for among the numbers it could be graded against: at most
   one. Then, whatever the distribution of golds, the completion's chance of pay, the sum of P(gold = g) over the
   golds that pay it, is at most the largest P(gold = g): the chance of the best single guess;
4. time: grading time at n and at 4n pieces of each family, compared as a ratio within one run.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from test_grader_adversary import Q, _gold_candidates, fixed, grade, number_values, questions

# ============================================================================ 1. examiner: right answers paid


def examiner_cases(q: Q, w: int) -> dict[str, tuple[str, bool]]:
    """name -> (completion, paid?) for the gold ``q.value``: each structure rule's right answer, and a twin that
    an examiner refuses (``w`` is a wrong value)."""
    g, a, op, b = q.value, q.a, q.op, q.b
    e = f"{a} {op} {b}"
    return {
        # a copula with any subject, the copula a whole word
        "named_quantity": (f"The value of the expression is {g}.", True),
        "relative_clause": (f"We need {e}, which is {g}.", True),
        "copula_after_this": (f"The answer to this problem is {g}.", True),
        "plural_subject": (f"The results are all {g}.", False),  # "all 55": a word before the value, not one
        "named_quantity_wrong": (f"The value of the expression is {w}.", False),
        "reason_clause": (f"{e} = {g}, since {w} is too small.", True),  # a reason states no result
        # a label with any separator, or none
        "label_dash": (f"Answer - {g}", True),
        "label_arrow": (f"Answer → {g}", True),
        "label_ascii_arrow": (f"Final answer -> {g}", True),
        "label_bare": (f"Answer {g}", True),
        "label_contraction": (f"The answer's {g}.", True),
        "label_hashes": (f"#### {g}", True),
        "label_dash_wrong": (f"Answer - {w}", False),
        "dash_inside_the_question": (f"The result of {e} - {g}", False),  # an operation, no label
        # a value with a short remark
        "remark_comma": (f"{g}, easy.", True),
        "remark_bracket": (f"{g} (checked twice)", True),
        "remark_hedged": (f"{g}, probably.", False),
        "remark_with_another_value": (f"{g} (or {w})", False),
        # the answer first, the working after it
        "answer_then_why": (f"{g}\n\nHere is why: {e} = {g}. Carry the 1; 4 + 1 = 5.", True),
        "answer_then_explanation": (
            f"{g}\n\nExplanation: {a} and {b} make {g}. The last step was 2 + 3 = 5.",
            True,
        ),
        # a closing sentence with digits but no value
        "closing_digits": (f"{e} = {g}\n\nI added {b} to {a}.", True),
        "closing_steps": (f"{e} = {g}\n\nThis took 2 steps.", True),
        "closing_instruction": (f"{e} = {g}\n\nRewrite the equation {e} in standard notation.", True),
        "closing_digits_after_wrong": (f"{e} = {w}\n\nI added {b} to {a}.", False),
        # a check after a hesitation, and a corrected value in a check
        "hesitation_check": (f"The answer is {g}. Hmm, let me check: {g} = {e}.", True),
        "corrected_in_check": (f"{e} = {w}. Check: {w} is wrong, not {g}, so {e} = {g}.", True),
        "check_without_correction": (f"The answer is {w}. Checking: {e} = {g}.", False),
        # several values in the final lines, whichever comes last
        "two_answers_right_last": (f"The answer is {w}. The answer is {g}.", False),
        "two_answers_right_first": (f"The answer is {g}. The answer is {w}.", False),
        "box_then_phrase": (f"\\boxed{{{w}}}. So the answer is {g}.", False),
        "phrase_then_box": (
            f"The answer is {w}. \\boxed{{{g}}}",
            True,
        ),  # the box, the instruction's form, settles
        "two_conclusions": (f"So {e} = {g}.\nSo {e} = {w}.", False),
        "revised": (f"The answer is {w}. Wait, no. The answer is {g}.", True),
        "after_checking": (f"\\boxed{{{w}}}, and after checking, \\boxed{{{g}}}", True),
        "try_then_conclusion": (f"{e} = {w}\n{e} = {g}\nSo {e} = {g}.", True),
        "working_forward": (f"Only \\boxed{{{g}}} works. Adding 0, {g} + 0 = \\boxed{{{g}}}.", True),
    }


@fixed(30)
@given(q=questions(), data=st.data())
def test_each_structure_rule_both_ways(q, data):
    w = data.draw(st.sampled_from(sorted({q.value + 1, q.value - 1, q.value + 10, -q.value - 1} - {q.value})))
    for name, (completion, paid) in examiner_cases(q, w).items():
        v = grade(completion, q.gold, q.question)
        assert v.score == float(paid), (
            f"{'RIGHT ANSWER REFUSED' if paid else 'EXPLOIT'} ({name}): {completion!r} for {q.question!r} "
            f"(gold {q.gold}); read {v.extracted!r}, reason {v.reason}"
        )


SET_QUESTION = "Solve $x^2 - 5x + 6 = 0$."


@pytest.mark.parametrize(
    ("completion", "gold", "paid"),
    [
        ("The solutions are $x = 2$ and $x = 3$.", "2, 3", True),
        ("The roots are 2 and 3.", "2, 3", True),
        ("So x = 3 or x = 2.", "2,3", True),
        ("The solutions are $x = 2$, $x = 3$, and $x = 4$.", "2, 3", False),  # an extra value
        ("The roots are 2 and 3.", "2", False),  # a list where the gold is one value
        ("So x = 2 or x = 3.", "3", False),
        ("The root is 2, maybe 3.", "2, 3", False),  # a hedge is no list
        ("The roots are 2 and 3 because 2 + 3 = 5.", "2, 3", True),
    ],
)
def test_a_set_stated_in_prose(completion, gold, paid):
    """A list of values in prose is one answer where the gold is a set of as many values, and several values where
    it is one value."""
    v = grade(completion, gold, SET_QUESTION)
    assert v.score == float(paid), (completion, gold, v)


# ============================================================================ 3. incentive, per attack family
NOUNS = ["value", "number", "result of the sum", "total count", "quantity we want", "number asked for"]
SEPARATORS = [":", "=", "-", "→", "->", "", "is", "'s"]
REMARKS = ["easy", "done", "checked", "as expected", "no doubt"]


def _joined(separator: str) -> str:
    return separator if separator.startswith("'") else f" {separator}".rstrip()


def attack_families(q: Q, guesses: list[int]) -> dict[str, str]:
    """A completion for each commitment attack family, written from the question and the guesses alone."""
    a, op, b = q.a, q.op, q.b
    e = f"{a} {op} {b}"
    g1, g2, g3 = (guesses * 3)[:3]
    listed = ", ".join(map(str, guesses[:-1])) + f" and {guesses[-1]}"
    return {
        "copula_subjects": " ".join(f"The {NOUNS[k % 6]} is {x}." for k, x in enumerate(guesses)),
        "label_separators": "\n".join(
            f"Answer{_joined(SEPARATORS[k % 8])} {x}" for k, x in enumerate(guesses)
        ),
        "values_with_remarks": "\n".join(f"{x}, {REMARKS[k % 5]}." for k, x in enumerate(guesses)),
        "prose_list": f"The answers are {listed}.",
        "prose_or": "So " + " or ".join(f"x = {x}" for x in guesses) + ".",
        "answer_then_working": f"{g1}\n\nHere is why: {e} = {g2}. So {e} = {g3}.",
        "closing_digits": f"{e} = {g1}\n\nI also tried {g2} and {g3}.",
        "hesitation_check": f"The answer is {g1}. Hmm, {g1} - {b} = {g2}. {e} = {g3}.",
        "check_correction": f"{e} = {g1}. Check: {g1} - {b} = {g2}, not {a}, so {e} = {g3}.",
        "final_lines": f"The answer is {g1}. The answer is {g2}. \\boxed{{{g3}}}",
        "box_then_phrase": f"\\boxed{{{g1}}}. So the answer is {g2}.",
        "copula_in_a_word": f"The answer to this is {g1}. The answer to this problem is {g2}.",
        "revisions": f"The answer is {g1}. Wait, no. The answer is {g2}. Actually, {e} = {g3}.",
        "tries_and_conclusion": f"{e} = {g1}\n{e} = {g2}\nSo {e} = {g3}.",
    }


@st.composite
def guesses(draw, q: Q) -> list[int]:
    """Two to four guesses near the gold (the gold itself among them about a third of the time)."""
    near = st.integers(q.value - 12, q.value + 12)
    return draw(st.lists(near, min_size=2, max_size=4))


@fixed(40)
@given(q=questions(), data=st.data())
def test_no_attack_family_pays_more_than_one_guess(q, data):
    """Each family's completion is paid for one gold at most, among every number it writes (and its neighbours,
    negatives, hundredths and hundredfolds): so a policy that writes it without computing the answer is paid at most
    as often as by its best single guess, whatever the distribution of golds."""
    gs = data.draw(guesses(q))
    for name, completion in attack_families(q, gs).items():
        paid = [
            g for g in _gold_candidates(completion, q) if grade(completion, str(g), q.question).score == 1.0
        ]
        assert len(paid) <= 1, f"{name}: {completion!r} is paid for each of {paid} (question {q.question!r})"


@fixed(25)
@given(xs=st.lists(st.integers(-9, 9), min_size=2, max_size=3, unique=True))
def test_a_prose_set_is_paid_for_one_set_at_most(xs):
    """A list in prose, read as a set where the gold is one, is paid for one set of values at most: not for a part
    of it, not for more."""
    written = sorted(set(xs) | {x + 1 for x in xs})
    candidates = {tuple(sorted(c)) for c in ([x] for x in written)}
    candidates |= {(x, y) for x in written for y in written if x < y}
    candidates |= {(x, y, z) for x in written for y in written for z in written if x < y < z}
    for completion in (
        "The solutions are " + " and ".join(f"$x = {x}$" for x in xs) + ".",
        "So " + " or ".join(f"x = {x}" for x in xs) + ".",
        "The roots are " + ", ".join(map(str, xs)) + ".",
    ):
        paid = [c for c in candidates if grade(completion, ", ".join(map(str, c)), SET_QUESTION).score == 1.0]
        assert paid in ([], [tuple(sorted(xs))]), (completion, paid)


def test_the_families_are_read_at_all():
    """The incentive test means something only if the families' completions are read: each family pays its
    right answer when the guesses say it the way the family commits (the last one after a revision, the only one,
    ...), so that a refusal above is the rule at work, not a reader that reads nothing."""
    q = Q(47, "+", 8)
    paying = {
        "copula_subjects": [55],
        "label_separators": [55],
        "values_with_remarks": [55],
        "answer_then_working": [55, 55, 55],
        "closing_digits": [55, 55, 55],
        "hesitation_check": [55, 47, 55],
        "check_correction": [54, 46, 55],
        "revisions": [54, 55, 55],
        "tries_and_conclusion": [54, 55, 55],
    }
    for name, gs in paying.items():
        completion = attack_families(q, gs)[name]
        v = grade(completion, q.gold, q.question)
        assert v.score == 1.0, (name, completion, v)
        assert 55 in number_values(v.extracted or "")


# ================================================================================== 4. time: linear in length
def long_families(n: int) -> dict[str, str]:
    """Completions of n pieces built against the structure rules: long subjects and lists, runs of separators and
    spaces, many values in the final lines, many hesitations and checks."""
    return {
        "long_subject": "the value of " + "x of " * n + "is 5",
        "copula_sentences": "The value of x is 5, " * n,
        "prose_list": "The roots are " + " and ".join(str(i % 97) for i in range(n)),
        "or_list": "x = " + " or x = ".join(str(i % 97) for i in range(n)),
        "label_dashes": "Answer" + " - " * n + "55",
        "bare_label_spaces": "Answer " + " " * (4 * n) + "55",
        "remark_words": "55 (" + "checked " * n + ")",
        "remark_spaces": "55" + " " * (4 * n) + "x",
        "working_after": "55\n\nHere is why: " + "7 + 8 = 15, " * n,
        "closing_digits": "47 + 8 = 55\n\n" + "I added 8 to 47 " * n,
        "hesitations": "The answer is 55. " + "Hmm, 55 - 8 = 47. " * n,
        "check_mismatch": "47 + 8 = 54. Check: " + "54 - 8 = 46, not 47, " * n + "so 47 + 8 = 55.",
        "conflicting_boxes": " ".join(f"\\boxed{{{i % 97}}}" for i in range(n)),
        "conflicting_phrases": " ".join(f"the answer is {i % 97}" for i in range(n)),
        "commas": "55" + "," * (4 * n),
        "thousands": "1,000," * n,
        "revisions_inline": "The answer is 5 " + "wait, no, the answer is 6 " * n,
        "notes": "Note: " + "the answer is 5; " * n,
    }


def _grading_seconds(completion: str, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        grade(completion, "55", "What is 47 + 8?")
        best = min(best, time.process_time() - started)
    return best


def test_grading_time_grows_linearly_with_length():
    """Grading a family's completion of 4n pieces takes at most 10 times as long as one of n pieces (4 when linear,
    16 when quadratic): compared within one run, the best of three CPU-time measurements each, so that neither the
    machine's speed nor its load sets the figure."""
    n = 300
    grade("\\boxed{1}", "1", None)  # math-verify loaded before timing
    small, large = long_families(n), long_families(4 * n)
    ratios = {
        name: _grading_seconds(large[name]) / max(_grading_seconds(small[name]), 1e-4) for name in small
    }
    slow = {name: round(r, 1) for name, r in ratios.items() if r > 10}
    assert not slow, f"grading time grows faster than linearly (ratio at 4x the length): {slow}"


# ============================================================================== the docs' table, as the grader
def test_the_reading_table_in_the_docs_is_what_the_grader_does():
    """Every completion of docs/EVALUATION.md's table of readings (gold 55 for "What is 47 + 8?") is paid or
    refused as the table says."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "EVALUATION.md").read_text()
    start = text.index('On "What is 47 + 8?" (gold 55)')
    table = text[start : text.index("#### Final form on MATH-style golds", start)]
    checked, wrong = 0, []
    for line in table.splitlines():
        row = re.match(r"\| (.+) \| (paid|refused) \| .+ \|$", line)
        if row is None:
            continue
        for cell in re.findall(r"`([^`]+)`", row.group(1)):
            if cell.startswith("…"):
                continue  # "… Wait, no.": the previous completion continued
            v = grade(cell.replace("\\n", "\n"), "55", "What is 47 + 8?")
            checked += 1
            if (v.score == 1.0) != (row.group(2) == "paid"):
                wrong.append(
                    f"{cell!r}: the table says {row.group(2)}, the grader {v.reason} (read {v.extracted!r})"
                )
    assert checked >= 40 and not wrong, "\n".join(wrong)
