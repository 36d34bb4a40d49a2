"""update_token_budget: the update's backward in pieces gives the one-forward values and gradients."""

from __future__ import annotations

import pytest
import torch

from pacs_rl.run_folder import METRICS_FILE, read_jsonl
from pacs_rl.training import PACSConfig, PACSTrainer
from pacs_rl.training.logprobs import completion_logits_shared_prompt, completion_logps, plan_pieces
from pacs_rl.training.output import MetricsJsonlCallback
from pacs_rl.training.rollout import sequence_tensors
from train_helpers import G, grouped_batch, parity_reward, tiny_run_kwargs


def test_plan_pieces_pads_each_piece_to_its_longest_row():
    lengths = [3, 9, 0, 5, 9, 2, 4]
    pieces = plan_pieces(lengths, token_budget=18)
    assert pieces == [[1, 4], [3, 6, 0], [5]]  # 2×9, 3×5 (4 rows would be 20), then what is left
    assert sorted(i for p in pieces for i in p) == [0, 1, 3, 4, 5, 6]  # the empty row is left out
    assert all(len(p) * lengths[p[0]] <= 18 for p in pieces)
    assert plan_pieces(lengths, token_budget=1) == [[1], [4], [3], [6], [0], [5]]  # one row at least
    assert plan_pieces([4, 4], token_budget=100) == [[0, 1]]


def _batch(model, tokenizer):
    """Two prompts (one left-padded) × G=3 completions of mixed lengths, right-padded to T=6."""
    lengths = [6, 2, 4, 1, 5, 3]
    return (*grouped_batch(model.config.vocab_size, tokenizer.pad_token_id, 2, 3, lengths), 6)


def _one_forward(model, ids, attention, T, temperature, weights):
    from pacs_rl.training.logprobs import token_logps

    model.zero_grad(set_to_none=True)
    parts = completion_logits_shared_prompt(model, ids, attention, T)
    logps, used = [], 0
    for logits in parts:
        lp, _ = token_logps(logits, ids[:, -T:][:, used : used + logits.size(1)], temperature, False)
        logps.append(lp)
        used += logits.size(1)
    logps = torch.nn.functional.pad(torch.cat(logps, 1), (0, T - used))
    (logps * weights).sum().backward()
    return logps.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("budget", [1, 7, 1000])
def test_pieces_give_the_one_forward_values_and_gradients(tiny_model, tiny_tokenizer, budget):
    ids, attention, mask, T = _batch(tiny_model, tiny_tokenizer)
    weights = mask * torch.linspace(-1.0, 2.0, T) * torch.arange(1.0, 7.0).unsqueeze(1)
    weights[4] = 0.0  # a row without gradient is skipped by the pieces
    want_lp, want = _one_forward(tiny_model, ids, attention, T, 0.7, weights)

    with torch.no_grad():
        values, entropy = completion_logps(tiny_model, ids, attention, T, 0.7, budget, compute_entropy=True)
    torch.testing.assert_close(values, want_lp * mask, rtol=1e-5, atol=1e-5)
    assert entropy.shape == (6, T) and bool((entropy[mask.bool()] > 0).all())

    tiny_model.zero_grad(set_to_none=True)
    completion_logps(tiny_model, ids, attention, T, 0.7, budget, grad=weights)
    got = {n: p.grad for n, p in tiny_model.named_parameters() if p.grad is not None}
    assert got.keys() == want.keys() and len(got) > 10  # the prompt's layers got their share too
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-6, msg=name)


class _Trainer(PACSTrainer):
    """Keeps the micro-batches the loss sees."""

    def _compute_loss(self, model, inputs):
        self.seen = [*getattr(self, "seen", []), dict(inputs)]
        return super()._compute_loss(model, inputs)


def _trainer(tmp_path, model, tokenizer, **overrides):
    from datasets import Dataset

    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"{i}+{i}"}], "answer": str(2 * i)} for i in range(16)]
    )
    kw = tiny_run_kwargs(tmp_path, fast_sampler=True, temperature=0.7, old_logprobs_from_sampler=True)
    return _Trainer(model, parity_reward, args=PACSConfig(**{**kw, **overrides}), train_dataset=data,
                    processing_class=tokenizer, callbacks=[MetricsJsonlCallback()])  # fmt: skip


@pytest.mark.parametrize("loss_type", ["pacs", "grpo"])
@pytest.mark.parametrize("policy_stepped", [False, True])
def test_trainer_gradient_with_a_budget_equals_one_forward(
    tmp_path, tiny_tokenizer, loss_type, policy_stepped
):
    """The loss's gradient through the pieces equals the one-forward gradient: on the first mini-batch of a
    rollout (the values are the rollout's log-probs) and after the policy stepped (a no-grad forward)."""
    from pacs_rl.models import tiny_random_model

    model = tiny_random_model(tiny_tokenizer, seed=1)
    trainer = _trainer(tmp_path, model, tiny_tokenizer, loss_type=loss_type, update_token_budget=10)
    assert trainer._use_pieces
    trainer.current_gradient_accumulation_steps = 1  # set by transformers' loop, which this test does not run
    batch = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    assert batch["old_per_token_logps"] is not None  # from the fp32 sampler
    if policy_stepped:  # move the weights: the rollout's log-probs are no longer the current ones
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.02)
        trainer.optimizer_steps.rollout_step = -1
    batch = {k: (v[: 2 * G] if isinstance(v, torch.Tensor) and v.dim() and v.size(0) == 4 * G else v)
             for k, v in batch.items()}  # fmt: skip
    grads = {}
    for use in (False, True):
        trainer._use_pieces = use
        model.zero_grad(set_to_none=True)
        loss = trainer._compute_loss(model, batch)
        loss.backward()
        grads[use] = (
            loss.item(),
            {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
        )
    (loss_a, a), (loss_b, b) = grads[False], grads[True]
    assert loss_b == pytest.approx(loss_a, rel=1e-4, abs=1e-6)
    assert a.keys() == b.keys() and len(a) > 10
    scale = max(g.abs().max().item() for g in a.values())
    assert scale > 0
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-3, atol=1e-5 * scale, msg=name)
    entropies = trainer._metrics["train"]["entropy"]
    assert len(entropies) == 2 and all(e > 0 for e in entropies)  # one per loss call, pieces or not


def test_training_with_a_budget_logs_like_without(tmp_path, tiny_tokenizer):
    from pacs_rl.models import tiny_random_model

    trainer = _trainer(
        tmp_path, tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, update_token_budget=8
    )
    trainer.train()
    rows = [r for r in read_jsonl(tmp_path / METRICS_FILE) if "loss" in r]
    assert len(rows) == 2 and all(r["entropy"] > 0 and r["grad_norm"] > 0 for r in rows)
    assert (
        rows[0]["pacs/psi_abs_max"] == 0.0
    )  # first mini-batch: r̂ from the rollout's own log-probs, exactly 0


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        (dict(logprob_impl="trl"), "logprob_impl='trl'"),
        (dict(shared_prompt_forward=False), "shared_prompt_forward"),
    ],
)
def test_a_budget_that_cannot_apply_is_not_silently_ignored(
    tmp_path, tiny_model, tiny_tokenizer, overrides, why
):
    with pytest.warns(UserWarning, match=f"update_token_budget=16 is ignored with .*{why}"):
        trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, update_token_budget=16, **overrides)
    assert not trainer._use_pieces
    with pytest.raises(ValueError, match="update_token_budget=0"):
        PACSConfig(**tiny_run_kwargs(tmp_path, update_token_budget=0))


def test_the_rollouts_log_probs_and_entropies_are_what_the_pieces_compute(
    tmp_path, tiny_model, tiny_tokenizer
):
    """On the first mini-batch the pieces take the fp32 sampler's log-probs and entropies as the current ones."""
    trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, update_token_budget=8)
    batch = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    ids, attention, mask = sequence_tensors(batch)
    with torch.no_grad():
        values, entropy = completion_logps(
            trainer.model, ids, attention, mask.size(1), 0.7, 8, compute_entropy=True
        )
    assert mask.sum() > 0 and batch["sampler_entropies"].shape == mask.shape
    torch.testing.assert_close(values * mask, batch["old_per_token_logps"] * mask, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy * mask, batch["sampler_entropies"] * mask, rtol=1e-4, atol=1e-5)
