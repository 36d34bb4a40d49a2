"""`pacs-rl train`: merge the settings layers, check them, call `pacs_rl.training.run.run_training`, print the
summary.

With no arguments it runs the CPU default (`RunSettings()` and `CPU_DEFAULTS` in training/settings.py, mirrored
by configs/cpu_default.yaml); on a machine with CUDA, on CUDA (pacs_rl.training.device). Settings are one flat
namespace: every trainer config field plus the run keys. Later layers win: CPU defaults < the device choice <
--config FILE.yaml < the options below (--model, --dataset, ...) < --set (and any setting written as an option,
TRL's way: --learning_rate 1e-5).

Everything that can be checked without torch and TRL is checked first (training/settings.py: names, types,
paths, the model name, the data, installed packages), so that a mistake is answered in about a second; the
training library is imported only then.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import typer

from pacs_rl.command import data_option, end_dry_run, fail, note, show_library_notes
from pacs_rl.models import ModelError
from pacs_rl.settings import SettingsError
from pacs_rl.training import settings as schema
from pacs_rl.training.monitor import summary_line

_DEFAULTS = schema.default_settings()


def summary_lines(result) -> list[str]:
    """The lines printed at the end of a run (a `pacs_rl.training.run.TrainResult`)."""
    lines = []
    if "after" in result.heldout:
        b, a = result.heldout["before"], result.heldout["after"]
        lines.append(
            f"held-out accuracy ({a['n']} problems, {result.eval_description}): "
            f"before {b['accuracy']:.1%} -> after {a['accuracy']:.1%}"
        )
    forms = summary_line(result.answer_forms) if result.answer_forms else None
    if forms:
        lines.append(forms)
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
    """pacs_rl.training.run (torch, TRL), imported once the settings have passed their checks."""
    from pacs_rl.training import run

    return run


# Config fields the command sets itself: naming them in --config or --set would be overwritten without a word.
COMMAND_FIELDS = {
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


def user_settings(
    config: str | None, options: dict[str, Any], sets: list[str], notes: list[str] | None = None
) -> dict[str, Any]:
    """What the user gave above the CPU default (--config < options < --set), keys under their current names
    (``notes`` gets a line per older spelling). ``output_dir`` is among them when given."""
    layers = [
        schema.load_settings_file(config, notes) if config else {},
        schema.parse_assignments(sets, notes=notes),
    ]
    for layer, where in zip(layers, (config, "--set"), strict=True):
        taken = sorted(set(layer) & set(COMMAND_FIELDS))
        if taken:
            raise SettingsError("; ".join(f"{k} in {where}: {COMMAND_FIELDS[k]}" for k in taken))
    return {**layers[0], **{k: v for k, v in options.items() if v is not None}, **layers[1]}


def merge_settings(
    config: str | None, options: dict[str, Any], sets: list[str], notes: list[str] | None = None
) -> dict[str, Any]:
    """The layers (CPU defaults < --config < options < --set) merged into one flat mapping, without the device
    choice (no torch: what the cheap checks read)."""
    return {**schema.default_settings(), **user_settings(config, options, sets, notes)}


def with_device(user: dict[str, Any]):
    """(the settings with the device layer, the device choice): CPU defaults < the device choice < ``user``. The
    hardware picks CUDA and its precision over the CPU default unless ``user`` sets use_cpu / bf16
    (pacs_rl.training.device); this imports torch to ask it."""
    from pacs_rl.training.device import choose_device, cuda_info

    choice = choose_device(user, cuda_info())
    return {**schema.default_settings(), **choice.settings, **user}, choice


def merge_with_device(config: str | None, options: dict[str, Any], sets: list[str]):
    """(the merged settings with the device layer, the device choice)."""
    return with_device(user_settings(config, options, sets))


def resolve_settings(config: str | None, options: dict[str, Any], sets: list[str]):
    """Merge the layers (CPU defaults < --config < options < --set) into (RunSettings, config kwargs)."""
    values = merge_settings(config, options, sets)
    values.pop("output_dir", None)
    return schema.split_settings(values)


def _is_main_process() -> bool:
    """Rank 0 of a launched run (RANK from torchrun / accelerate launch), or a single process."""
    return int(os.environ.get("RANK", "0")) == 0


def _with_default(text: str, key: str) -> str:
    """An option's help with the CPU default of its setting (the option itself defaults to the layer below)."""
    return f"{text}  [default: {_DEFAULTS[key]}]"


def _setting_option(key: str, text: str, *flags: str, metavar: str) -> Any:
    """The option of run setting ``key``: default None (the layer below decides), its help with the CPU default."""
    return typer.Option(None, *flags, help=_with_default(text, key), metavar=metavar, show_default=False)


def train_command(
    config: str = typer.Option(
        None,
        "--config",
        "-c",
        help="YAML file of settings (trainer config fields + run keys).",
        metavar="FILE",
    ),
    set_: list[str] = typer.Option(
        [],
        "--set",
        "-s",
        help="Override any setting: --set learning_rate=1e-5 (repeatable). Any setting is also an option: "
        "--learning_rate 1e-5, --use_vllm (TRL's spelling).",
        metavar="KEY=VALUE",
        show_default=False,
    ),
    output_dir: str = typer.Option(
        None,
        "--output-dir",
        "-o",
        help="Run folder.  [default: runs/<loss>-<time>]",
        metavar="DIR",
        show_default=False,
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in --output-dir from its last checkpoint."
    ),
    model: str = _setting_option(
        "model",
        "Bundled alias (smollm2-135m), tiny (a tiny random model: a smoke run), Hub id or local folder.",
        "--model",
        "-m",
        metavar="NAME",
    ),
    dataset: str = _setting_option(
        "dataset",
        "Training problems: arithmetic | reasoning_gym:<task> | file.jsonl | Hub id | benchmark name.",
        "--dataset",
        "-d",
        metavar="SOURCE",
    ),
    loss_type: str = _setting_option(
        "loss_type", "Policy loss: {losses}.", "--loss-type", "-l", metavar="NAME"
    ),
    max_steps: str = _setting_option("max_steps", "Optimizer steps.", "--max-steps", metavar="N"),
    learning_rate: str = _setting_option(
        "learning_rate", "Peak learning rate.", "--learning-rate", "--lr", metavar="LR"
    ),
    seed: str = _setting_option("seed", "Random seed (data order, sampling, init).", "--seed", metavar="N"),
    split: str = data_option("split"),
    problem_field: str = data_option("problem_field"),
    answer_field: str = data_option("answer_field"),
    prompt_field: str = data_option("prompt_field"),
    instruction: str = data_option("instruction"),
    system_prompt: str = data_option("system_prompt"),
    skip_bad_rows: bool = data_option("skip_bad_rows"),
    eval_size: str = _setting_option(
        "eval_size", "Held-out problems for before/after accuracy (0 = off).", "--eval-size", metavar="N"
    ),
    threads: str = typer.Option(
        None,
        "--threads",
        help="torch CPU threads (num_threads); 1 makes a run repeat itself bit for bit.  [default: torch's, one "
        "per core]",
        metavar="N",
        show_default=False,
    ),
    list_keys: bool = typer.Option(False, "--list-keys", help="List every setting name and exit."),
    dry_run: bool = typer.Option(False, "--dry-run", help=DRY_RUN_HELP),
    num_processes: int = typer.Option(None, "--num-processes", help=NUM_PROCESSES_HELP, metavar="N"),
    gpu_memory_gib: float = typer.Option(None, "--gpu-memory-gib", help=GPU_MEMORY_HELP, metavar="GIB"),
) -> None:
    """Train with PACS (default) or a baseline on TRL. No arguments: the CPU default on arithmetic.
    --model tiny trains a tiny random model (a smoke run, or a check of a launch setup). TRL's names work too:
    --model_name_or_path, --dataset_name, --output_dir, --use_peft, --report_to, --use_vllm."""
    if list_keys:
        for key in schema.known_keys():
            typer.echo(key)
        raise typer.Exit()
    options = {
        "output_dir": output_dir,
        "model": model,
        "dataset": dataset,
        "loss_type": loss_type,
        "max_steps": max_steps,
        "learning_rate": learning_rate,
        "seed": seed,
        "split": split,
        "problem_field": problem_field,
        "answer_field": answer_field,
        "prompt_field": prompt_field,
        "instruction": instruction,
        "system_prompt": system_prompt,
        "skip_bad_rows": skip_bad_rows,
        "eval_size": eval_size,
        "num_threads": threads,
    }
    if num_processes is not None and not dry_run:
        fail("--num-processes plans a --dry-run; a run has the processes it was launched with")
    if gpu_memory_gib is not None and (not dry_run or gpu_memory_gib <= 0):
        fail("--gpu-memory-gib plans a --dry-run: give the GiB of each GPU (> 0)")
    notes: list[str] = []
    try:
        user = user_settings(config, options, set_, notes)
        values = {**schema.default_settings(), **user}
        output_dir = values.pop("output_dir", None)
        user.pop("output_dir", None)
        if resume and not output_dir:
            fail("--resume needs --output-dir: the folder of the run to continue")
        output_dir = output_dir or os.path.join(
            "runs", f"{values.get('loss_type', 'pacs')}-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        for message in notes:
            note(message)
        if dry_run:
            values, device = with_device(user)  # the plan names the device; it may import torch
            _dry_run(values, output_dir, num_processes, resume, device, gpu_memory_gib)
            return
        settings, cfg = schema.split_settings(values)
        if _is_main_process():
            show_library_notes()
        world = int(os.environ.get("WORLD_SIZE", "1"))
        problems, data = schema.preflight(settings, cfg, output_dir, resume, world)
        if problems:
            fail("; ".join(problems))
        os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
        values, device = with_device(user)  # torch: only now, once the cheap checks passed
        if _is_main_process():
            typer.echo(f"device: {device.line()}")
        settings, cfg = schema.split_settings(values)
        run = _library()  # torch, TRL
        from pacs_rl.training.quiet import quiet_libraries

        quiet_libraries()
        result = run.run_training(settings, run.build_config(cfg, output_dir), resume=resume, data=data)
    except (SettingsError, ModelError) as e:  # a setting, a data row, a config check, a model name
        fail(e)
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
    end_dry_run(refusals)
