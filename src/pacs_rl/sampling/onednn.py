"""The sampler's linear layers through oneDNN instead of the default CPU GEMM (MKL), fp32, inference only.

A decode step of a small model is a stack of skinny matrix products (rows = sequences still generating, a
few dozen to a few hundred) plus the LM head over the whole vocabulary. On the AVX2 CPUs these runs are
measured on, ``torch.nn.functional.linear`` (MKL's sgemm) reaches ~60–90 GFLOP/s on those shapes and
oneDNN's ``linear`` ~110–140 on the same weights, without re-packing them (docs/EVALUATION.md,
"Sampling backends and speed"); on products of a thousand rows and more (a prefill, a training forward)
MKL is the faster, so those keep ``F.linear`` (``MAX_ROWS``). The results are the same products summed in another order: they agree
with ``F.linear`` to float32 rounding, so samples drawn with the same seed are the same tokens unless a
draw falls within that rounding of a boundary.

``onednn_linears(model)`` swaps every plain ``nn.Linear``'s forward for the oneDNN one for the duration
of a ``with`` block and restores it afterwards (the model is never copied, so a model under training can
be sampled between optimizer steps). It does nothing where it cannot help or cannot be trusted: a
torch build without oneDNN's linear op, a layer that is not float32 on the CPU, a call under CPU autocast
or one that needs gradients; and once per process it checks the op against ``F.linear`` on a small product before using
it (a build whose op disagrees is not used, with a warning).
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch


def _op():
    mkldnn = getattr(torch.ops, "mkldnn", None)
    try:
        return mkldnn._linear_pointwise if mkldnn is not None else None
    except (AttributeError, RuntimeError):  # a torch build without oneDNN's linear op
        return None


@functools.cache
def onednn_linear_available() -> bool:
    """Whether this torch build has oneDNN's fp32 linear op and it agrees with ``F.linear`` (checked once)."""
    op = _op()
    if op is None or not torch.backends.mkldnn.is_available():
        return False
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, 24, generator=gen)
    w, b = torch.randn(40, 24, generator=gen), torch.randn(40, generator=gen)
    try:
        with torch.inference_mode():
            got = op(x, w, b, "none", [], "")
    except RuntimeError as e:
        warnings.warn(f"oneDNN linear is not usable in this torch build ({e}); using F.linear", stacklevel=2)
        return False
    want = torch.nn.functional.linear(x, w, b)
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
        warnings.warn(
            "oneDNN linear disagrees with F.linear in this torch build; using F.linear", stacklevel=2
        )
        return False
    return True


def _autocast_on() -> bool:
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # older torch
        return torch.is_autocast_cpu_enabled()


MAX_ROWS = 256
"""Products with more rows than this go to ``F.linear``: oneDNN wins on a decode step's skinny products
(a row per sequence) and loses on long ones (a prefill, a training forward: ~0.6x at 1,200 rows)."""


def _onednn_forward(module: torch.nn.Linear, op, x: torch.Tensor) -> torch.Tensor:
    weight, bias = module.weight, module.bias
    if (
        x.numel() > MAX_ROWS * x.shape[-1]
        or x.dtype != torch.float32
        or _autocast_on()  # autocast would run F.linear in bf16; calling the op directly would bypass it
        or x.device.type != "cpu"
        or weight.dtype != torch.float32
        or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
    ):
        return torch.nn.functional.linear(x, weight, bias)
    return op(x if x.is_contiguous() else x.contiguous(), weight, bias, "none", [], "")


@contextlib.contextmanager
def onednn_linears(model: torch.nn.Module, enabled: bool = True):
    """Within the block, every plain float32 CPU ``nn.Linear`` of ``model`` computes through oneDNN (see
    the module docstring). Yields the number of layers swapped (0 when disabled or unavailable)."""
    op = _op() if enabled and onednn_linear_available() else None
    layers = []
    if op is not None:
        layers = [
            m
            for m in model.modules()
            if type(m) is torch.nn.Linear
            and m.weight.device.type == "cpu"
            and m.weight.dtype == torch.float32
            and "forward" not in m.__dict__  # already swapped (nested use) or patched by someone else
        ]
    for m in layers:
        m.forward = functools.partial(_onednn_forward, m, op)
    try:
        yield len(layers)
    finally:
        for m in layers:
            m.__dict__.pop("forward", None)
