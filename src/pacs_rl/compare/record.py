"""The record of a comparison, one format for both (`pacs-rl compare paired` and `pacs-rl compare`): one JSON file
holding the protocol every run shares (``protocol``), every run's result (``runs``: its method, seed, evaluations,
what it logged while training, where it ran), the base model's evaluation (``base``), and what is read from them
(``summary``: each method's mean over its seeds, PACS − method paired by seed with its 95% interval, Student t over
seeds, :mod:`pacs_rl.compare.stats`, and the pairs a ±5 pp interval would need; ``cost``: the time per pair).

Two protocols share the format. A paired record's (:class:`Protocol`, declared once: every run the `pacs-rl train`
CPU default of the record's first day, evaluated greedy on the whole held-out arithmetic split and, where the
record has it, with pass@k). A planned comparison's (`pacs_rl.compare.plan.comparison_protocol`: its own model,
training data and budget, ``eval``: pass@k on its benchmarks, and the sweeps it expands). Either way a record made
with another protocol is refused (start a new record instead of mixing two); its methods keep the config overrides
they were recorded with. Since version 3 the protocol also holds the `pacs-rl train` CPU default its runs train on
(``cpu_default``): when that default changes, a record made before is refused, naming what changed.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

from pacs_rl.compare import stats
from pacs_rl.compare.methods import CompareError, parse_method
from pacs_rl.run_folder import read_jsonl
from pacs_rl.settings.declarations import at_least, declared_problems, interval, one_of, rule, setting, whole
from pacs_rl.training.schema import PACSFields, default_settings

WHAT = (
    "PACS against GRPO in miniature, powered: seed after seed of every method, added to one record, until PACS − GRPO's "
    "paired 95% interval is within ±5 pp or 40 pairs."
)
RESULT_FILE = "result.json"  # a run folder's result, as the record holds it


# What every run of a paired record shares, on top of `pacs-rl train`'s CPU default (training/schema.py).
@dataclasses.dataclass(frozen=True)
class TrainProtocol:
    """The protocol's `pacs-rl train` settings (a record made with --max-steps holds its own max_steps)."""

    eval_size: int = setting(0, "Held-out problems the run evaluates itself: none (the record evaluates every run).",
                             check=at_least(0))  # fmt: skip
    plot: bool = setting(False, "A curves PNG per run: none.")
    # 48 steps, checkpoints every 24: the first 24 steps of a run are the `pacs-rl train` default's 24 (constant
    # lr), so one run measures both budgets
    max_steps: int = setting(48, "Optimizer steps of every run.", check=at_least(1))
    save_steps: int = setting(
        24, "A checkpoint every this many steps (greedy_at evaluates them).", check=at_least(1)
    )
    save_total_limit: int = setting(2, "Checkpoints kept while the run trains.", check=at_least(1))


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """The held-out problems: all of the task's split, in the order of HELDOUT_SEED."""

    ops: str = setting("+-", "Operators of the arithmetic task.", check=one_of(["+", "-", "+-"]))
    digits: str = setting("2,1", "Digits of the two operands.")
    split: str = setting("test", "The task's split.", check=one_of(["train", "test"]))


@dataclasses.dataclass(frozen=True)
class GreedyEval:
    """The greedy evaluation of every run (at its last step and at each of ``greedy_at``)."""

    temperature: float = setting(0.0, "Greedy: temperature 0.", check=interval(0, 0))
    max_new_tokens: int = setting(96, "Tokens per answer.", check=at_least(1))


@dataclasses.dataclass(frozen=True)
class PassKEval:
    """pass@k on the first problems of the held-out set (the paper's exploration claim), where the record has it."""

    problems: int = setting(32, "The first this many held-out problems.", check=at_least(1))
    n: int = setting(64, "Samples per problem; the ks are the powers of two up to it.", check=at_least(1))
    temperature: float = setting(
        0.6, "Sampling temperature (the paper's evaluation).", check=interval(0, 2, open_low=True)
    )
    top_p: float = setting(
        0.95, "Nucleus sampling (the paper's evaluation).", check=interval(0, 1, open_low=True)
    )
    max_new_tokens: int = setting(96, "Tokens per sample.", check=at_least(1))


@dataclasses.dataclass(frozen=True)
class Protocol:
    """What every run of a paired record shares. Version 3: the `pacs-rl train` CPU default of the day, held in the
    record (``cpu_default``), the arms pacs, grpo and pacs_clip on every seed. Closed: version 2
    (pacs_vs_grpo_noise_steps.json: the sound grader of its day, PACS stepping on float rounding) and version 1
    (pacs_vs_grpo_restatement_rule.json and _leak.json: graders that paid restated questions)."""

    version: int = setting(
        3, "The protocol's version: a record of another version is refused.", check=at_least(1)
    )
    train: TrainProtocol = setting(TrainProtocol(), "The runs' `pacs-rl train` settings.")
    greedy_at: tuple[int, ...] = setting((24,), "Earlier checkpoints evaluated greedy too (the final model is "
                                         "the `greedy` figure).",
                                         check=rule(lambda v: all(whole(s) and s >= 1 for s in v),
                                                    ": give optimizer steps, whole numbers >= 1"))  # fmt: skip
    heldout: HeldOut = setting(HeldOut(), "The held-out problems.")
    greedy: GreedyEval = setting(GreedyEval(), "The greedy evaluation.")
    passk: PassKEval = setting(PassKEval(), "The pass@k evaluation.")
    grader: str = setting("sound", "The training grader (`pacs-rl train`'s default), for the evaluations too.",
                          check=one_of(["sound"]))  # fmt: skip


def protocol_problems(declared: Any) -> list[str]:
    """What the declared checks find in ``declared`` (a Protocol, or one of its parts), its parts included."""
    out = declared_problems(declared, dataclasses.fields(declared))
    for f in dataclasses.fields(declared):
        value = getattr(declared, f.name)
        if dataclasses.is_dataclass(value):
            out += [f"{f.name}.{p}" for p in protocol_problems(value)]
    return out


PROTOCOL: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(Protocol())))  # as a record holds it
KS = [2**i for i in range(PROTOCOL["passk"]["n"].bit_length())]  # 1, 2, 4, ..., n
PRIMARY = "grpo"  # the stopping rule is on PACS − this method
TARGET = 0.05  # half-width of the 95% interval, in accuracy (5 percentage points)
# ... or this many seeds, whatever the interval then is (the record then says what ±5 pp would need)
MAX_PAIRS = 40
# the rule is checked from this many pairs on: checked from the third, a 95% interval stopped at ±5 pp covers 90-93% in
# simulation, from the tenth 93-95%
MIN_PAIRS = 10
ARMS = ("pacs", PRIMARY, "pacs_clip")  # a new record's methods, every one on every seed


def is_comparison(proto: dict) -> bool:
    """Whether ``proto`` is a planned comparison's (evaluated on its ``eval`` benchmarks), not a paired record's."""
    return "eval" in proto


def cpu_default() -> dict[str, Any]:
    """The `pacs-rl train` CPU default as a record holds it: every setting `pacs-rl train` runs with when given none
    (training/schema.py: RunSettings, CPU_DEFAULTS, and PACSFields' declared defaults under them; TRL's own fields
    are its pinned version's), the values a new record's runs train on under the protocol's own settings, the
    method's and the seed."""
    fields = {
        f.name: f.default for f in dataclasses.fields(PACSFields) if f.default is not dataclasses.MISSING
    }
    return json.loads(json.dumps({**fields, **default_settings()}))


def default_changes(recorded: dict, now: dict) -> list[str]:
    """What differs between a recorded CPU default and ``now``'s, one item a setting: 'learning_rate 2e-05 ->
    1e-05', 'dynamic_sampling: new, True', 'old_key: gone'."""
    out = []
    for key in sorted(set(recorded) | set(now)):
        if key not in recorded:
            out.append(f"{key}: new, {now[key]!r}")
        elif key not in now:
            out.append(f"{key}: gone")
        elif recorded[key] != now[key]:
            out.append(f"{key} {recorded[key]!r} -> {now[key]!r}")
    return out


def protocol_difference(have: dict) -> str | None:
    """Why a record's protocol ``have`` cannot take runs of this code, where the reason is its version or the CPU
    default (None otherwise: the caller compares the rest)."""
    version = have.get("version")
    if version != PROTOCOL["version"]:
        return (f"it holds protocol version {version}, this code runs version {PROTOCOL['version']} (a closed record: "
                "read it, add nothing to it)")  # fmt: skip
    changed = default_changes(have.get("cpu_default") or {}, cpu_default())
    if changed:
        return (f"the `pacs-rl train` CPU default has changed since it was made ({'; '.join(changed)}): its runs "
                "and new ones would train differently")  # fmt: skip
    return None


class _Absent:
    def __repr__(self) -> str:
        return "absent"


def differences(have: Any, want: Any, prefix: str = "") -> list[str]:
    """Where two protocols (or parts) differ, one item a setting: 'train.max_steps: 2 against 3'."""
    if isinstance(have, dict) and isinstance(want, dict):
        gone = _Absent()
        return [line for k in sorted(set(have) | set(want), key=str)
                for line in differences(have.get(k, gone), want.get(k, gone), f"{prefix}.{k}" if prefix else str(k))]  # fmt: skip
    return [] if have == want else [f"{prefix or 'protocol'}: {have!r} against {want!r}"]


def paired_interval(diffs: list[float], target: float | None = TARGET) -> dict:
    """pacs_rl.compare.stats.paired_interval with this record's target half-width."""
    return stats.paired_interval(diffs, target)


def protocol(
    overrides: dict | None = None,
    methods: list[str] | None = None,
    passk: bool = True,
    passk_every: int | None = None,
    passk_from: int = 0,
) -> dict:
    """What every run of a paired record shares: PROTOCOL, ``overrides`` (--set) in its train part, the `pacs-rl
    train` CPU default under them (``cpu_default``), the methods with their config overrides (ARMS unless named;
    each read by `pacs_rl.compare.methods.parse_method`), and the ks (none when pass@k is off). With ``passk_every``
    E, pass@k is evaluated on the seeds ``passk_from``, ``passk_from`` + E, ... only (and on the base model): a pair
    in E pays for it."""
    out = {**PROTOCOL, "train": {**PROTOCOL["train"], **(overrides or {})}, "cpu_default": cpu_default()}
    problems = declared_problems(out["train"], dataclasses.fields(TrainProtocol))
    if problems:
        raise CompareError(f"the protocol's train settings: {'; '.join(problems)}")
    out["methods"] = {m: parse_method(m) for m in (methods or list(ARMS))}
    if not passk:
        out["passk"] = None
    out["ks"] = KS if passk else []
    if passk and passk_every:
        out["passk_seeds"] = {"from": passk_from, "every": passk_every}
    return out


def passk_due(proto: dict, seed: int | None) -> bool:
    """Whether the run of ``seed`` (None: the base model) of a paired record is evaluated with pass@k."""
    if proto.get("passk") is None:
        return False
    rule = proto.get("passk_seeds")
    return (
        seed is None or rule is None or (seed >= rule["from"] and (seed - rule["from"]) % rule["every"] == 0)
    )


def new_record(proto: dict, what: str = WHAT) -> dict:
    """An empty record of the protocol ``proto``."""
    return {"what": what, "protocol": proto, "runs": [], "base": None}


def open_record(path: Path, proto: dict, what: str = WHAT) -> dict:
    """The record at ``path`` going on under ``proto`` (a new one if absent); refused, naming what differs, when it
    was made under another protocol (its version, the CPU default it holds, or any of its settings)."""
    if not path.is_file():
        return new_record(proto, what)
    record = json.loads(path.read_text())
    have = record.get("protocol", {})
    why = protocol_difference(have) or (None if have == proto else "; ".join(differences(have, proto)))
    if why:
        raise CompareError(f"{path} was recorded under another protocol ({why}); give a new --output-dir (or "
                           "--record) to start another record, or the settings it was made with to go on with it")  # fmt: skip
    return record


def load_record(
    path: Path,
    overrides: dict | None = None,
    methods: list[str] | None = None,
    passk=True,
    passk_every: int | None = None,
    started: tuple[int, ...] = (),
) -> dict:
    """The paired record at ``path`` (a new one if absent; `open_record`). An existing record continues with its own
    methods when ``methods`` is None; another protocol is refused, except one step: a record without pass@k takes it
    on (``passk_every``) from the first seed that neither it nor a started run (``started``) has, its training
    unchanged, and says so in its ``protocol_changes``."""
    have = json.loads(path.read_text()).get("protocol", {}) if path.is_file() else {}
    methods = methods or list(have.get("methods", {})) or None
    start = (have.get("passk_seeds") or {}).get("from", 0)
    if have and passk and passk_every and have == protocol(overrides, methods, passk=False):
        record = json.loads(path.read_text())
        start = 1 + max([*(r["seed"] for r in record["runs"]), *started], default=-1)
        record["protocol"] = protocol(overrides, methods, passk, passk_every, start)
        change = f"pass@k added (n = {PROTOCOL['passk']['n']}) on seeds {start}, {start + passk_every}, ... and the base"
        record.setdefault("protocol_changes", []).append({"date": time.strftime("%Y-%m-%d"), "what": change})
        return record
    if have and protocol_difference(
        have
    ):  # refused before its methods are read: a closed record's may not be
        return open_record(path, have)
    return open_record(path, protocol(overrides, methods, passk, passk_every, start))


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


def slug(method: str) -> str:
    """A folder name for a method or variant: pacs[reference=frozen] -> pacs__reference=frozen."""
    return method.replace("[", "__").replace("]", "").replace(",", "__")


def tail_mean(values: list, last: int | None = None) -> float | None:
    """Mean of the logged (finite) values of a per-step curve, or of its ``last`` logged ones; None if none."""
    logged = [v for v in values if v is not None and math.isfinite(v)]
    logged = logged[-last:] if last else logged
    return sum(logged) / len(logged) if logged else None


# ---------------------------------------------------------------------------------------------- what a run logged
# a run's per-step curves: the metric of metrics.jsonl -> its name in the record (None on a step without it;
# rollout metrics are logged at the rollout's steps only)
CURVES = {
    "reward": "reward",
    "entropy": "entropy",
    "completions/mean_length": "length",
    "completions/clipped_ratio": "cut_off",  # the rollout's completions cut at the token limit
    "groups/mixed_frac": "mixed_groups",  # the rollout's groups holding both labels
    "groups/mixed_frac_minibatch": "mixed_groups_minibatch",  # the optimizer step's
    "grad_norm": "grad_norm",  # before any clip
    "optimizer/skipped_no_signal": "skipped_no_signal",  # 1.0: no group with both labels, no step
    "optimizer/skipped_nonfinite": "skipped_nonfinite",
    "pacs/critic_auc": "critic_auc",
}
# a planned comparison's runs keep the critic's calibration in the large too (its report draws it)
CALIBRATION = {"pacs/prob_mean": "critic_prob", "pacs/reward_mean": "critic_reward"}


def _curve(rows: list[dict], key: str) -> list[float | None]:
    return [None if r.get(key) is None else round(float(r[key]), 5) for r in rows]


def grad_clipped(curves: dict, max_grad_norm: float | None) -> list[float | None] | None:
    """Per step, 1.0 where the gradient clip scaled the step's gradient (its norm above ``max_grad_norm`` on a step
    the optimizer took), else 0.0; None for a run without a clip (no step is clipped: not a fraction of 0)."""
    if not max_grad_norm:
        return None
    skipped = [
        bool(a) or bool(b)
        for a, b in zip(curves["skipped_no_signal"], curves["skipped_nonfinite"], strict=True)
    ]
    return [
        None if norm is None else float(norm > max_grad_norm and not skip)
        for norm, skip in zip(curves["grad_norm"], skipped, strict=True)
    ]


def dynamics(
    metrics_file: Path, loss_type: str = "pacs", max_grad_norm: float | None = None, extra: dict | None = None
) -> dict:
    """Per-step curves (CURVES and ``extra``; the loss's ratio clip fraction, ``<loss_type>/clip_ratio_region``,
    where it logs one; whether the gradient clip acted; the dynamic-sampling figures when the run sampled so) and
    first/last summaries from a run's metrics.jsonl (a line cut mid-write is skipped, as everywhere the file is
    read)."""
    rows = [r for r in read_jsonl(metrics_file) if "step" in r and "loss" in r]
    curves = {name: _curve(rows, key) for key, name in {**CURVES, **(extra or {})}.items()}
    ratio = f"{loss_type}/clip_ratio_region"  # the baselines' share of tokens whose ratio the clip held
    if any(ratio in r for r in rows):
        curves["ratio_clipped"] = _curve(rows, ratio)
    clipped = grad_clipped(curves, max_grad_norm)
    if clipped is not None:
        curves["grad_clipped"] = clipped
    for key in sorted({k for r in rows for k in r if k.startswith("dynamic_sampling/")}):
        curves[key] = _curve(rows, key)
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


# ---------------------------------------------------------------------------------------------- what is read
def _passk_readers(proto: dict) -> dict:
    """A planned comparison's accuracies: pass@k on each benchmark, in [0, 1] ('pass@1 math500')."""
    return {
        f"pass@{k} {b}": (
            lambda r, k=k, b=b: (r.get("evals", {}).get(b) or {}).get("pass_at_k", {}).get(str(k))
        )
        for b, drawn in proto["eval"]["samples"].items()
        for k in drawn["ks"]
    }


def metric_readers(record: dict) -> dict:
    """name -> how to read it from a run's result (accuracies in [0, 1], then the dynamics)."""
    proto = record["protocol"]
    if is_comparison(proto):
        readers = _passk_readers(proto)
    else:
        readers = {"greedy_accuracy": lambda r: r["greedy"]["accuracy"]}
        readers.update(  # None where a run stops before that step (a record with --set max_steps=24)
            {
                f"greedy_accuracy@{s}": (
                    lambda r, s=s: r.get("greedy_at", {}).get(str(s), {}).get("accuracy")
                )
                for s in proto.get("greedy_at", [])
            }
        )
        readers.update(
            {  # None where the run was not evaluated with pass@k (passk_seeds)
                f"pass@{k}": (lambda r, k=k: (r.get("passk") or {}).get("pass_at_k", {}).get(str(k)))
                for k in proto["ks"]
            }
        )
    readers.update(
        {
            "entropy_last": lambda r: tail_mean(r["dynamics"]["curves"]["entropy"], 3),
            "length_last": lambda r: tail_mean(r["dynamics"]["curves"]["length"], 3),
            **({} if is_comparison(proto) else {"greedy_length": lambda r: r["greedy"]["mean_length"]}),
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
    before the stop), apart for runs evaluated greedy only (a planned comparison's: on its benchmarks) and with
    pass@k; and a pair of ``methods`` of each kind, the sum of their medians."""
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
              for r in runs if "seconds" in r.get("greedy", {})]  # fmt: skip
    passk = [r["passk"]["seconds"] for r in runs if "seconds" in (r.get("passk") or {})]
    imports = [r["host"]["import_seconds"] for r in runs if "import_seconds" in r.get("host", {})]
    found = {"greedy_eval_seconds_median": _median(greedy), "passk_seconds_median": _median(passk),
             "import_seconds_median": _median(imports)}  # fmt: skip
    return {k: v for k, v in found.items() if v is not None}


def merge_records(into: dict, other: dict, name: str = "the other record") -> tuple[list, list]:
    """Add to ``into`` the runs of ``other`` (a copy of it that another machine added to, with --first-seed) that it
    lacks, and its base model's evaluation if ``into`` has none. A run whose seed would still lack half of the pair
    PACS/PRIMARY stays out: its partner would be trained later on another machine, and a pair is trained on one.
    Returns the (method, seed) added and those left out, in seed order. Refused (CompareError, ``into``
    untouched): another protocol, or a run both hold with different results."""
    if other.get("protocol") != into.get("protocol"):
        raise CompareError(
            f"{name} was recorded with another protocol than the record it would join"
            f"{_how_they_differ(other.get('protocol') or {}, into.get('protocol') or {})}: only runs of one protocol "
            "are pooled"
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


def _how_they_differ(theirs: dict, ours: dict) -> str:
    """Where two protocols differ, for a refusal: their versions, else their CPU defaults, else their settings."""
    if theirs.get("version") != ours.get("version"):
        return f" (version {theirs.get('version')} against {ours.get('version')})"
    changed = default_changes(ours.get("cpu_default") or {}, theirs.get("cpu_default") or {})
    return (
        f" (its CPU default: {'; '.join(changed)})"
        if changed
        else f" ({'; '.join(differences(theirs, ours))})"
    )


def complete_seeds(record: dict, methods: list[str]) -> list[int]:
    have = {(r["method"], r["seed"]) for r in record["runs"]}
    seeds = sorted({s for _, s in have})
    return [s for s in seeds if all((m, s) in have for m in methods)]


def target_reached(record: dict, target: float = TARGET) -> bool:
    gap = summarize(record).get(PRIMARY, {}).get("pacs_minus_this", {}).get("greedy_accuracy", {})
    return gap.get("pairs", 0) >= MIN_PAIRS and gap.get("half_width", 1.0) <= target
