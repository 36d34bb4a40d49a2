"""Interface test of VLLMSampler against a FAKE ``vllm`` module (vLLM itself is not installed here).

It checks only our mapping onto vLLM's documented API — LLM(model=..., ...), SamplingParams(n,
temperature, top_p, max_tokens, seed, stop_token_ids, ...), llm.generate(prompts, params, use_tqdm)
and outputs[i].outputs[j].text / token_ids / finish_reason / logprobs — not vLLM's behaviour.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import pytest

from pacs_rl.sampling import SamplingParams, get_sampler


@dataclass
class FakeLogprob:
    logprob: float


@dataclass
class FakeCompletion:
    text: str
    token_ids: list[int]
    finish_reason: str
    logprobs: list | None = None


@dataclass
class FakeRequestOutput:
    prompt: object
    outputs: list[FakeCompletion] = field(default_factory=list)


def make_fake_vllm():
    mod = types.ModuleType("vllm")
    calls: dict = {}

    class SamplingParamsFake:
        def __init__(self, **kw):
            self.kw = kw

    class LLM:
        def __init__(self, model, **kw):
            calls["llm"] = {"model": model, **kw}

        def generate(self, prompts, sampling_params, use_tqdm=True):
            calls.setdefault("generate", []).append((prompts, sampling_params.kw, use_tqdm))
            n = sampling_params.kw["n"]
            out = []
            for p, prompt in enumerate(prompts):
                comps = []
                for j in range(n):
                    ids = [10 + p, 20 + j, 2] if j % 2 == 0 else [10 + p, 30 + j]
                    lps = [{t: FakeLogprob(-0.5 * (k + 1))} for k, t in enumerate(ids)]
                    comps.append(FakeCompletion(f"p{p}s{j}", ids, "stop" if j % 2 == 0 else "length", lps))
                out.append(FakeRequestOutput(prompt, comps))
            return out

    mod.LLM = LLM
    mod.SamplingParams = SamplingParamsFake
    return mod, calls


@pytest.fixture()
def fake_vllm(monkeypatch):
    mod, calls = make_fake_vllm()
    monkeypatch.setitem(sys.modules, "vllm", mod)
    return calls


def test_vllm_interface_mapping(fake_vllm, tiny_tokenizer, tmp_path):
    sampler = get_sampler(
        "vllm", str(tmp_path), tiny_tokenizer, dtype="float32", batch_size=16, enforce_eager=True
    )
    assert fake_vllm["llm"] == {
        "model": str(tmp_path),
        "max_num_seqs": 16,
        "enforce_eager": True,
        "dtype": "float32",
    }
    params = SamplingParams(n=2, temperature=0.6, top_p=0.95, max_new_tokens=7, seed=3, logprobs=True)
    groups = sampler.generate(["a", "b", "c"], params)
    prompts, kw, use_tqdm = fake_vllm["generate"][-1]
    assert prompts == ["a", "b", "c"]
    assert use_tqdm is False
    assert kw == {
        "n": 2,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_tokens": 7,
        "seed": 3,
        "stop_token_ids": [tiny_tokenizer.eos_token_id],
        "skip_special_tokens": True,
        "logprobs": 0,
    }
    assert [len(g) for g in groups] == [2, 2, 2]
    s = groups[1][0]
    assert (s.text, s.token_ids, s.finish_reason) == ("p1s0", [11, 20, 2], "stop")
    assert s.logprobs == [-0.5, -1.0, -1.5]
    assert groups[2][1].finish_reason == "length"


def test_vllm_generate_ids_uses_token_prompts(fake_vllm, tmp_path):
    sampler = get_sampler("vllm", str(tmp_path), None)
    groups = sampler.generate_ids([[5, 6], [7]], SamplingParams(stop_token_ids=[9]))
    prompts, kw, _ = fake_vllm["generate"][-1]
    assert prompts == [{"prompt_token_ids": [5, 6]}, {"prompt_token_ids": [7]}]
    assert kw["stop_token_ids"] == [9] and kw["logprobs"] is None
    assert groups[0][0].logprobs is None


def test_vllm_refuses_in_memory_model(fake_vllm, tiny_model, tiny_tokenizer):
    with pytest.raises(TypeError, match="cannot sample from an in-memory model"):
        get_sampler("vllm", tiny_model, tiny_tokenizer)


def test_missing_vllm_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r'pip install -e "\.\[vllm\]"'):
        get_sampler("vllm", str(tmp_path), None)
