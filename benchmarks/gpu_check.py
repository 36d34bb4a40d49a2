"""GPU check: `pacs-rl train` and `pacs-rl eval` on CUDA with the tiny random model, offline.

    python benchmarks/gpu_check.py [--out DIR] [--json FILE]

Where CUDA is present it runs, each as its own `pacs-rl` process:

1. `pacs-rl train --model tiny --loss-type pacs` on CUDA with bf16 autocast, 4 steps, the fast sampler;
2. the same with `--loss-type grpo` and TRL's own generation (transformers `generate`);
3. `--resume` of run 1 with `--max-steps 6` (continues from checkpoint-4), then `--resume` again (complete:
   nothing trained);
4. `pacs-rl eval` of run 1's final model on 16 arithmetic problems, n = 4;

and checks each exit status, that training ran on CUDA, that every metrics.jsonl row has a finite loss, and the
resume and eval outputs. It prints one line per check and exits 1 if any failed. Elsewhere it prints
"SKIP: no CUDA device ..." and exits 0.

It needs no network and no model download: the tiny model is built in code, the data is the built-in
arithmetic task. A bare GPU machine needs torch, transformers, accelerate and peft, plus pacs-rl and its
pure-Python dependencies (trl, math-verify, ...) installed from wheels. Figures of a run go to --json; record
them in docs/SCALING.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAIN = [
    "--model", "tiny", "--max-steps", "4", "--eval-size", "8",
    "--set", "use_cpu=false", "--set", "bf16=true", "--set", "save_steps=2", "--set", "num_generations=4",
    "--set", "per_device_train_batch_size=8", "--set", "max_completion_length=16", "--set", "train_size=64",
    "--set", "eval_batch_size=8", "--set", "learning_rate=1e-4", "--set", "report_to=none",
]  # fmt: skip


def pacs_rl(*args: str) -> tuple[int, str, float]:
    """Run `python -m pacs_rl ARGS` offline; (exit status, stdout + stderr, seconds)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "pacs_rl", *args], capture_output=True, text=True, env=env)
    return proc.returncode, proc.stdout + proc.stderr, time.time() - t0


def metrics_rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="Folder for the runs (default: a temporary folder).")
    parser.add_argument("--json", default=None, help="Write the checks and timings here as JSON.")
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print(f"SKIP: no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda}); "
              "this check runs only where torch.cuda.is_available()")  # fmt: skip
        return 0
    out = Path(args.out or tempfile.mkdtemp(prefix="pacs-rl-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name(0)
    print(f"GPU check on {device} (torch {torch.__version__}, CUDA {torch.version.cuda}), runs in {out}")
    checks: list[dict] = []

    def check(name: str, ok: bool, seconds: float, detail: str = "") -> None:
        checks.append({"check": name, "ok": bool(ok), "seconds": round(seconds, 1), "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'}  {name}  ({seconds:.1f} s){'  ' + detail if detail else ''}")

    def train_check(name: str, run: Path, steps: int, *extra: str) -> str:
        code, text, secs = pacs_rl("train", "--output-dir", str(run), *TRAIN, *extra)
        rows = metrics_rows(run)
        losses = [r["loss"] for r in rows if "loss" in r]
        ok = (
            code == 0
            and "on cuda" in text
            and len(losses) == steps
            and all(isinstance(x, float) and math.isfinite(x) for x in losses)
            and text.count("held-out accuracy") == 1
        )
        check(name, ok, secs, f"exit {code}, {len(losses)} loss rows" + ("" if ok else f"\n{text[-3000:]}"))
        return text

    pacs, grpo = out / "pacs", out / "grpo"
    train_check(
        "train pacs, bf16, fast sampler", pacs, 4, "--loss-type", "pacs", "--set", "fast_sampler=true"
    )
    train_check(
        "train grpo, bf16, TRL generate", grpo, 4, "--loss-type", "grpo", "--set", "fast_sampler=false"
    )

    code, text, secs = pacs_rl("train", "--output-dir", str(pacs), *TRAIN, "--set", "fast_sampler=true",
                               "--max-steps", "6", "--resume")  # fmt: skip
    steps = [r["step"] for r in metrics_rows(pacs) if "loss" in r]
    check(
        "resume pacs to 6 steps",
        code == 0 and steps == [1, 2, 3, 4, 5, 6],
        secs,
        f"exit {code}, steps {steps}",
    )
    code, text, secs = pacs_rl("train", "--output-dir", str(pacs), *TRAIN, "--set", "fast_sampler=true",
                               "--max-steps", "6", "--resume")  # fmt: skip
    done = code == 0 and "nothing to train" in text and not (pacs / "checkpoint-7").exists()
    check("resume a finished run: no-op", done, secs, f"exit {code}")

    evaluation = out / "eval"
    code, text, secs = pacs_rl("eval", "--model", str(pacs / "final"), "--benchmark", "arithmetic?n=16&seed=0",
                               "--n", "4", "--max-new-tokens", "16", "--output", str(evaluation))  # fmt: skip
    metrics = evaluation / "metrics.json"
    check("pacs-rl eval of the trained model", code == 0 and metrics.is_file(), secs, f"exit {code}")

    failed = [c["check"] for c in checks if not c["ok"]]
    print(
        f"{len(checks) - len(failed)} of {len(checks)} checks passed"
        + (f"; failed: {failed}" if failed else "")
    )
    if args.json:
        record = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda, "checks": checks}
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
