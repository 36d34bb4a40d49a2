"""`pacs-rl compare` after a small budget: a run of the record that learnt from nothing, or ended equal to the base
model, is warned about; the ks follow --k (or a smaller --n); the dynamics plot stays readable with one or two steps."""

from __future__ import annotations

import matplotlib.figure
from typer.testing import CliRunner

from pacs_rl.cli import app
from pacs_rl.compare.figures import plot_dynamics
from pacs_rl.compare.report import DYNAMICS, collect, run_warnings


def _dry(*args: str) -> str:
    result = CliRunner().invoke(app, ["compare", "--preset", "smoke", "--dry-run", *args])
    return f"{result.exit_code}\n{result.output}"


def test_compare_takes_the_ks_and_a_smaller_n_drops_those_above_it(tmp_path):
    out = str(tmp_path / "c")
    assert _dry("-o", out).startswith("0\n")  # the preset: n 4, ks 1,2,4
    assert _dry("-o", out, "--n", "1").startswith("0\n")  # was refused: ks 2 and 4 above n
    assert _dry("-o", out, "--n", "4", "--k", "1,4").startswith("0\n")
    refused = _dry("-o", out, "--n", "2", "--k", "1,4")
    assert (
        refused.startswith("1\n") and "eval.ks [1, 4] must lie in 1..n (n = 2)" in refused
    )  # a dry run lists it
    assert "--k takes comma-separated whole numbers" in _dry("-o", out, "--k", "one")


def _run(method, rewards, mixed, correct):
    curves = {"reward": rewards, "mixed_groups": mixed}
    evals = {
        "b": {"n": 4, "ks": [1], "pass_at_k": {"1": 0.25}, "correct": dict(zip("ab", correct, strict=True))}
    }
    return {
        "method": method,
        "seed": 0,
        "evals": evals,
        "dynamics": {"steps": len(rewards), "curves": curves},
    }


def test_runs_without_a_learning_signal_or_equal_to_the_base_are_warned_about():
    record = {
        "protocol": {
            "methods": {"pacs": {}, "grpo": {}, "ppo": {}},
            "eval": {"samples": {"b": {"n": 4, "ks": [1]}}},
        },
        "base": {"evals": {"b": {"n": 4, "ks": [1], "pass_at_k": {"1": 0.125}, "correct": {"a": 1, "b": 0}}}},
        "runs": [
            _run(
                "pacs", [0.0, 0.0], [0.0, 0.0], [1, 0]
            ),  # reward 0 throughout; the base's answers, problem by problem
            _run("grpo", [1.0, 1.0], [0.0, 0.0], [0, 1]),  # every group one label; same total, other problems
            _run("ppo", [0.0, 0.5], [0.0, 1.0], [2, 0]),  # learnt from something
        ],
    }
    labels = {"pacs": "PACS", "grpo": "GRPO", "ppo": "PPO"}
    lines = run_warnings(record, labels, collect(record))
    assert len(lines) == 3, lines
    assert lines[0].startswith("PACS seed 0 saw no learning signal: the reward was 0 in all 2")
    assert lines[1].startswith("GRPO seed 0 saw no learning signal: no group held both")
    assert lines[2].startswith("PACS ended equal to the base model")


def test_dynamics_with_one_step_draws_points_without_an_offset_label(tmp_path, monkeypatch):
    figures = []
    real = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), real(fig, *a, **k)))  # fmt: skip
    one = {"entropy": [4.5964], "grad_norm": [0.0], "length": [8.0], "reward": [0.0]}  # a record's curves
    plot_dynamics({"PACS": [one]}, DYNAMICS, tmp_path / "d.png", "t")
    (fig,) = figures
    fig.canvas.draw()
    for ax in fig.axes:
        (line,) = ax.get_lines()
        assert line.get_marker() == "o"  # a one-point line draws nothing without a marker
        assert ax.yaxis.get_offset_text().get_text() == ""  # no "+4.596" above the axis
        assert all(float(t).is_integer() for t in ax.get_xticks())  # steps, not 0.96 ... 1.04
