"""The reward-hacking monitor: what form the answers a run is paid for take, rollout after rollout.

A policy trained by RL learns whatever its grader pays. When the grader pays something other than a plain answer
(a restated question, an unevaluated expression, several guesses, an answer cut off at the token limit), the
share of such paid answers grows as the policy learns it. Every rollout here:

- each completion's form (:data:`pacs_rl.rewards.answers.FORMS`), with ``truncated`` for a paid answer that ran
  to the token limit, is counted among the paid ones and logged as ``answers/paid_<form>`` (share of the paid
  answers) and ``answers/paid_not_plain``;
- the completions cut off at the token limit are counted: ``answers/cut_off_frac`` (share of the rollout) and
  ``answers/paid_cut_off_count`` (those paid: always 0 under the training grader, which refuses them; the
  paper's grader pays some);
- the rollout's completions with their verdicts are appended to ``samples/rollouts.jsonl`` in the run folder, so
  that ``pacs-rl audit`` can grade them again with another grader;
- the progress output says once per form when that form passes :data:`WARN_SHARE` of the paid answers.

The run's totals go to ``answer_forms.json`` and into its summary and curves.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pacs_rl.rewards.answers import TRUSTED_FORMS
from pacs_rl.run_folder import FORMS_FILE, ROLLOUTS_FILE, SAMPLES_DIR, jsonl_lines

# the forms of a paid answer, most trusted first (pacs_rl.rewards.answers.FORMS but "none", which is never paid)
PAID_FORMS = ("plain", "no_box", "truncated", "several", "expression", "restated")
WARN_SHARE = 0.2  # a non-plain form above this share of the paid answers of a rollout is announced
WARN_MIN_PAID = 8  # ... once a rollout has at least this many paid answers (a share of 1 of 2 says little)
METRIC_PREFIX = "answers/paid_"


def paid_form(form: str | None, truncated: bool) -> str:
    """The form counted for a paid answer: ``truncated`` when it ran to the token limit and was otherwise
    plain or without a box (a restated, expression or several-answer form says more and is kept)."""
    form = form or "plain"
    if truncated and form in ("plain", "no_box"):
        return "truncated"
    return form if form in PAID_FORMS else "plain"


def form_shares(counts: Counter) -> dict[str, float]:
    """``answers/paid_<form>`` shares of the paid answers (every form, 0 included) and ``answers/paid_not_plain``;
    empty when nothing was paid."""
    paid = sum(counts.values())
    if not paid:
        return {}
    out = {f"{METRIC_PREFIX}{f}": counts.get(f, 0) / paid for f in PAID_FORMS}
    out[f"{METRIC_PREFIX}not_plain"] = 1.0 - sum(counts.get(f, 0) for f in TRUSTED_FORMS) / paid
    return out


def form_warnings(logs: dict[str, Any], announced: set[str]) -> list[str]:
    """The lines to print for forms of a logged step that passed WARN_SHARE for the first time (``announced``
    keeps the forms already said). Needs ``answers/paid_count`` >= WARN_MIN_PAID in ``logs``."""
    if (logs.get("answers/paid_count") or 0) < WARN_MIN_PAID:
        return []
    lines = []
    for form in (f for f in PAID_FORMS if f not in TRUSTED_FORMS):
        share = logs.get(f"{METRIC_PREFIX}{form}")
        if share is not None and share > WARN_SHARE and form not in announced:
            announced.add(form)
            lines.append(
                f"reward monitor: {share:.0%} of the paid answers of this rollout are '{form}' "
                f"({FORM_HELP[form]}); `pacs-rl audit <run folder>` grades the saved samples with another grader"
            )
    return lines


FORM_HELP = {
    "plain": "one committed answer, a number where the gold is one",
    "no_box": "an answer in prose, no box",
    "truncated": "cut off at the token limit",
    "several": "several candidate answers",
    "expression": "an expression where the gold is a number",
    "restated": "the question's own expression given back",
}


class AnswerMonitor:
    """Counts the forms of paid answers per rollout and keeps the rollouts' completions (main process only
    writes). ``observe`` returns the rollout's metrics; ``totals`` the run's."""

    def __init__(self, out_dir: str | Path | None, grader: str | None = None, write: bool = True):
        self.out_dir = Path(out_dir) if out_dir else None
        self.grader = grader
        self.write = write and self.out_dir is not None
        self.totals_paid: Counter = Counter()
        self.totals_all: Counter = Counter()
        self.cut_off: Counter = Counter()  # completions cut off at the token limit: "all" and "paid"
        self.rollouts = 0

    @property
    def rollouts_path(self) -> Path | None:
        return self.out_dir / SAMPLES_DIR / ROLLOUTS_FILE if self.out_dir else None

    def forget_after(self, step: int) -> None:
        """On resume: drop saved rollouts sampled after ``step`` (the interrupted run's, redone now) and
        count the kept ones again."""
        path = self.rollouts_path
        if not self.write or path is None or not path.is_file():
            return
        kept = []
        for line, row in jsonl_lines(path):
            if row.get("step", step + 1) <= step:
                kept.append(line)
                self._count(row)
        path.write_text("".join(line + "\n" for line in kept))

    def _count(self, row: dict[str, Any]) -> None:
        cut = bool(row.get("truncated"))
        form = paid_form(row.get("form"), cut)
        self.totals_all[row.get("form") or "none"] += 1
        self.cut_off["all"] += cut
        if row.get("score") == 1.0:
            self.totals_paid[form] += 1
            self.cut_off["paid"] += cut

    def observe(
        self,
        step: int,
        verdicts: Sequence,
        completions: Sequence[str],
        answers: Sequence[str],
        problems: Sequence[str | None],
        num_tokens: Sequence[int],
        truncated: Sequence[bool],
    ) -> dict[str, float]:
        """Count one rollout (this process's completions, or every process's when gathered) and keep its rows."""
        counts: Counter = Counter()
        rows = []
        for v, text, gold, question, tokens, cut in zip(
            verdicts, completions, answers, problems, num_tokens, truncated, strict=True
        ):
            row = {
                "step": step,
                "problem": question,
                "answer": gold,
                "completion": text,
                "score": float(v.score),
                "reason": v.reason,
                "extracted": v.extracted,
                "form": v.form,
                "num_tokens": int(tokens),
                "truncated": bool(cut),
            }
            rows.append(row)
            self._count(row)
            if v.score == 1.0:
                counts[paid_form(v.form, cut)] += 1
        self.rollouts += 1
        if self.write and rows:
            path = self.rollouts_path
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
        metrics = form_shares(counts)
        metrics["answers/paid_count"] = float(sum(counts.values()))
        if rows:
            metrics["answers/cut_off_frac"] = sum(r["truncated"] for r in rows) / len(rows)
            metrics["answers/paid_cut_off_count"] = float(
                sum(r["truncated"] and r["score"] == 1.0 for r in rows)
            )
        return metrics

    def totals(self) -> dict[str, Any]:
        """The run's paid answers by form (counts and shares), as written to answer_forms.json."""
        paid = sum(self.totals_paid.values())
        return {
            "grader": self.grader,
            "completions": sum(self.totals_all.values()),
            "paid": paid,
            "paid_forms": {f: self.totals_paid.get(f, 0) for f in PAID_FORMS},
            "paid_not_plain_share": None
            if not paid
            else 1.0 - sum(self.totals_paid.get(f, 0) for f in TRUSTED_FORMS) / paid,
            "cut_off": self.cut_off["all"],  # completions cut off at the token limit
            "paid_cut_off": self.cut_off["paid"],  # ... and paid (0 under the training grader)
        }

    def save(self, **extra: Any) -> Path | None:
        if not self.write:
            return None
        path = self.out_dir / FORMS_FILE
        path.write_text(json.dumps({**self.totals(), **extra}, indent=2))
        return path


def summary_line(forms: dict[str, Any]) -> str | None:
    """One line for a run's summary: the paid answers by form (None when nothing was paid)."""
    paid = forms.get("paid") or 0
    if not paid:
        return None
    counts = forms.get("paid_forms", {})
    parts = [f"{f} {counts[f]}" for f in PAID_FORMS if counts.get(f)]
    plain = sum(counts.get(f, 0) for f in TRUSTED_FORMS)
    return (
        f"paid answers in training by form: {', '.join(parts)} ({plain / paid:.1%} boxed or in prose of {paid}; "
        f"{SAMPLES_DIR}/{ROLLOUTS_FILE} keeps them, `pacs-rl audit` re-grades them)"
    )


def cut_off_line(forms: dict[str, Any]) -> str | None:
    """One line for a run's summary: the rollouts' completions cut off at the token limit, and how many of them
    the grader paid (None before any was counted)."""
    completions, cut = forms.get("completions") or 0, forms.get("cut_off")
    if not completions or cut is None:
        return None
    paid = forms.get("paid_cut_off") or 0
    grader = forms.get("grader") or "the"
    paid_text = f"{paid} of them paid by the {grader} grader" if paid else f"none paid by the {grader} grader"
    return f"completions cut off at the token limit in training: {cut} of {completions} ({paid_text})"
