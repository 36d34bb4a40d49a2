"""PACSTrainer (reference='old') vs stock TRL GRPOTrainer (loss_type='grpo'): step time and peak memory.

Same model, data, reward, seed and settings; the trainers are built in one process and their steps are
interleaved (rotating order) so machine load hits them alike. Three trainers: stock `trl` GRPOTrainer,
`pacs` (PACSTrainer as shipped: on CPU its log-probs come from the completion positions only,
logprob_impl='auto'), and `pacs_trlhead` (PACSTrainer with TRL's fused LM head, logprob_impl='trl', i.e.
the same log-prob code as stock TRL: isolates the cost of the PACS loss and bookkeeping). Reports the
ratios to stock TRL and writes docs/benchmarks/train_step_overhead.json.

    python benchmarks/train_step_overhead.py                 # bundled SmolLM2-135M, 16 x 64 tokens
    python benchmarks/train_step_overhead.py --model tiny    # tiny random model (smoke)

Generation is identical (TRL's transformers path) and dominates the step; the loss differs. Peak
memory: each trainer also runs alone in a child process (--child), started before this process loads
anything, which reports its own peak resident set (VmHWM of /proc/self/status). Not ru_maxrss: at exec
Linux folds the peak of the memory image being replaced (the parent's, shared or copied at fork) into the
child's ru_maxrss, so children started by a parent holding three trainers all reported the parent's peak.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def parity_reward(completions, **kwargs):
    """A cheap deterministic 0/1 reward, so the verifier's cost (which depends on the sampled text)
    does not blur the trainer comparison."""
    return [float(len(c[0]["content"]) % 2) for c in completions]


KINDS = ("trl", "pacs", "pacs_trlhead")


def build(
    kind: str, model_name: str, out: Path, steps: int, G: int, T: int, reward: str = "parity", bf16=False
):
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from pacs_rl.data import arithmetic_problems, build_messages
    from pacs_rl.models import load_model_and_tokenizer, tiny_random_model, tiny_tokenizer
    from pacs_rl.training import PACSConfig, PACSTrainer

    if reward == "math":
        from pacs_rl.rewards import math_reward_func as reward_func
    else:
        reward_func = parity_reward
    torch.manual_seed(0)
    if model_name == "tiny":
        tok = tiny_tokenizer()
        model = tiny_random_model(tok)
    else:
        model, tok = load_model_and_tokenizer(model_name)
    problems = arithmetic_problems(200, seed=0)
    ds = Dataset.from_list([{"prompt": build_messages(p.problem), "answer": p.answer} for p in problems])
    common = dict(
        output_dir=str(out / kind),
        use_cpu=True,
        bf16=bf16,
        gradient_checkpointing=False,
        per_device_train_batch_size=2 * G,
        num_generations=G,
        max_completion_length=T,
        steps_per_generation=1,
        learning_rate=1e-5,
        max_steps=steps,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        seed=0,
        disable_tqdm=True,
        beta=0.0,
    )
    if kind == "trl":
        args = GRPOConfig(loss_type="grpo", **common)
        return GRPOTrainer(model, reward_func, args=args, train_dataset=ds, processing_class=tok)
    common.pop("steps_per_generation")
    impl = "trl" if kind == "pacs_trlhead" else "auto"
    args = PACSConfig(loss_type="pacs", mini_batches_per_rollout=1, logprob_impl=impl, **common)
    return PACSTrainer(model, reward_func, args=args, train_dataset=ds, processing_class=tok)


def peak_rss_mib() -> float:
    """This process's own peak resident set (VmHWM), MiB; ru_maxrss where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(a) -> None:
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="train-overhead-child-"))
    tr = build(a.child, a.model, tmp, a.steps, a.G, a.T, a.reward, a.bf16)
    tr.train()
    print(json.dumps({"max_rss_mib": peak_rss_mib()}))


def peak_alone(a) -> dict[str, float]:
    """Each trainer alone in a fresh child process (2 steps): its own peak RSS, MiB."""
    import subprocess
    import sys

    peak = {}
    for k in KINDS:
        cmd = [sys.executable, __file__, "--child", k, "--model", a.model, "--steps", "2", "--G", str(a.G),
               "--T", str(a.T)] + (["--bf16"] if a.bf16 else [])  # fmt: skip
        line = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        peak[k] = json.loads(line)["max_rss_mib"]
        print(f"peak RSS alone {k}: {peak[k]:.1f} MiB", flush=True)
    return peak


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--T", type=int, default=64)
    p.add_argument("--reward", choices=["parity", "math"], default="parity")
    p.add_argument("--out", default="docs/benchmarks/train_step_overhead.json")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast for every trainer")
    p.add_argument("--child", choices=KINDS, help="internal: run one trainer alone, print max RSS")
    a = p.parse_args()
    if a.child:
        run_child(a)
        return
    peak = peak_alone(a)  # before this process holds any model
    import tempfile

    import torch

    tmp = Path(tempfile.mkdtemp(prefix="train-overhead-"))
    trainers = {k: build(k, a.model, tmp, a.steps, a.G, a.T, a.reward, a.bf16) for k in KINDS}
    times = {k: [] for k in trainers}
    cpu = {k: [] for k in trainers}
    rss_growth = {k: 0.0 for k in trainers}
    iters = {}
    for k, tr in trainers.items():  # TRL-style manual loop: prepare + one optimizer step per call
        tr.model.train()
        tr.create_optimizer_and_scheduler(num_training_steps=a.steps)
        iters[k] = iter(tr.get_train_dataloader())
    for step in range(a.steps):
        for k in KINDS[step % 3 :] + KINDS[: step % 3]:
            tr = trainers[k]
            batch = next(iters[k])
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            torch.manual_seed(1000 + step)  # both trainers sample from the same random stream
            t, c = time.perf_counter(), time.process_time()
            tr.current_gradient_accumulation_steps = 1
            inputs = tr._prepare_inputs(batch)
            loss = tr.compute_loss(tr.model, inputs)
            loss.backward()
            tr.optimizer.step()
            tr.optimizer.zero_grad()
            tr._step += 1
            times[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
            rss_growth[k] = max(rss_growth[k], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
            print(f"step {step} {k}: {times[k][-1]:.2f}s wall, {cpu[k][-1]:.2f}s cpu", flush=True)
    # the first step of each warms caches: report the median of the rest
    med = {k: statistics.median(v[1:] if len(v) > 1 else v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v[1:] if len(v) > 1 else v) for k, v in cpu.items()}
    result = {
        "model": a.model,
        "steps": a.steps,
        "G": a.G,
        "sequences_per_step": 2 * a.G,
        "max_completion_length": a.T,
        "seconds_per_step": times,
        "median_seconds": med,
        "bf16": a.bf16,
        "ratio_pacs_over_trl": med["pacs"] / med["trl"],
        "ratio_pacs_trlhead_over_trl": med["pacs_trlhead"] / med["trl"],
        "cpu_seconds_per_step": cpu,
        "median_cpu_seconds": med_cpu,
        "ratio_cpu_pacs_over_trl": med_cpu["pacs"] / med_cpu["trl"],
        "ratio_cpu_pacs_trlhead_over_trl": med_cpu["pacs_trlhead"] / med_cpu["trl"],
        "max_rss_growth_kib": rss_growth,
        "loadavg": os.getloadavg(),
        "torch_threads": torch.get_num_threads(),
    }
    result["peak_rss_mib_alone"] = peak
    result["ratio_peak_rss_pacs_over_trl"] = peak["pacs"] / peak["trl"]
    result["ratio_peak_rss_pacs_trlhead_over_trl"] = peak["pacs_trlhead"] / peak["trl"]
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "median_seconds",
                    "median_cpu_seconds",
                    "ratio_pacs_over_trl",
                    "ratio_pacs_trlhead_over_trl",
                    "ratio_cpu_pacs_over_trl",
                    "ratio_cpu_pacs_trlhead_over_trl",
                    "peak_rss_mib_alone",
                    "ratio_peak_rss_pacs_over_trl",
                    "ratio_peak_rss_pacs_trlhead_over_trl",
                    "loadavg",
                )
            },
            indent=2,
        )
    )
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
