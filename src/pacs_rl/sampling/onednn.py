"""The sampler's LM head through oneDNN instead of the default CPU GEMM (MKL), fp32, inference only.

A decode step of a small model is a stack of skinny matrix products (rows = sequences still generating,
a few dozen to a few hundred), the widest being the LM head over the whole vocabulary (49,152 x 576 for
SmolLM2-135M: a fifth of the step's FLOPs). On the 2-core AVX2 machine these runs are measured on
(``benchmarks/linear_kernels.py``), ``torch.nn.functional.linear`` (MKL's sgemm) ran the LM head at
26-70 GFLOP/s for 16-256 rows and oneDNN's ``linear`` at 48-103 on the same weights, without re-packing
them (1.4-1.9x), while on the layers' own matrices oneDNN was no faster (0.66-1.15x): only the LM head is
swapped. Products of more than ``MAX_ROWS`` rows (a prefill of many prompts) keep ``F.linear``. The
results are the same products summed in another order: they agree with ``F.linear`` to float32
rounding, so samples drawn with the same seed are the same tokens unless a draw falls within that
rounding of a boundary.

``onednn_lm_head(model)`` swaps the LM head's forward (``model.get_output_embeddings()``, when it is a
plain float32 CPU ``nn.Linear``) for the oneDNN one for the duration of a ``with`` block and restores it
afterwards (the model is never copied, so a model under training can be sampled between optimizer
steps). It does nothing where it cannot help or cannot be trusted: a torch build without oneDNN's linear
op, a call under CPU autocast or one that needs gradients; and once per process it checks the op against
``F.linear`` on a small product before using it (a build whose op disagrees is not used, with a warning).
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
"""Products with more rows than this go to ``F.linear`` (measured up to 1,200 rows, where oneDNN's lead on
the LM head shrank to 1.24×; the sampler's decode steps have at most ``batch_size`` rows)."""


def _onednn_forward(module: torch.nn.Linear, op, x: torch.Tensor) -> torch.Tensor:
    weight, bias = module.weight, module.bias
    if (
        x.numel() > MAX_ROWS * x.shape[-1]
        or x.dtype != torch.float32
        or _autocast_on()  # autocast would run F.linear in bf16; calling the op directly would bypass it
        or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
    ):
        return torch.nn.functional.linear(x, weight, bias)
    return op(x if x.is_contiguous() else x.contiguous(), weight, bias, "none", [], "")


def _output_layer(model: torch.nn.Module) -> torch.nn.Linear | None:
    """The model's LM head when it is a plain float32 CPU ``nn.Linear`` not already swapped, else None."""
    get = getattr(model, "get_output_embeddings", None)
    try:
        head = get() if callable(get) else None
    except (AttributeError, NotImplementedError):
        return None
    if (
        type(head) is not torch.nn.Linear
        or head.weight.device.type != "cpu"
        or head.weight.dtype != torch.float32
        or "forward" in head.__dict__  # already swapped (nested use) or patched by someone else
    ):
        return None
    return head


@contextlib.contextmanager
def onednn_lm_head(model: torch.nn.Module, enabled: bool = True):
    """Within the block, the model's LM head (a plain float32 CPU ``nn.Linear``) computes through oneDNN
    (see the module docstring). Yields the number of layers swapped (0 or 1)."""
    head = _output_layer(model) if enabled and onednn_linear_available() else None
    if head is None:
        yield 0
        return
    head.forward = functools.partial(_onednn_forward, head, _op())
    try:
        yield 1
    finally:
        head.__dict__.pop("forward", None)
