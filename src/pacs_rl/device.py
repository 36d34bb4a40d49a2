"""Which device and precision a `pacs-rl train` run uses: the hardware decides unless the user said otherwise.

    values, choice = with_device(user_settings, default_settings())

The CPU default (`pacs_rl.training.schema.CPU_DEFAULTS`) is the bottom layer of every run. `user_settings` is what the user gave
above it (the --config file, the options, --set). The rules, in order:

1. ``use_cpu: true`` from the user: the CPU, with the CPU default's settings.
2. ``use_cpu: false`` from the user, or no ``use_cpu`` and a CUDA device present: CUDA.
3. Otherwise (no CUDA device): the CPU with the CPU default's settings.

On the CPU (rules 1 and 3) the user's ``bf16`` (or ``fp16``) decides; unset, the run is fp32. bf16 on a CPU
(``bf16: true``) is autocast: the matmuls in bf16; the weights, the optimizer state, the log-softmax, the
log-probability ratio and the loss in fp32. With it come `CPU_BF16`'s settings: the sampler on a bf16 copy of the
weights, the old log-probs from the trainer's own forward, larger update pieces. Where the CPU computes bf16
natively (AVX512-BF16 or AMX) that trains the first run faster; it would be the default there
(`CPU_BF16_DEFAULT`) once paired seeds show it learns as fp32 does, which they have not
(docs/benchmarks/cpu_bf16.md), so fp32 stays and the reason is printed. Without those instructions bf16
matmuls are emulated and several times slower.

On CUDA the choice sets ``use_cpu: false``, ``bf16`` (true where the GPU has bf16, Ampere and newer; false
before, fp32) unless the user set ``bf16`` (or ``fp16``), and turns off the CPU default's CPU-only conveniences
the user did not set themselves (`CPU_ONLY`): the fast sampler (its fp32 sampling and its log-probs are what the
CPU's fp32 path needs; on GPUs TRL's own generation, or vLLM, samples under bf16 autocast) and the update's
backward in pieces (one process, fp32 logits path: a CPU memory measure; TRL's tiled LM head bounds the logits
on GPUs). The config classes' defaults then apply to those settings.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

GIB = 1024**3

# The CPU default's settings that only serve its CPU path, with the config classes' defaults that replace them on
# CUDA (PACSConfig's own defaults; a test keeps them equal).
CPU_ONLY: dict[str, Any] = {
    "fast_sampler": False,
    "old_logprobs_from_sampler": False,
    "update_token_budget": None,
}


# Whether a CPU that computes bf16 natively trains in bf16 when the user leaves `bf16` unset. Off: over ten paired
# seeds of the CPU default (docs/benchmarks/cpu_bf16.md) the interval of bf16 - fp32 reached below -5 pp; the
# record's rule turns it on (an interval that holds 0 with its lower end above -5 pp).
CPU_BF16_DEFAULT = False
CPU_BF16_NOT_DEFAULT = (
    "this CPU computes bf16 (AVX512-BF16 or AMX), but paired runs have not shown bf16 learning as fp32 does "
    "(docs/benchmarks/cpu_bf16.md): fp32; bf16: true trained 1.24× faster in ten paired seeds (2026-11-27)"
)

# What bf16 on a CPU brings with it (the user's bf16: true, or the hardware's choice above): the fast
# sampler runs on a bf16 copy of the weights, so its log-probs are not the update's (which computes under
# autocast from the fp32 weights): the trainer computes the old log-probs with its own forward.
CPU_BF16: dict[str, Any] = {
    "fast_sampler_dtype": "bfloat16",
    "old_logprobs_from_sampler": False,
    "update_token_budget": 256,  # bf16 activations take half the bytes: twice the tokens per piece, fewer pieces
}


class CudaInfo(NamedTuple):
    """What this machine's torch sees of CUDA (device 0)."""

    available: bool
    bf16: bool = False  # the device computes in bf16 natively (compute capability >= 8.0)
    name: str = ""
    memory_gib: float | None = None  # total memory of device 0, GiB
    count: int = 0
    torch_cuda: str | None = None  # the CUDA version torch was built for; None: a CPU build


def no_cuda_here() -> bool:
    """True where this machine certainly has no CUDA device for torch, told without importing torch: macOS, or
    Linux without the device files of the NVIDIA (or ROCm) driver. False where only torch can tell."""
    if sys.platform == "darwin":
        return True
    if sys.platform.startswith("linux"):
        return not any(os.path.exists(f"/dev/{name}") for name in ("nvidiactl", "nvidia0", "kfd"))
    return False


def cuda_info() -> CudaInfo:
    """CUDA as torch sees it here; never raises (a CPU build of torch reads as no CUDA)."""
    import torch

    built = getattr(torch.version, "cuda", None)
    if not torch.cuda.is_available():
        return CudaInfo(False, torch_cuda=built)
    name, memory = "", None
    try:
        props = torch.cuda.get_device_properties(0)
        name, memory = props.name, props.total_memory / GIB
    except (RuntimeError, AssertionError):  # a faked or half-initialised CUDA: the name is only informative
        pass
    return CudaInfo(
        True,
        bf16=bool(torch.cuda.is_bf16_supported()),
        name=name,
        memory_gib=memory,
        count=torch.cuda.device_count(),
        torch_cuda=built,
    )


@dataclass(frozen=True)
class DeviceChoice:
    """Where a run trains and in which precision, what that sets, and why."""

    device: str  # "cuda" or "cpu"
    bf16: bool
    settings: dict[str, Any] = field(default_factory=dict)  # above the CPU default layer ({} on an fp32 CPU)
    why: str = ""  # why this device, one clause
    precision_why: str = ""  # why this precision, one clause
    turned_off: tuple[str, ...] = ()  # CPU_ONLY settings this choice turned off

    def line(self) -> str:
        """One line: the device, the precision and why."""
        device = "CUDA" if self.device == "cuda" else "CPU"
        precision = "bf16 autocast" if self.bf16 else "fp32"
        text = f"{device}, {precision}: {self.why}"
        if self.precision_why:
            text += f"; {self.precision_why}"
        if self.turned_off:
            text += f"; the CPU default's CPU-only settings are off ({', '.join(self.turned_off)})"
        return text


_TRUE = ("true", "yes", "1", "on")


def _flag(value: Any) -> bool | None:
    """A boolean setting as given (YAML bool, or text from the command line); None when unset."""
    if value is None or isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE


def _describe(cuda: CudaInfo) -> str:
    parts = [cuda.name or "CUDA device"]
    if cuda.memory_gib:
        parts.append(f"{cuda.memory_gib:.1f} GiB")
    if cuda.count > 1:
        parts.append(f"{cuda.count} visible")
    return ", ".join(parts)


def cpu_bf16_native() -> bool:
    """Whether this CPU computes bf16 matmuls natively (AVX512-BF16 or AMX); imports torch."""
    from pacs_rl.sampling.transformers_backend import cpu_has_native_bf16

    return cpu_has_native_bf16()


def _cpu_choice(user: Mapping[str, Any], why: str, cpu_bf16: bool | None) -> DeviceChoice:
    """The CPU's precision: the user's bf16/fp16, else bf16 autocast where the CPU computes bf16 natively."""
    bf16, fp16 = _flag(user.get("bf16")), _flag(user.get("fp16"))
    companions = {k: v for k, v in CPU_BF16.items() if k not in user}
    if bf16 is not None:
        mine = f"bf16: {str(bf16).lower()} in your settings"
        return DeviceChoice("cpu", bf16, companions if bf16 else {}, why=why, precision_why=mine)
    if fp16:
        return DeviceChoice("cpu", False, why=why, precision_why="fp16: true in your settings")
    if not (cpu_bf16_native() if cpu_bf16 is None else cpu_bf16):
        return DeviceChoice(
            "cpu", False, why=why, precision_why="this CPU has no bf16 instructions (AVX512-BF16, AMX)"
        )
    if not CPU_BF16_DEFAULT:
        return DeviceChoice("cpu", False, why=why, precision_why=CPU_BF16_NOT_DEFAULT)
    settings: dict[str, Any] = {"bf16": True, **companions}
    precision_why = (
        "this CPU computes bf16 (AVX512-BF16 or AMX): bf16 matmuls, fp32 weights, optimizer state and loss; "
        "set bf16: false for fp32"
    )
    return DeviceChoice("cpu", True, settings, why, precision_why)


def choose_device(user: Mapping[str, Any], cuda: CudaInfo, cpu_bf16: bool | None = None) -> DeviceChoice:
    """The device and precision of a run from the settings the user gave above the CPU default, this machine's
    CUDA and whether its CPU computes bf16 natively (None: ask torch; tests pass both)."""
    use_cpu, bf16, fp16 = _flag(user.get("use_cpu")), _flag(user.get("bf16")), _flag(user.get("fp16"))
    if use_cpu:
        why = "use_cpu: true in your settings"
        if cuda.available:
            why += f" (a CUDA device is present, {_describe(cuda)}: set use_cpu: false to train on it)"
        return _cpu_choice(user, why, cpu_bf16)
    if use_cpu is None and not cuda.available:
        build = " (this torch is a CPU build)" if cuda.torch_cuda is None else ""
        return _cpu_choice(user, f"no CUDA device on this machine{build}", cpu_bf16)
    if use_cpu is False:
        why = "use_cpu: false in your settings"
        if not cuda.available:
            why += " (no CUDA device here: a plan for the machine the run starts on)"
    else:
        why = f"a CUDA device is present ({_describe(cuda)}); set use_cpu: true for the CPU"
    if bf16 is not None:
        precision, precision_why = bf16, f"bf16: {str(bf16).lower()} in your settings"
    elif fp16:
        precision, precision_why = False, "fp16: true in your settings"
    elif cuda.available:
        precision = cuda.bf16
        precision_why = (
            "the GPU computes in bf16" if cuda.bf16 else "the GPU has no bf16 (before Ampere): fp32"
        )
    else:
        precision, precision_why = True, "bf16 assumed (no GPU here to ask; set bf16 to be sure)"
    settings: dict[str, Any] = {"use_cpu": False}
    if bf16 is None:
        settings["bf16"] = precision
    turned_off = tuple(k for k in CPU_ONLY if k not in user)
    settings.update({k: CPU_ONLY[k] for k in turned_off})
    return DeviceChoice("cuda", precision, settings, why, precision_why, turned_off)


def eval_dtype(cuda: CudaInfo) -> str:
    """`pacs-rl eval`'s dtype=auto on the device it picks: bfloat16 where the GPU computes in bf16, float32
    otherwise (the same rule as training's bf16)."""
    return "bfloat16" if cuda.available and cuda.bf16 else "float32"


def device_layer(choice: DeviceChoice, user: Mapping[str, Any]) -> dict[str, Any]:
    """What the device choice sets that the user did not: it lies over the defaults, under the user."""
    return {k: v for k, v in choice.settings.items() if k not in user}


def with_device(user: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[dict[str, Any], DeviceChoice]:
    """(the settings with the device layer, the device choice): ``defaults`` (the CPU default) < the device choice
    < ``user``. The hardware picks CUDA and its precision over the defaults unless ``user`` sets use_cpu / bf16;
    this imports torch to ask it. `pacs-rl train` and the paired comparison's runs both lay their settings so."""
    choice = choose_device(user, cuda_info())
    return {**defaults, **device_layer(choice, user), **user}, choice
