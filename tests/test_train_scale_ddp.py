"""The scale path with real processes (slow): `pacs-rl train --model tiny` on 2 CPU processes end to end, the
same loss and gradient from 1 process x B and 2 processes x B/2, and a `pacs-rl train` process killed with
SIGKILL at several moments and resumed, ending bit-identical to a run never interrupted.

`accelerate launch --multi_gpu` on a CPU-only machine goes through torchrun with the gloo backend. The test
launches this file as the per-process script for the gradient check (`__main__` is the child).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from train_helpers import child_output, kill_when

G = 4
# cw_grpo is left out: its covariance weights are statistics of each micro-batch (mean and σ over its tokens), so
# its gradient depends on how a rollout batch is split, by construction (docs/SCALING.md)
LOSSES = ("pacs", "grpo", "dr_grpo", "rloo")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1"}
TINY = [
    "--model", "tiny", "--max-steps", "2", "--set", "save_steps=1", "--set", "per_device_train_batch_size=4",
    "--set", "num_generations=2", "--set", "max_completion_length=6", "--set", "train_size=40",
    "--set", "eval_batch_size=2", "--set", "bf16=false",
]  # fmt: skip


def _accelerate() -> list[str]:
    launcher = Path(sys.executable).parent / "accelerate"
    if not launcher.exists() and shutil.which("accelerate") is None:
        pytest.skip("accelerate launcher not installed")
    return [str(launcher if launcher.exists() else shutil.which("accelerate")), "launch", "--multi_gpu",
            "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]  # fmt: skip


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_two_process_cli_run_evaluates_once_writes_once_and_resumes(tmp_path):
    out = tmp_path / "run"
    train = [
        *_accelerate(),
        "-m",
        "pacs_rl.cli",
        "train",
        "--output-dir",
        str(out),
        *TINY,
        "--eval-size",
        "5",
    ]
    first = _run(train)
    assert first.returncode == 0, child_output(first)
    text = first.stdout + first.stderr
    assert text.count("held-out accuracy (5 problems, greedy): before") == 1  # one evaluation, one summary
    assert text.count("output folder:") == 1 and text.count("training on all") <= 1
    held = json.loads((out / "heldout.json").read_text())
    assert held["before"]["n"] == 5 and held["after"]["n"] == 5  # 3 + 2 problems (one padding row), gathered
    ckpt = out / "checkpoint-2"
    assert sorted(p.name for p in ckpt.glob("pacs_trainer_state_rank*.pt")) == [
        "pacs_trainer_state_rank0.pt",
        "pacs_trainer_state_rank1.pt",
    ]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2]  # one row per step, not one per process
    again = _run([*train, "--resume"])
    assert again.returncode == 0, child_output(again)
    assert (again.stdout + again.stderr).count("is finished (step 2 of 2): nothing to train") == 1
    more = [sys.executable, "-m", "pacs_rl", "train", "--output-dir", str(out), *TINY, "--eval-size", "5"]
    one = _run([*more, "--max-steps", "3", "--resume"])  # one process cannot continue a 2-process run
    assert one.returncode != 0 and "written by 2 processes and this run has 1" in one.stdout + one.stderr


@pytest.mark.slow
def test_one_process_batch_b_and_two_processes_b_over_2_give_one_gradient(tmp_path):
    """DDP averages the processes' gradients; every group loss is a mean over its sequences with whole groups on
    each process, so 2 processes x B/2 (equal halves) must reproduce 1 process x B."""
    result = _run([*_accelerate(), __file__, str(tmp_path)])
    assert result.returncode == 0, child_output(result)
    two = torch.load(tmp_path / "two.pt")
    one = _losses_and_grads(None, None)
    for name in LOSSES:
        assert torch.allclose(two[name]["loss"], one[name]["loss"], atol=1e-6), name
        for a, b in zip(two[name]["grads"], one[name]["grads"], strict=True):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-4), name


def _batch():
    """4 groups of G completions: token ids, a mask with varied lengths, 0/1 rewards, old log-prob offsets."""
    g = torch.Generator().manual_seed(0)
    B, P, T = 4 * G, 5, 7
    ids = torch.randint(4, 90, (B, P + T), generator=g)
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    offset = 0.05 * torch.randn(B, T, generator=g)  # old / reference log-probs differ from the current ones
    return ids, mask, rewards, offset, P


def _losses_and_grads(accelerator, rows):
    """Loss and gradient of every group loss on ``rows`` of the batch (all rows on one process)."""
    from pacs_rl.algorithms import compute_policy_loss
    from pacs_rl.models import tiny_random_model

    ids, mask, rewards, offset, P = _batch()
    if rows is not None:
        ids, mask, rewards, offset = ids[rows], mask[rows], rewards[rows], offset[rows]
    out = {}
    for name in LOSSES:
        model = tiny_random_model(seed=0)
        if accelerator is not None:
            model = accelerator.prepare(model)
        logits = model(input_ids=ids).logits[:, P - 1 : -1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, P:, None]).squeeze(-1)
        old = logp.detach() + offset
        extra = {"ref_logp": old} if name == "pacs" else {}
        loss, _ = compute_policy_loss(
            name, logp=logp, old_logp=old, mask=mask, rewards=rewards, group_size=G, **extra
        )
        (accelerator.backward(loss) if accelerator is not None else loss.backward())
        inner = accelerator.unwrap_model(model) if accelerator is not None else model
        loss = loss.detach()
        if accelerator is not None:
            loss = accelerator.reduce(loss, reduction="mean")
        out[name] = {"loss": loss, "grads": [p.grad.detach().clone() for p in inner.parameters()]}
    return out


# ---------------------------------------------------------------------------------------------------- SIGKILL
def _final_weights(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run / "final" / "model.safetensors"))


@pytest.mark.slow
def test_a_run_killed_with_sigkill_and_resumed_ends_bit_identical(tmp_path):
    # a reward with both labels (a completion's length is odd): with the math reward the tiny model scores 0
    # everywhere, PACS's gradient is then exactly 0, and equal weights below would be the untrained ones
    reward = tmp_path / "odd_length.py"
    reward.write_text(
        "def odd_length(completions, **kw):\n"
        "    return [float(len(c[0]['content']) % 2) for c in completions]\n"
    )
    train = [sys.executable, "-m", "pacs_rl", "train", *TINY, "--max-steps", "4", "--eval-size", "4",
             "--set", f"reward_funcs={reward}:odd_length", "--set", "learning_rate=0.01"]  # fmt: skip
    reference = tmp_path / "whole"
    assert _run([*train, "--output-dir", str(reference)]).returncode == 0
    want = _final_weights(reference)
    from safetensors.torch import load_file

    untrained = load_file(str(reference / "base_model" / "model.safetensors"))
    moved = [k for k in want if k in untrained and not torch.equal(want[k], untrained[k])]
    assert moved, "the run did not move the weights: the comparison below would be vacuous"
    moments = {
        # mid-step: checkpoint-1 is complete, the run is inside step 2 (its rollout buffered in checkpoint-1)
        "mid-step": lambda run: (run / "checkpoint-1" / "trainer_state.json").is_file(),
        # mid-save: checkpoint-2's folder exists, its trainer_state.json (written last) not yet
        "mid-save": lambda run: (run / "checkpoint-2").is_dir(),
        # after the last checkpoint, while final/ is written
        "final": lambda run: (run / "final").is_dir(),
    }
    for name, ready in moments.items():
        run = tmp_path / name
        kill_when([*train, "--output-dir", str(run)], lambda run=run, ready=ready: ready(run), ENV)
        assert not (run / "run_complete.json").exists(), name
        resumed = _run([*train, "--output-dir", str(run), "--resume"])
        assert resumed.returncode == 0, f"{name}: {child_output(resumed)}"
        got = _final_weights(run)
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want), name
        assert (
            json.loads((run / "heldout.json").read_text())["after"]
            == json.loads((reference / "heldout.json").read_text())["after"]
        ), name


if __name__ == "__main__":
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    half = 2 * G  # two whole groups per process
    rows = slice(acc.process_index * half, (acc.process_index + 1) * half)
    result = _losses_and_grads(acc, rows)
    if acc.is_main_process:
        torch.save(result, Path(sys.argv[1]) / "two.pt")
    acc.wait_for_everyone()
    acc.end_training()  # leave the process group before the interpreter ends (a gloo process left in it can abort)
    sys.exit(0)
