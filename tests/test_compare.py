"""pacs-rl compare end to end on a tiny random model (the smoke preset): an interrupted comparison, its
resume (the finished run is not retrained), the report's numbers against pass_at_k of the sample counts,
and the trainer's resume for a half-finished run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from pacs_rl.compare.plan import resolve_settings


class Interrupted(RuntimeError):
    pass


def _counts(eval_dir: Path) -> tuple[int, list[int]]:
    """(n, correct count per problem) read straight from samples.jsonl."""
    n = json.loads((eval_dir / "metrics.json").read_text())["n"]
    correct: dict[str, int] = {}
    for line in (eval_dir / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        correct[row["problem_id"]] = correct.get(row["problem_id"], 0) + (row["score"] >= 0.5)
    return n, [correct[k] for k in sorted(correct)]


def test_smoke_interrupt_resume_and_report(tmp_path):
    from pacs_rl.algorithms.passk import pass_at_k
    from pacs_rl.compare.execute import eval_run, run_comparison, train_run

    settings = resolve_settings(preset="smoke")
    out = tmp_path / "cmp"
    calls: list[str] = []

    def interrupting_train(settings, spec, run_dir, base_model, description):
        calls.append(spec.key)
        if len(calls) == 2:
            raise Interrupted("simulated crash in the second training run")
        return train_run(settings, spec, run_dir, base_model, description)

    with pytest.raises(Interrupted):
        run_comparison(settings, out, train_fn=interrupting_train)
    first = out / "runs/pacs/seed0/final/model.safetensors"
    assert first.is_file()
    mtime = first.stat().st_mtime_ns
    assert not (out / "runs/grpo/seed0/final").exists()
    assert len(list((out / "evals").glob("*/*/metrics.json"))) == 1  # base, done before the crash
    assert len(list((out / "evals/pacs/seed0").glob("*/metrics.json"))) == 1

    # rerun: the first run is skipped (not retrained), the second trained, every model evaluated
    result = run_comparison(settings, out)
    st = result["status"]
    assert st["train pacs/seed0"] == "skipped"
    assert st["train grpo/seed0"] == "trained"
    assert first.stat().st_mtime_ns == mtime
    # base and PACS were evaluated before the crash (each run is evaluated right after its training)
    bench = settings["eval"]["benchmarks"][0]
    assert st[f"eval base on {bench}"] == "skipped" and st[f"eval pacs/seed0 on {bench}"] == "skipped"
    assert st[f"eval grpo/seed0 on {bench}"] == "evaluated"
    # a third run does nothing but the report
    again = run_comparison(settings, out, train_fn=interrupting_train, eval_fn=eval_run)
    assert set(again["status"].values()) == {"skipped"}

    # each run folder is an ordinary training run folder
    for name in ("pacs", "grpo"):
        run = out / f"runs/{name}/seed0"
        assert (run / "metrics.jsonl").is_file() and (run / "train_config.yaml").is_file()
        assert any(run.glob("checkpoint-*/trainer_state.json"))

    # the report: a row per method and Base, numbers = mean pass@k of the per-problem sample counts
    report = (out / "report.md").read_text()
    ks = settings["eval"]["ks"]
    table = report.split(f"### {bench}")[1].split("\n\n")[1]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()[2:]}
    assert set(rows) == {"Base", "PACS", "GRPO"}
    for label, folder in [("Base", "evals/base"), ("PACS", "evals/pacs/seed0"), ("GRPO", "evals/grpo/seed0")]:
        edir = next((out / folder).iterdir())
        n, c = _counts(edir)
        assert len(c) == 4 and n == 4
        cells = [re.sub(r"[*<u>/]", "", x).strip() for x in rows[label].split("|")[2:-1]]
        expected = [f"{100 * float(np.mean(pass_at_k(n, np.array(c), k))):.2f}" for k in ks]
        assert cells == expected, (label, cells, expected)
    for png in ("passk_curves.png", "training_dynamics.png", "critic.png"):
        assert (out / png).stat().st_size > 1000
    assert "PACS − GRPO" in report and "PACS − Base" in report


def test_half_finished_training_resumes_from_checkpoint(tmp_path, monkeypatch):
    """A run folder with a complete checkpoint but no final model is continued, not restarted."""
    import pacs_rl.compare.execute as execute
    from pacs_rl.compare.execute import train_run
    from pacs_rl.compare.plan import build_plan
    from pacs_rl.training.run import TrainResult

    settings = resolve_settings(preset="smoke")
    spec = build_plan(settings)[0]
    run_dir = tmp_path / spec.folder
    (run_dir / "checkpoint-1").mkdir(parents=True)
    (run_dir / "checkpoint-1" / "trainer_state.json").write_text("{}")
    seen = {}

    def fake_run_training(run, config, resume=False, command=None, progress=True):
        seen.update(run=run, cfg=config, output_dir=config.output_dir, resume=resume, command=command)
        (Path(config.output_dir) / "final").mkdir()
        (Path(config.output_dir) / "final" / "config.json").write_text("{}")
        return TrainResult(Path(config.output_dir), 2, 0.0, {}, "greedy", Path(), Path(), None)

    monkeypatch.setattr(execute, "run_training", fake_run_training)
    assert train_run(settings, spec, run_dir, "base", "test") == "resumed"
    assert seen["resume"] is True and seen["output_dir"] == str(run_dir)
    assert seen["command"] == f"pacs-rl train --config {run_dir / 'train_config.yaml'} --output-dir {run_dir}"
    assert seen["cfg"].seed == 0 and seen["cfg"].loss_type == "pacs"
    assert seen["cfg"].max_steps == settings["train"]["max_steps"]
    assert seen["run"].dataset == settings["train"]["dataset"] and seen["run"].eval_size == 0
    assert train_run(settings, spec, run_dir, "base", "test") == "skipped"


def test_only_filter_and_locks_let_processes_share_a_folder(tmp_path):
    """--only selects phases; a phase locked by a live process is left to it, a dead process's lock is taken."""
    from pacs_rl.compare.execute import run_comparison
    from pacs_rl.compare.plan import TRAIN_DONE_FILE
    from pacs_rl.run_folder import FINAL_DIR

    settings = resolve_settings(preset="smoke")
    out = tmp_path / "cmp"
    trained: list[str] = []

    def fake_train(settings, spec, run_dir, base_model, description):
        trained.append(spec.key)
        (run_dir / FINAL_DIR).mkdir(parents=True)
        (run_dir / FINAL_DIR / "config.json").write_text("{}")
        (run_dir / TRAIN_DONE_FILE).write_text("{}")
        return "trained"

    def fake_eval(settings, model, benchmark, eval_dir, label):
        return "evaluated"

    # grpo's run is held by another process (a lock of its own here); pacs's lock file was left by a process that
    # died: the operating system let go of it with the process
    locks = out / ".locks" / "runs"  # out of the way of the run folders
    for name in ("pacs", "grpo"):
        (locks / name).mkdir(parents=True)
    (locks / "pacs/seed0.lock").write_text("999999999")
    held = FileLock(locks / "grpo/seed0.lock")
    held.acquire()
    st = run_comparison(settings, out, train_fn=fake_train, eval_fn=fake_eval)["status"]
    bench = settings["eval"]["benchmarks"][0]
    assert st["train pacs/seed0"] == "trained" and trained == ["pacs/seed0"]
    assert st["train grpo/seed0"] == "busy"
    assert st[f"eval grpo/seed0 on {bench}"] == "waiting"  # not trained yet
    assert st[f"eval pacs/seed0 on {bench}"] == "evaluated"

    held.release()
    st = run_comparison(settings, out, train_fn=fake_train, eval_fn=fake_eval, only=["grpo/*"])["status"]
    assert list(st) == ["train grpo/seed0", f"eval grpo/seed0 on {bench}"]
    assert trained == ["pacs/seed0", "grpo/seed0"]
