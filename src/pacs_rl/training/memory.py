"""What one GPU holds at the peak of a training step, by component, from the model's shape: the memory plan that
`pacs-rl train --dry-run` prints and checks against the GPU's memory (a plan over it is refused).

    shape, source = model_shape("Qwen/Qwen2.5-7B")        # from config.json, without loading weights
    plan = gpu_memory_plan(shape, step, gpu_gib=79.0)    # step: the run's numbers (`Step`)
    plan.peak, plan.parts, plan.problems

The model's size and shape come from its config.json (a local folder, the local Hugging Face cache, or the
published config of the model a shipped config names), else its safetensors headers (size only), else the size
in its name (size only, approximate). Bytes below: b = 16-bit, 4 = fp32; P parameters, L layers, h hidden size,
I MLP width, q = heads x head_dim, kv = key/value heads x head_dim, V vocabulary; per GPU:

- training state: weights + gradients + AdamW's two moments (+ a frozen reference, a critic), sharded by the
  engine (`training_state_bytes`: DDP 16 bytes per parameter in fp32, ZeRO-3 and FSDP 16 / processes).
- vLLM colocated: vllm_gpu_memory_utilization x the GPU's memory, which vLLM claims at start for its weights,
  KV cache and its own activations, whatever the trainer holds. With vllm_enable_sleep_mode vLLM releases it
  while the policy updates (TRL sleeps it at level 2), so the peak is the larger of generating (state + share)
  and updating (state + activations + LM head).
- transformers generation (no vLLM): the KV cache of the rows one process generates at once, 2·L·kv bytes of
  the weights' dtype per token, plus their last-position logits (V x 4 bytes a row).
- activations of one micro-batch of ``rows`` sequences of ``tokens`` = prompt bound + max_completion_length, kept
  for the backward, per token and layer: a = 4·h·w + (3·q + 3·kv + 4·I)·c bytes (the two RMSNorms' inputs and
  outputs in the residual stream's dtype w = the weights'; q, k, v before and after RoPE, the attention output,
  and the MLP's gate, up, activation and product in the compute dtype c: 2 under bf16/fp16 autocast, else w).
  Without activation checkpointing L·a per token; with it L·h·w (each layer's input) plus one layer's a,
  recomputed in the backward.
- the LM head: TRL's tiled head (logprob_impl 'trl', the GPU default) holds an fp32 gradient of its weight
  (V·h·4), an fp32 gradient of the hidden states it scores (N·h·4, N = rows x completion tokens) and two tiles of
  4,096 tokens x min(V, 32,768) in c; the plain head ('logits') holds N·V·(c + 8): the logits, their fp32 copy
  and its gradient.
- gathered weights: ZeRO-3 keeps up to stage3_max_live_parameters (DeepSpeed's default 1e9) 16-bit weights
  gathered; FSDP two decoder layers (the one running and the one prefetched).
- an allowance of 2 GiB: the CUDA context, NCCL buffers, the allocator's fragmentation.

These are estimates of the largest terms, not a measurement: a plan that fits by a few GiB can still run out of
memory, and the other way round.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

GIB = 1024**3
ALLOWANCE = 2 * GIB
ZERO3_LIVE_PARAMETERS = 1e9  # DeepSpeed's stage3_max_live_parameters default
TRL_TILE = (4096, 32768)  # TRL's chunked log-prob tile: tokens x vocabulary columns
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

# Decoder families whose parameters follow from config.json (llama-like: RMSNorm, gated MLP, grouped-query
# attention); the value says which biases and norms each adds.
FAMILIES = {
    "llama": {},
    "mistral": {},
    "qwen2": {"qkv_bias": True},
    "qwen3": {"qk_norm": True},
}

# The published config.json of the model a shipped GPU config names, so that its plan reads the right size and
# shape without the network (a local copy or the Hub cache of the model wins).
PUBLISHED_CONFIGS: dict[str, dict] = {
    "Qwen/Qwen2.5-7B": {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    },
    # configs/qwen2.5-1.5b_1gpu.yaml and the README's one-GPU examples (1,543,714,304 and 494,032,768 parameters)
    "Qwen/Qwen2.5-1.5B-Instruct": {
        "model_type": "qwen2",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen2.5-0.5B-Instruct": {
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
    },
    # The Qwen3 models the paper's second version (February 2026) trains, and the one-GPU config's: the fields of
    # their config.json on the Hub that the size and shape depend on (configs/qwen3-8b_8gpu_vllm.yaml,
    # configs/qwen3-1.7b_1gpu.yaml). Qwen3 sets head_dim (128) apart from hidden_size / heads, adds an RMSNorm
    # on each head's queries and keys, and has no q/k/v bias. The -Base models have the same shapes
    # (max_position_embeddings 32768).
    "Qwen/Qwen3-8B": {
        "model_type": "qwen3",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-4B": {
        "model_type": "qwen3",
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16",
    },
    "Qwen/Qwen3-1.7B": {
        "model_type": "qwen3",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16",
    },
}


# ---------------------------------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class ModelShape:
    """A model's size and, when its config is known, the dimensions the activation estimate needs."""

    params: int
    layers: int | None = None
    hidden: int | None = None
    intermediate: int | None = None
    q_dim: int | None = None  # attention heads x head_dim
    kv_dim: int | None = None  # key/value heads x head_dim
    vocab: int | None = None
    weight_bytes: int = 2  # bytes per parameter of the published weights (what vLLM loads)
    max_positions: int | None = None  # max_position_embeddings: vLLM's max_model_len unless set

    @property
    def has_dims(self) -> bool:
        return None not in (self.layers, self.hidden, self.intermediate, self.q_dim, self.kv_dim, self.vocab)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Key and value cache of one token over all layers."""
        return 2 * self.layers * self.kv_dim * dtype_bytes


def shape_from_config(cfg: Mapping) -> ModelShape | None:
    """The shape of a llama-like decoder (`FAMILIES`) from its config.json; None for any other architecture.

    P = V·h (embeddings) + V·h unless tied (LM head) + h (final norm) + L·(h·q + 2·h·kv + q·h (attention)
    + 3·h·I (gated MLP) + 2·h (norms) + biases and q/k norms where the family has them)."""
    family = FAMILIES.get(str(cfg.get("model_type")))
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    if family is None or any(not isinstance(cfg.get(k), int) for k in keys):
        return None
    h, width, L, heads, V = (cfg[k] for k in keys)
    head_dim = cfg.get("head_dim") or h // heads
    q, kv = heads * head_dim, (cfg.get("num_key_value_heads") or heads) * head_dim
    attention_bias = bool(cfg.get("attention_bias", False))
    layer = h * q + 2 * h * kv + q * h + 3 * h * width + 2 * h
    if family.get("qkv_bias"):
        layer += q + 2 * kv
    elif attention_bias:  # llama's attention_bias: q, k, v and o
        layer += q + 2 * kv + h
    if cfg.get("mlp_bias"):
        layer += 2 * width + h
    if family.get("qk_norm"):
        layer += 2 * head_dim
    params = V * h * (1 if cfg.get("tie_word_embeddings", False) else 2) + h + L * layer
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    positions = cfg.get("max_position_embeddings")
    return ModelShape(params, L, h, width, q, kv, V, DTYPE_BYTES.get(str(dtype), 2), positions)


def _cached(repo: str, filename: str) -> str | None:
    """The path of a file of a Hub repository in the local cache; None when not there (or not a Hub id)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo, filename)
    except (ImportError, ValueError):  # no huggingface_hub, or a name that is no repository id
        return None
    return found if isinstance(found, str) else None


def _config_json(model: str, folder: Path | None) -> tuple[dict | None, str]:
    """(config.json, where it was read) of a local folder, the local Hub cache or `PUBLISHED_CONFIGS`."""
    if folder is not None and (folder / "config.json").is_file():
        return json.loads((folder / "config.json").read_text()), f"config.json in {folder}"
    cached = _cached(model, "config.json") if folder is None and "/" in model else None
    if cached:
        return json.loads(Path(cached).read_text()), "config.json in the local Hugging Face cache"
    if model in PUBLISHED_CONFIGS:
        return PUBLISHED_CONFIGS[model], f"{model}'s published config.json"
    return None, ""


def safetensors_params(folder: Path) -> int | None:
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
    index, config = _cached(repo, "model.safetensors.index.json"), _cached(repo, "config.json")
    if index and config:
        total = json.loads(Path(index).read_text()).get("metadata", {}).get("total_size")
        dtype = json.loads(Path(config).read_text()).get("torch_dtype") or "bfloat16"
        if total:
            return int(total) // DTYPE_BYTES.get(dtype, 2)
    single = _cached(repo, "model.safetensors")
    return safetensors_params(Path(single).parent) if single else None


def model_shape(model: str, folder: Path | None = None) -> tuple[ModelShape | None, str]:
    """(the model's shape, where it comes from) without loading it or using the network.

    folder: the model's local folder when it has one (a path, or a bundled model already converted)."""
    cfg, where = _config_json(model, folder)
    shape = shape_from_config(cfg) if cfg else None
    if shape is not None:
        return shape, where
    count, source = None, ""
    if folder is not None:
        count, source = safetensors_params(folder), f"safetensors headers in {folder}"
    elif "/" in model:
        count, source = _hub_cached_params(model), "the local Hugging Face cache"
    if count:
        return ModelShape(count), source
    match = re.search(r"(\d+(?:\.\d+)?)\s*([bBmM])(?![a-zA-Z])", Path(model).name)
    if match:
        scale = 1e9 if match.group(2).lower() == "b" else 1e6
        return ModelShape(int(float(match.group(1)) * scale)), "the size in the model's name (approximate)"
    return None, "unknown (not a local folder, not in the local Hub cache, no size in the name)"


# ---------------------------------------------------------------------------------------------------- components
def training_state_bytes(
    params: int, load_bytes: int, engine: str, zero_stage: int, processes: int, lora: bool, extra_copies: int
) -> float:
    """Weights + gradients + AdamW moments per device, in bytes.

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


def activation_bytes(
    shape: ModelShape, rows: int, tokens: int, checkpointing: bool, residual_bytes: int, compute_bytes: int
) -> float:
    """Activations one micro-batch keeps for its backward (the formula in the module's docstring)."""
    h = shape.hidden
    per_layer = (
        4 * h * residual_bytes + (3 * shape.q_dim + 3 * shape.kv_dim + 4 * shape.intermediate) * compute_bytes
    )
    per_token = shape.layers * h * residual_bytes + per_layer if checkpointing else shape.layers * per_layer
    return rows * tokens * per_token


def lm_head_bytes(shape: ModelShape, scored_tokens: int, impl: str, compute_bytes: int) -> float:
    """The LM head's peak for ``scored_tokens`` completion positions: TRL's tiles ('trl') or full logits."""
    V, h = shape.vocab, shape.hidden
    if impl == "trl":
        tile = min(scored_tokens, TRL_TILE[0]) * min(V, TRL_TILE[1]) * compute_bytes
        return 4 * V * h + 4 * scored_tokens * h + 2 * tile
    return scored_tokens * V * (compute_bytes + 8)


def gathered_bytes(shape: ModelShape, engine: str, zero_stage: int) -> float:
    """Weights a sharded engine holds gathered at once (16-bit)."""
    if engine == "deepspeed" and zero_stage == 3:
        return 2 * min(shape.params, ZERO3_LIVE_PARAMETERS)
    if engine == "fsdp" and shape.layers:
        return 2 * 2 * shape.params / shape.layers
    return 0.0


# ---------------------------------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Step:
    """What a run puts on one GPU, from its settings (plan.py builds it)."""

    processes: int
    engine: str  # single | ddp | deepspeed | fsdp
    zero_stage: int
    weight_bytes: int  # the loaded weights' dtype: 4 fp32, 2 bf16/fp16
    compute_bytes: int  # 2 under bf16/fp16 autocast, else weight_bytes
    lora: bool
    extra_copies: int  # a frozen reference (1), a critic (4)
    rows: int  # per_device_train_batch_size
    prompt_tokens: int  # the longest prompt the run can see
    completion_tokens: int  # max_completion_length
    checkpointing: bool
    head: str  # "trl" or "logits"
    vllm_share: float | None = None  # vllm_gpu_memory_utilization when vLLM is colocated
    vllm_sleep: bool = False
    vllm_tp: int = 1
    vllm_max_len: int | None = None
    generation_rows: int = 0  # rows one process generates at once without vLLM (0: vLLM or server)


@dataclass
class MemoryPlan:
    gpu_gib: float
    parts: list[tuple[str, float]] = field(default_factory=list)  # (what, bytes), in the order they add up
    peak: float = 0.0
    how: str = ""  # how the parts combine into the peak
    problems: list[str] = field(default_factory=list)  # refusals, each naming what to change

    def line(self) -> str:
        parts = " + ".join(f"{b / GIB:.1f} {what}" for what, b in self.parts)
        verdict = (
            f"fits, {self.gpu_gib - self.peak / GIB:.1f} GiB to spare"
            if self.peak <= self.gpu_gib * GIB
            else f"over by {self.peak / GIB - self.gpu_gib:.1f} GiB"
        )
        return f"{parts} = {self.peak / GIB:.1f} GiB{self.how} of {self.gpu_gib:.1f} GiB: {verdict}"


def gpu_memory_plan(shape: ModelShape, step: Step, gpu_gib: float) -> MemoryPlan:
    """The peak per GPU of a step (the module's docstring has each formula) and, when it is over ``gpu_gib``
    or vLLM's share cannot hold vLLM, the refusals naming what to change. ``shape`` must have its dims."""
    gpu = gpu_gib * GIB
    plan = MemoryPlan(gpu_gib)
    state = training_state_bytes(
        shape.params,
        step.weight_bytes,
        step.engine,
        step.zero_stage,
        step.processes,
        step.lora,
        step.extra_copies,
    )
    tokens = step.prompt_tokens + step.completion_tokens
    act = activation_bytes(
        shape, step.rows, tokens, step.checkpointing, step.weight_bytes, step.compute_bytes
    )
    head = lm_head_bytes(shape, step.rows * step.completion_tokens, step.head, step.compute_bytes)
    gathered = gathered_bytes(shape, step.engine, step.zero_stage)
    plan.parts = [("training state", state)]
    vllm = (step.vllm_share or 0.0) * gpu
    generation = 0.0
    if step.vllm_share is not None:
        plan.parts.append((f"vLLM ({step.vllm_share:g} of the GPU)", vllm))
    elif step.generation_rows:
        kv = step.generation_rows * tokens * shape.kv_bytes_per_token(step.weight_bytes)
        generation = kv + step.generation_rows * shape.vocab * 4
        plan.parts.append((f"generation KV cache ({step.generation_rows} rows)", generation))
    plan.parts += [
        (f"activations ({step.rows} rows x {tokens} tokens)", act),
        ("LM head", head),
    ]
    if gathered:
        plan.parts.append(("gathered weights", gathered))
    plan.parts.append(("allowance", ALLOWANCE))
    update = act + head
    if step.vllm_share is not None and step.vllm_sleep:
        plan.peak = state + max(vllm, update) + gathered + ALLOWANCE
        plan.how = " (vLLM sleeps during the update: the larger of vLLM and activations + LM head)"
    elif step.vllm_share is not None:
        plan.peak = state + vllm + update + gathered + ALLOWANCE
    else:
        plan.peak = state + max(generation, update) + gathered + ALLOWANCE
        if generation:
            plan.how = " (generation and update in turn: the larger of the two)"
    if step.vllm_share is not None:
        plan.problems += _vllm_problems(shape, step, gpu, tokens)
    if plan.peak > gpu:
        plan.problems.append(_over_message(plan, step, state, vllm, generation, act, head))
    return plan


def _vllm_problems(shape: ModelShape, step: Step, gpu: float, tokens: int) -> list[str]:
    """vLLM's share must hold its weights, its own activations (~1 GiB) and one longest sequence's KV cache."""
    vllm = step.vllm_share * gpu
    weights = shape.params * shape.weight_bytes / step.vllm_tp
    longest = step.vllm_max_len or shape.max_positions or tokens  # vLLM's max_model_len
    kv = longest * shape.kv_bytes_per_token(shape.weight_bytes) / step.vllm_tp
    need = weights + GIB + kv
    if vllm >= need:
        return []
    return [
        f"vllm_gpu_memory_utilization={step.vllm_share:g} gives vLLM {vllm / GIB:.1f} GiB of each GPU, less than its "
        f"weights ({weights / GIB:.1f} GiB), its own activations (~1 GiB) and one {longest}-token sequence's KV "
        f"cache ({kv / GIB:.2f} GiB): raise it to at least {math.ceil(need / gpu * 100) / 100:.2f} "
        "(making room elsewhere), or raise vllm_tensor_parallel_size"
        + (
            f", or set vllm_max_model_length={tokens} (the prompt bound + max_completion_length)"
            if longest > tokens
            else ""
        )
    ]


def _over_message(plan: MemoryPlan, step: Step, state, vllm, generation, act, head) -> str:
    """The refusal of a plan over the GPU's memory: the numbers, then what to change, largest part first."""
    fixes: list[tuple[float, str]] = []
    sharded = step.engine == "fsdp" or (step.engine == "deepspeed" and step.zero_stage == 3)
    if not sharded and not step.lora:
        fixes.append(
            (state, "shard the training state (--set deepspeed=configs/deepspeed/zero3.json, or FSDP) or train a "
             "LoRA adapter (use_lora=true)")
        )  # fmt: skip
    elif not step.lora:
        fixes.append(
            (state, "more processes to shard the training state over, or a LoRA adapter (use_lora=true)")
        )
    if vllm:
        fix = "lower vllm_gpu_memory_utilization"
        fix += (
            ""
            if step.vllm_sleep
            else " or set vllm_enable_sleep_mode=true (vLLM's share is freed for the update)"
        )
        fixes.append((vllm, fix + ", or generate on other GPUs (vllm_mode=server)"))
    if generation:
        fixes.append((generation, "generate with vLLM (use_vllm=true), or fewer rows per rollout"))
    activation_fix = (
        "lower per_device_train_batch_size (a multiple of num_generations), max_completion_length"
    )
    activation_fix += " or max_prompt_tokens"
    if not step.checkpointing:
        activation_fix = "set activation_checkpointing=true, or " + activation_fix
    fixes.append((act + head, activation_fix))
    fixes.sort(key=lambda f: -f[0])
    return (
        f"memory per GPU: {plan.peak / GIB:.1f} GiB planned, more than the GPU's {plan.gpu_gib:.1f} GiB "
        f"(--gpu-memory-gib); to fit: " + "; or ".join(text for _, text in fixes)
    )
