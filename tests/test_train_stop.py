"""`pacs-rl train` stopped by a signal in the middle of a step, as a scheduler or Ctrl-C stops it: the process ends
at the next check point (no forward of the policy runs to its end after the signal: the one under way stops at its
next layer, where the step had many forwards left), says what it kept and the command that goes on, keeps its last finished checkpoint and nothing of the
step it was in, and the command run again ends with the weights of a run never interrupted, bit for bit. On two
processes (DDP) every process stops. And what the run prints to a log file: a line as each phase starts, in order,
written at once (the log read while the run is held in step 3 already has step 3's line).

The test launches this file as the `pacs-rl` process (``__main__``): the command, with the policy's forward held at
a chosen moment until a stop is asked for, as a long forward (a real model on a loaded CPU) would hold it.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from train_helpers import child_output

# each test runs `pacs-rl train` as processes of its own (a minute or more on 2 cores): CI runs them in its multi-process
# step (.ci/multiprocess.sh); the default suite checks the stop in-process (tests/test_stopping.py, the signalled runs
# of tests/test_train.py, test_dynamic_sampling.py and test_ppo.py, tests/test_run_card.py)
pytestmark = pytest.mark.slow
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1"}
STEPS = 4
# a reward of both labels on about a third of the problems only: the weights move, and dynamic sampling (on by
# default) samples further rounds for the groups of one label
REWARD = (
    "def some_odd(completions, problem, **kw):\n"
    "    return [float(len(c[0]['content']) % 2) if sum(map(ord, p)) % 3 == 0 else 0.0\n"
    "            for c, p in zip(completions, problem)]\n"
)


def _train_args(out: Path, reward: Path) -> list[str]:
    return [
        "train", "--model", "tiny", "--max-steps", str(STEPS), "--eval-size", "4", "--output-dir", str(out),
        "--set", "save_steps=1", "--set", "per_device_train_batch_size=4", "--set", "num_generations=2",
        "--set", "max_completion_length=6", "--set", "train_size=40", "--set", "eval_batch_size=2",
        "--set", "learning_rate=0.01", "--set", f"reward_funcs={reward}:some_odd",
    ]  # fmt: skip


def _launcher(processes: int) -> list[str]:
    if processes == 1:
        return [sys.executable]
    launcher = Path(sys.executable).parent / "accelerate"
    if not launcher.exists():
        pytest.skip("accelerate launcher not installed")
    return [str(launcher), "launch", "--multi_gpu", "--num_processes", str(processes), "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no"]  # fmt: skip


def _run(out: Path, reward: Path, processes: int = 1, moment: str = "none") -> subprocess.CompletedProcess:
    """The command to its end (``moment`` "none": nothing held); its stdout also kept in ``out``.log."""
    marks = out.parent / f"{out.name}-marks"
    marks.mkdir(parents=True, exist_ok=True)
    cmd = [*_launcher(processes), __file__, moment, str(marks), *_train_args(out, reward)]
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=1200)
    Path(f"{out}.log").write_text(proc.stdout)
    return proc


def _stopped(
    out: Path, reward: Path, moment: str, signum: int, processes: int = 1
) -> tuple[int, str, str, str]:
    """Start the command held at ``moment``; once every process waits there, send ``signum`` to the command (the
    launcher, with several processes: torchrun passes it on) and read the log as it stands; wait for the end.
    Returns (exit status, stdout, stderr, the log when the signal was sent)."""
    marks = out.parent / f"{out.name}-marks"
    marks.mkdir(parents=True, exist_ok=True)
    log, err = Path(f"{out}.log"), Path(f"{out}.err")
    cmd = [*_launcher(processes), __file__, moment, str(marks), *_train_args(out, reward)]
    with log.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(cmd, env=ENV, stdout=stdout, stderr=stderr)
        try:
            deadline = time.time() + 900  # a guard against a hang, not a measure
            while len(list(marks.glob("paused-rank*"))) < processes and proc.poll() is None:
                assert time.time() < deadline, "the run never reached the moment to stop it"
                time.sleep(0.05)
            assert proc.poll() is None, (
                f"the run ended before {moment}:\n{err.read_text()}\n{log.read_text()}"
            )
            seen = log.read_text()
            proc.send_signal(signum)
            proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return proc.returncode, log.read_text(), err.read_text(), seen


def _after(out: Path, processes: int = 1) -> list[int]:
    """Per process: the forwards of the policy that ran to their end after the signal came."""
    marks = out.parent / f"{out.name}-marks"
    return [int((marks / f"after-rank{r}").read_text()) for r in range(processes)]


def _weights(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run / "final" / "model.safetensors"))


def _steps(run: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]


@pytest.fixture(scope="module")
def reward(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("reward") / "some_odd.py"
    path.write_text(REWARD)
    return path


@pytest.fixture(scope="module")
def whole(tmp_path_factory, reward) -> Path:
    """The run never interrupted (one process), its stdout in whole.log."""
    out = tmp_path_factory.mktemp("stop") / "whole"
    proc = _run(out, reward)
    assert proc.returncode == 0, child_output(proc)
    return out


def test_a_log_file_gets_a_line_as_each_phase_starts_in_order(whole):
    """stdout to a file: loading, the held-out evaluation before training and its accuracy (before the first step
    starts), each step's start (its sampling, or the update on the rollout it shares), dynamic sampling's further
    rounds, the update after a rollout, each step's end, the final model and the evaluation after; each line with the
    time of day."""
    lines = Path(f"{whole}.log").read_text().splitlines()[1:]  # after the device line
    stamped = [x for x in lines if x[:2].isdigit() and x[2] == ":" and x[5] == ":"]
    text = [x[10:] for x in stamped]
    order = [
        "loading the model tiny",
        "held-out evaluation before training: 4 problems, greedy, at most 6 tokens",
        "held-out accuracy before training: ",
        "step 1/4: sampling 8 prompts x 2 completions",
        "step 1/4: update (the rollout took ",
        "step 1/4 done",
        "step 2/4: update on the rollout sampled in step 1",
        "step 2/4 done",
        "step 3/4: sampling 8 prompts x 2 completions",
        "step 3/4: update (the rollout took ",
        "step 3/4 done",
        "step 4/4: update on the rollout sampled in step 3",
        "step 4/4 done",
        "saving the final model to ",
        "held-out evaluation after training: ",
        "held-out accuracy after training: ",
    ]
    at = [next((i for i, x in enumerate(text) if x.startswith(want)), None) for want in order]
    assert None not in at, (order[at.index(None)], text)
    assert at == sorted(at), text
    rounds = [x for x in text if ": dynamic sampling round 2 of at most 4 (" in x]
    assert rounds and all(x.startswith(("step 1/4", "step 3/4")) for x in rounds), text
    # step 1's further rounds between its sampling and its update
    assert all(at[3] < text.index(x) < at[4] for x in rounds if x.startswith("step 1/4"))
    held = json.loads((whole / "heldout.json").read_text())["before"]
    assert (
        f"held-out accuracy before training: {held['accuracy']:.1%} ({held['correct']} of 4)" in text[at[2]]
    )


@pytest.mark.parametrize(
    "moment, signum, kept",
    [
        pytest.param("sampling:3", signal.SIGTERM, 2, id="sigterm-mid-sampling"),
        pytest.param("update:2", signal.SIGINT, 1, id="ctrl-c-mid-update"),
    ],
)
def test_a_signal_mid_step_stops_at_once_keeps_the_last_checkpoint_and_resumes_bit_identical(
    tmp_path, reward, whole, moment, signum, kept
):
    """The policy held in the middle of step ``kept + 1`` (its rollout's sampling, or its update with a micro-batch
    still to come) when the signal comes: the process ends within the forward under way, before the step would
    have ended (no row for it in metrics.jsonl, no checkpoint of it), says so with the command that goes on, and that
    command ends where the uninterrupted run ended, bit for bit."""
    out = tmp_path / "run"
    status, log, err, seen = _stopped(out, reward, moment, signum)
    name, code = ("SIGTERM", 143) if signum == signal.SIGTERM else ("Ctrl-C", 130)
    assert status == code, f"{status}\n{err}\n{log}"
    assert _after(out) == [0]  # the forward under way when the signal came stopped at its next layer
    step = kept + 1
    assert f"step {step}/{STEPS}: " in seen  # the log, read while the run was held, already said where it was
    assert f"step {step}/{STEPS} done" not in log
    assert _steps(out) == list(range(1, step))
    assert sorted(p.name for p in out.glob("checkpoint-*")) == [f"checkpoint-{s}" for s in range(1, step)]
    assert not (out / "final").exists() and not (out / "run_complete.json").exists()
    line = [x for x in err.splitlines() if x.startswith("interrupted")]
    assert line == [
        f"interrupted ({name}) in step {step} of {STEPS}, which is dropped; kept {out / f'checkpoint-{kept}'} "
        f"(step {kept}); go on with: {shlex.join(['pacs-rl', *_train_args(out, reward)])}"
    ], err
    again = _run(out, reward)
    assert again.returncode == 0, child_output(again)
    assert f"continuing it from {out / f'checkpoint-{kept}'}" in again.stderr
    assert _steps(out) == list(range(1, STEPS + 1))
    want, got = _weights(whole), _weights(out)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)
    assert (
        json.loads((out / "heldout.json").read_text())["after"]
        == json.loads((whole / "heldout.json").read_text())["after"]
    )


def test_a_signal_in_the_evaluation_before_training_stops_it_and_the_rerun_starts_over(
    tmp_path, reward, whole
):
    """SIGTERM while the held-out evaluation before training runs: stopped there, nothing kept (no step was
    taken), no held-out result written; the command run again starts from step 0 and ends as the run in one go."""
    out = tmp_path / "run"
    status, log, err, _ = _stopped(out, reward, "before:0", signal.SIGTERM)
    assert status == 143, f"{status}\n{err}\n{log}"
    assert _after(out) == [0]
    assert "held-out accuracy before training" not in log and "step 1/4" not in log
    assert not list(out.glob("checkpoint-*")) and not (out / "heldout.json").exists()
    assert "interrupted (SIGTERM) at step 0 of 4; no checkpoint kept" in err
    again = _run(out, reward)
    assert again.returncode == 0, child_output(again)
    want, got = _weights(whole), _weights(out)
    assert all(torch.equal(want[k], got[k]) for k in want)


def test_two_processes_both_stop_on_a_sigterm_to_the_launcher_and_resume_bit_identical(tmp_path, reward):
    """accelerate launch --multi_gpu on 2 CPU processes, both held in step 3's sampling; SIGTERM to the launcher
    (as a scheduler sends it): torchrun passes it to both processes, each stops within the forward under way (none
    needs torchrun's SIGKILL 30 s later), step 3 leaves nothing, and the run started again on 2 processes ends with
    the weights of a 2-process run never interrupted."""
    whole2 = tmp_path / "whole"
    proc = _run(whole2, reward, processes=2)
    assert proc.returncode == 0, child_output(proc)
    out = tmp_path / "run"
    status, log, err, seen = _stopped(out, reward, "sampling:3", signal.SIGTERM, processes=2)
    assert status != 0, f"{status}\n{err}\n{log}"
    assert _after(out, 2) == [0, 0]  # every process stopped at its next check point
    assert "forcefully exiting via" not in err  # torchrun did not have to kill a process
    assert "step 3/4: " in seen and "step 3/4 done" not in log
    assert f"interrupted (SIGTERM) in step 3 of 4, which is dropped; kept {out / 'checkpoint-2'}" in err
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    again = _run(out, reward, processes=2)
    assert again.returncode == 0, child_output(again)
    want, got = _weights(whole2), _weights(out)
    assert all(torch.equal(want[k], got[k]) for k in want)
    assert _steps(out) == [1, 2, 3, 4]


# ---------------------------------------------------------------------------------------------------- child
def _child(moment: str, marks: Path, argv: list[str]) -> None:
    """`pacs-rl <argv>`, the policy's forward held at ``moment`` ("none", or phase:step with the phase "sampling"
    (a rollout's generation), "update" (a step's loss) or "before" (the held-out evaluation before training, step
    0)): the second forward of the sampling or the evaluation, the first of the update (a micro-batch is still to
    come), waits until a stop is asked for, writing marks/paused-rank<r>; marks/after-rank<r> counts the forwards
    that run to their end after that (the held one included)."""
    from transformers import LlamaForCausalLM

    from pacs_rl import stopping
    from pacs_rl.cli import main
    from pacs_rl.training.heldout import HeldOut
    from pacs_rl.training.trainer import PACSTrainer

    rank = os.environ.get("RANK", "0")
    phase, _, step = moment.partition(":")
    hold_at = {"sampling": 2, "update": 1, "before": 2}.get(phase)
    now = {"phase": None, "step": None}
    seen = {"forwards": 0, "after": None}

    def marking(name, method, step_of):
        def run(self, *args, **kwargs):
            before = dict(now)
            now.update(phase=name(args), step=step_of(self))
            try:
                return method(self, *args, **kwargs)
            finally:
                now.update(before)

        return run

    in_training = lambda trainer: trainer.state.global_step + 1  # noqa: E731
    PACSTrainer._generate_single_turn = marking(
        lambda a: "sampling", PACSTrainer._generate_single_turn, in_training
    )
    PACSTrainer._compute_loss = marking(lambda a: "update", PACSTrainer._compute_loss, in_training)
    HeldOut.measure = marking(lambda a: a[1], HeldOut.measure, lambda held: 0)  # measure(trainer, when)
    forward = LlamaForCausalLM.forward

    def held_forward(self, *args, **kwargs):
        if now["phase"] == phase and str(now["step"]) == step and seen["after"] is None:
            seen["forwards"] += 1
            if seen["forwards"] == hold_at:
                (marks / f"paused-rank{rank}").write_text(moment)
                deadline = time.time() + 600
                while stopping.requested() is None and time.time() < deadline:
                    time.sleep(0.01)
                seen["after"] = 0
                (marks / f"after-rank{rank}").write_text("0")
        out = forward(self, *args, **kwargs)
        if seen["after"] is not None:
            seen["after"] += 1
            (marks / f"after-rank{rank}").write_text(str(seen["after"]))
        return out

    LlamaForCausalLM.forward = held_forward
    sys.argv = ["pacs-rl", *argv]
    main()


if __name__ == "__main__":
    _child(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])
