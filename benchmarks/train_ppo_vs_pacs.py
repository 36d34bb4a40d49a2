"""PPO (learned critic) against PACS on the same rollouts: seconds per optimizer step and peak memory, as ratios.

Each run is a fresh child process (so its peak RSS is its own), alternating PACS, PPO, PACS, PPO, ... with the
same model, prompts (two-digit arithmetic), reward (the gold answer appears in the completion), batch shape and
seed. Per optimizer step the child records the wall time, and the
time spent producing the rollout batch (generation, reward, old log-probs, and for PPO the critic's values and
GAE); the rest of the step is the update (policy, plus critic for PPO). Peak RSS is `ru_maxrss` of the child.

Writes docs/benchmarks/ppo_vs_pacs.json (figures per run, medians, PPO/PACS ratios, the command, `uptime` before and after:
the CPU is shared, so absolute times move with the load; the ratios are what to read).

    HF_HUB_OFFLINE=1 python benchmarks/train_ppo_vs_pacs.py                 # bundled SmolLM2-135M
    HF_HUB_OFFLINE=1 python benchmarks/train_ppo_vs_pacs.py --prompts 2 --batch 4 --tokens 16 --max-steps 2
                                                                            # the recorded run (busy 2-core CPU)
    HF_HUB_OFFLINE=1 python benchmarks/train_ppo_vs_pacs.py --model tiny    # tiny random model, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        return f"uptime unavailable: {e}"


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def contains_answer(completions, answer, **kwargs) -> list[float]:
    """1.0 when the gold answer appears in the completion: cheap and identical for both methods, so the
    comparison measures training, not answer checking (math-verify on untrained output costs seconds)."""
    texts = [c[0]["content"] if isinstance(c, list) else str(c) for c in completions]
    return [float(str(a) in t) for t, a in zip(texts, answer, strict=True)]


def child(args) -> dict:
    """One training run; returns its timings and memory."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from pacs_rl.data import arithmetic_problems, build_messages
    from pacs_rl.training.config import PACSConfig
    from pacs_rl.training.ppo import PPOConfig, PPOTrainer
    from pacs_rl.training.trainer import PACSTrainer

    torch.manual_seed(args.seed)
    if args.model == "tiny":
        from pacs_rl.models import tiny_random_model, tiny_tokenizer

        tokenizer = tiny_tokenizer()
        model = tiny_random_model(tokenizer, seed=args.seed)
    else:
        from pacs_rl.models import load_model_and_tokenizer

        model, tokenizer = load_model_and_tokenizer(args.model)
    rss_loaded = _rss_mib()
    problems = arithmetic_problems(args.prompts * args.max_steps, seed=args.seed, split="train")
    dataset = Dataset.from_list([{"prompt": build_messages(p.problem), "answer": p.answer} for p in problems])

    common = dict(
        output_dir=str(Path(args.workdir) / args.child),
        use_cpu=True,
        bf16=args.bf16,
        num_generations=args.G,
        per_device_train_batch_size=args.batch,
        mini_batches_per_rollout=args.prompts * args.G // args.batch,
        max_completion_length=args.tokens,
        max_steps=args.max_steps,
        learning_rate=1e-6,
        temperature=1.0,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
        seed=args.seed,
    )
    if args.child == "ppo":
        config, cls = PPOConfig(**common, critic_learning_rate=1e-5), PPOTrainer
    else:
        config, cls = PACSConfig(**common, loss_type="pacs"), PACSTrainer

    steps: list[dict] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            self.t0, self.rollout = time.perf_counter(), 0.0

        def on_step_end(self, a, state, control, **kw):
            total = time.perf_counter() - self.t0
            steps.append({"step": state.global_step, "seconds": total, "rollout_seconds": self.rollout})

    clock = Clock()
    trainer = cls(model, contains_answer, args=config, train_dataset=dataset, processing_class=tokenizer)
    trainer.add_callback(clock)
    generate = trainer._generate_and_score_completions

    def timed_generate(
        inputs,
    ):  # the rollout: generation, reward, old log-probs (+ critic values, GAE for PPO)
        t = time.perf_counter()
        out = generate(inputs)
        clock.rollout += time.perf_counter() - t
        return out

    trainer._generate_and_score_completions = timed_generate
    trainer.train()
    for s in steps:
        s["update_seconds"] = s["seconds"] - s["rollout_seconds"]
    return {
        "method": args.child,
        "steps": steps,
        "rss_after_load_mib": rss_loaded,
        "peak_rss_mib": _rss_mib(),
        "torch_threads": torch.get_num_threads(),
    }


def _median(runs: list[dict], key: str, only_rollout_steps: bool | None = None) -> float:
    vals = []
    for r in runs:
        # Step and update times skip each run's first step (one-off costs: allocator, Adam state); rollout times
        # come from every step that generated, the first included (with few steps it is the only one).
        for s in r["steps"] if only_rollout_steps else r["steps"][1:]:
            has_rollout = s["rollout_seconds"] > 0
            if only_rollout_steps is None or has_rollout == only_rollout_steps:
                vals.append(s[key])
    return statistics.median(vals) if vals else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", default="smollm2-135m", help="bundled alias, path, or 'tiny' (random, in code)"
    )
    ap.add_argument("--prompts", type=int, default=4, help="prompts per rollout batch")
    ap.add_argument("--G", type=int, default=4, help="completions per prompt")
    ap.add_argument(
        "--batch", type=int, default=8, help="per_device_train_batch_size (rows per optimizer step)"
    )
    ap.add_argument("--tokens", type=int, default=32, help="max_completion_length")
    ap.add_argument("--max-steps", type=int, default=4, help="optimizer steps per run")
    ap.add_argument("--repeats", type=int, default=1, help="runs per method, interleaved")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (the CPU default of pacs-rl train)")
    ap.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "pacs_rl_ppo_bench"))
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "ppo_vs_pacs.json"))
    ap.add_argument("--child", choices=["pacs", "ppo"], help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        Path(args.result).write_text(json.dumps(child(args)))
        return

    from rich.progress import Progress

    uptime_before = _uptime()
    runs: list[dict] = []
    order = ["pacs", "ppo"] * args.repeats
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    base = [a for a in sys.argv[1:] if a not in ("--child", "--result")]
    with Progress() as progress:
        task = progress.add_task("PACS vs PPO runs", total=len(order))
        for i, method in enumerate(order):
            result = Path(args.workdir) / f"run{i}-{method}.json"
            cmd = [sys.executable, __file__, *base, "--child", method, "--result", str(result)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            runs.append(json.loads(result.read_text()))
            progress.advance(task)
    uptime_after = _uptime()

    summary = {}
    for method in ("pacs", "ppo"):
        mine = [r for r in runs if r["method"] == method]
        summary[method] = {
            "median_step_seconds": _median(mine, "seconds"),
            "median_update_seconds": _median(mine, "update_seconds"),
            "median_rollout_seconds": _median(mine, "rollout_seconds", only_rollout_steps=True),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in mine),
            "rss_after_load_mib": max(r["rss_after_load_mib"] for r in mine),
        }
        summary[method]["training_rss_increase_mib"] = (
            summary[method]["peak_rss_mib"] - summary[method]["rss_after_load_mib"]
        )
    ratios = {k: summary["ppo"][k] / summary["pacs"][k] for k in summary["pacs"] if summary["pacs"][k]}
    report = {
        "what": "PPO (learned critic) / PACS on identical rollouts: time per optimizer step and peak RSS",
        "command": "HF_HUB_OFFLINE=1 python benchmarks/train_ppo_vs_pacs.py " + " ".join(base),
        "settings": {
            "model": args.model,
            "prompts_per_rollout": args.prompts,
            "G": args.G,
            "rows_per_optimizer_step": args.batch,
            "max_completion_length": args.tokens,
            "optimizer_steps_per_run": args.max_steps,
            "runs_per_method": args.repeats,
            "order": order,
            "note": "step/update medians skip each run's first step, rollout medians include it; "
            "rollout = generation + reward + old log-probs "
            "(+ critic values and GAE for PPO); update = the rest of the step",
        },
        "uptime_before": uptime_before,
        "uptime_after": uptime_after,
        "summary": summary,
        "ppo_over_pacs": ratios,
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"load: {uptime_before}")
    for method in ("pacs", "ppo"):
        s = summary[method]
        print(
            f"{method:4s}  step {s['median_step_seconds']:.2f} s  update {s['median_update_seconds']:.2f} s  "
            f"rollout {s['median_rollout_seconds']:.2f} s  peak RSS {s['peak_rss_mib']:.0f} MiB "
            f"(+{s['training_rss_increase_mib']:.0f} MiB over the loaded model)"
        )
    print("PPO / PACS: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
