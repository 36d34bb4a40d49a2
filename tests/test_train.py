"""PACSTrainer on a tiny random model: whole groups, raw rewards, the reference modes, every loss,
metrics.jsonl and exact resume. Each run is a few optimizer steps of 8-token completions."""

from __future__ import annotations

import json

import pytest
import torch

from pacs_rl.run_folder import METRICS_FILE, last_complete_checkpoint, read_jsonl
from pacs_rl.training import PACSConfig, PACSTrainer
from pacs_rl.training.output import MetricsJsonlCallback
from pacs_rl.training.reward_signal import group_mixed_fraction
from pacs_rl.training.rollout import sequence_tensors, shuffle_groups
from train_helpers import (
    G,
    grouped_batch,
    keep_first_checkpoint,
    parity_reward,
    tiny_run_kwargs,
    train_until_killed,
)


def _dataset(n=32):
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"{i}+{i}"}], "answer": str(2 * i)} for i in range(n)]
    )


def _config(tmp_path, **overrides):
    return PACSConfig(**tiny_run_kwargs(tmp_path, **overrides))


def _trainer(tmp_path, model, tokenizer, reward=parity_reward, cls=PACSTrainer, **overrides):
    return cls(
        model,
        reward,
        args=_config(tmp_path, **overrides),
        train_dataset=_dataset(),
        processing_class=tokenizer,
        callbacks=[MetricsJsonlCallback()],
    )


# ---------------------------------------------------------------- configuration checks
def test_config_refuses_group_splitting_batch(tmp_path):
    with pytest.raises(
        ValueError, match="per_device_train_batch_size=6 is not a multiple of num_generations=4"
    ):
        _config(tmp_path, per_device_train_batch_size=6)


def test_config_schedule_maps_to_trl(tmp_path):
    cfg = _config(tmp_path, gradient_accumulation_steps=3, mini_batches_per_rollout=4)
    assert cfg.steps_per_generation == 12  # 4 mini-batches × 3 micro-batches
    assert cfg.generation_batch_size == 12 * 2 * G
    default = PACSConfig(
        output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=8, num_generations=8
    )
    assert default.mini_batches_per_rollout == 4 and default.steps_per_generation == 4
    assert default.loss_type == "pacs" and default.beta == 0.0 and default.bf16 is False
    derived = _config(
        tmp_path, mini_batches_per_rollout=None, steps_per_generation=6, gradient_accumulation_steps=2
    )
    assert derived.mini_batches_per_rollout == 3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            dict(steps_per_generation=3, mini_batches_per_rollout=None, gradient_accumulation_steps=2),
            "not a multiple of gradient_accumulation_steps",
        ),
        (dict(steps_per_generation=3, mini_batches_per_rollout=2), "disagrees with mini_batches_per_rollout"),
        (dict(beta=0.1), "pacs_beta"),
        (dict(reference="frozen", ref_reset_steps=3), "ref_reset_steps=3 is not a multiple"),
        (dict(loss_type="ppo"), "reserved"),
        (dict(loss_type="dapo"), "not supported by PACSTrainer"),
        (dict(pacs_score="mean"), "pacs_score='mean'"),
    ],
)
def test_config_errors_name_the_setting(tmp_path, overrides, message):
    with pytest.raises((ValueError, NotImplementedError), match=message):
        _config(tmp_path, **overrides)


# ---------------------------------------------------------------- pure helpers
def test_shuffle_groups_moves_whole_groups():
    torch.manual_seed(0)
    n_groups = 6
    group_id = torch.arange(n_groups).repeat_interleave(G)  # (B,)
    batch = {
        "gid": group_id,
        "tokens": group_id[:, None].expand(-1, 3).clone(),
        "names": [f"g{g}" for g in group_id.tolist()],
        "num_items_in_batch": torch.tensor(7),
    }
    out = shuffle_groups(batch, G)
    blocks = out["gid"].view(n_groups, G)
    assert (blocks == blocks[:, :1]).all()  # every block of G rows is one group
    assert sorted(blocks[:, 0].tolist()) == list(range(n_groups))
    assert out["names"] == [f"g{g}" for g in out["gid"].tolist()]
    assert (out["tokens"][:, 0] == out["gid"]).all()
    assert out["num_items_in_batch"].item() == 7
    # some permutation happens for some seed (not the identity for every draw)
    seen = {tuple(shuffle_groups(batch, G)["gid"].view(n_groups, G)[:, 0].tolist()) for _ in range(5)}
    assert len(seen) > 1
    with pytest.raises(ValueError, match="whole number of groups"):
        shuffle_groups({"x": torch.zeros(5)}, G)


def test_group_mixed_fraction():
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0])
    assert group_mixed_fraction(rewards, G) == pytest.approx(2 / 4)


def test_last_complete_checkpoint(tmp_path):
    assert last_complete_checkpoint(tmp_path / "missing") is None
    for step, complete in [(2, True), (4, True), (6, False)]:
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if complete:
            (d / "trainer_state.json").write_text("{}")
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-4")


# ---------------------------------------------------------------- the trainer
class RecordingTrainer(PACSTrainer):
    """Keeps every micro-batch the loss sees."""

    def _compute_loss(self, model, inputs):
        self.seen = [*getattr(self, "seen", []), {k: v for k, v in inputs.items()}]
        return super()._compute_loss(model, inputs)


def test_micro_batches_hold_whole_groups_and_raw_rewards(tmp_path, tiny_model, tiny_tokenizer):
    calls = []

    def reward(completions, **kw):
        scores = parity_reward(completions)
        calls.append(scores)
        return scores

    trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, reward=reward, cls=RecordingTrainer, max_steps=2)
    trainer.train()
    assert len(trainer.seen) == 2 and len(calls) == 1  # one rollout serves both mini-batches
    rollout_rewards = sorted(calls[0])
    seen_rewards = []
    for batch in trainer.seen:
        prompts = batch["prompt_ids"].view(-1, G, batch["prompt_ids"].shape[1])
        assert (prompts == prompts[:, :1]).all(), "a micro-batch holds a partial group"
        assert len({tuple(p[0].tolist()) for p in prompts}) == prompts.shape[0]  # distinct groups
        assert batch["rewards"].shape == (2 * G,)
        seen_rewards += batch["rewards"].tolist()
        assert "old_per_token_logps" in batch  # 2 mini-batches per rollout: computed at rollout time
    assert sorted(seen_rewards) == rollout_rewards  # the raw 0/1 rewards reach the loss, each once


def test_reference_old_proxy_is_zero_on_first_minibatch_only(tmp_path, tiny_model, tiny_tokenizer):
    trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, max_steps=2)
    trainer.train()
    rows = read_jsonl(tmp_path / METRICS_FILE)
    assert [r["step"] for r in rows if "pacs/psi_abs_max" in r] == [1, 2]
    first, second = (r for r in rows if "pacs/psi_abs_max" in r)
    assert first["pacs/psi_abs_max"] < 1e-4  # π = π_old: r̂ = 0, ψ = 0, loss = log 2
    assert first["pacs/loss"] == pytest.approx(torch.log(torch.tensor(2.0)).item(), abs=1e-4)
    assert second["pacs/psi_abs_max"] > 1e-3  # after one update r̂ is informative
    for key in (
        "loss",
        "grad_norm",
        "reward",
        "accuracy",
        "entropy",
        "completions/mean_length",
        "groups/mixed_frac",
        "pacs/prob_mean",
        "pacs/critic_accuracy",
        "pacs/brier",
        "pacs/weight_mean",
    ):
        assert key in first, f"metrics.jsonl lacks {key}"
    # the critic's AUC: logged for a step whose mini-batches held a mixed group, absent (not nan) otherwise
    for row in rows:
        if row.get("groups/mixed_frac_minibatch", 0) > 0:
            assert 0.0 <= row["pacs/critic_auc"] <= 1.0
        elif "groups/mixed_frac_minibatch" in row:
            assert "pacs/critic_auc" not in row
    assert any("pacs/critic_auc" in r for r in rows), "no step had a mixed group: the check above is empty"


def test_non_binary_reward_is_refused_for_pacs(tmp_path, tiny_model, tiny_tokenizer):
    def half(completions, **kw):
        return [0.5] * len(completions)

    trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, reward=half, max_steps=1)
    with pytest.raises(ValueError, match=r"reward outside \{0, 1\}.*half"):
        trainer.train()


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "rloo", "cw_grpo"])
def test_baselines_share_the_path(tmp_path, tiny_model, tiny_tokenizer, loss_type):
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, loss_type=loss_type, max_steps=2)
    trainer.train()
    rows = read_jsonl(tmp_path / METRICS_FILE)
    assert any(k.startswith(f"{loss_type}/clip_ratio") for r in rows for k in r), (
        f"no clip ratio logged: {sorted(rows[0])}"
    )
    assert all(r["loss"] == r["loss"] for r in rows if "loss" in r)  # finite, not NaN
    changed = any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    assert changed


def test_frozen_reference_resets_and_clears_optimizer(tmp_path, tiny_model, tiny_tokenizer):
    from transformers import TrainerCallback

    sizes = []

    class Probe(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            sizes.append(len(getattr(trainer.optimizer, "optimizer", trainer.optimizer).state))

    trainer = _trainer(
        tmp_path,
        tiny_model,
        tiny_tokenizer,
        reference="frozen",
        ref_reset_steps=2,
        reset_optimizer=True,
        max_steps=4,
    )
    trainer.add_callback(Probe())
    trainer.train()
    assert trainer.num_reference_resets == 2
    # the probe runs after the reset callback: state cleared on steps 2 and 4, kept on 1 and 3
    assert sizes[0] > 0 and sizes[1] == 0 and sizes[2] > 0 and sizes[3] == 0
    ref, pol = trainer.ref_policy.state_dict(), trainer.model.state_dict()
    assert all(torch.equal(ref[k], pol[k]) for k in ref)  # reset at the final step 4


@pytest.mark.parametrize("reference", ["old", "frozen"])
def test_interrupted_run_resumes_to_identical_weights(tmp_path, tiny_tokenizer, reference):
    """4 steps in one go vs. killed after step 3 and resumed from the step-1 checkpoint (mid-rollout)."""
    from pacs_rl.models import tiny_random_model

    extra = dict(max_steps=4, save_strategy="steps", save_steps=1, reference=reference)
    if reference == "frozen":
        extra.update(ref_reset_steps=2, reset_optimizer=True)

    full = _trainer(tmp_path / "full", tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra)
    full.train()

    run_dir = tmp_path / "killed"
    train_until_killed(
        _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra), 3
    )
    checkpoint = keep_first_checkpoint(run_dir, 3)  # pretend the kill came earlier: only step 1's survived

    resumed = _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=1), tiny_tokenizer, **extra)
    resumed.train(resume_from_checkpoint=checkpoint)
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    steps = [r["step"] for r in read_jsonl(run_dir / METRICS_FILE) if "loss" in r]
    assert steps == [1, 2, 3, 4]  # rows of redone steps replaced, not duplicated
    json.loads((run_dir / METRICS_FILE).read_text().splitlines()[-1])


@pytest.mark.parametrize(
    "moment, step, fast_sampler",
    [("sampling", 3, True), ("sampling", 3, False), ("update", 2, False)],
    ids=["sampling-fast-sampler", "sampling-trl-generate", "update"],
)
def test_run_signalled_mid_step_drops_the_step_and_resumes_to_identical_weights(
    tmp_path, tiny_tokenizer, moment, step, fast_sampler
):
    """SIGTERM in the middle of a step (its rollout half sampled, by the fast sampler or TRL's generate; its update
    after the first micro-batch's forward began): the run stops at the next check point, no forward of the policy
    runs to its end after the signal and the step is not counted, nothing of it is written (the last checkpoint is
    the step before), and the run resumed from that checkpoint ends with the weights of a run in one go."""
    from pacs_rl.models import tiny_random_model

    extra = dict(max_steps=4, save_strategy="steps", save_steps=1, fast_sampler=fast_sampler)
    full = _trainer(tmp_path / "full", tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra)
    full.train()

    run_dir = tmp_path / "stopped"
    stopped = _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra)
    assert train_until_killed(stopped, step, event=moment) == 0
    assert last_complete_checkpoint(run_dir) == str(run_dir / f"checkpoint-{step - 1}")
    assert not (run_dir / f"checkpoint-{step}").exists()
    assert [r["step"] for r in read_jsonl(run_dir / METRICS_FILE) if "loss" in r] == list(range(1, step))

    resumed = _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=1), tiny_tokenizer, **extra)
    resumed.train(resume_from_checkpoint=last_complete_checkpoint(run_dir))
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert any(
        not torch.equal(a[k], v) for k, v in tiny_random_model(tiny_tokenizer, seed=0).state_dict().items()
    )
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    assert [r["step"] for r in read_jsonl(run_dir / METRICS_FILE) if "loss" in r] == [1, 2, 3, 4]


def test_fast_sampler_rollouts_train_and_resume_exactly(tmp_path, tiny_tokenizer):
    """fast_sampler=True: the rollout goes through pacs_rl.sampling; groups whole, seeds from torch's RNG."""
    from pacs_rl.models import tiny_random_model

    extra = dict(max_steps=4, fast_sampler=True, save_strategy="steps", save_steps=2)
    a = _trainer(
        tmp_path / "a",
        tiny_random_model(tiny_tokenizer, seed=0),
        tiny_tokenizer,
        cls=RecordingTrainer,
        **extra,
    )
    a.train()
    for batch in a.seen:
        prompts = batch["prompt_ids"].view(-1, G, batch["prompt_ids"].shape[1])
        assert (prompts == prompts[:, :1]).all()
        assert batch["completion_mask"].sum() > 0
    b = _trainer(tmp_path / "a", tiny_random_model(tiny_tokenizer, seed=3), tiny_tokenizer, **extra)
    b.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-2"))  # the step-3 rollout is redrawn
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    with pytest.raises(ValueError, match="top_k"):
        _config(tmp_path, fast_sampler=True, top_k=5)


def test_old_logprobs_from_the_fp32_sampler_equal_a_forward(tmp_path, tiny_tokenizer, monkeypatch):
    """old_logprobs_from_sampler: the rollout's old log-probs are the sampler's, no forward runs for them, and
    they equal the forward's (at the sampling temperature) up to float rounding; the first mini-batch still
    has r̂ = 0 exactly. Under bf16 the forward runs, with a warning."""
    from pacs_rl.models import tiny_random_model

    extra = dict(fast_sampler=True, temperature=0.7, max_steps=1, old_logprobs_from_sampler=True)
    trainer = _trainer(
        tmp_path, tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, cls=RecordingTrainer, **extra
    )
    from pacs_rl.training import logprobs as logprobs_module

    forwards = []
    real = logprobs_module.completion_logits_shared_prompt
    monkeypatch.setattr(logprobs_module, "completion_logits_shared_prompt",
                        lambda *a, **k: forwards.append(1) or real(*a, **k))  # fmt: skip
    batch = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    assert forwards == []  # the sampler scored the rollout: no old-log-prob forward
    old = batch["old_per_token_logps"]
    input_ids, attention_mask, mask = sequence_tensors(batch)
    with torch.no_grad():
        fresh, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention_mask, mask.size(1)
        )
    assert old.shape == fresh.shape and mask.sum() > 0
    torch.testing.assert_close(old * mask, fresh * mask, rtol=1e-5, atol=1e-5)

    trainer.train()
    [row] = [r for r in read_jsonl(tmp_path / METRICS_FILE) if "pacs/psi_abs_max" in r]
    assert row["pacs/psi_abs_max"] == 0.0  # first mini-batch: π = π_old, its r̂ from the same forward

    with pytest.warns(UserWarning, match="old_logprobs_from_sampler=True needs fp32"):
        bf16 = _trainer(tmp_path / "bf16", tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra,
                        fast_sampler_dtype="bfloat16")  # fmt: skip
        batch = bf16._generate_and_score_completions(next(iter(bf16.get_train_dataloader())))
    assert batch["old_per_token_logps"] is not None and forwards  # computed by a forward


# ---------------------------------------------------------------- log-prob implementations
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logits_logprobs_equal_trl_fused_head(tmp_path, tiny_model, tiny_tokenizer, temperature):
    """logprob_impl='logits' (completion positions only) gives TRL's fused-head values and gradients."""
    results = {}
    torch.manual_seed(0)
    ids = torch.randint(3, tiny_model.config.vocab_size, (4, 12))
    attention = torch.ones_like(ids)
    attention[0, :3] = 0  # left padding in one row
    attention[2, :1] = 0
    for impl in ("trl", "logits"):
        trainer = _trainer(
            tmp_path / impl, tiny_model, tiny_tokenizer, logprob_impl=impl, temperature=temperature
        )
        assert trainer._completion_only_head() == (impl == "logits")
        tiny_model.zero_grad(set_to_none=True)
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
            tiny_model, ids, attention, 5, batch_size=3, compute_entropy=True
        )
        (logps * torch.arange(1.0, 6.0)).sum().backward()
        grads = [p.grad.clone() for p in tiny_model.parameters() if p.grad is not None]
        results[impl] = (logps.detach(), entropies.detach(), grads)
    (lp_trl, ent_trl, g_trl), (lp, ent, g) = results["trl"], results["logits"]
    assert lp.shape == ent.shape == (4, 5)
    torch.testing.assert_close(lp, lp_trl, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, ent_trl, rtol=1e-5, atol=1e-5)
    assert len(g) == len(g_trl) > 0
    for a, b in zip(g, g_trl, strict=True):  # atol 1e-5: positions differ by the padding (RoPE rounding)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_shared_prompt_forward_equals_full_rows(tmp_path, tiny_model, tiny_tokenizer):
    """shared_prompt_forward (each distinct prompt once, completions trimmed to the longest) gives the
    log-probs, entropies and gradients of one forward over every full row: groups of G=2 rows share a
    left-padded prompt, completions are right-padded to different lengths."""
    G, T = 2, 6
    ids, attention, completion_mask = grouped_batch(
        tiny_model.config.vocab_size, tiny_tokenizer.pad_token_id, 3, G, [6, 2, 4, 1, 3, 4], T=T
    )
    results = {}
    for shared in (False, True):
        trainer = _trainer(tmp_path / str(shared), tiny_model, tiny_tokenizer, logprob_impl="logits",
                           temperature=0.7, shared_prompt_forward=shared)  # fmt: skip
        tiny_model.zero_grad(set_to_none=True)
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
            tiny_model, ids, attention, T, batch_size=4, compute_entropy=True
        )
        assert logps.shape == entropies.shape == (3 * G, T)
        (logps * completion_mask * torch.arange(1.0, T + 1)).sum().backward()
        grads = [p.grad.clone() for p in tiny_model.parameters() if p.grad is not None]
        results[shared] = (logps.detach() * completion_mask, entropies * completion_mask, grads)
    (lp, ent, g), (lp_s, ent_s, g_s) = results[False], results[True]
    torch.testing.assert_close(lp_s, lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent_s, ent, rtol=1e-5, atol=1e-5)
    assert len(g_s) == len(g) > 0
    for a, b in zip(g_s, g, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_logprob_impl_auto_and_refusal(tmp_path):
    assert _config(tmp_path).logprob_impl == "auto"
    with pytest.raises(ValueError, match="logprob_impl='fast'"):
        _config(tmp_path, logprob_impl="fast")
