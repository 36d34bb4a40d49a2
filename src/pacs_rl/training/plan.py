"""`pacs-rl train --dry-run`: resolve every setting, run every check, and print the plan of a run, without
loading weights or touching the network.

    lines, refusals = dry_run(values, output_dir="runs/x", num_processes=8)

``values`` is the flat mapping of settings after the command line's layers are merged (the device choice of
`pacs_rl.device` included). Every refusal is collected (run keys, GRPOConfig fields PACSTrainer would
ignore, the config's own checks, the run's checks, a DeepSpeed file that disagrees with the settings, data that
cannot be read, a resume that cannot continue, a GPU plan over the GPU's memory), so a user fixes them in one
pass. The config is built with the hardware switches neutralised (use_cpu, no bf16/fp16, no DeepSpeed/FSDP
object): a laptop plans the run of an 8-GPU node, and the hardware itself is checked when the run starts there.
Such a plan for another machine (CUDA asked for, none here) lists the libraries the settings need that this
machine lacks (vLLM, DeepSpeed, a tracker) as needed on the training machine, with the pip line that installs
them, instead of refusing them; where the plan is for this machine they are refused.

The plan's first lines say which device the run uses and why, and, when the settings name the batch they are
written for (``mini_batch_prompts``) and this many processes give another, by how much. On GPUs the
memory per GPU is planned by component (`pacs_rl.training.memory`: training state, vLLM's share, activations,
the LM head, gathered weights, an allowance) from the model's config.json, and a plan over the GPU's memory
(``--gpu-memory-gib``, default: this machine's GPU, else 79 GiB, what an 80 GB A100/H100 reports) is refused.
On the CPU the training state is shown, not checked.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pacs_rl.device import DeviceChoice, choose_device, cuda_info
from pacs_rl.models import (
    BUNDLED_MODELS,
    TINY_MODEL,
    cache_dir,
    load_tokenizer,
    tiny_random_model,
    tiny_tokenizer,
)
from pacs_rl.preflight import Preflight, install_line, missing_requirements
from pacs_rl.run_folder import CHECKPOINT_PREFIX, FINAL_DIR, METRICS_FILE
from pacs_rl.settings.errors import SettingsError
from pacs_rl.training import memory, run
from pacs_rl.training.batch import PAPER_BATCH, batch_note
from pacs_rl.training.checks import (
    Checked,
    coerce_setting,
    config_problems,
    deepspeed_problems,
    precision_given,
    preflight,
    unchecked_run_settings,
)
from pacs_rl.training.data import drop_long_prompts, prompt_lengths
from pacs_rl.training.engine import load_dtype, run_problems, training_engine, zero_stage
from pacs_rl.training.logprobs import pieces_problems
from pacs_rl.training.memory import DTYPE_BYTES, GIB, training_state_bytes
from pacs_rl.training.schema import RUN_FIELDS
from pacs_rl.training.trl_fields import refused_fields

PLANNING_GPU_GIB = 79.0  # an 80 GB A100 / H100 as torch reports it (79.2-79.4 GiB)
HARDWARE_FIELDS = {
    "use_cpu": True,
    "bf16": False,
    "fp16": False,
    "tf32": None,
    "deepspeed": None,
    "fsdp": None,
}


# ---------------------------------------------------------------------------------------------------- checks
# ---------------------------------------------------------------------------------------------------- model size
def _model_folder(model: str) -> Path | None:
    """The model's local folder: a path, or a bundled model already converted (None: a Hub id, or not there)."""
    folder = cache_dir() / "models" / model if model in BUNDLED_MODELS else Path(model).expanduser()
    return folder if folder.is_dir() else None


def model_shape(model: str) -> tuple[memory.ModelShape | None, str]:
    """(the model's shape, where it comes from) without loading it or using the network."""
    if model == TINY_MODEL:
        tiny = tiny_random_model()
        shape = memory.shape_from_config(tiny.config.to_dict())
        return dataclasses.replace(shape, weight_bytes=4), "the tiny model, built in code"
    return memory.model_shape(model, _model_folder(model))


def _offline_tokenizer(model: str):
    """The model's tokenizer when it reads from this machine without writing anything (the tiny model's is built
    in code, a local folder, a converted bundled model, the Hub cache); None otherwise."""
    if model == TINY_MODEL:
        return tiny_tokenizer()
    folder = _model_folder(model)
    if folder is None and "/" not in model:
        return None
    try:
        return load_tokenizer(str(folder or model), local_files_only=True)
    except Exception:  # not on this machine, or unreadable: the run reads it when it starts
        return None


# ---------------------------------------------------------------------------------------------------- the plan
def _prompt_counts(settings, config, train) -> tuple[list[int] | None, str]:
    """(the training prompts' token counts, or None with why not) when the tokenizer is on this machine."""
    if train is None:
        return None, "the training data is not read in a dry run"
    tokenizer = _offline_tokenizer(settings.model)
    if tokenizer is None:
        return None, f"the tokenizer of {settings.model} is not on this machine"
    try:
        return prompt_lengths(train, tokenizer, settings.prompt_kwargs(config)), ""
    except ValueError as e:  # no chat template: the run says so when it starts
        return None, str(e)


def dry_run(
    values: Mapping[str, Any],
    output_dir: str | Path,
    num_processes: int = 1,
    resume: bool = False,
    device: DeviceChoice | None = None,
    gpu_memory_gib: float | None = None,
    checked: Checked | None = None,
) -> tuple[list[str], list[str]]:
    """(the plan as lines, every refusal) for the flat settings ``values`` on ``num_processes`` processes.

    device: the command's device choice (default: read from ``values``' use_cpu / bf16 and this machine);
    gpu_memory_gib: the memory of each GPU the plan must fit (default: this machine's GPU, else 79); checked: what
    the run's checks before torch (`pacs_rl.training.checks.preflight`) found, where the command made them first
    (default: they are made here, and give the first refusals)."""
    cuda = cuda_info()
    if device is None:
        device = choose_device({k: values[k] for k in ("use_cpu", "bf16", "fp16") if k in values}, cuda)
    elsewhere = device.device == "cuda" and not cuda.available
    if (
        checked is None
    ):  # before HF_HUB_OFFLINE is set below: a Hub name is looked up in the cache only offline
        checked = preflight(values, output_dir, resume, num_processes, network=False, here=not elsewhere)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing below may reach the network
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    settings = checked.settings
    cfg = {k: coerce_setting(k, v) for k, v in values.items() if k not in RUN_FIELDS}
    check = _SettingChecks(checked, cfg, elsewhere, num_processes)
    config = check.config(output_dir)
    held_n = len(checked.data[1]) if checked.data is not None else None
    notes = tuple(HUB_NOTE if s in checked.hub else "" for s in (settings.dataset, settings.eval_dataset))
    resume_note = check.resume(config, output_dir, resume)
    if config is None:
        return [], check.refusals
    prompts = check.prompts(config, checked.train)
    lines = [f"device: {device.line()}"]
    if check.elsewhere and check.missing:
        lines.append(needed_line(check.missing))
    note = batch_note(settings, config, num_processes)
    lines += [note] if note else []
    held = (held_n, notes[1])
    lines += _plan_lines(settings, cfg, config, num_processes, prompts, notes[0], held, resume_note)
    gpu_gib = gpu_memory_gib or cuda.memory_gib or PLANNING_GPU_GIB
    memory_lines, memory_refusals = _memory_lines(
        settings, cfg, config, num_processes, device, gpu_gib, prompts
    )
    return lines + memory_lines, check.refusals + memory_refusals


HUB_NOTE = " (from the Hub: read when the run starts, not in a dry run)"


class _SettingChecks:
    """The dry run's checks after the run's checks before torch (``checked``, whose refusals come first), each
    adding its refusals to ``refusals``: the fields PACSTrainer would not honour, the libraries the settings need
    where those checks left them to the plan, the precision of a DeepSpeed file against the device choice's, the
    trainer config built from the settings, the resume point, and the prompts' lengths."""

    def __init__(self, checked: Checked, cfg: dict[str, Any], elsewhere: bool, num_processes: int):
        self.settings, self.cfg, self.elsewhere, self.n = checked.settings, cfg, elsewhere, num_processes
        self.refusals: list[str] = list(checked.refusals)
        self.refused = refused_fields(cfg, str(cfg.get("loss_type", "pacs")))
        self.refusals += self.refused
        # what the training machine must hold, where the checks before torch left it here (CUDA asked for): an
        # engine, tracker or adapter library, a Hub model or dataset in the local cache when offline. Refused where
        # this machine trains; where the plan is for another machine (no CUDA here: a laptop planning a node) the
        # libraries are listed as needed there and the Hub cache is that machine's
        self.missing: list = []
        if not checked.here:
            self.missing, tracker_problems = missing_requirements({**cfg, "use_lora": self.settings.use_lora})
            self.refusals += tracker_problems + ([] if elsewhere else [m.refusal() for m in self.missing])
            if not elsewhere:
                self.refusals += _cache_problems(self.settings)
        # a value out of its declared domain, a critic field, a batch that splits a group (refused before torch):
        # the config, which would refuse it again, is not built
        self.declared = config_problems(cfg, installed=False)
        if cfg.get("deepspeed") and not precision_given(
            checked.cfg
        ):  # bf16 / fp16 as the device choice set them
            ds = Preflight().json_file(
                cfg["deepspeed"], "deepspeed"
            )  # one that does not parse: refused before
            self.refusals += deepspeed_problems(ds, cfg, num_processes, precision=True) if ds else []

    def config(self, output_dir: str | Path):
        """The trainer config the run would build (its refused fields left out), checked against the run; None
        where a value is out of its domain."""
        if self.declared:
            return None
        refused_names = {m.split("=", 1)[0] for m in self.refused}
        planning = {k: v for k, v in self.cfg.items() if k not in refused_names} | HARDWARE_FIELDS
        try:
            config = run.build_config(planning, output_dir)
        except (SettingsError, TypeError) as e:
            self.refusals.append(str(e))
            return None
        planned = _with(config, self.cfg)
        self.refusals += run_problems(self.settings, planned, training_engine(planned, self.n))
        return config

    def resume(self, config, output_dir: str | Path, resume: bool) -> str:
        """Where the run would continue from ('' for a fresh run). A fresh run needs no config here: it only
        refuses a folder that holds checkpoints."""
        if config is None and resume:
            return ""
        try:
            checkpoint, complete = run.resume_point(Path(output_dir), resume, config, self.n)
        except SettingsError as e:  # the folder's rules: refused before torch, once
            self.refusals += [] if str(e) in self.refusals else [str(e)]
            return "cannot resume (see below)" if resume else ""
        if not checkpoint:
            return ""
        return f"continues from {checkpoint}" + (" (already complete: nothing to train)" if complete else "")

    def prompts(self, config, train) -> _Prompts:
        """The training prompts' count and lengths where a tokenizer is at hand (max_prompt_tokens applied)."""
        settings = self.settings
        lengths, why_not = _prompt_counts(settings, config, train)
        if lengths is None:
            return _Prompts(len(train) if train is not None else None, None, None, why_not)
        kept, dropped = drop_long_prompts(train, lengths, settings.max_prompt_tokens)
        if settings.max_prompt_tokens is not None and not kept:
            self.refusals.append(
                f"max_prompt_tokens={settings.max_prompt_tokens}: every one of the {len(train)} training prompts is "
                f"longer (the shortest has {min(lengths)} tokens): raise it, or set it to null"
            )
        return _Prompts(len(train), dropped, max(lengths), "")


def _cache_problems(settings) -> list[str]:
    """The Hub model and datasets of a run that this machine's local cache must hold when offline, checked as the
    run checks them before torch (without the network)."""
    check = Preflight(network=False)
    check.model(settings.model)
    check.hub_data(settings.dataset, "dataset")
    if settings.eval_size and settings.eval_dataset:
        check.hub_data(settings.eval_dataset, "eval_dataset")
    return check.refusals


def needed_line(missing) -> str:
    """The plan's line for the libraries a plan for another machine needs there and this machine lacks."""
    what = ", ".join(f"{m.package} ({m.setting})" for m in missing)
    return (
        f"needed on the training machine (not installed here, where this plan is checked): {what}; "
        f"install there from the root of a clone: {install_line(missing)}"
    )


@dataclasses.dataclass(frozen=True)
class _Prompts:
    """The training prompts as the dry run saw them."""

    loaded: int | None  # None: not read in a dry run
    dropped: int | None  # by max_prompt_tokens; None: not counted (no tokenizer here)
    longest: int | None  # tokens of the longest prompt; None: not counted
    why_not: str  # why they were not counted


def _engine(settings, cfg, config, n_proc) -> tuple[str, int, str]:
    """(training engine, ZeRO stage, the dtype the weights load in)."""
    engine = training_engine(_with(config, cfg), n_proc)
    stage = zero_stage(_with(config, cfg)) if engine == "deepspeed" else 0
    return engine, stage, load_dtype(settings, _with(config, cfg), engine)


def _plan_lines(settings, cfg, config, n_proc, prompts: _Prompts, train_note, held, resume_note) -> list[str]:
    """The plan's lines, in the order a run does things: the model and engine, the batch, the data, generation,
    the update, the held-out evaluation, checkpoints and the resume point."""
    engine, zero_stage, dtype = _engine(settings, cfg, config, n_proc)
    lines = _batch_lines(settings, cfg, config, n_proc, engine, zero_stage, dtype)
    lines += _data_lines(settings, config, n_proc, prompts, train_note)
    lines.append(f"max_steps: {config.max_steps}")
    lines.append(_generation_line(config, zero_stage))
    lines += _dynamic_sampling_lines(config, n_proc)
    lines += _update_lines(cfg, config, n_proc, engine)
    lines += _heldout_lines(settings, config, engine, held)
    out = Path(config.output_dir)
    save = f"every {config.save_steps} steps, keeping {config.save_total_limit or 'all'}"
    strategy = getattr(config.save_strategy, "value", config.save_strategy)
    lines.append(
        f"checkpoints: {out}/{CHECKPOINT_PREFIX}<step> ({save if strategy == 'steps' else config.save_strategy}); "
        f"final weights {out}/{FINAL_DIR}; metrics {out}/{METRICS_FILE}"
    )
    if resume_note:
        lines.append(f"resume: {resume_note}")
    return lines


def _rollout_sizes(config, n_proc: int) -> tuple[int, int, int]:
    """(sequences per optimizer step, prompts per rollout batch, optimizer steps per rollout batch)."""
    seqs_per_step = config.per_device_train_batch_size * config.gradient_accumulation_steps * n_proc
    rollout_prompts = (
        config.per_device_train_batch_size * config.steps_per_generation * n_proc // config.num_generations
    )
    return seqs_per_step, rollout_prompts, config.mini_batches_per_rollout * config.num_iterations


def _batch_lines(settings, cfg, config, n_proc, engine, zero_stage, dtype) -> list[str]:
    """The model, the processes and engine, the loss, what is trained, and the batch at each level."""
    G = config.num_generations
    seqs_per_step, rollout_prompts, steps_per_rollout = _rollout_sizes(config, n_proc)
    paper = (G, seqs_per_step // G, rollout_prompts) == PAPER_BATCH
    engine_text = {
        "single": "one process",
        "ddp": f"DDP, {n_proc} processes (a full replica each)",
        "deepspeed": f"DeepSpeed ZeRO-{zero_stage}, {n_proc} processes",
        "fsdp": f"FSDP, {n_proc} processes",
    }[engine]
    autocast = "bf16 autocast" if cfg.get("bf16") else "fp16 autocast" if cfg.get("fp16") else "no autocast"
    lora = (
        f"a LoRA adapter (use_lora: r {settings.lora_r}, alpha {settings.lora_alpha}, dropout "
        f"{settings.lora_dropout}, modules {settings.lora_target_modules})"
    )
    return [
        f"model: {settings.model}, weights loaded in {dtype} ({autocast})",
        f"processes: {n_proc}; training engine: {engine_text}",
        f"loss: {config.loss_type}; G = {G} completions per prompt",
        "trained weights: " + (lora if settings.use_lora else "all of them (use_lora false)"),
        f"sequences per optimizer step: {seqs_per_step} ({seqs_per_step // G} prompts) = "
        f"{config.per_device_train_batch_size} per device x {config.gradient_accumulation_steps} accumulation x {n_proc}",
        f"prompts per rollout batch: {rollout_prompts} ({rollout_prompts * G} sequences)"
        + (" = the paper's batch (Appendix B.2)" if paper else ""),
        f"optimizer steps per rollout batch: {steps_per_rollout} "
        f"(mini_batches_per_rollout {config.mini_batches_per_rollout} x num_iterations {config.num_iterations})",
    ]


def _data_lines(settings, config, n_proc, prompts: _Prompts, train_note: str) -> list[str]:
    """The training prompts (with the epochs max_steps makes of them) and the prompt-length filter."""
    _, rollout_prompts, steps_per_rollout = _rollout_sizes(config, n_proc)
    if prompts.loaded is not None:
        train_n = prompts.loaded - (prompts.dropped or 0)
        rollouts = train_n // rollout_prompts
        per_epoch = rollouts * steps_per_rollout
        epochs = (
            f", {config.max_steps / per_epoch:.2f} epochs for max_steps={config.max_steps}"
            if per_epoch
            else ""
        )
        lines = [
            f"training prompts: {train_n}; per epoch {rollouts * rollout_prompts} prompts in {rollouts} rollout "
            f"batches = {per_epoch} optimizer steps{epochs}"
        ]
    else:
        lines = [f"training data: {settings.dataset}{train_note}"]
    if settings.max_prompt_tokens is not None:
        counted = (
            f"{prompts.dropped} of {prompts.loaded} dropped here (longest {prompts.longest} tokens)"
            if prompts.dropped is not None
            else f"counted when the run starts ({prompts.why_not})"
        )
        lines.append(
            f"prompt-length filter: training prompts over {settings.max_prompt_tokens} tokens after the chat "
            f"template are dropped (max_prompt_tokens): {counted}"
        )
    return lines


def _generation_line(config, zero_stage: int) -> str:
    """What generates the rollouts, and how."""
    if config.use_vllm and config.vllm_mode == "server":
        where = config.vllm_server_base_url or f"{config.vllm_server_host}:{config.vllm_server_port}"
        gen = f"vLLM server at {where} (start `vllm serve` on other GPUs first: docs/SCALING.md)"
    elif config.use_vllm:
        gen = (
            f"vLLM colocated in each training process (tensor parallel {config.vllm_tensor_parallel_size}, "
            f"gpu_memory_utilization {config.vllm_gpu_memory_utilization}"
            + (", sleep mode during the update" if config.vllm_enable_sleep_mode else "")
            + (f", max_model_length {config.vllm_max_model_length}" if config.vllm_max_model_length else "")
            + ")"
        )
    elif config.fast_sampler:
        gen = "pacs_rl.sampling.TransformersSampler (fast_sampler)"
    else:
        gen = "transformers generate" + (" (ZeRO-3 weights gathered for it)" if zero_stage == 3 else "")
    return (
        f"generation: {gen}; temperature {config.temperature}, top_p {config.top_p}, "
        f"up to {config.max_completion_length} tokens"
    )


def _dynamic_sampling_lines(config, n_proc: int) -> list[str]:
    """What dynamic sampling (DAPO) does to each rollout batch, and its cap."""
    if not getattr(config, "dynamic_sampling", False):
        return []
    _, prompts, _ = _rollout_sizes(config, n_proc)
    rounds = config.dynamic_sampling_max_rounds
    return [
        f"dynamic sampling: each rollout batch keeps only groups whose rewards are not all equal, and samples "
        f"up to {rounds - 1} further rounds of {prompts} prompts from the training set to refill it "
        f"(dynamic_sampling_max_rounds {rounds}: at most {rounds}x the sampling and grading of a rollout); "
        "still short, it fills up with single-label groups"
    ]


def _update_lines(cfg, config, n_proc, engine) -> list[str]:
    """How the update runs its backward: in pieces of update_token_budget tokens, or why it cannot here."""
    budget = getattr(config, "update_token_budget", None)
    if not budget:
        return []
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
    if why:
        return [
            f"  warning: update_token_budget={budget} is ignored here ({', '.join(why)}; it needs one process and "
            "the 'logits' log-prob path): one forward and backward per micro-batch"
        ]
    return [f"update: backward in pieces of at most {budget} completion tokens (update_token_budget)"]


def _heldout_lines(settings, config, engine, held) -> list[str]:
    """The held-out evaluation before and after training, and the periodic one (eval_steps)."""
    held_n, held_note = held
    if settings.eval_size and settings.eval_dataset is None and not settings.on_arithmetic():
        return [
            "held-out evaluation: off (no held-out set for this training data: set eval_dataset, e.g. math500 or "
            "a file, for the accuracy before and after)"
        ]
    if not settings.eval_size:
        return ["held-out evaluation: off (eval_size 0)"]
    where = "on one process (fast sampler)" if engine == "single" and not config.use_vllm else (
        "through the rollout engine, split across the processes and gathered"
    )  # fmt: skip
    count = f"{held_n} problems" if held_n is not None else f"up to {settings.eval_size} problems{held_note}"
    how = (
        "greedy"
        if settings.eval_temperature == 0
        else f"T={settings.eval_temperature}, top-p {settings.eval_top_p}"
    )
    lines = [
        f"held-out evaluation before and after: {count} of "
        f"{settings.eval_dataset or 'the held-out arithmetic split'}, {how}, {where}"
    ]
    if config.eval_steps:
        every = int(config.eval_steps)
        rollouts = every / config.mini_batches_per_rollout
        lines.append(
            f"periodic evaluation: every {every} optimizer steps"
            + (f" ({rollouts:g} rollout batches)" if rollouts == int(rollouts) else "")
            + f", pass@k with {config.num_generations_eval or 1} samples per problem, {how} "
            "(metrics.jsonl, trackers)"
        )
    return lines


def _memory_step(settings, cfg, config, n_proc, prompt_tokens: int) -> memory.Step:
    """The run's numbers the memory plan needs."""
    engine, zero_stage, dtype = _engine(settings, cfg, config, n_proc)
    weight_bytes = DTYPE_BYTES.get(dtype, 4)
    colocated = config.use_vllm and config.vllm_mode == "colocate"
    if config.use_vllm:
        generation_rows = 0
    elif config.fast_sampler:
        generation_rows = config.fast_sampler_batch_size
    else:  # TRL's generate: every rollout row of this process at once
        generation_rows = config.per_device_train_batch_size * config.steps_per_generation
    return memory.Step(
        processes=n_proc,
        engine=engine,
        zero_stage=zero_stage,
        weight_bytes=weight_bytes,
        compute_bytes=2 if (cfg.get("bf16") or cfg.get("fp16")) else weight_bytes,
        lora=settings.use_lora,
        extra_copies=(1 if config.reference == "frozen" else 0) + (4 if config.loss_type == "ppo" else 0),
        rows=config.per_device_train_batch_size,
        prompt_tokens=prompt_tokens,
        completion_tokens=config.max_completion_length,
        checkpointing=bool(config.activation_checkpointing),
        head="logits" if config.logprob_impl == "logits" else "trl",
        vllm_share=config.vllm_gpu_memory_utilization if colocated else None,
        vllm_sleep=bool(config.vllm_enable_sleep_mode),
        vllm_tp=config.vllm_tensor_parallel_size,
        vllm_max_len=config.vllm_max_model_length,
        generation_rows=generation_rows,
    )


# the prompt bound of a memory plan when neither max_prompt_tokens nor a count gives one
ASSUMED_PROMPT_TOKENS = 1024


def _memory_lines(
    settings, cfg, config, n_proc, device, gpu_gib, prompts: _Prompts
) -> tuple[list[str], list[str]]:
    """The memory lines of the plan and, on GPUs, the refusals of a plan over the GPU's memory."""
    shape, source = model_shape(settings.model)
    if shape is None:
        return [f"memory per device: not estimated, parameter count {source}"], []
    engine, zero_stage, dtype = _engine(settings, cfg, config, n_proc)
    size = f"{shape.params / 1e9:.2f} B parameters ({source})"
    if device.device == "cpu":
        extra = (1 if config.reference == "frozen" else 0) + (4 if config.loss_type == "ppo" else 0)
        state = training_state_bytes(
            shape.params, DTYPE_BYTES.get(dtype, 4), engine, zero_stage, n_proc, settings.use_lora, extra
        )
        what = "weights, gradients, AdamW moments"
        what += ", frozen reference" if config.reference == "frozen" else ""
        what += ", critic" if config.loss_type == "ppo" else ""
        return [
            f"memory per process: ~{state / GIB:.1f} GiB of training state for {size}: {what}; activations come "
            "on top (on the CPU the plan is not checked against the machine's memory)"
        ], []
    if settings.max_prompt_tokens is not None:
        prompt_tokens, bound = settings.max_prompt_tokens, "max_prompt_tokens"
    elif prompts.longest is not None:
        prompt_tokens, bound = prompts.longest, "the longest training prompt here"
    else:
        prompt_tokens, bound = ASSUMED_PROMPT_TOKENS, "assumed: set max_prompt_tokens to bound it"
    step = _memory_step(settings, cfg, config, n_proc, prompt_tokens)
    if not shape.has_dims:  # the size only: the training state and vLLM's share, a lower bound
        state = training_state_bytes(
            shape.params, step.weight_bytes, engine, zero_stage, n_proc, step.lora, step.extra_copies
        )
        vllm = (step.vllm_share or 0) * gpu_gib * GIB
        floor = state + vllm + memory.ALLOWANCE
        line = (
            f"memory per GPU for {size}: at least {floor / GIB:.1f} GiB of {gpu_gib:.1f} GiB (training state "
            f"{state / GIB:.1f}"
            + (f" + vLLM {vllm / GIB:.1f}" if vllm else "")
            + " + allowance 2.0); activations "
            "not estimated: no config.json of the model is on this machine"
        )
        refusal = (
            [f"memory per GPU: at least {floor / GIB:.1f} GiB planned, more than the GPU's {gpu_gib:.1f} GiB "
             "(--gpu-memory-gib): shard the training state (--set deepspeed=configs/deepspeed/zero3.json, or "
             "FSDP), lower vllm_gpu_memory_utilization, or train a LoRA adapter (use_lora=true)"]
            if floor > gpu_gib * GIB
            else []
        )  # fmt: skip
        return [line], refusal
    plan = memory.gpu_memory_plan(shape, step, gpu_gib)
    lines = [
        f"memory per GPU for {size}, prompts up to {prompt_tokens} tokens ({bound}): {plan.line()}",
    ]
    return lines, plan.problems


def memory_plan(
    values: Mapping[str, Any],
    num_processes: int = 1,
    gpu_memory_gib: float = PLANNING_GPU_GIB,
    output_dir: str | Path = "unused",
) -> memory.MemoryPlan | None:
    """The memory plan per GPU of the flat settings ``values`` as the dry run makes it (the prompt bound:
    max_prompt_tokens, else an assumed 1,024 tokens); None when the model's shape is not known here.
    benchmarks/gpu_check.py compares it with the peak a run measures."""
    settings = unchecked_run_settings(values)
    cfg = {k: coerce_setting(k, v) for k, v in values.items() if k not in RUN_FIELDS}
    config = run.build_config({**cfg, **HARDWARE_FIELDS}, output_dir)
    shape, _source = model_shape(settings.model)
    if shape is None or not shape.has_dims:
        return None
    prompt_tokens = settings.max_prompt_tokens or ASSUMED_PROMPT_TOKENS
    step = _memory_step(settings, cfg, config, num_processes, prompt_tokens)
    return memory.gpu_memory_plan(shape, step, gpu_memory_gib)


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
