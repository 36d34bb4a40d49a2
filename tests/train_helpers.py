"""Shared pieces of the trainer tests (tests/test_train.py, tests/test_ppo.py): a deterministic 0/1 reward
and the tiny-run settings every trainer test starts from."""

from __future__ import annotations

G = 4  # group size of the tiny runs


def parity_reward(completions, **kwargs):
    """1 when the completion holds an odd number of odd digits: a deterministic 0/1 label."""
    return [float(sum(c[0]["content"].count(d) for d in "13579") % 2) for c in completions]


def tiny_run_kwargs(tmp_path, **overrides) -> dict:
    """Config keywords of a 2-step run on a tiny model: two groups of G per micro-batch, 8-token completions,
    2 mini-batches per rollout, no checkpoints, no trackers."""
    kw = dict(
        output_dir=str(tmp_path),
        use_cpu=True,
        per_device_train_batch_size=2 * G,
        num_generations=G,
        max_completion_length=8,
        max_steps=2,
        learning_rate=1e-2,
        mini_batches_per_rollout=2,
        report_to=[],
        seed=0,
        disable_tqdm=True,
        save_strategy="no",
    )
    kw.update(overrides)
    return kw
