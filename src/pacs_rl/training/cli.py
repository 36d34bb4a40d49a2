"""`pacs-rl train`: merge the settings layers, check them, call `pacs_rl.training.run.run_training`, print the
summary.

With no arguments it runs the CPU default (`RunSettings()` and `CPU_DEFAULTS` in training/schema.py, mirrored
by configs/cpu_default.yaml); on a machine with CUDA, on CUDA (pacs_rl.device). Settings are one flat
namespace: every trainer config field plus the run keys. Later layers win: CPU defaults < the device choice <
--config FILE.yaml < the options below (--model, --dataset, ...) < --set (and any setting written as an option,
TRL's way: --learning_rate 1e-5).

Everything that can be checked without torch and TRL is checked first (training/checks.py: names, types,
paths, the model name, the data, installed packages), so that a mistake is answered in about a second; the
training library is imported only then.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import typer

from pacs_rl import device as devices
from pacs_rl.command import data_option, end_dry_run, fail, note, show_library_notes, typed_command
from pacs_rl.models import ModelError
from pacs_rl.run_folder import CARD_FILE, folder_state, last_complete_checkpoint
from pacs_rl.settings.errors import SettingsError
from pacs_rl.training import checks
from pacs_rl.training.card import NO_STEP, took_no_step, write_model_card
from pacs_rl.training.monitor import cut_off_line, summary_line
from pacs_rl.training.schema import CONFIG_FIELDS, RUN_FIELDS, default_settings, known_keys

_DEFAULTS = default_settings()
DECLARED = {**RUN_FIELDS, **CONFIG_FIELDS}


CUT_OFF_WARN = 0.5  # a run warns when more than this share of its answers hit the token limit


def _heldout_lines(result) -> list[str]:
    """The summary's held-out lines: accuracy before and after, a warning when most answers hit the token limit,
    and the paid ones that were cut off (a grader that pays them, the paper's: counted beside its verdicts)."""
    if "after" not in result.heldout:
        return []
    tokens = (getattr(result, "heldout_protocol", None) or {}).get("max_new_tokens", "the")
    b, a = result.heldout["before"], result.heldout["after"]
    lines = [
        f"held-out accuracy ({a['n']} problems, {result.eval_description}): "
        f"before {b['accuracy']:.1%} -> after {a['accuracy']:.1%}"
    ]
    cut = {w: r.get("truncated_frac") or 0 for w, r in (("before", b), ("after", a))}
    worst = max(cut, key=cut.get)
    if cut[worst] > CUT_OFF_WARN:
        lines.append(
            f"warning: {cut[worst]:.0%} of the held-out answers {worst} training were cut off at the {tokens}-token "
            "limit, so the accuracy measures the limit as much as the model: raise eval_max_new_tokens (and "
            "max_completion_length for training), or hold out problems this model answers in fewer tokens"
        )
    paid_cut = {w: r.get("paid_cut_off") or 0 for w, r in (("before", b), ("after", a))}
    if any(paid_cut.values()):
        lines.append(
            f"held-out answers paid though cut off at the {tokens}-token limit: before {paid_cut['before']}, "
            f"after {paid_cut['after']} (the {(result.answer_forms or {}).get('grader') or 'run'} grader pays "
            "them; the training grader, sound, refuses them)"
        )
    return lines


def summary_lines(result) -> list[str]:
    """The lines printed at the end of a run (a `pacs_rl.training.run.TrainResult`)."""
    lines = _heldout_lines(result)
    protocol = getattr(result, "heldout_protocol", None) or {}
    for line in (summary_line, cut_off_line):
        text = line(result.answer_forms) if result.answer_forms else None
        if text:
            lines.append(text)
    clipped = getattr(result, "rollout_truncated_frac", None)
    if clipped is not None and clipped > CUT_OFF_WARN:
        lines.append(
            f"warning: {clipped:.0%} of the rollouts' completions were cut off at max_completion_length "
            "(completions/clipped_ratio in metrics.jsonl): a cut-off answer is never paid by the training grader "
            "(and seldom by another), so little is learnt; raise max_completion_length, or train on shorter problems"
        )
    lines += dynamic_sampling_lines(getattr(result, "dynamic_sampling", None))
    where = f" on {result.device}" if result.device else ""
    first = getattr(result, "first_step", 0)
    total = getattr(result, "max_steps", 0) or result.global_step
    if result.already_complete or first >= result.global_step:
        lines.append(f"training: {result.global_step} of {total} steps, none this session")
    elif first:
        lines.append(
            f"training: steps {first + 1}-{result.global_step} of {total}{where} this session "
            f"({result.global_step - first} steps, {result.train_seconds / 60:.1f} min; the first {first} in earlier runs)"
        )
    else:
        lines.append(
            f"training: {result.global_step} steps{where}, {result.train_seconds / 60:.1f} min this session"
        )
    skipped = getattr(result, "skipped_steps", None) or {}
    lines += [line for line in [skipped_steps_line(skipped)] if line]
    if took_no_step(result.global_step, skipped):
        lines.append(NO_STEP.format(steps=result.global_step).replace("`", ""))
    lines.append(f"output folder: {result.output_dir}")
    lines.append(f"metrics: {result.metrics_file}")
    if result.curves_png:
        lines.append(f"curves: {result.curves_png}")
    lines.append(f"final weights: {result.final_dir}")
    card = result.output_dir / CARD_FILE
    if card.is_file():
        lines.append(f"model card: {card}")
    if protocol:
        lines.append(
            f"evaluate it on its held-out task: pacs-rl eval --model {result.final_dir}  "
            f"({protocol.get('n')} problems, {result.eval_description}, as above; --n 8 --temperature 0.6 for pass@k)"
        )
    else:
        lines.append(f"evaluate it: pacs-rl eval --model {result.final_dir} --benchmarks SOURCE")
    return lines


def skipped_steps_line(skipped: dict[str, int]) -> str | None:
    """The summary's line on the optimizer steps that left the weights as they were (None when none did)."""
    parts = []
    if skipped.get("no_signal"):
        parts.append(
            f"{skipped['no_signal']} without a signal (no group held two different rewards; skip_no_signal_steps)"
        )
    if skipped.get("nonfinite"):
        parts.append(f"{skipped['nonfinite']} with a non-finite gradient norm")
    if not parts:
        return None
    return f"skipped optimizer steps (weights left as they were): {'; '.join(parts)}"


def dynamic_sampling_lines(totals: dict[str, float] | None) -> list[str]:
    """What dynamic sampling did over a run (PACSTrainer.dynamic_sampling_totals), one line; none when it was off."""
    if not totals:
        return []
    rollouts, kept, padded = (int(totals.get(k, 0)) for k in ("rollouts", "groups_kept", "groups_padded"))
    short = f", {padded} places filled with single-label groups (the cap reached)" if padded else ""
    sampled, rounds = int(totals.get("groups_sampled", 0)), int(totals.get("rounds", 0))
    return [
        f"dynamic sampling: {sampled} groups sampled in {rounds} rounds for {rollouts} rollout batches; {kept} of "
        f"the {kept + padded} groups trained on hold both labels (unequal rewards){short}; the further rounds "
        f"took {totals.get('seconds', 0.0):.0f} s"
    ]


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
        checks.load_settings_file(config, notes) if config else {},
        checks.parse_assignments(sets, notes=notes),
    ]
    for layer, where in zip(layers, (config, "--set"), strict=True):
        taken = sorted(set(layer) & set(COMMAND_FIELDS))
        if taken:
            raise SettingsError("; ".join(f"{k} in {where}: {COMMAND_FIELDS[k]}" for k in taken))
    # an option's text ("4") typed here, as the file's and --set's values are where they are read
    given = {k: checks.coerce_setting(k, v) for k, v in options.items() if v is not None}
    return {**layers[0], **given, **layers[1]}


def merge_settings(user: dict[str, Any]) -> dict[str, Any]:
    """The CPU default with the user's layers (`user_settings`) over it, without the device choice (no torch:
    what the cheap checks read)."""
    return {**default_settings(), **user}


def _is_main_process() -> bool:
    """Rank 0 of a launched run (RANK from torchrun / accelerate launch), or a single process."""
    return int(os.environ.get("RANK", "0")) == 0


def _with_default(text: str, key: str) -> str:
    """An option's help with the CPU default of its setting (the option itself defaults to the layer below)."""
    return f"{text}  [default: {_DEFAULTS[key]}]"


def _setting_option(key: str, *flags: str, metavar: str, text: str | None = None) -> Any:
    """The option of setting ``key``: default None (the layer below decides); its help is the declaration's
    (training/schema.py; ``text`` for one of TRL's fields, or a shorter line), with the CPU default."""
    text = text or DECLARED[key].metadata["help"]
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
        False,
        "--resume",
        help="Continue the run in --output-dir from its last checkpoint, with the settings of this command. "
        "Without it, rerunning the command that made a run into its folder continues it (a finished run says so) "
        "and other settings are refused.",
    ),
    model: str = _setting_option("model", "--model", "-m", metavar="NAME"),
    dataset: str = _setting_option("dataset", "--dataset", "-d", metavar="SOURCE"),
    loss_type: str = _setting_option(
        "loss_type", "--loss-type", "-l", metavar="NAME", text="Policy loss: {losses}."
    ),
    max_steps: str = _setting_option("max_steps", "--max-steps", metavar="N", text="Optimizer steps."),
    learning_rate: str = _setting_option(
        "learning_rate", "--learning-rate", "--lr", metavar="LR", text="Peak learning rate."
    ),
    seed: str = _setting_option(
        "seed", "--seed", metavar="N", text="Random seed (data order, sampling, init)."
    ),
    split: str = data_option("split"),
    problem_field: str = data_option("problem_field"),
    answer_field: str = data_option("answer_field"),
    prompt_field: str = data_option("prompt_field"),
    instruction: str = data_option("instruction"),
    system_prompt: str = data_option("system_prompt"),
    skip_bad_rows: bool = data_option("skip_bad_rows"),
    eval_size: str = _setting_option("eval_size", "--eval-size", metavar="N"),
    threads: str = typer.Option(
        None,
        "--threads",
        help="torch CPU threads (num_threads); 1 makes a run repeat itself bit for bit.  [default: torch's, one "
        "per core]",
        metavar="N",
        show_default=False,
    ),
    no_progress: bool = typer.Option(
        False, "--no-progress", help="No progress bars: one line per logged step instead."
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
        for key in known_keys():
            typer.echo(key)
        raise typer.Exit()
    if num_processes is not None and not dry_run:
        fail("--num-processes plans a --dry-run; a run has the processes it was launched with")
    if gpu_memory_gib is not None and (not dry_run or gpu_memory_gib <= 0):
        fail("--gpu-memory-gib plans a --dry-run: give the GiB of each GPU (> 0)")
    options = {
        "output_dir": output_dir, "model": model, "dataset": dataset, "loss_type": loss_type,
        "max_steps": max_steps, "learning_rate": learning_rate, "seed": seed, "split": split,
        "problem_field": problem_field, "answer_field": answer_field, "prompt_field": prompt_field,
        "instruction": instruction, "system_prompt": system_prompt, "skip_bad_rows": skip_bad_rows,
        "eval_size": eval_size, "num_threads": threads,
    }  # fmt: skip
    launch = None
    try:
        launch = resolve_launch(config, options, set_, resume)
        if dry_run:
            _dry_run(launch, num_processes, gpu_memory_gib)
            return
        result = _train(launch, progress=not no_progress)
    except (SettingsError, ModelError) as e:  # a setting, a data row, a config check, a model name
        fail(e)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: what was kept and how to go on
        _interrupted(e, launch.output_dir if launch else output_dir)
    finally:
        if "torch.distributed" in sys.modules:  # a launch's process group, left before the interpreter ends
            _library().end_processes()
    if _is_main_process():
        _print_result(result)


class Launch(NamedTuple):
    """What a `pacs-rl train` command line asks for, resolved before anything heavy loads."""

    user: dict[str, Any]  # the settings the user gave, above the CPU default (without output_dir)
    values: dict[str, Any]  # CPU default < user
    output_dir: str
    state: str  # the folder's state (run_folder.folder_state); 'new' with --resume
    resume: bool  # --resume as given
    checked_resume: bool  # whether the run continues from a checkpoint: --resume, or a rerun into its folder


def resolve_launch(config: str | None, options: dict[str, Any], sets: list[str], resume: bool) -> Launch:
    """The layers merged and the output folder chosen and read; the notes of older spellings printed."""
    notes: list[str] = []
    user = user_settings(config, options, sets, notes)
    values = merge_settings(user)
    output_dir = values.pop("output_dir", None)
    user.pop("output_dir", None)
    if resume and not output_dir:
        fail("--resume needs --output-dir: the folder of the run to continue")
    loss = values.get("loss_type", "pacs")
    output_dir = output_dir or os.path.join("runs", f"{loss}-{time.strftime('%Y%m%d-%H%M%S')}")
    for message in notes:
        note(message)
    # a rerun into a run's own folder continues it (decided in _train, once its settings can be compared)
    state = "new" if resume else folder_state(output_dir)
    checked = resume or (
        state in ("checkpointed", "finished") and last_complete_checkpoint(output_dir) is not None
    )
    return Launch(user, values, output_dir, state, resume, checked)


def _train(launch: Launch, progress: bool):
    """Check what needs no torch, then choose the device, load the library and train (or report a finished run):
    the run's `TrainResult`."""
    if _is_main_process():
        show_library_notes()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    checked = checks.preflight(launch.values, launch.output_dir, launch.checked_resume, world)
    if checked.refusals:
        fail("; ".join(checked.refusals))
    settings, cfg = checks.split_typed(launch.values)  # every layer was read (typed) once already
    data = checked.data  # the training and held-out problems, when read there
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    device = devices.choose_device(
        launch.user, devices.cuda_info()
    )  # torch: only now, after the cheap checks
    cfg |= devices.device_layer(device, launch.user)  # config fields only (tests/test_gpu_plan.py)
    resume, out, state = launch.resume, launch.output_dir, launch.state
    run = _library()  # torch, TRL
    from pacs_rl.training.output import quiet_libraries  # beside the library it quiets

    quiet_libraries()
    config = run.build_config(cfg, out)  # once: a rerun compares it with the folder's run, then trains it
    if state in ("checkpointed", "finished", "started"):
        resume = (
            _rerun(settings, config, out, state) if state != "started" else _restart(settings, config, out)
        )
    if _is_main_process():
        typer.echo(f"device: {device.line()}")
    if state == "finished" and last_complete_checkpoint(out) is None:
        return run._result(settings, config, Path(out), already_complete=True)
    return run.run_training(
        settings,
        config,
        resume=resume,
        data=data,
        command=typed_command(),
        progress=progress,
        stop_on_signal=True,
    )


def _print_result(result) -> None:
    """The summary of a run; a folder that was already finished gets its model card and says so."""
    typer.echo("")
    if result.already_complete:
        write_model_card(result.output_dir)  # a folder from before the run's own card gets it
        typer.echo(
            f"{result.output_dir} is finished (step {result.global_step} of {result.max_steps or result.global_step}): "
            "nothing to train; --resume with a larger --max-steps trains on"
        )
    for line in summary_lines(result):
        typer.echo(line)


def _rerun(settings, config, output_dir: str, state: str) -> bool:
    """A command rerun into the folder of a run with a checkpoint or finished: True (resume it) when it holds a run
    of the same settings and trainer ``config``, with a note; else SettingsError naming what differs."""
    diffs = _library().run_differences(output_dir, settings, config)
    if diffs:
        raise SettingsError(
            f"{output_dir} holds a run made with other settings ({'; '.join(diffs)}): rerun the command that made "
            f"it to continue it (settings.json in the folder), pass --resume to continue it with these settings, "
            "or give another --output-dir"
        )
    if state == "checkpointed" and _is_main_process():
        checkpoint = last_complete_checkpoint(output_dir)
        note(f"{output_dir} holds this run, stopped: continuing it from {checkpoint}")
    return True


def _restart(settings, config, output_dir: str) -> bool:
    """A command rerun into the folder of a run that stopped before its first checkpoint: start it again (same
    settings and trainer ``config``, with a note) or SettingsError naming what differs. Returns False (no resume)."""
    diffs = _library().run_differences(output_dir, settings, config)
    if diffs:
        raise SettingsError(
            f"{output_dir} holds the start of a run made with other settings ({'; '.join(diffs)}) and no checkpoint: "
            "give another --output-dir, or delete that folder"
        )
    if _is_main_process():
        note(
            f"{output_dir} holds this run, stopped before its first checkpoint: starting it again from step 0"
        )
    return False


def _interrupted(e: KeyboardInterrupt, output_dir: str) -> None:
    """One line on stderr (what was kept, the command that goes on), then exit 130 (Ctrl-C) or 143 (SIGTERM)."""
    describe = getattr(e, "describe", None)
    what = describe() if describe else "interrupted"
    command = typed_command(output_dir)
    name = getattr(e, "signal_name", "Ctrl-C")
    if _is_main_process():
        typer.echo(f"{what}; go on with: {command}", err=True)
    # nothing is left to free: the interpreter's last garbage collection over the run's objects took 13 s of a
    # stop on a loaded CPU; frozen, they are left to the process's end
    gc.freeze()
    raise typer.Exit(143 if name == "SIGTERM" else 130)


def _dry_run(launch: Launch, num_processes: int | None, gpu_memory_gib: float | None) -> None:
    """Print the plan and every refusal; exit 1 when anything is refused. The run's checks before torch come
    first (checks.preflight, as `_train` makes them, without the network): a refusal there is answered before
    torch loads. Then the plan names the device (it imports torch); a rerun into a run's folder refuses other
    settings, else the plan shows the resume."""
    n = num_processes or int(os.environ.get("WORLD_SIZE", "1"))
    header = f"dry run: nothing is loaded or written; plan for {n} process{'es' if n > 1 else ''}"
    # a plan that asks for CUDA may be made for another machine: what that machine must hold (libraries, Hub
    # cache) is the plan's to check, once torch says whether this machine has CUDA
    cuda_asked = launch.user.get("use_cpu") is False
    checked = checks.preflight(launch.values, launch.output_dir, launch.checked_resume, n, network=False,
                               here=not cuda_asked)  # fmt: skip
    if checked.refusals:
        typer.echo(header)
        typer.echo(
            "  the plan follows once the input passes the checks below (the run makes them first, too)"
        )
        end_dry_run(checked.refusals)
    from pacs_rl.training.plan import dry_run  # the plan reads the run's library (torch)

    values, device = devices.with_device(launch.user, default_settings())
    if launch.state in ("checkpointed", "finished"):
        settings, cfg = checks.split_typed(values)
        _rerun(settings, _library().build_config(cfg, launch.output_dir), launch.output_dir, launch.state)
    lines, refusals = dry_run(
        values, launch.output_dir, n, launch.checked_resume, device, gpu_memory_gib, checked
    )
    typer.echo(header)
    for line in lines:
        typer.echo(f"  {line}")
    end_dry_run(refusals)
