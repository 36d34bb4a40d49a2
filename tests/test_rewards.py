"""Math reward: equivalence, extraction precedence, strict mode and reward-hacking cases (in-process)."""

from __future__ import annotations

import json
import pickle
import re
import time

import pytest

from pacs_rl.rewards import (
    REASONS,
    extract_answer,
    find_boxes,
    make_math_reward_func,
    math_reward,
    math_reward_func,
    verify,
)

PATHOLOGICAL = r"The answer is \boxed{9^{9^{9^{9}}}}."  # sympy tries to evaluate a power tower


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("So the total is 25.", "025"),  # AIME gold with a leading zero
        (r"The answer is \boxed{25}", "025"),
        ("so the probability is 0.75", r"\frac{3}{4}"),
        ("so the probability is 3/4", r"\frac{3}{4}"),
        (r"Hence $\boxed{\dfrac{3}{4}}$.", "0.75"),
        (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt3}{2}"),  # nested braces
        (r"Thus \boxed 25.", "25"),  # brace-less form
        (r"Thus \fbox{12}", "12"),
        (r"We get \boxed{x = 5}.", "5"),
        (r"The choice is $\boxed{\textbf{(B)}}$", r"\text{(B)}"),
        (r"\boxed{3.83\times10^{35}}", "3.83e35"),  # Minerva's plain scientific notation
        (r"First \boxed{\frac12}, i.e. \boxed{0.5}.", "1/2"),  # several boxes, same value
    ],
)
def test_equal_answers_score_one(completion, answer):
    verdict = verify(completion, answer)
    assert (verdict.score, verdict.reason) == (1.0, "correct"), verdict
    assert math_reward(completion, answer) == 1.0


@pytest.mark.parametrize(
    ("completion", "answer"),
    [("So the total is 24.", "025"), (r"\boxed{\frac{3}{5}}", "0.75"), (r"\boxed{-5}", "5")],
)
def test_different_answers_score_zero(completion, answer):
    assert verify(completion, answer).reason == "wrong"
    assert math_reward(completion, answer) == 0.0


def test_box_takes_precedence_over_later_text():
    completion = r"So $x = \boxed{7}$. Check: 7 + 1 = 8."
    assert verify(completion, "7").reason == "correct"
    assert verify(completion, "8").reason == "wrong"
    assert extract_answer(completion) == "7"


def test_lenient_reads_the_last_number_strict_needs_a_box():
    completion = "12 + 30 = 42. So Tom has 42 apples."
    assert verify(completion, "42").score == 1.0
    assert verify(completion, "42", strict=True).reason == "no_answer"
    assert extract_answer(completion, strict=True) is None
    assert extract_answer(completion) == "42"
    assert verify(r"so \boxed{42}", "42", strict=True).score == 1.0


def test_find_boxes_forms():
    text = r"\boxed{\frac{1}{2}} \boxed {3} \boxed 4. \fbox{x^{2}} \boxed{} \boxed{5"
    assert find_boxes(text) == [r"\frac{1}{2}", "3", "4", "x^{2}", "", None]
    assert find_boxes(r"\boxedfoo{3}") == []  # another command, not a box


# ------------------------------------------------------------------------------------- reward hacking


@pytest.mark.parametrize("answer", ["3", "5"])
def test_several_different_boxes_score_zero_whichever_is_right(answer):
    # Hedging: whichever box a grader reads, the policy would be paid for a guess. Zero for any gold.
    for strict in (False, True):
        verdict = verify(r"It is \boxed{3} or maybe \boxed{5}.", answer, strict=strict)
        assert (verdict.score, verdict.reason) == (0.0, "multiple_answers")


def test_right_box_followed_by_a_wrong_box_scores_zero():
    completion = r"First guess \boxed{42}. Wait, recomputing: \boxed{41}."
    assert verify(completion, "42").score == 0.0
    assert verify(completion, "42", strict=True).score == 0.0
    assert verify(completion, "41").score == 0.0  # still two different answers


def test_enumeration_of_candidates_scores_zero():
    listing = ", ".join(str(i) for i in range(1, 101))
    assert verify(f"The answer is one of {listing}", "42").score == 0.0
    assert verify(f"Candidates: ${listing}$", "42").score == 0.0
    assert verify(r"The answer is one of $\{1, 2, \dots, 100\}$", "42").score == 0.0
    boxed_listing = " ".join(rf"\boxed{{{i}}}" for i in range(1, 101))
    assert verify(boxed_listing, "42").reason == "multiple_answers"


def test_empty_box_pays_nothing():
    for completion in [r"\boxed{}", r"The answer is \boxed{ }.", r"\boxed{} 42", r"\boxed{42} then \boxed{}"]:
        for strict in (False, True):
            verdict = verify(completion, "42", strict=strict)
            assert (verdict.score, verdict.reason) == (0.0, "no_answer"), (completion, strict, verdict)


def test_unclosed_box_is_no_answer():
    assert verify(r"so the answer is \boxed{42", "42").reason == "no_answer"


def test_answer_only_in_an_echo_of_the_prompt_scores_zero():
    prompt = "Compute 12 + 30."
    echo = "Compute 12 + 30. I am not sure how."
    # Without the prompt the plain-expression reader reads the echoed question "12 + 30" (which
    # math-verify evaluates to 42); the unevaluated-answer rule refuses it ...
    assert verify(echo, "42").reason == "unevaluated"
    # ... and with the prompt passed, its echo is not read at all.
    assert verify(echo, "42", prompt=prompt).reason == "no_answer"
    assert verify(echo + " It is 42.", "42", prompt=prompt).score == 1.0
    # TRL passes prompts= to reward functions: the same guard applies there.
    assert math_reward_func(completions=[echo], answer=["42"], prompts=[prompt]) == [0.0]
    conversational = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt}]]
    assert math_reward_func(completions=[echo], answer=["42"], prompts=conversational) == [0.0]


@pytest.mark.parametrize(
    ("completion", "answer"),
    [  # outputs of an RL run on two-digit arithmetic that learned to restate the question
        ("33 - 51 = 23 - 51 = 23 - 11\n\nSo, the answer to 33 - 51 is 23 - 11.", "-18"),
        ("29 + 41 = 72 + 41\n\nSo, the answer to 29 + 41 is 72 + 41.", "70"),
        (r"The answer is \boxed{33 - 51}.", "-18"),
        (r"\boxed{4 \times 5}", "20"),
        (r"\boxed{6\cdot 7}", "42"),
        ("so it is 84 / 2", "42"),
    ],
)
def test_unevaluated_expression_for_a_numeric_gold_scores_zero(completion, answer):
    verdict = verify(completion, answer)
    assert (verdict.score, verdict.reason) == (0.0, "unevaluated"), verdict
    assert math_reward_func(completions=[completion], answer=[answer]) == [0.0]


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        (r"\boxed{-18}", "-18"),
        ("33 - 51 = -18. The answer is -18.", "-18"),
        (r"\boxed{1,000}", "1000"),
        (r"\boxed{10^{3}}", "1000"),  # a power is a value, not an operation on two numbers
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        ("1/2", r"\frac{1}{2}"),  # the gold is not a plain number: expressions stay allowed
        (r"\boxed{2\sqrt{3}}", r"2\sqrt{3}"),
        (r"\boxed{3 - \sqrt{2}}", r"3-\sqrt{2}"),
        ("So the total is 180 + 24 = 204", "204"),  # an equation ending in the value (AIME 2024 solution)
    ],
)
def test_evaluated_answers_and_non_numeric_golds_are_untouched(completion, answer):
    verdict = verify(completion, answer)
    assert (verdict.score, verdict.reason) == (1.0, "correct"), verdict


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
        (r"\boxed{\frac{", "4", "no_answer"),
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
    assert math_reward_func.__name__ == "math_reward"
    assert logged["math_reward/no_answer_frac"] == pytest.approx(1 / 4)
    strict = make_math_reward_func(strict=True)
    assert strict.__name__ == "math_reward_strict"
    assert strict(completions=completions, answer=["4", "5", "7", "1"]) == [1.0, 0.0, 0.0, 0.0]


def test_trl_reward_function_other_column_and_missing_column():
    func = make_math_reward_func(answer_column="solution_answer", name="acc")
    assert func(completions=["7"], solution_answer=["7"]) == [1.0]
    with pytest.raises(ValueError, match="solution_answer"):
        func(completions=["7"], problem=["q"])
    clone = pickle.loads(pickle.dumps(func))
    assert clone.__name__ == "acc" and clone(completions=["8"], solution_answer=["7"]) == [0.0]


# ------------------------------------------------------------------------------------- real data


def test_real_worked_solutions_match_their_gold(shared_data):
    rows = [json.loads(line) for line in (shared_data / "math500.jsonl").open()][:60]
    assert all(verify(r["solution"], r["answer"]).reason == "correct" for r in rows)
    # pair each solution with another problem's integer answer that differs: must be wrong
    ints = [r for r in rows if re.fullmatch(r"\d+", r["answer"])]
    mismatched = [
        (a, b)
        for a, b in zip(ints, ints[1:] + ints[:1], strict=False)
        if int(a["answer"]) != int(b["answer"])
    ]
    assert len(mismatched) >= 10
    assert all(verify(a["solution"], b["answer"]).score == 0.0 for a, b in mismatched)
