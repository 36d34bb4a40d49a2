"""`pacs-rl train`: settings layering, unknown-key errors, the shipped configs, and a tiny end-to-end run."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from pathlib import Path

import pytest
import yaml

from pacs_rl.data import arithmetic_pool_size
from pacs_rl.settings.errors import SettingsError
from pacs_rl.training import checks, cli, schema
from pacs_rl.training.data import load_run_data
from pacs_rl.training.run import build_config, run_training
from pacs_rl.training.schema import RunSettings
from train_helpers import resolve

REPO = Path(__file__).resolve().parents[1]


def test_cpu_default_yaml_mirrors_the_embedded_defaults():
    shipped = yaml.safe_load((REPO / "configs" / "cpu_default.yaml").read_text())
    embedded = schema.default_settings()
    assert shipped == {k: embedded[k] for k in shipped}
    assert set(embedded) <= set(shipped)


@pytest.mark.parametrize("name", ["cpu_default.yaml", "paper_qwen2.5-7b_8gpu_vllm.yaml"])
def test_shipped_configs_use_known_keys(name):
    data = checks.load_settings_file(REPO / "configs" / name)
    assert data


def test_paper_config_matches_appendix_b2(tmp_path):
    _run, cfg = resolve(str(REPO / "configs" / "paper_qwen2.5-7b_8gpu_vllm.yaml"), {}, [])
    G = cfg["num_generations"]
    mini_batch = cfg["per_device_train_batch_size"] * 8 * cfg["gradient_accumulation_steps"]  # 8 GPUs
    assert G == 8 and mini_batch == 256 * G  # 256 prompts per mini-batch
    assert cfg["mini_batches_per_rollout"] * mini_batch == 1024 * G  # 1,024 prompts per rollout batch
    assert cfg["learning_rate"] == 1e-6 and cfg["beta"] == 0.0 and cfg["temperature"] == 1.0
    assert cfg["max_completion_length"] == 4096 and cfg["use_vllm"] and cfg["vllm_mode"] == "colocate"


def test_layering_and_coercion(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("learning_rate: 1e-5\nmax_steps: 7\nmodel: some/model\n")
    settings, cfg = resolve(
        str(f), {"max_steps": 9}, ["learning_rate=3e-4", "pacs_weighted=false", "eval_size=0"]
    )
    assert cfg["learning_rate"] == 3e-4 and isinstance(cfg["learning_rate"], float)
    assert cfg["max_steps"] == 9  # typer option beats the file
    assert cfg["pacs_weighted"] is False and settings.eval_size == 0 and settings.model == "some/model"


def test_unknown_key_lists_close_matches():
    with pytest.raises(SettingsError, match="Did you mean: learning_rate"):
        checks.parse_assignments(["learning_rat=1e-5"])
    with pytest.raises(SettingsError, match="expected key=value"):
        checks.parse_assignments(["learning_rate"])


def test_tiny_end_to_end_run_and_resume(tmp_path, tiny_model_dir):
    sets = [
        f"model={tiny_model_dir}",
        "max_steps=2",
        "save_steps=1",
        "per_device_train_batch_size=4",
        "num_generations=2",
        "max_completion_length=6",
        "train_size=40",
        "eval_size=4",
        "eval_batch_size=4",
        "learning_rate=1e-3",
        "dynamic_sampling=false",  # one round per rollout: the counts below (tests/test_dynamic_sampling.py has more)
    ]
    settings, cfg = resolve(None, {}, sets)
    out = tmp_path / "run"
    result = run_training(settings, build_config(cfg, out))
    assert (out / "metrics.jsonl").is_file() and (out / "training_curves.png").is_file()
    held = json.loads((out / "heldout.json").read_text())
    assert held["before"]["n"] == 4 and held["after"]["n"] == 4
    assert any("held-out accuracy" in line for line in cli.summary_lines(result))
    assert (out / "final" / "config.json").is_file()
    # the reward-hacking monitor: every rollout's completions kept with their verdicts, the held-out samples too
    per_rollout = build_config(cfg, out).generation_batch_size

    def rollout_steps():
        rows = [json.loads(line) for line in (out / "samples" / "rollouts.jsonl").read_text().splitlines()]
        assert all(
            {"problem", "answer", "completion", "score", "reason", "form", "truncated"} <= set(r)
            for r in rows
        )
        return Counter(r["step"] for r in rows)

    first = rollout_steps()
    assert set(first.values()) == {per_rollout} and min(first) == 0
    forms = json.loads((out / "answer_forms.json").read_text())
    assert forms["grader"] == "sound" and forms["completions"] == sum(first.values())
    rollouts = [json.loads(line) for line in (out / "samples" / "rollouts.jsonl").read_text().splitlines()]
    assert forms["cut_off"] == sum(r["truncated"] for r in rollouts) and forms["paid_cut_off"] == 0
    assert all(r["reason"] == "truncated" and r["score"] == 0 for r in rollouts if r["truncated"])
    for when in ("before", "after"):
        rows = (out / "samples" / f"heldout_{when}.jsonl").read_text().splitlines()
        assert len(rows) == 4 and json.loads(rows[0])["finish_reason"] in ("stop", "length")
    # `pacs-rl audit` reads the run folder: every kept sample, graded again, none lost
    from pacs_rl.evaluation.audit import audit

    report = audit([out], grader="paper")
    assert {Path(f["path"]).name for f in report["files"]} == {
        "rollouts.jsonl",
        "heldout_before.jsonl",
        "heldout_after.jsonl",
    }
    assert report["totals"]["rows"] == sum(first.values()) + 8
    assert all(f["recorded_grader"] == "sound" and f["grader"] == "paper" for f in report["files"])
    with pytest.raises(SettingsError, match="--resume"):
        run_training(settings, build_config(cfg, out))  # refuses to overwrite a run
    settings2, cfg2 = resolve(None, {}, [*sets, "max_steps=3"])
    run_training(settings2, build_config(cfg2, out), resume=True)
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s for s in steps if s <= 3][-1] == 3
    resumed = rollout_steps()  # the rollouts redone after the checkpoint replace the interrupted run's
    assert set(resumed.values()) == {per_rollout} and max(resumed) > max(first)


def test_arithmetic_ops_reach_training_and_held_out_sets():
    settings = RunSettings(train_size=50, eval_size=20)
    train, held = load_run_data(settings, seed=0)
    assert settings.arithmetic_ops == "+-"
    for p in train + held:
        assert ("+" in p.problem or " - " in p.problem) and "*" not in p.problem, p.problem
    assert not {p.problem for p in train} & {p.problem for p in held}
    train, held = load_run_data(dataclasses.replace(settings, arithmetic_ops="*"), seed=0)
    assert all("*" in p.problem for p in train + held)
    # an explicit source string keeps its own operators for the held-out set too
    train, held = load_run_data(
        dataclasses.replace(settings, dataset="arithmetic?ops=+&n=30&split=train"), seed=0
    )
    assert all("+" in p.problem for p in train + held) and len(held) == 20


def test_arithmetic_digits_reach_both_sets_and_sizes_are_capped_by_the_pool(caplog):
    settings = RunSettings(arithmetic_digits="2,1", train_size=5000, eval_size=1000)
    with caplog.at_level(logging.INFO, logger="pacs_rl"):
        train, held = load_run_data(settings, seed=0)
    for p in train + held:
        assert 10 <= p.extras["a"] <= 99 and 0 <= p.extras["b"] <= 9, p.problem
    # a train_size or eval_size larger than the task is a ceiling: every problem of the split, once
    assert len(train) == arithmetic_pool_size(ops="+-", digits="2,1", split="train")
    assert len(held) == arithmetic_pool_size(ops="+-", digits="2,1", split="test")
    assert "training on all 1441 problems" in caplog.text
    # an explicit n= in the source string is a demand, refused when the split is smaller
    with pytest.raises(ValueError, match="only"):
        load_run_data(dataclasses.replace(settings, dataset="arithmetic?n=5000"), seed=0)
    with pytest.raises(ValueError, match="train split"):
        load_run_data(dataclasses.replace(settings, dataset="arithmetic?split=test"), seed=0)
    train, _ = load_run_data(
        dataclasses.replace(settings, dataset="arithmetic?digits=1&n=10", eval_size=0), seed=0
    )
    assert len(train) == 10 and all(p.extras["a"] <= 9 for p in train)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            "arithmetic_ops=+^",
            r"ops must be a non-empty combination of '\+-\*', got '\+\^'.*arithmetic_ops='\+\^'",
        ),
        ("dataset=arithmetic?ops", r"bad option 'ops': expected key=value.*dataset='arithmetic\?ops'"),
    ],
)
def test_bad_data_setting_is_a_clear_error_before_the_model_loads(tmp_path, setting, message):
    settings, cfg = resolve(None, {}, ["model=/no/such/model", setting])
    with pytest.raises(SettingsError, match=message):
        run_training(settings, build_config(cfg, tmp_path / "run"))


def test_every_seed_is_measured_on_the_same_held_out_problems():
    settings = RunSettings(train_size=50, eval_size=20)
    train0, held0 = load_run_data(settings, seed=0)
    train7, held7 = load_run_data(settings, seed=7)
    assert [p.problem for p in held0] == [p.problem for p in held7]  # the set does not follow the seed
    assert [p.problem for p in train0] != [p.problem for p in train7]  # the training draw does


def test_threads_option_reaches_torch_before_training(tmp_path, monkeypatch):
    import torch

    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)  # the test process keeps its own threads
    settings, cfg = resolve(
        None,
        {"model": "tiny", "num_threads": "1"},
        ["max_steps=1", "eval_size=0", "train_size=16", "plot=false"],
    )
    assert settings.num_threads == 1
    run_training(settings, build_config(cfg, tmp_path / "run"))
    assert calls[:1] == [1]
    with pytest.raises(SettingsError, match="num_threads=0: give a whole number >= 1"):
        RunSettings(num_threads=0)
