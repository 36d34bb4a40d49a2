"""One vocabulary across `pacs-rl train`, `eval` and `compare`: the shared data settings, older spellings (kept,
with a note), TRL's names (accepted as flags and keys), `--model tiny` in every command, the help (defaults shown,
readable at 80 columns), losses registered after import, and a quiet run."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest
from typer.testing import CliRunner

from pacs_rl.cli import app
from pacs_rl.command import rewrite_args
from pacs_rl.compare.plan import resolve_settings
from pacs_rl.evaluation.runner import EvalConfig
from pacs_rl.settings.data import DATA_KEYS, DataSettings
from pacs_rl.settings.errors import SettingsError
from pacs_rl.training import cli
from pacs_rl.training.checks import split_settings
from pacs_rl.training.schema import RunSettings


@pytest.fixture(autouse=True)
def _drop_note_handlers():
    yield
    logger = logging.getLogger("pacs_rl")  # the command's note handler wrote to the runner's closed stream
    for handler in [h for h in logger.handlers if getattr(h, "_pacs_cli", False)]:
        logger.removeHandler(handler)


def test_train_and_eval_share_one_schema_of_data_settings():
    for cls in (RunSettings, EvalConfig):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in DATA_KEYS:  # one declaration: same type, default and help in both
            assert (
                fields[name] is not None
                and fields[name].metadata == DataSettings.__dataclass_fields__[name].metadata
            )
    assert not hasattr(EvalConfig(model="m", benchmark="b"), "on_error")
    assert RunSettings(skip_bad_rows=False).loader_kwargs()["on_error"] == "raise"


def test_older_spellings_work_with_a_note_and_trl_spellings_quietly():
    notes: list[str] = []
    options = ["--output-dir", "--benchmarks", "--skip-bad-rows", "--no-skip-bad-rows", "--model", "--split"]
    args = rewrite_args(
        "eval",
        ["--output", "o", "--benchmark=math500", "--on-error", "raise", "--output_dir", "p", "--model_name_or_path",
         "m", "--dataset-split", "test"],
        options,
        notes,
    )  # fmt: skip
    assert args == [
        "--output-dir", "o", "--benchmarks=math500", "--no-skip-bad-rows", "--output-dir", "p", "--model", "m",
        "--split", "test",
    ]  # fmt: skip
    # --output, --benchmark, --on-error, --dataset-split
    assert len(notes) == 4 and all("still works" in n for n in notes)
    notes = []
    assert rewrite_args("compare", ["--seeds", "3", "--steps", "2"], ["--seed", "--max-steps"], notes) == [
        "--seed", "0,1,2", "--max-steps", "2",
    ]  # fmt: skip
    assert notes[0].startswith("--seeds 3 is now written --seed 0,1,2")


def test_trl_names_are_accepted_as_keys_and_as_flags(tmp_path):
    config = tmp_path / "trl.yaml"
    config.write_text(
        "model_name_or_path: tiny\ndataset_name: arithmetic?n=40\nuse_peft: true\noutput_dir: out\n"
    )
    notes: list[str] = []
    values = cli.merge_settings(cli.user_settings(str(config), {}, ["dataset_split=test"], notes))
    assert values["model"] == "tiny" and values["dataset"] == "arithmetic?n=40" and values["use_lora"] is True
    assert values["output_dir"] == "out" and values["split"] == "test"
    assert notes == ["--set: dataset_split is now called split; the old name still works"]
    with pytest.raises(SettingsError, match=r"model_name_or_path and model in .* are one setting"):
        split_settings({"model_name_or_path": "a", "model": "b"})
    # as flags, TRL's way: the dry run shows what they set
    out = tmp_path / "run"
    args = ["train", "--model_name_or_path", "tiny", "--dataset_name", "arithmetic?n=40", "--output_dir", str(out),
            "--use_peft", "--report_to", "none", "--use_vllm", "false", "--learning_rate", "1e-4", "--dry-run"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "model: tiny" in result.output and "a LoRA adapter (use_lora: r 16" in result.output
    assert (
        f"checkpoints: {out}/checkpoint-<step>" in result.output and "training prompts: 40" in result.output
    )
    assert not out.exists()


def test_compare_reads_the_shared_names_and_its_older_ones(tmp_path):
    settings = resolve_settings(
        preset="smoke",
        config={
            "train": {"data": "arithmetic?n=16&split=train", "instruction": "Answer."},
            "eval": {"n": "paper"},
        },
    )
    assert settings["train"]["dataset"] == "arithmetic?n=16&split=train" and "data" not in settings["train"]
    from pacs_rl.compare.plan import comparison_protocol

    proto = comparison_protocol(settings)  # what every run of its record trains and is evaluated with
    assert proto["train"]["instruction"] == "Answer."
    # the model is evaluated with the prompt it was trained with
    assert proto["eval"]["data"] == {"instruction": "Answer."}
    with pytest.raises(SettingsError, match="max_steps=0"):
        resolve_settings(preset="smoke", cli={"train": {"max_steps": 0}})


def test_help_shows_defaults_and_reads_at_80_columns():
    for command in ("train", "eval", "compare"):
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        assert max(map(len, lines)) <= 80, max(lines, key=len)
        assert "…" not in result.output  # no option name cut
    help_text = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "80"}, terminal_width=80).output
    train = " ".join(help_text.split())  # as read, across the wrapped lines
    for shown in ("--max-steps N", "[default: 24]", "[default: smollm2-135m]", "--skip-bad-rows / --no-skip-bad-rows",
                  "[default: --skip-bad-rows]", "--learning-rate, --lr LR", "[default: 2e-05]"):  # fmt: skip
        assert shown in train, shown
    assert "Policy loss: pacs, grpo, dr_grpo, rloo, cw_grpo, ppo. [default: pacs]" in train


def test_eval_takes_the_tiny_model(tmp_path, monkeypatch):
    monkeypatch.setenv("PACS_RL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "e"
    args = ["eval", "--model", "tiny", "-b", "arithmetic?n=2&seed=0", "--n", "2", "--max-new-tokens", "4",
            "--verify-workers", "0", "--no-progress", "-o", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "tiny" and metrics["num_problems"] == 2 and metrics["n"] == 2
    assert (tmp_path / "cache" / "models" / "tiny" / "config.json").is_file()  # built once, reused


def test_a_loss_registered_after_import_is_served(tmp_path):
    from pacs_rl.algorithms import LOSS_LABELS, POLICY_LOSSES, register_policy_loss
    from pacs_rl.algorithms.baselines import dr_grpo_loss
    from pacs_rl.training import PACSConfig, config_and_trainer_classes
    from pacs_rl.training.checks import config_problems

    register_policy_loss("my_loss", label="Mine")(lambda *a, **k: dr_grpo_loss(*a, **k))
    try:
        assert "my_loss" in PACSConfig.served_loss_types
        config = PACSConfig(output_dir=str(tmp_path), loss_type="my_loss", use_cpu=True, bf16=False)
        assert config.loss_type == "my_loss" and config_and_trainer_classes("my_loss")[0] is PACSConfig
        assert config_problems({"loss_type": "my_loss"}) == []
    finally:
        POLICY_LOSSES.pop("my_loss")
        LOSS_LABELS.pop("my_loss")
    assert "my_loss" not in PACSConfig.served_loss_types


def test_too_few_training_problems_are_refused_by_the_library_too(tmp_path):
    from pacs_rl.settings.errors import SettingsError as RunSettingsError
    from pacs_rl.training.run import build_config, run_training

    data = tmp_path / "two.jsonl"
    data.write_text('{"problem": "1+1?", "answer": "2"}\n{"problem": "2+2?", "answer": "4"}\n')
    settings = RunSettings(model="tiny", dataset=str(data), eval_size=0)
    config = build_config({"num_generations": 2, "per_device_train_batch_size": 4}, tmp_path / "run")
    with pytest.raises(
        RunSettingsError, match=r"gives 2 usable training problem.*rollout batch of 8 prompts"
    ):
        run_training(settings, config)
    assert not (tmp_path / "run").exists()


def test_resume_drops_only_the_warning_about_tied_weights(tiny_model):
    from pacs_rl.training.output import expect_tied_missing_keys

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logger = logging.getLogger("transformers.trainer")
    handler = Keep()
    logger.addHandler(handler)
    try:
        expect_tied_missing_keys(tiny_model)  # ties lm_head.weight to the embeddings
        logger.warning("There were missing keys in the checkpoint model loaded: ['lm_head.weight'].")
        logger.warning("There were missing keys in the checkpoint model loaded: ['model.norm.weight'].")
    finally:
        logger.removeHandler(handler)
        for f in list(logger.filters):
            logger.removeFilter(f)
    assert seen == ["There were missing keys in the checkpoint model loaded: ['model.norm.weight']."]
