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
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from accelerate import PartialState
from datasets import Dataset
from transformers.trainer_callback import PrinterCallback, ProgressCallback

from pacs_rl.data import (
    INSTRUCTION,
    DataError,
    Problem,
    arithmetic_pool_size,
    arithmetic_problems,
    benchmark_name,
    build_messages,
    load_problems,
    split_disjoint,
)
from pacs_rl.data.procedural import is_procedural, parse_query
from pacs_rl.models import load_tokenizer, resolve_model, save_tiny_model
from pacs_rl.rewards import load_reward_funcs, make_math_reward_func
from pacs_rl.rewards.graders import parse_grader
from pacs_rl.rewards.trl_reward import reward_spec_problem, split_reward_specs
from pacs_rl.training.callbacks import METRICS_FILE, MetricsJsonlCallback, RichProgressCallback
from pacs_rl.training.config import PACSConfig
from pacs_rl.training.heldout import heldout_accuracy, plot_curves
from pacs_rl.training.ppo import PPOConfig, PPOTrainer
from pacs_rl.training.rollout_eval import (
    CallOnTrainBegin,
    PeriodicEvalCallback,
    engine_accuracy,
    engine_pass_at_k,
    needs_engine,
)
from pacs_rl.training.trainer import PACS_STATE_FILE, PACSTrainer, last_complete_checkpoint, sharding_problems

log = logging.getLogger("pacs_rl.training")

HELDOUT_FILE = "heldout.json"
SETTINGS_FILE = "settings.json"
CURVES_FILE = "training_curves.png"
FINAL_DIR = "final"

# (config class, trainer class); each config class declares the loss types it serves.
TRAINERS: tuple[tuple[type[PACSConfig], type], ...] = ((PACSConfig, PACSTrainer), (PPOConfig, PPOTrainer))


# The grader `grader: auto` picks for the built-in arithmetic task: a PACS run there learned to answer
# "What is 33 - 51?" with "33 - 51", which math-verify evaluates; the restatement rule refuses exactly that.
ARITHMETIC_GRADER = "paper+restatement"
MODEL_DTYPES = ("auto", "float32", "bfloat16", "float16")


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
    problem_field: str | None = field(
        default=None,
        metadata={"help": "Column holding the problem text (default problem; also read from eval_dataset)."},
    )
    answer_field: str | None = field(
        default=None,
        metadata={
            "help": "Column holding the reference answer (default answer; also read from eval_dataset)."
        },
    )
    prompt_field: str | None = field(
        default=None,
        metadata={
            "help": "Column that already holds the prompt as chat messages, used as is (no instruction added); "
            "the problem text is then problem_field if present, else the last user message."
        },
    )
    instruction: str = field(
        default=INSTRUCTION,
        metadata={
            "help": "Appended to each problem in the user turn; default the paper's (Appendix B.1); '' = none."
        },
    )
    system_prompt: str | None = field(
        default=None,
        metadata={
            "help": "A system turn before each problem; default none (the chat template adds its own)."
        },
    )
    skip_bad_rows: bool = field(
        default=True,
        metadata={
            "help": "Skip bad data rows (counted and reported), as `pacs-rl eval` does by default; false stops at "
            "the first one."
        },
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
            "help": "Held-out problems; default: the held-out arithmetic split when training on arithmetic. A file "
            "or Hub dataset is read with the training set's field names, a named benchmark with its own."
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
    reward_funcs: str | list = field(
        default="math",
        metadata={
            "help": "Reward functions, comma-separated: math (the answer verifier, graded by `grader`) and/or your "
            "own as package.module:function or path/to/file.py:function, called as TRL calls reward functions "
            "(completions=..., prompts=..., one keyword per dataset column: answer, problem, problem_id). Weights: "
            "TRL's reward_weights."
        },
    )
    grader: str = field(
        default="auto",
        metadata={
            "help": "Grader of the math reward and the held-out accuracy: paper (math-verify as the PACS authors call "
            "it), strict (a \\boxed{} answer), either with +rules (restatement, multiple_boxed, echo). "
            f"auto = {ARITHMETIC_GRADER} on the built-in arithmetic task (a policy there learned "
            "to restate the question: '33 - 51' for 'What is 33 - 51?'), paper on any other data."
        },
    )
    model_dtype: str = field(
        default="auto",
        metadata={
            "help": "Dtype the weights load in: auto (float32; bfloat16/float16 under DeepSpeed or FSDP training in "
            "bf16/fp16, which keep fp32 master weights) | float32 | bfloat16 | float16. bf16 autocast is the "
            "config's `bf16`."
        },
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
        if self.grader != "auto":
            try:
                parse_grader(self.grader)
            except ValueError as e:
                out.append(f"grader={self.grader!r}: {e}")
        specs = split_reward_specs(self.reward_funcs) if isinstance(self.reward_funcs, (str, list)) else []
        if not specs:
            out.append(
                f"reward_funcs={self.reward_funcs!r}: name at least one, e.g. math or mypkg.rewards:my_reward"
            )
        out += [f"reward_funcs: {p}" for p in map(reward_spec_problem, specs) if p]
        if self.model_dtype not in MODEL_DTYPES:
            out.append(f"model_dtype={self.model_dtype!r}: choose one of {list(MODEL_DTYPES)}")
        return out

    def on_arithmetic(self) -> bool:
        """Whether the training set is the built-in arithmetic task."""
        return self.dataset == "arithmetic" or self.dataset.startswith("arithmetic?")

    def resolved_grader(self) -> str:
        """``grader`` with ``auto`` made concrete (ARITHMETIC_GRADER on the arithmetic task, else paper)."""
        if self.grader == "auto":
            return ARITHMETIC_GRADER if self.on_arithmetic() else "paper"
        return parse_grader(self.grader).name

    def prompt_kwargs(self, config: PACSConfig | None = None) -> dict[str, Any]:
        """The prompt settings as :func:`pacs_rl.data.format_prompt` takes them (``chat_template_kwargs`` is
        the trainer config's own field, which TRL applies to the training prompts)."""
        return {
            "system_prompt": self.system_prompt,
            "instruction": self.instruction,
            "chat_template_kwargs": getattr(config, "chat_template_kwargs", None),
        }


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
    "update_token_budget": 128,  # the backward in pieces of <= 128 completion tokens: peak memory, padding
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


def _field_names(settings: RunSettings) -> dict[str, str | None]:
    return {
        "problem_field": settings.problem_field,
        "answer_field": settings.answer_field,
        "prompt_field": settings.prompt_field,
    }


def _file_problems(settings: RunSettings) -> list[Problem]:
    problems = load_problems(
        settings.dataset,
        split=settings.dataset_split,
        limit=settings.train_size or None,
        on_error="skip" if settings.skip_bad_rows else "raise",
        **_field_names(settings),
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
    arithmetic = settings.on_arithmetic()
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
            source = settings.eval_dataset
            own_fields = benchmark_name(source) is not None or is_procedural(source)
            fields = {} if own_fields else _field_names(settings)
            held = list(load_problems(source, limit=settings.eval_size, on_error="skip", **fields))
    if held:
        train, dropped = split_disjoint(train, held)
        if dropped:
            log.info("dropped %d training problems that also appear in the held-out set", dropped)
    if not train:
        raise DataError(f"dataset {source!r} gave no usable training problems")
    return train, held


def build_dataset(problems: list[Problem], settings: RunSettings | None = None) -> Dataset:
    """The trainer's dataset, one row per problem: the chat prompt (the paper's unless the settings say
    otherwise, or the row's own messages), the gold answer, the problem text (the restatement rule's question)
    and the problem id."""
    settings = settings or RunSettings()
    return Dataset.from_list(
        [
            {
                "prompt": build_messages(p.problem, settings.system_prompt, settings.instruction, p.messages),
                "answer": p.answer,
                "problem": p.problem,
                "problem_id": p.id,
            }
            for p in problems
        ]
    )


def build_reward_funcs(settings: RunSettings, config: PACSConfig) -> list:
    """The trainer's reward functions (``reward_funcs``; the math one graded by the resolved grader).

    Raises SettingsError for a function that cannot be imported, or reward_weights of another length."""
    try:
        funcs = load_reward_funcs(settings.reward_funcs, grader=settings.resolved_grader())
    except ValueError as e:
        raise SettingsError(f"reward_funcs={settings.reward_funcs!r}: {e}") from None
    weights = getattr(config, "reward_weights", None)
    if weights is not None and len(weights) != len(funcs):
        raise SettingsError(
            f"reward_weights={list(weights)} has {len(weights)} weight(s) for {len(funcs)} reward function(s) "
            f"({settings.reward_funcs!r}); give one weight per function."
        )
    return funcs


def heldout_reward(settings: RunSettings):
    """What held-out accuracy counts: the math verifier with the run's resolved grader."""
    return make_math_reward_func(settings.resolved_grader())


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
    already_complete: bool = False  # resumed a run that had finished: nothing was trained
    device: str = ""  # where this call trained ("cuda:0", "cpu"); empty when it trained nothing


TINY_MODEL = "tiny"  # --model tiny: a tiny random model for smoke runs and launch checks
BASE_MODEL_DIR = "base_model"  # where --model tiny is saved inside the run folder
DONE_FILE = "run_complete.json"  # written last: the run finished (final/, held-out after, curves)


def tiny_model_folder(folder: Path) -> Path:
    """A tiny random model (pacs_rl.models.save_tiny_model, seed 0) saved in ``folder`` once."""
    if not (folder / "config.json").is_file():
        save_tiny_model(folder, seed=0)
    return folder


def training_engine(config: PACSConfig, num_processes: int) -> str:
    """How the weights are trained: 'deepspeed', 'fsdp' (from the config or `accelerate launch`'s environment),
    'ddp' (several processes) or 'single'."""
    env = os.environ
    if config.deepspeed or env.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return "deepspeed"
    if config.fsdp or env.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        return "fsdp"
    return "ddp" if num_processes > 1 else "single"


def load_dtype(settings: RunSettings, config: PACSConfig, engine: str) -> str:
    """The dtype the policy's weights load in: model_init_kwargs['dtype'] or model_dtype when set; else
    bfloat16 (float16) for DeepSpeed and FSDP training in bf16 (fp16), which keep fp32 master weights of their own
    (DeepSpeed's optimizer partitions, accelerate's FSDP upcast), and float32 otherwise: one process or DDP
    train the loaded weights themselves, and bf16 weights under AdamW lose updates below bf16's resolution
    (a 1e-6 step on a weight of 0.01 is 1e-4 of it; bf16 resolves 4e-3). bf16 autocast computes in bf16 either way."""
    given = (config.model_init_kwargs or {}).get("dtype")
    if given is not None:
        return str(given).removeprefix("torch.")
    if settings.model_dtype != "auto":
        return settings.model_dtype
    if engine in ("deepspeed", "fsdp") and (config.bf16 or config.fp16):
        return "bfloat16" if config.bf16 else "float16"
    return "float32"


def model_init_kwargs(settings: RunSettings, config: PACSConfig, engine: str) -> dict[str, Any]:
    """The keyword arguments TRL loads the policy with: the config's model_init_kwargs, the resolved dtype, and
    device_map=None under DeepSpeed and FSDP (ZeRO-3's partitioned init and FSDP's loading place the weights;
    TRL would pick device_map='auto' for FSDP)."""
    kwargs = dict(config.model_init_kwargs or {})
    kwargs["dtype"] = load_dtype(settings, config, engine)
    if engine in ("deepspeed", "fsdp"):
        kwargs.setdefault("device_map", None)
    return kwargs


def zero_stage(config: PACSConfig) -> int:
    """The DeepSpeed ZeRO stage of a run: from the `deepspeed` setting (a dict or a JSON file), else from
    `accelerate launch`'s environment (its --deepspeed_config_file, else its --zero_stage); 0 without DeepSpeed."""
    ds = config.deepspeed or os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    if isinstance(ds, str) and Path(ds).is_file():
        ds = json.loads(Path(ds).read_text())
    if isinstance(ds, Mapping):
        return int((ds.get("zero_optimization") or {}).get("stage", 0) or 0)
    return int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "0") or 0)


def start_deepspeed_comm(config: PACSConfig, engine: str, num_processes: int) -> None:
    """Start DeepSpeed's communication over the processes' gloo group on CPU, before the weights load.

    With use_cpu=True transformers sets up plain gloo and leaves DeepSpeed's own layer unstarted (it starts it only
    on an accelerator); ZeRO-3's partitioned loading then reads a world size of 1 from it and refuses the
    `deepspeed` setting's batch sizes ("train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step *
    world_size"). On GPUs transformers starts it itself."""
    if engine != "deepspeed" or not config.use_cpu or num_processes < 2:
        return
    from deepspeed import comm

    if not comm.is_initialized():
        comm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)


def run_problems(settings: RunSettings, config: PACSConfig, engine: str = "single") -> list[str]:
    """Settings of a run that conflict with each other or that the run would not act on, each naming the setting
    and what to do (empty when all is well). Checked before any model loads, and by `pacs-rl train --dry-run`.
    engine: training_engine() of the run."""
    out = []
    sharded = engine == "fsdp" or (engine == "deepspeed" and zero_stage(config) == 3)
    if config.fast_sampler and not config.use_vllm and sharded:
        out.append(
            "fast_sampler=True samples with each process's local model, which holds only a shard under "
            f"{'FSDP' if engine == 'fsdp' else 'DeepSpeed ZeRO-3'}: set fast_sampler=false (TRL's generate gathers "
            "the weights) or use_vllm=true (the CPU default's layer turns fast_sampler on)"
        )
    stage = zero_stage(config) if engine == "deepspeed" else None
    out += sharding_problems(
        config.reference, config.reset_optimizer and config.ref_reset_steps > 0, stage, engine == "fsdp"
    )
    given = (config.model_init_kwargs or {}).get("dtype")
    if (
        given is not None
        and settings.model_dtype != "auto"
        and str(given).removeprefix("torch.") != settings.model_dtype
    ):
        out.append(
            f"model_dtype={settings.model_dtype!r} and model_init_kwargs dtype={given!r} disagree: set only one"
        )
    eval_strategy = getattr(config.eval_strategy, "value", config.eval_strategy)
    if eval_strategy != "no":
        out.append(
            f"eval_strategy={eval_strategy!r}: `pacs-rl train` does not run TRL's evaluate() (it has no "
            "eval_dataset); for an evaluation during training set eval_steps (pass@k on the held-out set every "
            "eval_steps optimizer steps) and leave eval_strategy at 'no'"
        )
    if config.eval_steps is not None:
        n = config.num_generations_eval or 1
        if float(config.eval_steps) < 1 or float(config.eval_steps) != int(config.eval_steps):
            out.append(f"eval_steps={config.eval_steps}: give a whole number of optimizer steps >= 1")
        if not settings.eval_size:
            out.append(f"eval_steps={config.eval_steps} needs a held-out set: set eval_size > 0")
        if n > 1 and settings.eval_temperature == 0:
            out.append(
                f"eval_steps with num_generations_eval={n} samples per problem at eval_temperature=0 (greedy) draws "
                f"{n} identical answers: set eval_temperature (the paper: 0.6) or num_generations_eval=1"
            )
    return out


def resume_point(out: Path, resume: bool, config: PACSConfig, world: int) -> tuple[str | None, bool]:
    """(the checkpoint a resumed run continues from, whether the run already reached its last step).

    Refuses to start over a folder that holds checkpoints, and to resume a checkpoint written by another number of
    processes (each process saved its own rollout batch and random state: they cannot be re-sharded exactly)."""
    if not resume:
        if out.exists() and any(out.glob("checkpoint-*")):
            raise SettingsError(
                f"{out} already holds checkpoints: pass --resume to continue it, or another --output-dir"
            )
        return None, False
    checkpoint = last_complete_checkpoint(out)
    if checkpoint is None:
        raise SettingsError(f"--resume: no complete checkpoint-* folder in {out}")
    saved = len(list(Path(checkpoint).glob(PACS_STATE_FILE.format(rank="*"))))
    if saved and saved != world:
        raise SettingsError(
            f"--resume: {checkpoint} was written by {saved} processes and this run has {world}. Each process saved "
            f"its own rollout batch and random state, which cannot be re-sharded exactly: resume on {saved} "
            f"processes (accelerate launch --num_processes {saved} ...), or start a new run in another --output-dir"
        )
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


class _HeldOut:
    """Held-out accuracy before and after training, kept in OUT/heldout.json (a resumed run keeps "before").

    One process without vLLM: `heldout_accuracy` on the local model (the fast sampler). Several processes, sharded
    weights or vLLM: the trainer's own engine, each process a share of the problems, gathered
    (`rollout_eval.engine_accuracy`). Only the main process writes the file."""

    def __init__(self, settings: RunSettings, config: PACSConfig, problems, reward, out: Path):
        self.settings, self.config, self.problems, self.reward = settings, config, problems, reward
        self.path = out / HELDOUT_FILE
        self.results = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def measure(self, trainer, when: str) -> None:
        if not self.problems or (when == "before" and "before" in self.results):
            return
        s, c = self.settings, self.config
        tokens = s.eval_max_new_tokens or c.max_completion_length
        if needs_engine(trainer):
            result = engine_accuracy(
                trainer,
                self.problems,
                s.eval_temperature,
                1.0,
                tokens,
                self.reward,
                s.eval_batch_size,
                c.seed,
                prompt_kwargs=s.prompt_kwargs(c),
            )
        else:
            result = heldout_accuracy(
                trainer.accelerator.unwrap_model(trainer.model),
                trainer.processing_class,
                self.problems,
                tokens,
                s.eval_batch_size,
                s.eval_temperature,
                seed=c.seed,
                reward_func=self.reward,
                description=f"held-out, {when}",
                prompt_kwargs=s.prompt_kwargs(c),
            )
        self.results[when] = result
        self.record()

    def record(self, **extra: Any) -> None:
        if self.results:
            self.results.update(extra)
            if PartialState().is_main_process:
                self.path.write_text(json.dumps(self.results, indent=2))


def _periodic_eval(trainer, settings: RunSettings, config: PACSConfig, problems, reward):
    """pass@k on the held-out set with num_generations_eval samples per problem (rollout_eval.engine_pass_at_k)."""
    n = config.num_generations_eval or 1
    top_p = config.top_p if settings.eval_temperature > 0 else 1.0
    tokens = settings.eval_max_new_tokens or config.max_completion_length

    def evaluate() -> dict[str, float]:
        return engine_pass_at_k(
            trainer, problems, n, settings.eval_temperature, top_p, tokens, reward, settings.eval_batch_size,
            config.seed, settings.prompt_kwargs(config),
        )  # fmt: skip

    return PeriodicEvalCallback(trainer, int(config.eval_steps), evaluate)


def run_training(settings: RunSettings, config: PACSConfig, *, resume: bool = False) -> TrainResult:
    """Train ``config.loss_type`` on ``settings.dataset`` into ``config.output_dir``: held-out accuracy before,
    training, the final model, held-out accuracy after, the curves. ``resume`` continues the run in that
    folder from its newest complete checkpoint; a run that already finished is left as it is
    (``already_complete``). Raises SettingsError (a ValueError) for a setting that cannot be used, before any
    model is loaded.

    On several processes (`accelerate launch`) every process loads the data and its copy of the weights (TRL
    loads them from the name, in the training dtype, placed by accelerate; ZeRO-3 partitioned), the held-out
    evaluations run once across all processes, and only the main process writes files."""
    out = Path(config.output_dir)
    state = PartialState()
    engine = training_engine(config, state.num_processes)
    problems = run_problems(settings, config, engine)
    if problems:
        raise SettingsError("; ".join(problems))
    if config.use_cpu and torch.cuda.is_available():
        log.warning(
            "CUDA is available but use_cpu=True (the CPU default's layer): set use_cpu=false to train on it"
        )
    checkpoint, complete = resume_point(out, resume, config, state.num_processes)
    if complete and (out / DONE_FILE).is_file():
        return _result(settings, config, out, already_complete=True)
    torch.manual_seed(config.seed)
    train_problems, held = load_run_data(settings, config.seed)  # before the model loads: fail fast
    if state.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        settings_record = {"run": dataclasses.asdict(settings), "config": _non_default_fields(config)}
        (out / SETTINGS_FILE).write_text(json.dumps(settings_record, indent=2, default=str))
    with state.main_process_first():  # --model tiny is written once; the bundled model converts once
        model_id = (
            str(tiny_model_folder(out / BASE_MODEL_DIR))
            if settings.model == TINY_MODEL
            else resolve_model(settings.model)
        )
    # read by TRL when it loads the model
    config.model_init_kwargs = model_init_kwargs(settings, config, engine)
    init = config.model_init_kwargs
    tokenizer = load_tokenizer(
        model_id,
        revision=init.get("revision"),
        trust_remote_code=init.get("trust_remote_code", config.trust_remote_code),
    )
    # DeepSpeed builds its engine only inside train(): without it transformers can neither load a checkpoint into
    # the bare model (ZeRO-3 holds a shard of each weight) nor save it. A run that finished training takes its
    # last checkpoint's consolidated weights as the model, and final/ is a copy of them.
    finish_from_weights = complete and engine == "deepspeed"
    if finish_from_weights:
        model_id = _consolidated_weights(checkpoint)
    rewards = build_reward_funcs(settings, config)
    reward = heldout_reward(settings)
    heldout = _HeldOut(settings, config, held, reward, out)

    start_deepspeed_comm(config, engine, state.num_processes)
    _, trainer_cls = config_and_trainer_classes(config.loss_type)
    trainer = trainer_cls(
        model_id,
        rewards,
        args=config,
        train_dataset=build_dataset(train_problems, settings),
        processing_class=tokenizer,
        callbacks=[MetricsJsonlCallback()],
        peft_config=_peft_config(settings),
    )
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    if needs_engine(trainer):
        # once the engine has placed (or sharded) the model, before the first step of a fresh run
        trainer.add_callback(
            CallOnTrainBegin(lambda st: st.global_step or heldout.measure(trainer, "before"))
        )
    elif checkpoint is None:
        # one process: the weights as loaded, before accelerate wraps the forward in (bf16) autocast
        heldout.measure(trainer, "before")
    trainer.add_callback(RichProgressCallback(config.loss_type))  # after the "before" evaluation's own bar
    if config.eval_steps:
        trainer.add_callback(_periodic_eval(trainer, settings, config, held, reward))
    t0 = time.time()
    if complete:  # the last checkpoint is the last step: finish the run from it, without another step
        if not finish_from_weights:
            trainer._load_from_checkpoint(checkpoint)
    else:
        trainer.train(resume_from_checkpoint=checkpoint)
    train_seconds = time.time() - t0
    if finish_from_weights:
        if state.is_main_process:
            shutil.copytree(checkpoint, out / FINAL_DIR, dirs_exist_ok=True, ignore=_not_model_files)
        state.wait_for_everyone()
    else:
        trainer.save_model(str(out / FINAL_DIR))
    if state.is_main_process:
        tokenizer.save_pretrained(str(out / FINAL_DIR))
    heldout.measure(trainer, "after")
    heldout.record(train_seconds_this_session=train_seconds)
    # resuming a complete run loads the weights only: its step count is the checkpoint's
    global_step = int(_trainer_state(checkpoint)["global_step"]) if complete else trainer.state.global_step
    if state.is_main_process:
        if settings.plot:
            plot_curves(
                out / METRICS_FILE, out / CURVES_FILE, title=f"{config.loss_type} on {settings.dataset}"
            )
        (out / DONE_FILE).write_text(json.dumps({"global_step": global_step}))
    state.wait_for_everyone()
    device = str(trainer.accelerator.device)
    return _result(settings, config, out, train_seconds=train_seconds, global_step=global_step, device=device)


def _trainer_state(checkpoint: str) -> dict[str, Any]:
    """transformers' trainer_state.json of a checkpoint folder (global_step, max_steps, log history)."""
    return json.loads((Path(checkpoint) / "trainer_state.json").read_text())


def _result(settings: RunSettings, config: PACSConfig, out: Path, **values: Any) -> TrainResult:
    """The TrainResult of the run in ``out`` as its files record it."""
    held = json.loads((out / HELDOUT_FILE).read_text()) if (out / HELDOUT_FILE).is_file() else {}
    if "global_step" not in values:
        values["global_step"] = json.loads((out / DONE_FILE).read_text())["global_step"]
    png = out / CURVES_FILE
    return TrainResult(
        output_dir=out,
        train_seconds=values.pop("train_seconds", 0.0),
        heldout={k: held[k] for k in ("before", "after") if k in held},
        eval_description="greedy" if settings.eval_temperature == 0 else f"T={settings.eval_temperature}",
        metrics_file=out / METRICS_FILE,
        final_dir=out / FINAL_DIR,
        curves_png=png if settings.plot and png.is_file() else None,
        **values,
    )
