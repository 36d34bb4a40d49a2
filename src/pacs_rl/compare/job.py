"""One run of a record, in a process of its own (``python -m pacs_rl.compare.job job ...``, started by the driver):
`pacs-rl train`'s CPU default under the record's protocol, the method and the seed, on the device the machine offers
(:func:`pacs_rl.device.with_device`), then evaluated as the protocol says (a paired record: greedy on the whole
held-out split at each of its steps and, where it has it, with pass@k; a planned comparison: pass@k on each of its
benchmarks); its result (``result.json``) is what the record keeps. A paired record keeps only the result: its run
folder loses its weights once evaluated; a planned comparison's run folder stays an ordinary `pacs-rl train` folder.
"""

from __future__ import annotations

import time

STARTED = (
    time.time()
)  # this module's import: in a run process, its start-up before the imports of torch and the rest

import argparse  # noqa: E402 (after STARTED, which times them)
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

from pacs_rl.compare.record import (  # noqa: E402
    CALIBRATION,
    KS,
    PROTOCOL,
    RESULT_FILE,
    dynamics,
    is_comparison,
    passk_due,
    slug,
)
from pacs_rl.data import arithmetic_pool_size, arithmetic_problems  # noqa: E402
from pacs_rl.device import CPU_ONLY, cuda_info, with_device  # noqa: E402
from pacs_rl.evaluation.audit import audit  # noqa: E402
from pacs_rl.evaluation.runner import EvalConfig, bench_slug, build_sampler, run_eval  # noqa: E402
from pacs_rl.evaluation.samples import count_correct, read_samples  # noqa: E402
from pacs_rl.models import TINY_MODEL, resolve_model, tiny_model_folder  # noqa: E402
from pacs_rl.run_folder import (  # noqa: E402
    CHECKPOINT_PREFIX,
    EVAL_SAMPLES_FILE,
    FINAL_DIR,
    FINISHED_FILE,
    HELDOUT_SEED,
    METRICS_FILE,
)
from pacs_rl.training.checks import split_settings  # noqa: E402
from pacs_rl.training.schema import default_settings  # noqa: E402

# a run process works offline (the bundled model, the built-in task) and quietly
JOB_ENV = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}


def heldout_problems():
    h = PROTOCOL["heldout"]
    n = arithmetic_pool_size(ops=h["ops"], digits=h["digits"], split=h["split"])
    return arithmetic_problems(n, seed=HELDOUT_SEED, ops=h["ops"], digits=h["digits"], split=h["split"])


def evaluate(model: str, out: Path, threads: int, passk: bool = True, device: str = "cpu") -> dict:
    """A paired record's evaluation: greedy accuracy on the whole held-out split and pass@k on its first problems
    (resumable), in fp32 on ``device``."""
    problems = heldout_problems()
    g, pk = PROTOCOL["greedy"], PROTOCOL["passk"]
    base = {
        "model": model,
        "benchmark": "arithmetic-heldout",
        "grader": PROTOCOL["grader"],
        "dtype": "float32",
        "device": device,
        "num_threads": threads,
        "verify_workers": 0,
        "progress": False,
    }
    greedy = EvalConfig(
        **base,
        output_dir=str(out / "greedy"),
        n=1,
        ks=[1],
        top_p=1.0,
        batch_size=64,
        temperature=g["temperature"],
        max_new_tokens=g["max_new_tokens"],
    )
    passk_config = EvalConfig(
        **base,
        output_dir=str(out / "passk"),
        n=pk["n"],
        ks=KS,
        temperature=pk["temperature"],
        top_p=pk["top_p"],
        max_new_tokens=pk["max_new_tokens"],
        batch_size=256,
    )
    load = functools.cache(functools.partial(build_sampler, greedy))  # only when something is left to sample
    t0 = time.time()
    gm = run_eval(greedy, load=load, problems=problems)
    result = {
        "greedy": {
            "accuracy": gm["pass_at_k"]["1"],
            "n": gm["num_problems"],
            "mean_length": gm["mean_completion_tokens"],
            "seconds": round(time.time() - t0),  # loading the model included (0 for one already sampled)
        }
    }
    if passk:
        t0 = time.time()
        pm = run_eval(passk_config, load=load, problems=problems[: pk["problems"]])
        result["passk"] = {
            "pass_at_k": pm["pass_at_k"],
            "n": pk["n"],
            "problems": pm["num_problems"],
            "mean_length": pm["mean_completion_tokens"],
            "seconds": round(time.time() - t0),
        }
    return result


def evaluate_benchmarks(proto: dict, model: str, out: Path, threads: int, device: str, label: str) -> dict:
    """A planned comparison's evaluation: pass@k on each of its benchmarks by its one protocol (the same problems,
    n, k, temperature, top-p and seed for every model), resumable, with each problem's right answers (the report's
    paired test reads them) and `pacs-rl eval`'s metrics (``metrics``, for the model card)."""
    ev, evals, metrics = proto["eval"], {}, []
    for bench, drawn in ev["samples"].items():
        folder = out / bench_slug(bench)
        config = EvalConfig(
            model=model, benchmark=bench, output_dir=str(folder), n=drawn["n"], ks=drawn["ks"],
            temperature=ev["temperature"], top_p=ev["top_p"], max_new_tokens=ev["max_new_tokens"],
            batch_size=ev["batch_size"], seed=ev["seed"], grader=ev["grader"], verify_workers=ev["verify_workers"],
            plain_prompt=ev["plain_prompt"], backend=ev["backend"], dtype=ev["dtype"], device=device,
            num_threads=threads, label=label, progress=False, **ev["data"],
        )  # fmt: skip
        t0 = time.time()
        m = run_eval(config)
        rows, _ = read_samples(folder / EVAL_SAMPLES_FILE)
        counts = count_correct(rows, drawn["n"])
        evals[bench] = {
            "n": m["n"],
            "ks": m["ks"],
            "num_problems": m["num_problems"],
            "pass_at_k": m["pass_at_k"],
            "mean_length": m["mean_completion_tokens"],
            "seconds": round(time.time() - t0),
            "correct": {pid: c.correct for pid, c in sorted(counts.items()) if c.samples == drawn["n"]},
        }
        metrics.append(m)
    return {"evals": evals, "metrics": metrics}


def run_values(proto: dict, method: str, seed: int) -> tuple[dict, object]:
    """(the flat settings of one run of ``proto``, the device choice): `pacs-rl train`'s CPU default under the
    protocol, the method and the seed, on the device the machine offers (pacs_rl.device). A paired record's runs
    train in fp32 with the CPU default's sampler and update pieces wherever they train, so that a run on a GPU
    differs from one on a CPU only in its kernels (fp32 whatever the CPU: the record began before the CPU default
    could choose bf16); a planned comparison's take the device's own choices unless its train section sets them.
    The CPU default is the one the protocol holds (``cpu_default``, since version 3), over this code's for a setting
    it lacks."""
    defaults = {**default_settings(), **proto.get("cpu_default", {})}
    user = {**proto["train"], **proto["methods"][method], "seed": seed}
    if not is_comparison(proto):
        user = {
            **{k: defaults[k] for k in CPU_ONLY},
            "bf16": False,
            **user,
        }  # the same sampler on every device
    return with_device(user, defaults)


def job(method: str | None, seed: int | None, work: Path, threads: int, proto: dict) -> None:
    """Train (or resume) one run of ``proto`` (a record's protocol) and evaluate it; ``method`` None evaluates
    the base model."""
    import torch

    from pacs_rl.sampling.transformers_backend import cpu_capability  # torch
    from pacs_rl.training.run import build_config, run_training  # torch, TRL

    warnings.filterwarnings("ignore", category=DeprecationWarning)  # sympy's, once per graded answer
    torch.set_num_threads(threads)
    imports = round(time.time() - STARTED)  # the run process's imports (torch, transformers, TRL)
    cuda = cuda_info()
    device = "cuda" if cuda.available else "cpu"  # the base model's evaluation; a run's is its training's
    host = {
        "cpu_capability": cpu_capability(),
        "device": cuda.name if cuda.available else "cpu",  # runs on another device are marked so
        "threads": threads,
        "import_seconds": imports,
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d"),
    }
    if method is None:
        _evaluate_base(proto, work / "base", threads, device, host)
        return
    folder = work / slug(method) / f"seed{seed}"
    t0 = time.time()
    values, choice = run_values(proto, method, seed)
    device = choice.device
    host["device"] = cuda.name if device == "cuda" else "cpu"
    if not (folder / FINISHED_FILE).is_file():
        settings, cfg = split_settings(values)
        run_training(settings, build_config(cfg, folder), resume=any(folder.glob(f"{CHECKPOINT_PREFIX}*")))
    result = {"method": method, "seed": seed, **_evaluate(proto, str(folder / FINAL_DIR), folder, seed, threads,
                                                          device, f"{method} seed {seed}")}  # fmt: skip
    if not is_comparison(proto):
        result["greedy_at"] = greedy_at_checkpoints(proto, folder, threads, device)
    extra = CALIBRATION if is_comparison(proto) else None
    result["dynamics"] = dynamics(
        folder / METRICS_FILE, values["loss_type"], values.get("max_grad_norm"), extra
    )
    # wall: this process's training (if any) and evaluation; the training's own time is in the dynamics
    result["host"] = {**host, "wall_seconds": round(time.time() - t0)}
    (folder / RESULT_FILE).write_text(json.dumps(result, indent=1))
    if is_comparison(proto):
        return  # an ordinary run folder: `pacs-rl eval --model RUN/final`, `pacs-rl train --resume` work on it
    for checkpoint in folder.glob(f"{CHECKPOINT_PREFIX}*"):  # ~1.6 GB each; the record keeps what matters
        shutil.rmtree(checkpoint, ignore_errors=True)
    for weights in (folder / FINAL_DIR).glob("*.safetensors"):
        weights.unlink()


def _evaluate(proto: dict, model: str, folder: Path, seed, threads: int, device: str, label: str) -> dict:
    """A model's evaluation under ``proto``, into ``folder``/eval; a planned comparison's run folder also gets a
    model card with its evaluations."""
    if not is_comparison(proto):
        return evaluate(model, folder / "eval", threads, passk_due(proto, seed), device)
    found = evaluate_benchmarks(proto, model, folder / "eval", threads, device, label)
    if seed is not None:
        from pacs_rl.training.card import write_model_card  # transformers

        write_model_card(folder, evaluations=found["metrics"])
    return {"evals": found["evals"]}


def _evaluate_base(proto: dict, folder: Path, threads: int, device: str, host: dict) -> None:
    """The base model's run: its evaluation, into ``folder``/result.json."""
    model = proto["train"].get("model", default_settings()["model"])
    model = str(tiny_model_folder(folder / "model")) if model == TINY_MODEL else resolve_model(model)
    result = {"method": "base", **_evaluate(proto, model, folder, None, threads, device, "Base")}
    (folder / RESULT_FILE).write_text(json.dumps({**result, "host": host}, indent=1))


def greedy_at_checkpoints(proto: dict, folder: Path, threads: int, device: str) -> dict:
    """The greedy evaluation of each of the protocol's earlier checkpoints (``greedy_at``) of the run in
    ``folder``, by step."""
    out = {}
    for step in proto["greedy_at"]:
        if step >= proto["train"]["max_steps"]:
            continue
        checkpoint = folder / f"{CHECKPOINT_PREFIX}{step}"
        if not (checkpoint / "config.json").is_file():
            raise SystemExit(f"{checkpoint} is missing: greedy_at {step} needs save_steps to divide it")
        out[str(step)] = evaluate(
            str(checkpoint), folder / f"eval-{step}", threads, passk=False, device=device
        )["greedy"]
    return out


def regrade(work: Path) -> dict:
    """Every evaluation's samples under ``work`` (a paired record's run folders) scored again with the protocol's
    grader by ``pacs-rl audit``'s code (pacs_rl.evaluation.audit): the share right as recorded and now, and pass@k
    now. For a record whose grader has since been fixed; `pacs-rl audit <work>` prints the same with examples of
    each change."""
    folders = sorted(p.parent for p in work.glob(f"*/seed*/eval*/*/{EVAL_SAMPLES_FILE}"))
    if not folders:
        return {}
    questions = {p.id: p.problem for p in heldout_problems()}  # the run.json names no loadable benchmark
    result = audit(folders, PROTOCOL["grader"], questions, root=work)
    return {
        str(Path(f["run_dir"])): {
            "samples": f["rows"],
            "correct_as_recorded": round(f["paid_recorded"] / f["rows"], 4),
            "correct_now": round(f["paid_now"] / f["rows"], 4),
            "pass_at_k_now": {k: round(v, 4) for k, v in f.get("pass_at_k", {}).get("now", {}).items()},
        }
        for f in result["files"]
        if f["rows"]
    }


def commit() -> str:
    try:
        here = Path(__file__).resolve().parent
        return (
            subprocess.run(
                ["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    """``python -m pacs_rl.compare.job job ...``: one run of a record, the process the driver starts."""
    p = argparse.ArgumentParser(prog="python -m pacs_rl.compare.job")
    sub = p.add_subparsers(dest="command", required=True)
    j = sub.add_parser("job", help="train (or resume) and evaluate one run of a record's protocol")
    j.add_argument("--method", default=None)
    j.add_argument("--seed", type=int, default=None)
    j.add_argument("--work", type=Path, required=True)
    j.add_argument("--threads", type=int, default=1)
    j.add_argument("--protocol", type=json.loads, required=True)
    a = p.parse_args(argv)
    for key, value in JOB_ENV.items():
        os.environ.setdefault(key, value)
    job(a.method, a.seed, a.work, a.threads, a.protocol)


if __name__ == "__main__":
    main()
