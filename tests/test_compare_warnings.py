"""`pacs-rl compare` after a small budget: a run that learnt from nothing, or ended equal to the base model, is
warned about; the ks follow --k (or a smaller --n); the dynamics plot stays readable with one or two steps."""

from __future__ import annotations

import json

import matplotlib.figure
import numpy as np
from typer.testing import CliRunner

from pacs_rl.cli import app
from pacs_rl.compare.plan import RunSpec
from pacs_rl.compare.report import DYNAMICS, plot_dynamics, run_warnings


def _dry(*args: str) -> str:
    result = CliRunner().invoke(app, ["compare", "--preset", "smoke", "--dry-run", *args])
    return f"{result.exit_code}\n{result.output}"


def test_compare_takes_the_ks_and_a_smaller_n_drops_those_above_it(tmp_path):
    out = str(tmp_path / "c")
    assert _dry("-o", out).startswith("0\n")  # the preset: n 4, ks 1,2,4
    assert _dry("-o", out, "--n", "1").startswith("0\n")  # was refused: ks 2 and 4 above n
    assert _dry("-o", out, "--n", "4", "--k", "1,4").startswith("0\n")
    refused = _dry("-o", out, "--n", "2", "--k", "1,4")
    assert refused.startswith("2\n") and "eval.ks [1, 4] must lie in 1..n (n = 2)" in refused
    assert "--k takes comma-separated whole numbers" in _dry("-o", out, "--k", "one")


def _run(folder, rewards, mixed):
    folder.mkdir(parents=True)
    rows = [
        {"step": i + 1, "reward": r, "groups/mixed_frac": m}
        for i, (r, m) in enumerate(zip(rewards, mixed, strict=True))
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_runs_without_a_learning_signal_or_equal_to_the_base_are_warned_about(tmp_path):
    plan = [RunSpec("pacs", "pacs", 0, {}), RunSpec("grpo", "grpo", 0, {}), RunSpec("ppo", "ppo", 0, {})]
    _run(tmp_path / plan[0].folder, [0.0, 0.0], [0.0, 0.0])  # reward 0 throughout
    _run(tmp_path / plan[1].folder, [1.0, 1.0], [0.0, 0.0])  # every group one label
    _run(tmp_path / plan[2].folder, [0.0, 0.5], [0.0, 1.0])  # learnt from something
    counts = {"ids": ["a", "b"], "n": 4}
    base = {**counts, "c": np.array([1, 0])}
    data = {
        "variants": {"pacs": "pacs", "grpo": "grpo", "ppo": "ppo"},
        "benchmarks": {
            "b": {
                "Base": {None: base},
                "pacs": {0: {**counts, "c": np.array([1, 0])}},  # the base's answers, problem by problem
                "grpo": {0: {**counts, "c": np.array([0, 1])}},  # same total, other problems: not equal
                "ppo": {0: {**counts, "c": np.array([2, 0])}},
            }
        },
    }
    labels = {"pacs": "PACS", "grpo": "GRPO", "ppo": "PPO"}
    lines = run_warnings(tmp_path, plan, labels, data)
    assert len(lines) == 3, lines
    assert lines[0].startswith("PACS seed 0 saw no learning signal: the reward was 0 in all 2")
    assert lines[1].startswith("GRPO seed 0 saw no learning signal: no group held both")
    assert lines[2].startswith("PACS ended equal to the base model")


def test_dynamics_with_one_step_draws_points_without_an_offset_label(tmp_path, monkeypatch):
    figures = []
    real = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), real(fig, *a, **k)))  # fmt: skip
    one = [{"step": 1, "entropy": 4.5964, "grad_norm": 0.0, "completions/mean_length": 8.0, "reward": 0.0}]
    plot_dynamics({"PACS": [one]}, DYNAMICS, tmp_path / "d.png", "t")
    (fig,) = figures
    fig.canvas.draw()
    for ax in fig.axes:
        (line,) = ax.get_lines()
        assert line.get_marker() == "o"  # a one-point line draws nothing without a marker
        assert ax.yaxis.get_offset_text().get_text() == ""  # no "+4.596" above the axis
        assert all(float(t).is_integer() for t in ax.get_xticks())  # steps, not 0.96 ... 1.04
