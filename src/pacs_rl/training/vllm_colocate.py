"""TRL's vLLM generation as `PACSTrainer` uses it: extra engine arguments, the colocate weight sync on vLLM's
CPU build, and the rollout-vs-trainer log-prob mismatch a run under vLLM logs.

- `engine_arguments`: TRL builds `vllm.LLM(...)` itself (colocate mode) from a fixed set of its config fields.
  `vllm_engine_kwargs` adds others (dtype, enforce_eager, kv_cache_memory_bytes, ...) by wrapping the constructor
  TRL calls while the trainer is built. On vLLM's CPU build the dtype defaults to the policy's: vLLM otherwise
  runs an fp32 checkpoint in bf16, and its log-probs then differ from the trainer's by bf16 rounding.
- `sync_weights_reloading`: TRL's colocate sync copies each trainer parameter into vLLM's model with
  ``model.load_weights`` in place. vLLM's CPU build repacks every linear weight for its GEMM kernels after loading
  and drops the original parameter, so that copy fails ("'Parameter' object has no attribute 'weight_loader'").
  vLLM's own ``reload_weights`` restores the layers, loads and repacks them. A tied LM head receives no weight of
  its own (the tensor arrives once, as the input embedding), so its packed copy would keep the old values
  (measured: max |Δ log p| 0.18 after a 2% change of the embedding); it is repacked too.
- `torch_threads_kept`: vLLM's CPU worker, built in the trainer's process, drops torch to one thread; the
  trainer's thread count is put back.
- `logprob_mismatch`: mean and max |log p_trainer − log p_vLLM| over the response tokens of a rollout batch. TRL logs
  them (``sampling/sampling_logp_difference/mean`` and ``/max``) only with its importance-sampling correction on;
  PACS applies none, and the mismatch is what to watch for a sampler drifting away from the policy.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

# vllm.LLM arguments that TRL's colocate mode sets itself: each from a config field, or fixed by the mode.
ENGINE_ARGUMENTS_OF_TRL = {
    "model": "the policy's own name or folder",
    "tensor_parallel_size": "vllm_tensor_parallel_size",
    "gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "max_model_len": "vllm_max_model_length",
    "enable_sleep_mode": "vllm_enable_sleep_mode",
    "model_impl": "vllm_model_impl",
    "trust_remote_code": "trust_remote_code",
    "quantization": "the policy's own quantization (TRL reads it from the model)",
    "distributed_executor_backend": "TRL's colocate mode (external_launcher: vLLM runs inside the trainer process)",
    "seed": "TRL's colocate mode (one seed per tensor-parallel group)",
    "logprobs_mode": "TRL's colocate mode (processed_logprobs: the log-probs of the distribution sampled from)",
}


def engine_kwargs_problems(kwargs: dict[str, Any], use_vllm: bool, vllm_mode: str) -> list[str]:
    """Why ``vllm_engine_kwargs`` cannot be used as given (empty: it can)."""
    if not kwargs:
        return []
    if not use_vllm:
        return [
            f"vllm_engine_kwargs={kwargs!r} without use_vllm=True: nothing would read it. Set use_vllm=true."
        ]
    if vllm_mode != "colocate":
        return [
            f"vllm_engine_kwargs={kwargs!r} with vllm_mode={vllm_mode!r}: the server builds its own engine; pass "
            "these arguments to `trl vllm-serve` instead, or use vllm_mode='colocate'."
        ]
    return [
        f"vllm_engine_kwargs[{key!r}]: TRL sets this vllm.LLM argument from {ENGINE_ARGUMENTS_OF_TRL[key]}; "
        "remove it from vllm_engine_kwargs."
        for key in kwargs
        if key in ENGINE_ARGUMENTS_OF_TRL
    ]


def vllm_runs_on_cpu() -> bool:
    """Whether the installed vLLM is a CPU build (its platform, not the trainer's device)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


@contextlib.contextmanager
def engine_arguments(
    extra: dict[str, Any], default_dtype: Callable[[], torch.dtype | None]
) -> Iterator[None]:
    """While the trainer is built, every ``vllm.LLM(...)`` that TRL's generation module makes also gets ``extra``,
    and ``dtype=default_dtype()`` when neither TRL nor ``extra`` names one and that returns a dtype.
    Without vLLM (TRL's module then has no ``LLM``) nothing is wrapped: TRL raises its own ImportError."""
    from trl.generation import vllm_generation as module

    build = getattr(module, "LLM", None)
    if build is None:
        yield
        return

    def llm(*args, **kwargs):
        kwargs.update(extra)
        if "dtype" not in kwargs and (dtype := default_dtype()) is not None:
            kwargs["dtype"] = dtype
        return build(*args, **kwargs)

    module.LLM = llm
    try:
        yield
    finally:
        module.LLM = build


@contextlib.contextmanager
def torch_threads_kept() -> Iterator[None]:
    """Keep this process's torch thread count across building a colocated vLLM engine.

    vLLM's CPU worker, built inside the trainer process in colocate mode, sets torch to one thread for serving
    (unless OMP_NUM_THREADS is set) and replaces ``torch.set_num_threads`` with a function that refuses; the
    training forward and backward would then run on one core. Both are put back on exit."""
    threads, setter = torch.get_num_threads(), torch.set_num_threads
    try:
        yield
    finally:
        if torch.set_num_threads is not setter:
            torch.set_num_threads = setter
        if torch.get_num_threads() != threads:
            setter(threads)


@torch.no_grad()
def sync_weights_reloading(generation) -> None:
    """TRL's colocate weight sync (``VLLMGeneration.sync_weights``), through vLLM's ``reload_weights``.

    generation: TRL's ``VLLMGeneration`` in colocate mode. Its ``_iter_named_params`` yields the trainer's
    parameters under vLLM's names (gathered under ZeRO-3, adapters merged under PEFT), as TRL's own sync reads them.
    """
    runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
    runner.reload_weights(weights_iterator=generation._iter_named_params(), is_checkpoint_format=True)
    repack_tied_weights(runner.model)
    generation.llm.reset_prefix_cache()


def repack_tied_weights(model: torch.nn.Module) -> list[str]:
    """Rerun the weight processing of every vLLM module whose weight is another module's (a tied LM head): the
    reload processed only the first holder. Returns the names of the modules repacked."""
    holders: dict[int, str] = {}
    repacked = []
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.numel() == 0:
            continue  # a packed linear layer keeps an empty weight
        key = weight.data_ptr()
        method = getattr(module, "quant_method", None)
        if key in holders and method is not None:
            method.process_weights_after_loading(module)
            repacked.append(name)
        holders.setdefault(key, name)
    return repacked


def use_reloading_sync(generation) -> None:
    """Make ``generation.sync_weights`` (TRL's ``VLLMGeneration``, colocate mode) `sync_weights_reloading`."""
    generation.sync_weights = types.MethodType(sync_weights_reloading, generation)


def logprob_mismatch(
    trainer_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, max) of |trainer_logps − sampler_logps| over the tokens where ``mask`` is set; (0, 0) when none.

    trainer_logps, sampler_logps: (B, T) log-probs of the sampled tokens under the trainer's weights and as the
    sampler reported them; mask: (B, T), 1 on response tokens. Tokens the sampler could not score (NaN) are left
    out, as TRL leaves them out of its own figure."""
    delta = (trainer_logps.float() - sampler_logps.float()).abs()
    delta = delta[mask.bool() & ~torch.isnan(delta)]
    if delta.numel() == 0:
        zero = torch.zeros((), device=trainer_logps.device)
        return zero, zero
    return delta.mean(), delta.max()


__all__ = [
    "ENGINE_ARGUMENTS_OF_TRL",
    "engine_arguments",
    "engine_kwargs_problems",
    "logprob_mismatch",
    "repack_tied_weights",
    "sync_weights_reloading",
    "torch_threads_kept",
    "use_reloading_sync",
    "vllm_runs_on_cpu",
]
