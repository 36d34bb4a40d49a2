"""What dynamic sampling costs on the CPU default: `pacs-rl train` for a few steps without it and with it.

    python benchmarks/dynamic_sampling.py                       # 4 steps; off, then max_rounds 4 and 8
    python benchmarks/dynamic_sampling.py --steps 2 --rounds 2  # shorter

Each arm is the CPU default run (the bundled model, fp32, 4 prompts x G = 8 per rollout batch, 2 optimizer
steps on each) in its own process, one after the other, same seed, without the held-out evaluations
(`--eval-size 0`) and checkpoints: only training is timed (transformers' `train_runtime`). Per arm it records:

- the training time and its ratio to the arm without dynamic sampling, and the CPU seconds of the arm's whole
  command (user + system, all threads) as the difference to the arm without;
- the tokens sampled (prompts and completions of every round, TRL's `num_tokens`): the sampling work,
  whatever the load;
- per rollout batch, the groups sampled, those trained on that hold both labels, the places filled with
  single-label groups (the cap reached), the rounds, and the seconds the further rounds took, with their share
  of the arm's training time (a ratio within one process, under one load).

On a machine shared with other work the wall and the CPU seconds of an arm vary with the load (its threads
wait and spin): compare arms within a run, and runs only as far as their load averages agree. Each run is
added to docs/benchmarks/dynamic_sampling.json (`runs`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "docs" / "benchmarks" / "dynamic_sampling.json"
PROMPTS = 4  # the CPU default's prompts per rollout batch (G = 8)


def train(
    folder: Path, steps: int, seed: int, rounds: int | None, model: str
) -> tuple[list[dict], float, float]:
    """One arm in its own process: (its metrics.jsonl rows, wall and CPU seconds of the whole command)."""
    cmd = [sys.executable, "-m", "pacs_rl", "train", "--model", model, "--output-dir", str(folder),
           "--max-steps", str(steps), "--eval-size", "0", "--set", "plot=false",
           "--set", "save_strategy='no'", "--set", f"seed={seed}"]  # fmt: skip
    if rounds:
        cmd += ["--set", "dynamic_sampling=true", "--set", f"dynamic_sampling_max_rounds={rounds}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    started, cpu = time.perf_counter(), _children_cpu()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return rows, time.perf_counter() - started, _children_cpu() - cpu


def _children_cpu() -> float:
    """User + system CPU seconds of this process's finished children (the arms run one at a time)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def summary(rows: list[dict], wall: float, cpu: float) -> dict:
    """The arm's training time and, per rollout batch (the rows that sampled one), what it trained on."""
    runtime = next(r["train_runtime"] for r in rows if "train_runtime" in r)
    # TRL's count of the prompt and completion tokens of every round sampled: the sampling work, whatever the
    # load
    tokens = max((r["num_tokens"] for r in rows if "num_tokens" in r), default=None)
    rollouts = []
    for r in rows:
        if "groups/mixed_frac" not in r:
            continue
        if "dynamic_sampling/rounds" in r:
            rollouts.append({k.split("/", 1)[1]: r[k] for k in r if k.startswith("dynamic_sampling/")})
        else:  # without dynamic sampling the batch is the first round, as sampled
            kept = round(r["groups/mixed_frac"] * PROMPTS)
            rollouts.append({"groups_sampled": PROMPTS, "groups_kept": kept, "rounds": 1, "seconds": 0.0})
        rollouts[-1]["step"] = r["step"]
    total = {
        k: sum(x.get(k, 0) for x in rollouts)
        for k in ("groups_sampled", "groups_kept", "groups_padded", "rounds", "seconds")
    }
    trained = PROMPTS * len(rollouts)
    return {"train_seconds": runtime, "command_seconds": wall, "command_cpu_seconds": cpu,
            "tokens_sampled": tokens, "rollouts": rollouts,
            "total": total,
            "kept_share_of_trained_groups": total["groups_kept"] / trained if trained else None}  # fmt: skip


def write_record(out: Path, run: dict) -> None:
    """Add ``run`` to the record's runs (a shared machine's timings vary from run to run: each is kept)."""
    earlier = json.loads(out.read_text()).get("runs", []) if out.is_file() else []
    record = {
        "what": "the CPU default run, training only, without and with dynamic sampling",
        "date": run["date"],  # the latest run's (the index's columns)
        "cpu_capability": run["cpu_capability"],
        "runs": [*earlier, run],
    }
    out.write_text(json.dumps(record, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rounds", type=int, nargs="+", default=[4, 8], help="dynamic_sampling_max_rounds arms"
    )
    parser.add_argument("--model", default="smollm2-135m", help="tiny: a smoke test of this script")
    parser.add_argument("--out", type=Path, default=RECORD)
    args = parser.parse_args()
    from pacs_rl.sampling.transformers_backend import cpu_capability

    arms, load_at_start = {}, os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="dynamic-sampling-") as tmp:
        for rounds in [None, *args.rounds]:
            name = f"max_rounds_{rounds}" if rounds else "off"
            arms[name] = summary(*train(Path(tmp) / name, args.steps, args.seed, rounds, args.model))
            print(
                f"{name}: {json.dumps({k: v for k, v in arms[name].items() if k != 'rollouts'})}", flush=True
            )
    for arm in arms.values():
        arm["train_time_ratio_to_off"] = arm["train_seconds"] / arms["off"]["train_seconds"]
        arm["cpu_seconds_over_off"] = arm["command_cpu_seconds"] - arms["off"]["command_cpu_seconds"]
        # within one run, under one load: the share of its training time the further rounds took
        arm["further_rounds_share_of_training"] = arm["total"]["seconds"] / arm["train_seconds"]
    run = {
        "command": "python benchmarks/" + Path(__file__).name + " " + " ".join(sys.argv[1:]),
        "date": date.today().isoformat(),
        "cpu_capability": cpu_capability(),
        "cpu_count": os.cpu_count(),
        "loadavg_at_start": load_at_start,
        "loadavg_at_end": os.getloadavg(),
        "model": args.model,
        "steps": args.steps,
        "seed": args.seed,
        "prompts_per_rollout": PROMPTS,
        "arms": arms,
    }
    write_record(args.out, run)
    for name, arm in arms.items():
        t = arm["total"]
        print(f"{name}: {arm['train_seconds']:.0f} s training ({arm['train_time_ratio_to_off']:.2f}x off), "
              f"{arm['cpu_seconds_over_off']:+.0f} CPU-s against off; "
              f"{t['groups_sampled']:.0f} groups sampled in {t['rounds']:.0f} rounds, "
              f"{t['groups_kept']:.0f} trained on with both labels, "
              f"{t['groups_padded']:.0f} filled; further rounds {t['seconds']:.0f} s")  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
