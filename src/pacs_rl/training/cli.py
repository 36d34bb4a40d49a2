"""`pacs-rl train`: merge the settings layers, call `pacs_rl.training.run.run_training`, print the summary.

With no arguments it runs the CPU default (`RunSettings()` and `CPU_DEFAULTS` in training/run.py, mirrored by
configs/cpu_default.yaml); on a machine with CUDA, on CUDA (pacs_rl.training.device). Settings are one flat
namespace: every trainer config field plus the run keys. Later layers win: CPU defaults < the device choice <
--config FILE.yaml < the options below (--model, --dataset, ...) < --set.

The training library (torch, TRL) is imported when the command runs, so `pacs-rl --help` stays fast.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import warnings
from typing import Any

import typer

from pacs_rl.models import ModelError


def summary_lines(result) -> list[str]:
    """The lines printed at the end of a run (a `pacs_rl.training.run.TrainResult`)."""
    lines = []
    if "after" in result.heldout:
        b, a = result.heldout["before"], result.heldout["after"]
        lines.append(
            f"held-out accuracy ({a['n']} problems, {result.eval_description}): "
            f"before {b['accuracy']:.1%} -> after {a['accuracy']:.1%}"
        )
    where = f" on {result.device}" if result.device else ""
    lines.append(
        f"training: {result.global_step} steps{where}, {result.train_seconds / 60:.1f} min this session"
    )
    lines.append(f"output folder: {result.output_dir}")
    lines.append(f"metrics: {result.metrics_file}")
    if result.curves_png:
        lines.append(f"curves: {result.curves_png}")
    lines.append(f"final weights: {result.final_dir}")
    return lines


@functools.cache
def _library():
    """pacs_rl.training.run (torch, TRL), imported when the command runs so that `pacs-rl --help` stays fast."""
    from pacs_rl.training import run

    return run


# Config fields the command sets itself: naming them in --config or --set would be overwritten without a word.
COMMAND_FIELDS = {
    "output_dir": "use --output-dir",
    "disable_tqdm": "the command shows its own progress bar",
    "resume_from_checkpoint": "use --resume (with --output-dir: the run's newest complete checkpoint)",
}


DRY_RUN_HELP = (
    "Resolve and check every setting, print the plan (batch sizes, engine, memory, checkpoints) and exit, "
    "without loading weights or using the network."
)
NUM_PROCESSES_HELP = "With --dry-run: plan for this many training processes (default: $WORLD_SIZE, else 1)."
GPU_MEMORY_HELP = (
    "With --dry-run: the memory of each GPU the plan must fit, GiB (default: this machine's GPU, else 79, what an "
    "80 GB A100/H100 reports)."
)


def merge_settings(config: str | None, options: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """The layers (CPU defaults < the device choice < --config < options < --set) merged into one flat mapping."""
    return merge_with_device(config, options, sets)[0]


def merge_with_device(config: str | None, options: dict[str, Any], sets: list[str]):
    """(the merged settings, the device choice): the hardware picks CUDA and its precision over the CPU default
    unless the layers above set use_cpu / bf16 (pacs_rl.training.device)."""
    from pacs_rl.training.device import choose_device, cuda_info

    run = _library()
    layers = [run.load_settings_file(config) if config else {}, run.parse_assignments(sets)]
    for layer, where in zip(layers, (config, "--set"), strict=True):
        taken = sorted(set(layer) & set(COMMAND_FIELDS))
        if taken:
            raise run.SettingsError("; ".join(f"{k} in {where}: {COMMAND_FIELDS[k]}" for k in taken))
    user = {**layers[0], **{k: v for k, v in options.items() if v is not None}, **layers[1]}
    choice = choose_device(user, cuda_info())
    return {**run.default_settings(), **choice.settings, **user}, choice


def resolve_settings(config: str | None, options: dict[str, Any], sets: list[str]):
    """Merge the layers (CPU defaults < --config < options < --set) into (RunSettings, config kwargs)."""
    return _library().split_settings(merge_settings(config, options, sets))


def _is_main_process() -> bool:
    """Rank 0 of a launched run (RANK from torchrun / accelerate launch), or a single process."""
    return int(os.environ.get("RANK", "0")) == 0


def _echo_notes() -> None:
    """Show the library's notes (a capped training set, skipped rows) as plain lines."""
    logger = logging.getLogger("pacs_rl")
    if not any(getattr(h, "_pacs_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler._pacs_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def train_command(
    config: str = typer.Option(
        None, "--config", "-c", help="YAML file of settings (trainer config fields + run keys)."
    ),
    set_: list[str] = typer.Option(
        [], "--set", "-s", help="Override any setting: --set learning_rate=1e-5 (repeatable)."
    ),
    output_dir: str = typer.Option(
        None, "--output-dir", "-o", help="Run folder (default runs/<loss>-<time>)."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in --output-dir from its last checkpoint."
    ),
    model: str = typer.Option(None, "--model", "-m", help="Bundled alias, Hub id or local folder."),
    dataset: str = typer.Option(
        None,
        "--dataset",
        "-d",
        help="arithmetic | reasoning_gym:<task> | file.jsonl | Hub id | benchmark name.",
    ),
    loss_type: str = typer.Option(None, "--loss-type", "-l", help="Policy loss: {losses} (default pacs)."),
    max_steps: int = typer.Option(None, "--max-steps", help="Optimizer steps."),
    learning_rate: float = typer.Option(None, "--learning-rate", "--lr", help="Peak learning rate."),
    seed: int = typer.Option(None, "--seed", help="Random seed (data order, sampling, init)."),
    problem_field: str = typer.Option(None, "--problem-field", help="Column holding the problem text."),
    answer_field: str = typer.Option(None, "--answer-field", help="Column holding the reference answer."),
    skip_bad_rows: bool = typer.Option(
        None,
        "--skip-bad-rows/--no-skip-bad-rows",
        help="Skip bad data rows, counted and reported (the default, as in pacs-rl eval); --no-skip-bad-rows stops at the first.",
    ),
    eval_size: int = typer.Option(
        None, "--eval-size", help="Held-out problems for before/after accuracy (0 = off)."
    ),
    list_keys: bool = typer.Option(False, "--list-keys", help="List every setting name and exit."),
    dry_run: bool = typer.Option(False, "--dry-run", help=DRY_RUN_HELP),
    num_processes: int = typer.Option(None, "--num-processes", help=NUM_PROCESSES_HELP),
    gpu_memory_gib: float = typer.Option(None, "--gpu-memory-gib", help=GPU_MEMORY_HELP),
) -> None:
    """Train with PACS (default) or a baseline on TRL. No arguments: the CPU default on arithmetic.
    --model tiny trains a tiny random model (a smoke run, or a check of a launch setup)."""
    run = _library()
    if list_keys:
        for key in run.known_keys():
            typer.echo(key)
        raise typer.Exit()
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    # TRL's generation reads transformers' deprecated `is_gradient_checkpointing`; nothing a user can change
    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated")
    if _is_main_process():
        _echo_notes()
    options = {
        "model": model,
        "dataset": dataset,
        "loss_type": loss_type,
        "max_steps": max_steps,
        "learning_rate": learning_rate,
        "seed": seed,
        "problem_field": problem_field,
        "answer_field": answer_field,
        "skip_bad_rows": skip_bad_rows,
        "eval_size": eval_size,
    }
    if resume and not output_dir:
        raise typer.BadParameter("--resume needs --output-dir: the folder of the run to continue")
    if num_processes is not None and not dry_run:
        raise typer.BadParameter(
            "--num-processes plans a --dry-run; a run has the processes it was launched with"
        )
    if gpu_memory_gib is not None and (not dry_run or gpu_memory_gib <= 0):
        raise typer.BadParameter("--gpu-memory-gib plans a --dry-run: give the GiB of each GPU (> 0)")
    try:
        values, device = merge_with_device(config, options, set_)
        output_dir = output_dir or os.path.join(
            "runs", f"{values.get('loss_type', 'pacs')}-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        if dry_run:
            _dry_run(values, output_dir, num_processes, resume, device, gpu_memory_gib)
            return
        if _is_main_process():
            typer.echo(f"device: {device.line()}")
        settings, cfg = run.split_settings(values)
        result = run.run_training(settings, run.build_config(cfg, output_dir), resume=resume)
    except (run.SettingsError, ModelError) as e:  # a setting, a data row, a config check, a model name
        raise typer.BadParameter(str(e)) from None
    if not _is_main_process():
        return
    typer.echo("")
    if result.already_complete:
        typer.echo(f"{result.output_dir} is complete (step {result.global_step}): nothing to train.")
    for line in summary_lines(result):
        typer.echo(line)


def _dry_run(
    values: dict[str, Any], output_dir: str, num_processes: int | None, resume: bool, device, gpu_memory_gib
) -> None:
    """Print the plan and every refusal; exit 1 when anything is refused."""
    from pacs_rl.training.plan import dry_run

    n = num_processes or int(os.environ.get("WORLD_SIZE", "1"))
    lines, refusals = dry_run(values, output_dir, n, resume, device, gpu_memory_gib)
    typer.echo(f"dry run: nothing is loaded or written; plan for {n} process{'es' if n > 1 else ''}")
    for line in lines:
        typer.echo(f"  {line}")
    if refusals:
        typer.echo(f"refused ({len(refusals)}):")
        for message in refusals:
            typer.echo(f"  - {message}")
        raise typer.Exit(1)
    typer.echo("every check passed")
