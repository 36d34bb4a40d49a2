"""Paired-seed records: PACS against its baselines, seed pair after seed pair, until the paired interval is narrow.

``pacs-rl compare --preset pacs-vs-grpo`` runs this engine. Every method trains the bundled
SmolLM2-135M-Instruct with the `pacs-rl train` CPU default (two-digit ± one-digit arithmetic, 16 sequences per
optimizer step, lr 2e-5 constant, T = 0.7, 96 tokens), run to 48 steps instead of 24, on the same seeds, the same
training problems in the same order and the same held-out set; the methods differ only in their loss and its
gradient clip (METHODS). Each run is evaluated greedy on the whole held-out split of the task at step 24 (its
checkpoint: the `pacs-rl train` default's budget) and at step 48, and, where the protocol has pass@k, with
unbiased pass@k at T = 0.6, top-p 0.95, n = 64 on the first PROTOCOL["passk"]["problems"] of those problems at
step 48 (the paper's exploration claim). The runs of one seed are paired; the record (one JSON file) holds every
run and, for each method, the paired difference PACS − method over the seeds both have, with its 95% interval
(Student t over seeds, :mod:`pacs_rl.compare.stats`) and the pairs a ±5 pp interval would need at that spread.

Stopped (Ctrl-C, end of session) and started again, it goes on: a run in the record is done, a run folder left
half-way resumes from its last checkpoint. Each run is its own process (``python -m pacs_rl.compare.paired
job``) with ``threads`` torch threads (default 1: two single-threaded runs use 2 cores better than one
two-threaded run, and a run at one thread repeats itself). Only the record is kept: run folders lose their
weights once evaluated.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import yaml
from filelock import Timeout

from pacs_rl.compare import stats
from pacs_rl.compare.lock import lock_of
from pacs_rl.compare.plan import CompareError
from pacs_rl.data import arithmetic_pool_size, arithmetic_problems
from pacs_rl.device import CPU_ONLY, cuda_info, with_device
from pacs_rl.evaluation.audit import audit
from pacs_rl.evaluation.runner import EvalConfig, build_sampler, run_eval
from pacs_rl.models import TINY_MODEL, resolve_model, tiny_model_folder
from pacs_rl.run_folder import FINISHED_FILE, HELDOUT_SEED
from pacs_rl.training.checks import split_settings
from pacs_rl.training.schema import default_settings

STARTED = (
    time.time()
)  # this module's import: in a run process, its start-up before the imports of torch and the rest
WHAT = "PACS against GRPO in miniature, powered: seed after seed of every method, added to one record."
RESULT_FILE = "result.json"
PRESET = "pacs-vs-grpo"  # the name `pacs-rl compare --preset` runs this engine under

# What every run shares, on top of `pacs-rl train`'s CPU default (training/schema.py: RunSettings, CPU_DEFAULTS).
# A record made with another protocol is refused (start a new record instead of mixing two).
PROTOCOL = {
    # version 2: trained and graded by the sound grader (version 1, pacs_vs_grpo_restatement_rule.json, was
    # trained on paper+restatement, which pays restated questions in other spellings: closed)
    "version": 2,
    # 48 steps, checkpoints every 24: the first 24 steps of a run are the `pacs-rl train` default's 24 (constant
    # lr), so one run measures both budgets; evaluated below, on the whole held-out split
    "train": {"eval_size": 0, "plot": False, "max_steps": 48, "save_steps": 24, "save_total_limit": 2},
    "greedy_at": [24],  # earlier checkpoints evaluated greedy too (the final model is the `greedy` figure)
    "heldout": {"ops": "+-", "digits": "2,1", "split": "test"},  # all of it, in the order of HELDOUT_SEED
    "greedy": {"temperature": 0.0, "max_new_tokens": 96},
    "passk": {"problems": 32, "n": 64, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 96},
    "grader": "sound",  # the training grader (`pacs-rl train`'s default), for the evaluations too
}
KS = [1, 2, 4, 8, 16, 32, 64]

# name -> (config overrides, what it is). The PACS authors' PACS actor never clips the gradient; their GRPO ran
# on stock verl: clip 1.0, token losses summed and divided by the response budget, dual clip 3.
METHODS: dict[str, tuple[dict, str]] = {
    "pacs": ({"loss_type": "pacs", "max_grad_norm": None}, "PACS as the authors ran it: no gradient clip"),
    "grpo": (
        {
            "loss_type": "grpo",
            "max_grad_norm": 1.0,
            "loss_options": {"loss_agg_mode": "seq-mean-token-sum-norm", "clip_ratio_c": 3.0},
        },
        "GRPO as the PACS authors ran it (verl): clip 1.0, seq-mean-token-sum-norm, dual clip 3",
    ),
    "pacs_clip": ({"loss_type": "pacs", "max_grad_norm": 1.0}, "PACS with gradient clip 1.0"),
    "grpo_trl": (
        {"loss_type": "grpo", "max_grad_norm": 1.0, "loss_options": {"loss_agg_mode": "token-mean"}},
        "GRPO as TRL 1.16 runs it by default: clip 1.0, token-level mean (its 'dapo' aggregation), ε = 0.2",
    ),
    "pacs_no_weight": (
        {"loss_type": "pacs", "max_grad_norm": None, "pacs_weighted": False},
        "PACS without the class-imbalance weight (no clip)",
    ),
}
PRIMARY = "grpo"  # the stopping rule is on PACS − this method
TARGET = 0.05  # half-width of the 95% interval, in accuracy (5 percentage points)


@dataclasses.dataclass
class Options:
    """How :func:`run` adds to a record: where it and the run folders are, how many runs at once with how many
    threads each, when to stop (hours, the target half-width of PACS − PRIMARY, a number of complete seeds), from
    which seed on only PACS and PRIMARY run (``full_seeds``), from which seed new seeds start (``first_seed``: a
    second machine adding to a copy of the record takes seeds the first will not reach, and its runs are merged back
    with :func:`merge_records`), and the protocol of a new record (methods, train
    overrides, pass@k)."""

    record: Path
    work: Path
    workers: int = 2
    threads: int = 1
    hours: float = 8.0
    target: float = TARGET
    max_seeds: int | None = None
    full_seeds: int | None = None
    first_seed: int = 0
    methods: list[str] | None = None
    overrides: dict | None = None
    no_passk: bool = False
    passk_every: int | None = None


# ----------------------------------------------------------------------------------------------- statistics
def paired_interval(diffs: list[float], target: float | None = TARGET) -> dict:
    """pacs_rl.compare.stats.paired_interval with this record's target half-width."""
    return stats.paired_interval(diffs, target)


# ----------------------------------------------------------------------------------------------- the record
def parse_method(spec: str) -> dict:
    """The config overrides of a method: a name of METHODS, or a variant ``name[key=value,...]`` of one
    (``pacs[reference=frozen,ref_reset_steps=8]``; values read as YAML)."""
    name, _, rest = spec.partition("[")
    if name not in METHODS or (rest and not rest.endswith("]")):
        raise CompareError(
            f"--methods {spec!r}: give one of {', '.join(METHODS)}, or a variant like pacs[pacs_beta=0.5]"
        )
    overrides = dict(METHODS[name][0])
    for item in filter(None, rest[:-1].split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise CompareError(f"--methods {spec!r}: {item!r} is not key=value")
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


def protocol(
    overrides: dict | None = None,
    methods: list[str] | None = None,
    passk: bool = True,
    passk_every: int | None = None,
    passk_from: int = 0,
) -> dict:
    """What every run of a record shares: PROTOCOL, ``overrides`` (--set) in its train part, the methods with
    their config overrides, and the ks (none when pass@k is off). With ``passk_every`` E, pass@k is evaluated on
    the seeds ``passk_from``, ``passk_from`` + E, ... only (and on the base model): a pair in E pays for it."""
    out = {**PROTOCOL, "train": {**PROTOCOL["train"], **(overrides or {})}}
    out["methods"] = {m: parse_method(m) for m in (methods or list(METHODS))}
    if not passk:
        out["passk"] = None
    out["ks"] = KS if passk else []
    if passk and passk_every:
        out["passk_seeds"] = {"from": passk_from, "every": passk_every}
    return out


def passk_due(proto: dict, seed: int | None) -> bool:
    """Whether the run of ``seed`` (None: the base model) is evaluated with pass@k under ``proto``."""
    if proto.get("passk") is None:
        return False
    rule = proto.get("passk_seeds")
    return (
        seed is None or rule is None or (seed >= rule["from"] and (seed - rule["from"]) % rule["every"] == 0)
    )


def new_record(
    overrides: dict | None = None,
    methods: list[str] | None = None,
    passk=True,
    passk_every: int | None = None,
) -> dict:
    """An empty record of this protocol."""
    proto = protocol(overrides, methods, passk, passk_every)
    return {"what": WHAT, "protocol": proto, "runs": [], "base": None}


def load_record(
    path: Path,
    overrides: dict | None = None,
    methods: list[str] | None = None,
    passk=True,
    passk_every: int | None = None,
    started: tuple[int, ...] = (),
) -> dict:
    """The record at ``path`` (a new one if absent). An existing record continues with its own methods when
    ``methods`` is None; another protocol is refused, except one step: a record without pass@k takes it on
    (``passk_every``) from the first seed that neither it nor a started run (``started``) has, its training
    unchanged, and says so in its ``protocol_changes``."""
    if not path.is_file():
        return new_record(overrides, methods, passk, passk_every)
    record = json.loads(path.read_text())
    methods = methods or list(record.get("protocol", {}).get("methods", {}))
    have = record.get("protocol", {})
    start = (have.get("passk_seeds") or {}).get("from", 0)
    if have == protocol(overrides, methods, passk, passk_every, start):
        return record
    if passk and passk_every and have == protocol(overrides, methods, passk=False):
        start = 1 + max([*(r["seed"] for r in record["runs"]), *started], default=-1)
        record["protocol"] = protocol(overrides, methods, passk, passk_every, start)
        change = f"pass@k added (n = {PROTOCOL['passk']['n']}) on seeds {start}, {start + passk_every}, ... and the base"
        record.setdefault("protocol_changes", []).append({"date": time.strftime("%Y-%m-%d"), "what": change})
        return record
    raise CompareError(
        f"{path} was recorded with another protocol (see its 'protocol'); pass --record with a new file to "
        "start another record, or the same --methods/--max-steps/--n/--passk-every as it was made with to continue."
    )


def save_record(path: Path, record: dict) -> None:
    record["summary"] = summarize(record)
    record["cost"] = cost(record)
    hosts = [r.get("host", {}) for r in [*record["runs"], record.get("base") or {}]]
    levels = sorted({h["cpu_capability"] for h in hosts if h.get("cpu_capability")})
    record["cpu_capability"] = "; ".join(levels) or None  # where its runs ran (each run says its own)
    record["date"] = max((h["date"] for h in hosts if h.get("date")), default=None)  # the latest run's
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(path)


def tail_mean(values: list, last: int | None = None) -> float | None:
    """Mean of the logged (finite) values of a per-step curve, or of its ``last`` logged ones; None if none."""
    logged = [v for v in values if v is not None and math.isfinite(v)]
    logged = logged[-last:] if last else logged
    return sum(logged) / len(logged) if logged else None


def metric_readers(record: dict) -> dict:
    """name -> how to read it from a run's result (accuracies in [0, 1], then the dynamics)."""
    readers = {"greedy_accuracy": lambda r: r["greedy"]["accuracy"]}
    at = record["protocol"].get("greedy_at", [])
    readers.update(  # None where a run stops before that step (a record with --set max_steps=24)
        {
            f"greedy_accuracy@{s}": (lambda r, s=s: r.get("greedy_at", {}).get(str(s), {}).get("accuracy"))
            for s in at
        }
    )
    readers.update(
        {  # None where the run was not evaluated with pass@k (passk_seeds)
            f"pass@{k}": (lambda r, k=k: (r.get("passk") or {}).get("pass_at_k", {}).get(str(k)))
            for k in record["protocol"]["ks"]
        }
    )
    readers.update(
        {
            "entropy_last": lambda r: tail_mean(r["dynamics"]["curves"]["entropy"], 3),
            "length_last": lambda r: tail_mean(r["dynamics"]["curves"]["length"], 3),
            "greedy_length": lambda r: r["greedy"]["mean_length"],
            # reference = the rollout policy: ψ ≡ 0 on a rollout's first mini-batch (odd steps), so only the
            # second mini-batch's AUC can differ from chance
            "critic_auc_second_minibatch": lambda r: tail_mean(
                r["dynamics"]["curves"].get("critic_auc", [])[1::2]
            ),
        }
    )
    return readers


def summarize(record: dict) -> dict:
    """Per method: the mean over its runs and, when the record has PACS, the paired difference PACS − method on
    the seeds both have. A metric a run lacks (no mixed group, no PACS critic) is left out of that mean."""
    runs = {(r["method"], r["seed"]): r for r in record["runs"]}
    readers = metric_readers(record)

    def read(name, method, seed):
        value = readers[name](runs[method, seed])
        return value if value is not None and math.isfinite(value) else None

    out = {}
    for method in record["protocol"]["methods"]:
        seeds = sorted(s for m, s in runs if m == method)
        if not seeds:
            continue
        entry: dict = {"seeds": seeds, "mean": {}, "sd": {}}
        for name in readers:
            values = [v for s in seeds if (v := read(name, method, s)) is not None]
            entry["mean"][name] = sum(values) / len(values) if values else None
            entry["sd"][name] = (  # the spread of one run's outcome over seeds
                math.sqrt(sum((v - entry["mean"][name]) ** 2 for v in values) / (len(values) - 1))
                if len(values) > 1
                else None
            )
        if method != "pacs" and "pacs" in record["protocol"]["methods"]:
            entry["pacs_minus_this"] = {}
            for name in readers:
                pairs = [(read(name, "pacs", s), read(name, method, s)) for s in seeds if ("pacs", s) in runs]
                diffs = [a - b for a, b in pairs if a is not None and b is not None]
                accuracy = name.startswith(("greedy_accuracy", "pass@"))  # the ±5 pp target is for these
                entry["pacs_minus_this"][name] = paired_interval(diffs, TARGET if accuracy else None)
        out[method] = entry
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def cost(record: dict, methods: tuple[str, ...] = ("pacs", PRIMARY)) -> dict:
    """Where a run's time went, per method (medians over its runs, seconds at the record's threads): training (the
    steps' own times, whatever stops and resumes the run had) and evaluation with start-up (the run process's wall
    time less its training, from runs trained in one go only: a resumed run's wall time leaves out the training
    before the stop), apart for runs evaluated greedy only and with pass@k; and a pair of ``methods`` of each
    kind, the sum of their medians."""
    out: dict = {"per_method": {}, "pair": {}}
    for method in record["protocol"]["methods"]:
        runs = [
            r
            for r in record["runs"]
            if r["method"] == method and r["dynamics"].get("train_seconds") is not None
        ]
        if not runs:
            continue
        whole = [
            r for r in runs if r.get("host", {}).get("wall_seconds", 0) >= r["dynamics"]["train_seconds"]
        ]
        entry = {
            "runs": len(runs),
            "train_seconds_median": _median([r["dynamics"]["train_seconds"] for r in runs]),
        }
        for kind, has_passk in (("greedy", False), ("passk", True)):
            evaluation = [r["host"]["wall_seconds"] - r["dynamics"]["train_seconds"] for r in whole
                          if bool(r.get("passk")) == has_passk]  # fmt: skip
            entry[f"eval_{kind}_seconds_median"] = _median(evaluation)
            entry[f"eval_{kind}_runs"] = len(evaluation)
        entry.update(_phases(whole))  # a resumed run may have evaluated in part before its stop
        out["per_method"][method] = entry
    parts = [out["per_method"].get(m) for m in methods]
    for kind in ("greedy", "passk"):
        key = f"eval_{kind}_seconds_median"
        if all(p and p[key] is not None for p in parts):
            out["pair"][kind] = {
                "seconds": round(sum(p["train_seconds_median"] + p[key] for p in parts)),
                "eval_seconds": round(sum(p[key] for p in parts)),
            }
    return out


def _phases(runs: list[dict]) -> dict:
    """Medians of where a run's evaluation time went, from the runs (run in one go) that timed it (since
    2026-11-26): the greedy evaluations (every step evaluated, loading the model included), pass@k (runs that have
    it), the process's imports."""
    greedy = [r["greedy"]["seconds"] + sum(g.get("seconds", 0) for g in r.get("greedy_at", {}).values())
              for r in runs if "seconds" in r["greedy"]]  # fmt: skip
    passk = [r["passk"]["seconds"] for r in runs if "seconds" in (r.get("passk") or {})]
    imports = [r["host"]["import_seconds"] for r in runs if "import_seconds" in r.get("host", {})]
    found = {"greedy_eval_seconds_median": _median(greedy), "passk_seconds_median": _median(passk),
             "import_seconds_median": _median(imports)}  # fmt: skip
    return {k: v for k, v in found.items() if v is not None}


def cost_line(record: dict) -> str:
    """The cost per pair of PACS and PRIMARY, each kind of evaluation the record has, in one line."""
    c = cost(record)
    if not c["pair"]:
        return "cost per pair: not enough runs trained in one go"
    train = " + ".join(f"{m} {c['per_method'][m]['train_seconds_median']:.0f} s" for m in ("pacs", PRIMARY))
    kinds = {"greedy": "greedy only", "passk": "with pass@k"}
    pairs = "; ".join(
        f"{kinds[k]}: {v['seconds']} s, {v['eval_seconds']} s of it evaluation and start-up"
        for k, v in c["pair"].items()
    )
    line = f"cost per pair (medians, one thread each; training {train}): {pairs}"
    names = {
        "greedy_eval_seconds_median": "greedy",
        "passk_seconds_median": "pass@k",
        "import_seconds_median": "imports",
    }
    parts = []
    for m in ("pacs", PRIMARY):
        timed = [f"{names[k]} {v:.0f} s" for k, v in c["per_method"][m].items() if k in names]
        if timed:
            parts.append(f"{m} " + ", ".join(timed))
    return line + (f"; a run's evaluation: {'; '.join(parts)}" if parts else "")


def merge_records(into: dict, other: dict, name: str = "the other record") -> tuple[list, list]:
    """Add to ``into`` the runs of ``other`` (a copy of it that another machine added to, with --first-seed) that it
    lacks, and its base model's evaluation if ``into`` has none. A run whose seed would still lack half of the pair
    PACS/PRIMARY stays out: its partner would be trained later on another machine, and a pair is trained on one.
    Returns the (method, seed) added and those left out, in seed order. Refused (CompareError, ``into``
    untouched): another protocol, or a run both hold with different results."""
    if other.get("protocol") != into.get("protocol"):
        raise CompareError(
            f"{name} was recorded with another protocol than the record it would join (see each one's 'protocol'): "
            "only runs of one protocol are pooled"
        )
    have = {(r["method"], r["seed"]): r for r in into["runs"]}
    new = []
    for run in other["runs"]:
        key = (run["method"], run["seed"])
        if key not in have:
            new.append(run)
        elif have[key] != run:
            raise CompareError(
                f"{name} holds {run['method']} seed {run['seed']} with other results than the record has: two runs "
                "of one seed (give the second machine a --first-seed the first will not reach)"
            )
    pair = [m for m in into["protocol"]["methods"] if m in ("pacs", PRIMARY)]
    merged = set(have) | {(r["method"], r["seed"]) for r in new}
    new.sort(key=lambda r: (r["seed"], r["method"]))
    added, left = [], []
    for run in new:
        whole = all((m, run["seed"]) in merged for m in pair)
        if whole:
            into["runs"].append(run)
        (added if whole else left).append((run["method"], run["seed"]))
    if into.get("base") is None and other.get("base") is not None:
        into["base"] = other["base"]
    return added, left


def complete_seeds(record: dict, methods: list[str]) -> list[int]:
    have = {(r["method"], r["seed"]) for r in record["runs"]}
    seeds = sorted({s for _, s in have})
    return [s for s in seeds if all((m, s) in have for m in methods)]


def target_reached(record: dict, target: float = TARGET) -> bool:
    gap = summarize(record).get(PRIMARY, {}).get("pacs_minus_this", {}).get("greedy_accuracy", {})
    return gap.get("pairs", 0) >= 3 and gap.get("half_width", 1.0) <= target


# ----------------------------------------------------------------------------------------------- one run
def heldout_problems():
    h = PROTOCOL["heldout"]
    n = arithmetic_pool_size(ops=h["ops"], digits=h["digits"], split=h["split"])
    return arithmetic_problems(n, seed=HELDOUT_SEED, ops=h["ops"], digits=h["digits"], split=h["split"])


def evaluate(model: str, out: Path, threads: int, passk: bool = True, device: str = "cpu") -> dict:
    """Greedy accuracy on the whole held-out split and pass@k on its first problems (resumable), in fp32 on
    ``device``."""
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


def dynamics(metrics_file: Path) -> dict:
    """Per-step curves and first/last summaries from a run's metrics.jsonl (a line cut mid-write is skipped, as
    everywhere the file is read)."""
    from pacs_rl.training.output import read_metrics

    rows = [r for r in read_metrics(metrics_file) if "step" in r and "loss" in r]
    curves = {}
    for key, name in (
        ("reward", "reward"),
        ("entropy", "entropy"),
        ("completions/mean_length", "length"),
        ("groups/mixed_frac", "mixed_groups"),
        ("grad_norm", "grad_norm"),
        ("pacs/critic_auc", "critic_auc"),
    ):
        curves[name] = [None if r.get(key) is None else round(float(r[key]), 5) for r in rows]

    logged = {k: [v for v in c if v is not None] for k, c in curves.items()}
    return {
        "steps": len(rows),
        "entropy_first_3": tail_mean(logged["entropy"][:3]),
        "entropy_last_3": tail_mean(logged["entropy"], 3),
        "length_first_3": tail_mean(logged["length"][:3]),  # logged at rollout steps only
        "length_last_3": tail_mean(logged["length"], 3),
        "reward_last_3": tail_mean(logged["reward"], 3),
        "critic_auc_second_minibatch": tail_mean(curves["critic_auc"][1::2]),
        # the steps' own times, summed: the training time whatever stops and resumes the run had
        "train_seconds": round(sum(float(r.get("step_time") or 0.0) for r in rows)),
        "curves": curves,
    }


def run_values(proto: dict, method: str, seed: int) -> tuple[dict, object]:
    """(the flat settings of one run of ``proto``, the device choice): `pacs-rl train`'s CPU default under the
    protocol, the method and the seed, on the device the machine offers (pacs_rl.device), in fp32 and with
    the CPU default's sampler and update pieces wherever it trains, so that a run on a GPU differs from one on a
    CPU only in its kernels. On a CPU these are the CPU default's own settings (fp32 whatever the CPU: the record
    began before the CPU default could choose bf16)."""
    defaults = default_settings()
    pinned = {k: defaults[k] for k in CPU_ONLY}  # kept on CUDA too: the same sampler on every device
    return with_device(
        {**pinned, "bf16": False, **proto["train"], **proto["methods"][method], "seed": seed}, defaults
    )


def job(method: str | None, seed: int | None, work: Path, threads: int, proto: dict) -> None:
    """Train (or resume) one run of ``proto`` (a record's protocol) and evaluate it; ``method`` None evaluates
    the base model."""
    import torch

    from pacs_rl.sampling.transformers_backend import cpu_capability  # torch
    from pacs_rl.training.run import build_config, run_training  # torch, TRL

    warnings.filterwarnings("ignore", category=DeprecationWarning)  # sympy's, once per graded answer
    torch.set_num_threads(threads)
    imports = round(time.time() - STARTED)  # the run process's imports (torch, transformers, TRL)
    train, passk = proto["train"], passk_due(proto, seed)
    cuda = cuda_info()
    device = "cuda" if cuda.available else "cpu"  # the base model's evaluation; a run's is its training's
    host = {
        "cpu_capability": cpu_capability(),
        "device": cuda.name if cuda.available else "cpu",  # runs on another device are marked so
        "threads": threads,
        "import_seconds": imports,
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%d"),
    }
    if method is None:
        _evaluate_base(train, work / "base", threads, passk, device, host)
        return
    folder = work / slug(method) / f"seed{seed}"
    t0 = time.time()
    values, choice = run_values(proto, method, seed)
    device = choice.device
    host["device"] = cuda.name if device == "cuda" else "cpu"
    if not (folder / FINISHED_FILE).is_file():
        settings, cfg = split_settings(values)
        run_training(settings, build_config(cfg, folder), resume=any(folder.glob("checkpoint-*")))
    result = {
        "method": method,
        "seed": seed,
        **evaluate(str(folder / "final"), folder / "eval", threads, passk, device),
    }
    result["greedy_at"] = greedy_at_checkpoints(proto, folder, threads, device)
    result["dynamics"] = dynamics(folder / "metrics.jsonl")
    # wall: this process's training (if any) and evaluation; the training's own time is in the dynamics
    result["host"] = {**host, "wall_seconds": round(time.time() - t0)}
    (folder / RESULT_FILE).write_text(json.dumps(result, indent=1))
    for checkpoint in folder.glob("checkpoint-*"):  # ~1.6 GB each; the record keeps what matters
        shutil.rmtree(checkpoint, ignore_errors=True)
    for weights in (folder / "final").glob("*.safetensors"):
        weights.unlink()


def _evaluate_base(train: dict, folder: Path, threads: int, passk: bool, device: str, host: dict) -> None:
    """The base model's run: its evaluation, into ``folder``/result.json."""
    model = train.get("model", default_settings()["model"])
    model = str(tiny_model_folder(folder / "model")) if model == TINY_MODEL else resolve_model(model)
    result = {"method": "base", **evaluate(model, folder / "eval", threads, passk, device)}
    (folder / RESULT_FILE).write_text(json.dumps({**result, "host": host}, indent=1))


def greedy_at_checkpoints(proto: dict, folder: Path, threads: int, device: str) -> dict:
    """The greedy evaluation of each of the protocol's earlier checkpoints (``greedy_at``) of the run in
    ``folder``, by step."""
    out = {}
    for step in proto["greedy_at"]:
        if step >= proto["train"]["max_steps"]:
            continue
        checkpoint = folder / f"checkpoint-{step}"
        if not (checkpoint / "config.json").is_file():
            raise SystemExit(f"{checkpoint} is missing: greedy_at {step} needs save_steps to divide it")
        out[str(step)] = evaluate(
            str(checkpoint), folder / f"eval-{step}", threads, passk=False, device=device
        )["greedy"]
    return out


def regrade(work: Path) -> dict:
    """Every evaluation's samples under ``work`` (the run folders) scored again with the protocol's grader by
    ``pacs-rl audit``'s code (pacs_rl.evaluation.audit): the share right as recorded and now, and pass@k now. For a
    record whose grader has since been fixed; `pacs-rl audit <work>` prints the same with examples of each change."""
    folders = sorted(p.parent for p in work.glob("*/seed*/eval*/*/samples.jsonl"))
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


def slug(method: str) -> str:
    """A folder name for a method or variant: pacs[reference=frozen] -> pacs__reference=frozen."""
    return method.replace("[", "__").replace("]", "").replace(",", "__")


# a run process works offline (the bundled model, the built-in task) and quietly
JOB_ENV = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false"}


def _commit() -> str:
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


# ----------------------------------------------------------------------------------------------- the driver
def finished_result(folder: Path, proto: dict, seed: int | None) -> dict | None:
    """The result a run folder holds, if it is all ``proto`` asks of that run: one evaluated before the record
    took on pass@k is not, for a seed (or the base model) that pass@k is due on."""
    path = folder / RESULT_FILE
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    return None if passk_due(proto, seed) and not result.get("passk") else result


# a run's two checkpoints (~1.6 GB each for the bundled model's weights and Adam moments) and its evaluations, with
# room to spare: below it no run starts (a full disk once stopped every run on the machine)
MIN_FREE_GIB = 5.0
# GPU memory one run process takes: 4.7-5.2 GiB each was measured (nvidia-smi, the CUDA context included) with 16
# runs of this protocol sharing one H100, where the 16th overflowed its 79 GiB; the rest is room to spare.
GPU_RUN_GIB = 6.0


def disk_free_gib(path: Path) -> float:
    """Free space on the disk that holds ``path`` (or its nearest existing parent), in GiB."""
    path = Path(path).resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free / 1024**3


def gpu_slots(workers: int, cuda) -> tuple[int, str | None]:
    """How many of ``workers`` runs fit at once on the GPU ``cuda`` (a :class:`pacs_rl.device.CudaInfo`), at
    ``GPU_RUN_GIB`` each, and a line saying so where that is fewer; all of them on a CPU."""
    if not cuda.available or not cuda.memory_gib:
        return workers, None
    fit = max(1, int(cuda.memory_gib // GPU_RUN_GIB))
    if workers <= fit:
        return workers, None
    return fit, (
        f"--workers {workers}: {workers} runs at about {GPU_RUN_GIB:g} GiB each need {workers * GPU_RUN_GIB:g} GiB of "
        f"the GPU ({cuda.name or 'device 0'}: {cuda.memory_gib:.1f} GiB), so {fit} run at a time"
    )


def started_seeds(work: Path) -> tuple[int, ...]:
    """The seeds with a run folder under ``work`` (finished or not)."""
    return tuple(int(p.name[4:]) for p in work.glob("*/seed*") if p.is_dir() and p.name[4:].isdigit())


def other_jobs(record: dict, methods: list[str]) -> list[tuple[str, int]]:
    """Once PACS − PRIMARY has its interval: the record's other methods on the seeds that hold that pair, seed by
    seed, what the record does not have yet."""
    have = {(r["method"], r["seed"]) for r in record["runs"]}
    paired_seeds = complete_seeds(record, ["pacs", PRIMARY])
    others = [m for m in methods if m not in ("pacs", PRIMARY)]
    return [(m, s) for s in paired_seeds for m in others if (m, s) not in have]


def next_jobs(record: dict, methods: list[str], full_seeds: int | None = None, first_seed: int = 0):
    """(method, seed) in order: the base model, then seed after seed from ``first_seed``, every method of a seed
    together. From seed ``full_seeds`` on, only PACS and PRIMARY (the pair the stopping rule is on) when the record
    has both."""
    have = {(r["method"], r["seed"]) for r in record["runs"]}
    base = record.get("base")
    if base is None or (
        record.get("protocol", {}).get("passk") and "passk" not in base
    ):  # pass@k taken on later
        yield None, None
    pair = [m for m in methods if m in ("pacs", PRIMARY)]
    seed = first_seed
    while True:
        later = full_seeds is not None and seed >= full_seeds and len(pair) == 2
        for method in pair if later else methods:
            if (method, seed) not in have:
                yield method, seed
        seed += 1


def run(args: Options) -> None:
    """Add runs to the record ``args.record`` until its stopping rule (:class:`Options`), ``args.workers`` at a
    time, each a process of its own; prints a line per finished run and the summary at the end."""
    lock = lock_of(args.work / args.record.name)  # in the run folders: the record may sit among the docs
    try:
        lock.acquire()
    except Timeout:
        raise CompareError(
            f"{args.record} is being added to by another process (it holds {lock.lock_file}); let it finish or stop it"
        ) from None
    try:
        _run(args)
    finally:
        lock.release()


def _run(args: Options) -> None:
    record = load_record(args.record, args.overrides, args.methods, not args.no_passk, args.passk_every,
                         started_seeds(args.work))  # fmt: skip
    if args.record.is_file():
        save_record(args.record, record)  # a protocol change (pass@k taken on) holds from now, whatever stops
    args.work.mkdir(parents=True, exist_ok=True)
    workers, note = gpu_slots(args.workers, cuda_info())
    if note:
        print(note, flush=True)
        args = dataclasses.replace(args, workers=workers)
    driver = _Driver(args, record)
    signal.signal(signal.SIGTERM, driver.stop_children)
    try:
        driver.loop()
    except KeyboardInterrupt:
        driver.stop_children()
    print(summary_text(record))
    print(cost_line(record))


class _Driver:
    """The loop of :func:`run`: runs in processes of their own, ``args.workers`` at a time, each result into the
    record as it lands, one retry of a failed run (it resumes from its checkpoint)."""

    def __init__(self, args: Options, record: dict):
        self.args, self.record = args, record
        self.methods = list(record["protocol"]["methods"])
        self.deadline = time.time() + args.hours * 3600
        self.jobs = next_jobs(record, self.methods, args.full_seeds, args.first_seed)
        self.running: dict[subprocess.Popen, tuple] = {}
        self.failures: dict[tuple, int] = {}
        self.pending: list[tuple] = []
        self.warned = False
        self.answered = False  # PACS - PRIMARY reached the target: the other methods run

    def folder_of(self, method, seed) -> Path:
        return self.args.work / ("base" if method is None else f"{slug(method)}/seed{seed}")

    def collect(self, method, seed, result) -> None:
        if method is None:
            self.record["base"] = result
        else:
            self.record["runs"].append(result)
        save_record(self.args.record, self.record)
        print(_line(self.record, method, seed, result), flush=True)

    def stop_children(self, *_) -> None:
        for proc in self.running:
            proc.terminate()
        raise SystemExit(130)

    def reap(self) -> None:
        """Record the runs that finished; queue a failed one again, once."""
        for proc in [p for p in self.running if p.poll() is not None]:
            method, seed = self.running.pop(proc)
            folder = self.folder_of(method, seed)
            if proc.returncode == 0 and (folder / RESULT_FILE).is_file():
                self.collect(method, seed, json.loads((folder / RESULT_FILE).read_text()))
                continue
            self.failures[method, seed] = self.failures.get((method, seed), 0) + 1
            print(f"FAILED {method} seed {seed} (exit {proc.returncode}; log {folder}.log)", flush=True)
            if self.failures[method, seed] < 2:
                self.pending.append((method, seed))

    def stopping(self) -> bool:
        """The time is up, or the seeds asked for are complete (with --full-seeds, a seed counts once PACS and
        PRIMARY have it), or the target is reached and the record's other methods have run on the seeds of the
        pairs (from then on the jobs are those: the primary pair first, the other methods once it is answered)."""
        args = self.args
        pair = [m for m in self.methods if m in ("pacs", PRIMARY)]
        counted = pair if args.full_seeds is not None and len(pair) == 2 else self.methods
        done = len(complete_seeds(self.record, counted))
        if time.time() > self.deadline or (args.max_seeds is not None and done >= args.max_seeds):
            return True
        if not target_reached(self.record, args.target):
            return False
        if not self.answered:
            self.answered = True
            self.jobs = iter(other_jobs(self.record, self.methods))
            print(
                f"PACS - {PRIMARY} is within ±{100 * args.target:g} pp: the other methods on its seeds now",
                flush=True,
            )
        return not other_jobs(self.record, self.methods) and not self.pending

    def seeds_full(self, seed: int) -> bool:
        """Whether starting ``seed`` would make more seeds (recorded, running or queued) than --max-pairs."""
        if self.args.max_seeds is None:
            return False
        seeds = {r["seed"] for r in self.record["runs"]} | {
            s for _, s in [*self.running.values(), *self.pending]
        }
        return seed not in seeds and len(seeds - {None}) >= self.args.max_seeds

    def disk_short(self) -> bool:
        free = disk_free_gib(self.args.work)
        if free < MIN_FREE_GIB and not self.warned:
            print(f"no new run: {free:.1f} GiB free under {self.args.work}, a run needs about {MIN_FREE_GIB:g} (its "
                  "two checkpoints, then its evaluations); free space and start again", flush=True)  # fmt: skip
            self.warned = True
        return free < MIN_FREE_GIB

    def start(self, method, seed) -> None:
        args, folder = self.args, self.folder_of(method, seed)
        folder.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pacs_rl.compare.paired", "job", "--work", str(args.work),
               "--threads", str(args.threads), "--protocol", json.dumps(self.record["protocol"])]  # fmt: skip
        cmd += [] if method is None else ["--method", method, "--seed", str(seed)]
        env = {
            **JOB_ENV,
            **os.environ,
            "OMP_NUM_THREADS": str(args.threads),
            "MKL_NUM_THREADS": str(args.threads),
        }
        log = open(f"{folder}.log", "a")  # noqa: SIM115 (closed with the process)
        self.running[subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)] = (method, seed)
        print(f"started {method or 'base'} seed {seed}", flush=True)

    def loop(self) -> None:
        args = self.args
        while True:
            self.reap()
            stop = self.stopping() or self.disk_short()
            while not stop and len(self.running) < args.workers:
                method, seed = self.pending.pop(0) if self.pending else next(self.jobs, (False, None))
                if method is False:  # the other methods' jobs are all out
                    break
                if seed is not None and self.seeds_full(seed):
                    break
                done = finished_result(self.folder_of(method, seed), self.record["protocol"], seed)
                if done is not None:  # finished before the driver could record it (a crash)
                    self.collect(method, seed, done)
                    continue
                self.start(method, seed)
            if not self.running:
                return
            time.sleep(5)


def _fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _line(record: dict, method, seed, result) -> str:
    pass64 = (result.get("passk") or {}).get("pass_at_k", {}).get("64")
    if method is None:
        return f"base: greedy {result['greedy']['accuracy']:.3f}, pass@64 {_fmt(pass64)}"
    gap = summarize(record).get(PRIMARY, {}).get("pacs_minus_this", {}).get("greedy_accuracy", {})
    text = (
        f"{method} seed {seed}: greedy {result['greedy']['accuracy']:.3f}, pass@64 {_fmt(pass64)}, "
        f"{result['host']['wall_seconds']} s"
    )
    if gap.get("half_width") is not None:
        text += f" | PACS - {PRIMARY}: {gap['mean']:+.3f} ± {gap['half_width']:.3f} ({gap['pairs']} pairs)"
    return text


def summary_text(record: dict) -> str:
    """The record as a plain table: per method its seeds, mean greedy accuracy and pass@1/64, and PACS − method
    (greedy) with its 95% interval and the pairs ±5 pp would need."""
    lines = [
        f"{'method':40} {'seeds':>5} {'greedy':>7} {'pass@1':>7} {'pass@64':>8}   PACS − method (greedy), 95% CI"
    ]
    for method, entry in summarize(record).items():
        m = entry["mean"]
        gap = entry.get("pacs_minus_this", {}).get("greedy_accuracy", {})
        ci = (
            f"{gap['mean']:+.3f} [{gap['ci95'][0]:+.3f}, {gap['ci95'][1]:+.3f}], {gap['pairs']} pairs, "
            f"±5 pp needs {gap['pairs_needed']}"
            if gap.get("ci95")
            else ""
        )
        lines.append(
            f"{method:40} {len(entry['seeds']):>5} {_fmt(m['greedy_accuracy']):>7} {_fmt(m.get('pass@1')):>7} "
            f"{_fmt(m.get('pass@64')):>8}   {ci}"
        )
    return "\n".join(lines)


def markdown_tables(record: dict) -> str:
    """The record as two markdown tables: each method's mean (and per-run SD over seeds), and PACS − method paired
    by seed with its 95% interval and the pairs a ±5 pp interval would need. Accuracies in percent."""
    summary = summarize(record)
    at = [f"greedy_accuracy@{s}" for s in record["protocol"].get("greedy_at", [])]
    ks = [k for k in (1, 8, 64) if k in record["protocol"]["ks"]]
    cols = [*at, "greedy_accuracy", *[f"pass@{k}" for k in ks]]
    steps = record["protocol"]["train"].get("max_steps", 24)
    names = {**{c: f"greedy @{c.rsplit('@', 1)[1]}" for c in at}, "greedy_accuracy": f"greedy @{steps}"}
    head = [names.get(c, c) for c in cols]

    def pct(x):
        return "–" if x is None else f"{round(100 * x, 1) + 0.0:.1f}"  # + 0.0: no "-0.0"

    lines = ["| method | seeds | " + " | ".join(f"{h} (SD)" for h in head) + " | entropy, length (last) |",
             "|---|---:|" + "---:|" * len(cols) + "---|"]  # fmt: skip
    for method, e in summary.items():
        cells = [f"{pct(e['mean'][c])} ({pct(e['sd'][c])})" for c in cols]
        dyn = f"{e['mean']['entropy_last'] or 0:.2f}, {e['mean']['length_last'] or 0:.0f}"
        lines.append(f"| {method} | {len(e['seeds'])} | " + " | ".join(cells) + f" | {dyn} |")
    lines += ["", "| PACS − method | pairs | " + " | ".join(head) + " | ±5 pp needs |",
              "|---|---:|" + "---:|" * len(cols) + "---:|"]  # fmt: skip
    for method, e in summary.items():
        gaps = e.get("pacs_minus_this")
        if not gaps:
            continue
        cells = []
        for c in cols:
            g = gaps[c]
            if g.get("ci95"):
                cells.append(f"{pct(g['mean'])} [{pct(g['ci95'][0])}, {pct(g['ci95'][1])}]")
            else:  # one pair: its difference, no interval
                cells.append(f"{pct(g.get('mean'))} [–]")
        need = gaps["greedy_accuracy"].get("pairs_needed", "–")
        lines.append(
            f"| {method} | {gaps['greedy_accuracy']['pairs']} | " + " | ".join(cells) + f" | {need} |"
        )
    devices = by_device(record)
    if devices:
        lines += ["", devices]
    return "\n".join(lines)


def by_device(record: dict) -> str | None:
    """Where a record's runs ran, when on more than one device, and PACS − PRIMARY (greedy at the last step) over
    the pairs of the device most runs ran on alone, beside the pooled figure; None for a record of one device."""
    seeds: dict[str, list[int]] = {}
    for r in record["runs"]:
        seeds.setdefault(r.get("host", {}).get("device", "cpu"), []).append(r["seed"])
    if len(seeds) < 2:
        return None
    main = max(seeds, key=lambda d: len(seeds[d]))
    parts = [
        f"{where} {len(seen)}" + ("" if where == main else f" (seed{'s' if len(set(seen)) > 1 else ''} "
                                  f"{', '.join(map(str, sorted(set(seen))))})")
        for where, seen in sorted(seeds.items(), key=lambda kv: -len(kv[1]))
    ]  # fmt: skip
    line = f"Runs by device: {'; '.join(parts)}."
    alone = [r for r in record["runs"] if r.get("host", {}).get("device", "cpu") == main]
    gap = (
        summarize({**record, "runs": alone})
        .get(PRIMARY, {})
        .get("pacs_minus_this", {})
        .get("greedy_accuracy", {})
    )
    if gap.get("ci95"):
        lo, hi = gap["ci95"]
        line += (f" PACS − {PRIMARY} (greedy @{record['protocol']['train'].get('max_steps', 24)}) over the {main} "
                 f"pairs alone: {100 * gap['mean']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}], {gap['pairs']} pairs.")  # fmt: skip
    return line


def main(argv: list[str] | None = None) -> None:
    """``python -m pacs_rl.compare.paired job ...``: one run of a record, the process :func:`run` starts."""
    p = argparse.ArgumentParser(prog="python -m pacs_rl.compare.paired")
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
