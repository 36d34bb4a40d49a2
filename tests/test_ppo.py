"""PPOTrainer (PPO with a learned critic) on a tiny random model: advantage/return alignment with response
tokens, whitening over processes, a critic learning a constant reward, the warm-up, metrics and exact resume
with the critic and its optimizer."""

from __future__ import annotations

import copy
import shutil
import threading

import pytest
import torch

from pacs_rl.algorithms import masked_whiten
from pacs_rl.run_folder import CRITIC_DIR, METRICS_FILE, read_jsonl
from pacs_rl.training.output import MetricsJsonlCallback
from pacs_rl.training.ppo import (
    PPOConfig,
    PPOTrainer,
    build_critic,
    critic_values,
    explained_variance,
    ppo_advantages,
)
from pacs_rl.training.run import config_and_trainer_classes
from train_helpers import parity_reward, tiny_run_kwargs, train_until_killed


def _dataset(n=32):
    from datasets import Dataset

    return Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": f"{i}+{i}" + "?" * (i % 5)}], "answer": str(2 * i)}
            for i in range(n)
        ]
    )


def _config(tmp_path, **overrides):
    return PPOConfig(**tiny_run_kwargs(tmp_path, **{"critic_learning_rate": 1e-3, **overrides}))


def _trainer(tmp_path, model, tokenizer, reward=parity_reward, cls=PPOTrainer, critic=None, **overrides):
    return cls(
        model,
        reward,
        args=_config(tmp_path, **overrides),
        train_dataset=_dataset(),
        processing_class=tokenizer,
        callbacks=[MetricsJsonlCallback()],
        critic=critic,
    )


def _eos_prone_model(tokenizer, seed=0):
    """A tiny random model whose EOS logit is often large, so completions end at different lengths."""
    from pacs_rl.models import tiny_random_model

    model = tiny_random_model(tokenizer, seed=seed)
    with torch.no_grad():  # tied embeddings: the EOS output row is its input embedding
        model.get_output_embeddings().weight[tokenizer.eos_token_id] *= 6.0
    return model


# ---------------------------------------------------------------- configuration
def test_config_defaults_and_errors(tmp_path):
    cfg = _config(tmp_path)
    assert cfg.loss_type == "ppo" and cfg.gae_gamma == 1.0 and cfg.gae_lambda == 1.0
    assert cfg.whiten_advantages and cfg.critic_warmup_steps == 0 and cfg.value_clip_eps == 0.5
    assert PPOConfig(output_dir=str(tmp_path), use_cpu=True).critic_learning_rate == 1e-5
    assert config_and_trainer_classes("ppo") == (PPOConfig, PPOTrainer)
    from pacs_rl.training import PACSConfig, PACSTrainer

    assert config_and_trainer_classes("pacs") == (PACSConfig, PACSTrainer)
    from dataclasses import fields

    ppo_only = {f.name for f in fields(PPOConfig) if f.init} - {f.name for f in fields(PACSConfig)}
    assert ppo_only == {
        "critic_model_name_or_path",
        "critic_learning_rate",
        "critic_max_grad_norm",
        "critic_loss_agg_mode",
        "critic_warmup_steps",
        "gae_gamma",
        "gae_lambda",
        "value_clip_eps",
        "whiten_advantages",
    }
    with pytest.raises(ValueError, match="gae_lambda only apply to loss_type='ppo'"):
        config_and_trainer_classes("grpo", {"gae_lambda": 0.9, "learning_rate": 1e-6})
    cases = [
        (dict(gae_gamma=1.5), r"gae_gamma=1.5: give a number in \[0, 1\]"),
        (dict(gae_lambda=-0.1), r"gae_lambda=-0.1: give a number in \[0, 1\]"),
        (dict(value_clip_eps=0.0), "value_clip_eps=0.0: give a number > 0"),
        (dict(critic_learning_rate=0.0), "critic_learning_rate=0.0: give a number > 0"),
        (dict(critic_learning_rate=float("inf")), "critic_learning_rate=inf: give a number > 0"),
        (dict(critic_warmup_steps=-1), "critic_warmup_steps=-1"),
        (dict(loss_type="grpo"), "PPOConfig is for loss_type='ppo'"),
        (dict(reference="frozen"), "applies to PACS's reward proxy only"),
        (dict(fp16=True), "fp16=True is not supported"),
        (dict(loss_options={"kl_coef": 0.1}), r"loss_options \['kl_coef'\] are not accepted"),
        (dict(beta=0.01), "loss_type='ppo' has no KL term"),
        (dict(critic_loss_agg_mode="seq-mean"), "critic_loss_agg_mode='seq-mean'"),
        (dict(per_device_train_batch_size=6), "not a multiple of num_generations=4"),  # PACSConfig's check
    ]
    for overrides, message in cases:
        with pytest.raises(ValueError, match=message):
            _config(tmp_path, **overrides)


# ---------------------------------------------------------------- pure pieces
def test_advantages_and_returns_hand_computed():
    # row 0: 3 response tokens then padding; row 1: 1 token; row 2: none. γ = 0.5, λ = 0.5.
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    values = torch.tensor([[0.2, 0.4, 0.6, 9.0], [0.5, 9.0, 9.0, 9.0], [9.0, 9.0, 9.0, 9.0]])
    rewards = torch.tensor([1.0, 0.0, 1.0])
    adv, ret = ppo_advantages(rewards, values, mask, gamma=0.5, lam=0.5, whiten=False)
    # row 0: δ2 = 1 − 0.6 = 0.4; δ1 = 0.5·0.6 − 0.4 = −0.1; δ0 = 0.5·0.4 − 0.2 = 0
    #        A2 = 0.4; A1 = −0.1 + 0.25·0.4 = 0; A0 = 0 + 0.25·0 = 0
    # row 1: δ0 = 0 − 0.5 → A0 = −0.5
    expected_adv = torch.tensor([[0.0, 0.0, 0.4, 0.0], [-0.5, 0, 0, 0], [0, 0, 0, 0]])
    torch.testing.assert_close(adv, expected_adv, atol=1e-6, rtol=0)
    torch.testing.assert_close(ret, torch.tensor([[0.2, 0.4, 1.0, 0], [0.0, 0, 0, 0], [0, 0, 0, 0]]))
    # γ = λ = 1: the target is R on every response token and A = R − V
    adv1, ret1 = ppo_advantages(rewards, values, mask, whiten=False)
    torch.testing.assert_close(ret1, rewards[:, None] * mask)
    torch.testing.assert_close(adv1, (rewards[:, None] - values) * mask)
    # whitening over the batch is masked_whiten's
    white, _ = ppo_advantages(rewards, values, mask, whiten=True)
    torch.testing.assert_close(white, masked_whiten(adv1, mask))


def test_whitening_statistics_span_processes():
    """Two simulated processes (threads with a summing all-reduce) whiten as one batch would."""
    torch.manual_seed(0)
    B, T = 6, 5
    mask = (torch.rand(B, T) > 0.3).long()
    values, rewards = torch.randn(B, T), (torch.rand(B) > 0.5).float()
    whole, _ = ppo_advantages(rewards, values, mask)
    ev_whole = explained_variance(values, rewards[:, None] * mask, mask)

    barrier, slots, out = threading.Barrier(2), [None, None], [None, None]

    def all_reduce(rank):
        def reduce(x):
            slots[rank] = x.clone()
            barrier.wait()
            total = slots[0] + slots[1]
            barrier.wait()
            return total

        return reduce

    def run(rank, rows):
        red = all_reduce(rank)
        adv, _ = ppo_advantages(rewards[rows], values[rows], mask[rows], all_reduce=red)
        ev = explained_variance(values[rows], rewards[rows, None] * mask[rows], mask[rows], all_reduce=red)
        out[rank] = (adv, ev)

    threads = [threading.Thread(target=run, args=(r, slice(3 * r, 3 * r + 3))) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.testing.assert_close(torch.cat([out[0][0], out[1][0]]), whole)
    assert out[0][1] == pytest.approx(ev_whole) and out[1][1] == pytest.approx(ev_whole)
    # and a batch-local whitening would differ: the test can tell the two apart
    local, _ = ppo_advantages(rewards[:3], values[:3], mask[:3])
    assert not torch.allclose(local, whole[:3])


def test_explained_variance_closed_form():
    mask = torch.ones(1, 4)
    returns = torch.tensor([[0.0, 1.0, 0.0, 1.0]])  # var = 1/3 (unbiased)
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(returns, 0.5), returns, mask) == pytest.approx(0.0, abs=1e-6)
    assert explained_variance(1 - returns, returns, mask) == pytest.approx(1 - 4.0)  # var(2G−1) = 4 var(G)
    assert explained_variance(returns, torch.ones(1, 4), mask) != explained_variance(returns, returns, mask)


def test_critic_is_built_from_the_policy_with_a_zero_head(tiny_model):
    critic = build_critic(tiny_model)
    assert critic.score.weight.abs().sum() == 0 and critic.score.out_features == 1
    pol, cri = tiny_model.model.state_dict(), critic.model.state_dict()
    assert all(torch.equal(pol[k], cri[k]) for k in pol)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    values = critic_values(critic, ids, torch.ones_like(ids), 3)
    assert values.shape == (1, 3) and values.abs().sum() == 0


# ---------------------------------------------------------------- the trainer
class RecordingPPOTrainer(PPOTrainer):
    """Keeps each rollout batch with a snapshot of the critic that valued it, and each micro-batch."""

    def _generate_and_score_completions(self, inputs):
        critic_then = copy.deepcopy(self.accelerator.unwrap_model(self.critic))
        out = super()._generate_and_score_completions(inputs)
        self.rollouts = [*getattr(self, "rollouts", []), (out, critic_then)]
        return out

    def _compute_loss(self, model, inputs):
        self.seen = [*getattr(self, "seen", []), dict(inputs)]
        return super()._compute_loss(model, inputs)


def test_values_and_returns_align_with_response_tokens(tmp_path, tiny_tokenizer):
    """Rollout-time values are the critic's at the position before each response token (checked against a
    forward on each row without padding); returns follow the closed form γ^(L−1−t)·R; padding holds zeros."""
    model = _eos_prone_model(tiny_tokenizer)
    critic = build_critic(model)
    torch.manual_seed(1)
    with torch.no_grad():
        critic.score.weight.normal_(0, 0.5)  # a non-zero head, so the values can be told apart
    gamma = 0.5
    trainer = _trainer(
        tmp_path,
        model,
        tiny_tokenizer,
        cls=RecordingPPOTrainer,
        critic=critic,
        max_steps=2,
        gae_gamma=gamma,
        gae_lambda=1.0,
        whiten_advantages=False,
    )
    trainer.train()
    assert len(trainer.rollouts) == 1 and len(trainer.seen) == 2
    batch, critic_then = trainer.rollouts[0]
    mask = batch["completion_mask"]
    lengths = mask.sum(1)
    assert (lengths < mask.shape[1]).any() and (lengths > 0).all(), f"need padded rows, lengths {lengths}"
    assert (batch["prompt_mask"] == 0).any(), "need left-padded prompts"
    rewards = batch["rewards"]
    for i in range(mask.shape[0]):
        L = int(lengths[i])
        prompt = batch["prompt_ids"][i][batch["prompt_mask"][i].bool()]
        row = torch.cat([prompt, batch["completion_ids"][i, :L]])[None]
        with torch.no_grad():
            v = critic_then(input_ids=row, use_cache=False).logits[0, :, 0]  # (P + L,)
        expected_values = v[len(prompt) - 1 : len(prompt) - 1 + L]  # state before each response token
        torch.testing.assert_close(batch["ppo_old_values"][i, :L], expected_values, atol=1e-5, rtol=1e-4)
        expected_returns = rewards[i] * gamma ** torch.arange(L - 1, -1, -1, dtype=torch.float32)
        torch.testing.assert_close(batch["ppo_returns"][i, :L], expected_returns)
        torch.testing.assert_close(
            batch["ppo_advantages"][i, :L], expected_returns - expected_values, atol=1e-5, rtol=1e-4
        )
        for key in ("ppo_old_values", "ppo_returns", "ppo_advantages"):
            assert (batch[key][i, L:] == 0).all(), f"{key} is not 0 on padding"
    # the micro-batches carry the same per-token tensors, shuffled as whole groups
    seen_returns = torch.cat([b["ppo_returns"].sum(1) for b in trainer.seen]).sort().values
    torch.testing.assert_close(seen_returns, batch["ppo_returns"].sum(1).sort().values)


def test_critic_learns_a_constant_reward_during_warmup(tmp_path, tiny_tokenizer):
    """Reward 0.7 for every completion; warm-up over the whole run, so only the critic trains: its values
    go from 0 to near 0.7, the value loss falls by > 10x, and the policy and its optimizer are untouched."""
    from pacs_rl.models import tiny_random_model

    def constant(completions, **kw):
        return [0.7] * len(completions)

    model = tiny_random_model(tiny_tokenizer, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    steps = 8
    trainer = _trainer(
        tmp_path,
        model,
        tiny_tokenizer,
        reward=constant,
        cls=RecordingPPOTrainer,
        max_steps=steps,
        critic_warmup_steps=steps,
        critic_learning_rate=3e-3,
        lr_scheduler_type="constant",
    )
    trainer.train()
    rows = [r for r in read_jsonl(tmp_path / METRICS_FILE) if "ppo/value_loss" in r]
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    first, last = rows[0], rows[-1]
    assert first["ppo/value_mean"] == 0.0 and first["ppo/value_loss"] == pytest.approx(0.5 * 0.7**2)
    assert abs(last["ppo/value_mean"] - 0.7) < 0.1, [r["ppo/value_mean"] for r in rows]
    assert last["ppo/value_loss"] < 0.1 * first["ppo/value_loss"], [r["ppo/value_loss"] for r in rows]
    assert all(r["ppo/critic_warmup"] == 1.0 for r in rows)
    # the trained critic, on the last rollout's sequences
    batch, _ = trainer.rollouts[-1]
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    att = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    with torch.no_grad():
        v = critic_values(trainer.critic, ids, att, batch["completion_ids"].shape[1])
    m = batch["completion_mask"].bool()
    assert abs(v[m].mean().item() - 0.7) < 0.1
    # only the critic trained
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), "the policy changed during warm-up"
    assert len(getattr(trainer.optimizer, "optimizer", trainer.optimizer).state) == 0
    assert len(trainer.critic_optimizer.optimizer.state) > 0


def test_policy_trains_after_warmup_and_metrics_are_logged(tmp_path, tiny_model, tiny_tokenizer):
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, max_steps=2, critic_warmup_steps=1)
    trainer.train()
    rows = [r for r in read_jsonl(tmp_path / METRICS_FILE) if "ppo/value_loss" in r]
    assert [r["ppo/critic_warmup"] for r in rows] == [1.0, 0.0]
    assert rows[0]["grad_norm"] == 0.0 and rows[1]["grad_norm"] > 0.0
    for key in (
        "loss",
        "grad_norm",
        "reward",
        "accuracy",
        "entropy",
        "completions/mean_length",
        "groups/mixed_frac",
        "ppo/loss",
        "ppo/clip_ratio_region",
        "ppo/approx_kl",
        "ppo/value_loss",
        "ppo/value_clip_frac",
        "ppo/value_mean",
        "ppo/return_mean",
        "ppo/explained_variance",
        "ppo/critic_grad_norm",
        "ppo/critic_lr",
    ):
        assert key in rows[0], f"metrics.jsonl lacks {key}: {sorted(rows[0])}"
    changed = any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    assert changed, "the policy did not train after the warm-up"


@pytest.mark.parametrize("moment, step", [("update", 2), ("sampling", 3)])
def test_run_signalled_mid_step_resumes_policy_and_critic_exactly(tmp_path, tiny_tokenizer, moment, step):
    """SIGTERM in the middle of a step (its update, between micro-batches; its rollout's sampling): the step is
    dropped at the next check point, and the run resumed from the step before ends with the policy, the critic and
    the critic's optimizer of the run in one go."""
    from pacs_rl.models import tiny_random_model

    extra = dict(max_steps=4, critic_warmup_steps=1, save_strategy="steps", save_steps=1)
    full = _trainer(tmp_path / "full", tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra)
    full.train()
    run_dir = tmp_path / "stopped"
    stopped = _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra)
    assert train_until_killed(stopped, step, event=moment) == 0
    assert not (run_dir / f"checkpoint-{step}").exists()
    resumed = _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=1), tiny_tokenizer, **extra)
    resumed.train(resume_from_checkpoint=str(run_dir / f"checkpoint-{step - 1}"))
    start = tiny_random_model(tiny_tokenizer, seed=0).state_dict()
    assert any(not torch.equal(start[k], v) for k, v in full.model.state_dict().items())  # the policy moved
    for a, b in [(full.model, resumed.model), (full.critic, resumed.critic)]:
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    opt_a, opt_b = full.critic_optimizer.state_dict()["state"], resumed.critic_optimizer.state_dict()["state"]
    assert opt_a.keys() == opt_b.keys() and all(
        torch.equal(opt_a[k][name], opt_b[k][name]) for k in opt_a for name in opt_a[k]
    )


def test_interrupted_run_resumes_policy_and_critic_exactly(tmp_path, tiny_tokenizer):
    """2 steps in one go vs. killed right after the step-1 checkpoint (mid-rollout, inside the critic
    warm-up) and resumed: policy, critic, critic optimizer and scheduler states are identical."""
    from pacs_rl.models import tiny_random_model

    extra = dict(max_steps=2, critic_warmup_steps=1, save_strategy="steps", save_steps=1)
    full = _trainer(tmp_path / "full", tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra)
    full.train()

    run_dir = tmp_path / "killed"
    first = _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra)
    train_until_killed(first, 1, event="save")  # right after the step-1 checkpoint
    ckpt = run_dir / "checkpoint-1"
    assert (ckpt / CRITIC_DIR / "optimizer.pt").is_file()
    saved = build_critic(str(ckpt / CRITIC_DIR))  # a saved critic reloads with its (trained) head
    torch.testing.assert_close(saved.score.weight, first.critic.score.weight, rtol=0, atol=0)
    assert saved.score.weight.abs().sum() > 0

    resumed = _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=1), tiny_tokenizer, **extra)
    resumed.train(resume_from_checkpoint=str(ckpt))

    def same(a, b):
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    assert same(full.model.state_dict(), resumed.model.state_dict()), "policy differs after resume"
    assert same(full.critic.state_dict(), resumed.critic.state_dict()), "critic differs after resume"
    opt_a, opt_b = full.critic_optimizer.state_dict(), resumed.critic_optimizer.state_dict()
    assert opt_a["param_groups"] == opt_b["param_groups"]
    assert opt_a["state"].keys() == opt_b["state"].keys() and len(opt_a["state"]) > 0
    for k in opt_a["state"]:
        assert same(opt_a["state"][k], opt_b["state"][k]), f"critic optimizer state {k} differs"
    assert full.critic_lr_scheduler.state_dict() == resumed.critic_lr_scheduler.state_dict()
    steps = [r["step"] for r in read_jsonl(run_dir / METRICS_FILE) if "loss" in r]
    assert steps == [1, 2]

    shutil.rmtree(ckpt / CRITIC_DIR)  # a checkpoint without a critic is refused, not silently reset
    again = _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra)
    with pytest.raises(FileNotFoundError, match="holds no critic weights"):
        again.train(resume_from_checkpoint=str(ckpt))
