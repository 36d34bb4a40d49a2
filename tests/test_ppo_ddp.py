"""PPOTrainer on two processes (torchrun, DDP over gloo on CPU): the critic is DDP-wrapped, both ranks end
with the same policy and critic, the checkpoint holds the critic, and a resumed run ends where an uninterrupted
one does. Slow (two process launches of a tiny model): run with -m slow."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from train_helpers import child_output

pytestmark = pytest.mark.slow

WORKER = textwrap.dedent(
    """
    import json, os, sys
    import torch
    from datasets import Dataset
    from pacs_rl.models import tiny_random_model, tiny_tokenizer
    from pacs_rl.training.ppo import PPOConfig, PPOTrainer

    out, resume_from, result = sys.argv[1], sys.argv[2], sys.argv[3]
    G = 4
    tok = tiny_tokenizer()
    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"{i}+{i}" + "?" * (i % 5)}], "answer": str(2 * i)} for i in range(32)]
    )

    def parity(completions, **kw):
        return [float(sum(c[0]["content"].count(d) for d in "13579") % 2) for c in completions]

    cfg = PPOConfig(
        output_dir=out, use_cpu=True, per_device_train_batch_size=G, num_generations=G, max_completion_length=8,
        max_steps=3, learning_rate=1e-3, critic_learning_rate=1e-3, mini_batches_per_rollout=2, report_to=[],
        seed=0, disable_tqdm=True, save_strategy="steps", save_steps=1, critic_warmup_steps=1,
    )
    trainer = PPOTrainer(tiny_random_model(tok, seed=0), parity, args=cfg, train_dataset=data, processing_class=tok)
    trainer.train(resume_from_checkpoint=resume_from or None)
    rank = trainer.accelerator.process_index
    critic = trainer.accelerator.unwrap_model(trainer.critic)
    policy = trainer.accelerator.unwrap_model(trainer.model)
    torch.save(
        {
            "world": trainer.accelerator.num_processes,
            "critic_wrapper": type(trainer.critic).__name__,
            "critic": critic.state_dict(),
            "policy": policy.state_dict(),
        },
        f"{result}.rank{rank}.pt",
    )
    trainer.end()  # leave the process group before the interpreter ends (a gloo process left in it can abort)
    """
)


def _launch(tmp_path, out, resume_from, result):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script)]
    proc = subprocess.run(
        [*cmd, str(out), resume_from, str(result)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, child_output(proc)


def _load(path):
    import torch

    return torch.load(path, weights_only=False)


def _same(a, b):
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_two_processes_train_and_save_the_critic(tmp_path):
    out = tmp_path / "full"
    _launch(tmp_path, out, "", tmp_path / "full")
    r0, r1 = _load(tmp_path / "full.rank0.pt"), _load(tmp_path / "full.rank1.pt")
    assert r0["world"] == 2 and r0["critic_wrapper"] == "DistributedDataParallel"
    assert _same(r0["critic"], r1["critic"]) and _same(r0["policy"], r1["policy"])
    assert (out / "checkpoint-2" / "critic" / "optimizer.pt").is_file()
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3


def test_two_processes_resume_exactly(tmp_path):
    out = tmp_path / "run"
    _launch(tmp_path, out, "", tmp_path / "full")
    shutil.rmtree(out / "checkpoint-3")
    _launch(tmp_path, out, str(out / "checkpoint-2"), tmp_path / "resumed")
    full, resumed = _load(tmp_path / "full.rank0.pt"), _load(tmp_path / "resumed.rank0.pt")
    assert _same(full["critic"], resumed["critic"]), "critic differs after a 2-process resume"
    assert _same(full["policy"], resumed["policy"]), "policy differs after a 2-process resume"
