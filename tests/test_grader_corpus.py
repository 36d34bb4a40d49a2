"""A hand-written corpus of MATH-style grading cases (``grader_corpus.jsonl``), checked against the ``sound``
grader's specification and against the paper grader's recorded scores.

Each line: ``class``, ``question``, ``gold``, ``completion``, ``expect`` ("pay" or "refuse": what the sound
grader's specification says, not what the code happens to do), ``paper`` (the paper grader's score, 0 or 1,
as measured when the case was written) and ``why``.

The specification of ``sound`` (docs/EVALUATION.md, "How `sound` reads the final answer"):

1. it reads one final answer as a reader reads it: the last commitment (a closed non-empty box, an answer phrase
   in any wording, a label), correction or conclusion; failing any, a plain last line (a number, or an equation
   whose last side is one); negated, hypothetical and attributed phrases commit to nothing; a check after the
   answer does not replace it; hedged answers, false statements and several values are refused;
2. where the gold is a plain number, the answer must be a number written as one (or a true equation ending on
   it); operations and hedges/lists are refused;
3. the question's own expression handed back is refused unless the gold is that expression;
4. then equality: exact for plain numbers, math-verify's otherwise, in final form (no larger than the gold,
   simplest where the question asks, the gold's equation, one value).

``paper`` is recorded so that a math-verify upgrade that changes the paper grader's verdict is noticed. Every
failure is reported at once, with the case's class, gold and completion.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from pacs_rl.rewards.math_verifier import check

CORPUS = Path(__file__).with_name("grader_corpus.jsonl")
FIELDS = ("class", "question", "gold", "completion", "expect", "paper", "why")
MIN_CASES = 300
MIN_CLASSES = 23


def _load() -> list[dict]:
    cases = []
    with CORPUS.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                case = json.loads(line)
                case["line"] = number
                cases.append(case)
    return cases


@pytest.fixture(scope="module")
def cases() -> list[dict]:
    return _load()


def _where(case: dict) -> str:
    return (
        f"line {case['line']} [{case['class']}] gold={case['gold']!r} completion={case['completion']!r}"
        f"\n    question={case['question']!r}\n    why: {case['why']}"
    )


def _report(title: str, failures: list[str], total: int) -> str:
    return f"{title}: {len(failures)} of {total} cases\n" + "\n".join(failures)


def test_corpus_is_large_and_well_formed(cases):
    assert len(cases) >= MIN_CASES, f"{len(cases)} cases, want at least {MIN_CASES}"
    classes = Counter(c["class"] for c in cases)
    assert len(classes) >= MIN_CLASSES, (
        f"{len(classes)} classes, want at least {MIN_CLASSES}: {dict(classes)}"
    )
    problems = []
    seen = set()
    for c in cases:
        missing = [k for k in FIELDS if k not in c]
        if missing:
            problems.append(f"line {c['line']}: missing {missing}")
            continue
        if c["expect"] not in ("pay", "refuse"):
            problems.append(f"line {c['line']}: expect={c['expect']!r}")
        if c["paper"] not in (0, 1):
            problems.append(f"line {c['line']}: paper={c['paper']!r}")
        if not all(isinstance(c[k], str) and c[k].strip() for k in ("class", "question", "gold", "why")):
            problems.append(f"line {c['line']}: an empty text field")
        key = (c["question"], c["gold"], c["completion"])
        if key in seen:
            problems.append(f"line {c['line']}: duplicate case")
        seen.add(key)
    assert not problems, "\n".join(problems)
    # both verdicts occur, and most classes hold both: right answers in every format must be paid
    assert Counter(c["expect"] for c in cases).keys() == {"pay", "refuse"}
    mixed = [k for k in classes if {c["expect"] for c in cases if c["class"] == k} == {"pay", "refuse"}]
    assert len(mixed) >= MIN_CLASSES, f"only {len(mixed)} classes mix pay and refuse"


def test_sound_grader_follows_the_spec(cases):
    failures = []
    for c in cases:
        verdict = check(c["completion"], c["gold"], grader="sound", prompt=c["question"])
        if (verdict.score == 1.0) != (c["expect"] == "pay"):
            failures.append(
                f"{_where(c)}\n    expected {c['expect']}, got score={verdict.score} "
                f"reason={verdict.reason} extracted={verdict.extracted!r} form={verdict.form}"
            )
    if failures:
        pytest.fail(
            _report("sound grader disagrees with its specification", failures, len(cases)), pytrace=False
        )


def test_paper_grader_scores_as_recorded(cases):
    failures = []
    for c in cases:
        verdict = check(c["completion"], c["gold"], grader="paper", prompt=c["question"])
        if verdict.score != float(c["paper"]):
            failures.append(
                f"{_where(c)}\n    recorded paper={c['paper']}, now score={verdict.score} "
                f"reason={verdict.reason} extracted={verdict.extracted!r}"
            )
    if failures:
        pytest.fail(
            _report("paper grader (math-verify) changed its verdict", failures, len(cases)), pytrace=False
        )
