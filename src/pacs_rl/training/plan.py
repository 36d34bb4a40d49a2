"""`pacs-rl train --dry-run`: resolve every setting, run every check, and print the plan of a run, without
loading weights or touching the network.

    lines, refusals = dry_run(values, output_dir="runs/x", num_processes=8)

``values`` is the flat mapping of settings after the command line's layers are merged. Every refusal is
collected (run keys, GRPOConfig fields PACSTrainer would ignore, the config's own checks, the run's checks, a
DeepSpeed file that disagrees with the settings, data that cannot be read, a resume that cannot continue),
so a user fixes them in one pass. The config is built with the hardware switches neutralised (use_cpu, no
bf16/fp16, no DeepSpeed/FSDP object): a laptop plans the run of an 8-GPU node, and the hardware itself is
checked when the run starts there.

The memory figure is the training state per device (weights, gradients, AdamW's two moments, a frozen
reference or a critic), from the parameter count (safetensors headers of a local folder or the local Hub
cache, else the size written in the model's name). Activations, the KV cache and vLLM's reservation are not
in it; the plan says so.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pacs_rl.data import BENCHMARKS, DATA_DIR_ENV, benchmark_name
from pacs_rl.data.procedural import is_procedural
from pacs_rl.models import BUNDLED_MODELS, cache_dir, model_problem
from pacs_rl.settings import missing_packages
from pacs_rl.training import fields as grpo_fields
from pacs_rl.training import run
from pacs_rl.training import settings as schema
from pacs_rl.training.pieces import pieces_problems

GIB = 1024**3
HARDWARE_FIELDS = {
    "use_cpu": True,
    "bf16": False,
    "fp16": False,
    "tf32": None,
    "deepspeed": None,
    "fsdp": None,
}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


# ---------------------------------------------------------------------------------------------------- checks
def _unchecked_run_settings(values: Mapping[str, Any]) -> run.RunSettings:
    """RunSettings from ``values`` without its __post_init__ refusal, so its problems join the others."""
    settings = run.RunSettings.__new__(run.RunSettings)
    for f in dataclasses.fields(run.RunSettings):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        setattr(settings, f.name, values.get(f.name, default))
    return settings


def deepspeed_problems(ds: Mapping[str, Any], cfg: Mapping[str, Any], num_processes: int) -> list[str]:
    """Values of a DeepSpeed config that disagree with the run's settings ("auto" always agrees): the checks
    transformers' HfTrainerDeepSpeedConfig makes when the run starts, made here without DeepSpeed installed."""
    per_device = cfg.get("per_device_train_batch_size", 8)
    ga = cfg.get("gradient_accumulation_steps", 1)
    bf16, fp16 = bool(cfg.get("bf16")), bool(cfg.get("fp16"))
    expected = {
        "train_micro_batch_size_per_gpu": per_device,
        "gradient_accumulation_steps": ga,
        "train_batch_size": per_device * ga * num_processes,
        "gradient_clipping": cfg.get("max_grad_norm", 1.0),
        "bf16.enabled": bf16,
        "fp16.enabled": fp16,
        "optimizer.params.lr": cfg.get("learning_rate"),
    }
    out = []
    stage = (ds.get("zero_optimization") or {}).get("stage", 0)
    if stage not in (0, 1, 2, 3):
        out.append(f"deepspeed: zero_optimization.stage={stage!r}; use 0, 1, 2 or 3")
    for key, want in expected.items():
        value: Any = ds
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is None or value == "auto" or want is None:
            continue
        if value != want:
            out.append(
                f'deepspeed: {key}={value!r} but the run\'s settings give {want!r}; write "auto" in the DeepSpeed '
                "config (transformers fills it from the settings) or change one of them"
            )
    return out


def _read_deepspeed(value: Any) -> tuple[dict | None, str | None]:
    """(the DeepSpeed config, a problem reading it) from the `deepspeed` setting: a dict or a JSON file path."""
    if isinstance(value, Mapping):
        return dict(value), None
    path = Path(str(value))
    if not path.is_file():
        return None, f"deepspeed={value!r}: no such file; give the path of a DeepSpeed JSON config"
    try:
        return json.loads(path.read_text()), None
    except json.JSONDecodeError as e:
        return None, f"deepspeed={value!r}: not valid JSON ({e.msg} at line {e.lineno})"


# ---------------------------------------------------------------------------------------------------- model size
def _safetensors_params(folder: Path) -> int | None:
    """Parameters in a folder's *.safetensors files, from their headers (no tensor is read)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        with f.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


def _hub_cached_params(repo: str) -> int | None:
    """Parameters of a Hub model from the local cache only (index total size / dtype bytes); None if not cached."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    index = try_to_load_from_cache(repo, "model.safetensors.index.json")
    config = try_to_load_from_cache(repo, "config.json")
    if isinstance(index, str) and isinstance(config, str):
        total = json.loads(Path(index).read_text()).get("metadata", {}).get("total_size")
        dtype = json.loads(Path(config).read_text()).get("torch_dtype") or "bfloat16"
        if total:
            return int(total) // DTYPE_BYTES.get(dtype, 2)
    single = try_to_load_from_cache(repo, "model.safetensors")
    return _safetensors_params(Path(single).parent) if isinstance(single, str) else None


def parameter_count(model: str) -> tuple[int | None, str]:
    """(parameters, where the figure comes from) for a model name, without loading it or using the network."""
    if model == run.TINY_MODEL:
        from pacs_rl.models import tiny_random_model

        return sum(p.numel() for p in tiny_random_model().parameters()), "the tiny model, built in code"
    folder = Path(model).expanduser()
    if model in BUNDLED_MODELS:
        folder = cache_dir() / "models" / model
    if folder.is_dir():
        count = _safetensors_params(folder)
        if count:
            return count, f"safetensors headers in {folder}"
    elif "/" in model:
        count = _hub_cached_params(model)
        if count:
            return count, "the local Hugging Face cache"
    match = re.search(r"(\d+(?:\.\d+)?)\s*([bBmM])(?![a-zA-Z])", Path(model).name)
    if match:
        scale = 1e9 if match.group(2).lower() == "b" else 1e6
        return int(float(match.group(1)) * scale), "the size in the model's name (approximate)"
    return None, "unknown (not a local folder, not in the local Hub cache, no size in the name)"


def training_state_bytes(
    params: int, load_bytes: int, engine: str, zero_stage: int, processes: int, lora: bool, extra_copies: int
) -> float:
    """Weights + gradients + AdamW moments per device, in bytes (activations, KV cache and vLLM not included).

    DeepSpeed keeps 16-bit weights and gradients plus fp32 master weights and moments (12 bytes per parameter),
    stage 1 shards the 12, stage 2 also the gradients, stage 3 everything; FSDP (full shard) holds fp32 master
    weights, gradients and moments sharded (16 bytes per parameter / processes). ``extra_copies``: a frozen
    reference or a critic, each one more copy of the weights (a critic also trains: ×4)."""
    n = max(processes, 1)
    if lora:
        per_device = params * load_bytes
    elif engine == "deepspeed":
        per_device = {
            0: 16 * params,
            1: 4 * params + 12 * params / n,
            2: 2 * params + 14 * params / n,
            3: 16 * params / n,
        }[zero_stage]
    elif engine == "fsdp":
        per_device = 16 * params / n
    else:
        per_device = 4 * params * load_bytes  # weights, gradients, two moments, all in the loaded dtype
    return per_device + extra_copies * params * load_bytes


# ---------------------------------------------------------------------------------------------------- data
def _local_source(source: str | None) -> bool:
    """Whether a data source reads without the network (procedural, a file, a benchmark in $PACS_RL_DATA_DIR)."""
    if source is None or is_procedural(source) or Path(source).expanduser().is_file():
        return True
    name = benchmark_name(source)
    folder = os.environ.get(DATA_DIR_ENV)
    return bool(name and folder and (Path(folder) / BENCHMARKS[name].local_file).is_file())


# ---------------------------------------------------------------------------------------------------- the plan
def dry_run(
    values: Mapping[str, Any], output_dir: str | Path, num_processes: int = 1, resume: bool = False
) -> tuple[list[str], list[str]]:
    """(the plan as lines, every refusal) for the flat settings ``values`` on ``num_processes`` processes."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing below may reach the network
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    refusals: list[str] = []
    settings = _unchecked_run_settings(values)
    refusals += settings.problems()
    run_keys = run.run_fields()
    cfg = {k: run.coerce_setting(k, v) for k, v in values.items() if k not in run_keys}
    loss_type = str(cfg.get("loss_type", "pacs"))
    refused = grpo_fields.refused_fields(cfg, loss_type)
    refusals += refused
    # an engine, tracker or adapter library that is not installed; a max_steps that trains nothing; a model
    # folder that is not there (a Hub name is checked where the run starts)
    refusals += missing_packages({**cfg, "use_lora": settings.use_lora})
    refusals += [
        p
        for p in (schema.max_steps_problem(cfg.get("max_steps")), model_problem(settings.model, hub=False))
        if p
    ]
    refused_names = {m.split("=", 1)[0] for m in refused}
    ds_config, ds_problem = (None, None)
    if cfg.get("deepspeed"):
        ds_config, ds_problem = _read_deepspeed(cfg["deepspeed"])
        refusals += [ds_problem] if ds_problem else deepspeed_problems(ds_config, cfg, num_processes)
    planning = {k: v for k, v in cfg.items() if k not in refused_names} | HARDWARE_FIELDS
    config = None
    try:
        config = run.build_config(planning, output_dir)
    except (run.SettingsError, TypeError) as e:
        refusals.append(str(e))
    if config is not None:
        planned = _with(config, cfg)
        refusals += run.run_problems(settings, planned, run.training_engine(planned, num_processes))
    train_n, held_n, train_note, held_note = None, None, "", ""
    hub = " (from the Hub: read when the run starts, not in a dry run)"
    if not settings.problems():
        local_train, local_held = _local_source(settings.dataset), _local_source(settings.eval_dataset)
        train_note, held_note = ("" if local_train else hub), ("" if local_held else hub)
        try:
            if local_train:
                data_settings = settings if local_held else dataclasses.replace(settings, eval_size=0)
                train, held = run.load_run_data(data_settings, int(cfg.get("seed", 42)))
                train_n, held_n = len(train), (len(held) if local_held else None)
                per_rollout = schema.rollout_prompts(cfg, num_processes)
                few = per_rollout and schema.too_few_problems(train_n, per_rollout, settings.dataset)
                refusals += [few] if few else []
        except run.SettingsError as e:
            refusals.append(str(e))
    resume_note = ""
    # a fresh run needs no config here: it only refuses a folder that holds checkpoints
    if config is not None or not resume:
        try:
            checkpoint, complete = run.resume_point(Path(output_dir), resume, config, num_processes)
            if checkpoint:
                resume_note = f"continues from {checkpoint}" + (
                    " (already complete: nothing to train)" if complete else ""
                )
        except run.SettingsError as e:
            refusals.append(str(e))
            resume_note = "cannot resume (see below)" if resume else ""
    lines = [] if config is None else _plan_lines(
        settings, cfg, config, num_processes, (train_n, train_note), (held_n, held_note), resume_note
    )  # fmt: skip
    return lines, refusals


def _plan_lines(settings, cfg, config, n_proc, train, held, resume_note) -> list[str]:
    (train_n, train_note), (held_n, held_note) = train, held
    G = config.num_generations
    engine = run.training_engine(_with(config, cfg), n_proc)
    zero_stage = run.zero_stage(_with(config, cfg)) if engine == "deepspeed" else 0
    dtype = run.load_dtype(settings, _with(config, cfg), engine)
    seqs_per_step = config.per_device_train_batch_size * config.gradient_accumulation_steps * n_proc
    rollout_seqs = config.per_device_train_batch_size * config.steps_per_generation * n_proc
    rollout_prompts = rollout_seqs // G
    steps_per_rollout = config.mini_batches_per_rollout * config.num_iterations
    engine_text = {
        "single": "one process",
        "ddp": f"DDP, {n_proc} processes (a full replica each)",
        "deepspeed": f"DeepSpeed ZeRO-{zero_stage}, {n_proc} processes",
        "fsdp": f"FSDP, {n_proc} processes",
    }[engine]
    lines = [
        f"model: {settings.model}, weights loaded in {dtype} "
        f"({'bf16 autocast' if cfg.get('bf16') else 'fp16 autocast' if cfg.get('fp16') else 'no autocast'})",
        f"processes: {n_proc}; training engine: {engine_text}; "
        + (
            "on CPU (use_cpu: true, the CPU default's layer; set use_cpu: false for GPUs)"
            if cfg.get("use_cpu")
            else "on GPUs"
        ),
        f"loss: {config.loss_type}; G = {G} completions per prompt",
        "trained weights: "
        + (
            f"a LoRA adapter (use_lora: r {settings.lora_r}, alpha {settings.lora_alpha}, dropout "
            f"{settings.lora_dropout}, modules {settings.lora_target_modules})"
            if settings.use_lora
            else "all of them (use_lora false)"
        ),
        f"sequences per optimizer step: {seqs_per_step} ({seqs_per_step // G} prompts) = "
        f"{config.per_device_train_batch_size} per device x {config.gradient_accumulation_steps} accumulation x {n_proc}",
        f"prompts per rollout batch: {rollout_prompts} ({rollout_seqs} sequences)",
        f"optimizer steps per rollout batch: {steps_per_rollout} "
        f"(mini_batches_per_rollout {config.mini_batches_per_rollout} x num_iterations {config.num_iterations})",
    ]
    if train_n is not None:
        rollouts = train_n // rollout_prompts
        per_epoch = rollouts * steps_per_rollout
        epochs = (
            f", {config.max_steps / per_epoch:.2f} epochs for max_steps={config.max_steps}"
            if per_epoch
            else ""
        )
        lines.append(
            f"training prompts: {train_n}; per epoch {rollouts * rollout_prompts} prompts in {rollouts} rollout "
            f"batches = {per_epoch} optimizer steps{epochs}"
        )
    else:
        lines.append(f"training data: {settings.dataset}{train_note}")
    lines.append(f"max_steps: {config.max_steps}")
    if config.use_vllm and config.vllm_mode == "server":
        where = config.vllm_server_base_url or f"{config.vllm_server_host}:{config.vllm_server_port}"
        gen = f"vLLM server at {where} (start `vllm serve` on other GPUs first: docs/TRAINING.md)"
    elif config.use_vllm:
        gen = (
            f"vLLM colocated in each training process (tensor parallel {config.vllm_tensor_parallel_size}, "
            f"gpu_memory_utilization {config.vllm_gpu_memory_utilization})"
        )
    elif config.fast_sampler:
        gen = "pacs_rl.sampling.TransformersSampler (fast_sampler)"
    else:
        gen = "transformers generate" + (" (ZeRO-3 weights gathered for it)" if zero_stage == 3 else "")
    lines.append(f"generation: {gen}; temperature {config.temperature}, top_p {config.top_p}, "
                 f"up to {config.max_completion_length} tokens")  # fmt: skip
    if getattr(config, "update_token_budget", None):
        why = pieces_problems(
            num_processes=n_proc,
            deepspeed=engine == "deepspeed",
            fsdp=engine == "fsdp",
            activation_checkpointing=bool(
                cfg.get("gradient_checkpointing") or cfg.get("activation_checkpointing")
            ),
            completion_only_head=config.logprob_impl == "logits"
            or (config.logprob_impl == "auto" and bool(cfg.get("use_cpu"))),
            logprob_impl=config.logprob_impl,
            device="cpu" if cfg.get("use_cpu") else "GPUs",
            shared_prompt_forward=config.shared_prompt_forward,
        )
        budget = config.update_token_budget
        lines.append(
            f"  warning: update_token_budget={budget} is ignored here ({', '.join(why)}; it needs one process and "
            "the 'logits' log-prob path): one forward and backward per micro-batch"
            if why
            else f"update: backward in pieces of at most {budget} completion tokens (update_token_budget)"
        )
    if settings.eval_size:
        where = "on one process (fast sampler)" if engine == "single" and not config.use_vllm else (
            "through the rollout engine, split across the processes and gathered"
        )  # fmt: skip
        held = (
            f"{held_n} problems" if held_n is not None else f"up to {settings.eval_size} problems{held_note}"
        )
        how = "greedy" if settings.eval_temperature == 0 else f"T={settings.eval_temperature}"
        lines.append(
            f"held-out evaluation before and after: {held} of "
            f"{settings.eval_dataset or 'the held-out arithmetic split'}, {how}, {where}"
        )
        if config.eval_steps:
            lines.append(
                f"periodic evaluation: every {int(config.eval_steps)} steps, pass@k with "
                f"{config.num_generations_eval or 1} samples per problem (metrics.jsonl, trackers)"
            )
    else:
        lines.append("held-out evaluation: off (eval_size 0)")
    out = Path(config.output_dir)
    save = f"every {config.save_steps} steps, keeping {config.save_total_limit or 'all'}"
    lines.append(
        f"checkpoints: {out}/checkpoint-<step> ({save if getattr(config.save_strategy, 'value', config.save_strategy) == 'steps' else config.save_strategy}); "
        f"final weights {out}/{run.FINAL_DIR}; metrics {out}/metrics.jsonl"
    )  # fmt: skip
    if resume_note:
        lines.append(f"resume: {resume_note}")
    params, source = parameter_count(settings.model)
    if params is None:
        lines.append(f"memory per device: not estimated, parameter count {source}")
    else:
        extra = (1 if config.reference == "frozen" else 0) + (4 if config.loss_type == "ppo" else 0)
        state = training_state_bytes(
            params, DTYPE_BYTES.get(dtype, 4), engine, zero_stage, n_proc, settings.use_lora, extra
        )
        what = "weights, gradients, AdamW moments"
        what += ", frozen reference" if config.reference == "frozen" else ""
        what += ", critic" if config.loss_type == "ppo" else ""
        on_top = "activations and the KV cache come on top"
        if config.use_vllm and config.vllm_mode == "colocate":
            on_top += f", and vLLM reserves {config.vllm_gpu_memory_utilization:.0%} of each GPU"
        lines.append(
            f"memory per device: ~{state / GIB:.1f} GiB of training state for {params / 1e9:.2f} B parameters "
            f"({source}): {what}; {on_top}"
        )
        if state > 80 * GIB:
            lines.append(
                "  warning: more than an 80 GB GPU holds; shard it (DeepSpeed ZeRO-3: --set "
                "deepspeed=configs/deepspeed/zero3.json, or FSDP), or train a LoRA adapter"
            )
    return lines


def _with(config, cfg: Mapping[str, Any]):
    """The planning config with the user's hardware switches put back (for the engine and dtype decisions)."""
    return _Proxy(config, {k: cfg[k] for k in HARDWARE_FIELDS if k in cfg})


class _Proxy:
    """Attribute view of a config with a few values overridden (no copy of the TrainingArguments)."""

    def __init__(self, config, overrides: dict[str, Any]):
        self._config, self._overrides = config, overrides

    def __getattr__(self, name: str):
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._config, name)
