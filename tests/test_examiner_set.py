"""The training grader against an examiner, on real completions (``tests/data/examiner_set.jsonl``, read by
``tests/examiner_set.py``): the bundled model's first rollout, a trained model's held-out answers and worked MATH-500
solutions, each marked right or wrong by reading it, with the reason. The grader pays none the examiner marks wrong
and refuses none the examiner marks right; every disagreement is listed."""

from __future__ import annotations

from collections import Counter

import pytest

import examiner_set
from pacs_rl.rewards.math_verifier import check


def test_the_set_is_whole():
    """At least 300 real completions, from every source, both marks in each of the model's sources, each with a
    reason; MATH-500 rows count only where the shared data folder holds MATH-500."""
    rows = examiner_set.load(with_math=False)
    by_source = Counter(r["source"] for r in rows)
    marks = Counter((r["source"], r["mark"]) for r in rows)
    assert len(rows) >= 300, by_source
    for source in ("first_rollout", "trained"):
        assert marks[(source, "right")] > 0 and marks[(source, "wrong")] > 0, marks
    assert all(r["finish_reason"] == "stop" for r in rows)


@pytest.mark.parametrize("source", examiner_set.SOURCES)
def test_the_training_grader_marks_as_the_examiner(source):
    rows = [r for r in examiner_set.load() if r["source"] == source]
    if source == "math500" and not rows:
        pytest.skip("MATH-500 is read from the shared data folder, which is not here (PACS_RL_SHARED_DATA)")
    assert rows, f"no {source} rows in the set"
    verdicts = [check(r["completion"], r["gold"], grader="sound", prompt=r["question"]) for r in rows]
    wrong = examiner_set.disagreements(rows, verdicts)
    assert not wrong, (
        f"{len(wrong)} of {len(rows)} {source} completions graded otherwise than the examiner:\n"
        + ("\n".join(wrong))
    )
