"""Running a comparison: train every planned run, evaluate every final model and the base model with one
pass@k protocol, skipping what is finished and resuming what is half done. The folder layout is in
:mod:`pacs_rl.compare.plan`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from filelock import Timeout
from rich.console import Console

from pacs_rl.compare.lock import lock_of
from pacs_rl.compare.plan import (
    BASE,
    TRAIN_CONFIG_FILE,
    TRAIN_DONE_FILE,
    CompareError,
    RunSpec,
    as_recorded,
    build_plan,
    check_training_data,
    eval_data_settings,
    eval_dir_of,
    method_config_overrides,
    run_settings,
    write_or_check_manifest,
)
from pacs_rl.compare.report import write_comparison_report
from pacs_rl.evaluation.runner import EvalConfig, parse_samples, run_eval, samples_per_benchmark
from pacs_rl.models import TINY_MODEL, tiny_model_folder
from pacs_rl.run_folder import (
    BASE_MODEL_DIR,
    EVAL_METRICS_FILE,
    FINAL_DIR,
    SETTINGS_FILE,
    last_complete_checkpoint,
)
from pacs_rl.settings.data import DATA_KEYS
from pacs_rl.training.card import write_model_card
from pacs_rl.training.run import build_config, config_and_trainer_classes, run_training
from pacs_rl.training.schema import CPU_DEFAULTS, RunSettings

PROGRESS = True  # progress bars (`pacs-rl compare --no-progress` sets False)


def _env_offline() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def resolve_base_model(settings: dict[str, Any], out: Path) -> str:
    """The base model path/name. "tiny" saves a tiny random model into OUT/base_model once."""
    model = settings["model"]
    return str(tiny_model_folder(out / BASE_MODEL_DIR)) if model == TINY_MODEL else model


# ----------------------------------------------------------------------------------------------- training
def train_config_dict(settings: dict[str, Any], spec: RunSpec, run_dir: Path) -> dict[str, Any]:
    """The PACSConfig keyword arguments of one run: shared train settings, then the method/sweep overrides,
    then the per-run fields (output folder, seed). Budget fields come only from the shared settings."""
    kw = {k: v for k, v in settings["train"].items() if k not in ("dataset", *DATA_KEYS)}
    kw.update(spec.overrides)
    kw.update(
        output_dir=str(run_dir),
        seed=spec.seed,
        data_seed=spec.seed,
        use_cpu=kw.get("use_cpu", True),
        report_to=[],
        save_strategy="steps",
        disable_tqdm=True,
        logging_steps=1,
    )
    return kw


def check_methods_buildable(settings: dict[str, Any]) -> None:
    """Build each method's config once (no model) so an unsupported one fails before any training."""
    for m in settings["methods"]:
        kw = train_config_dict(
            settings,
            RunSpec(m, m, 0, method_config_overrides(settings, m)),
            Path("/nonexistent-compare-check"),
        )
        try:
            config_cls, _ = config_and_trainer_classes(kw.get("loss_type", "pacs"), kw)
            config_cls(**kw)
        except (ValueError, TypeError) as e:
            raise CompareError(f"method {m!r} cannot be trained with these settings: {e}") from None


def is_trained(run_dir: Path) -> bool:
    return (run_dir / TRAIN_DONE_FILE).is_file() and (run_dir / FINAL_DIR / "config.json").is_file()


def training_settings(
    settings: dict[str, Any], spec: RunSpec, base_model: str
) -> tuple[RunSettings, dict[str, Any]]:
    """(RunSettings, config keyword arguments) of one run, as `pacs-rl train` takes them.

    The config starts from `pacs-rl train`'s CPU defaults, so the run folder's ``train_config.yaml`` reproduces
    the run with ``pacs-rl train --config RUN/train_config.yaml --output-dir RUN [--resume]``."""
    run = run_settings(settings, base_model)
    cfg = {**CPU_DEFAULTS, **train_config_dict(settings, spec, Path("."))}
    cfg.pop("output_dir", None)
    cfg.pop("disable_tqdm", None)
    return run, cfg


def train_run(
    settings: dict[str, Any], spec: RunSpec, run_dir: Path, base_model: str, description: str
) -> str:
    """Train (or resume) one run into ``run_dir`` with `pacs-rl train`'s `run_training`; return "trained",
    "resumed" or "skipped". A half-finished run continues from its newest complete checkpoint."""
    if is_trained(run_dir):
        return "skipped"
    _env_offline()
    run, cfg = training_settings(settings, spec, base_model)
    run_dir.mkdir(parents=True, exist_ok=True)
    header = f"# {description}: written by `pacs-rl compare`; rerun with\n"
    header += f"#   pacs-rl train --config {run_dir / TRAIN_CONFIG_FILE} --output-dir {run_dir} --resume\n"
    flat = {**dataclasses.asdict(run), **cfg}
    (run_dir / TRAIN_CONFIG_FILE).write_text(header + yaml.safe_dump(flat, sort_keys=False))
    ckpt = last_complete_checkpoint(run_dir)
    t0 = time.time()
    command = f"pacs-rl train --config {run_dir / TRAIN_CONFIG_FILE} --output-dir {run_dir}"
    result = run_training(
        run, build_config(cfg, run_dir), resume=ckpt is not None, command=command, progress=PROGRESS
    )
    (run_dir / TRAIN_DONE_FILE).write_text(
        json.dumps(
            {
                "global_step": result.global_step,
                "resumed_from": ckpt,
                "seconds_this_session": round(time.time() - t0, 2),
                "variant": spec.variant,
                "seed": spec.seed,
            },
            indent=2,
        )
    )
    return "resumed" if ckpt else "trained"


# ----------------------------------------------------------------------------------------------- evaluation
def eval_config(settings: dict[str, Any], model: str, benchmark: str, out_dir: Path, label: str):
    """The one evaluation protocol of a comparison (same problems, n, k, temperature, top-p, seed)."""
    ev = settings["eval"]
    default_n, by_bench = parse_samples(str(ev["n"]), ev["benchmarks"])
    return EvalConfig(
        model=model,
        benchmark=benchmark,
        output_dir=str(out_dir),
        n=samples_per_benchmark([benchmark], by_bench, default_n)[0],
        ks=[int(k) for k in ev["ks"]] if ev.get("ks") else None,
        temperature=float(ev["temperature"]),
        top_p=float(ev["top_p"]),
        max_new_tokens=int(ev["max_new_tokens"]),
        batch_size=int(ev["batch_size"]),
        seed=int(ev["seed"]),
        grader=str(ev.get("grader", "auto")),
        verify_workers=int(ev["verify_workers"]),
        plain_prompt=bool(ev["plain_prompt"]),
        backend=str(ev.get("backend", "transformers")),
        dtype=str(ev.get("dtype", "float32")),
        label=label,
        progress=PROGRESS,
        **eval_data_settings(settings),
    )


def is_evaluated(eval_dir: Path, config) -> bool:
    """The evaluation's metrics.json is there and covers this protocol (n, k, problems)."""
    path = eval_dir / EVAL_METRICS_FILE
    if not path.is_file():
        return False
    try:
        m = json.loads(path.read_text())
    except json.JSONDecodeError:
        return False
    return m.get("n") == config.n and [int(k) for k in m.get("ks", [])] == config.resolved_ks()


def eval_run(settings: dict[str, Any], model: str, benchmark: str, eval_dir: Path, label: str) -> str:
    """Evaluate (or resume evaluating) one model on one benchmark; return "evaluated" or "skipped"."""
    _env_offline()
    config = eval_config(settings, model, benchmark, eval_dir, label)
    if is_evaluated(eval_dir, config):
        return "skipped"
    # the runner resumes a half-finished folder itself (it samples only the missing (problem, index) pairs)
    # and refuses one drawn with other settings
    if settings["model"] == "tiny" or Path(model).exists():
        config = dataclasses.replace(config, model=str(Path(model).resolve()))
    run_eval(config)
    return "evaluated"


def card_with_evaluations(settings: dict[str, Any], out: Path, spec: RunSpec) -> None:
    """Rewrite the model card of ``spec``'s run with the comparison's evaluations of its final model."""
    run_dir = out / spec.folder
    if not (run_dir / SETTINGS_FILE).is_file():
        return  # trained by a test double, or before runs recorded their settings
    evaluations = []
    for bench in settings["eval"]["benchmarks"]:
        path = eval_dir_of(out, spec, bench) / EVAL_METRICS_FILE
        if path.is_file():
            try:
                evaluations.append(json.loads(path.read_text()))
            except json.JSONDecodeError:
                continue
    write_model_card(run_dir, evaluations=evaluations)


# ----------------------------------------------------------------------------------------------- driver
@dataclasses.dataclass
class Phase:
    """One unit of work: a training run or an evaluation."""

    kind: str  # "train" | "eval"
    name: str
    spec: RunSpec | None
    benchmark: str | None = None

    @property
    def key(self) -> str:
        """The phase's key in the status :func:`run_comparison` returns: ``train pacs/seed0``, ``eval base on b``."""
        return f"{self.kind} {self.name}"

    @property
    def label(self) -> str:
        """The evaluated model in words: Base, or the run's variant and seed."""
        return "Base" if self.spec is None else f"{self.spec.variant} seed {self.spec.seed}"

    def target(self, out: Path) -> Path:
        """The folder the phase writes: the run's folder, or the evaluation's."""
        if self.kind == "train":
            return out / self.spec.folder
        return eval_dir_of(out, self.spec, self.benchmark)

    def description(self, i: int, total: int) -> str:
        """The phase's heading, as the ``i``-th of ``total`` phases of its kind."""
        if self.kind == "train":
            return f"train {i}/{total} {self.spec.variant} seed {self.spec.seed}"
        return f"eval {i}/{total} {self.label} on {self.benchmark}"


def plan_phases(settings: dict[str, Any], plan: list[RunSpec]) -> list[Phase]:
    """The base model's evaluations first, then seed by seed, each run's training followed by its
    evaluations, so an interrupted comparison already holds complete, comparable rows for the first seeds."""
    benches = settings["eval"]["benchmarks"]
    phases = [Phase("eval", f"{BASE} on {b}", None, b) for b in benches]
    for seed in settings["seeds"]:
        for s in (s for s in plan if s.seed == seed):
            phases.append(Phase("train", s.key, s))
            phases += [Phase("eval", f"{s.key} on {b}", s, b) for b in benches]
    return phases


def _selected(key: str, only: list[str] | None) -> bool:
    return only is None or any(fnmatch.fnmatchcase(key, pat) for pat in only)


def run_comparison(
    settings: dict[str, Any],
    out: str | Path,
    *,
    train_fn: Callable[..., str] = train_run,
    eval_fn: Callable[..., str] = eval_run,
    only: list[str] | None = None,
    console=None,
) -> dict[str, Any]:
    """Run (or resume) the whole comparison into ``out`` and write the report. Returns a summary.

    ``only``: glob patterns over run keys ("grpo/seed0", "pacs*/*") and "base": run only those phases (to
    split one comparison over several processes or machines sharing the folder). Phases another live
    process holds are skipped ("busy"), as are evaluations of runs not trained yet ("waiting").
    ``train_fn`` / ``eval_fn`` are injectable for tests; they get the same arguments as
    :func:`train_run` / :func:`eval_run`."""
    console = console or Console(stderr=True)
    out = Path(out)
    plan = build_plan(settings)
    check_methods_buildable(settings)  # every check before the manifest is written
    check_training_data(settings)
    plan, kept = as_recorded(plan, write_or_check_manifest(out, settings, plan))
    for line in kept:
        console.print(f"note: {line}")
    run = _Comparison(settings, out, resolve_base_model(settings, out), train_fn, eval_fn, console)
    phases = plan_phases(settings, plan)
    phases = [p for p in phases if _selected(BASE if p.spec is None else p.spec.key, only)]
    status: dict[str, str] = {}
    totals = Counter(p.kind for p in phases)
    started: Counter = Counter()
    t0 = time.time()
    for phase in phases:
        started[phase.kind] += 1
        desc = phase.description(started[phase.kind], totals[phase.kind])
        colour = "cyan" if phase.kind == "train" else "magenta"
        console.print(f"[bold {colour}]▶ {desc}[/bold {colour}]  ({time.time() - t0:.0f}s elapsed)")
        status[phase.key] = run.phase(phase, desc)
    report = write_comparison_report(out, settings, plan)
    console.print(f"[green]report: {report}[/green]  ({time.time() - t0:.0f}s)")
    return {"status": status, "report": str(report), "plan": [s.key for s in plan]}


@dataclasses.dataclass
class _Comparison:
    """What every phase of one :func:`run_comparison` call shares: the settings, the comparison folder, the base
    model, the functions that train and evaluate, and the console."""

    settings: dict[str, Any]
    out: Path
    base_model: str
    train_fn: Callable[..., str]
    eval_fn: Callable[..., str]
    console: Any

    def phase(self, phase: Phase, desc: str) -> str:
        """Run one phase under its folder's lock and return its status: what ``train_fn`` / ``eval_fn`` return,
        "waiting" (an evaluation of a run not trained yet) or "busy" (another process holds the folder). A run's
        model card gets the evaluations of its final model as they finish."""
        s = phase.spec
        if phase.kind == "eval" and s is not None and not is_trained(self.out / s.folder):
            self.console.print("  its training is not finished: skipped for now")
            return "waiting"
        target = phase.target(self.out)
        lock = lock_of(target, self.out)
        try:
            lock.acquire()
        except Timeout:
            self.console.print(f"  another process holds {lock.lock_file}: left to it")
            return "busy"
        try:
            if phase.kind == "train":
                status = self.train_fn(self.settings, s, target, self.base_model, desc)
            else:
                model = self.base_model if s is None else str(self.out / s.folder / FINAL_DIR)
                status = self.eval_fn(self.settings, model, phase.benchmark, target, phase.label)
        finally:
            lock.release()
        if status == "skipped":
            self.console.print("  already done: skipped")
        if phase.kind == "eval" and s is not None and status in ("evaluated", "skipped"):
            card_with_evaluations(self.settings, self.out, s)
        return status
