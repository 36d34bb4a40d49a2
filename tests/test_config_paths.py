"""Paths in a settings file (`pacs-rl train --config`, `pacs-rl compare --config`) are read from the file's own
folder, so a config means the same from any working folder; names that are no path there (a Hub id, a benchmark,
a task) stay as written."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from pacs_rl.cli import app
from pacs_rl.compare.plan import load_settings_file as load_compare_file
from pacs_rl.settings.reading import read_yaml, resolve_paths
from pacs_rl.training.checks import load_settings_file

REPO = Path(__file__).resolve().parents[1]


def _project(tmp_path: Path) -> Path:
    """A folder of configs with a data file, a DeepSpeed file and a reward module beside them."""
    cfgs = tmp_path / "project" / "cfgs"
    (cfgs / "data").mkdir(parents=True)
    rows = [{"problem": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(40)]
    (cfgs / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (cfgs / "ds.json").write_text((REPO / "configs" / "deepspeed" / "zero3.json").read_text())
    (cfgs / "rewards").mkdir()
    (cfgs / "rewards" / "mine.py").write_text(
        "def score(completions, **kw):\n    return [0.0] * len(completions)\n"
    )
    return cfgs


def test_relative_paths_are_read_from_the_files_folder(tmp_path, monkeypatch):
    cfgs = _project(tmp_path)
    settings = {
        "model": "Qwen/Qwen2.5-7B",  # a Hub id: nothing of that name beside the file
        "dataset": "data/train.jsonl",
        "eval_dataset": "math500",
        "deepspeed": "ds.json",
        "reward_funcs": "math,rewards/mine.py:score,my_pkg.rewards:fn",
        "learning_rate": "data/train.jsonl",  # not a path setting: left alone
        "fsdp_config": "missing.json",  # names nothing here: as written (read from the current folder)
        "critic_model_name_or_path": "/abs/critic",  # absolute: as written
    }
    (cfgs / "run.yaml").write_text(json.dumps(settings))
    read = read_yaml(cfgs / "run.yaml")
    assert read["dataset"] == str(cfgs / "data" / "train.jsonl")
    assert read["deepspeed"] == str(cfgs / "ds.json")
    assert read["reward_funcs"] == f"math,{cfgs / 'rewards' / 'mine.py'}:score,my_pkg.rewards:fn"
    unchanged = ("model", "eval_dataset", "learning_rate", "fsdp_config", "critic_model_name_or_path")
    assert {k: read[k] for k in unchanged} == {k: settings[k] for k in unchanged}
    monkeypatch.chdir(tmp_path)  # the file named by a relative path: the same absolute paths
    assert read_yaml(Path("project") / "cfgs" / "run.yaml") == read


def test_the_same_paths_from_any_working_folder(tmp_path, monkeypatch):
    cfgs = _project(tmp_path)
    (cfgs / "run.yaml").write_text("dataset: data/train.jsonl\ndeepspeed: ds.json\nmodel: tiny\n")
    seen = []
    for folder in (cfgs, cfgs.parent, tmp_path, cfgs / "data"):
        monkeypatch.chdir(folder)
        seen.append(load_settings_file(os.path.relpath(cfgs / "run.yaml", folder)))  # as a user types it
    assert seen[0] == seen[1] == seen[2] == seen[3]
    assert seen[0]["dataset"] == str(cfgs / "data" / "train.jsonl")


def test_a_comparisons_sections_resolve_too(tmp_path):
    cfgs = _project(tmp_path)
    compare = {
        "model": "tiny",
        "methods": ["pacs"],
        "train": {"dataset": "data/train.jsonl", "deepspeed": "ds.json"},
        "eval": {"benchmarks": ["data/train.jsonl", "math500"]},
    }
    (cfgs / "cmp.yaml").write_text(json.dumps(compare))
    read = load_compare_file(cfgs / "cmp.yaml")
    assert read["train"] == {
        "dataset": str(cfgs / "data" / "train.jsonl"),
        "deepspeed": str(cfgs / "ds.json"),
    }
    assert read["eval"]["benchmarks"] == [str(cfgs / "data" / "train.jsonl"), "math500"]
    assert resolve_paths({"train": None, "seeds": [0, 1]}, cfgs) == {"train": None, "seeds": [0, 1]}


def test_a_train_dry_run_plans_the_same_from_another_folder(tmp_path, monkeypatch):
    cfgs = _project(tmp_path)
    config = cfgs / "run.yaml"
    config.write_text("model: tiny\ndataset: data/train.jsonl\neval_size: 0\nmax_steps: 2\n")
    out = tmp_path / "never-written"
    outputs = []
    for folder in (cfgs, tmp_path):
        monkeypatch.chdir(folder)
        result = CliRunner().invoke(app, ["train", "--config", str(config), "--dry-run", "-o", str(out)])
        outputs.append((result.exit_code, result.output))
    assert outputs[0] == outputs[1]
    code, text = outputs[0]
    assert code == 0 and "training prompts: 40" in text, text
    assert not out.exists()
