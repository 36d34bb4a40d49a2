"""What a training run reads from its settings: reward functions by name or dotted path (with weights), the
grader, the prompt (instruction, system prompt, a prompt column of chat messages), field names, bad rows,
and one-line errors for a batch that splits groups or a model that does not exist."""

from __future__ import annotations

import json
import logging
import re

import pytest
from typer.testing import CliRunner

from pacs_rl.cli import app
from pacs_rl.settings.errors import SettingsError
from pacs_rl.training.data import build_dataset, load_run_data
from pacs_rl.training.run import build_config, build_reward_funcs, run_training
from pacs_rl.training.schema import RunSettings
from train_helpers import resolve

REWARD_MODULE = """
CALLS = []

def short_answer(completions, answer, problem, problem_id, prompts, **kwargs):
    CALLS.append({"n": len(completions), "answer": list(answer), "problem": list(problem)})
    return [1.0 if len(str(c)) % 2 else 0.0 for c in completions]
"""


@pytest.fixture()
def invoke():
    """The `pacs-rl` command in-process; its output with the error box's borders and wrapping undone."""

    def run(*args):
        result = CliRunner().invoke(app, list(args))
        return result.exit_code, re.sub(r"[\s│╭╮╰╯─]+", " ", result.output)

    yield run
    logger = logging.getLogger("pacs_rl")  # the command's note handler wrote to the runner's closed stream
    for handler in [h for h in logger.handlers if getattr(h, "_pacs_cli", False)]:
        logger.removeHandler(handler)


def _tiny_sets(model_dir, *extra):
    return [
        f"model={model_dir}",
        "max_steps=2",
        "save_steps=2",
        "per_device_train_batch_size=4",
        "num_generations=2",
        "max_completion_length=6",
        "train_size=16",
        "eval_size=0",
        "learning_rate=1e-3",
        "plot=false",
        *extra,
    ]


def test_a_reward_function_given_by_dotted_path_trains(tmp_path, tiny_model_dir, monkeypatch):
    (tmp_path / "custom_train_rewards.py").write_text(REWARD_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    settings, cfg = resolve(
        None, {}, _tiny_sets(tiny_model_dir, "reward_funcs=custom_train_rewards:short_answer")
    )
    config = build_config(cfg, tmp_path / "run")
    result = run_training(settings, config)
    import custom_train_rewards

    assert result.global_step == 2
    assert custom_train_rewards.CALLS, "the custom reward function was never called"
    call = custom_train_rewards.CALLS[0]
    assert (
        call["n"] == config.generation_batch_size == 16
    )  # 4 x 2 accumulation x 2 mini-batches: 8 prompts x G 2
    assert all(q.startswith("What is") for q in call["problem"])
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("rewards/short_answer/mean" in row for row in logged)


def test_reward_functions_and_weights_are_checked(tmp_path):
    assert [f.__name__ for f in build_reward_funcs(RunSettings(), build_config({}, tmp_path))] == [
        "math_reward_sound"  # the training grader
    ]
    config = build_config({"reward_weights": [1.0, 2.0]}, tmp_path)
    with pytest.raises(SettingsError, match=r"reward_weights=\[1.0, 2.0\] has 2 weight\(s\) for 1 reward"):
        build_reward_funcs(RunSettings(), config)
    with pytest.raises(SettingsError, match="cannot import 'no_such_pkg_xyz'"):
        build_reward_funcs(RunSettings(reward_funcs="math,no_such_pkg_xyz:f"), config)
    with pytest.raises(SettingsError, match="neither 'math' nor 'module:function'"):
        RunSettings(reward_funcs="math,my_reward")
    with pytest.raises(SettingsError, match="unknown base grader 'lenient'"):
        RunSettings(grader="lenient")


def test_training_pays_the_sound_grader_on_every_dataset_unless_named():
    assert RunSettings().resolved_grader() == "sound"
    assert RunSettings(dataset="arithmetic?n=10").resolved_grader() == "sound"
    assert RunSettings(dataset="train.jsonl").resolved_grader() == "sound"
    assert RunSettings(grader="auto").resolved_grader() == "sound"  # the old default's name
    assert RunSettings(grader="strict+echo").resolved_grader() == "strict+echo"


def test_prompt_settings_and_a_prompt_column_reach_the_dataset(tmp_path):
    rows = [
        {"id": "a", "question": "What is 2 + 2?", "final": "4"},
        {"id": "b", "chat": [{"role": "user", "content": "Add 3 and 4."}], "final": "7"},
        {
            "id": "c",
            "chat": [{"role": "system", "content": "S"}, {"role": "user", "content": "5 + 5?"}],
            "final": "10",
        },
        {"id": "d", "chat": "not messages but text", "final": "1"},
        {"id": "e", "chat": [{"role": "user"}], "final": "1"},  # bad: no content
    ]
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows[1:]) + "\n")
    settings = RunSettings(
        dataset=str(data), prompt_field="chat", answer_field="final", eval_size=0, system_prompt="Be brief."
    )
    train, _ = load_run_data(settings, seed=0)  # bad rows are skipped by default, as in pacs-rl eval
    assert [p.id for p in train] == ["b", "c", "d"]
    ds = build_dataset(train, settings)
    assert ds[0]["prompt"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Add 3 and 4."},  # used as is: no instruction appended
    ]
    assert ds[1]["prompt"][0] == {"role": "system", "content": "S"}  # its own system turn wins
    assert ds[2]["prompt"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "not messages but text"},
    ]
    assert ds[0]["problem"] == "Add 3 and 4." and ds[0]["answer"] == "7"
    data.write_text(json.dumps(rows[0]) + "\n")
    plain = RunSettings(
        dataset=str(data), problem_field="question", answer_field="final", instruction="", eval_size=0
    )
    train, _ = load_run_data(plain, seed=0)
    assert build_dataset(train, plain)[0]["prompt"] == [{"role": "user", "content": "What is 2 + 2?"}]
    with pytest.raises(SettingsError, match="line 1: missing field"):
        load_run_data(RunSettings(dataset=str(data), skip_bad_rows=False, eval_size=0), seed=0)


def test_held_out_file_is_read_with_the_training_fields(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(
        "\n".join(json.dumps({"q": f"What is {i} + 1?", "a": str(i + 1)}) for i in range(6)) + "\n"
    )
    held_file = tmp_path / "h.jsonl"
    held_file.write_text(json.dumps({"q": "What is 9 + 9?", "a": "18"}) + "\n")
    settings = RunSettings(
        dataset=str(data), eval_dataset=str(held_file), problem_field="q", answer_field="a", eval_size=5
    )
    train, held = load_run_data(settings, seed=0)
    assert len(train) == 6 and [p.answer for p in held] == ["18"]


def test_num_generations_that_splits_a_batch_is_one_clear_error(tmp_path, invoke):
    with pytest.raises(
        SettingsError,
        match=r"per_device_train_batch_size=16 is not a multiple of num_generations=3.*one of \[2, 4, 8, 16\]",
    ):
        build_config({"num_generations": 3, "per_device_train_batch_size": 16}, tmp_path)
    with pytest.raises(
        SettingsError, match="generation_batch_size=36 is not a multiple of num_generations=8"
    ):
        build_config({"generation_batch_size": 36, "mini_batches_per_rollout": None}, tmp_path)
    code, output = invoke("train", "--set", "num_generations=3", "-o", str(tmp_path / "x"))
    assert code == 2 and "not a multiple of num_generations=3" in output and "Traceback" not in output


def test_a_model_that_does_not_exist_is_one_clear_error(tmp_path, invoke):
    code, output = invoke(
        "train", "--model", "runs/nope/final", "--set", "eval_size=0", "-o", str(tmp_path / "x")
    )
    assert code == 2 and "model 'runs/nope/final' is no bundled alias" in output, output
    assert "Traceback" not in output
    code, output = invoke(
        "eval", "--model", "nobody/no-such-model-xyz", "-b", "arithmetic?n=2", "-o", str(tmp_path / "e")
    )
    assert code == 2 and "not in the local cache while offline" in output and "Traceback" not in output
