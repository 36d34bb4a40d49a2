"""No signal, no step: an optimizer step none of whose micro-batches holds a group with two different rewards leaves
every weight as it was (skip_no_signal_steps), for every loss, in fp32 and bf16; and PACS's ψ is exactly 0 until
the policy's first step of a rollout, whatever computed the rollout's old log-probs (docs/ALGORITHMS.md, "No signal,
no step"). Tiny random models, a few optimizer steps each, on the CPU default's path (the fast sampler, its fp32
log-probs as the old ones, the update in pieces) unless a test says otherwise."""

from __future__ import annotations

import pytest
import torch
from transformers import TrainerCallback

from pacs_rl.run_folder import METRICS_FILE, read_jsonl
from pacs_rl.training import PACSConfig, PACSTrainer
from pacs_rl.training.cli import skipped_steps_line
from pacs_rl.training.output import MetricsJsonlCallback
from pacs_rl.training.ppo import PPOConfig, PPOTrainer
from pacs_rl.training.reward_signal import holds_signal, no_signal_skip_note
from train_helpers import G, tiny_run_kwargs

CPU_PATH = dict(
    fast_sampler=True, temperature=0.7, old_logprobs_from_sampler=True, update_token_budget=16, max_steps=4
)  # 2 rollouts x 2 mini-batches: a later step would show Adam's moments of an earlier one


def zero_reward(completions, **kw):
    return [0.0] * len(completions)


def one_paid_reward(completions, **kw):
    """1 for the first completion of each rollout (the first row of its first group), 0 for the others: one mixed
    group per rollout, so one of its two mini-batches holds a signal and the other none."""
    return [1.0] + [0.0] * (len(completions) - 1)


def _dataset():
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"{i}+{i}"}], "answer": str(2 * i)} for i in range(32)]
    )


def _trainer(tmp_path, tokenizer, reward, loss_type="pacs", **overrides):
    from pacs_rl.models import tiny_random_model

    kw = tiny_run_kwargs(tmp_path, **{**CPU_PATH, **overrides})
    config_cls, trainer_cls = (PPOConfig, PPOTrainer) if loss_type == "ppo" else (PACSConfig, PACSTrainer)
    if loss_type != "ppo":
        kw["loss_type"] = loss_type
    return trainer_cls(
        tiny_random_model(tokenizer, seed=0),
        reward,
        args=config_cls(**kw),
        train_dataset=_dataset(),
        processing_class=tokenizer,
        callbacks=[MetricsJsonlCallback()],
    )


class Snapshots(TrainerCallback):
    """The policy's weights before training and after every optimizer step."""

    def __init__(self, trainer):
        self.trainer, self.steps = trainer, []

    def _weights(self):
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        return {k: v.detach().clone() for k, v in model.named_parameters()}

    def on_train_begin(self, args, state, control, **kw):
        self.before = self._weights()

    def on_step_end(self, args, state, control, **kw):
        self.steps.append(self._weights())


def _moved(a: dict, b: dict) -> float:
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


def _train(trainer) -> tuple[Snapshots, list[dict]]:
    snaps = Snapshots(trainer)
    trainer.add_callback(snaps)
    trainer.train()
    rows = [r for r in read_jsonl(trainer.args.output_dir + "/" + METRICS_FILE) if "loss" in r]
    return snaps, rows


# ---------------------------------------------------------------------------------------------------- pure pieces
def test_holds_signal_needs_two_different_rewards_in_one_group():
    assert not holds_signal(torch.zeros(2 * G), G)
    assert not holds_signal(torch.tensor([1.0] * G + [0.0] * G), G)  # each group single-label
    assert holds_signal(torch.tensor([1.0] + [0.0] * (2 * G - 1)), G)
    assert holds_signal(torch.tensor([0.0] * G + [0.5, 0.0, 0.0, 0.0]), G)  # a baseline's non-binary reward
    assert not holds_signal(torch.zeros(0), G)
    # the only different reward is on a row no reward function scored: its advantage is 0, so no signal
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    unscored_first = torch.tensor([False, True, True, True, True, True, True, True])
    assert not holds_signal(rewards, G, unscored_first)
    assert holds_signal(rewards, G, torch.ones(2 * G, dtype=torch.bool))
    one_scored = torch.tensor([True, False, False, False, False, False, False, False])
    assert not holds_signal(rewards, G, one_scored)  # a group needs two scored rows


def test_deepspeed_note_names_the_setting():
    assert no_signal_skip_note(True, None) is None
    assert no_signal_skip_note(False, 3) is None
    note = no_signal_skip_note(True, 2)
    assert "ZeRO-2" in note and "skip_no_signal_steps=false" in note and "\n" not in note


def test_summary_line_counts_the_skipped_steps():
    assert skipped_steps_line({}) is None
    assert skipped_steps_line({"no_signal": 0, "nonfinite": 0}) is None
    line = skipped_steps_line({"no_signal": 5, "nonfinite": 1})
    assert "5 without a signal" in line and "1 with a non-finite gradient norm" in line


# ---------------------------------------------------------------------------------------------------- no signal
@pytest.mark.parametrize(
    "path",
    [dict(), dict(update_token_budget=None), dict(bf16=True, update_token_budget=None)],
    ids=["fp32-pieces", "fp32", "bf16"],
)  # in pieces a gradient of zeros never reaches the weights; one forward's backward writes zeros into .grad
@pytest.mark.parametrize("loss_type", ["pacs", "grpo", "dr_grpo", "rloo", "cw_grpo", "ppo"])
def test_equal_rewards_move_no_weight(tmp_path, tiny_tokenizer, loss_type, path):
    """Every reward 0 over 4 steps: no weight moves, even with weight decay (which a zero-gradient AdamW step
    applies); each step is skipped, counted and logged, and the optimizer holds no state."""
    trainer = _trainer(tmp_path, tiny_tokenizer, zero_reward, loss_type, weight_decay=0.01, **path)
    snaps, rows = _train(trainer)
    assert len(snaps.steps) == 4
    for step in snaps.steps:
        assert _moved(step, snaps.before) == 0.0
    assert trainer.num_skipped_no_signal == 4
    assert [r["optimizer/skipped_no_signal"] for r in rows] == [1.0] * 4
    inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    assert not inner.state  # Adam never ran: no moments, no step counts


def test_without_the_skip_a_zero_gradient_step_decays_the_weights(tmp_path, tiny_tokenizer):
    """What the skip prevents (GRPO: its gradient on equal rewards is exactly 0): AdamW's weight decay moves the
    weights anyway."""
    trainer = _trainer(tmp_path, tiny_tokenizer, zero_reward, "grpo", weight_decay=0.01, max_steps=1,
                       skip_no_signal_steps=False, update_token_budget=None)  # fmt: skip
    snaps, rows = _train(trainer)
    assert rows[0]["grad_norm"] == 0.0 and rows[0]["optimizer/skipped_no_signal"] == 0.0
    assert _moved(snaps.steps[0], snaps.before) > 0


@pytest.mark.parametrize("loss_type", ["pacs", "grpo", "ppo"])
def test_a_mini_batch_with_one_mixed_group_steps(tmp_path, tiny_tokenizer, loss_type):
    """One mixed group per rollout (4 groups, 2 mini-batches): the mini-batch holding it steps, the other is
    skipped; 2 of 4 steps move the weights."""
    trainer = _trainer(tmp_path, tiny_tokenizer, one_paid_reward, loss_type)
    snaps, rows = _train(trainer)
    skipped = [r["optimizer/skipped_no_signal"] for r in rows]
    assert sorted(skipped) == [0.0, 0.0, 1.0, 1.0] and trainer.num_skipped_no_signal == 2
    previous = snaps.before
    for row, step in zip(rows, snaps.steps, strict=True):
        assert (row["groups/mixed_frac_minibatch"] > 0) == (row["optimizer/skipped_no_signal"] == 0.0)
        assert (_moved(step, previous) > 0) == (row["optimizer/skipped_no_signal"] == 0.0)
        previous = step


# ---------------------------------------------------------------------------------------------------- ψ = 0
@pytest.mark.parametrize(
    "path",
    [
        dict(),  # the CPU default: sampler's log-probs, update in pieces
        dict(update_token_budget=None),  # sampler's log-probs, one forward and backward
        dict(bf16=True),  # bf16: the old log-probs from a forward over the rollout batch, in pieces
        dict(bf16=True, update_token_budget=None, fast_sampler=False),  # TRL's generate, its forward, bf16
    ],
    ids=["sampler-pieces", "sampler-one-forward", "bf16-pieces", "bf16-trl"],
)
def test_psi_is_exactly_zero_until_the_policy_steps(tmp_path, tiny_tokenizer, path):
    """Without the skip, every reward 0: ψ is exactly 0 on every step (the policy never moves, so every
    mini-batch is its rollout's first update), its gradient exactly 0, and no weight moves."""
    trainer = _trainer(tmp_path, tiny_tokenizer, zero_reward, skip_no_signal_steps=False, **path)
    snaps, rows = _train(trainer)
    assert [r["pacs/psi_abs_max"] for r in rows] == [0.0] * 4
    assert [r["grad_norm"] for r in rows] == [0.0] * 4
    assert _moved(snaps.steps[-1], snaps.before) == 0.0


def test_psi_is_exactly_zero_at_the_first_update_with_the_samplers_logprobs(tmp_path, tiny_tokenizer):
    """old_logprobs_from_sampler, one forward per micro-batch: the sampler's log-probs differ from the training
    forward by rounding, yet ψ is exactly 0 (not ~1e-7) at each rollout's first update, and not after a step."""
    trainer = _trainer(tmp_path, tiny_tokenizer, lambda completions, **kw: [float(i % 2) for i in
                       range(len(completions))], update_token_budget=None)  # fmt: skip
    seen = []
    original = trainer._compute_loss

    def compute_loss(model, inputs):
        seen.append(trainer.optimizer_steps.policy_unchanged_since_rollout())
        return original(model, inputs)

    trainer._compute_loss = compute_loss
    _, rows = _train(trainer)
    assert seen == [
        True,
        False,
        True,
        False,
    ]  # every mini-batch mixed: each first update is followed by a step
    psi = [r["pacs/psi_abs_max"] for r in rows]
    assert psi[0] == 0.0 and psi[2] == 0.0
    assert psi[1] > 1e-4 and psi[3] > 1e-4  # after a step, r̂ compares two policies
