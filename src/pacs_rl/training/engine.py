"""How a run trains on the machine it has: the engine (one process, DDP, DeepSpeed, FSDP), the dtype the weights
load in, DeepSpeed's communication on CPUs, and the settings of a run that conflict with its engine or with each
other (checked before any model loads, and by the dry run).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pacs_rl.training.config import PACSConfig
from pacs_rl.training.schema import RunSettings
from pacs_rl.training.trainer import sharding_problems


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
    from deepspeed import comm  # optional: the deepspeed extra

    if not comm.is_initialized():
        comm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)


def release_deepspeed() -> None:
    """Let go of what DeepSpeed keeps of a finished run, so that its process groups can be destroyed while the
    interpreter is whole (`pacs_rl.training.run.end_processes`); nothing when DeepSpeed was not used.

    A gloo group has worker threads of its own, joined only by its destructor; destroy_process_group leaves the group
    object, and its threads, to whoever still holds it. Under ZeRO-3 that is the whole model: every partitioned
    parameter names the world group, the engine and its optimizer hold DeepSpeed's data-parallel group, and DeepSpeed
    keeps the model reachable from module state for the life of the process (the top module stays on its forward
    stack, a cache of its parameter coordinator holds each submodule) and the world group in the defaults of its
    barrier functions (read when deepspeed.comm was imported). Left so, the threads live into the interpreter's
    finalization, and one of them that drops a finished collective then (its tensors are Python's, whose release
    needs the GIL) ends the process with SIGABRT ("terminate called without an active exception")."""
    import gc
    import sys

    if "deepspeed.runtime.engine" not in sys.modules:
        return
    import torch

    try:
        from deepspeed.comm.torch import TorchBackend
        from deepspeed.runtime.engine import DeepSpeedEngine
        from deepspeed.runtime.zero import parameter_offload
        from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator
    except ImportError:  # another DeepSpeed layout than the pinned versions': nothing to let go of here
        return

    # DeepSpeed's internals as the pinned versions (pyproject: deepspeed<0.20) have them; a hold another version
    # lacks is skipped, never an error at the end of a finished run (the DeepSpeed test counts the gloo threads left)
    for engine in [o for o in gc.get_objects() if isinstance(o, DeepSpeedEngine)]:
        engine.destroy()  # its hooks on the model
    stack = getattr(parameter_offload, "FWD_MODULE_STACK", None)
    if isinstance(stack, list):
        stack.clear()
    cached = getattr(
        PartitionedParameterCoordinator, "_PartitionedParameterCoordinator__params_to_release", None
    )
    for cell in getattr(cached, "__closure__", None) or ():  # lru_cache under DeepSpeed's nvtx wrapper
        if hasattr(cell.cell_contents, "cache_clear"):
            cell.cell_contents.cache_clear()
    # their default group, None, means the world group too
    for function in (getattr(TorchBackend, name, None) for name in ("barrier", "monitored_barrier")):
        if function is not None and function.__defaults__:
            function.__defaults__ = tuple(
                None if isinstance(d, torch.distributed.ProcessGroup) else d for d in function.__defaults__
            )


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
