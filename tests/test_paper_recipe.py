"""The paper configs hold the authors' settings: docs/ALGORITHMS.md, "Ours vs the authors' runs", is read here
and every config that claims the paper's recipe is checked against it, cell by cell, so that a later edit of
either cannot drift from the other silently."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from pacs_rl.compare.job import run_values
from pacs_rl.compare.plan import comparison_protocol, load_settings_file, resolve_settings
from pacs_rl.training.checks import split_settings
from pacs_rl.training.run import build_config
from train_helpers import resolve

REPO = Path(__file__).resolve().parents[1]
NONE, ABSENT = "none", "—"  # cells: no clipping (None or 0); not set for that method
COLUMNS = {"PACS": ("pacs", "pacs_no_weight"), "GRPO": ("grpo",), "PPO": ("ppo",)}
# what a CPU test machine must change to build the 7B configs; none of these is in the table
ON_CPU = {
    "use_cpu": True,
    "bf16": False,
    "use_vllm": False,
    "gradient_checkpointing": False,
    "deepspeed": None,
}


def _tables() -> list[list[dict[str, str]]]:
    """The markdown tables of the section, each a list of {header: cell}."""
    text = (REPO / "docs" / "ALGORITHMS.md").read_text()
    section = text.split("## Ours vs the authors' runs", 1)[1].split("\n## ", 1)[0]
    tables, rows = [], []
    for line in [*section.splitlines(), ""]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            header, body = rows[0], [r for r in rows[2:]]
            tables.append([dict(zip(header, r, strict=True)) for r in body])
            rows = []
    return tables


def _cell(text: str):
    if text in (NONE, ABSENT):
        return text
    code = re.fullmatch(r"`(.*)`", text)
    assert code, f"a value cell must be a `code` value, {NONE} or {ABSENT}: {text!r}"
    return yaml.safe_load(code.group(1))


def _key(row) -> str:
    return row["key"].strip("`")


def _effective(config, key: str):
    if key.startswith("loss_options."):
        return config.loss_options.get(key.split(".", 1)[1], ABSENT)
    value = getattr(config, key, ABSENT)
    if key == "critic_max_grad_norm" and value is None:
        return config.max_grad_norm  # None: the policy's clip
    return value


def _check(config, row, column: str, where: str) -> None:
    expected, got = _cell(row[column]), _effective(config, _key(row))
    if expected == NONE:
        ok = got in (None, 0, 0.0)
    elif isinstance(expected, float):
        ok = isinstance(got, (int, float)) and math.isclose(got, expected)
    else:
        ok = got == expected
    assert ok, f"{where}: {_key(row)} is {got!r}; docs/ALGORITHMS.md says {row[column]} ({row['setting']})"


def test_the_table_covers_every_setting_of_the_issue():
    trl, verl = _tables()
    assert {_key(r) for r in trl} >= {
        "max_grad_norm",
        "critic_max_grad_norm",
        "weight_decay",
        "loss_options.loss_agg_mode",
        "critic_loss_agg_mode",
        "max_completion_length",
        "per_device_train_batch_size",
        "loss_options.clip_ratio_c",
        "vllm_importance_sampling_correction",
        "beta",
    }
    assert all(r["the authors' runs"] for r in trl + verl), (
        "every row names where the authors' value comes from"
    )
    assert {r["verl key (PACS examples)"].strip("`") for r in verl} >= {
        "actor_rollout_ref.actor.optim.clip_grad",
        "actor_rollout_ref.actor.optim.weight_decay",
        "algorithm.rollout_correction.rollout_is",
    }


def test_compare_paper_7b_runs_each_method_as_the_authors_did(tmp_path):
    settings = resolve_settings(config=load_settings_file(REPO / "configs" / "compare_paper_7b.yaml"))
    trl, _ = _tables()
    proto = comparison_protocol(settings)
    assert set(proto["methods"]) == {m for ms in COLUMNS.values() for m in ms}
    for column, names in COLUMNS.items():
        for name in names:
            _, kwargs = split_settings(run_values(proto, name, 0)[0])  # CPU default ← train ← method
            config = build_config({**kwargs, **ON_CPU}, tmp_path / name)
            for row in trl:
                _check(config, row, column, f"configs/compare_paper_7b.yaml, method {name}")


@pytest.mark.parametrize("name", ["paper_qwen2.5-7b_8gpu_vllm.yaml", "qwen3-8b_8gpu_vllm.yaml"])
def test_the_pacs_training_config_is_the_authors_pacs(name, tmp_path):
    _, kwargs = resolve(str(REPO / "configs" / name), {}, [])
    raw = yaml.safe_load((REPO / "configs" / name).read_text())
    assert raw["use_vllm"] and raw["vllm_importance_sampling_correction"] is False  # accepted with vLLM
    config = build_config({**kwargs, **ON_CPU}, tmp_path)
    for row in _tables()[0]:
        _check(config, row, "PACS", f"configs/{name}")


def test_the_qwen3_8b_config_is_the_paper_config_with_another_model():
    """The paper's second version trains Qwen3 with the same recipe: only the model (and comments) differ."""
    paper = yaml.safe_load((REPO / "configs" / "paper_qwen2.5-7b_8gpu_vllm.yaml").read_text())
    qwen3 = yaml.safe_load((REPO / "configs" / "qwen3-8b_8gpu_vllm.yaml").read_text())
    differ = {k for k in paper.keys() | qwen3.keys() if paper.get(k) != qwen3.get(k)}
    assert differ == {"model"} and qwen3["model"] == "Qwen/Qwen3-8B"


@pytest.mark.parametrize("name", ["pacs_qwen2.5_7b_deepscaler.yaml", "pacs_qwen2.5_0.5b_single_gpu.yaml"])
def test_the_verl_examples_are_the_authors_pacs(name):
    example = yaml.safe_load((REPO / "examples" / "verl" / name).read_text())
    for row in _tables()[1]:
        node = example
        for part in row["verl key (PACS examples)"].strip("`").split("."):
            assert isinstance(node, dict) and part in node, (
                f"{name} does not set {row['verl key (PACS examples)']}"
            )
            node = node[part]
        assert node == _cell(row["value"]), f"{name}: {row['verl key (PACS examples)']} is {node!r}"
