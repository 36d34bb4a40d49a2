"""The reward-hacking monitor: forms of the paid answers per rollout, the progress notes, the run's totals, the
curves panel."""

from __future__ import annotations

import json

import pytest

from pacs_rl.rewards import verify
from pacs_rl.rewards.math_verifier import check
from pacs_rl.run_folder import FORMS_FILE
from pacs_rl.training.monitor import (
    WARN_MIN_PAID,
    AnswerMonitor,
    cut_off_line,
    form_warnings,
    paid_form,
    summary_line,
)
from pacs_rl.training.output import plot_curves

Q = "What is 47 + 8?"


def _rollout(completions, grader="paper", truncated=None):
    verdicts = [check(c, "55", grader, prompt=Q) for c in completions]
    n = len(completions)
    return verdicts, completions, ["55"] * n, [Q] * n, [10] * n, truncated or [False] * n


def test_paper_paid_restatements_show_up_as_their_form(tmp_path):
    monitor = AnswerMonitor(tmp_path, grader="paper")
    completions = [
        "The answer is 8 + 47.",  # restated: paper pays it
        r"\boxed{50+5}",  # an expression equal to the gold: paper pays it
        r"\boxed{55}",
        r"\boxed{55}",
        "The answer is 55.",  # no box
        r"\boxed{54}",  # wrong: not counted among the paid
    ]
    metrics = monitor.observe(3, *_rollout(completions))
    assert metrics["answers/paid_count"] == 5
    assert metrics["answers/paid_restated"] == pytest.approx(1 / 5)
    assert metrics["answers/paid_expression"] == pytest.approx(1 / 5)
    assert metrics["answers/paid_no_box"] == pytest.approx(1 / 5)
    assert metrics["answers/paid_plain"] == pytest.approx(2 / 5)
    assert metrics["answers/paid_not_plain"] == pytest.approx(2 / 5)  # an answer in prose is no hack
    rows = [json.loads(x) for x in (tmp_path / "samples" / "rollouts.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [3] * 6 and rows[0]["form"] == "restated" and rows[5]["score"] == 0.0


def test_the_sound_grader_pays_none_of_them(tmp_path):
    monitor = AnswerMonitor(tmp_path, grader="sound")
    metrics = monitor.observe(
        0, *_rollout(["The answer is 8 + 47.", r"\boxed{50+5}", r"\boxed{55}"], "sound")
    )
    assert metrics["answers/paid_count"] == 1 and metrics["answers/paid_plain"] == 1.0
    assert metrics["answers/paid_not_plain"] == 0.0


def test_a_paid_answer_cut_off_at_the_limit_counts_as_truncated_unless_its_form_says_more():
    assert paid_form("plain", True) == "truncated" and paid_form("no_box", True) == "truncated"
    assert paid_form("restated", True) == "restated" and paid_form("plain", False) == "plain"
    assert paid_form(None, False) == "plain"


def test_nothing_paid_logs_only_the_counts(tmp_path):
    metrics = AnswerMonitor(tmp_path).observe(0, *_rollout([r"\boxed{54}"]))
    assert metrics == {
        "answers/paid_count": 0.0,
        "answers/cut_off_frac": 0.0,
        "answers/paid_cut_off_count": 0.0,
    }


def test_cut_off_completions_are_counted_and_the_training_grader_pays_none(tmp_path):
    """The same rollout, the last two completions cut off at the token limit: the paper's grader pays the cut-off
    right answer (counted beside its verdicts), the sound grader, told they were cut off, pays neither."""
    completions = [r"\boxed{55}", "The final answer is 55.", "The final answer is 55. The final answer is 5"]
    truncated = [False, True, True]
    lines = {}
    for grader in ("paper", "sound"):
        monitor = AnswerMonitor(tmp_path / grader, grader=grader)
        verdicts = [
            verify(c, "55", grader, prompt=Q, truncated=t)
            for c, t in zip(completions, truncated, strict=True)
        ]
        n = len(completions)
        metrics = monitor.observe(0, verdicts, completions, ["55"] * n, [Q] * n, [10] * n, truncated)
        assert metrics["answers/cut_off_frac"] == pytest.approx(2 / 3)
        totals = monitor.totals()
        assert totals["cut_off"] == 2
        if grader == "paper":  # "...is 5" is wrong; the whole sentence before it is paid though cut off
            assert [v.score for v in verdicts] == [1.0, 1.0, 0.0]
            assert metrics["answers/paid_cut_off_count"] == 1 and totals["paid_cut_off"] == 1
            assert totals["paid_forms"]["truncated"] == 1
        else:
            assert [(v.score, v.reason) for v in verdicts[1:]] == [(0.0, "truncated")] * 2
            assert metrics["answers/paid_cut_off_count"] == 0 and totals["paid_cut_off"] == 0
        rows = [
            json.loads(x) for x in (tmp_path / grader / "samples" / "rollouts.jsonl").read_text().splitlines()
        ]
        assert [r["truncated"] for r in rows] == truncated
        lines[grader] = cut_off_line(totals)
    assert (
        lines["paper"]
        == "completions cut off at the token limit in training: 2 of 3 (1 of them paid by the paper grader)"
    )
    assert lines["sound"].endswith("2 of 3 (none paid by the sound grader)")
    assert cut_off_line({"completions": 0}) is None


def test_a_form_past_the_threshold_is_announced_once():
    announced: set[str] = set()
    logs = {"answers/paid_count": WARN_MIN_PAID, "answers/paid_restated": 0.5, "answers/paid_no_box": 0.1}
    lines = form_warnings(logs, announced)
    assert len(lines) == 1 and "50% of the paid answers" in lines[0] and "'restated'" in lines[0]
    assert "pacs-rl audit" in lines[0]
    assert form_warnings(logs, announced) == []  # once per form
    few = {"answers/paid_count": WARN_MIN_PAID - 1, "answers/paid_expression": 1.0}
    assert form_warnings(few, set()) == []  # too few paid answers to say anything


def test_totals_survive_a_resume_and_drop_the_redone_rollouts(tmp_path):
    first = AnswerMonitor(tmp_path, grader="paper")
    first.observe(0, *_rollout([r"\boxed{55}", "The answer is 8 + 47."]))
    first.observe(2, *_rollout([r"\boxed{55}"]))
    second = AnswerMonitor(tmp_path, grader="paper")
    second.forget_after(1)  # resumed from the checkpoint of step 1: the rollout of step 2 is redone
    assert second.totals()["paid_forms"]["restated"] == 1 and second.totals()["paid"] == 2
    second.observe(2, *_rollout([r"\boxed{54}"]))
    totals = second.totals()
    assert totals["completions"] == 3 and totals["paid"] == 2
    path = second.save()
    assert path == tmp_path / FORMS_FILE and json.loads(path.read_text())["paid_not_plain_share"] == 0.5
    line = summary_line(totals)
    assert line.startswith(
        "paid answers in training by form: plain 1, restated 1 (50.0% boxed or in prose of 2"
    )
    assert summary_line({"paid": 0}) is None


def test_curves_draw_the_critic_auc_and_the_forms_not_the_chance_level_metrics(tmp_path):
    rows = [
        {"step": 1, "loss": 0.7, "pacs/critic_auc": 0.5, "pacs/critic_accuracy": 0.5, "pacs/brier": 0.25,
         "answers/paid_restated": 0.0, "answers/paid_no_box": 0.25},
        {"step": 2, "loss": 0.6, "pacs/critic_auc": 0.6, "answers/paid_restated": 0.4, "answers/paid_no_box": 0.1},
    ]  # fmt: skip
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))

    import matplotlib.pyplot as plt

    titles = []
    real = plt.Figure.savefig

    def spy(fig, *a, **kw):
        titles.extend(ax.get_title() for ax in fig.axes if ax.get_title())
        legends = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        titles.extend(f"legend:{x}" for x in legends)
        return real(fig, *a, **kw)

    plt.Figure.savefig = spy
    try:
        assert plot_curves(metrics, tmp_path / "c.png") is not None
    finally:
        plt.Figure.savefig = real
    assert "critic AUC of ψ within mixed groups" in titles
    assert not any("Brier" in t or "critic accuracy" in t for t in titles)
    assert "paid answers neither boxed nor in prose (share, by form)" in titles
    assert "legend:restated" in titles and "legend:no_box" not in titles  # an answer in prose is no hack
