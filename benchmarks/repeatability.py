"""Does a training run repeat itself? The same `pacs-rl train` command twice, in separate processes, at each
thread count; every metrics.jsonl value compared bit for bit, step by step.

    python benchmarks/repeatability.py                       # 1 and 2 threads, 6 steps of the CPU default
    python benchmarks/repeatability.py --threads 1 --steps 24 --set loss_type=grpo

Prints, per thread count, the first step at which the two runs differ (and the values there) or "identical",
and writes --out (default docs/benchmarks/repeatability.json) with the date and the host's CPU level. The runs
of one thread count go one after the other (each alone on its threads); the held-out evaluation is off.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEYS = ("loss", "grad_norm", "reward", "entropy", "completions/mean_length", "pacs/psi_abs_max", "grpo/loss")


def first_difference(a: list[dict], b: list[dict]) -> dict | None:
    """The first step whose logged values differ between two runs' metrics rows (None: identical)."""
    for x, y in zip(a, b, strict=False):
        diff = {
            k: [x.get(k), y.get(k)] for k in sorted(set(x) | set(y)) if k != "time" and x.get(k) != y.get(k)
        }
        diff = {k: v for k, v in diff.items() if k in KEYS or k.startswith(("pacs/", "grpo/"))}
        if diff:
            return {"step": x.get("step"), "values": diff}
    if len(a) != len(b):
        return {"step": min(len(a), len(b)) + 1, "values": {"rows": [len(a), len(b)]}}
    return None


def train(folder: Path, threads: int, steps: int, sets: list[str]) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "pacs_rl", "train", "--output-dir", str(folder), "--max-steps", str(steps),
           "--eval-size", "0", "--set", "plot=false", "--set", f"save_steps={steps + 1}"]  # fmt: skip
    for item in sets:
        cmd += ["--set", item]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r for r in rows if "step" in r and "loss" in r]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--set", dest="sets", action="append", default=[], help="key=value for both runs")
    p.add_argument("--out", type=Path, default=Path("docs/benchmarks/repeatability.json"))
    a = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from pacs_rl.sampling.transformers_backend import cpu_capability

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for threads in a.threads:
            t0 = time.time()
            first = train(Path(tmp) / f"t{threads}-a", threads, a.steps, a.sets)
            second = train(Path(tmp) / f"t{threads}-b", threads, a.steps, a.sets)
            diff = first_difference(first, second)
            results.append({"threads": threads, "steps": len(first), "first_difference": diff,
                            "seconds": round(time.time() - t0)})  # fmt: skip
            where = "identical" if diff is None else f"differ from step {diff['step']}: {diff['values']}"
            print(f"{threads} thread(s), {len(first)} steps: {where}", flush=True)
    record = {
        "what": "the same `pacs-rl train` command twice in separate processes: first differing metrics row",
        "command": "python benchmarks/repeatability.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "cpu_capability": cpu_capability(),
        "settings": a.sets,
        "results": results,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
