"""`pacs-rl train` over seeds, for arms of settings: held-out accuracy before and after, its gain with a 95%
interval, the smallest and largest gain, training time and peak memory. The pilot that chose the CPU default
and the first run over seeds are both this script's records.

    python benchmarks/train_seeds.py run --name first_run --seeds 0-9 --workers 1 --threads 2
    python benchmarks/train_seeds.py run --name pilot --arm pacs:loss_type=pacs --arm grpo:loss_type=grpo \
        --seeds 0-7 --set eval_dataset='arithmetic?n=200&seed=777&split=train&ops=+-&digits=2,1'
    python benchmarks/train_seeds.py summary --name pilot [--markdown]
    python benchmarks/train_seeds.py merge CPU.json GPU.json --out docs/benchmarks/seeds_pilot.json --pair pacs:pacs_ds

On a GPU add ``--set use_cpu=false --set bf16=false`` (fp32, as on the CPU); ``merge`` makes one record of
several (seeds trained on different machines), each run keeping its device, and ``--pair A:B`` adds the paired
difference B - A over the seeds both arms ran.

Each (arm, seed) is one `pacs-rl train --seed K --set ...` process into ``runs/seeds/<name>/<arm>-s<K>``
(``--work``), ``--workers`` at a time with ``num_threads=--threads`` each (one thread: a run repeats itself bit
for bit); a finished run is read back, not run again, so the script resumes where it was stopped. An arm is
``name:key=value,key=value`` (no ``--arm``: one arm, ``default``, the CPU default itself); ``--set`` applies to
every arm. Per run the record keeps the held-out accuracy before and after (``heldout.json``), the training
seconds TRL reports, the peak resident memory of the process (``ru_maxrss``), and from ``metrics.jsonl``: the
mean reward and share of groups with both labels over the first three and last three rollouts, the optimizer
steps skipped without a signal, the completions cut off. Writes ``docs/benchmarks/seeds_<name>.json``
(``--out``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}


def parse_seeds(text: str) -> list[int]:
    """``"0-9"`` -> 0..9; ``"0,3,5"`` -> [0, 3, 5]."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def parse_arm(text: str) -> tuple[str, list[str]]:
    """``"lr1:learning_rate=1e-5,max_steps=24"`` -> ("lr1", ["learning_rate=1e-5", "max_steps=24"])."""
    name, _, sets = text.partition(":")
    if not name.replace("_", "").replace("-", "").isalnum():
        raise SystemExit(
            f"--arm {text!r}: the arm's name must be letters, digits, - or _ (name:key=value,...)"
        )
    return name, [s for s in sets.split(",") if s]


def _rollout_figures(metrics: list[dict]) -> dict:
    rollouts = [r for r in metrics if "groups/mixed_frac" in r]

    def mean(key: str, rows: list[dict]) -> float | None:
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        return round(statistics.mean(values), 4) if values else None

    steps = [r for r in metrics if "loss" in r or "grad_norm" in r]
    return {
        "rollouts": len(rollouts),
        "reward_first_3": mean("reward", rollouts[:3]),
        "reward_last_3": mean("reward", rollouts[-3:]),
        "mixed_groups_first_3": mean("groups/mixed_frac", rollouts[:3]),
        "mixed_groups_last_3": mean("groups/mixed_frac", rollouts[-3:]),
        "cut_off_first_3": mean("completions/clipped_ratio", rollouts[:3]),
        "cut_off_last_3": mean("completions/clipped_ratio", rollouts[-3:]),
        "skipped_no_signal": sum(r.get("optimizer/skipped_no_signal", 0) or 0 for r in steps),
    }


def dev_accuracy(folder: Path) -> float | None:
    """The greedy accuracy ``pacs-rl eval`` recorded in ``folder`` (a development-split evaluation), or None."""
    found = _json(folder / "metrics.json")
    return found.get("mean_score")


def evaluate_dev(model: str, folder: Path, source: str, threads: int) -> float | None:
    """``pacs-rl eval`` of ``model`` on ``source`` as the run's held-out protocol measures (greedy, 96 tokens, the
    training grader), into ``folder``; its accuracy. Resumes (a finished evaluation is read back)."""
    if dev_accuracy(folder) is None:
        cmd = [sys.executable, "-m", "pacs_rl", "eval", "--model", model, "--benchmarks", source, "--n", "1", "--temperature", "0",
               "--top-p", "1.0", "--max-new-tokens", "96", "--grader", "sound", "--output-dir", str(folder),
               "--set", f"num_threads={threads}"]  # fmt: skip
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "eval.log").open("a") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **ENV}, check=False)
    return dev_accuracy(folder)


def read_run(folder: Path) -> dict | None:
    """The figures of a finished run folder; None when it has not finished."""
    from pacs_rl.run_folder import read_jsonl

    held = _json(folder / "heldout.json")
    if "after" not in held:
        return None
    metrics = read_jsonl(folder / "metrics.jsonl")
    runtime = next((r["train_runtime"] for r in reversed(metrics) if "train_runtime" in r), None)
    return {
        "before": held["before"]["accuracy"],
        "after": held["after"]["accuracy"],
        "dev_after": dev_accuracy(folder / "dev"),
        "n": held["after"].get("n"),
        "train_seconds": runtime,
        **_json(folder / "process.json"),
        **_rollout_figures(metrics),
    }


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _commit() -> str:
    """The checkout's commit; on a copy of the tree without its history (a lent machine), $TRAIN_SEEDS_COMMIT."""
    found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    return found.stdout.strip() or os.environ.get("TRAIN_SEEDS_COMMIT", "unknown")


def run_one(folder: Path, seed: int, sets: list[str], threads: int) -> None:
    """One `pacs-rl train` process into ``folder`` (resumed from its checkpoints), its peak memory kept."""
    folder.mkdir(parents=True, exist_ok=True)
    resume = any(folder.glob("checkpoint-*/trainer_state.json"))
    cmd = [
        sys.executable,
        "-m",
        "pacs_rl",
        "train",
        "--seed",
        str(seed),
        "--output-dir",
        str(folder),
        "--set",
        f"num_threads={threads}",
    ]
    cmd += [x for s in sets for x in ("--set", s)] + (["--resume"] if resume else [])
    started = time.time()
    commit = _commit()
    with (folder / "train.log").open("a") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **ENV})
        _pid, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(f"FAILED ({code}): {' '.join(cmd)}; see {folder / 'train.log'}", flush=True)
        return
    process = {
        "wall_seconds": round(time.time() - started, 1),
        "peak_rss_gib": round(usage.ru_maxrss / 2**20, 3),
        "commit": commit,
    }
    if not resume:  # a resumed run's process saw part of the work only
        (folder / "process.json").write_text(json.dumps(process) + "\n")


def _unfinished(folder: Path, dev: str | None) -> bool:
    return read_run(folder) is None or (dev is not None and dev_accuracy(folder / "dev") is None)


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and its two-sided 95% t interval."""
    from scipy.stats import t

    mean = statistics.mean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def summarize(runs: list[dict], dev_before: float | None = None) -> dict:
    out = {}
    for arm in dict.fromkeys(r["arm"] for r in runs):
        rows = [r for r in runs if r["arm"] == arm]
        gains = [r["after"] - r["before"] for r in rows]
        mean, lo, hi = interval(gains)
        after = [r["after"] for r in rows]
        out[arm] = {
            "seeds": len(rows),
            "before_mean": round(statistics.mean(r["before"] for r in rows), 4),
            "after_mean": round(statistics.mean(after), 4),
            "gain_mean": round(mean, 4),
            "gain_ci95": [round(lo, 4), round(hi, 4)],
            "gain_min": round(min(gains), 4),
            "gain_max": round(max(gains), 4),
            "collapses_under_20pct": sum(a < 0.2 for a in after),
            "train_seconds_median": _median([r.get("train_seconds") for r in rows]),
            "peak_rss_gib_max": max((r["peak_rss_gib"] for r in rows if r.get("peak_rss_gib")), default=None),
            "skipped_no_signal_mean": round(statistics.mean(r.get("skipped_no_signal", 0) for r in rows), 2),
            "mixed_groups_first_3_mean": _mean([r.get("mixed_groups_first_3") for r in rows]),
        }
        # a development-split gain against the base model's accuracy there on the run's own device (a merged
        # record's runs keep theirs: greedy decoding on another device can differ)
        dev = [
            (r["dev_after"], r.get("dev_before", dev_before)) for r in rows if r.get("dev_after") is not None
        ]
        dev = [(after, before) for after, before in dev if before is not None]
        if dev:
            gains_dev = [after - before for after, before in dev]
            mean, lo, hi = interval(gains_dev)
            bases = sorted({before for _, before in dev})
            out[arm].update(
                dev_seeds=len(dev), dev_before=bases[0] if len(bases) == 1 else bases, dev_gain_mean=round(mean, 4),
                dev_gain_ci95=[round(lo, 4), round(hi, 4)], dev_gain_min=round(min(gains_dev), 4),
            )  # fmt: skip
    return out


def _seconds(value) -> str:
    return ", ".join(f"{v} ({k})" for k, v in value.items()) if isinstance(value, dict) else str(value)


def _percents(value: float | list[float]) -> str:
    return " / ".join(f"{100 * v:.1f}%" for v in (value if isinstance(value, list) else [value]))


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 1) if values else None


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.mean(values), 4) if values else None


def markdown(record: dict) -> str:
    lines = [
        "| arm | seeds | held-out before | after | gain, mean [95% CI] | gain min..max | under 20% | "
        "training s (median) | peak GiB |",
        "|---|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    for arm, s in record["summary"].items():
        lo, hi = s["gain_ci95"]
        lines.append(
            f"| {arm} | {s['seeds']} | {100 * s['before_mean']:.1f}% | {100 * s['after_mean']:.1f}% | "
            f"{100 * s['gain_mean']:+.1f} pp [{100 * lo:+.1f}, {100 * hi:+.1f}] | {100 * s['gain_min']:+.1f}.."
            f"{100 * s['gain_max']:+.1f} pp | {s['collapses_under_20pct']} | {_seconds(s['train_seconds_median'])} | "
            f"{s['peak_rss_gib_max']} |"
        )
    dev = [(arm, s) for arm, s in record["summary"].items() if "dev_gain_mean" in s]
    if dev:
        lines += ["", "| arm | seeds | development split before | gain, mean [95% CI] | smallest gain |",
                  "|---|---:|---:|---|---:|"]  # fmt: skip
        for arm, s in dev:
            lo, hi = s["dev_gain_ci95"]
            lines.append(
                f"| {arm} | {s['dev_seeds']} | {_percents(s['dev_before'])} | {100 * s['dev_gain_mean']:+.1f} pp "
                f"[{100 * lo:+.1f}, {100 * hi:+.1f}] | {100 * s['dev_gain_min']:+.1f} pp |"
            )
    for pair in record.get("paired", []):
        lo, hi = pair["ci95"]
        lines.append(
            f"\n{pair['arms']}, held-out after, paired over seeds {pair['seeds']}: {100 * pair['mean']:+.1f} pp "
            f"[{100 * lo:+.1f}, {100 * hi:+.1f}]"
        )
    return "\n".join(lines)


def device_name(sets: list[str]) -> str:
    """What the runs trained on: the GPU's name where a setting asks for it (``use_cpu=false``), else "cpu"."""
    if "use_cpu=false" not in sets:
        return "cpu"
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (use_cpu=false, no CUDA)"


def run(args) -> None:
    arms = [parse_arm(a) for a in args.arm] or [("default", [])]
    work = Path(args.work) / args.name
    jobs = [
        (arm, sets, seed) for seed in parse_seeds(args.seeds) for arm, sets in arms
    ]  # seed-major: pairs first
    todo = [j for j in jobs if _unfinished(work / f"{j[0]}-s{j[2]}", args.dev)]
    if args.dev:  # the base model's accuracy on the development split, once
        evaluate_dev("smollm2-135m", work / "base-dev", args.dev, args.threads)
    print(f"{len(jobs)} runs, {len(todo)} to train, {args.workers} at a time", flush=True)

    def train(job):
        arm, sets, seed = job
        folder = work / f"{arm}-s{seed}"
        if read_run(folder) is None:
            run_one(folder, seed, [*args.set, *sets], args.threads)
        if args.dev and (folder / "final").is_dir():
            evaluate_dev(str(folder / "final"), folder / "dev", args.dev, args.threads)
        record(args, arms, work)

    with ThreadPoolExecutor(args.workers) as pool:
        list(pool.map(train, todo))
    record(args, arms, work)
    summary(args)


def record(args, arms, work: Path) -> None:
    runs = []
    for seed in parse_seeds(args.seeds):
        for arm, sets in arms:
            found = read_run(work / f"{arm}-s{seed}")
            if found is not None:
                runs.append({"arm": arm, "seed": seed, "sets": [*args.set, *sets], **found})
    commit = _commit()
    from pacs_rl.sampling.transformers_backend import cpu_capability

    out = {
        "what": f"pacs-rl train over seeds: {args.name}",
        "command": "python benchmarks/train_seeds.py " + shlex.join(sys.argv[1:]),
        "date": date.today().isoformat(),
        "commit": commit,
        "cpu_capability": cpu_capability(),
        "device": device_name([*args.set, *(x for _, sets in arms for x in sets)]),
        "cores": os.cpu_count(),
        "workers": args.workers,
        "threads": args.threads,
        "dev": args.dev,
        "dev_before": dev_accuracy(work / "base-dev") if args.dev else None,
        "summary": summarize(runs, dev_accuracy(work / "base-dev") if args.dev else None) if runs else {},
        "runs": runs,
    }
    path = Path(args.out or REPO / "docs" / "benchmarks" / f"seeds_{args.name}.json")
    path.write_text(json.dumps(out, indent=1) + "\n")


def paired(runs: list[dict], a: str, b: str) -> dict:
    """Held-out accuracy after training, arm ``b`` minus arm ``a`` on the seeds both ran: mean, 95% interval."""
    after = {(r["arm"], r["seed"]): r["after"] for r in runs}
    seeds = sorted(seed for arm, seed in after if arm == a and (b, seed) in after)
    diffs = [after[b, seed] - after[a, seed] for seed in seeds]
    if not diffs:
        raise SystemExit(f"--pair {a}:{b}: no seed ran both arms")
    mean, lo, hi = interval(diffs)
    return {"arms": f"{b} - {a}", "seeds": seeds, "differences": [round(d, 4) for d in diffs],
            "mean": round(mean, 4), "ci95": [round(lo, 4), round(hi, 4)]}  # fmt: skip


def merge(args) -> None:
    """One record of several (the same arms and protocol, seeds run on different machines): every run keeps the
    device, commit and development-split base of its own record; the summary is computed over all of them."""
    records = [_json(Path(path)) for path in args.records]
    runs = []
    for path, rec in zip(args.records, records, strict=True):
        if not rec.get("runs"):
            raise SystemExit(f"{path}: no runs in this record (a train_seeds.py record with a 'runs' list?)")
        for run in rec["runs"]:
            runs.append({**run, "device": rec.get("device", "cpu"), "dev_before": rec.get("dev_before"),
                         "record_command": rec.get("command")})  # fmt: skip
    runs.sort(key=lambda r: (r["seed"], r["arm"]))
    out = {
        "what": f"pacs-rl train over seeds, merged from {len(records)} records",
        "commands": [rec.get("command") for rec in records],
        "merge_command": "python benchmarks/train_seeds.py " + shlex.join(sys.argv[1:]),
        "date": max(rec.get("date", "") for rec in records),
        "hosts": [
            {k: rec.get(k) for k in ("device", "cpu_capability", "cores", "workers", "threads", "commit")}
            for rec in records
        ],
        # the CPU level of the records trained on a CPU (a GPU record's host CPU is not what trained)
        "cpu_capability": " / ".join(
            dict.fromkeys(rec.get("cpu_capability") for rec in records if rec.get("device", "cpu") == "cpu")
        ),
        "dev": records[0].get("dev"),
        "summary": summarize(runs),
        "runs": runs,
    }
    for arm, figures in out["summary"].items():  # seconds are the device's: a median per device
        figures["train_seconds_median"] = {
            device: _median(
                [r.get("train_seconds") for r in runs if r["arm"] == arm and r["device"] == device]
            )
            for device in dict.fromkeys(r["device"] for r in runs if r["arm"] == arm)
        }
    out["paired"] = [paired(runs, *spec.split(":")) for spec in args.pair]
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(markdown(out))


def summary(args) -> None:
    path = Path(args.out or REPO / "docs" / "benchmarks" / f"seeds_{args.name}.json")
    rec = _json(path)
    if getattr(args, "markdown", False):
        print(markdown(rec))
        return
    print(json.dumps(rec.get("summary", {}), indent=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--name", required=True)
    r.add_argument("--seeds", default="0-9")
    r.add_argument("--arm", action="append", default=[], help="name:key=value,key=value (repeatable)")
    r.add_argument("--set", action="append", default=[], help="key=value for every arm")
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--work", default="runs/seeds")
    r.add_argument("--out", default=None)
    r.add_argument(
        "--dev", default=None, help="a development split: every run (and the base model) evaluated on it"
    )
    m = sub.add_parser("merge", help="one record of several: RECORD... --out FILE")
    m.add_argument("records", nargs="+")
    m.add_argument("--out", required=True)
    m.add_argument(
        "--pair", action="append", default=[], help="A:B, the paired difference B - A (repeatable)"
    )
    s = sub.add_parser("summary")
    s.add_argument("--name", required=True)
    s.add_argument("--out", default=None)
    s.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    {"run": run, "merge": merge, "summary": summary}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
