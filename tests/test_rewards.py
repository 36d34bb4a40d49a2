"""Math reward: graders by name, the paper grader against the authors' call, what each rule refuses and
what it must never refuse, robustness, the TRL adapter and reward functions named by dotted path."""

from __future__ import annotations

import json
import pickle
import re
import time

import pytest

from pacs_rl.rewards import (
    REASONS,
    RULES,
    extract_answer,
    find_boxes,
    grader_name,
    load_reward_funcs,
    make_math_reward_func,
    math_reward,
    math_reward_func,
    parse_grader,
    verify,
)
from pacs_rl.rewards.answers import answer_form, box_spans, evaluate, statement_value
from pacs_rl.rewards.math_verifier import authors_score, restates_question

PATHOLOGICAL = r"The answer is \boxed{9^{9^{9^{9}}}}."  # sympy tries to evaluate a power tower
EVERY_RULE = "+".join(RULES)
GRADERS = ["paper", "strict", *(f"paper+{r}" for r in RULES), f"strict+{EVERY_RULE}", f"paper+{EVERY_RULE}"]

# ------------------------------------------------------------------------------------- paper = authors

# (completion, gold): the issue's cases, box precedence, several boxes, text answers, odd golds.
PAPER_CASES = [
    (r"\boxed{3/4}", "0.75"),  # a slash fraction against a decimal gold: right
    (r"First I thought \boxed{3} but actually the answer is \boxed{5}", "5"),  # the last box wins
    (r"First I thought \boxed{3} but actually the answer is \boxed{5}", "3"),
    (r"The answer is \boxed{3}. Then later 5", "5"),  # a box before later text: the box
    (r"It is \boxed{3} or maybe \boxed{5}.", "5"),  # joined by "or": read as the set {3, 5}
    ("So, the answer to 33 - 51 is 23 - 11.", "-18"),  # the restatement hack: paid by the paper's call
    ("So the total is 25.", "025"),
    ("so the probability is 3/4", r"\frac{3}{4}"),
    ("The final answer is 25.", "25"),
    ("12 + 30 = 42. So Tom has 42 apples.", "42"),
    (r"\fbox{25}", "25"),  # math-verify does not read \fbox
    (r"\boxed 25", "25"),
    (r"\boxed{3.83 \times 10^{35}}", "3.83e35"),  # Minerva's gold reads as 3.83·e·35
    (r"\boxed{3.83e35}", "3.83e35"),
    (r"\boxed{}", "4"),
    ("no answer here", "4"),
    (r"\boxed{42", "42"),  # cut off inside the box
    ("x", r"\boxed{"),  # a gold math-verify cannot parse
    (r"Thus $\boxed{\textbf{(B)}}$", r"\text{(B)}"),
]


@pytest.mark.parametrize(("completion", "answer"), PAPER_CASES)
def test_paper_grader_is_the_authors_call(completion, answer):
    assert verify(completion, answer).score == authors_score(completion, answer), verify(completion, answer)


def test_the_issue_examples_are_right_by_default():
    assert math_reward(r"\boxed{3/4}", "0.75") == 1.0
    assert math_reward(r"First I thought \boxed{3} but actually the answer is \boxed{5}", "5") == 1.0
    assert math_reward_func(completions=[r"\boxed{3/4}"], answer=["0.75"]) == [1.0]


def test_paper_grader_agrees_with_the_authors_on_real_solutions(shared_data):
    rows = [json.loads(line) for line in (shared_data / "math500.jsonl").open()][:40]
    rows += [json.loads(line) for line in (shared_data / "minerva_math.jsonl").open()][:20]
    golds = [r["answer"] for r in rows]
    pairs = [(r["solution"], g) for r, g in zip(rows, golds, strict=True)]
    pairs += [(r["solution"], g) for r, g in zip(rows, golds[1:] + golds[:1], strict=True)]  # others' golds
    for solution, gold in pairs:
        assert verify(solution, gold, timeout=20).score == authors_score(solution, gold), (
            solution[-200:],
            gold,
        )


# ------------------------------------------------------------------------------------- names


def test_grader_names():
    assert parse_grader("paper").rules == ()
    assert grader_name("paper + echo+restatement") == "paper+restatement+echo"  # canonical rule order
    assert parse_grader("strict+multiple_boxed").base == "strict"
    with pytest.raises(ValueError, match="unknown base grader 'lenient'"):
        parse_grader("lenient")
    with pytest.raises(ValueError, match=r"paper\+restatement"):
        parse_grader("restatement")  # a rule alone: says to put a base grader first
    with pytest.raises(ValueError, match="unknown rule"):
        parse_grader("paper+nonsense")
    with pytest.raises(ValueError, match="unknown base grader"):
        verify("4", "4", grader="nope")


# ------------------------------------------------------------------------------------- never refused

QUESTION = "Find the value asked for in the figure."  # holds no number: no answer restates it
# Every form of a right answer (boxed, so that strict reads it too) against golds written another way.
EQUIVALENT_FORMS = [
    (r"\boxed{3/4}", "0.75"),  # slash vs decimal
    (r"\boxed{0.75}", r"\frac{3}{4}"),  # decimal vs \frac
    (r"\boxed{\frac{3}{4}}", "0.75"),
    (r"\boxed{\dfrac{3}{4}}", r"\frac34"),
    (r"\boxed{\tfrac{3}{4}}", "3/4"),
    (r"\boxed{75\%}", "0.75"),  # percent
    (r"\boxed{0.75}", r"75\%"),
    (r"\boxed{75}", r"75\%"),
    (r"\boxed{1,000}", "1000"),  # thousands separators
    (r"\boxed{1000}", "1,000"),
    (r"\boxed{1{,}000}", "1000"),
    (r"\boxed{12,345,678}", "12345678"),
    (r"\boxed{-18}", "-18"),  # negative numbers
    (r"\boxed{−18}", "-18"),
    (r"\boxed{-\frac{1}{2}}", "-0.5"),
    (r"\boxed{[1, 2)}", "[1,2)"),  # intervals
    (r"\boxed{(-\infty, 3]}", r"(-\infty,3]"),
    (r"\boxed{(3, -4)}", "(3,-4)"),  # tuples
    (r"\boxed{\{2, 1\}}", r"\{1,2\}"),  # sets in any order
    (r"\boxed{3, 1, 2}", "1,2,3"),
    (r"\boxed{5 \text{ cm}}", "5"),  # units
    (r"\boxed{12 \text{ dollars}}", "12"),
    (r"\boxed{\$12}", "12"),
    (r"\boxed{90^\circ}", "90"),
    (r"\boxed{025}", "25"),  # AIME's leading zeros
    (r"\boxed{x = 5}", "5"),
    (r"\boxed{2\sqrt{3}}", r"\sqrt{12}"),
    (r"\boxed{10^{3}}", "1000"),  # a power is a value
]


@pytest.mark.parametrize("grader", GRADERS)
def test_no_grader_refuses_an_equivalent_form_of_a_right_answer(grader):
    for form, gold in EQUIVALENT_FORMS:
        completion = f"We work it out step by step. So the answer is {form}."
        verdict = verify(completion, gold, grader=grader, prompt=QUESTION, timeout=20)
        assert (verdict.score, verdict.reason) == (1.0, "correct"), (grader, form, gold, verdict)


@pytest.mark.parametrize(
    ("question", "answer", "gold"),
    [
        ("What is 33 - 51?", "-18", "-18"),
        ("What is 1,000 - 3?", "997", "997"),
        ("Write 3/4 as a percent.", r"75\%", r"75\%"),
        ("Simplify 2/4.", r"\frac{1}{2}", r"\frac{1}{2}"),  # the gold is no plain number: rule off
        ("Find 10^3.", r"10^{3}", "1000"),
        ("What is 12 + 6?", "20 - 2", "18"),  # an operation with a number of its own: not a restatement
        ("What is 1/2 + 1/4?", r"\frac{3}{4}", "0.75"),
        ("So the total is?", "180 + 24 = 204", "204"),  # an equation ending in the value
        ("What is 33 - 51?", "3 - 5 - 16", "-18"),  # '3-5' inside '33-51' is not the question's operation
        ("Balance CO + O_2 -> CO_2: the coefficient of O_2?", r"\frac{1}{2}", "0.5"),  # Minerva-Math 167
        ("What is 51 + 0?", "51", "51"),  # a single number from the question is an answer
    ],
)
def test_restatement_rule_spares_answers_that_are_not_the_question(question, answer, gold):
    verdict = verify(rf"\boxed{{{answer}}}", gold, grader="paper+restatement", prompt=question)
    assert verdict.score == 1.0, verdict
    assert not restates_question(answer, gold, question)


# ------------------------------------------------------------------------------------- what rules refuse


@pytest.mark.parametrize(
    ("question", "completion", "gold"),
    [  # outputs of an RL run on two-digit arithmetic that learned to restate the question
        ("What is 33 - 51?", "33 - 51 = 23 - 51 = 23 - 11\n\nSo, the answer to 33 - 51 is 23 - 11.", "-18"),
        ("What is 29 + 41?", "29 + 41 = 72 + 41\n\nSo, the answer to 29 + 41 is 72 + 41.", "70"),
        ("What is 33 - 51?", r"The answer is \boxed{33 - 51}.", "-18"),
        ("What is 33 - 51?", r"The answer is \boxed{33-51}.", "-18"),
        ("What is 4 times 5?", r"\boxed{4 \times 5}", "20"),
        ("Compute 6 * 7.", r"\boxed{6\cdot 7}", "42"),
        ("What is 84 / 2?", "so it is 84 / 2", "42"),
        ("What is 36 / 2?", r"\boxed{\frac{36}{2}}", "18"),
        ("What is 33 - 51?", "I do not know. The answer is 33 - 51", "-18"),
        ("What is 36 + 0?", "add 0 to both sides: 36 + 0 = 36 + 0 = 36 + 0 =", "36"),  # the bundled model
        ("What is 1,200 + 34?", r"\boxed{1200 + 34}", "1234"),
        # a sentence's full stop kept these paid (a PACS run of the comparison learned it, 2026-11-25)
        ("What is 92 + 5?", "To solve this, 92 + 5 equals 107.\n\nSo the answer is 92 + 5.", "97"),
        ("What is 53 + 8?", "The answer is 53 + 8.", "61"),
        ("What is 84 / 2?", "The result is 84 / 2.", "42"),
    ],
)
def test_restatement_rule_refuses_the_question_as_its_own_answer(question, completion, gold):
    assert verify(completion, gold, prompt=question).score == 1.0  # the paper's call pays it ...
    verdict = verify(completion, gold, grader="paper+restatement", prompt=question)
    assert (verdict.score, verdict.reason) == (0.0, "restatement"), verdict  # ... the rule does not
    assert verify(completion, gold, grader="paper+restatement").score == 1.0  # no question: cannot apply
    trl = make_math_reward_func("paper+restatement")
    assert trl(completions=[completion], answer=[gold], problem=[question]) == [0.0]
    assert trl(
        completions=[completion], answer=[gold], prompts=[[{"role": "user", "content": question}]]
    ) == [0.0]


def test_multiple_boxed_rule_refuses_hedging_only():
    hedge = r"First I thought \boxed{3} but actually the answer is \boxed{5}"
    assert verify(hedge, "5").score == 1.0  # the paper's call reads the last box here
    assert verify(hedge, "5", grader="paper+multiple_boxed").reason == "multiple_answers"
    assert verify(hedge, "3", grader="paper+multiple_boxed").reason == "wrong"
    listed = r"First guess \boxed{42}. Wait, recomputing: \boxed{41}."  # math-verify reads both: {42, 41}
    assert (
        verify(listed, "41").reason == verify(listed, "41", grader="paper+multiple_boxed").reason == "wrong"
    )
    boxed_listing = " ".join(rf"\boxed{{{i}}}" for i in range(1, 101))
    assert verify(boxed_listing, "100", grader="strict+multiple_boxed").reason == "multiple_answers"
    same_value = r"First \boxed{\frac12}, i.e. \boxed{0.5}."
    assert verify(same_value, "1/2", grader="paper+multiple_boxed").score == 1.0


def test_strict_needs_a_box_and_reads_the_last_one():
    completion = "12 + 30 = 42. So Tom has 42 apples."
    assert verify(completion, "42").score == 1.0
    assert verify(completion, "42", grader="strict").reason == "no_answer"
    assert extract_answer(completion, grader="strict") is None
    assert extract_answer(completion) == "42"
    assert verify(r"so \boxed{42}", "42", grader="strict").score == 1.0
    late_text = r"So \boxed{3}. The final answer is 5."
    assert verify(late_text, "3", grader="strict").score == 1.0
    for completion in [r"\boxed{}", r"The answer is \boxed{ }.", r"\boxed{42} then \boxed{}", r"\boxed{42"]:
        assert verify(completion, "42", grader="strict").reason == "no_answer", completion


def test_echo_rule_ignores_text_that_repeats_the_prompt():
    prompt = "Compute 12 + 30."
    echo = "Compute 12 + 30. I am not sure how."
    assert verify(echo, "42").score == 1.0  # the paper's call reads the echoed "12 + 30"
    assert verify(echo, "42", grader="paper+echo", prompt=prompt).reason == "no_answer"
    assert verify(echo + " It is 42.", "42", grader="paper+echo", prompt=prompt).score == 1.0


def test_tiny_numbers_compare_equal_in_math_verify_so_no_rule_rewrites_e_notation():
    # Why there is no rule reading Minerva's gold "1.325e-27" as 1.325 x 10^-27: math-verify rounds to six
    # decimals, so two different tiny numbers are equal once both are read as numbers. The paper's call reads
    # "1.325e-27" in LaTeX as 1.325*e-27 (Euler's e), which only the same text matches.
    assert verify(r"\boxed{2.88 \times 10^{-19}}", r"1.325 \times 10^{-27}").score == 1.0
    assert verify(r"\boxed{2.88e-19}", "1.325e-27").score == 0.0
    assert verify(r"\boxed{1.325e-27}", "1.325e-27").score == 1.0


def test_find_boxes_forms():
    text = r"\boxed{\frac{1}{2}} \boxed {3} \boxed 4. \boxed{} \boxed{5"
    assert find_boxes(text) == [r"\frac{1}{2}", "3", "4", "", None]
    assert find_boxes(r"\boxedfoo{3}") == []  # another command, not a box


# ------------------------------------------------------------------------------------- robustness


@pytest.mark.parametrize(
    ("completion", "answer", "reason"),
    [
        (None, "4", "no_answer"),
        ("", "4", "no_answer"),
        (12, "12", "correct"),  # non-string model output is read as text
        ("4", "", "empty_gold"),
        ("4", None, "empty_gold"),
        ("4", 4, "correct"),  # an int gold from a dataset column
        ("Nothing to see here.", "4", "no_answer"),
        ("\\boxed{\x00\udcff}", "4", "wrong"),
    ],
)
def test_never_raises_and_counts_a_reason(completion, answer, reason):
    verdict = verify(completion, answer)
    assert verdict.reason == reason
    assert verdict.reason in REASONS


def test_pathological_answer_is_bounded_in_process():
    started = time.monotonic()
    verdict = verify(PATHOLOGICAL, "5", timeout=0.5)
    elapsed = time.monotonic() - started
    assert (verdict.score, verdict.reason) == (0.0, "timeout")
    # a hang guard, not a speed claim (the machine may be loaded): unbounded, sympy never finishes the power tower
    assert elapsed < 60.0, f"timeout=0.5 s was not enforced: took {elapsed:.1f} s"
    assert verify(r"\boxed{5}", "5", timeout=0.5).score == 1.0  # the timer is cleaned up


# ------------------------------------------------------------------------------------- TRL adapter


def test_trl_reward_function_signature_and_name():
    completions = [
        r"\boxed{4}",
        [{"role": "assistant", "content": "It is 5"}],
        [{"role": "assistant", "content": [{"type": "text", "text": r"\boxed{6}"}]}],
        "no idea",
    ]
    logged = {}
    rewards = math_reward_func(
        prompts=["p"] * 4,
        completions=completions,
        completion_ids=[[1, 2]] * 4,
        answer=["4", "5", "7", "1"],
        problem=["q"] * 4,
        trainer_state=None,
        log_metric=lambda name, value: logged.__setitem__(name, value),
    )
    assert rewards == [1.0, 1.0, 0.0, 0.0]
    assert math_reward_func.__name__ == "math_reward" and math_reward_func.grader == "paper"
    assert logged["math_reward/no_answer_frac"] == pytest.approx(1 / 4)
    strict = make_math_reward_func("strict")
    assert strict.__name__ == "math_reward_strict"
    assert strict(completions=completions, answer=["4", "5", "7", "1"]) == [1.0, 0.0, 0.0, 0.0]
    assert make_math_reward_func("paper+echo+restatement").__name__ == "math_reward_paper+restatement+echo"


def test_trl_reward_function_other_column_and_missing_column():
    func = make_math_reward_func(answer_column="solution_answer", name="acc")
    assert func(completions=["7"], solution_answer=["7"]) == [1.0]
    with pytest.raises(ValueError, match="solution_answer"):
        func(completions=["7"], problem=["q"])
    clone = pickle.loads(pickle.dumps(func))
    assert clone.__name__ == "acc" and clone(completions=["8"], solution_answer=["7"]) == [0.0]


# ------------------------------------------------------------------------------------- reward functions by name


def test_reward_functions_by_dotted_path_and_file(tmp_path, monkeypatch):
    (tmp_path / "custom_grading_rewards.py").write_text(
        "def short(completions, **kwargs):\n    return [1.0 if len(str(c)) < 5 else 0.0 for c in completions]\n"
        "NOT_CALLABLE = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    math, by_module, by_file = load_reward_funcs(
        f"math, custom_grading_rewards:short, {tmp_path / 'custom_grading_rewards.py'}:short", grader="strict"
    )
    assert math.grader == "strict" and by_module(completions=["ab", "abcdef"]) == [1.0, 0.0]
    assert by_file(completions=["abcdef"]) == [0.0]
    for spec, message in [
        ("custom_grading_rewards", "neither 'math' nor 'module:function'"),
        ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
        ("custom_grading_rewards:missing", "has no attribute 'missing'"),
        ("custom_grading_rewards:NOT_CALLABLE", "not callable"),
        (f"{tmp_path / 'absent.py'}:f", "does not exist"),
        ("", "no reward function given"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            load_reward_funcs(spec)


# ------------------------------------------------------------------------------------- real data


def test_real_worked_solutions_match_their_gold(shared_data):
    rows = [json.loads(line) for line in (shared_data / "math500.jsonl").open()][:60]
    assert all(verify(r["solution"], r["answer"], timeout=20).reason == "correct" for r in rows)
    # pair each solution with another problem's integer answer that differs: must be wrong
    ints = [r for r in rows if re.fullmatch(r"\d+", r["answer"])]
    mismatched = [
        (a, b)
        for a, b in zip(ints, ints[1:] + ints[:1], strict=False)
        if int(a["answer"]) != int(b["answer"])
    ]
    assert len(mismatched) >= 10
    assert all(verify(a["solution"], b["answer"]).score == 0.0 for a, b in mismatched)


# ------------------------------------------------------------------------------------- the sound grader's parts


def test_evaluate_reads_plain_arithmetic_exactly_and_nothing_else():
    assert evaluate("47 + 8") == 55
    assert evaluate(r"\frac{110}{2}") == 55
    assert evaluate("2(8) + 4") == 20
    assert evaluate(r"3 \times 4 - 2^3") == 4
    assert evaluate("1,000 - 3") == 997
    assert evaluate("-(-5)") == 5
    assert evaluate(r"\left(1 + 2\right) \cdot 3") == 9
    for text in ["x + 1", r"\sqrt{4}", "55 apples", "1, 2", "2^{100}", "9^{9^{9}}", "", "1/0", "((((1"]:
        assert evaluate(text) is None, text


def test_statement_value_is_what_the_statement_states():
    assert statement_value("We have 47 + 8 = 55.") == "47 + 8 = 55"
    assert statement_value("47 + 8 = 55, since 7 + 8 = 15.") == "47 + 8 = 55"
    assert statement_value(r"\[5^2+7^2=74\]") == "5^2+7^2=74"
    assert statement_value("So, 26 - 0 is 26.", verbs=True) == "26"
    assert statement_value("you get 26", verbs=True) == "26"
    assert statement_value("**55**") == "55"
    assert statement_value("55 apples") == "55 apples"
    for text in ["I added 34 to 34.", "40 + 0 =", "Step one", "The sum is the answer."]:
        assert statement_value(text) is None, text


def test_unclosed_boxes_are_read_in_one_pass():
    text = r"\boxed{" * 500 + "55"
    spans = box_spans(text)
    assert len(spans) == 500 and all(content is None for *_, content in spans)
    assert box_spans(r"\boxed{1} \boxed{\frac{1}{2}} \boxed{") == [
        (0, 9, "1"),
        (10, 29, r"\frac{1}{2}"),
        (30, 37, None),
    ]


def test_the_form_label_parses_nothing_for_a_long_answer(monkeypatch):
    """The monitor's form label does no symbolic parsing the verdict did not need: a thousand numbers are
    several values, said without handing them to the LaTeX parser."""
    import latex2sympy2_extended

    parsed: list[str] = []
    real = latex2sympy2_extended.latex2sympy
    monkeypatch.setattr(
        latex2sympy2_extended, "latex2sympy", lambda s, *a, **k: parsed.append(s) or real(s, *a, **k)
    )
    numbers = ", ".join(str(i) for i in range(1000))
    verdict = verify(f"The answer is {numbers}.", "55", grader="sound", prompt="What is 47 + 8?")
    assert (verdict.reason, verdict.form) == ("multiple_answers", "several")
    assert answer_form(f"The answer is {numbers}.", numbers, "55", "What is 47 + 8?") == "several"
    verdict = verify(rf"\boxed{{{' + '.join(f'x^{{{i}}}' for i in range(300))}}}", "x^2", grader="sound")
    assert verdict.reason == "not_final_form"
    assert [s for s in parsed if len(s) > 200] == []


@pytest.mark.parametrize(
    ("answer", "gold", "question", "refused"),
    [
        (r"(x+2)(x+3) + x - x", "(x+2)(x+3)", "Factor $x^2+5x+6$.", True),  # padded: larger than the gold
        (r"(x+3)(x+2)", "(x+2)(x+3)", "Factor $x^2+5x+6$.", False),
        (
            r"x(x+5)+6",
            "(x+2)(x+3)",
            "Factor $x^2+5x+6$.",
            True,
        ),  # a sum, no larger than the gold: not factored
        (r"(x+1)(x+1)", "x^2+2x+1", "Expand $(x+1)^2$.", True),  # a product: not expanded
        (r"1 + 2x + x^2", "x^2+2x+1", "Expand $(x+1)^2$.", False),  # expanded, terms in another order
        (r"-(3-x)(x+3)", "(x-3)(x+3)", "Factor $x^2-9$ completely.", False),  # factored, a sign moved out
        (
            r"\sqrt{12}",
            r"2\sqrt{3}",
            "Express it in simplest radical form.",
            True,
        ),  # the gold simplifies it away
        (r"\sqrt{12}", r"2\sqrt{3}", "How long is the diagonal?", False),  # no simplest form asked
        (r"2k + 4 - 2", "2k+2", "Simplify $(-k + 4) + (-2 + 3k)$.", True),
        (r"2x + 3", "y = 2x + 3", "Find the line.", True),  # the gold's equation asked for
        (r"5", "x=5", "Solve for $x$.", False),  # a gold that states a value takes the value alone
        (r"\sqrt{2} \text{ or } \sqrt{2}", r"\sqrt{2}", None, True),  # two values where the gold is one
        (r"1, 2", r"\{1,2\}", None, False),  # a set gold: a list is its form
    ],
)
def test_the_final_form_of_a_math_style_answer(answer, gold, question, refused):
    verdict = verify(rf"\boxed{{{answer}}}", gold, grader="sound", prompt=question, timeout=20)
    assert (
        verify(rf"\boxed{{{answer}}}", gold, grader="paper", timeout=20).score == 1.0
    )  # equal by math-verify
    assert (verdict.reason == "not_final_form") == refused, verdict
    assert verdict.score == (0.0 if refused else 1.0), verdict
