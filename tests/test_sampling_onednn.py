"""The sampler's oneDNN linear layers: same products as F.linear to float32 rounding, swapped in only for
the sampling call (and restored), never on a path that needs gradients, and really used by the sampler."""

from __future__ import annotations

import warnings

import pytest
import torch

from pacs_rl.sampling import SamplingParams, TransformersSampler
from pacs_rl.sampling import onednn as onednn_mod
from pacs_rl.sampling.onednn import onednn_linear_available, onednn_lm_head
from test_sampling import PROMPTS

needs_onednn = pytest.mark.skipif(not onednn_linear_available(), reason="torch build without oneDNN linear")


@pytest.fixture()
def model(tiny_tokenizer):
    from pacs_rl.models import tiny_random_model

    m = tiny_random_model(tiny_tokenizer, seed=0)
    torch.manual_seed(3)
    m.lm_head.weight = torch.nn.Parameter(torch.randn_like(m.lm_head.weight))
    return m.eval()


def linears(model):
    return [m for m in model.modules() if type(m) is torch.nn.Linear]


@needs_onednn
def test_swapped_head_computes_f_linear_and_is_restored(model):
    head = model.get_output_embeddings()
    layer = torch.nn.Linear(24, 40)  # with a bias, unlike the tiny Llama's head
    op = onednn_mod._op()
    gen = torch.Generator().manual_seed(1)
    inputs = [
        torch.randn(7, 24, generator=gen),
        torch.randn(3, 5, 24, generator=gen),
        torch.randn(3, 5, 48, generator=gen)[..., ::2],  # not contiguous
        torch.randn(3, 9, 24, generator=gen)[:, -1:],  # the LM head's last position at prefill
    ]
    with torch.inference_mode():
        for x in inputs:
            got = onednn_mod._onednn_forward(layer, op, x)
            torch.testing.assert_close(got, torch.nn.functional.linear(x, layer.weight, layer.bias))
        with onednn_lm_head(model) as swapped:
            assert swapped == 1 and head.forward.func is onednn_mod._onednn_forward
            # only the LM head: the layers' own matrices were no faster through oneDNN
            assert [m for m in linears(model) if "forward" in m.__dict__] == [head]
            x = torch.randn(4, head.in_features, generator=gen)
            torch.testing.assert_close(head(x), torch.nn.functional.linear(x, head.weight))
    assert not any("forward" in m.__dict__ for m in model.modules())


@needs_onednn
def test_gradients_still_flow_inside_the_block(model):
    """A call that needs gradients inside the block goes through F.linear (oneDNN's op has no backward)."""
    layer = model.get_output_embeddings()
    x = torch.randn(2, layer.in_features, requires_grad=True)
    with onednn_lm_head(model):
        layer(x).sum().backward()
    assert x.grad is not None and layer.weight.grad is not None
    torch.testing.assert_close(x.grad, layer.weight.sum(0).expand(2, -1))


@needs_onednn
def test_autocast_calls_are_left_to_f_linear(model, monkeypatch):
    calls = []
    real = onednn_mod._op()
    monkeypatch.setattr(onednn_mod, "_op", lambda: lambda *a: calls.append(1) or real(*a))
    layer = model.get_output_embeddings()
    x = torch.randn(2, layer.in_features)
    with torch.inference_mode(), onednn_lm_head(model):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert layer(x).dtype == torch.bfloat16 and not calls
        assert layer(x).dtype == torch.float32 and calls


@needs_onednn
def test_long_products_are_left_to_f_linear(model, monkeypatch):
    """oneDNN only for skinny products (a decode step); a prefill-sized one keeps MKL's GEMM."""
    calls = []
    real = onednn_mod._op()
    monkeypatch.setattr(onednn_mod, "_op", lambda: lambda *a: calls.append(a[0].shape) or real(*a))
    layer = model.get_output_embeddings()
    with torch.inference_mode(), onednn_lm_head(model):
        layer(torch.randn(2, onednn_mod.MAX_ROWS // 2 + 1, layer.in_features))
        assert not calls
        layer(torch.randn(onednn_mod.MAX_ROWS, layer.in_features))
        assert calls == [(onednn_mod.MAX_ROWS, layer.in_features)]


def test_disabled_or_unavailable_swaps_nothing(model, monkeypatch):
    with onednn_lm_head(model, enabled=False) as swapped:
        assert swapped == 0 and not any("forward" in m.__dict__ for m in model.modules())
    monkeypatch.setattr(onednn_mod, "_op", lambda: None)
    onednn_mod.onednn_linear_available.cache_clear()
    try:
        assert not onednn_linear_available()
        with onednn_lm_head(model) as swapped:
            assert swapped == 0
    finally:
        onednn_mod.onednn_linear_available.cache_clear()


def test_an_op_that_disagrees_is_not_used(monkeypatch):
    def wrong(x, w, b, *_):
        return torch.nn.functional.linear(x, w, b) + 1e-2

    monkeypatch.setattr(onednn_mod, "_op", lambda: wrong)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    onednn_mod.onednn_linear_available.cache_clear()
    try:
        with pytest.warns(UserWarning, match="disagrees with F.linear"):
            assert not onednn_linear_available()
    finally:
        onednn_mod.onednn_linear_available.cache_clear()


@needs_onednn
def test_sampler_uses_onednn_in_fp32_and_matches_the_default_gemm(model, tiny_tokenizer, monkeypatch):
    calls = []
    real = onednn_mod._op()

    def counting(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(onednn_mod, "_op", lambda: counting)
    params = SamplingParams(n=3, temperature=0.0, max_new_tokens=12, logprobs=True, logprob_temperature=0.7)
    fast = TransformersSampler(model, tiny_tokenizer).generate(PROMPTS, params)
    assert len(calls) >= 12  # the LM head, every step
    calls.clear()
    plain = TransformersSampler(model, tiny_tokenizer, onednn=False).generate(PROMPTS, params)
    assert not calls
    for g_fast, g_plain in zip(fast, plain, strict=True):
        for a, b in zip(g_fast, g_plain, strict=True):
            assert a.token_ids == b.token_ids
            torch.testing.assert_close(
                torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=1e-5
            )
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_bf16_sampler_does_not_swap(model, tiny_tokenizer, monkeypatch):
    calls = []
    monkeypatch.setattr(onednn_mod, "_op", lambda: lambda *a: calls.append(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the bf16-without-bf16-instructions warning
        sampler = TransformersSampler(model, tiny_tokenizer, dtype="bfloat16")
    sampler.generate(PROMPTS[:1], SamplingParams(n=2, max_new_tokens=3, seed=0))
    assert not calls
