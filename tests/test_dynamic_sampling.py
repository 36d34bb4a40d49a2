"""Dynamic sampling (DAPO; `dynamic_sampling`): its pieces on hand-made batches, then PACSTrainer and PPOTrainer
on a tiny random model with a scripted reward that can only tell apart the completions of every third prompt,
through the fast sampler and TRL's generate: which groups are kept, where further prompts come from, the cap,
the metrics, exact resume. The vLLM path is tests/test_vllm_cpu.py's (the vLLM CPU job); two processes are
tests/test_train_ddp.py's."""

from __future__ import annotations

import logging
import re

import pytest
import torch

from pacs_rl.run_folder import METRICS_FILE, last_complete_checkpoint, read_jsonl
from pacs_rl.training import PACSConfig, PACSTrainer
from pacs_rl.training.dynamic_sampling import (
    PromptStream,
    fill_batch,
    merge_rollouts,
    take_groups,
    unequal_groups,
)
from pacs_rl.training.output import MetricsJsonlCallback
from pacs_rl.training.ppo import PPOConfig, PPOTrainer
from train_helpers import G, keep_first_checkpoint, parity_reward, tiny_run_kwargs, train_until_killed

PAD = 0


# ---------------------------------------------------------------- the pieces, on hand-made batches
def test_unequal_groups_with_and_without_unscored_completions():
    rewards = torch.tensor([0, 1, 0, 0, 1, 1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0, 0, 0, 1])
    assert unequal_groups(rewards, 4).tolist() == [True, False, True, True]
    # an unscored completion is left out of the comparison: group 3's only 1 is unscored, group 0 keeps a 1
    scored = torch.tensor([1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]).bool()
    assert unequal_groups(rewards, 4, scored).tolist() == [True, False, True, False]
    # fewer than two scored completions: nothing to compare
    one_scored = torch.tensor([1, 0, 0, 0] * 4).bool()
    assert unequal_groups(rewards, 4, one_scored).tolist() == [False] * 4


def test_prompt_stream_is_a_shuffled_pass_deterministic_and_resumable():
    stream = PromptStream(10, seed=3)
    first, second = stream.take(10), stream.take(10)
    assert sorted(first) == sorted(second) == list(range(10))  # every prompt once per pass
    assert first != second and first != list(range(10))  # each pass shuffled, differently
    again = PromptStream(10, seed=3)
    assert again.take(4) + again.take(9) + again.take(7) == first + second  # the same order however it is cut
    resumed = PromptStream(10, seed=3, drawn=13)  # a checkpoint's `drawn`: the stream goes on where it stood
    assert resumed.take(7) == second[3:]
    assert PromptStream(10, seed=4).take(10) != first
    assert PromptStream(5, seed=3, shuffle=False).take(7) == [0, 1, 2, 3, 4, 0, 1]


def _rollout(rewards: list[float], P: int, T: int, tag: int, prompt_pad: int = 0) -> dict:
    """A rollout batch of len(rewards) rows: prompts of P tokens (``prompt_pad`` of them left padding), completions
    of T tokens, every token id ``tag`` (so merged rows can be traced), per-sequence lists and a 0-d count."""
    B = len(rewards)
    prompt_mask = torch.ones(B, P, dtype=torch.long)
    prompt_mask[:, :prompt_pad] = 0
    return {
        "prompt_ids": torch.full((B, P), tag).masked_fill(prompt_mask == 0, PAD),
        "prompt_mask": prompt_mask,
        "completion_ids": torch.full((B, T), tag),
        "completion_mask": torch.ones(B, T, dtype=torch.long),
        "old_per_token_logps": torch.full((B, T), -float(tag)),
        "importance_sampling_ratio": torch.ones(B, 1),
        "rewards": torch.tensor(rewards),
        "row": [f"{tag}:{i}" for i in range(B)],
        "num_items_in_batch": torch.tensor(B * T),
    }


def test_merge_pads_prompts_left_and_completions_right():
    a, b = _rollout([0, 1], P=3, T=2, tag=5), _rollout([1, 0], P=5, T=4, tag=7, prompt_pad=1)
    merged = merge_rollouts([a, b], PAD, per_sequence=("importance_sampling_ratio",))
    assert merged["prompt_ids"].tolist() == [[PAD, PAD, 5, 5, 5]] * 2 + [[PAD, 7, 7, 7, 7]] * 2
    assert merged["prompt_mask"].tolist() == [[0, 0, 1, 1, 1]] * 2 + [[0, 1, 1, 1, 1]] * 2
    assert merged["completion_ids"].tolist() == [[5, 5, PAD, PAD]] * 2 + [[7] * 4] * 2
    assert merged["completion_mask"].tolist() == [[1, 1, 0, 0]] * 2 + [[1] * 4] * 2
    assert merged["old_per_token_logps"].tolist() == [[-5, -5, 0, 0]] * 2 + [[-7] * 4] * 2
    assert merged["importance_sampling_ratio"].shape == (4, 1)  # one ratio per sequence: not padded
    assert merged["row"] == ["5:0", "5:1", "7:0", "7:1"] and merged["rewards"].tolist() == [0, 1, 1, 0]
    b.pop("old_per_token_logps")
    assert "old_per_token_logps" not in merge_rollouts([a, b], PAD)  # a key some parts lack is left out


def test_take_groups_keeps_rows_of_a_group_together_in_the_order_asked():
    batch = _rollout([0, 1, 1, 1, 0, 0], P=2, T=2, tag=1)  # 3 groups of 2
    taken = take_groups(batch, torch.tensor([2, 0]), 2)
    assert taken["row"] == ["1:4", "1:5", "1:0", "1:1"] and taken["rewards"].tolist() == [0, 0, 0, 1]
    assert taken["num_items_in_batch"] is batch["num_items_in_batch"]


def _rounds(*rewards_per_round: list[float]):
    """(first round, a sample() that hands out the others in turn, the rounds handed out so far)."""
    rounds = [_rollout(r, P=2, T=2 + i, tag=i + 1) for i, r in enumerate(rewards_per_round)]
    given = [rounds[0]]

    def sample():
        given.append(rounds[len(given)])
        return given[-1]

    return rounds[0], sample, given


def test_fill_batch_keeps_groups_in_sampling_order_and_drops_the_surplus():
    # groups of 2; each round 3 groups. Round 1 keeps group 1, round 2 group 0 and 2, round 3 is never sampled
    first, sample, given = _rounds([0, 0, 0, 1, 1, 1], [1, 0, 0, 0, 0, 1], [0, 1, 0, 1, 0, 1])
    filled = fill_batch(first, sample, lambda k: k, 2, max_rounds=5, pad_token_id=PAD)
    assert (filled.rounds, filled.kept, filled.padded, len(given)) == (2, 3, 0, 2)
    assert filled.batch["row"] == ["1:2", "1:3", "2:0", "2:1", "2:4", "2:5"]
    assert filled.batch["completion_ids"].shape == (6, 3)  # padded to the widest round

    first, sample, given = _rounds([0, 0, 0, 1, 1, 1], [0, 1, 0, 1, 0, 1], [0, 1, 0, 1, 0, 1])
    filled = fill_batch(first, sample, lambda k: k, 2, max_rounds=5, pad_token_id=PAD)
    assert filled.batch["row"] == ["1:2", "1:3", "2:0", "2:1", "2:2", "2:3"]  # round 2's third group: surplus


def test_fill_batch_at_the_cap_fills_up_with_single_label_groups_of_the_first_round():
    first, sample, given = _rounds([0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1])
    filled = fill_batch(first, sample, lambda k: k, 2, max_rounds=2, pad_token_id=PAD)
    assert (filled.rounds, filled.kept, filled.padded, len(given)) == (2, 1, 2, 2)
    # the kept group first, then the first round's single-label groups
    assert filled.batch["row"] == ["1:2", "1:3", "1:0", "1:1", "1:4", "1:5"]
    one = fill_batch(*_rounds([0, 0, 1, 1, 0, 1])[:2], lambda k: k, 2, max_rounds=1, pad_token_id=PAD)
    assert (one.rounds, one.kept, one.padded) == (1, 1, 2)  # max_rounds 1: filter, no further sampling


def test_fill_batch_samples_until_every_process_is_full():
    """Another process still short keeps this one sampling (its surplus dropped), so all sample alike."""
    first, sample, given = _rounds([0, 1, 0, 1], [0, 1, 0, 1], [0, 1, 0, 1])
    others = iter([0, 1, 2])  # the fewest kept of the other process, round by round
    filled = fill_batch(first, sample, lambda k: min(k, next(others)), 2, max_rounds=5, pad_token_id=PAD)
    assert (filled.rounds, filled.kept, filled.padded, len(given)) == (3, 2, 0, 3)
    assert filled.batch["row"] == ["1:0", "1:1", "1:2", "1:3"]


def test_fill_batch_refuses_image_rollouts_naming_the_setting():
    first, sample, _ = _rounds([0, 1, 0, 0])
    first["pixel_values"] = torch.zeros(2, 3)
    with pytest.raises(
        ValueError, match=r"dynamic_sampling=True .* \(pixel_values\) .* set dynamic_sampling=False"
    ):
        fill_batch(first, sample, lambda k: k, 2, max_rounds=2, pad_token_id=PAD)


# ---------------------------------------------------------------- the command: dry run, refusal, summary
def test_the_dry_run_says_what_a_round_costs_and_a_bad_cap_is_refused():
    from typer.testing import CliRunner

    from pacs_rl.cli import app

    def dry(*sets):
        args = ["train", "--dry-run", *(a for s in sets for a in ("--set", s))]
        result = CliRunner().invoke(app, args, env={"HF_HUB_OFFLINE": "1"})
        return result.exit_code, result.output

    code, out = dry("dynamic_sampling=true", "dynamic_sampling_max_rounds=3")
    assert code == 0, out
    assert "dynamic sampling: each rollout batch keeps only groups whose rewards are not all equal" in out
    assert "up to 2 further rounds of 4 prompts" in out and "at most 3x the sampling and grading" in out
    assert "up to 3 further rounds" in dry()[1]  # the CPU default samples dynamically, at most 4 rounds
    assert "dynamic sampling" not in dry("dynamic_sampling=false")[1]
    code, out = dry("dynamic_sampling=true", "dynamic_sampling_max_rounds=0")
    assert code != 0 and "dynamic_sampling_max_rounds=0: give a whole number >= 1" in out


def test_the_run_summary_line():
    from pacs_rl.training.cli import dynamic_sampling_lines

    assert dynamic_sampling_lines({}) == [] and dynamic_sampling_lines(None) == []
    totals = {"rollouts": 2, "groups_sampled": 20.0, "groups_kept": 6.0, "groups_padded": 2.0, "rounds": 5.0,
              "seconds": 41.6}  # fmt: skip
    (line,) = dynamic_sampling_lines(totals)
    assert line == (
        "dynamic sampling: 20 groups sampled in 5 rounds for 2 rollout batches; 6 of the 8 groups trained on hold "
        "both labels (unequal rewards), 2 places filled with single-label groups (the cap reached); the further "
        "rounds took 42 s"
    )


# ---------------------------------------------------------------- the trainer, on a tiny random model
def every_third(completions, answer, **kw):
    """parity_reward for the prompts i with i % 3 == 0 (answer 2i), 0 for the others: only every third prompt's
    group can hold both labels."""
    return [r if int(a) % 3 == 0 else 0.0 for r, a in zip(parity_reward(completions), answer, strict=True)]


def _dataset(n=48):
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"{i}+{i}"}], "answer": str(2 * i)} for i in range(n)]
    )


class Recording(PACSTrainer):
    """Keeps every micro-batch the loss sees."""

    def _compute_loss(self, model, inputs):
        self.seen = [*getattr(self, "seen", []), dict(inputs)]
        return super()._compute_loss(model, inputs)


def _trainer(out, model, tokenizer, reward=every_third, cls=Recording, config=PACSConfig, dataset=None, **kw):
    settings = dict(max_steps=4, dynamic_sampling=True, dynamic_sampling_max_rounds=16)
    args = config(**tiny_run_kwargs(out, **{**settings, **kw}))
    return cls(model, reward, args=args, train_dataset=dataset or _dataset(), processing_class=tokenizer,
               callbacks=[MetricsJsonlCallback()])  # fmt: skip


def _rollout_rows(out) -> list[dict]:
    return [r for r in read_jsonl(out / METRICS_FILE) if "dynamic_sampling/rounds" in r]


@pytest.mark.parametrize("fast_sampler", [True, False], ids=["fast_sampler", "trl_generate"])
def test_batches_hold_only_groups_with_both_labels(tmp_path, tiny_model, tiny_tokenizer, fast_sampler):
    trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, fast_sampler=fast_sampler)
    trainer.train()
    rollouts = _rollout_rows(tmp_path)
    assert [r["step"] for r in rollouts] == [1, 3]  # one row per rollout batch (2 optimizer steps each)
    for r in rollouts:
        assert r["dynamic_sampling/groups_sampled"] == 4 * r["dynamic_sampling/rounds"]  # 4 prompts a round
        assert r["dynamic_sampling/groups_kept"] == 4 and r["dynamic_sampling/groups_padded"] == 0
        assert r["dynamic_sampling/seconds"] > 0
    assert max(r["dynamic_sampling/rounds"] for r in rollouts) > 1, "no further round: the check is empty"
    # further prompts come from the prompt stream: 4 per further round
    assert trainer.dynamic_sampler.stream.drawn == sum(
        4 * (r["dynamic_sampling/rounds"] - 1) for r in rollouts
    )
    assert len(trainer.seen) == 4
    for batch in trainer.seen:
        assert batch["rewards"].shape == (2 * G,) and batch["completion_ids"].size(0) == 2 * G
        groups = batch["rewards"].view(-1, G)
        assert (groups.max(1).values != groups.min(1).values).all(), "a kept group holds one label"
        prompts = batch["prompt_ids"].view(-1, G, batch["prompt_ids"].size(1))
        assert (prompts == prompts[:, :1]).all(), "a micro-batch holds a partial group"
        for row in prompts[:, 0]:  # only every third prompt can tell its completions apart
            i = int(re.search(r"(\d+)\+\1", tiny_tokenizer.decode(row, skip_special_tokens=True)).group(1))
            assert i % 3 == 0
    totals = trainer.dynamic_sampling_totals
    assert totals["rollouts"] == 2 and totals["groups_kept"] == 8 and totals["groups_padded"] == 0
    assert totals["rounds"] == sum(r["dynamic_sampling/rounds"] for r in rollouts)


def test_per_token_and_per_sequence_rollout_keys_stay_with_their_rows(tmp_path, tiny_model, tiny_tokenizer):
    """What vLLM adds to a rollout (its log-probs per token, TRL's ratio per sequence) is merged row by row with
    the completions: here each is a function of its own row, checked after the rounds are merged and shuffled."""

    class Tagged(Recording):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            out["sampling_per_token_logps"] = -out["completion_ids"].float() * out["completion_mask"]
            out["importance_sampling_ratio"] = out["rewards"][:, None] + 1.0  # (B, 1): TRL's sequence modes
            return out

    trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, cls=Tagged, max_steps=2)
    trainer.train()
    assert _rollout_rows(tmp_path)[0]["dynamic_sampling/rounds"] > 1
    for batch in trainer.seen:
        mask = batch["completion_mask"]
        assert torch.equal(batch["sampling_per_token_logps"], -batch["completion_ids"].float() * mask)
        assert torch.equal(batch["importance_sampling_ratio"], batch["rewards"][:, None] + 1.0)


def test_at_the_cap_the_batch_keeps_its_size_and_the_run_goes_on(
    tmp_path, tiny_model, tiny_tokenizer, caplog
):
    def never(completions, **kw):
        return [0.0] * len(completions)

    trainer = _trainer(
        tmp_path, tiny_model, tiny_tokenizer, reward=never, max_steps=2, dynamic_sampling_max_rounds=3
    )
    with caplog.at_level(logging.WARNING, logger="pacs_rl.training"):
        trainer.train()
    (row,) = _rollout_rows(tmp_path)
    assert row["dynamic_sampling/rounds"] == 3 and row["dynamic_sampling/groups_sampled"] == 12
    assert row["dynamic_sampling/groups_kept"] == 0 and row["dynamic_sampling/groups_padded"] == 4
    assert [b["rewards"].numel() for b in trainer.seen] == [2 * G, 2 * G]
    assert trainer.state.global_step == 2
    assert "0 of 4 groups of this rollout batch hold both labels after 3 rounds" in caplog.text


@pytest.mark.parametrize("moment", ["sampling", "update"])
def test_run_signalled_mid_step_resumes_to_identical_weights_and_prompts(tmp_path, tiny_tokenizer, moment):
    """SIGTERM in step 3, in a further round of dynamic sampling (its second) or in the update: the step is dropped at
    the next check point (no forward of the policy runs to its end after the signal), the last checkpoint is step
    2's, and the run resumed from it ends with the weights and the prompt stream of the run in one go."""
    from pacs_rl.models import tiny_random_model

    extra = dict(save_strategy="steps", save_steps=1, fast_sampler=True)
    full = _trainer(tmp_path / "full", tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra)
    full.train()
    run_dir = tmp_path / "stopped"
    stopped = _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra)
    assert train_until_killed(stopped, 3, event=moment, sampling_round=2) == 0
    assert last_complete_checkpoint(run_dir) == str(run_dir / "checkpoint-2")
    resumed = _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=1), tiny_tokenizer, **extra)
    resumed.train(resume_from_checkpoint=last_complete_checkpoint(run_dir))
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    assert resumed.dynamic_sampler.stream.drawn == full.dynamic_sampler.stream.drawn > 0


def test_interrupted_run_resumes_to_identical_weights_and_prompts(tmp_path, tiny_tokenizer):
    """6 steps in one go vs. killed after step 4 and resumed from the step-1 checkpoint (mid-rollout): the
    further prompts drawn after the resume are those of the uninterrupted run."""
    from pacs_rl.models import tiny_random_model

    extra = dict(max_steps=6, save_strategy="steps", save_steps=1, fast_sampler=True)
    full = _trainer(tmp_path / "full", tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra)
    full.train()

    run_dir = tmp_path / "killed"
    train_until_killed(
        _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=0), tiny_tokenizer, **extra), 4
    )
    checkpoint = keep_first_checkpoint(run_dir, 4)
    resumed = _trainer(run_dir, tiny_random_model(tiny_tokenizer, seed=1), tiny_tokenizer, **extra)
    resumed.train(resume_from_checkpoint=checkpoint)
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    assert resumed.dynamic_sampler.stream.drawn == full.dynamic_sampler.stream.drawn > 0
    assert resumed.dynamic_sampling_totals == pytest.approx(
        {**full.dynamic_sampling_totals, "seconds": resumed.dynamic_sampling_totals["seconds"]}
    )
    assert (
        _rollout_rows(run_dir)[-1]["dynamic_sampling/rounds"]
        == _rollout_rows(tmp_path / "full")[-1]["dynamic_sampling/rounds"]
    )


def test_a_streamed_dataset_is_refused_in_one_line(tmp_path, tiny_model, tiny_tokenizer):
    with pytest.raises(ValueError, match=r"dynamic_sampling=True draws further prompts .* by index") as e:
        _trainer(tmp_path, tiny_model, tiny_tokenizer, dataset=_dataset().to_iterable_dataset())
    assert "\n" not in str(e.value)


def test_ppo_computes_values_and_advantages_on_the_batch_it_keeps(tmp_path, tiny_model, tiny_tokenizer):
    class RecordingPPO(PPOTrainer):
        def _values_and_advantages(self, output):
            output = super()._values_and_advantages(output)
            self.scored_batches = [*getattr(self, "scored_batches", []), output]
            return output

    trainer = _trainer(tmp_path, tiny_model, tiny_tokenizer, cls=RecordingPPO, config=PPOConfig,
                       critic_learning_rate=1e-3, max_steps=2)  # fmt: skip
    trainer.train()
    (batch,) = trainer.scored_batches  # once per rollout, on the kept batch, not once per round
    groups = batch["rewards"].view(-1, G)
    assert groups.size(0) == 4 and (groups.max(1).values != groups.min(1).values).all()
    mask = batch["completion_mask"].bool()
    advantages = batch["ppo_advantages"][mask]  # whitened over the batch trained on
    assert abs(advantages.mean().item()) < 1e-5 and advantages.std().item() == pytest.approx(1, abs=1e-3)
    assert _rollout_rows(tmp_path)[0]["dynamic_sampling/rounds"] > 1
