"""GPU check: `pacs-rl train` and `pacs-rl eval` on CUDA, offline, and a record of what was checked and skipped.

    python benchmarks/gpu_check.py [--out DIR] [--json FILE]

Where CUDA is present it runs, each as its own `pacs-rl` process:

1. `pacs-rl train --model tiny --loss-type pacs` on CUDA with bf16 autocast, 4 steps, the fast sampler;
2. the same with `--loss-type grpo` and TRL's own generation (transformers `generate`);
3. `--resume` of run 1 with `--max-steps` 6 (continues from checkpoint-4), then `--resume` again (complete:
   nothing trained);
4. `pacs-rl eval` of run 1's final model on 16 arithmetic problems, n = 4;
5. where vLLM imports: `pacs-rl train` on the bundled SmolLM2-135M with vLLM colocated (`use_vllm=true
   vllm_mode=colocate`, eager, 30% of the GPU), PACS and GRPO with TRL's importance-sampling correction, 3 steps
   each: vLLM's log-probs of the sampled tokens against the trainer's, every step (the run logs them as
   `sampling/sampling_logp_difference/mean` and `/max`; bf16 on both sides, so the bound is loose: a mean of
   0.05 per step, where a weight sync that did not happen reads 0.3 on CPU), and the
   held-out evaluation through vLLM (`heldout.json`: engine `vllm-colocate`);
6. where 2 GPUs are present: `accelerate launch --multi_gpu --num_processes 2` of run 1's command (DDP), with a
   checkpoint holding both processes' rollout state and one held-out evaluation.

and checks each exit status, that training ran on CUDA, that every metrics.jsonl row has a finite loss, and the
resume and eval outputs. It prints one line per check, and one per check it skipped with the reason (no vLLM,
one GPU, no bundled model), and exits 1 if any check failed. Without CUDA it prints "SKIP: no CUDA device ..."
and exits 0. `--json` records the device, the checks with their results and timings, and the skipped checks
with their reasons, in every case.

It needs no network and no model download: the tiny model is built in code, the data is the built-in
arithmetic task; the vLLM check uses the bundled model (`scripts/install.sh` installs it) and is skipped without
it. A bare GPU machine needs torch, transformers, accelerate and peft, plus pacs-rl and its pure-Python
dependencies (trl, math-verify, ...) installed from wheels. Record the figures of a run in docs/SCALING.md.
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


def pacs_rl(*args: str, launch: list[str] | None = None) -> tuple[int, str, float]:
    """Run `python -m pacs_rl ARGS` offline, or `LAUNCH -m pacs_rl ARGS` (accelerate launch ...);
    (exit status, stdout + stderr, seconds)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    t0 = time.time()
    command = [*(launch or [sys.executable]), "-m", "pacs_rl", *args]
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    return proc.returncode, proc.stdout + proc.stderr, time.time() - t0


VLLM_TRAIN = [
    "--model", "smollm2-135m", "--max-steps", "3", "--eval-size", "8",
    "--set", "use_cpu=false", "--set", "bf16=true", "--set", "use_vllm=true", "--set", "vllm_mode=colocate",
    "--set", "vllm_gpu_memory_utilization=0.3", "--set", 'vllm_engine_kwargs={"enforce_eager": true}',
    "--set", "num_generations=4", "--set", "per_device_train_batch_size=8", "--set", "gradient_accumulation_steps=1",
    "--set", "mini_batches_per_rollout=1", "--set", "max_completion_length=32", "--set", "learning_rate=1e-4",
    "--set", "train_size=64", "--set", "report_to=none", "--set", "save_steps=100",
]  # fmt: skip
# mean |Δ log p| between vLLM and the trainer per step, bf16 on both sides. On CPU in fp32: 6.5e-6 at most; with the
# weight sync switched off, one step at lr 1e-4 later: 0.30.
LOGP_MEAN_BOUND = 0.05

CORE_CHECKS = [
    "train pacs, bf16, fast sampler",
    "train grpo, bf16, TRL generate",
    "resume pacs to 6 steps",
    "resume a finished run: no-op",
    "pacs-rl eval of the trained model",
]
VLLM_CHECKS = ["train pacs, vLLM colocate", "train grpo, vLLM colocate, IS correction"]
DDP_CHECKS = ["train pacs, DDP on 2 GPUs"]


def plan(
    cuda_devices: int, vllm: str | None, vllm_error: str, bundled_model: bool
) -> tuple[list[str], list[dict]]:
    """(the checks to run, the checks skipped with why) for this machine.

    cuda_devices: torch.cuda.device_count(); vllm: the version `import vllm` reported, None when it failed with
    vllm_error; bundled_model: whether the bundled SmolLM2 resolves (the vLLM check trains it)."""
    if cuda_devices == 0:
        why = "no CUDA device"
        return [], [{"check": c, "why": why} for c in CORE_CHECKS + VLLM_CHECKS + DDP_CHECKS]
    run, skipped = list(CORE_CHECKS), []
    if vllm is None:
        skipped += [{"check": c, "why": f"vLLM does not import: {vllm_error}"} for c in VLLM_CHECKS]
    elif not bundled_model:
        skipped += [
            {"check": c, "why": "the bundled model is not installed (scripts/install.sh)"}
            for c in VLLM_CHECKS
        ]
    else:
        run += VLLM_CHECKS
    if cuda_devices < 2:
        skipped += [{"check": c, "why": f"{cuda_devices} CUDA device, DDP needs 2"} for c in DDP_CHECKS]
    else:
        run += DDP_CHECKS
    return run, skipped


def vllm_version() -> tuple[str | None, str]:
    """(vLLM's version, "") when `import vllm` works in a fresh process, else (None, the error's last line)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True
    )
    if proc.returncode == 0:
        return proc.stdout.strip().splitlines()[-1], ""
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return None, lines[-1] if lines else f"exit {proc.returncode}"


def bundled_model_installed() -> bool:
    try:
        from pacs_rl.models import resolve_model

        resolve_model("smollm2-135m")
        return True
    except Exception:  # ModelError, or the package missing
        return False


def metrics_rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="Folder for the runs (default: a temporary folder).")
    parser.add_argument(
        "--json", default=None, help="Write what was checked and skipped, and timings, as JSON."
    )
    args = parser.parse_args()

    import torch

    cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    vllm, vllm_error = vllm_version() if cuda_devices else (None, "not tried: no CUDA device")
    to_run, skipped = plan(cuda_devices, vllm, vllm_error, cuda_devices > 0 and bundled_model_installed())
    record = {
        "device": torch.cuda.get_device_name(0) if cuda_devices else None,
        "cuda_devices": cuda_devices,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "vllm": vllm or vllm_error,
        "checks": [],
        "skipped": skipped,
    }
    checks: list[dict] = record["checks"]

    def finish() -> int:
        failed = [c["check"] for c in checks if not c["ok"]]
        if cuda_devices:
            for c in skipped:
                print(f"SKIP  {c['check']}  ({c['why']})")
            print(
                f"{len(checks) - len(failed)} of {len(checks)} checks passed, {len(skipped)} skipped"
                + (f"; failed: {failed}" if failed else "")
            )
        if args.json:
            Path(args.json).write_text(json.dumps(record, indent=2))
        return 1 if failed else 0

    if not cuda_devices:
        print(f"SKIP: no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda}); "
              "this check runs only where torch.cuda.is_available()")  # fmt: skip
        return finish()
    out = Path(args.out or tempfile.mkdtemp(prefix="pacs-rl-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"GPU check on {record['device']} x{cuda_devices} (torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"vLLM {record['vllm']}), runs in {out}")  # fmt: skip

    def check(name: str, ok: bool, seconds: float, detail: str = "") -> None:
        checks.append({"check": name, "ok": bool(ok), "seconds": round(seconds, 1), "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'}  {name}  ({seconds:.1f} s){'  ' + detail if detail else ''}")

    def train_check(name: str, run: Path, steps: int, *extra: str, base=TRAIN, launch=None) -> list[dict]:
        code, text, secs = pacs_rl("train", "--output-dir", str(run), *base, *extra, launch=launch)
        rows = [r for r in metrics_rows(run) if "loss" in r]
        losses = [r["loss"] for r in rows]
        ok = (
            code == 0
            and "on cuda" in text
            and len(losses) == steps
            and all(isinstance(x, float) and math.isfinite(x) for x in losses)
            and text.count("held-out accuracy") == 1
        )
        check(name, ok, secs, f"exit {code}, {len(losses)} loss rows" + ("" if ok else f"\n{text[-3000:]}"))
        return rows if ok else []

    pacs, grpo = out / "pacs", out / "grpo"
    train_check(CORE_CHECKS[0], pacs, 4, "--loss-type", "pacs", "--set", "fast_sampler=true")
    train_check(CORE_CHECKS[1], grpo, 4, "--loss-type", "grpo", "--set", "fast_sampler=false")

    code, text, secs = pacs_rl("train", "--output-dir", str(pacs), *TRAIN, "--set", "fast_sampler=true",
                               "--max-steps", "6", "--resume")  # fmt: skip
    steps = [r["step"] for r in metrics_rows(pacs) if "loss" in r]
    check(CORE_CHECKS[2], code == 0 and steps == [1, 2, 3, 4, 5, 6], secs, f"exit {code}, steps {steps}")
    code, text, secs = pacs_rl("train", "--output-dir", str(pacs), *TRAIN, "--set", "fast_sampler=true",
                               "--max-steps", "6", "--resume")  # fmt: skip
    done = code == 0 and "nothing to train" in text and not (pacs / "checkpoint-7").exists()
    check(CORE_CHECKS[3], done, secs, f"exit {code}")

    evaluation = out / "eval"
    code, text, secs = pacs_rl("eval", "--model", str(pacs / "final"), "--benchmark", "arithmetic?n=16&seed=0",
                               "--n", "4", "--max-new-tokens", "16", "--output", str(evaluation))  # fmt: skip
    metrics = evaluation / "metrics.json"
    check(CORE_CHECKS[4], code == 0 and metrics.is_file(), secs, f"exit {code}")

    if VLLM_CHECKS[0] in to_run:
        for name, run, extra in (
            (VLLM_CHECKS[0], out / "vllm-pacs", ("--loss-type", "pacs")),
            (VLLM_CHECKS[1], out / "vllm-grpo",
             ("--loss-type", "grpo", "--set", "vllm_importance_sampling_correction=true")),
        ):  # fmt: skip
            rows = train_check(name + ": runs", run, 3, *extra, base=VLLM_TRAIN)
            means = [r.get("sampling/sampling_logp_difference/mean", math.inf) for r in rows]
            maxes = [r.get("sampling/sampling_logp_difference/max", math.inf) for r in rows]
            held = json.loads((run / "heldout.json").read_text()) if (run / "heldout.json").is_file() else {}
            engines = {held.get(k, {}).get("engine") for k in ("before", "after")}
            ok = bool(rows) and max(means) <= LOGP_MEAN_BOUND and engines == {"vllm-colocate"}
            detail = (f"|Δ log p| per step: mean {[round(g, 5) for g in means]}, max {[round(g, 4) for g in maxes]}; "
                      f"held-out engines {sorted(map(str, engines))}")  # fmt: skip
            check(name + ": log-probs and held-out through vLLM", ok, 0.0, detail)

    if DDP_CHECKS[0] in to_run:
        launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                  "--num_machines", "1", "--mixed_precision", "bf16", "--dynamo_backend", "no"]  # fmt: skip
        ddp = out / "ddp"
        rows = train_check(
            DDP_CHECKS[0], ddp, 4, "--loss-type", "pacs", "--set", "fast_sampler=false", launch=launch
        )
        ranks = sorted(p.name for p in (ddp / "checkpoint-2").glob("pacs_trainer_state_rank*.pt"))
        check(
            DDP_CHECKS[0] + ": both processes checkpointed", bool(rows) and len(ranks) == 2, 0.0, f"{ranks}"
        )

    return finish()


if __name__ == "__main__":
    sys.exit(main())
