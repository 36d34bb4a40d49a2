"""Trainer callbacks: reference reset (PACS, frozen reference), metrics.jsonl, a rich progress bar, a stop at the
end of a step (Ctrl-C)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from transformers import TrainerCallback

from pacs_rl.training.monitor import form_warnings

METRICS_FILE = "metrics.jsonl"


def progress_bar(*fields: TextColumn, enabled: bool = True) -> Progress:
    """The look of every bar of a run (training, held-out): description, bar, n/total, ``fields``, then the
    elapsed time and the ETA. The elapsed time stays meaningful once a bar is full, when the ETA reads 0.
    Without a terminal (a log file) or with ``enabled`` False (--no-progress) the bar shows nothing: the run prints
    a line per step instead."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *fields,
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        transient=False,
        disable=not (enabled and Console().is_terminal),
    )


class ReferenceResetCallback(TrainerCallback):
    """Every `ref_reset_steps` optimizer steps: copy the policy into the frozen reference and, with
    `reset_optimizer`, clear the optimizer state (Adam moments) at the same moment (paper §3.4)."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        every = args.ref_reset_steps
        if every > 0 and state.global_step % every == 0:
            self.trainer.reset_reference()
            if args.reset_optimizer:
                clear_optimizer_state(self.trainer.optimizer)
        return control


def clear_optimizer_state(optimizer) -> None:
    """Forget every per-parameter state (moments, step counts) of a (possibly accelerate-wrapped) optimizer."""
    inner = getattr(optimizer, "optimizer", optimizer)
    inner.state.clear()


class MetricsJsonlCallback(TrainerCallback):
    """Append every log (one per `logging_steps` optimizer steps) as a JSON line to <output_dir>/metrics.jsonl.

    On resume, rows of steps after the checkpoint (logged by the interrupted run, then redone) are dropped,
    so the file holds one row per step."""

    def __init__(self, output_dir: str | os.PathLike | None = None):
        self.output_dir = output_dir

    def path(self, args) -> Path:
        return Path(self.output_dir or args.output_dir) / METRICS_FILE

    def on_train_begin(self, args, state, control, **kwargs):
        path = self.path(args)
        if state.is_world_process_zero and path.is_file():
            kept = [line for line in path.read_text().splitlines() if _row_step(line) <= state.global_step]
            path.write_text("".join(line + "\n" for line in kept))
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return control
        # wall time and this process's CPU seconds (all threads): the latter is what to compare across
        # machines or under load from other processes
        row = {
            "step": state.global_step,
            "epoch": state.epoch,
            "time": time.time(),
            "cpu_seconds": time.process_time(),
        }
        row.update({k: _jsonable(v) for k, v in logs.items()})
        path = self.path(args)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        return control


def _row_step(line: str) -> float:
    try:
        return json.loads(line).get("step", math.inf)
    except json.JSONDecodeError:  # a line cut by a kill: drop it
        return math.inf


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """Rows of a metrics.jsonl, skipping lines that do not parse (a run killed mid-write)."""
    rows = []
    for line in Path(path).read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


class RichProgressCallback(TrainerCallback):
    """A one-line progress bar: step, reward, accuracy, seconds per step and ETA; without a terminal (a log
    file), one plain line per logged step instead of the bar. The reward-hacking monitor's notes
    (pacs_rl.training.monitor.form_warnings) are printed above it."""

    def __init__(self, description: str = "training", enabled: bool = True):
        self.description = description
        self.enabled = enabled  # False (--no-progress): a plain line per step, as in a log file
        self.progress = None
        self.task = None
        self.fields = {"reward": float("nan"), "accuracy": float("nan")}
        self.start = None
        self.announced: set[str] = set()  # forms of paid answers the monitor has announced

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return control

        self.progress = progress_bar(
            TextColumn("reward {task.fields[reward]:.3f}  acc {task.fields[accuracy]:.3f}"),
            enabled=self.enabled,
        )
        self.progress.start()
        self.start = (time.time(), state.global_step)
        self.task = self.progress.add_task(
            self.description, total=state.max_steps, completed=state.global_step, **self.fields
        )
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is None or not logs:
            return control
        for key in ("reward", "accuracy"):
            if logs.get(key) is not None:
                self.fields[key] = logs[key]
        self.progress.update(self.task, **self.fields)
        for line in form_warnings(logs, self.announced):
            self.progress.console.print(line)
        if self.progress.disable and "loss" in logs:  # a log file: one plain line per step
            t0, s0 = self.start
            per_step = (time.time() - t0) / max(state.global_step - s0, 1)
            eta = per_step * (state.max_steps - state.global_step)
            self.progress.console.print(
                f"step {state.global_step}/{state.max_steps}  reward {self.fields['reward']:.3f}  "
                f"acc {self.fields['accuracy']:.3f}  {per_step:.1f} s/step  ETA {eta / 60:.1f} min"
            )
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        return control


class StopAtStepEnd(TrainerCallback):
    """Stop training at the end of the step in progress, saving a checkpoint first, once ``request.signal_name`` is
    set (a signal handler sets it: pacs_rl.training.run). The trainer's own checkpoint holds the rollout batch in
    progress, so a run resumed from it continues exactly."""

    def __init__(self, request):
        self.request = request

    def on_step_end(self, args, state, control, **kwargs):
        if self.request.signal_name:
            control.should_save = True
            control.should_training_stop = True
        return control
