"""`pacs-rl compare` end to end on a tiny random model (the smoke preset), through the one engine: its runs, each a
process of its own, into its record; a run left half-way resumed from its checkpoint while the finished one is not
retrained; the report's numbers against pass_at_k of the samples' counts; the record's lock and an older folder."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock
from typer.testing import CliRunner

from pacs_rl.cli import app
from pacs_rl.compare import driver
from pacs_rl.compare.methods import CompareError
from pacs_rl.compare.plan import comparison_protocol, resolve_settings
from pacs_rl.compare.record import RESULT_FILE
from pacs_rl.run_folder import FINAL_DIR, FINISHED_FILE

REPO = Path(__file__).resolve().parents[1]


def _counts(eval_dir: Path) -> tuple[int, list[int]]:
    """(n, correct count per problem) read straight from samples.jsonl."""
    n = json.loads((eval_dir / "metrics.json").read_text())["n"]
    correct: dict[str, int] = {}
    for line in (eval_dir / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        correct[row["problem_id"]] = correct.get(row["problem_id"], 0) + (row["score"] >= 0.5)
    return n, [correct[k] for k in sorted(correct)]


def _options(out: Path, settings: dict) -> driver.Options:
    return driver.Options(record=out / "record.json", work=out, hours=None, target=None, max_seeds=None,
                          seeds=settings["seeds"])  # fmt: skip


def test_smoke_runs_in_processes_resumes_and_reports(tmp_path):
    from pacs_rl.algorithms.passk import pass_at_k
    from pacs_rl.compare.report import write_comparison_report

    settings = resolve_settings(preset="smoke")
    proto, out = comparison_protocol(settings), tmp_path / "cmp"
    record = driver.run(_options(out, settings), proto)
    assert record["base"]["method"] == "base"
    assert sorted((r["method"], r["seed"]) for r in record["runs"]) == [("grpo", 0), ("pacs", 0)]
    # each run folder is an ordinary training run folder, with its evaluation beside
    for name in ("pacs", "grpo"):
        run = out / name / "seed0"
        assert (run / "metrics.jsonl").is_file() and (run / FINAL_DIR / "config.json").is_file()
        assert any(run.glob("checkpoint-*/trainer_state.json"))
    # a run left half-way (its driver stopped after its last checkpoint) resumes from it; the finished one stays
    first = out / "pacs" / "seed0" / FINAL_DIR / "model.safetensors"
    mtime = first.stat().st_mtime_ns
    grpo = out / "grpo" / "seed0"
    logged = (grpo / "metrics.jsonl").read_text()
    for done in (grpo / RESULT_FILE, grpo / FINISHED_FILE):
        done.unlink()
    shutil.rmtree(grpo / FINAL_DIR)
    saved = json.loads((out / "record.json").read_text())
    saved["runs"] = [r for r in saved["runs"] if r["method"] != "grpo"]
    (out / "record.json").write_text(json.dumps(saved))
    record = driver.run(_options(out, settings), proto)
    assert first.stat().st_mtime_ns == mtime
    assert (grpo / FINAL_DIR / "config.json").is_file() and len(record["runs"]) == 2
    assert (grpo / "metrics.jsonl").read_text() == logged  # its steps were not trained again
    # complete: nothing runs again
    again = driver.run(_options(out, settings), proto)
    assert again["runs"] == record["runs"]

    # the report: a row per method and Base, numbers = mean pass@k of the per-problem sample counts
    report = write_comparison_report(record, out, settings["seeds"]).read_text()
    bench = settings["eval"]["benchmarks"][0]
    ks = settings["eval"]["ks"]
    table = report.split(f"### {bench}")[1].split("\n\n")[1]
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()[2:]}
    assert set(rows) == {"Base", "PACS", "GRPO"}
    for label, folder in [("Base", "base"), ("PACS", "pacs/seed0"), ("GRPO", "grpo/seed0")]:
        edir = next((out / folder / "eval").iterdir())
        n, c = _counts(edir)
        assert len(c) == 4 and n == 4
        cells = [re.sub(r"[*<u>/]", "", x).strip() for x in rows[label].split("|")[2:-1]]
        expected = [f"{100 * float(np.mean(pass_at_k(n, np.array(c), k))):.2f}" for k in ks]
        assert cells == expected, (label, cells, expected)
    for png in ("passk_curves.png", "training_dynamics.png", "critic.png"):
        assert (out / png).stat().st_size > 1000
    assert "PACS − GRPO" in report and "PACS − Base" in report


def test_a_run_trains_as_its_variant_and_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    """One run of a planned comparison, in this process: `pacs-rl train`'s settings of the protocol, the variant
    and the seed, resumed from the run folder's checkpoint; its evaluation's result kept, its weights too."""
    import pacs_rl.training.run as training
    from pacs_rl.compare import job
    from pacs_rl.training.run import TrainResult

    settings = resolve_settings(preset="smoke", cli={"methods": ["pacs[pacs_beta=0.5]", "grpo"]})
    proto = comparison_protocol(settings)
    folder = tmp_path / "pacs__pacs_beta=0.5" / "seed3"
    (folder / "checkpoint-1").mkdir(parents=True)
    (folder / "checkpoint-1" / "trainer_state.json").write_text("{}")
    seen = {}

    def fake_run_training(run, config, resume=False, **_):
        seen.update(run=run, cfg=config, resume=resume)
        (Path(config.output_dir) / FINAL_DIR).mkdir()
        return TrainResult(Path(config.output_dir), 2, 0.0, {}, "greedy", Path(), Path(), None)

    monkeypatch.setattr(training, "run_training", fake_run_training)
    monkeypatch.setattr(job, "_evaluate", lambda *a: {"evals": {}})
    job.job("pacs[pacs_beta=0.5]", 3, tmp_path, 1, proto)
    assert seen["resume"] is True and seen["cfg"].output_dir == str(folder)
    cfg = seen["cfg"]
    assert (cfg.seed, cfg.loss_type, cfg.pacs_beta, cfg.max_grad_norm) == (
        3,
        "pacs",
        0.5,
        0.0,
    )  # 0.0: no clip
    assert seen["cfg"].max_steps == settings["train"]["max_steps"]
    assert seen["run"].dataset == settings["train"]["dataset"] and seen["run"].eval_size == 0
    result = json.loads((folder / RESULT_FILE).read_text())
    assert (result["method"], result["seed"]) == ("pacs[pacs_beta=0.5]", 3) and (folder / FINAL_DIR).is_dir()


def test_a_record_being_added_to_and_an_older_folder_are_refused(tmp_path):
    """One driver at a time adds to a record (a second is refused while the first holds its lock; a dead one's lock
    is free); a folder made before comparisons kept a record is read by --report-only, never run into."""
    settings = resolve_settings(preset="smoke")
    out = tmp_path / "cmp"
    out.mkdir()
    held = FileLock(out / "record.json.lock")
    held.acquire()
    with pytest.raises(CompareError, match="being added to by another process"):
        driver.run(_options(out, settings), comparison_protocol(settings))
    held.release()
    old = tmp_path / "old"
    shutil.copytree(REPO / "docs" / "results" / "cpu-small", old)
    assert "made before comparisons kept a record" in driver.work_problem(old, comparison_protocol(settings))
    result = CliRunner().invoke(app, ["compare", "--preset", "cpu-small", "-o", str(old), "--dry-run"])
    assert (
        result.exit_code == 1 and "made before comparisons kept a record (its manifest.json)" in result.output
    )
