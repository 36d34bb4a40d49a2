"""The examiner's set: real completions, each marked right or wrong by reading it as an examiner would, with the
reason (``tests/data/examiner_set.jsonl``). Used by ``tests/test_examiner_set.py`` and by
``benchmarks/grader_agreement.py --examiner``.

Each row names where its completion is:

- ``first_rollout``: the bundled model's first rollout on the CPU default (``index``: its line in
  ``docs/benchmarks/first_rollout_samples.jsonl``, which holds the question, the gold and the finish reason);
- ``trained``: a model the CPU default trained (``pacs-rl train --max-steps 16 --set num_threads=1``, seed 0: held-out
  11.5% -> 55.5%): its greedy answers to the 200 held-out problems and the finished completions of its rollouts at
  steps 12 and 14 (T = 0.7), from the run folder's ``samples/``; the row holds the question, the gold, the
  completion and its finish reason (``origin`` says which pass sampled it);
- ``math500``: a worked solution of MATH-500 (``id``), graded against the gold of ``gold_of`` (its own, or
  another problem's); read from the shared data folder (``../shared/data``), never copied here.

Only finished completions are in the set: a completion cut at the token limit is refused by the training grader
whatever it says (``pacs_rl.rewards.cutoff``), so an examiner's mark of it tests nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SET_FILE = REPO / "tests" / "data" / "examiner_set.jsonl"
FIRST_ROLLOUT = REPO / "docs" / "benchmarks" / "first_rollout_samples.jsonl"
SOURCES = ("first_rollout", "trained", "math500")


def shared_data() -> Path:
    return Path(os.environ.get("PACS_RL_SHARED_DATA", REPO.parent / "shared" / "data"))


def load(with_math: bool = True) -> list[dict]:
    """Every row of the set with its ``question``, ``gold`` and ``completion`` filled in; MATH-500 rows only with
    ``with_math`` and where the shared data folder holds MATH-500. Raises ValueError on a row it cannot place."""
    rollout = [json.loads(line) for line in FIRST_ROLLOUT.read_text().splitlines()]
    math = {}
    math_file = shared_data() / "math500.jsonl"
    if with_math and math_file.is_file():
        math = {r["id"]: r for r in map(json.loads, math_file.read_text().splitlines())}
    rows = []
    for n, line in enumerate(SET_FILE.read_text().splitlines(), 1):
        row = json.loads(line)
        if row.get("mark") not in ("right", "wrong") or not row.get("reason"):
            raise ValueError(f"{SET_FILE.name} line {n}: a row needs a mark (right or wrong) and its reason")
        source = row.get("source")
        if source == "first_rollout":
            sample = rollout[row["index"]]
            row |= {k: sample[k] for k in ("question", "completion", "finish_reason")} | {
                "gold": sample["answer"]
            }
        elif source == "math500":
            if not math:
                continue
            problem, graded = math[row["id"]], math[row["gold_of"]]
            row |= {
                "question": problem["problem"],
                "completion": problem["solution"],
                "gold": graded["answer"],
            }
            row["finish_reason"] = "stop"
        elif source != "trained":
            raise ValueError(f"{SET_FILE.name} line {n}: unknown source {source!r}; sources are {SOURCES}")
        rows.append(row | {"line": n})
    return rows


def disagreements(rows: list[dict], verdicts: list) -> list[str]:
    """One line per row where a grader's verdict differs from the examiner's mark, naming the row."""
    out = []
    for row, v in zip(rows, verdicts, strict=True):
        if (v.score == 1.0) != (row["mark"] == "right"):
            where = f"line {row['line']}" + (f" ({row['id']})" if "id" in row else "")
            out.append(
                f"{row['source']}, {where}: examiner {row['mark']} ({row['reason']}), grader {v.reason} "
                f"(read {v.extracted!r}); completion ends {row['completion'][-120:]!r}"
            )
    return out
