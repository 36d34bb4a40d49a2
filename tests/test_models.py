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


def test_resolve_model_passes_paths_through():
    assert resolve_model("some/hub-id") == "some/hub-id"
    assert "smollm2-135m" in BUNDLED_MODELS
