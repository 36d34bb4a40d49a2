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
   checkpoint holding both processes' rollout state and one held-out evaluation;
7. the memory plan against the measured peak: random-initialised models built from the published config.json
   the package ships (`pacs_rl.training.memory.PUBLISHED_CONFIGS`: Qwen2.5-1.5B-Instruct, a 1.5B-class model, and
   Qwen3-1.7B; no download), each trained 2 optimizer steps with PACS and with GRPO on one GPU, bf16 autocast,
   TRL's generation (no vLLM), each run in a process of its own; `torch.cuda.max_memory_allocated()` of that
   process against what the dry run plans for the same settings (`pacs_rl.training.plan.memory_plan`) less its
   2 GiB allowance (the CUDA context and the allocator's slack, which max_memory_allocated does not count). A
   check fails where the two differ by more than 15%: then the plan is fixed, and the record says what.

8. `pacs-rl compare paired`'s engine (pacs_rl.compare) with 4 runs at once on the one GPU, each
   its own process: the base model and seeds 0 and 1 of PACS and GRPO on the tiny model, 2 steps each, recorded
   with the device each ran on.

`--only core,memory,paired,vllm,ddp` runs some groups of these (default: all). It checks each exit status, that
training ran on CUDA, that every metrics.jsonl row has a finite loss, and the
resume and eval outputs. It prints one line per check, and one per check it skipped with the reason (no vLLM,
one GPU, no bundled model), and exits 1 if any check failed. Without CUDA it prints "SKIP: no CUDA device ..."
and exits 0. `--json` records the device, the checks with their results and timings, and the skipped checks
with their reasons, in every case.

It needs no network and no model download: the tiny model is built in code, the memory check's models from the
configs the package ships (their tokenizer is the tiny model's, character-level, padded to the model's
vocabulary), the data is the built-in arithmetic task; the vLLM check uses the bundled model (`scripts/install.sh`
installs it) and is skipped without it. A bare GPU machine needs torch, transformers, accelerate and peft, plus
pacs-rl and what it needs beyond them from a wheelhouse (`python scripts/wheelhouse.py` where the package index
is reachable, then `pip install --no-index --find-links wheelhouse pacs-rl` there). Record a run's JSON in
docs/benchmarks/.
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

# The memory check: models built from the published configs the package ships, trained on one GPU without vLLM.
MEMORY_MODELS = ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen3-1.7B")
MEMORY_LOSSES = ("pacs", "grpo")
MEMORY_TOLERANCE = 0.15  # measured against planned (less the allowance): a larger difference fails the check
MEMORY_RUN = {  # one GPU, bf16 autocast, TRL's generate: the one-GPU configs' micro-batch, one short rollout
    "use_cpu": False, "bf16": True, "use_vllm": False, "fast_sampler": False, "old_logprobs_from_sampler": False,
    "update_token_budget": None, "gradient_checkpointing": True, "num_generations": 8,
    "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "mini_batches_per_rollout": 2,
    "max_completion_length": 512, "max_steps": 2, "learning_rate": 1e-6, "train_size": 64, "eval_size": 0,
    "save_strategy": "no", "report_to": "none", "plot": False, "seed": 0,
}  # fmt: skip
MEMORY_CHECKS = [
    f"memory plan vs measured: {loss}, {model}" for model in MEMORY_MODELS for loss in MEMORY_LOSSES
]

CORE_CHECKS = [
    "train pacs, bf16, fast sampler",
    "train grpo, bf16, TRL generate",
    "resume pacs to 6 steps",
    "resume a finished run: no-op",
    "pacs-rl eval of the trained model",
    *MEMORY_CHECKS,
]
VLLM_CHECKS = ["train pacs, vLLM colocate", "train grpo, vLLM colocate, IS correction"]
DDP_CHECKS = ["train pacs, DDP on 2 GPUs"]
PAIRED_CHECKS = ["pacs-vs-grpo engine: runs sharing one GPU"]
GROUP_CHECKS = {  # what --only chooses among
    "core": [c for c in CORE_CHECKS if c not in MEMORY_CHECKS],
    "memory": MEMORY_CHECKS,
    "paired": PAIRED_CHECKS,
    "vllm": VLLM_CHECKS,
    "ddp": DDP_CHECKS,
}
GROUPS = tuple(GROUP_CHECKS)


def plan(
    cuda_devices: int, vllm: str | None, vllm_error: str, bundled_model: bool
) -> tuple[list[str], list[dict]]:
    """(the checks to run, the checks skipped with why) for this machine.

    cuda_devices: torch.cuda.device_count(); vllm: the version `import vllm` reported, None when it failed with
    vllm_error; bundled_model: whether the bundled SmolLM2 resolves (the vLLM check trains it)."""
    if cuda_devices == 0:
        why = "no CUDA device"
        return [], [{"check": c, "why": why} for c in CORE_CHECKS + PAIRED_CHECKS + VLLM_CHECKS + DDP_CHECKS]
    run, skipped = [*CORE_CHECKS, *PAIRED_CHECKS], []
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


def only(
    to_run: list[str], skipped: list[dict], groups: set[str], given: str
) -> tuple[list[str], list[dict]]:
    """(the checks to run, the checks skipped) once --only ``given`` chose ``groups``: the checks of the groups it
    leaves out are recorded as skipped, not silently missing."""
    left_out = [c for g in GROUPS if g not in groups for c in GROUP_CHECKS[g] if c in to_run]
    return [c for c in to_run if c not in left_out], [
        *skipped,
        *({"check": c, "why": f"not in --only {given}"} for c in left_out),
    ]


def vllm_version() -> tuple[str | None, str]:
    """(vLLM's version, "") when `import vllm` works in a fresh process, else (None, the error's last line)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True
    )
    if proc.returncode == 0:
        return proc.stdout.strip().splitlines()[-1], ""
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    return None, lines[-1] if lines else f"exit {proc.returncode}"


PACKAGES = ("transformers", "trl", "accelerate", "peft", "datasets", "pyarrow", "math-verify")


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    """The installed version of each of ``names`` (None where it is not installed), for the record."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def bundled_model_installed() -> bool:
    try:
        from pacs_rl.models import resolve_model

        resolve_model("smollm2-135m")
        return True
    except Exception:  # ModelError, or the package missing
        return False


# ---------------------------------------------------------------------------------------------------- memory
def padded_tokenizer(vocab_size: int):
    """The tiny model's character-level tokenizer (ChatML template) padded with ``<extra_i>`` tokens to
    ``vocab_size``, so that a model of a published shape samples only ids the tokenizer knows."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    from pacs_rl.models import CHAT_TEMPLATE

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
    tokens = specials + [chr(c) for c in range(32, 127)] + ["\n"]
    tokens += [f"<extra_{i}>" for i in range(vocab_size - len(tokens))]
    backend = Tokenizer(WordLevel(vocab={t: i for i, t in enumerate(tokens)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=None, eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>", unk_token="<unk>",
                                  additional_special_tokens=["<|im_start|>"], padding_side="left")  # fmt: skip
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_model_folder(published: dict, folder: Path, device: str = "cpu") -> Path:
    """A random-initialised model of the shape ``published`` (a config.json as a dict), saved in bf16 with
    :func:`padded_tokenizer` in ``folder``: a local model for `pacs-rl train`, built without the network."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    tok = padded_tokenizer(published["vocab_size"])
    ids = {"eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id, "bos_token_id": None}
    config = AutoConfig.for_model(**{**published, **ids})
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = (
        ids["eos_token_id"],
        ids["pad_token_id"],
    )
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    del model
    return folder


def memory_values(folder: Path, loss: str) -> dict:
    """The memory check's flat settings for the model in ``folder``: `MEMORY_RUN`, the loss, and the longest
    training prompt as max_prompt_tokens (nothing is dropped, and the plan's prompt bound is the real one)."""
    from transformers import AutoTokenizer

    from pacs_rl.training.data import load_run_data, prompt_lengths
    from pacs_rl.training.schema import RunSettings

    values = {**MEMORY_RUN, "model": str(folder), "loss_type": loss}
    settings = RunSettings(train_size=values["train_size"], eval_size=0)
    problems, _ = load_run_data(settings, seed=values["seed"])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    values["max_prompt_tokens"] = max(prompt_lengths(problems, tokenizer, settings.prompt_kwargs()))
    return values


def measure_in_process(values: dict, out: Path, peak_bytes) -> dict:
    """Train ``values`` into ``out`` in this process; (peak_bytes() after it, in a dict). The measured process is
    the one the check starts for each run (`--measure`), so nothing else's tensors count."""
    from pacs_rl.training import run
    from pacs_rl.training.checks import split_settings

    settings, cfg = split_settings(values)
    run.run_training(settings, run.build_config(cfg, out))
    return peak_bytes()


def compare(planned, measured: dict) -> dict:
    """The record of one memory check: the plan's parts and peak, the measured peak, their ratio (measured over
    the plan less its allowance) and whether it is within `MEMORY_TOLERANCE`."""
    from pacs_rl.training.memory import ALLOWANCE, GIB

    expected = planned.peak - ALLOWANCE
    ratio = measured["max_allocated"] / expected
    return {
        "planned_gib": round(planned.peak / GIB, 2),
        "planned_parts_gib": {what: round(b / GIB, 2) for what, b in planned.parts},
        "planned_line": planned.line(),
        "planned_without_allowance_gib": round(expected / GIB, 2),
        "measured_max_allocated_gib": round(measured["max_allocated"] / GIB, 2),
        "measured_max_reserved_gib": round(measured.get("max_reserved", 0) / GIB, 2),
        "ratio": round(ratio, 3),
        "within_tolerance": abs(ratio - 1) <= MEMORY_TOLERANCE,
    }


def _cuda_peak() -> dict:
    import torch

    return {
        "max_allocated": torch.cuda.max_memory_allocated(),
        "max_reserved": torch.cuda.max_memory_reserved(),
    }


def metrics_rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def memory_check(out: Path, records: list[dict], check, gpu_gib: float) -> None:
    """Check 7: for each model and loss, the planned peak against the measured one (`compare`)."""
    import shutil

    import torch

    from pacs_rl.training.memory import PUBLISHED_CONFIGS
    from pacs_rl.training.plan import memory_plan

    for model in MEMORY_MODELS:
        t0 = time.time()
        folder = build_model_folder(
            PUBLISHED_CONFIGS[model], out / "models" / model.split("/")[-1], device="cuda"
        )
        torch.cuda.empty_cache()
        built = time.time() - t0
        for loss in MEMORY_LOSSES:
            name = f"memory plan vs measured: {loss}, {model}"
            values = memory_values(folder, loss)
            planned = memory_plan(values, 1, gpu_gib)
            run_dir = out / "memory" / f"{model.split('/')[-1]}-{loss}"
            spec = run_dir.with_suffix(".json")
            spec.parent.mkdir(parents=True, exist_ok=True)
            spec.write_text(json.dumps({"values": values, "out": str(run_dir)}))
            t1 = time.time()
            env = {
                **os.environ,
                "HF_HUB_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1",
                "HF_HUB_DISABLE_TELEMETRY": "1",
            }
            proc = subprocess.run([sys.executable, __file__, "--measure", str(spec)], capture_output=True,
                                  text=True, env=env)  # fmt: skip
            measured_file = spec.with_suffix(".measured.json")
            if proc.returncode != 0 or not measured_file.is_file() or planned is None:
                check(
                    name,
                    False,
                    time.time() - t1,
                    f"exit {proc.returncode}\n{(proc.stdout + proc.stderr)[-3000:]}",
                )
                continue
            result = compare(planned, json.loads(measured_file.read_text()))
            records.append({"model": model, "loss": loss, "model_built_s": round(built, 1), **result})
            detail = (f"planned {result['planned_without_allowance_gib']} GiB + 2 allowance, measured "
                      f"{result['measured_max_allocated_gib']} GiB allocated: ratio {result['ratio']}")  # fmt: skip
            check(name, result["within_tolerance"], time.time() - t1, detail)
            shutil.rmtree(run_dir, ignore_errors=True)  # final/ of a 1.5B model: 6 GB
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="Folder for the runs (default: a temporary folder).")
    parser.add_argument(
        "--json", default=None, help="Write what was checked and skipped, and timings, as JSON."
    )
    parser.add_argument(
        "--only",
        default=",".join(GROUPS),
        help=f"Comma-separated groups of checks to run (default: all): {', '.join(GROUPS)}.",
    )
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # a memory run's spec (internal)
    args = parser.parse_args()
    groups = {g.strip() for g in args.only.split(",") if g.strip()}
    if not groups or groups - set(GROUPS):
        parser.error(f"--only {args.only!r}: give groups of {', '.join(GROUPS)}")
    if args.measure:  # the process of one memory run: train, then write the peak beside the spec
        spec = json.loads(Path(args.measure).read_text())
        peak = measure_in_process(spec["values"], Path(spec["out"]), _cuda_peak)
        Path(args.measure).with_suffix(".measured.json").write_text(json.dumps(peak))
        return 0

    import torch

    cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    vllm, vllm_error = vllm_version() if cuda_devices else (None, "not tried: no CUDA device")
    to_run, skipped = plan(cuda_devices, vllm, vllm_error, cuda_devices > 0 and bundled_model_installed())
    to_run, skipped = only(to_run, skipped, groups, args.only)
    record = {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "device": torch.cuda.get_device_name(0) if cuda_devices else None,
        "cuda_devices": cuda_devices,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "vllm": vllm or vllm_error,
        "python": sys.version.split()[0],
        "packages": package_versions(),
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
        if args.json:  # after every check: a run stopped at a time limit still leaves what it checked
            Path(args.json).write_text(json.dumps(record, indent=2))

    def train_check(name: str, run: Path, steps: int, *extra: str, base=TRAIN, launch=None) -> list[dict]:
        code, text, secs = pacs_rl("train", "--output-dir", str(run), *base, *extra, launch=launch)
        rows = [r for r in metrics_rows(run) if "loss" in r]
        losses = [r["loss"] for r in rows]
        ok = (
            code == 0
            and "on cuda" in text
            and len(losses) == steps
            and all(isinstance(x, float) and math.isfinite(x) for x in losses)
            and text.count("held-out accuracy (") == 1  # the summary line: one before -> after, as the run printed it
        )
        check(name, ok, secs, f"exit {code}, {len(losses)} loss rows" + ("" if ok else f"\n{text[-3000:]}"))
        return rows if ok else []

    if "core" in groups:
        core_checks(out, check, train_check)
    if "memory" in groups:
        record["memory"] = []
        memory_check(out, record["memory"], check, torch.cuda.get_device_properties(0).total_memory / 1024**3)
    if "paired" in groups:
        paired_check(out, check)
    if "vllm" in groups:
        vllm_checks(out, to_run, check, train_check)
    if "ddp" in groups:
        ddp_check(out, to_run, check, train_check)
    return finish()


def core_checks(out: Path, check, train_check) -> None:
    """Checks 1-4: train PACS and GRPO on CUDA, resume, resume a finished run, evaluate."""
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


PAIRED_WORKERS = 4


def paired_check(out: Path, check) -> None:
    """Check 8: `pacs-rl compare paired`'s engine with PAIRED_WORKERS runs at once on the one GPU,
    each its own process: the base model and two seeds of PACS and GRPO on the tiny model, 2 steps each."""
    from pacs_rl.compare import driver

    folder = out / "paired"
    opts = driver.Options(record=folder / "record.json", work=folder, workers=PAIRED_WORKERS, max_seeds=2,
                          methods=["pacs", "grpo"], no_passk=True,
                          overrides={"model": "tiny", "max_steps": 2, "max_completion_length": 8})  # fmt: skip
    t0 = time.time()
    try:
        driver.run(opts)
        record = json.loads(opts.record.read_text())
    except (Exception, SystemExit) as e:  # a failed run process ends the driver too
        check(PAIRED_CHECKS[0], False, time.time() - t0, f"{type(e).__name__}: {e}")
        return
    runs = record["runs"]
    devices = sorted({r["host"].get("device", "?") for r in [record.get("base") or {"host": {}}, *runs]})
    ok = (sorted((r["method"], r["seed"]) for r in runs) == [("grpo", 0), ("grpo", 1), ("pacs", 0), ("pacs", 1)]
          and "cpu" not in devices and all(r["dynamics"]["steps"] == 2 for r in runs))  # fmt: skip
    check(PAIRED_CHECKS[0], ok, time.time() - t0, f"{len(runs)} runs and the base, {PAIRED_WORKERS} at a time; "
          f"devices {devices}")  # fmt: skip


def vllm_checks(out: Path, to_run: list[str], check, train_check) -> None:
    """Check 5, where vLLM imports."""
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


def ddp_check(out: Path, to_run: list[str], check, train_check) -> None:
    """Check 6, where 2 GPUs are present."""
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


if __name__ == "__main__":
    sys.exit(main())
