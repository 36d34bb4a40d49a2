"""A training run as a library call: `run_training(settings, config) -> TrainResult`.

`pacs-rl train`, `pacs-rl compare` and the benchmarks all train through this module:

    from pacs_rl.training.run import RunSettings, build_config, run_training
    result = run_training(RunSettings(eval_size=50), build_config({"max_steps": 4}, "runs/x"))
    result.heldout["after"]["accuracy"]

Two kinds of settings, one flat namespace for users:

- `RunSettings`: what to train on and what to report (model, dataset, held-out set, reward, LoRA, ...);
- the trainer's config (`PACSConfig`, or `PPOConfig` for loss_type='ppo'): every TRL `GRPOConfig` field
  plus the PACS fields. `CPU_DEFAULTS` are the config values of the CPU default run.

`split_settings` turns one flat mapping (a YAML file, `--set key=value`, a comparison's train section) into
both, converting text to each field's type once (`coerce_setting`). Every refusal is a `SettingsError`
(a `ValueError`) naming the setting and what to do.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from datasets import Dataset
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from pacs_rl.data import (
    DataError,
    Problem,
    arithmetic_pool_size,
    arithmetic_problems,
    build_messages,
    load_problems,
    split_disjoint,
)
from pacs_rl.data.procedural import parse_query
from pacs_rl.models import load_model_and_tokenizer
from pacs_rl.rewards import make_math_reward_func
from pacs_rl.training.callbacks import METRICS_FILE, MetricsJsonlCallback, RichProgressCallback
from pacs_rl.training.config import PACSConfig
from pacs_rl.training.heldout import heldout_accuracy, plot_curves
from pacs_rl.training.ppo import PPOConfig, PPOTrainer
from pacs_rl.training.trainer import PACSTrainer, last_complete_checkpoint

log = logging.getLogger("pacs_rl.training")

HELDOUT_FILE = "heldout.json"
SETTINGS_FILE = "settings.json"
CURVES_FILE = "training_curves.png"
FINAL_DIR = "final"

# (config class, trainer class); each config class declares the loss types it serves.
TRAINERS: tuple[tuple[type[PACSConfig], type], ...] = ((PACSConfig, PACSTrainer), (PPOConfig, PPOTrainer))


REWARDS = ("math", "math_strict")
MODEL_DTYPES = ("float32", "bfloat16", "float16")


class SettingsError(ValueError):
    """A run setting that cannot be used as given; the message names it and what to do."""


@dataclass
class RunSettings:
    """What a run trains on and reports, beside the trainer's config (the "run keys")."""

    model: str = field(
        default="smollm2-135m",
        metadata={"help": "Bundled alias (smollm2-135m), Hub id or local folder."},
    )
    dataset: str = field(
        default="arithmetic",
        metadata={
            "help": "Training problems: arithmetic[?n=..&ops=..&digits=..] | reasoning_gym:<task> | a .jsonl/.json/"
            ".parquet file | a Hub dataset id | a benchmark name."
        },
    )
    dataset_split: str | None = field(default=None, metadata={"help": "Split of a Hub dataset."})
    problem_field: str | None = field(default=None, metadata={"help": "Column holding the problem text."})
    answer_field: str | None = field(default=None, metadata={"help": "Column holding the reference answer."})
    skip_bad_rows: bool = field(
        default=False,
        metadata={"help": "Skip and count bad data rows instead of stopping at the first one."},
    )
    arithmetic_ops: str = field(
        default="+-",
        metadata={"help": "Operators of the built-in arithmetic task (training and held-out); '+-*' adds ×."},
    )
    arithmetic_digits: str = field(
        default="2,1",
        metadata={"help": "Operand lengths of the arithmetic task: '2,1' (47 + 8) or '2' (47 + 38)."},
    )
    train_size: int = field(
        default=2000,
        metadata={
            "help": "Problems drawn for the arithmetic task (a ceiling: capped at the split's size) or rows "
            "kept of another source (0 = all)."
        },
    )
    eval_dataset: str | None = field(
        default=None,
        metadata={
            "help": "Held-out problems; default: the held-out arithmetic split when training on arithmetic."
        },
    )
    eval_size: int = field(
        default=200, metadata={"help": "Held-out problems for before/after accuracy (0 = no evaluation)."}
    )
    eval_temperature: float = field(
        default=0.0, metadata={"help": "Held-out sampling temperature (0 = greedy)."}
    )
    eval_max_new_tokens: int | None = field(
        default=None, metadata={"help": "Held-out completion length; default: max_completion_length."}
    )
    eval_batch_size: int = field(default=50, metadata={"help": "Held-out problems sampled together."})
    reward: str = field(
        default="math",
        metadata={
            "help": "math (lenient: the last number or expression counts) | math_strict (a \\boxed{} answer)."
        },
    )
    model_dtype: str = field(
        default="float32",
        metadata={"help": "Weights dtype: float32 | bfloat16 (bf16 autocast is the config's `bf16`)."},
    )
    use_lora: bool = field(
        default=False, metadata={"help": "Train a LoRA adapter (peft) instead of all weights."}
    )
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout."})
    lora_target_modules: str = field(default="all-linear", metadata={"help": "LoRA target modules."})
    plot: bool = field(default=True, metadata={"help": "Write a PNG of the training curves at the end."})

    def __post_init__(self):
        problems = self.problems()
        if problems:
            raise SettingsError("; ".join(problems))

    def problems(self) -> list[str]:
        """Every setting that cannot be used, each naming the setting and what to do (empty when all is well)."""
        out = []
        for name in ("train_size", "eval_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                out.append(
                    f"{name}={getattr(self, name)!r}: give a whole number >= 0 (0 = {'all rows' if name == 'train_size' else 'no evaluation'})"
                )
        if not isinstance(self.eval_batch_size, int) or self.eval_batch_size < 1:
            out.append(f"eval_batch_size={self.eval_batch_size!r}: give a whole number >= 1")
        if not isinstance(self.eval_temperature, (int, float)) or self.eval_temperature < 0:
            out.append(f"eval_temperature={self.eval_temperature!r}: give a number >= 0 (0 = greedy)")
        if self.reward not in REWARDS:
            out.append(f"reward={self.reward!r}: choose one of {list(REWARDS)}")
        if self.model_dtype not in MODEL_DTYPES:
            out.append(f"model_dtype={self.model_dtype!r}: choose one of {list(MODEL_DTYPES)}")
        return out


# The config of the CPU default run (configs/cpu_default.yaml mirrors these and RunSettings' defaults; a test
# keeps them equal). Why each value: docs/TRAINING.md, "The first run".
CPU_DEFAULTS: dict[str, Any] = {
    "use_cpu": True,
    "bf16": False,  # fp32: a CPU without AVX512-BF16/AMX runs bf16 matmuls several times slower than fp32
    "loss_type": "pacs",
    "num_generations": 8,
    "per_device_train_batch_size": 8,  # one group per forward/backward: half the activation memory
    "gradient_accumulation_steps": 2,  # 2 groups of 8 = 16 sequences per optimizer step
    "mini_batches_per_rollout": 2,  # 4 prompts x 8 completions per rollout, 2 optimizer steps on it
    "max_steps": 24,
    "learning_rate": 2.0e-5,
    "lr_scheduler_type": "constant",
    "warmup_steps": 0,
    "max_grad_norm": 1.0,
    "temperature": 0.7,  # at 1.0 the 135M model rambles and finds fewer right answers on this task
    "top_p": 1.0,
    "max_completion_length": 96,  # much shorter and most completions are cut off before their answer
    "fast_sampler": True,  # pacs_rl.sampling: one prefill per prompt shared by its 8 samples
    "fast_sampler_dtype": None,  # the model's fp32 (see "bf16")
    "old_logprobs_from_sampler": True,  # the fp32 sampler's log-probs are the old ones: no second forward
    "logging_steps": 1,
    "save_strategy": "steps",
    "save_steps": 10,
    "save_total_limit": 2,
    "report_to": "none",
    "seed": 0,
    "dataloader_num_workers": 0,
}


# ---------------------------------------------------------------------------------------------------- settings
def run_fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(RunSettings)}


def config_fields(loss_type: str | None = None) -> dict[str, dataclasses.Field]:
    """Fields of the config class serving ``loss_type``; None: the fields of every config class."""
    classes = [config_and_trainer_classes(loss_type)[0]] if loss_type else [c for c, _ in TRAINERS]
    return {f.name: f for cls in classes for f in dataclasses.fields(cls) if f.init}


def known_keys() -> list[str]:
    """Every setting name: the run keys and every field of every config class."""
    return sorted(set(run_fields()) | set(config_fields()))


def default_settings() -> dict[str, Any]:
    """The CPU default run as one flat mapping (what `pacs-rl train` runs with no arguments)."""
    return {**dataclasses.asdict(RunSettings()), **CPU_DEFAULTS}


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


def _type_name(key: str) -> str:
    """The declared type of setting ``key`` as text ('float', 'int | None', ...)."""
    f = run_fields().get(key) or config_fields().get(key)
    if f is None:
        return "str"
    return f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))


_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def coerce_setting(key: str, value: Any) -> Any:
    """Convert ``value`` to the declared type of setting ``key`` when it arrives as text (from a command
    line, or a YAML file that reads 1e-5 as a string). Non-text values pass through unchanged.
    Raises SettingsError naming the key when the text does not fit the type."""
    if not isinstance(value, str):
        return value
    kind = _type_name(key)
    low = value.strip().lower()
    if low == "null" or (low == "none" and "str" not in kind):
        return None
    takes_text = "str" in kind
    if "bool" in kind:
        if low in _TRUE + _FALSE:
            return low in _TRUE
        if not (takes_text or "int" in kind or "float" in kind):
            raise SettingsError(f"{key}={value!r} is not a bool (true or false)")
    try:
        if "float" in kind:
            return float(value)
        if "int" in kind:
            return int(value)
    except ValueError:
        if not takes_text:
            raise SettingsError(f"{key}={value!r} is not a {kind}") from None
    return value


def check_keys(keys, where: str) -> None:
    """Refuse unknown setting names, naming the close matches."""
    known = known_keys()
    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=4, cutoff=0.6)
            hint = f" Did you mean: {', '.join(close)}?" if close else " See `pacs-rl train --list-keys`."
            raise SettingsError(f"unknown setting {key!r} in {where}.{hint}")


def split_settings(
    values: Mapping[str, Any], where: str = "the settings"
) -> tuple[RunSettings, dict[str, Any]]:
    """One flat mapping of settings -> (RunSettings, the config's keyword arguments), each value converted to
    its field's type. Unknown names are refused with close matches."""
    check_keys(values, where)
    typed = {k: coerce_setting(k, v) for k, v in values.items()}
    run_keys = run_fields()
    settings = RunSettings(**{k: v for k, v in typed.items() if k in run_keys})
    return settings, {k: v for k, v in typed.items() if k not in run_keys}


def load_settings_file(path: str | Path) -> dict[str, Any]:
    """A YAML file of settings (`setting: value` per line) as a dict; unknown names are refused."""
    path = Path(path)
    if not path.is_file():
        raise SettingsError(f"config file {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping of setting: value, got {type(data).__name__}")
    check_keys(data, str(path))
    return data


def parse_assignments(items: list[str], where: str = "--set") -> dict[str, Any]:
    """``["learning_rate=1e-5", "pacs_weighted=false"]`` -> a dict; each value read as YAML, then typed by
    :func:`split_settings`. Unknown names are refused."""
    out = {}
    for item in items:
        if "=" not in item:
            raise SettingsError(f"{where} {item!r}: expected key=value")
        key, text = item.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError:
            out[key.strip()] = text
    check_keys(out, where)
    return out


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
def _arithmetic_sets(settings: RunSettings, seed: int) -> tuple[list[Problem], dict[str, Any]]:
    """The arithmetic training problems; a source string's own options win over the run keys."""
    source = settings.dataset
    opts = parse_query(source.partition("?")[2])
    if str(opts.pop("split", "train")) != "train":
        raise DataError(
            f"{source!r}: a training set is drawn from the train split (the held-out set from test)"
        )
    unknown = set(opts) - {"n", "seed", "ops", "digits"}
    if unknown:
        raise DataError(
            f"{source!r}: unknown option(s) {', '.join(sorted(unknown))}; known: n, seed, ops, digits"
        )
    task = {
        "ops": str(opts.get("ops", settings.arithmetic_ops)),
        "digits": opts.get("digits", settings.arithmetic_digits),
    }
    want = int(opts.get("n", settings.train_size or 2000))
    pool = arithmetic_pool_size(split="train", **task)
    if want > pool and "n" not in opts:  # train_size is a ceiling here; an explicit n= is a demand
        log.info(
            "training on all %d problems of arithmetic ops=%s digits=%s (train_size=%d is more)",
            pool, task["ops"], task["digits"], want,
        )  # fmt: skip
        want = pool
    return arithmetic_problems(want, seed=int(opts.get("seed", seed)), split="train", **task), task


def _file_problems(settings: RunSettings) -> list[Problem]:
    problems = load_problems(
        settings.dataset,
        problem_field=settings.problem_field,
        answer_field=settings.answer_field,
        split=settings.dataset_split,
        limit=settings.train_size or None,
        on_error="skip" if settings.skip_bad_rows else "raise",
    )
    if problems.skipped:
        log.warning("skipped %d bad rows of %s:", problems.skipped, settings.dataset)
        for message in problems.skip_messages[:5]:
            log.warning("  %s", message)
    return list(problems)


def load_run_data(settings: RunSettings, seed: int) -> tuple[list[Problem], list[Problem]]:
    """Training problems and held-out problems (disjoint from training). Raises SettingsError naming the
    data settings when a source, a row or an arithmetic option is bad."""
    try:
        return _load_run_data(settings, seed)
    except ValueError as e:  # DataError included: a bad file row, source string or arithmetic option
        raise SettingsError(
            f"{e} (settings: dataset={settings.dataset!r}, arithmetic_ops={settings.arithmetic_ops!r}, "
            f"arithmetic_digits={settings.arithmetic_digits!r}, eval_dataset={settings.eval_dataset!r})"
        ) from None


def _load_run_data(settings: RunSettings, seed: int) -> tuple[list[Problem], list[Problem]]:
    source = settings.dataset
    arithmetic = source == "arithmetic" or source.startswith("arithmetic?")
    task: dict[str, Any] = {}
    if arithmetic:
        train, task = _arithmetic_sets(settings, seed)
    else:
        train = _file_problems(settings)
    held: list[Problem] = []
    if settings.eval_size:
        if settings.eval_dataset is None and arithmetic:
            n = min(settings.eval_size, arithmetic_pool_size(split="test", **task))
            held = arithmetic_problems(n, seed=10_000 + seed, split="test", **task)
        elif settings.eval_dataset is not None:
            held = list(load_problems(settings.eval_dataset, limit=settings.eval_size, on_error="skip"))
    if held:
        train, dropped = split_disjoint(train, held)
        if dropped:
            log.info("dropped %d training problems that also appear in the held-out set", dropped)
    if not train:
        raise DataError(f"dataset {source!r} gave no usable training problems")
    return train, held


def build_dataset(problems: list[Problem]) -> Dataset:
    """The trainer's dataset: the paper's chat prompt, the gold answer and the problem id per row."""
    return Dataset.from_list(
        [{"prompt": build_messages(p.problem), "answer": p.answer, "problem_id": p.id} for p in problems]
    )


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


def _checkpoint_to_resume(out: Path, resume: bool) -> str | None:
    """The checkpoint a resumed run continues from; refuse to start over a folder that holds one."""
    if resume:
        checkpoint = last_complete_checkpoint(out)
        if checkpoint is None:
            raise SettingsError(f"--resume: no complete checkpoint-* folder in {out}")
        return checkpoint
    if out.exists() and any(out.glob("checkpoint-*")):
        raise SettingsError(
            f"{out} already holds checkpoints: pass --resume to continue it, or another --output-dir"
        )
    return None


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


class _HeldOut:
    """Held-out accuracy before and after training, kept in OUT/heldout.json (a resumed run keeps "before")."""

    def __init__(self, settings: RunSettings, config: PACSConfig, problems, tokenizer, reward, out: Path):
        self.settings, self.config, self.problems = settings, config, problems
        self.tokenizer, self.reward = tokenizer, reward
        self.path = out / HELDOUT_FILE
        self.results = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def measure(self, policy, when: str) -> None:
        if not self.problems or (when == "before" and "before" in self.results):
            return
        s = self.settings
        self.results[when] = heldout_accuracy(
            policy,
            self.tokenizer,
            self.problems,
            s.eval_max_new_tokens or self.config.max_completion_length,
            s.eval_batch_size,
            s.eval_temperature,
            seed=self.config.seed,
            reward_func=self.reward,
            description=f"held-out, {when}",
        )
        self.path.write_text(json.dumps(self.results, indent=2))

    def record(self, **extra: Any) -> None:
        if self.results:
            self.results.update(extra)
            self.path.write_text(json.dumps(self.results, indent=2))


def run_training(settings: RunSettings, config: PACSConfig, *, resume: bool = False) -> TrainResult:
    """Train ``config.loss_type`` on ``settings.dataset`` into ``config.output_dir``: held-out accuracy before,
    training, the final model, held-out accuracy after, the curves. ``resume`` continues the run in that
    folder from its newest complete checkpoint. Raises SettingsError (a ValueError) for a setting that cannot
    be used, before any model is loaded."""
    out = Path(config.output_dir)
    checkpoint = _checkpoint_to_resume(out, resume)
    torch.manual_seed(config.seed)
    train_problems, held = load_run_data(settings, config.seed)  # before the model loads: fail fast
    out.mkdir(parents=True, exist_ok=True)
    (out / SETTINGS_FILE).write_text(
        json.dumps(
            {"run": dataclasses.asdict(settings), "config": _non_default_fields(config)},
            indent=2,
            default=str,
        )
    )
    model, tokenizer = load_model_and_tokenizer(settings.model, dtype=settings.model_dtype)
    reward = make_math_reward_func(strict=settings.reward == "math_strict")
    heldout = _HeldOut(settings, config, held, tokenizer, reward, out)
    heldout.measure(model, "before")

    _, trainer_cls = config_and_trainer_classes(config.loss_type)
    trainer = trainer_cls(
        model,
        reward,
        args=config,
        train_dataset=build_dataset(train_problems),
        processing_class=tokenizer,
        callbacks=[MetricsJsonlCallback(), RichProgressCallback(config.loss_type)],
        peft_config=_peft_config(settings),
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    t0 = time.time()
    trainer.train(resume_from_checkpoint=checkpoint)
    train_seconds = time.time() - t0
    trainer.save_model(str(out / FINAL_DIR))
    tokenizer.save_pretrained(str(out / FINAL_DIR))

    heldout.measure(trainer.accelerator.unwrap_model(trainer.model), "after")
    heldout.record(train_seconds_this_session=train_seconds)
    png = None
    if settings.plot:
        png = plot_curves(
            out / METRICS_FILE, out / CURVES_FILE, title=f"{config.loss_type} on {settings.dataset}"
        )
    how = "greedy" if settings.eval_temperature == 0 else f"T={settings.eval_temperature}"
    return TrainResult(
        output_dir=out,
        global_step=trainer.state.global_step,
        train_seconds=train_seconds,
        heldout={k: heldout.results[k] for k in ("before", "after") if k in heldout.results},
        eval_description=how,
        metrics_file=out / METRICS_FILE,
        final_dir=out / FINAL_DIR,
        curves_png=png,
    )
