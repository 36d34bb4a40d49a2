"""The hour after a run: its model card, its own evaluation with no flags, an interruption that says what it kept
and a rerun that goes on from there, and the rule for rerunning a command into its own folder."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pacs_rl.cli import app
from pacs_rl.training import output, run, schema
from pacs_rl.training.card import card_text
from pacs_rl.training.data import load_run_data


def command_line(argv: list[str]) -> str:
    """The `pacs-rl` command as a user types it again: without --resume (a rerun into the folder continues it)."""
    return shlex.join(["pacs-rl", *(a for a in argv if a != "--resume")])


SETS = [
    "per_device_train_batch_size=4",
    "num_generations=2",
    "max_completion_length=6",
    "train_size=40",
    "eval_batch_size=4",
    "save_steps=1",  # the interruption keeps the last checkpoint written: step 1's
    "learning_rate=1e-3",
]


def _args(out: Path, *extra: str) -> list[str]:
    args = [
        "train",
        "--model",
        "tiny",
        "--max-steps",
        "4",
        "--eval-size",
        "4",
        "-o",
        str(out),
        "--no-progress",
    ]
    return [*args, *(a for s in SETS for a in ("--set", s)), *extra]


class _CtrlCAtStep1(output.RichProgressCallback):
    """The progress callback, plus a Ctrl-C (SIGINT to this process) at the end of step 1, before its checkpoint is
    written (the stop lands at the next check point: step 2's first micro-batch)."""

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return super().on_step_end(args, state, control, **kwargs)


@pytest.fixture(scope="module")
def interrupted_then_finished(tmp_path_factory):
    """A tiny run stopped by Ctrl-C after step 1, then the same command again: (folder, both outputs)."""
    out = tmp_path_factory.mktemp("card") / "run"
    mp = pytest.MonkeyPatch()
    mp.setattr(run, "RichProgressCallback", _CtrlCAtStep1)
    stopped = CliRunner().invoke(app, _args(out))
    mp.undo()
    stopped.card = (out / "README.md").read_text()  # what the folder says between the two
    stopped.finished = (out / "run_complete.json").is_file()
    again = CliRunner().invoke(app, _args(out))
    return out, stopped, again


def test_ctrl_c_stops_in_the_next_step_keeps_the_last_checkpoint_and_says_how_to_go_on(
    interrupted_then_finished,
):
    out, stopped, _ = interrupted_then_finished
    assert stopped.exit_code == 130, stopped.output
    line = [x for x in stopped.output.splitlines() if x.startswith("interrupted")]
    assert line == [
        f"interrupted (Ctrl-C) in step 2 of 4, which is dropped; kept {out / 'checkpoint-1'} (step 1); "
        f"go on with: {command_line(_args(out))}"  # the same command
    ], stopped.output
    assert "Ctrl-C: stopping now" in stopped.output  # said when the signal came
    assert not (out / "checkpoint-2").exists()  # nothing of the step it was in
    assert not stopped.finished
    assert "**Unfinished.**" in stopped.card  # the card of a stopped run says so


def test_the_same_command_goes_on_and_counts_only_its_own_steps(interrupted_then_finished):
    out, stopped, again = interrupted_then_finished
    step = int(re.search(r"checkpoint-(\d) \(step", stopped.output).group(1))
    assert again.exit_code == 0, again.output
    assert f"continuing it from {out / f'checkpoint-{step}'}" in again.output
    assert f"training: steps {step + 1}-4 of 4" in again.output and f"({4 - step} steps" in again.output
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4]
    assert f"evaluate it on its held-out task: pacs-rl eval --model {out / 'final'}" in again.output
    assert f"model card: {out / 'README.md'}" in again.output


def test_a_finished_run_rerun_is_named_finished_and_other_settings_are_refused(interrupted_then_finished):
    out, _, _ = interrupted_then_finished
    before = (out / "metrics.jsonl").read_text()
    same = CliRunner().invoke(app, _args(out))
    assert same.exit_code == 0, same.output
    assert f"{out} is finished (step 4 of 4): nothing to train" in same.output
    assert "training: 4 of 4 steps, none this session" in same.output
    other = CliRunner().invoke(app, _args(out, "--set", "learning_rate=1e-2"))
    assert other.exit_code == 2
    assert "learning_rate: 0.001 there, 0.01 now" in other.output and "--resume" in other.output
    dry = CliRunner().invoke(app, [*_args(out), "--dry-run"])
    assert dry.exit_code == 0 and "already complete: nothing to train" in dry.output, dry.output
    assert (out / "metrics.jsonl").read_text() == before  # nothing trained again


def test_the_card_describes_the_run_truly(interrupted_then_finished):
    out, _, _ = interrupted_then_finished
    card = (out / "README.md").read_text()
    assert (
        "[None]" not in card and "DeepSeekMath" not in card and "time machine" not in card
    )  # TRL's generic card
    assert "**PACS**" in card and "https://arxiv.org/abs/2509.02522" in card
    assert "tiny random model" in card and "base_model:" not in card  # no Hub id to claim
    assert "`arithmetic_ops: +-`, `arithmetic_digits: 2,1`" in card and "40 training problems" in card
    assert "`sound`" in card and "| `learning_rate` | `0.001` |" in card
    held = json.loads((out / "heldout.json").read_text())
    assert f"{held['after']['accuracy']:.1%} ({held['after']['correct']} of 4)" in card
    assert "arithmetic?split=test&seed=10000&n=4&ops=+-&digits=2,1" in card and "greedy, at most 6" in card
    assert f"pacs-rl eval --model {out / 'final'}" in card and f"pacs-rl audit {out}" in card
    assert "answer_forms.json" in card
    first = json.loads((out / "samples" / "heldout_before.jsonl").read_text().splitlines()[0])["problem"]
    assert first in card  # the quick start asks a question of the run's own task
    assert "**Unfinished.**" not in card and "The LoRA adapter" not in card
    assert "model_dir = '.'" in (out / "final" / "README.md").read_text()


def test_the_steps_without_a_signal_are_counted_across_the_resume(interrupted_then_finished):
    """The tiny random model earns no reward: every step holds no group of two different rewards and is skipped,
    in both sessions; the record, the summary and the card count all four."""
    out, _, again = interrupted_then_finished
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["groups/mixed_frac_minibatch"] for r in steps] == [0.0] * 4
    assert [r["optimizer/skipped_no_signal"] for r in steps] == [1.0] * 4
    recorded = json.loads((out / "run_complete.json").read_text())["skipped_steps"]
    assert recorded == {"no_signal": 4, "nonfinite": 0}
    assert "skipped optimizer steps (weights left as they were): 4 without a signal" in again.output
    assert (
        "4 optimizer steps of 4, skipped (weights left as they were): 4 without a signal"
        in (out / "README.md").read_text()
    )


def test_the_cards_quick_start_runs(interrupted_then_finished, monkeypatch, capsys):
    out, _, _ = interrupted_then_finished
    code = re.findall(r"```python\n(.*?)```", (out / "final" / "README.md").read_text(), flags=re.S)[0]
    monkeypatch.chdir(out / "final")
    exec(code, {})
    assert capsys.readouterr().out.strip() is not None


def test_eval_of_a_run_needs_no_flags(interrupted_then_finished):
    """`pacs-rl eval --model RUN/final` draws the run's own held-out problems, with its protocol."""
    out, _, _ = interrupted_then_finished
    result = CliRunner().invoke(app, ["eval", "--model", str(out / "final"), "--no-progress"])
    assert result.exit_code == 0, result.output
    folder = out / "eval" / "greedy-n1-6tok"
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["n"] == 1 and metrics["grader"] == "sound" and metrics["sampling"]["temperature"] == 0
    held = [json.loads(x) for x in (out / "samples" / "heldout_after.jsonl").read_text().splitlines()]
    rows = [json.loads(x) for x in (folder / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["problem_id"] for r in rows) == sorted(r["problem_id"] for r in held)
    assert metrics["pass_at_k"]["1"] == pytest.approx(sum(r["score"] for r in held) / len(held))
    # the run folder itself names the same model and protocol; a rerun resumes (nothing drawn again)
    again = CliRunner().invoke(app, ["eval", "--model", str(out), "--dry-run"])
    assert again.exit_code == 0 and f"-> {folder} (resumes (4 samples there))" in again.output, again.output


def test_a_lora_card_says_how_to_load_and_merge_the_adapter(tmp_path):
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "x"}))
    (tmp_path / "settings.json").write_text(
        json.dumps(
            {
                "run": {"model": "smollm2-135m", "dataset": "arithmetic", "use_lora": True, "lora_r": 8},
                "key_settings": {"loss_type": "grpo"},
            }
        )
    )
    card = card_text(tmp_path)
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card and "library_name: peft" in card
    assert "**GRPO**" in card and "https://arxiv.org/abs/2402.03300" in card and "de-quantized" in card
    assert "PeftModel.from_pretrained(base" in card and "merge_and_unload()" in card
    assert "AutoPeftModelForCausalLM" in card and "**Unfinished.**" in card


def test_a_training_run_keeps_its_skipped_rows(tmp_path):
    """Bad rows are skipped and counted; the run records how many and their messages (settings.json's data)."""
    rows = [{"problem": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(6)]
    lines = [json.dumps(r) for r in rows] + ["{not json", json.dumps({"problem": "no answer"})]
    (tmp_path / "train.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "held.jsonl").write_text(json.dumps(rows[0]) + "\n")
    settings = schema.RunSettings(
        dataset=str(tmp_path / "train.jsonl"), eval_dataset=str(tmp_path / "held.jsonl")
    )
    train, held = load_run_data(settings, seed=0)
    assert len(train) == 5 and len(held) == 1  # the held-out problem left out of training
    assert train.skipped == 2 and len(train.skip_messages) == 2 and "line 7" in train.skip_messages[0]


def test_a_run_recorded_before_the_protocol_key_gets_it_rebuilt(interrupted_then_finished, tmp_path):
    """Folders written before settings.json held `heldout` are evaluated and described with the same protocol."""
    from pacs_rl.training.card import recorded_protocol

    out, _, _ = interrupted_then_finished
    recorded = json.loads((out / "settings.json").read_text())
    old = tmp_path / "old"
    old.mkdir()
    (old / "heldout.json").write_text((out / "heldout.json").read_text())
    (old / "settings.json").write_text(json.dumps({k: v for k, v in recorded.items() if k != "heldout"}))
    assert recorded_protocol(old) == recorded["heldout"]


def test_a_record_too_old_to_rebuild_is_refused_by_eval_with_what_to_do(tmp_path):
    """A run recorded before its run keys held what the held-out protocol needs: eval says so and asks for a
    benchmark instead of guessing today's defaults."""
    old = tmp_path / "old"
    (old / "final").mkdir(parents=True)
    (old / "settings.json").write_text(
        json.dumps({"run": {"dataset": "arithmetic", "eval_size": 5}, "config": {}})
    )
    result = CliRunner().invoke(app, ["eval", "--model", str(old / "final"), "--dry-run"])
    assert result.exit_code == 2
    assert "is from an older pacs-rl and does not say how held-out accuracy was measured" in result.output
    assert "give --benchmarks SOURCE" in result.output


def test_a_run_stopped_before_its_first_checkpoint_starts_again_or_refuses_other_settings(
    interrupted_then_finished, tmp_path
):
    """A folder holding a run's settings and no checkpoint (stopped during its first steps): the same command
    starts it again from step 0; other settings are refused, naming what differs."""
    finished, _, _ = interrupted_then_finished
    out = tmp_path / "run"
    out.mkdir()
    recorded = json.loads((finished / "settings.json").read_text())
    (out / "settings.json").write_text(json.dumps(recorded).replace(str(finished), str(out)))
    other = CliRunner().invoke(app, _args(out, "--set", "learning_rate=1e-2"))
    assert other.exit_code == 2, other.output
    assert "holds the start of a run made with other settings" in other.output
    assert "learning_rate: 0.001 there, 0.01 now" in other.output
    assert not any(out.glob("checkpoint-*"))  # nothing trained
    same = CliRunner().invoke(app, _args(out))
    assert same.exit_code == 0, same.output
    assert (
        f"{out} holds this run, stopped before its first checkpoint: starting it again from step 0"
        in same.output
    )
    assert (out / "run_complete.json").is_file()


def test_the_run_folders_jsonl_reader_skips_what_does_not_parse(tmp_path):
    """One reader for a run's JSONL files (metrics.jsonl, the samples files): a line cut by a kill, a blank line and
    a value that is no row are skipped, a missing file has no rows, and the kept lines come as written (a file is
    rewritten with some of them on resume), a line separator inside a string not taken for the end of a line."""
    from pacs_rl.run_folder import first_jsonl_row, jsonl_lines, read_jsonl

    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"step": 1, "loss": 0.5}\n\n[1, 2]\n{"step": 2, "note": "a\u2028b"}\n{"step": 3, "lo',
        encoding="utf-8",
    )
    assert read_jsonl(path) == [{"step": 1, "loss": 0.5}, {"step": 2, "note": "a\u2028b"}]
    assert [line for line, _ in jsonl_lines(path)] == [
        '{"step": 1, "loss": 0.5}',
        '{"step": 2, "note": "a\u2028b"}',
    ]
    assert first_jsonl_row(path) == {"step": 1, "loss": 0.5}
    assert read_jsonl(tmp_path / "missing.jsonl") == [] and first_jsonl_row(tmp_path / "missing.jsonl") == {}
