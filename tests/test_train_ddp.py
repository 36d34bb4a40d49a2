"""Two CPU processes (accelerate launch --multi_gpu on a CPU-only machine: torchrun + gloo): PACS trains with every group whole on one process.

The test launches this file as the training script; `__main__` is the per-process child.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from train_helpers import child_output

G = 4


def _launch(out: Path, *extra: str) -> None:
    launcher = str(Path(sys.executable).parent / "accelerate")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1"}
    # `accelerate launch --cpu` always uses its single-process launcher; --multi_gpu goes through torchrun,
    # and with use_cpu=True (PACSConfig) on a machine without CUDA the processes talk over gloo.
    cmd = [
        launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", __file__, str(out), *extra,
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, child_output(proc)


@pytest.mark.slow
def test_two_process_training_keeps_groups_whole_and_resumes_exactly(tmp_path):
    if not (Path(sys.executable).parent / "accelerate").exists() and shutil.which("accelerate") is None:
        pytest.skip("accelerate launcher not installed")
    _launch(tmp_path, "full")
    results = [json.loads((tmp_path / f"full-rank{r}.json").read_text()) for r in (0, 1)]
    for res in results:
        assert res["world_size"] == 2
        assert res["micro_batches"] == 2 and res["whole_groups"], res
        assert res["rewards_per_batch"] == [2 * G, 2 * G]
    # the two processes trained on different prompts (groups were not duplicated or split across ranks)
    assert not set(results[0]["prompts"]) & set(results[1]["prompts"])
    # DDP kept the replicas identical
    assert results[0]["param_checksum"] == results[1]["param_checksum"]
    # resume both processes from the step-1 checkpoint (mid-rollout): same weights as the run in one go
    _launch(tmp_path, "resumed", str(tmp_path / "checkpoint-1"))
    resumed = [json.loads((tmp_path / f"resumed-rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["param_checksum"] for r in resumed] == [r["param_checksum"] for r in results]


@pytest.mark.slow
def test_a_signal_on_one_process_steps_both(tmp_path):
    """skip_no_signal_steps decides over all processes: one mixed group on process 0 only (its first rollout; every
    other reward 0) steps both replicas once; the other three steps are skipped on both, which stay identical."""
    if not (Path(sys.executable).parent / "accelerate").exists() and shutil.which("accelerate") is None:
        pytest.skip("accelerate launcher not installed")
    _launch(tmp_path, "signal")
    results = [json.loads((tmp_path / f"signal-rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["skipped_no_signal"] for r in results] == [3, 3]
    assert results[0]["moved"] and results[1]["moved"]
    assert results[0]["param_checksum"] == results[1]["param_checksum"]


@pytest.mark.slow
def test_two_process_dynamic_sampling_fills_every_share_alike_and_resumes_exactly(tmp_path):
    """dynamic_sampling on 2 processes: each process's share holds only groups with both labels, both sampled
    the same rounds (a collective per round), different prompts; a resume from the step-1 checkpoint ends with
    the weights and the prompt stream of the run in one go."""
    if not (Path(sys.executable).parent / "accelerate").exists() and shutil.which("accelerate") is None:
        pytest.skip("accelerate launcher not installed")
    _launch(tmp_path, "full", "-", "dynamic")
    results = [json.loads((tmp_path / f"full-rank{r}.json").read_text()) for r in (0, 1)]
    for res in results:
        assert res["rewards_per_batch"] == [2 * G, 2 * G] and res["whole_groups"], res
        assert res["all_groups_mixed"], res
    assert results[0]["rounds"] == results[1]["rounds"] and max(results[0]["rounds"]) > 1, results
    assert results[0]["prompts_drawn"] == results[1]["prompts_drawn"] > 0
    assert not set(results[0]["prompts"]) & set(results[1]["prompts"])
    assert results[0]["param_checksum"] == results[1]["param_checksum"]
    _launch(tmp_path, "resumed", str(tmp_path / "checkpoint-1"), "dynamic")
    resumed = [json.loads((tmp_path / f"resumed-rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["param_checksum"] for r in resumed] == [r["param_checksum"] for r in results]
    assert [r["prompts_drawn"] for r in resumed] == [r["prompts_drawn"] for r in results]


def _every_third(completions, prompts, **kw):
    """Length parity for the prompts i*i with i % 3 == 0, 0 for the others: only every third group can hold
    both labels."""
    return [
        float(len(c[0]["content"]) % 2) if int(p[-1]["content"].split("*")[0]) % 3 == 0 else 0.0
        for c, p in zip(completions, prompts, strict=True)
    ]


def _child(out: str, tag: str, resume: str | None, dynamic: bool = False) -> None:
    import torch
    from datasets import Dataset

    from pacs_rl.models import tiny_random_model, tiny_tokenizer
    from pacs_rl.training import PACSConfig, PACSTrainer

    class Recording(PACSTrainer):
        def _compute_loss(self, model, inputs):
            self.seen = [*getattr(self, "seen", []), inputs]
            return super()._compute_loss(model, inputs)

        def _dynamic_sampling(self, batch):
            out = super()._dynamic_sampling(batch)
            self.rounds = [
                *getattr(self, "rounds", []),
                self._metrics["train"]["dynamic_sampling/rounds"][-1],
            ]
            return out

    tok = tiny_tokenizer()
    ds = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"{i}*{i}"}], "answer": "0"} for i in range(64)]
    )

    calls = []

    def reward(completions, **kw):
        if tag == "signal":  # one mixed group, on process 0's first rollout
            calls.append(1)
            paid = os.environ.get("RANK") == "0" and len(calls) == 1
            return [float(paid and i == 0) for i in range(len(completions))]
        return [float(len(c[0]["content"]) % 2) for c in completions]

    dynamic_sampling = dict(dynamic_sampling=True, dynamic_sampling_max_rounds=24) if dynamic else {}
    args = PACSConfig(
        **dynamic_sampling,
        output_dir=out,
        use_cpu=True,
        per_device_train_batch_size=2 * G,
        num_generations=G,
        max_completion_length=6,
        max_steps=4 if tag == "signal" else 2,
        mini_batches_per_rollout=2,
        learning_rate=1e-2,
        report_to=[],
        save_strategy="steps",
        save_steps=1,
        seed=0,
        disable_tqdm=True,
    )
    reward = _every_third if dynamic else reward
    trainer = Recording(tiny_random_model(tok), reward, args=args, train_dataset=ds, processing_class=tok)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train(resume_from_checkpoint=resume)
    after = trainer.accelerator.unwrap_model(trainer.model).state_dict()
    whole, mixed, prompts = True, True, []
    for batch in trainer.seen:
        p = batch["prompt_ids"].view(-1, G, batch["prompt_ids"].shape[1])
        whole &= bool((p == p[:, :1]).all())
        groups = batch["rewards"].view(-1, G)
        mixed &= bool((groups.max(1).values != groups.min(1).values).all())
        prompts += [tok.decode(row[0], skip_special_tokens=True) for row in p]
    checksum = sum(
        float(v.double().sum()) for v in trainer.accelerator.unwrap_model(trainer.model).state_dict().values()
    )
    rank = trainer.accelerator.process_index
    Path(out, f"{tag}-rank{rank}.json").write_text(
        json.dumps(
            {
                "world_size": trainer.accelerator.num_processes,
                "micro_batches": len(trainer.seen),
                "whole_groups": whole,
                "rewards_per_batch": [int(b["rewards"].numel()) for b in trainer.seen],
                "prompts": prompts,
                "param_checksum": checksum,
                "skipped_no_signal": trainer.num_skipped_no_signal,
                "moved": any(not torch.equal(after[k], v) for k, v in before.items()),
                "all_groups_mixed": mixed,
                "rounds": getattr(trainer, "rounds", []),
                "prompts_drawn": trainer.dynamic_sampler.stream.drawn if trainer.dynamic_sampler else 0,
            }
        )
    )


if __name__ == "__main__":
    from pacs_rl.training.run import end_processes

    resume_from = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != "-" else None
    _child(sys.argv[1], sys.argv[2], resume_from, dynamic="dynamic" in sys.argv[4:])
    end_processes()  # free the process groups before the interpreter ends (a gloo thread left running can abort)
