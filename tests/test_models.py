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
