"""A training run as a library call: `run_training(settings, config) -> TrainResult`.

`pacs-rl train`, `pacs-rl compare` and the benchmarks all train through this module:

    from pacs_rl.training import RunSettings, build_config, run_training
    result = run_training(RunSettings(eval_size=50), build_config({"max_steps": 4}, "runs/x"))
    result.heldout["after"]["accuracy"]

Two kinds of settings, one flat namespace for users, all declared in `pacs_rl.training.schema`:

- `RunSettings`: what to train on and what to report (model, dataset, held-out set, reward, LoRA, ...);
- the trainer's config (`PACSConfig`, or `PPOConfig` for loss_type='ppo'): every TRL `GRPOConfig` field
  plus the PACS fields. `CPU_DEFAULTS` are the config values of the CPU default run.

`pacs_rl.training.checks.split_settings` turns one flat mapping (a YAML file, `--set key=value`, a comparison's
train section) into both, typing each value once; every refusal is a `SettingsError` naming the setting.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import logging
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from pacs_rl import stopping
from pacs_rl.data import Problem
from pacs_rl.models import TINY_MODEL, load_tokenizer, resolve_model, tiny_model_folder
from pacs_rl.preflight import reward_weights_problem
from pacs_rl.progress import terminal_bars
from pacs_rl.rewards import load_reward_funcs
from pacs_rl.run_folder import (
    BASE_MODEL_DIR,
    CARD_FILE,
    CURVES_FILE,
    FINAL_DIR,
    FINISHED_FILE,
    FORMS_FILE,
    HELDOUT_FILE,
    METRICS_FILE,
    PACS_STATE_FILE,
    SETTINGS_FILE,
    TRAINER_STATE_FILE,
    heldout_protocol,
    last_complete_checkpoint,
    output_folder_problem,
    read_json,
    read_jsonl,
    share_weights,
    unshare_weights,
)
from pacs_rl.settings.errors import SettingsError
from pacs_rl.training.batch import batch_note
from pacs_rl.training.card import KEY_SETTINGS, write_model_card
from pacs_rl.training.checks import too_few_problems
from pacs_rl.training.config import PACSConfig
from pacs_rl.training.data import build_dataset, filter_prompts, load_run_data
from pacs_rl.training.engine import (
    model_init_kwargs,
    release_deepspeed,
    run_problems,
    start_deepspeed_comm,
    training_engine,
)
from pacs_rl.training.heldout import CallOnTrainBegin, HeldOut, heldout_reward, needs_engine, periodic_eval
from pacs_rl.training.output import (
    MetricsJsonlCallback,
    PhaseLines,
    RichProgressCallback,
    expect_tied_missing_keys,
    plot_curves,
)
from pacs_rl.training.ppo import PPOConfig, PPOTrainer
from pacs_rl.training.schema import RunSettings
from pacs_rl.training.trainer import PACSTrainer

log = logging.getLogger("pacs_rl.training")


# (config class, trainer class); each config class declares the loss types it serves.
TRAINERS: tuple[tuple[type[PACSConfig], type], ...] = ((PACSConfig, PACSTrainer), (PPOConfig, PPOTrainer))


# ---------------------------------------------------------------------------------------------------- settings
def config_fields(loss_type: str | None = None) -> dict[str, dataclasses.Field]:
    """Fields of the config class serving ``loss_type``; None: the fields of every config class."""
    classes = [config_and_trainer_classes(loss_type)[0]] if loss_type else [c for c, _ in TRAINERS]
    return {f.name: f for cls in classes for f in dataclasses.fields(cls) if f.init}


def config_and_trainer_classes(
    loss_type: str, settings: Mapping[str, Any] | None = None
) -> tuple[type, type]:
    """(config class, trainer class) serving ``loss_type``.

    settings: the config keyword arguments about to be passed; a field that only another config class has
    (a PPO critic field with loss_type='grpo') is refused, naming the loss types it applies to.
    """
    serving = [pair for pair in TRAINERS if loss_type in pair[0].served_loss_types]
    if not serving:
        served = [t for c, _ in TRAINERS for t in c.served_loss_types]
        raise SettingsError(f"loss_type={loss_type!r} is not a registered policy loss; use one of {served}.")
    config_cls, trainer_cls = serving[0]
    own = {f.name for f in dataclasses.fields(config_cls)}
    for other, _ in TRAINERS:
        stray = sorted(set(settings or ()) & ({f.name for f in dataclasses.fields(other)} - own))
        if stray:
            served = " or ".join(repr(t) for t in other.served_loss_types)
            raise SettingsError(
                f"{', '.join(stray)} only apply to loss_type={served} (got loss_type={loss_type!r})."
            )
    return config_cls, trainer_cls


def build_config(config_kwargs: Mapping[str, Any], output_dir: str | Path) -> PACSConfig:
    """The trainer config (PACSConfig or PPOConfig, by loss_type) for a run writing into ``output_dir``.
    Raises SettingsError with the config's own message (its checks name the field and the fix)."""
    kwargs = {**config_kwargs, "output_dir": str(output_dir), "disable_tqdm": True}
    config_cls, _ = config_and_trainer_classes(str(kwargs.get("loss_type", "pacs")), kwargs)
    try:
        return config_cls(**kwargs)
    except ValueError as e:  # the config's own checks name the field and the fix
        raise SettingsError(str(e)) from e


# ---------------------------------------------------------------------------------------------------- data


def build_reward_funcs(settings: RunSettings, config: PACSConfig) -> list:
    """The trainer's reward functions (``reward_funcs``; the math one graded by the resolved grader).

    Raises SettingsError for a function that cannot be imported, or reward_weights of another length."""
    try:
        funcs = load_reward_funcs(settings.reward_funcs, grader=settings.resolved_grader())
    except ValueError as e:
        raise SettingsError(f"reward_funcs: {e}") from None
    problem = reward_weights_problem(
        getattr(config, "reward_weights", None), len(funcs), settings.reward_funcs
    )
    if problem:
        raise SettingsError(problem)
    return funcs


# ---------------------------------------------------------------------------------------------------- the run
@dataclass
class TrainResult:
    """What a finished run produced. Paths are inside ``output_dir``."""

    output_dir: Path
    global_step: int
    train_seconds: float  # training time of this call (a resumed run counts only its own part)
    heldout: dict[str, Any]  # {"before": {...}, "after": {...}}: accuracy, n, correct, mean_length; {} if off
    eval_description: str  # how the held-out set was sampled: "greedy" or "T=0.6"
    metrics_file: Path
    final_dir: Path
    curves_png: Path | None
    answer_forms: dict[str, Any] = field(default_factory=dict)  # the reward-hacking monitor's totals
    already_complete: bool = False  # resumed a run that had finished: nothing was trained
    device: str = ""  # where this call trained ("cuda:0", "cpu"); empty when it trained nothing
    first_step: int = (
        0  # the step this call started from (a resumed run: its checkpoint's); its own steps follow
    )
    max_steps: int = 0  # the run's last step
    heldout_protocol: dict[str, Any] = field(default_factory=dict)  # how heldout was measured (settings.json)
    rollout_truncated_frac: float | None = (
        None  # share of the rollouts' completions cut off at the token limit
    )
    # optimizer steps of the whole run that left the weights as they were, by cause: "no_signal" (no group held
    # two different rewards: skip_no_signal_steps), "nonfinite" (a non-finite gradient norm); {} if not recorded
    skipped_steps: dict[str, int] = field(default_factory=dict)
    # dynamic sampling's totals over the run (PACSTrainer.dynamic_sampling_totals); empty when it was off
    dynamic_sampling: dict[str, float] = field(default_factory=dict)


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C or SIGTERM: where it stopped and what it kept. A KeyboardInterrupt, so that code
    that stops on one stops on this too. ``step``: the last step the run finished (the one in progress, if any, is
    dropped); ``training``: whether it had started training (else it stopped while loading or evaluating before)."""

    def __init__(self, output_dir: Path, step: int, max_steps: int, checkpoint: str | None, save_steps: Any,
                 signal_name: str = "Ctrl-C", training: bool = True):  # fmt: skip
        self.output_dir, self.step, self.max_steps = output_dir, step, max_steps
        self.checkpoint, self.save_steps, self.signal_name = checkpoint, save_steps, signal_name
        self.training = training
        super().__init__(self.describe())

    def kept(self) -> str:
        """What the folder keeps to go on from."""
        if self.checkpoint:
            step = int(Path(self.checkpoint).name.split("-")[-1])
            later = "" if step >= self.step else f"; steps {step + 1}-{self.step} are redone"
            return f"kept {self.checkpoint} (step {step}{later})"
        every = f"save_steps={self.save_steps}" if self.save_steps else "no checkpoints were asked for"
        return f"no checkpoint kept ({every}, and the run stopped before the first one): it starts again from step 0"

    def describe(self) -> str:
        where = (
            f"in step {self.step + 1} of {self.max_steps}, which is dropped"
            if self.training and self.step < self.max_steps
            else f"at step {self.step} of {self.max_steps}"
        )
        return f"interrupted ({self.signal_name}) {where}; {self.kept()}"


def resume_point(out: Path, resume: bool, config: PACSConfig, world: int) -> tuple[str | None, bool]:
    """(the checkpoint a resumed run continues from, whether the run already reached its last step).

    Refuses to start over a folder that holds checkpoints, and to resume a checkpoint written by another number of
    processes (each process saved its own rollout batch and random state: they cannot be re-sharded exactly)."""
    # a file; checkpoints without --resume; none to resume; one written by another number of processes
    problem = output_folder_problem(out, resume, world)
    if problem:
        raise SettingsError(problem)
    if not resume:
        return None, False
    checkpoint = last_complete_checkpoint(out)
    state = _trainer_state(checkpoint)
    target = config.max_steps if config.max_steps > 0 else int(state.get("max_steps") or 0)
    return checkpoint, target > 0 and int(state["global_step"]) >= target


def _consolidated_weights(checkpoint: str) -> str:
    """``checkpoint`` when it holds whole weights (DeepSpeed writes them with
    stage3_gather_16bit_weights_on_model_save, or below ZeRO-3); else SettingsError."""
    if any(Path(checkpoint, name).is_file() for name in _MODEL_WEIGHTS):
        return checkpoint
    raise SettingsError(
        f"--resume: {checkpoint} is the run's last step but holds only DeepSpeed ZeRO-3 shards "
        "(stage3_gather_16bit_weights_on_model_save was false), which cannot be loaded without training on: "
        f"write the weights with python {checkpoint}/zero_to_fp32.py {checkpoint} <folder>, or start the run "
        "with that key true (accelerate launch --zero3_save_16bit_model true, or configs/deepspeed/zero3.json)"
    )


_MODEL_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def _not_model_files(folder: str, names: list[str]) -> list[str]:
    """shutil.copytree's ignore: everything of a checkpoint but the model's config and weights."""
    keep = ("config.json", "generation_config.json", *_MODEL_WEIGHTS)
    return [n for n in names if not (n in keep or (n.startswith("model-") and n.endswith(".safetensors")))]


def _peft_config(settings: RunSettings):
    if not settings.use_lora:
        return None
    from peft import LoraConfig  # optional dependency: pip install "pacs-rl[peft]"

    return LoraConfig(
        r=settings.lora_r,
        lora_alpha=settings.lora_alpha,
        lora_dropout=settings.lora_dropout,
        target_modules=settings.lora_target_modules,
        task_type="CAUSAL_LM",
    )


def _non_default_fields(config: PACSConfig) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(config):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        value = getattr(config, f.name)
        if f.init and value != default:
            out[f.name] = value
    return out


def run_training(
    settings: RunSettings,
    config: PACSConfig,
    *,
    resume: bool = False,
    data: tuple[list[Problem], list[Problem]] | None = None,
    command: str | None = None,
    progress: bool = True,
    stop_on_signal: bool = False,
) -> TrainResult:
    """Train ``config.loss_type`` on ``settings.dataset`` into ``config.output_dir``: held-out accuracy before,
    training, the final model, held-out accuracy after, the curves, the model card. ``resume`` continues the run in
    that folder from its newest complete checkpoint; a run that already finished is left as it is
    (``already_complete``). Raises SettingsError (a ValueError) for a setting that cannot be used, before any
    model is loaded or anything is written. ``data``: the (training, held-out) problems when the caller has read
    them already (`pacs-rl train` does, before torch loads); else they are read here. ``command``: the command that
    made the run, for its card. ``progress``: progress bars on a terminal; without one (a log file), or with
    ``progress`` False, a line as each phase starts (loading, each held-out evaluation and its accuracy, each
    optimizer step, each further round of dynamic sampling) and one as each step ends.

    Interrupted (Ctrl-C, SIGTERM), it raises :class:`RunInterrupted` (a KeyboardInterrupt) saying the step reached
    and the checkpoint kept. ``stop_on_signal`` (main thread; one process or several, without vLLM): once the model
    is loaded, the first Ctrl-C or SIGTERM stops the run within moments wherever it is (sampling, the update, an
    evaluation: `pacs_rl.stopping`); the step in progress is dropped and nothing is saved, so the folder keeps its
    last finished checkpoint and a resumed run matches one never interrupted. A second signal stops at once.

    On several processes (`accelerate launch`) every process loads the data and its copy of the weights (TRL
    loads them from the name, in the training dtype, placed by accelerate; ZeRO-3 partitioned), the held-out
    evaluations run once across all processes, and only the main process writes files. Each process gets the
    signal (torchrun passes it on) and stops at its own next check point."""
    stop = _StopRequest()
    handling = stopping.SignalStop(_announce_stop) if stop_on_signal and not config.use_vllm else None
    try:
        if handling is None:
            return _run_training(settings, config, resume, data, command, progress, stop)
        with handling:
            stop.handling = handling
            return _run_training(settings, config, resume, data, command, progress, stop)
    except RunInterrupted:
        raise
    except KeyboardInterrupt as e:
        raise stop.interrupted(config, getattr(e, "signal_name", None) or "Ctrl-C") from None
    except Exception:
        # a process whose peer stopped first: its collective fails ("Connection closed by peer"); the stop is the
        # cause, and this process stops as its peer did
        if handling is not None and stop.asked:
            raise stop.interrupted(config, stop.asked) from None
        raise


def end_processes() -> None:
    """Leave the process group of a launch (`accelerate launch`), if this process joined one, and free the groups
    with their gloo threads: the last thing a command does, while the interpreter is whole. A gloo group's worker
    threads live as long as the group object; one that drops a finished collective while Python shuts down (its
    tensors are Python's, and their release needs the GIL) aborts the process with SIGABRT ("terminate called
    without an active exception"). destroy_process_group only unregisters the groups, so what else holds them is
    let go first (DeepSpeed's engine and module state: `release_deepspeed`) and the cycles are collected after."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        release_deepspeed()
        comm = sys.modules.get("deepspeed.comm")  # its destroy also drops its own hold on the groups
        if comm is not None and comm.is_initialized():
            comm.destroy_process_group()
        else:
            torch.distributed.destroy_process_group()
        gc.collect()  # the groups' last holders: their destructors join the threads


def _announce_stop(signal_name: str) -> None:
    if PartialState().is_main_process:
        print(
            f"{signal_name}: stopping now; the step in progress is dropped and the run keeps its last checkpoint "
            f"({signal_name} again stops at once)",
            file=sys.stderr,
            flush=True,
        )


class _StopRequest:
    """Where a run stands when a signal stops it: its trainer (once built) and the step it started from."""

    def __init__(self):
        self.handling: stopping.SignalStop | None = None  # the signal handlers, when the run installed them
        self.trainer = None
        self.first_step = 0
        self.training = False  # trainer.train() was entered

    @property
    def asked(self) -> str | None:
        return stopping.requested()

    def arm(self, trainer) -> None:
        """From now on the first signal asks for a stop at the next check point: every forward of the policy is
        one (the fast sampler and the held-out batches check too)."""
        self.trainer = trainer
        if self.handling is not None:  # trainer.model is not wrapped yet (accelerate wraps it in train())
            model = trainer.model
            base = getattr(model, "get_base_model", lambda: None)()  # a PEFT model's base generates
            stopping.watch(model, base)
            self.handling.arm()

    def interrupted(self, config: PACSConfig, signal_name: str) -> RunInterrupted:
        out = Path(config.output_dir)
        step = max(self.first_step, getattr(getattr(self.trainer, "state", None), "global_step", 0))
        return RunInterrupted(
            out, step, config.max_steps, last_complete_checkpoint(out), config.save_steps, signal_name,
            training=self.training,
        )  # fmt: skip


def _run_training(settings, config, resume, data, command, progress, stop) -> TrainResult:
    """run_training's body; ``stop``: the _StopRequest its signal handlers set."""
    run = _Session(settings, config, stop, progress)
    if run.find_checkpoint(resume):
        return _result(settings, config, run.out, already_complete=True)
    run.say.start()
    try:
        run.read_data(data)
        run.load_tokenizer_and_record(command)
        trainer = run.build_trainer()
        train_seconds = run.train(trainer)
        global_step = run.finish(trainer, train_seconds)
    finally:
        run.say.close()
    device = str(trainer.accelerator.device)
    return _result(
        settings, config, run.out, train_seconds=train_seconds, global_step=global_step, device=device,
        first_step=run.first_step, dynamic_sampling=dict(trainer.dynamic_sampling_totals),
    )  # fmt: skip


class _Session:
    """One call of run_training, in the order it happens: the checks and the resume point, the data, the model's
    name and tokenizer (and the run's record), the trainer, training, and the end (final weights, held-out
    accuracy after, curves, card)."""

    def __init__(self, settings: RunSettings, config: PACSConfig, stop: _StopRequest, progress: bool):
        self.settings, self.config, self.stop, self.progress = settings, config, stop, progress
        self.out = Path(config.output_dir)
        if settings.num_threads:
            torch.set_num_threads(settings.num_threads)  # before any op: see the setting's help
        self.state = PartialState()
        # what the run is doing, a line per phase, where no progress bar shows it (a log file, --no-progress)
        self.say = PhaseLines(self.state.is_main_process and not terminal_bars(progress))
        self.engine = training_engine(config, self.state.num_processes)
        problems = run_problems(settings, config, self.engine)
        if problems:
            raise SettingsError("; ".join(problems))
        if config.use_cpu and torch.cuda.is_available():
            log.warning(
                "CUDA is available but use_cpu=True: training on the CPU; set use_cpu=false to train on CUDA"
            )
        note = batch_note(settings, config, self.state.num_processes) if self.state.is_main_process else None
        if note:
            log.warning(note)

    def find_checkpoint(self, resume: bool) -> bool:
        """Where training starts (a checkpoint, or step 0); True when the run in the folder already finished."""
        config = self.config
        self.checkpoint, self.complete = resume_point(self.out, resume, config, self.state.num_processes)
        if self.complete and (self.out / FINISHED_FILE).is_file():
            return True
        self.first_step = int(_trainer_state(self.checkpoint)["global_step"]) if self.checkpoint else 0
        self.stop.first_step = self.first_step
        # DeepSpeed builds its engine only inside train(): without it transformers can neither load a checkpoint
        # into the bare model (ZeRO-3 holds a shard of each weight) nor save it. A run that finished training takes
        # its last checkpoint's consolidated weights as the model, and final/ is a copy of them.
        self.finish_from_weights = self.complete and self.engine == "deepspeed"
        return False

    def read_data(self, data: tuple[list[Problem], list[Problem]] | None) -> None:
        """The training and held-out problems (read before the model loads: a bad source fails fast)."""
        settings, config = self.settings, self.config
        torch.manual_seed(config.seed)
        self.train_problems, self.held = data or load_run_data(settings, config.seed)
        per_rollout = config.generation_batch_size // config.num_generations
        few = too_few_problems(len(self.train_problems), per_rollout, settings.dataset)
        if few:
            raise SettingsError(few)
        if settings.eval_size and not self.held and self.state.is_main_process:
            log.info(
                "held-out evaluation off: no held-out set for %s (set eval_dataset, e.g. math500)",
                settings.dataset,
            )

    def load_tokenizer_and_record(self, command: str | None) -> None:
        """The model's name and tokenizer, the training prompts that fit, and settings.json and the card."""
        settings, config, out = self.settings, self.config, self.out
        if self.state.is_main_process:
            out.mkdir(parents=True, exist_ok=True)
        with self.state.main_process_first():  # --model tiny is written once; the bundled model converts once
            tiny = settings.model == TINY_MODEL
            self.model_id = (
                str(tiny_model_folder(out / BASE_MODEL_DIR)) if tiny else resolve_model(settings.model)
            )
        given = _non_default_fields(config)  # the config as given, before the run fills in model_init_kwargs
        config.model_init_kwargs = model_init_kwargs(settings, config, self.engine)  # TRL reads it to load
        init = config.model_init_kwargs
        trust = init.get("trust_remote_code", config.trust_remote_code)
        self.tokenizer = load_tokenizer(self.model_id, revision=init.get("revision"), trust_remote_code=trust)
        loaded = self.train_problems
        self.train_problems = filter_prompts(loaded, self.tokenizer, settings, config)
        if self.state.is_main_process:
            self._record(command, loaded, given)
        if self.finish_from_weights:
            self.model_id = _consolidated_weights(self.checkpoint)

    def _record(self, command: str | None, loaded: list[Problem], given: dict[str, Any]) -> None:
        """settings.json (the run, its config, how held-out accuracy is measured, its data) and the card."""
        settings, config, out = self.settings, self.config, self.out
        earlier = read_json(out / SETTINGS_FILE) if self.checkpoint else {}
        run_keys = dataclasses.asdict(settings)
        recorded = {
            "run": run_keys,
            "config": given,
            "key_settings": _key_settings(config),
            "heldout": heldout_protocol(run_keys, config.max_completion_length, config.seed, len(self.held)),
            "command": earlier.get("command") or command,  # the command that started the run
            "data": {
                "training_prompts": len(self.train_problems),
                "dropped_long_prompts": len(loaded) - len(self.train_problems),
                "skipped_rows": getattr(
                    loaded, "skipped", 0
                ),  # bad rows (skip_bad_rows), with their messages
                "skipped_examples": list(getattr(loaded, "skip_messages", []))[:20],
            },
        }
        (out / SETTINGS_FILE).write_text(json.dumps(recorded, indent=2, default=str))
        (out / FINISHED_FILE).unlink(
            missing_ok=True
        )  # a finished run continued (a larger max_steps) is unfinished
        write_model_card(out)  # "unfinished" until the run ends

    def build_trainer(self):
        """The trainer, its callbacks, and the held-out accuracy before training (on a fresh run)."""
        settings, config, out, state = self.settings, self.config, self.out, self.state
        progress = self.progress
        rewards = build_reward_funcs(settings, config)
        self.reward = heldout_reward(settings)
        say = self.say if self.say.enabled else None
        self.heldout = HeldOut(settings, config, self.held, self.reward, out, progress=progress, say=say)
        start_deepspeed_comm(config, self.engine, state.num_processes)
        _, trainer_cls = config_and_trainer_classes(config.loss_type)
        where = "" if self.model_id == settings.model else f" ({self.model_id})"
        self.say(f"loading the model {settings.model}{where}")
        trainer = trainer_cls(
            self.model_id, rewards, args=config, train_dataset=build_dataset(self.train_problems, settings),
            processing_class=self.tokenizer, callbacks=[MetricsJsonlCallback()], peft_config=_peft_config(settings),
        )  # fmt: skip
        # TRL writes its generic card ("a fine-tuned version of [None]", "trained with GRPO") at every checkpoint
        # and on a push to the Hub: this run's own card instead
        trainer.create_model_card = lambda *args, **kwargs: state.is_main_process and write_model_card(out)
        trainer.remove_callback(PrinterCallback)
        expect_tied_missing_keys(trainer.model)  # a resume says nothing of the tied LM head it did not load
        trainer.remove_callback(ProgressCallback)
        trainer.announce = self.say if self.say.enabled else None  # a line as each step starts
        self.stop.arm(trainer)  # a signal from now on stops at the next check point
        if needs_engine(
            trainer
        ):  # once the engine has placed (or sharded) the model, before a fresh run's step
            before = CallOnTrainBegin(lambda st: st.global_step or self.heldout.measure(trainer, "before"))
            trainer.add_callback(before)
        elif (
            self.checkpoint is None
        ):  # one process: the weights as loaded, before accelerate's (bf16) autocast
            self.heldout.measure(trainer, "before")
        # the reward-hacking monitor's saved rollouts: those of steps this run will redo go (a fresh run: all)
        trainer.answer_monitor.forget_after(self.first_step if self.checkpoint else -1)
        trainer.add_callback(RichProgressCallback(config.loss_type, enabled=progress, lines=self.say))
        if config.eval_steps:
            trainer.add_callback(periodic_eval(trainer, settings, config, self.held, self.reward))
        return trainer

    def train(self, trainer) -> float:
        """Train from the resume point (a complete run only loads its last checkpoint); the seconds it took."""
        t0 = time.time()
        if (
            self.complete
        ):  # the last checkpoint is the last step: finish the run from it, without another step
            if not self.finish_from_weights:
                trainer._load_from_checkpoint(self.checkpoint)
        else:
            self.stop.training = True
            trainer.train(resume_from_checkpoint=self.checkpoint)
        return time.time() - t0

    def finish(self, trainer, train_seconds: float) -> int:
        """The final weights, held-out accuracy after, the answer forms, the curves and the card; the last step."""
        config, out, state = self.config, self.out, self.state
        if state.is_main_process:  # weights final/ shares with a checkpoint: new files, not through the link
            unshare_weights(out / FINAL_DIR)
        if self.finish_from_weights:
            if state.is_main_process:
                shutil.copytree(self.checkpoint, out / FINAL_DIR, dirs_exist_ok=True, ignore=_not_model_files)
            state.wait_for_everyone()
        else:
            self.say(f"saving the final model to {out / FINAL_DIR}")
            trainer.save_model(str(out / FINAL_DIR))
        if state.is_main_process:
            self.tokenizer.save_pretrained(str(out / FINAL_DIR))
        self.heldout.measure(trainer, "after")
        self.heldout.record(train_seconds_this_session=train_seconds)
        if not self.complete:  # a finished run resumed trains nothing: its answer_forms.json stays as written
            trainer.answer_monitor.save(heldout_after=self.heldout.results.get("after", {}).get("paid_forms"))
        # resuming a complete run loads the weights only: its step count is the checkpoint's
        complete = self.complete
        global_step = (
            int(_trainer_state(self.checkpoint)["global_step"]) if complete else trainer.state.global_step
        )
        if state.is_main_process:
            last = last_complete_checkpoint(
                out
            )  # the last step's checkpoint holds final/'s weights: stored once
            if last and int(_trainer_state(last)["global_step"]) == global_step:
                share_weights(out / FINAL_DIR, last)
            if self.settings.plot:
                title = f"{config.loss_type} on {self.settings.dataset}"
                plot_curves(out / METRICS_FILE, out / CURVES_FILE, title=title)
            skipped = _skipped_steps(trainer, self.checkpoint if complete else None)
            (out / FINISHED_FILE).write_text(
                json.dumps({"global_step": global_step, "skipped_steps": skipped})
            )
            (out / FINAL_DIR / CARD_FILE).unlink(missing_ok=True)  # save_model's TRL card: ours follows
            write_model_card(out)
        state.wait_for_everyone()
        return global_step


# config fields that name the folder itself, or that the command sets: not part of what a run is
_NOT_COMPARED = {"output_dir", "disable_tqdm", "resume_from_checkpoint", "logging_dir", "run_name"}


def run_differences(out: str | Path, settings: RunSettings, config: PACSConfig) -> list[str]:
    """How ``settings`` and ``config`` differ from the run recorded in ``out``/settings.json, one
    ``"name: <there> there, <here> now"`` per setting (empty when they are the same run; a folder without a record
    differs as a whole)."""
    recorded = read_json(Path(out) / SETTINGS_FILE)
    if not recorded:
        return [f"{Path(out) / SETTINGS_FILE} is missing or unreadable"]
    now = json.loads(json.dumps({"run": dataclasses.asdict(settings), "config": _non_default_fields(config)},
                                default=str))  # fmt: skip
    out_list = []
    for part in ("run", "config"):
        there, here = recorded.get(part, {}), now[part]
        for key in sorted((set(there) | set(here)) - _NOT_COMPARED):
            if there.get(key) != here.get(key):
                out_list.append(f"{key}: {there.get(key)!r} there, {here.get(key)!r} now")
    return out_list


def _key_settings(config: PACSConfig) -> dict[str, Any]:
    """The config values a run's card shows (KEY_SETTINGS), those of PACS only for PACS, TRL's KL beta only for
    the baselines."""
    pacs = config.loss_type == "pacs"
    out = {}
    for name in KEY_SETTINGS:
        if not hasattr(config, name) or ((name.startswith("pacs_") or name == "reference") and not pacs):
            continue
        if name == "beta" and pacs:
            continue
        value = getattr(config, name)
        out[name] = value if isinstance(value, (bool, int, float, str, type(None))) else str(value)
    return out


def _skipped_steps(trainer, checkpoint: str | None) -> dict[str, int]:
    """The run's optimizer steps skipped, by cause: the trainer's counts (kept in its checkpoints, so a resumed run
    counts the steps before the resume too), or, with ``checkpoint`` (a run whose training had finished before this
    call: the trainer trained nothing), that checkpoint's."""
    if checkpoint is None:
        counts = trainer.num_skipped_no_signal, trainer.num_skipped_steps
    else:
        path = Path(checkpoint) / PACS_STATE_FILE.format(rank=0)
        state = torch.load(path, map_location="cpu", weights_only=False) if path.is_file() else {}
        counts = state.get("num_skipped_no_signal", 0), state.get("num_skipped_steps", 0)
    return {"no_signal": int(counts[0]), "nonfinite": int(counts[1])}


def _trainer_state(checkpoint: str) -> dict[str, Any]:
    """transformers' trainer_state.json of a checkpoint folder (global_step, max_steps, log history)."""
    return json.loads((Path(checkpoint) / TRAINER_STATE_FILE).read_text())


def _result(settings: RunSettings, config: PACSConfig, out: Path, **values: Any) -> TrainResult:
    """The TrainResult of the run in ``out`` as its files record it."""
    held = json.loads((out / HELDOUT_FILE).read_text()) if (out / HELDOUT_FILE).is_file() else {}
    finished = read_json(out / FINISHED_FILE)
    values.setdefault("global_step", finished.get("global_step"))
    values.setdefault("skipped_steps", finished.get("skipped_steps") or {})
    png = out / CURVES_FILE
    forms = json.loads((out / FORMS_FILE).read_text()) if (out / FORMS_FILE).is_file() else {}
    clipped = [
        row["completions/clipped_ratio"]
        for row in read_jsonl(out / METRICS_FILE)
        if row.get("completions/clipped_ratio") is not None
    ]
    values.setdefault("first_step", values["global_step"])  # a finished run: nothing trained by this call
    return TrainResult(
        answer_forms=forms,
        max_steps=config.max_steps,
        heldout_protocol=read_json(out / SETTINGS_FILE).get("heldout") or {},
        rollout_truncated_frac=sum(clipped) / len(clipped) if clipped else None,
        output_dir=out,
        train_seconds=values.pop("train_seconds", 0.0),
        heldout={k: held[k] for k in ("before", "after") if k in held},
        eval_description="greedy" if settings.eval_temperature == 0 else f"T={settings.eval_temperature}",
        metrics_file=out / METRICS_FILE,
        final_dir=out / FINAL_DIR,
        curves_png=png if settings.plot and png.is_file() else None,
        **values,
    )
