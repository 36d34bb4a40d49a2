"""The optimizer step and the loss plumbing of the trainers, on tiny random models: no clip vs clip, a
non-finite step skipped and counted, the gradient-accumulation scale, and what reaches a baseline's loss
(TRL's reference log-probs for the KL, the vLLM importance-sampling ratio, unscored completions)."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import TrainerCallback

from pacs_rl.algorithms import compute_policy_loss
from pacs_rl.run_folder import METRICS_FILE, read_jsonl
from pacs_rl.training import PACSConfig, PACSTrainer
from pacs_rl.training.output import MetricsJsonlCallback
from pacs_rl.training.ppo import PPOConfig, PPOTrainer
from pacs_rl.training.rollout import sequence_tensors
from pacs_rl.training.trainer import sharding_problems
from train_helpers import G, parity_reward, tiny_run_kwargs


def _dataset(n=32):
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"{i}+{i}"}], "answer": str(2 * i)} for i in range(n)]
    )


def _trainer(tmp_path, model, tokenizer, reward=parity_reward, cls=PACSTrainer, config_cls=PACSConfig, **kw):
    return cls(
        model,
        reward,
        args=config_cls(**tiny_run_kwargs(tmp_path, **kw)),
        train_dataset=_dataset(),
        processing_class=tokenizer,
        callbacks=[MetricsJsonlCallback()],
    )


class Snapshots(TrainerCallback):
    """The weights after every optimizer step."""

    def __init__(self, trainer):
        self.trainer, self.steps = trainer, []

    def on_step_end(self, args, state, control, **kw):
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        self.steps.append({k: v.detach().clone() for k, v in model.named_parameters()})


def _delta_norm(a, b) -> float:
    return math.sqrt(sum(float(((a[k] - b[k]) ** 2).sum()) for k in a))


# ---------------------------------------------------------------- clip or not; the norm is logged either way
@pytest.mark.parametrize("max_grad_norm", [None, 0.0, 1e-4])
def test_no_clip_moves_the_weights_by_the_whole_gradient(tmp_path, tiny_model, tiny_tokenizer, max_grad_norm):
    """SGD with lr 1: the step is −g, so |Δw| is the gradient norm unclipped and max_grad_norm clipped."""
    before = {k: v.detach().clone() for k, v in tiny_model.named_parameters()}
    trainer = _trainer(
        tmp_path, tiny_model, tiny_tokenizer, optim="sgd", learning_rate=1.0, max_steps=1,
        max_grad_norm=max_grad_norm,
    )  # fmt: skip
    assert trainer.args.max_grad_norm == (max_grad_norm or 0.0)
    trainer.train()
    grad_norm = read_jsonl(tmp_path / METRICS_FILE)[0]["grad_norm"]
    after = {k: v.detach() for k, v in trainer.model.named_parameters()}
    moved = _delta_norm(after, before)
    assert grad_norm > 1e-3  # logged without a clip too
    expected = max_grad_norm if max_grad_norm else grad_norm
    assert moved == pytest.approx(expected, rel=1e-3)


# ---------------------------------------------------------------- a non-finite step is skipped and counted
class PoisonFirstStep(PACSTrainer):
    """Multiplies the loss of the first optimizer step by nan, so its gradient norm is nan."""

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        return loss * float("nan") if self.state.global_step == 0 else loss


@pytest.mark.parametrize("max_grad_norm", [None, 1.0])
def test_a_non_finite_step_is_skipped_and_counted(tmp_path, tiny_model, tiny_tokenizer, max_grad_norm):
    before = {k: v.detach().clone() for k, v in tiny_model.named_parameters()}
    trainer = _trainer(
        tmp_path, tiny_model, tiny_tokenizer, cls=PoisonFirstStep, max_steps=2, max_grad_norm=max_grad_norm
    )
    snaps = Snapshots(trainer)
    trainer.add_callback(snaps)
    trainer.train()
    first, second = snaps.steps
    assert all(torch.equal(first[k], before[k]) for k in before)  # step 1: weights untouched
    assert not all(torch.equal(second[k], first[k]) for k in first)  # step 2 trains
    inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    assert {int(s["step"]) for s in inner.state.values()} == {1}  # Adam saw one step, not two
    assert trainer.num_skipped_steps == 1
    rows = read_jsonl(tmp_path / METRICS_FILE)
    assert [r["optimizer/skipped_nonfinite"] for r in rows if "loss" in r] == [1.0, 0.0]
    assert rows[0]["grad_norm"] is None  # nan, written as null


# ---------------------------------------------------------------- gradient accumulation: 1/GA, not 1/GA²
def test_accumulated_micro_batches_give_the_step_of_one_batch(tmp_path, tiny_tokenizer):
    """16 rows as one micro-batch vs two of 8 (GA = 2): the same rollout and the same SGD step. If transformers
    divided the loss by GA once more (loss_is_scaled_for_ga not honoured), the second step would be half."""
    from pacs_rl.models import tiny_random_model

    moved = []
    for per_device, ga in ((4 * G, 1), (2 * G, 2)):
        model = tiny_random_model(tiny_tokenizer, seed=0)
        before = {k: v.detach().clone() for k, v in model.named_parameters()}
        trainer = _trainer(
            tmp_path / f"ga{ga}", model, tiny_tokenizer, optim="sgd", learning_rate=1.0, max_grad_norm=None,
            per_device_train_batch_size=per_device, gradient_accumulation_steps=ga, mini_batches_per_rollout=1,
            max_steps=1,
        )  # fmt: skip
        assert trainer.loss_is_scaled_for_ga is True
        trainer.train()
        moved.append({k: v.detach() - before[k] for k, v in trainer.model.named_parameters()})
    one, two = moved
    assert _delta_norm(one, {k: torch.zeros_like(v) for k, v in one.items()}) > 1e-3
    assert _delta_norm(one, two) < 1e-4 * _delta_norm(one, {k: torch.zeros_like(v) for k, v in one.items()})


# ---------------------------------------------------------------- what reaches a baseline's loss
def _rollout(trainer):
    """One rollout batch of 2 prompts × G, as TRL's RepeatSampler hands it over, in training mode."""
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = (
        1  # set by the training loop; here the loss is called directly
    )
    ds = trainer.train_dataset
    return trainer._generate_and_score_completions([dict(ds[i]) for i in range(2) for _ in range(G)])


def _logp(trainer, inputs):
    input_ids, attention_mask, mask = sequence_tensors(inputs)
    logp, _, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, input_ids, attention_mask, mask.size(1)
    )
    return logp, mask


def test_vllm_importance_sampling_ratio_reaches_the_baseline_loss(tmp_path, tiny_model, tiny_tokenizer):
    trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, loss_type="grpo", max_steps=1)
    assert trainer.args.vllm_importance_sampling_correction is True  # TRL's default for the baselines
    inputs = _rollout(trainer)
    logp, mask = _logp(trainer, inputs)
    ratio = torch.rand(mask.shape, generator=torch.Generator().manual_seed(0)) + 0.5  # what TRL computes
    inputs["importance_sampling_ratio"] = ratio
    loss = trainer._compute_loss(trainer.model, inputs)
    expected, _ = compute_policy_loss(
        "grpo", logp=logp, old_logp=inputs.get("old_per_token_logps", logp.detach()), mask=mask,
        rewards=inputs["rewards"], group_size=G, is_weights=ratio, scored=inputs["scored"],
        clip_eps=trainer.args.epsilon, clip_eps_high=trainer.args.epsilon_high,
        max_completion_length=trainer.args.max_completion_length,
    )  # fmt: skip
    plain, _ = compute_policy_loss(
        "grpo", logp=logp, old_logp=logp.detach(), mask=mask, rewards=inputs["rewards"], group_size=G
    )
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert expected.item() != pytest.approx(plain.item(), abs=1e-4)  # the ratio changed the loss


def test_importance_sampling_correction_defaults_by_loss(tmp_path):
    def cfg(**kw):
        return PACSConfig(**tiny_run_kwargs(tmp_path, **kw))

    assert cfg().vllm_importance_sampling_correction is False  # PACS: no ratio to correct
    assert cfg(loss_type="rloo").vllm_importance_sampling_correction is True  # TRL's default
    assert cfg(use_vllm=True).vllm_importance_sampling_correction is False
    assert (
        cfg(loss_type="grpo", vllm_importance_sampling_correction=False).vllm_importance_sampling_correction
        is False
    )
    with pytest.raises(ValueError, match="PACS has no importance ratio to correct"):
        cfg(use_vllm=True, vllm_importance_sampling_correction=True)
    assert PPOConfig(**tiny_run_kwargs(tmp_path)).vllm_importance_sampling_correction is True


def test_kl_for_a_baseline_uses_trls_reference_model(tmp_path, tiny_model_dir, tiny_tokenizer):
    trainer = _trainer(
        tmp_path, str(tiny_model_dir), tiny_tokenizer, loss_type="grpo", beta=0.05, max_steps=1
    )
    assert trainer.ref_model is not None  # TRL loaded the initial policy as reference
    with torch.no_grad():  # move the policy away from its reference, so the KL is not 0
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    inputs = _rollout(trainer)
    assert "ref_per_token_logps" in inputs
    logp, mask = _logp(trainer, inputs)
    loss = trainer._compute_loss(trainer.model, inputs)
    options = dict(
        logp=logp, old_logp=inputs.get("old_per_token_logps", logp.detach()), mask=mask, rewards=inputs["rewards"],
        group_size=G, scored=inputs["scored"], clip_eps=trainer.args.epsilon,
        clip_eps_high=trainer.args.epsilon_high, max_completion_length=trainer.args.max_completion_length,
    )  # fmt: skip
    with_kl, metrics = compute_policy_loss(
        "grpo", ref_logp=inputs["ref_per_token_logps"], kl_coef=0.05, kl_ratio_weighted=True, **options
    )
    without, _ = compute_policy_loss("grpo", **options)
    assert loss.item() == pytest.approx(with_kl.item(), abs=1e-6)
    assert metrics["kl_mean"] > 0 and with_kl.item() > without.item()
    trainer.train()
    assert any("grpo/kl_mean" in r for r in read_jsonl(tmp_path / METRICS_FILE))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            dict(loss_type="grpo", loss_options={"kl_coef": 0.1}),
            r"loss_options\['kl_coef'\]: set the config field beta",
        ),
        (dict(beta=0.1), "loss_type='pacs' has no KL term"),
        (dict(loss_type="grpo", reference="frozen"), "would ignore it"),
        (dict(loss_type="grpo", loss_options={"beta": 1.0}), r"loss_options \['beta'\] are not options"),
        (dict(loss_options={"beta": 2.0}), r"set the config field pacs_beta=2\.0"),
        (dict(loss_type="grpo", loss_options={"loss_agg_mode": "seq-mean"}), None),  # checked by the loss
        (dict(max_grad_norm=-1.0), "max_grad_norm=-1.0"),
    ],
)
def test_config_refuses_what_the_loss_would_ignore(tmp_path, overrides, message):
    if message is None:  # a value error of the option itself surfaces at the first loss call
        PACSConfig(**tiny_run_kwargs(tmp_path, **overrides))
        return
    with pytest.raises(ValueError, match=message):
        PACSConfig(**tiny_run_kwargs(tmp_path, **overrides))


def _some_unscorable(completions, **kw):
    """0/1 by parity, None (no verdict) for every third completion."""
    scores = parity_reward(completions)
    return [None if i % 3 == 0 else s for i, s in enumerate(scores)]


def _param_grad(trainer, loss) -> torch.Tensor:
    trainer.model.zero_grad(set_to_none=True)
    loss.backward()
    return torch.cat([p.grad.reshape(-1) for p in trainer.model.parameters() if p.grad is not None])


def test_unscorable_completions_leave_the_baselines_group_baseline(tmp_path, tiny_model, tiny_tokenizer):
    trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, reward=_some_unscorable, loss_type="rloo")
    inputs = _rollout(trainer)
    scored = inputs["scored"]
    assert scored.tolist() == [i % 3 != 0 for i in range(2 * G)]
    got = _param_grad(trainer, trainer._compute_loss(trainer.model, inputs))

    def expected(**extra):
        logp, mask = _logp(trainer, inputs)
        loss, metrics = compute_policy_loss(
            "rloo", logp=logp, old_logp=inputs.get("old_per_token_logps", logp.detach()), mask=mask,
            rewards=inputs["rewards"], group_size=G, **extra,
        )  # fmt: skip
        return _param_grad(trainer, loss), metrics

    left_out, metrics = expected(scored=scored)
    labelled_zero, _ = expected()
    torch.testing.assert_close(got, left_out)
    assert not torch.allclose(left_out, labelled_zero)
    assert metrics["unscored_frac"] == pytest.approx(3 / 8)
    # PACS labels them 0 and carries no flag
    pacs = _trainer(tmp_path / "pacs", tiny_model, tiny_tokenizer, reward=_some_unscorable)
    out = _rollout(pacs)
    assert "scored" not in out and out["rewards"][0].item() == 0.0


def test_non_finite_log_probs_leave_their_group_out_of_the_loss(tmp_path, tiny_model, tiny_tokenizer):
    trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, mini_batches_per_rollout=2)
    inputs = _rollout(trainer)
    logp, mask = _logp(trainer, inputs)
    old = inputs.get("old_per_token_logps", logp.detach()).clone()
    old[G + 1, 0] = float("nan")  # one token of group 1
    inputs["old_per_token_logps"] = old
    steps = trainer.optimizer_steps
    steps.policy_step = steps.rollout_step  # as after a step: the loss reads the rollout's old log-probs
    loss = trainer._compute_loss(trainer.model, inputs)
    expected, _ = compute_policy_loss(
        "pacs", logp=logp[:G], old_logp=old[:G], mask=mask[:G], rewards=inputs["rewards"][:G], group_size=G
    )
    assert torch.isfinite(loss) and loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert trainer._metrics["train"]["loss/nonfinite_groups_frac"][-1] == 0.5


# ---------------------------------------------------------------- PPO: the critic's step
def test_ppo_critic_skips_a_non_finite_step_and_logs_its_norm_unclipped(tmp_path, tiny_model, tiny_tokenizer):
    trainer = _trainer(
        tmp_path, tiny_model, tiny_tokenizer, cls=PPOTrainer, config_cls=PPOConfig, max_grad_norm=None,
        critic_learning_rate=1e-3,
    )  # fmt: skip
    trainer.create_optimizer_and_scheduler(num_training_steps=2)
    critic = trainer.accelerator.unwrap_model(trainer.critic)
    before = {k: v.detach().clone() for k, v in critic.named_parameters()}
    for p in critic.parameters():
        p.grad = torch.full_like(p, float("nan"))
    out = trainer._critic_optimizer_step()
    assert out["critic_skipped_nonfinite"] == 1.0 and math.isnan(out["critic_grad_norm"])
    assert all(torch.equal(v, before[k]) for k, v in critic.named_parameters())
    for p in critic.parameters():
        p.grad = torch.full_like(p, 3.0)
    out = trainer._critic_optimizer_step()
    n = sum(p.numel() for p in critic.parameters())
    assert out["critic_skipped_nonfinite"] == 0.0
    assert out["critic_grad_norm"] == pytest.approx(3.0 * math.sqrt(n), rel=1e-5)  # no clip: the full norm
    assert trainer.num_skipped_critic_steps == 1


def test_ppo_runs_the_authors_baseline_settings(tmp_path, tiny_model, tiny_tokenizer):
    trainer = _trainer(
        tmp_path, tiny_model, tiny_tokenizer, reward=_some_unscorable, cls=PPOTrainer, config_cls=PPOConfig,
        critic_learning_rate=1e-3, max_grad_norm=1.0, critic_loss_agg_mode="seq-mean-token-sum-norm",
        loss_options={"loss_agg_mode": "seq-mean-token-sum-norm", "clip_ratio_c": 3.0},
    )  # fmt: skip
    inputs = _rollout(trainer)
    unscored = ~inputs["scored"]
    assert unscored.tolist() == [i % 3 == 0 for i in range(2 * G)]
    assert (inputs["ppo_advantages"][unscored] == 0).all() and (inputs["ppo_returns"][unscored] == 0).all()
    assert (inputs["ppo_advantages"][~unscored] != 0).any()
    trainer.train()
    rows = [r for r in read_jsonl(tmp_path / METRICS_FILE) if "ppo/clip_ratio_dual" in r]
    assert rows and all(math.isfinite(r["ppo/value_loss"]) for r in rows)


# ---------------------------------------------------------------- the frozen reference under sharding
def test_sharding_problems_name_what_cannot_work():
    assert sharding_problems("old", True, 3, False) == []  # no frozen copy: nothing to refuse
    assert sharding_problems("frozen", True, None, False) == []
    assert sharding_problems("frozen", False, 2, False) == []  # ZeRO-2: the policy is whole on every rank
    (zero3,) = sharding_problems("frozen", False, 3, False)
    assert "ZeRO-3" in zero3 and "reference='old'" in zero3
    (fsdp, reset) = sharding_problems("frozen", True, None, True)
    assert "FSDP" in fsdp and "reset_optimizer=False" in reset
    (reset2,) = sharding_problems("frozen", True, 1, False)
    assert "DeepSpeed (ZeRO-1)" in reset2
