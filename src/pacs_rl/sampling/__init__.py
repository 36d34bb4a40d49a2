"""Sampling backends shared by evaluation and training: n completions per prompt.

sampler = get_sampler("transformers", model, tokenizer, batch_size=64)
groups = sampler.generate(prompts, SamplingParams(n=8, temperature=1.0, max_new_tokens=256, seed=0))
groups[i][j].text, .token_ids, .finish_reason
"""

from __future__ import annotations

from pacs_rl.sampling.ops import inverse_cdf_sample, reference_probs, sample_next_token
from pacs_rl.sampling.params import Sample, SamplingParams
from pacs_rl.sampling.transformers_backend import TransformersSampler
from pacs_rl.sampling.vllm_backend import VLLMSampler

BACKENDS = ("transformers", "vllm")


def get_sampler(backend: str, model, tokenizer, **kw):
    """Build a sampler: "transformers" (a model object, used in place) or "vllm" (a model path or a
    vllm.LLM). ``kw`` goes to the backend's constructor (dtype, batch_size, progress, ...)."""
    if backend == "transformers":
        return TransformersSampler(model, tokenizer, **kw)
    if backend == "vllm":
        return VLLMSampler(model, tokenizer, **kw)
    raise ValueError(f"unknown sampling backend {backend!r}; choose one of {', '.join(BACKENDS)}")


__all__ = [
    "BACKENDS",
    "Sample",
    "SamplingParams",
    "TransformersSampler",
    "VLLMSampler",
    "get_sampler",
    "inverse_cdf_sample",
    "reference_probs",
    "sample_next_token",
]
