"""The settings of `pacs-rl train` and every check that needs neither torch nor TRL, so that a mistake is
answered in a second, before they load (`pacs_rl.training.run` re-exports all of it):

- `RunSettings`: what a run trains on and reports (the data and prompt settings are
  `pacs_rl.settings.DataSettings`, shared with `pacs-rl eval` and `compare`); `CPU_DEFAULTS`: the trainer config
  of the CPU default run;
- the name and type of every trainer config field (TRL's `GRPOConfig`, `PACSConfig`, `PPOConfig`) as a table,
  which tests/test_trl_contract.py keeps equal to the installed classes;
- `split_settings` turns one flat mapping (a YAML file, `--set key=value`, a comparison's train section) into
  (RunSettings, config keyword arguments), each text value typed once (`coerce_setting`);
- `preflight`: the paths, the model name, the data (read here when local) and the installed packages of a run.

Every refusal is a `SettingsError` (a `ValueError`) naming the setting and what to do.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pacs_rl.data import (
    DataError,
    Problem,
    ProblemSet,
    arithmetic_pool_size,
    arithmetic_problems,
    benchmark_name,
    hub_dataset,
    load_problems,
    split_disjoint,
)
from pacs_rl.data.procedural import is_procedural, parse_query
from pacs_rl.models import hub_unreachable, model_problem
from pacs_rl.rewards.graders import TRAINING_GRADER, parse_grader, reward_spec_problem, split_reward_specs
from pacs_rl.settings import (
    DataSettings,
    SettingsError,
    canonical_key,
    missing_packages,
    output_dir_problem,
    read_yaml,
    rename_keys,
    unknown_name,
)
from pacs_rl.training.batch import group_split_problem

if TYPE_CHECKING:
    from pacs_rl.training.config import PACSConfig

log = logging.getLogger("pacs_rl.training")

MODEL_DTYPES = ("auto", "float32", "bfloat16", "float16")
# The held-out arithmetic problems are drawn with this seed whatever the run's seed: every seed of a
# comparison is measured on the same problems (a seed-dependent set added its own variance to the spread
# over seeds). It is the set seed 0 drew before.
HELDOUT_SEED = 10_000

# The registered losses of pacs_rl.algorithms, named here so that a name is checked without importing torch
# (loss_type_names() reads the registry itself once it is loaded; a test keeps the two equal). A critic loss is
# served by PPOConfig, whose own fields (CRITIC_FIELDS) apply to it alone.
LOSS_TYPES = ("pacs", "grpo", "dr_grpo", "rloo", "cw_grpo", "ppo")
CRITIC_LOSS_TYPES = ("ppo",)
CRITIC_FIELDS = (
    "critic_model_name_or_path", "critic_learning_rate", "critic_max_grad_norm", "critic_loss_agg_mode",
    "critic_warmup_steps", "gae_gamma", "gae_lambda", "value_clip_eps", "whiten_advantages",
)  # fmt: skip

# The declared type of every trainer config field (GRPOConfig, PACSConfig, PPOConfig: PPOConfig has them all)
# as text, module paths dropped (`type_text`): type -> field names.
_CONFIG_TYPES: dict[str, str] = {
    "bool": (
        "average_tokens_across_devices fp16 bf16_full_eval fp16_full_eval torch_compile use_liger_kernel "
        "use_cache auto_find_batch_size logging_first_step log_on_each_node logging_nan_inf_filter "
        "prediction_loss_only eval_on_start eval_do_concat_batches eval_use_gather_object batch_eval_metrics "
        "save_only_model save_on_each_node enable_jit_checkpoint push_to_hub hub_always_push "
        "load_best_model_at_end ignore_data_skip restore_callback_states_from_checkpoint full_determinism "
        "use_cpu dataloader_drop_last dataloader_pin_memory dataloader_persistent_workers dataloader_in_order "
        "skip_memory_metrics do_train do_eval do_predict trust_remote_code disable_dropout "
        "cast_lm_head_to_fp32 ds3_gather_for_generation use_vllm vllm_enable_sleep_mode "
        "mask_truncated_completions sync_ref_model use_adaptive_entropy use_bias_correction_kl "
        "log_completions log_multimodal log_unique_prompts use_transformers_continuous_batching "
        "use_transformers_paged pacs_weighted reset_optimizer reject_non_binary_rewards fast_sampler "
        "old_logprobs_from_sampler shared_prompt_forward whiten_advantages"
    ),
    "float": (
        "num_train_epochs learning_rate warmup_steps weight_decay adam_beta1 adam_beta2 adam_epsilon "
        "label_smoothing_factor logging_steps eval_delay save_steps temperature top_p repetition_penalty "
        "vllm_server_timeout vllm_gpu_memory_utilization beta epsilon sapo_temperature_neg "
        "sapo_temperature_pos vespo_k_pos vespo_lambda_pos vespo_k_neg vespo_lambda_neg ref_model_mixup_alpha "
        "top_entropy_quantile entropy_coef entropy_coef_min entropy_coef_max entropy_coef_delta "
        "entropy_target pacs_beta critic_learning_rate gae_gamma gae_lambda value_clip_eps"
    ),
    "str | None": (
        "output_dir optim_args torch_compile_backend torch_compile_mode run_name trackio_space_id "
        "trackio_bucket_id hub_token hub_model_id hub_revision metric_for_best_model "
        "dataloader_multiprocessing_context ddp_backend fsdp resume_from_checkpoint cache_implementation "
        "vllm_structured_outputs_regex vllm_server_base_url log_completions_hub_repo fast_sampler_dtype "
        "critic_model_name_or_path"
    ),
    "int": (
        "per_device_train_batch_size max_steps gradient_accumulation_steps per_device_eval_batch_size seed "
        "dataloader_num_workers ddp_timeout local_rank top_k vllm_server_port vllm_group_port "
        "vllm_tensor_parallel_size num_iterations ref_model_sync_steps ref_reset_steps "
        "fast_sampler_batch_size critic_warmup_steps"
    ),
    "str": (
        "log_level log_level_replica project train_sampling_strategy length_column_name vllm_mode "
        "vllm_model_impl vllm_server_host importance_sampling_level multi_objective_aggregation scale_rewards "
        "loss_type vllm_importance_sampling_mode pacs_score reference logprob_impl critic_loss_agg_mode"
    ),
    "int | None": (
        "torch_empty_cache_steps eval_accumulation_steps save_total_limit data_seed "
        "dataloader_prefetch_factor ddp_bucket_cap_mb num_generations num_generations_eval "
        "max_completion_length generation_batch_size steps_per_generation vllm_max_model_length "
        "max_tool_calling_iterations num_completions_to_print mini_batches_per_rollout update_token_budget"
    ),
    "bool | None": (
        "bf16 tf32 activation_checkpointing gradient_checkpointing disable_tqdm hub_private_repo "
        "greater_is_better remove_unused_columns ddp_find_unused_parameters ddp_broadcast_buffers "
        "ddp_static_graph shuffle_dataset vllm_importance_sampling_correction"
    ),
    "float | None": (
        "max_grad_norm neftune_noise_alpha eval_steps router_aux_loss_coef min_p delta epsilon_high "
        "vllm_importance_sampling_clip_max vllm_importance_sampling_clip_min off_policy_mask_threshold "
        "vllm_importance_sampling_cap critic_max_grad_norm"
    ),
    "dict | str | None": (
        "lr_scheduler_kwargs accelerator_config deepspeed generation_kwargs chat_template_kwargs "
        "transformers_continuous_batching_config loss_options vllm_engine_kwargs"
    ),
    "dict[str, Any] | str | None": "activation_checkpointing_kwargs gradient_checkpointing_kwargs fsdp_config model_init_kwargs",
    "None | str | list[str]": "optim_target_modules report_to",
    "IntervalStrategy | str": "logging_strategy eval_strategy",
    "SchedulerType | str": "lr_scheduler_type",
    "OptimizerNames | str": "optim",
    "dict[str, bool] | None": "liger_kernel_config",
    "str | bool": "include_num_input_tokens_seen",
    "Union[str, NoneType, Literal[False]]": "trackio_static_space_id",
    "list[str]": "include_for_metrics",
    "SaveStrategy | str": "save_strategy",
    "HubStrategy | str": "hub_strategy",
    "ParallelismConfig | None": "parallelism_config",
    "list[str] | None": "label_names",
    "str | list[DebugOption]": "debug",
    "int | str | None": "pad_to_multiple_of",
    "list[float] | None": "reward_weights",
}
CONFIG_TYPES: dict[str, str] = {name: kind for kind, names in _CONFIG_TYPES.items() for name in names.split()}


@dataclass
class RunSettings(DataSettings):
    """What a run trains on and reports, beside the trainer's config (the "run keys"); the data and prompt
    settings (split, problem_field, answer_field, prompt_field, instruction, system_prompt, skip_bad_rows) are
    :class:`pacs_rl.settings.DataSettings`', shared with `pacs-rl eval` and `compare`."""

    model: str = field(
        default="smollm2-135m",
        metadata={
            "help": "Bundled alias (smollm2-135m), tiny (a tiny random model), Hub id or local folder."
        },
    )
    dataset: str = field(
        default="arithmetic",
        metadata={
            "help": "Training problems: arithmetic[?n=..&ops=..&digits=..] | reasoning_gym:<task> | a .jsonl/.json/"
            ".parquet file | a Hub dataset id | a benchmark name."
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
    max_prompt_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Drop training prompts longer than this many tokens after the chat template (counted and "
            "reported when the run starts; verl's data.max_prompt_length with filter_overlong_prompts; the paper: "
            "512). The dry run's memory plan takes it as the longest prompt. None: keep every prompt."
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
    eval_top_p: float = field(
        default=1.0,
        metadata={
            "help": "Held-out nucleus sampling (top-p) with eval_temperature > 0, for the before/after accuracy and "
            "the eval_steps evaluation (the paper: 0.95); greedy ignores it."
        },
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
        default=TRAINING_GRADER,
        metadata={
            "help": "Grader of the math reward and the held-out accuracy: sound (one committed final answer, a number "
            "where the gold is one, never the question given back: a policy cannot be paid for an answer it did not "
            "work out), paper (math-verify as the PACS authors call it; pays restated questions and unevaluated "
            "expressions), strict (a \\boxed{} answer), paper or strict with +rules (restatement, multiple_boxed, "
            "echo). auto is the old name of the default."
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
    num_threads: int | None = field(
        default=None,
        metadata={
            "help": "torch CPU threads of each training process (torch.set_num_threads); default torch's own (one "
            "per core). 1 makes a run repeat itself bit for bit on one machine: with 2 threads two runs of the "
            "same command part in the 7th digit within a few steps (docs/benchmarks/repeatability.json), and "
            "after that their samples."
        },
    )
    mini_batch_prompts: int | None = field(
        default=None,
        metadata={
            "help": "The prompts per optimizer step these settings are written for (verl's ppo_mini_batch_size; "
            "the paper: 256). Checked, not applied: the run's own is per_device_train_batch_size x "
            "gradient_accumulation_steps x processes / num_generations, so it changes with the number of "
            "processes; where the two differ, the dry run's first lines and the run's start say by how much and "
            "which gradient_accumulation_steps gives it back."
        },
    )

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
        if not isinstance(self.eval_top_p, (int, float)) or not 0 < self.eval_top_p <= 1:
            out.append(f"eval_top_p={self.eval_top_p!r}: give a number in (0, 1] (1 = no nucleus cut)")
        for name in ("max_prompt_tokens", "mini_batch_prompts", "num_threads"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                out.append(f"{name}={value!r}: give a whole number >= 1, or null")
        if self.grader != "auto":  # the old default's name, still accepted
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
        """``grader`` in its canonical name (``auto``, the old default's name, is the training grader)."""
        if self.grader == "auto":
            return TRAINING_GRADER
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
    "bf16": None,  # unset: fp32 on a CPU (bf16 learned less there so far: device.CPU_BF16_DEFAULT), bf16 on GPUs
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
    "fast_sampler_dtype": None,  # the model's fp32; bfloat16 with bf16 on a CPU (device.CPU_BF16)
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


# ---------------------------------------------------------------------------------------------------- names
def run_fields() -> dict[str, dataclasses.Field]:
    """The run keys: RunSettings' fields (the data settings included)."""
    return {f.name: f for f in dataclasses.fields(RunSettings)}


def known_keys() -> list[str]:
    """Every setting name: the run keys and every field of every trainer config class."""
    return sorted(set(run_fields()) | set(CONFIG_TYPES))


def default_settings() -> dict[str, Any]:
    """The CPU default run as one flat mapping (what `pacs-rl train` runs with no arguments)."""
    return {**dataclasses.asdict(RunSettings()), **CPU_DEFAULTS}


def loss_type_names() -> tuple[str, ...]:
    """The loss types a run may name: the registry's once pacs_rl.algorithms is loaded (a loss registered from
    your code included), else LOSS_TYPES (without importing torch)."""
    registry = sys.modules.get("pacs_rl.algorithms.registry")
    return tuple(registry.loss_names()) if registry is not None else LOSS_TYPES


def type_text(annotation: Any) -> str:
    """A field's declared type as text, module paths dropped: 'int', 'float | None', 'SchedulerType | str'."""
    import re

    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+", "", text)


def setting_type(key: str) -> str:
    """The declared type of setting ``key`` as text ('float', 'int | None', ...)."""
    f = run_fields().get(key)
    return type_text(f.type) if f is not None else CONFIG_TYPES.get(key, "str")


_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")
_PLAIN = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}


def coerce_setting(key: str, value: Any) -> Any:
    """Convert ``value`` to the declared type of setting ``key`` when it arrives as text (from a command
    line, or a YAML file that reads 1e-5 as a string); check a value of a plain type (int, float, bool, str,
    or one of them or None) that arrives as another type. Raises SettingsError naming the key."""
    kind = setting_type(key)
    if not isinstance(value, str):
        plain = _PLAIN.get(kind.removesuffix(" | None"))
        wrong = isinstance(value, bool) and bool not in (plain or (bool,))
        if plain and value is not None and (wrong or not isinstance(value, plain)):
            raise SettingsError(f"{key}={value!r}: expected {kind}")
        return value
    low = value.strip().lower()
    if low == "null" or (low == "none" and "str" not in kind):
        return None
    takes_text = "str" in kind
    if "bool" in kind:
        if low in _TRUE + _FALSE:
            return low in _TRUE
        if not (takes_text or "int" in kind or "float" in kind):
            raise SettingsError(f"{key}={value!r}: expected a bool (true or false)")
    try:
        if "float" in kind:
            return float(value)
        if "int" in kind:
            return int(value)
    except ValueError:
        if not takes_text:
            raise SettingsError(f"{key}={value!r}: expected {kind}") from None
    return value


def check_keys(keys, where: str) -> None:
    """Refuse unknown setting names, naming the close matches."""
    known = known_keys()
    for key in keys:
        if key not in known:
            raise SettingsError(unknown_name(key, known, where, "See `pacs-rl train --list-keys`."))


def split_settings(
    values: Mapping[str, Any], where: str = "the settings"
) -> tuple[RunSettings, dict[str, Any]]:
    """One flat mapping of settings -> (RunSettings, the config's keyword arguments), each value converted to
    its field's type. Unknown names are refused with close matches; other spellings (TRL's model_name_or_path,
    an older dataset_split) are taken under their names."""
    values = rename_keys(values, where)
    check_keys(values, where)
    typed = {k: coerce_setting(k, v) for k, v in values.items()}
    run_keys = run_fields()
    settings = RunSettings(**{k: v for k, v in typed.items() if k in run_keys})
    return settings, {k: v for k, v in typed.items() if k not in run_keys}


def load_settings_file(path: str | Path, notes: list[str] | None = None) -> dict[str, Any]:
    """A YAML file of settings (`setting: value` per line) as a dict, keys under their current names; unknown
    names and YAML syntax errors (file:line:column) are refused. ``notes`` gets a line per older spelling."""
    data = rename_keys(read_yaml(path), str(path), notes)
    check_keys(data, str(path))
    return data


def parse_assignments(
    items: list[str], where: str = "--set", notes: list[str] | None = None
) -> dict[str, Any]:
    """``["learning_rate=1e-5", "pacs_weighted=false"]`` -> a dict; each value read as YAML, then typed by
    :func:`split_settings`. Unknown names are refused."""
    out = {}
    for item in items:
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise SettingsError(f"{where} {item!r}: expected key=value, e.g. {where} learning_rate=1e-5")
        key = canonical_key(key.strip(), where, notes)
        try:
            out[key] = yaml.safe_load(text)
        except yaml.YAMLError:
            out[key] = text
    check_keys(out, where)
    return out


# ---------------------------------------------------------------------------------------------------- checks
def rollout_prompts(cfg: Mapping[str, Any], num_processes: int) -> int | None:
    """Prompts per rollout batch (TRL's generation_batch_size / num_generations) as PACSConfig derives it from
    the flat config values; None when a value it needs is not given (the config then decides)."""
    try:
        G, per_device = int(cfg["num_generations"]), int(cfg["per_device_train_batch_size"])
        ga = int(cfg.get("gradient_accumulation_steps", 1))
        if cfg.get("generation_batch_size") is not None:
            return int(cfg["generation_batch_size"]) // G
        steps = cfg.get("mini_batches_per_rollout")
        steps = int(steps) * ga if steps is not None else cfg.get("steps_per_generation") or 4 * ga
        return per_device * int(steps) * num_processes // G
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def too_few_problems(count: int, per_rollout: int, source: str) -> str | None:
    """Why ``count`` training problems would train no step at all: TRL's sampler only draws whole rollout
    batches of ``per_rollout`` prompts (None when there is at least one)."""
    if count >= per_rollout:
        return None
    return (
        f"dataset {source!r} gives {count} usable training problem(s), fewer than one rollout batch of "
        f"{per_rollout} prompts, so no step would be trained: give more problems, or a smaller rollout batch "
        "(mini_batches_per_rollout, gradient_accumulation_steps, per_device_train_batch_size)"
    )


def max_steps_problem(steps: Any) -> str | None:
    """Why ``max_steps`` would train nothing (0) or means nothing (below -1); None when it is fine."""
    if isinstance(steps, int) and (steps == 0 or steps < -1):
        return f"max_steps={steps}: give a number of optimizer steps >= 1 (or -1 to train num_train_epochs epochs)"
    return None


def config_problems(cfg: Mapping[str, Any], installed: bool = True) -> list[str]:
    """The trainer config values refused before TRL loads: the loss name, a critic field without the critic
    loss, max_steps, a batch that splits a group, and (``installed``) an engine or tracker that is not installed
    here."""
    out = []
    loss_type = str(cfg.get("loss_type", "pacs"))
    names = loss_type_names()
    if loss_type not in names:
        out.append(f"loss_type={loss_type!r} is not a registered policy loss; use one of {', '.join(names)}")
    stray = [k for k in CRITIC_FIELDS if k in cfg]
    if stray and loss_type not in CRITIC_LOSS_TYPES:
        out.append(f"{', '.join(stray)} only apply to loss_type='ppo' (got loss_type={loss_type!r})")
    steps = max_steps_problem(cfg.get("max_steps"))
    out += [steps] if steps else []
    split = group_split_problem(
        cfg.get("per_device_train_batch_size"), cfg.get("num_generations"), cfg.get("generation_batch_size")
    )
    out += [split] if split else []
    return out + (missing_packages(cfg) if installed else [])


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest `checkpoint-N` folder whose save finished (it holds trainer_state.json), or None."""
    if not os.path.isdir(output_dir):
        return None
    best, best_step = None, -1
    for name in os.listdir(output_dir):
        if not name.startswith("checkpoint-"):
            continue
        try:
            step = int(name.split("-", 1)[1])
        except ValueError:
            continue
        path = os.path.join(output_dir, name)
        if os.path.isfile(os.path.join(path, "trainer_state.json")) and step > best_step:
            best, best_step = path, step
    return best


def output_folder_problem(out: str | Path, resume: bool) -> str | None:
    """Why a run cannot write into ``out`` (a file, a folder of checkpoints without --resume, --resume without
    a complete checkpoint); None when it can."""
    problem = output_dir_problem(out)
    if problem:
        return problem
    out = Path(out)
    if not resume:
        if out.is_dir() and any(out.glob("checkpoint-*")):
            return f"{out} already holds checkpoints: pass --resume to continue it, or another --output-dir"
        return None
    if last_complete_checkpoint(out) is None:
        return f"--resume: no complete checkpoint-* folder in {out}"
    return None


RECORD_FILE = "settings.json"  # what a run folder records of its settings (pacs_rl.training.run writes it)
FINISHED_FILE = "run_complete.json"  # written last by a run that finished


def folder_state(out: str | Path) -> str:
    """What a run folder holds, for the rule of a rerun into it: 'new' (nothing of a run), 'finished',
    'checkpointed' (an unfinished run with a complete checkpoint), 'started' (a run stopped before its first
    checkpoint), or 'unknown' (checkpoints but no record of their settings)."""
    out = Path(out)
    if not out.is_dir():
        return "new"
    recorded = (out / RECORD_FILE).is_file()
    if recorded and (out / FINISHED_FILE).is_file():
        return "finished"
    if last_complete_checkpoint(out) is not None:
        return "checkpointed" if recorded else "unknown"
    if any(out.glob("checkpoint-*")):
        return "unknown" if not recorded else "started"
    return "started" if recorded else "new"


def heldout_protocol(settings: RunSettings, max_new_tokens: int, seed: int, n: int) -> dict[str, Any] | None:
    """How the run measures held-out accuracy, as `pacs-rl eval` takes it: the source (with the arithmetic task's
    split, seed, ops and digits spelled out, so that it draws the same problems), how many, the sampling, the
    grader and the prompt. None when the run has no held-out set (``n`` = 0)."""
    if not n:
        return None
    limit = None
    if settings.eval_dataset is None:  # the arithmetic task's held-out split (load_run_data)
        task = parse_query(settings.dataset.partition("?")[2])
        ops = task.get("ops", settings.arithmetic_ops)
        digits = task.get("digits", settings.arithmetic_digits)
        source = f"arithmetic?split=test&seed={HELDOUT_SEED}&n={n}&ops={ops}&digits={digits}"
        fields: dict[str, Any] = {}
    else:
        source, limit = settings.eval_dataset, settings.eval_size
        own = benchmark_name(source) is not None or is_procedural(source)
        fields = {} if own else {k: v for k, v in _field_names(settings).items() if v is not None}
    return {
        "source": source,
        "limit": limit,
        "n": n,
        "fields": fields,
        "temperature": settings.eval_temperature,
        "top_p": settings.eval_top_p if settings.eval_temperature > 0 else 1.0,
        "max_new_tokens": settings.eval_max_new_tokens or max_new_tokens,
        "grader": settings.resolved_grader(),
        "seed": seed,
        "instruction": settings.instruction,
        "system_prompt": settings.system_prompt,
    }


def preflight(
    settings: RunSettings,
    cfg: Mapping[str, Any],
    output_dir: str | Path,
    resume: bool = False,
    num_processes: int = 1,
) -> tuple[list[str], tuple[list[Problem], list[Problem]] | None]:
    """Everything about a run that can be checked before torch and TRL load: the config values
    (:func:`config_problems`), the output folder, the model name (a Hub name offline, or with the Hub
    unreachable, must be in the local cache), LoRA's library, and the data: read here when it is local (a file,
    arithmetic, a benchmark in $PACS_RL_DATA_DIR), with at least one rollout batch of problems.

    Returns (every problem, the (training, held-out) problems when read here: `run_training`'s ``data``)."""
    out = config_problems(cfg) + missing_packages({"use_lora": settings.use_lora})
    folder = output_folder_problem(output_dir, resume)
    out += [folder] if folder else []
    model = model_problem(settings.model)
    out += [model] if model else []
    sources = [settings.dataset] + (
        [settings.eval_dataset] if settings.eval_size and settings.eval_dataset else []
    )
    hub = [s for s in sources if hub_dataset(s)]
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")
    why = hub_unreachable() if hub and not offline else None
    if why:
        out += [
            f"dataset {s!r} is read from the Hugging Face Hub, which cannot be reached ({why}): give a local file, "
            "or set HF_HUB_OFFLINE=1 to read it from the local datasets cache"
            for s in hub
        ]
    if out or hub:
        return out, None
    try:
        data = load_run_data(settings, int(cfg.get("seed", 42)))
    except SettingsError as e:
        return [str(e)], None
    per_rollout = rollout_prompts(cfg, num_processes)
    few = per_rollout and too_few_problems(len(data[0]), per_rollout, settings.dataset)
    return ([few] if few else []), data


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
        default = RunSettings.__dataclass_fields__["train_size"].default
        if (
            settings.train_size != default
        ):  # a size the user asked for: say it is capped (the default is quiet)
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
    """The training problems of a file, Hub dataset or reasoning-gym task: a ProblemSet, which counts the skipped
    rows and keeps their first messages (the loader's note prints the first)."""
    return load_problems(settings.dataset, limit=settings.train_size or None, **settings.loader_kwargs())


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
            held = arithmetic_problems(n, seed=HELDOUT_SEED, split="test", **task)
        elif settings.eval_dataset is not None:
            source = settings.eval_dataset
            own_fields = benchmark_name(source) is not None or is_procedural(source)
            fields = {} if own_fields else _field_names(settings)
            held = list(load_problems(source, limit=settings.eval_size, on_error="skip", **fields))
    if held:
        kept, dropped = split_disjoint(train, held)
        skipped = (getattr(train, "skipped", 0), getattr(train, "skip_messages", []))
        train = ProblemSet(kept, source=str(source), skipped=skipped[0], skip_messages=skipped[1])
        if dropped:
            log.info("dropped %d training problems that also appear in the held-out set", dropped)
    if not train:
        raise DataError(f"dataset {source!r} gave no usable training problems")
    return train, held
