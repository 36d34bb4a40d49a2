"""The samples file of an evaluation run (``samples.jsonl``) and the per-problem counts read from it.

One JSON object per line and per drawn sample, keyed by ``(problem_id, sample_index)``, with at least a
``score`` (1.0 correct, 0.0 not). The runner appends rows chunk by chunk; pass@k (runner, comparison
report) is computed from the counts of :func:`count_correct`. Rows written since answer forms exist also hold
the ``form`` of the answer read (:func:`sample_form`) and the ``problem`` text; older rows lack them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, NamedTuple

__all__ = [
    "FORM_ORDER",
    "ProblemCount",
    "append_samples",
    "count_correct",
    "form_counts",
    "read_samples",
    "rewrite_samples",
    "sample_form",
]

# pacs_rl.rewards.answers.FORMS, in its order (most trusted first): kept here so that reading a samples file
# needs no verifier
FORM_ORDER = ("plain", "no_box", "truncated", "several", "expression", "restated", "none")
# forms that say more about a paid answer than its being cut off at the token limit
_KEPT_WHEN_CUT = ("restated", "expression", "several")


def sample_form(form: str | None, paid: bool, cut_off: bool) -> str:
    """The form recorded for a sample: the verdict's ``form`` (``none`` where the check did not get that far), or
    ``truncated`` for a paid answer cut off at the token limit unless it is restated, an expression or several
    answers (those say more). The rule of the training monitor's paid forms."""
    form = form or "none"
    if paid and cut_off and form not in _KEPT_WHEN_CUT:
        return "truncated"
    return form


def form_counts(rows: Iterable[dict[str, Any]], paid_only: bool = False) -> dict[str, int]:
    """Counts of the ``form`` of ``rows`` (of the paid ones, score >= 0.5, with ``paid_only``), in
    :data:`FORM_ORDER`; rows without a form (written before forms existed) count as ``unknown``."""
    counts: dict[str, int] = {}
    for r in rows:
        if paid_only and float(r["score"]) < 0.5:
            continue
        form = r.get("form") or "unknown"
        counts[form] = counts.get(form, 0) + 1
    order = {f: i for i, f in enumerate(FORM_ORDER)}
    return dict(sorted(counts.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def read_samples(path: Path, keyed: bool = True, gradable: bool = False) -> tuple[list[dict[str, Any]], int]:
    """The rows of a samples file, the first of each (problem_id, sample_index) kept, and the number of lines
    left out (a line cut by a crash, a duplicate, a row without what is asked). A row needs a numeric ``score``;
    ``keyed``: its (problem_id, sample_index) too (an eval folder's own file; a training run's files may lack
    them, and only rows with both are then deduplicated); ``gradable``: its completion (text) and gold ``answer``
    too (what `pacs-rl audit` grades again). A missing file has no rows."""
    rows, seen, dropped = [], set(), 0
    if not path.exists():
        return rows, 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            key = (str(row["problem_id"]), int(row["sample_index"])) if keyed or _has_key(row) else None
            float(row["score"])
            if gradable and (not isinstance(row["completion"], str) or row.get("answer") is None):
                raise KeyError("answer")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            dropped += 1
            continue
        if key is not None:
            if key in seen:
                dropped += 1
                continue
            seen.add(key)
        rows.append(row)
    return rows, dropped


def _has_key(row: dict[str, Any]) -> bool:
    return "problem_id" in row and "sample_index" in row


def _lines(rows: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def rewrite_samples(path: Path, rows: list[dict[str, Any]]) -> None:
    """Replace the file with ``rows`` (through a temporary file and a rename, so a crash keeps the old)."""
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text(_lines(rows), encoding="utf-8")
    os.replace(tmp, path)


def append_samples(f: IO[str], rows: list[dict[str, Any]]) -> None:
    """Append ``rows`` to the open samples file and push them to disk, so a crash loses no finished row."""
    f.write(_lines(rows))
    f.flush()
    os.fsync(f.fileno())


class ProblemCount(NamedTuple):
    """One problem's samples with index < n, and how many of them are correct (score >= 0.5)."""

    samples: int
    correct: int


def count_correct(rows: Iterable[dict[str, Any]], n: int) -> dict[str, ProblemCount]:
    """Per problem id (in order of first appearance), its samples among indices 0..n-1 and the correct ones.

    ``rows``: samples-file rows (``problem_id``, ``sample_index``, ``score``); rows with an index >= n
    are ignored. A problem is complete when its ``samples == n``.
    """
    samples: dict[str, int] = {}
    correct: dict[str, int] = {}
    for r in rows:
        if int(r["sample_index"]) >= n:
            continue
        pid = str(r["problem_id"])
        samples[pid] = samples.get(pid, 0) + 1
        correct[pid] = correct.get(pid, 0) + (float(r["score"]) >= 0.5)
    return {pid: ProblemCount(samples[pid], correct[pid]) for pid in samples}
