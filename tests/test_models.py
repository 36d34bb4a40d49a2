import torch

from pacs_rl.models import BUNDLED_MODELS, resolve_model, tiny_random_model, tiny_tokenizer


def test_tiny_tokenizer_round_trips_chat_template():
    tok = tiny_tokenizer()
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is 12+7?"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id != tok.eos_token_id


def test_tiny_random_model_is_deterministic_and_matches_vocab():
    tok = tiny_tokenizer()
    a, b = tiny_random_model(tok, seed=3), tiny_random_model(tok, seed=3)
    ids = torch.tensor([tok("1+1=")["input_ids"]])
    la, lb = a(ids).logits, b(ids).logits
    assert la.shape == (1, ids.shape[1], len(tok))
    assert torch.equal(la, lb)


def test_resolve_model_passes_paths_through(tiny_model_dir):
    assert resolve_model("some/hub-id") == "some/hub-id"  # the loader's to check (vLLM reads GGUF files too)
    assert resolve_model(str(tiny_model_dir)) == str(tiny_model_dir)
    assert "smollm2-135m" in BUNDLED_MODELS


def test_a_name_that_is_no_model_is_one_clear_error(tmp_path, tiny_model_dir, monkeypatch):
    import pytest

    from pacs_rl.models import ModelError, load_model, load_tokenizer, model_problem

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert model_problem("smollm2-135m") is None and model_problem(str(tiny_model_dir)) is None
    assert "has no config.json" in model_problem(str(tmp_path))
    (tmp_path / "weights.bin").write_text("x")
    assert "is a file" in model_problem(str(tmp_path / "weights.bin"))
    assert "no Hugging Face Hub id" in model_problem("runs/pacs/final")  # a mistyped path: not owner/name
    assert "not in the local cache while offline" in model_problem("nobody/no-such-model-xyz")
    with pytest.raises(ModelError, match="no bundled alias"):
        load_tokenizer("runs/pacs/final")
    with pytest.raises(ModelError, match="no bundled alias"):
        load_model("./missing-folder")


def test_cache_keyword_follows_the_installed_forward_and_sees_through_wrappers():
    import inspect

    from pacs_rl.models import cache_keyword

    model = tiny_random_model(tiny_tokenizer())
    params = inspect.signature(type(model).forward).parameters
    expected = "cache" if "cache" in params else "past_key_values"
    assert cache_keyword(model) == expected

    class Old(torch.nn.Module):  # a transformers before the rename
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            return input_ids

    class Wrapper(torch.nn.Module):  # DDP keeps the model in .module and its forward takes *args, **kwargs
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, *args, **kwargs):
            return self.module(*args, **kwargs)

    assert cache_keyword(Old()) == "past_key_values"
    assert cache_keyword(Wrapper(Old())) == "past_key_values"
    assert cache_keyword(Wrapper(model)) == expected


def test_the_sampler_and_the_pieces_use_no_deprecated_cache_keyword(recwarn):
    """transformers 5.24 deprecates ``past_key_values`` (removed in 5.40): our own calls must not use it."""
    from pacs_rl.sampling import SamplingParams, TransformersSampler
    from pacs_rl.training.logprobs import prompt_forward

    tok = tiny_tokenizer()
    model = tiny_random_model(tok)
    sampler = TransformersSampler(model, tok)
    out = sampler.generate(["1+1="], SamplingParams(n=2, max_new_tokens=3, temperature=1.0, seed=0))
    assert len(out) == 1 and len(out[0]) == 2
    ids = torch.tensor([tok("1+1=")["input_ids"]])
    head, cache, _, _ = prompt_forward(model, ids, torch.ones_like(ids))
    assert head.shape == (1, 1, len(tok)) and cache.get_seq_length() == ids.shape[1]
    deprecated = [w for w in recwarn.list if "past_key_values" in str(w.message)]
    assert not deprecated, [str(w.message) for w in deprecated]
