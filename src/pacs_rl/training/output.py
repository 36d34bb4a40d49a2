"""What a training run writes and shows: its metrics file, its progress bars, the stop at a step's end, the
library chatter it filters out, and its training-curves plot.

- ``metrics.jsonl`` (`MetricsJsonlCallback`; read with `pacs_rl.run_folder.read_jsonl`): one JSON row per logged
  optimizer step;
- the progress bar (`progress_bar`, `RichProgressCallback`): one bar for training, one per held-out pass, and the
  reward-hacking monitor's notes (pacs_rl.training.monitor.form_warnings) above it;
- `PhaseLines`: without a terminal (a log file), a line as each phase of a run starts, each with the time of day;
- the log filters (`quiet_libraries`, `expect_tied_missing_keys`): library chatter that carries nothing for the
  user of `pacs-rl train` / `compare`, filtered out, so the run shows one progress display per long step (its own
  bars) and its own notes:

  - transformers' tqdm bars ("Writing model shards" at every checkpoint, "Loading weights"): the run's bar shows
    the progress;
  - transformers' note that it sorts checkpoints by number because mtime "may not be reliable";
  - on resume, "There were missing keys in the checkpoint model loaded: ['lm_head.weight']" for a model whose LM
    head is tied to its embeddings: the tied weight is not saved, and it is restored with the embeddings
    (`expect_tied_missing_keys`; any other missing key is still reported);
- `plot_curves`: the main training curves of a metrics.jsonl as a PNG.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import os
import threading
import time
import warnings
from pathlib import Path

from transformers import TrainerCallback
from transformers.utils import logging as hf_logging

from pacs_rl.progress import progress_bar
from pacs_rl.rewards.answers import TRUSTED_FORMS
from pacs_rl.run_folder import METRICS_FILE, jsonl_lines, read_jsonl
from pacs_rl.training.monitor import METRIC_PREFIX, PAID_FORMS, form_warnings

_MISSING = "There were missing keys in the checkpoint model loaded:"


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
            kept = [line for line, row in jsonl_lines(path) if row.get("step", math.inf) <= state.global_step]
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


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


class PhaseLines:
    """What a run is doing, for a log file: ``say(text)`` prints ``HH:MM:SS  text`` on stdout at once (flushed: a
    person tailing the file sees it), nothing when not ``enabled`` (a terminal shows the bars instead). While
    started, a phase that runs on without a new line for ``quiet`` seconds (a long sampling on a loaded CPU) gets a
    line saying so (``still going, 50 s since: <its line>``); looking once a second, the file is never silent for
    30 s with the default 25."""

    def __init__(self, enabled: bool, quiet: float = 25.0):
        self.enabled, self.quiet = enabled, quiet
        self._last = ("", time.time(), time.time())  # (text, when said, when its phase began)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, text: str) -> None:
        if self.enabled:
            with self._lock:
                now = time.time()
                self._print(text, now)
                self._last = (text, now, now)

    @staticmethod
    def _print(text: str, now: float) -> None:
        print(f"{time.strftime('%H:%M:%S', time.localtime(now))}  {text}", flush=True)

    def tick(self, now: float) -> None:
        """At time ``now``: a line for the phase in progress when it has been quiet for ``quiet`` seconds."""
        with self._lock:
            text, said, began = self._last
            if text and now - said >= self.quiet:
                self._print(f"still going, {now - began:.0f} s since: {text}", now)
                self._last = (text, now, began)

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            self.tick(time.time())

    def start(self) -> PhaseLines:
        """Say a phase again after ``quiet`` seconds without a line, until `close`."""
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="pacs-rl phase lines", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


class RichProgressCallback(TrainerCallback):
    """A one-line progress bar: step, reward, accuracy, seconds per step and ETA; without a terminal (a log
    file), one plain line per logged step instead of the bar (through ``lines`` when given, a `PhaseLines`). The
    reward-hacking monitor's notes (pacs_rl.training.monitor.form_warnings) are printed above it."""

    def __init__(self, description: str = "training", enabled: bool = True, lines: PhaseLines | None = None):
        self.description = description
        self.enabled = enabled  # False (--no-progress): a plain line per step, as in a log file
        self.lines = lines
        self.progress = None
        self.task = None
        self.fields = {"reward": float("nan"), "accuracy": float("nan")}
        self.start = None
        self.announced: set[str] = set()  # forms of paid answers the monitor has announced

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return control

        self.progress = progress_bar(
            "reward {task.fields[reward]:.3f}  acc {task.fields[accuracy]:.3f}", enabled=self.enabled
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
            line = (
                f"step {state.global_step}/{state.max_steps} done  reward {self.fields['reward']:.3f}  "
                f"acc {self.fields['accuracy']:.3f}  {per_step:.1f} s/step  ETA {eta / 60:.1f} min"
            )
            if self.lines is not None:
                self.lines(line)
            else:
                self.progress.console.print(line)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        return control


# ------------------------------------------------------------------------------------------------ log filters
class _DropMessages(logging.Filter):
    """Drop records whose message starts with one of ``prefixes``."""

    def __init__(self, *prefixes: str):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefixes)


class _TiedMissingKeys(logging.Filter):
    """Drop the missing-keys warning when every missing key is a tied weight of the model."""

    def __init__(self, tied: set[str]):
        super().__init__()
        self.tied = tied

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(_MISSING):
            return True
        try:
            keys = set(ast.literal_eval(message[len(_MISSING) :].strip().rstrip(".")))
        except (ValueError, SyntaxError):
            return True
        return not (keys and keys <= self.tied)


def quiet_libraries() -> None:
    """Switch off transformers' progress bars and its checkpoint-ordering note (for a command's run)."""
    hf_logging.disable_progress_bar()
    logger = logging.getLogger("transformers.trainer_utils")
    if not any(isinstance(f, _DropMessages) for f in logger.filters):
        logger.addFilter(_DropMessages("mtime may not be reliable"))
    # TRL's generation reads transformers' deprecated `is_gradient_checkpointing`; nothing a user can change
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated")


def tied_weight_names(model) -> set[str]:
    """The parameter names of ``model`` that are tied to another (not saved in a checkpoint); empty when its
    config does not tie them."""
    config = getattr(model, "config", None)
    if not getattr(config, "tie_word_embeddings", False):
        return set()
    tied = getattr(model, "all_tied_weights_keys", None) or getattr(model, "_tied_weights_keys", None) or {}
    return set(tied)


def expect_tied_missing_keys(model) -> None:
    """From now on, a resume that finds only ``model``'s tied weights missing from a checkpoint says nothing."""
    logger = logging.getLogger("transformers.trainer")
    for f in [f for f in logger.filters if isinstance(f, _TiedMissingKeys)]:
        logger.removeFilter(f)
    tied = tied_weight_names(model)
    if tied:
        logger.addFilter(_TiedMissingKeys(tied))


# -------------------------------------------------------------------------------------------- training curves
# (metric keys, panel title): one line per key. The implicit critic is shown by its within-group AUC; its accuracy and
# Brier score at threshold ½ are not, since with π_ref = the rollout policy ψ is 0 on a rollout's first update,
# where both sit at chance by construction.
CURVES = [
    (("reward",), "rollout reward (mean)"),
    (("accuracy",), "mini-batch accuracy"),
    (("groups/mixed_frac",), "groups with mixed outcomes"),
    (("entropy",), "entropy / token"),
    (("completions/mean_length",), "completion length"),
    (("grad_norm",), "gradient norm"),
    (("pacs/critic_auc",), "critic AUC of ψ within mixed groups"),
    (
        tuple(f"{METRIC_PREFIX}{f}" for f in PAID_FORMS if f not in TRUSTED_FORMS),
        "paid answers neither boxed nor in prose (share, by form)",
    ),
    (("loss",), "loss"),
]


def plot_curves(metrics_path: str | Path, png_path: str | Path, title: str = "") -> Path | None:
    """Plot the main training curves of a metrics.jsonl into a PNG; None when there is nothing to plot."""
    import matplotlib  # only when plotting: selecting the Agg backend is a process-wide side effect

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_jsonl(metrics_path)
    curves = [
        (keys, label) for keys, label in CURVES if any(r.get(k) is not None for r in rows for k in keys)
    ]
    if not curves:
        return None
    cols = 3
    nrows = (len(curves) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 2.8 * nrows), squeeze=False)
    for ax, (keys, label) in zip(axes.flat, curves, strict=False):
        for key in keys:
            pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None and "step" in r]
            if len(keys) > 1 and not any(p[1] for p in pts):
                continue  # a form never paid: no line
            name = key.removeprefix(METRIC_PREFIX) if len(keys) > 1 else None
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", linewidth=1, label=name)
        if len(keys) > 1:
            ax.set_ylim(-0.02, 1.02)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
            else:
                ax.text(0.5, 0.5, "every paid answer plain", ha="center", va="center", fontsize=8,
                        transform=ax.transAxes)  # fmt: skip
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("optimizer step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(curves) :]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    png_path = Path(png_path)
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path
