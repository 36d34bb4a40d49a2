"""What a command checks before anything heavy loads (torch, transformers, TRL), shared by the command and its
``--dry-run``: one set of checks, each refusal one line naming the input and what to do, collected in the order
the command makes them, so that a dry run refuses what the run refuses, with the same words, in well under a
second.

    check = Preflight(network=not dry_run)
    check.output_folder("runs/x")               # not a file, nor under one
    check.model("Qwen/Qwen2.5-0.5B-Instruct")   # an alias, `tiny`, a folder with config.json, a Hub id (cached offline)
    problems = check.data("mine.jsonl")         # a local source is read: it exists and its rows parse
    check.hub_data("math500", "eval_dataset")   # a Hub source is in the local cache when offline
    check.reward_funcs("math,rewards.py:f")     # each imports and takes the keywords the trainer passes
    check.json_file("ds.json", "deepspeed")     # a settings file exists and parses
    check.packages({"use_vllm": True})          # the libraries the settings need are installed (pip line if not)
    if check.refusals: ...

``network``: whether the check may ask the Hugging Face Hub if it can be reached (one attempt, 3 s) when it is not
told to stay offline: the run does; a dry run never uses the network, and names what the run reads from the Hub
instead. Offline (``HF_HUB_OFFLINE=1``) both read only the local caches, so they refuse the same inputs.
``here`` False (a dry run that may plan for another machine: CUDA asked for, and whether this machine has it is
not known before torch) leaves what the training machine must hold (its libraries, its Hub cache) to the plan.
Each command lays these checks out in its own order: `pacs_rl.training.checks.preflight` (train),
`pacs_rl.evaluation.cli.eval_preflight` (eval), `pacs_rl.compare.cli` (compare).
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pacs_rl.data import (
    BENCHMARKS,
    DATA_DIR_ENV,
    DataError,
    ProblemSet,
    benchmark_name,
    hub_dataset,
    load_problems,
)
from pacs_rl.data.loaders import datasets_offline, hub_dataset_cached
from pacs_rl.models import hub_offline, hub_unreachable, model_problem
from pacs_rl.rewards.graders import MATH_REWARD, load_reward_function, split_reward_specs
from pacs_rl.run_folder import output_dir_problem
from pacs_rl.settings.errors import one_line

# The libraries a setting needs (an engine, a tracker, an adapter): a missing one is refused with the pip line that
# installs it (`Missing`), and a dry run for another machine lists them all in one line (`install_line`).
# transformers' report_to names -> the modules each needs (any one of them; transformers checks the same way).
TRACKERS: dict[str, tuple[str, ...]] = {
    "azure_ml": ("azureml",),
    "clearml": ("clearml",),
    "codecarbon": ("codecarbon",),
    "comet_ml": ("comet_ml",),
    "dagshub": ("dagshub",),
    "dvclive": ("dvclive",),
    "flyte": ("flytekit",),
    "kubeflow": (),  # needs a kubeflow trainer server (KUBEFLOW_TRAINER_SERVER_URL), no module
    "mlflow": ("mlflow",),
    "neptune": ("neptune",),
    "swanlab": ("swanlab",),
    "tensorboard": ("tensorboard", "tensorboardX"),
    "trackio": ("trackio",),
    "wandb": ("wandb",),
}


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def tracker_names(report_to: Any) -> list[str]:
    """``report_to`` (text, comma-separated text or a list) as a list of tracker names ('none' and 'all' left out)."""
    if report_to is None:
        return []
    items = report_to.split(",") if isinstance(report_to, str) else list(report_to)
    return [str(x).strip() for x in items if str(x).strip() and str(x).strip() not in ("none", "all")]


@dataclass(frozen=True)
class Missing:
    """A library a setting needs that this machine has not installed."""

    setting: str  # what asks for it: "use_vllm=true", "report_to='wandb'"
    package: str  # its name: "vLLM"
    install: str  # what installs it: an extra of this project ("vllm") or a package ("wandb")
    hint: str = ""  # more to say in the refusal
    extra: bool = True  # install names an extra of pacs-rl

    def refusal(self) -> str:
        how = f"pip install 'pacs-rl[{self.install}]'" if self.extra else f"pip install {self.install}"
        return f"{self.setting} needs {self.package}, which is not installed: {how}{self.hint}"


def missing_requirements(values: Mapping[str, Any]) -> tuple[list[Missing], list[str]]:
    """(each library a setting needs that is not installed here, the problems no install fixes: a tracker name
    transformers does not know)."""
    missing, problems = [], []
    if values.get("use_vllm") and not _installed("vllm"):
        hint = " (on a CPU, vLLM's CPU build: docs/SCALING.md), or drop use_vllm"
        missing.append(Missing("use_vllm=true", "vLLM", "vllm", hint))
    if values.get("use_lora") and not _installed("peft"):
        missing.append(Missing("use_lora=true", "peft", "peft"))
    if values.get("deepspeed") and not _installed("deepspeed"):
        missing.append(Missing("deepspeed", "DeepSpeed", "deepspeed", ", or drop the setting"))
    for name in tracker_names(values.get("report_to")):
        if name not in TRACKERS:
            problems.append(
                f"report_to={name!r} is no tracker transformers knows; use {', '.join(TRACKERS)} or none"
            )
        elif TRACKERS[name] and not any(map(_installed, TRACKERS[name])):
            module = TRACKERS[name][0]
            missing.append(Missing(f"report_to={name!r}", module, module, ", or drop it", extra=False))
    return missing, problems


def missing_packages(values: Mapping[str, Any]) -> list[str]:
    """One message per setting whose engine, tracker or adapter library is not installed."""
    missing, problems = missing_requirements(values)
    return [m.refusal() for m in missing] + problems


def install_line(missing: Iterable[Missing]) -> str:
    """The one pip command that installs ``missing`` from the root of a clone: the extras, then the packages."""
    missing = list(missing)
    extras = list(dict.fromkeys(m.install for m in missing if m.extra))
    packages = list(dict.fromkeys(m.install for m in missing if not m.extra))
    words = ["pip install"] + ([f'-e ".[{",".join(extras)}]"'] if extras else []) + packages
    return " ".join(words)


def hub_data_problem(source: str, network: bool, what: str = "dataset") -> str | None:
    """Why the Hub dataset ``source`` would be read from cannot be read (None when it can, or where a dry run
    cannot tell without the network): offline, it must be in the local datasets cache; online, with ``network``,
    the Hub must be reachable. None too for a source read without the Hub (a file, a procedural task, a benchmark
    in $PACS_RL_DATA_DIR)."""
    hub_id = hub_dataset(source)
    if hub_id is None:
        return None
    name = benchmark_name(source)
    local = f", or set {DATA_DIR_ENV} to a folder holding {BENCHMARKS[name].local_file}" if name else ""
    if datasets_offline():
        if hub_dataset_cached(hub_id):
            return None
        return (
            f"{what} {source!r} is read from the Hugging Face Hub ({hub_id}) and is not in the local datasets cache "
            f"while offline (HF_HUB_OFFLINE=1): give a local file{local}, or load it once where the Hub can be "
            "reached"
        )
    why = hub_unreachable() if network else None
    if why:
        return (
            f"{what} {source!r} is read from the Hugging Face Hub, which cannot be reached ({why}): give a local "
            f"file{local}, or set HF_HUB_OFFLINE=1 to read it from the local datasets cache"
        )
    return None


def reward_weights_problem(weights: Any, count: int, spec: Any) -> str | None:
    """Why ``weights`` (TRL's reward_weights) cannot weigh ``count`` reward functions (None when they can)."""
    if weights is None or len(weights) == count:
        return None
    return (
        f"reward_weights={list(weights)} has {len(weights)} weight(s) for {count} reward function(s) ({spec!r}); "
        "give one weight per function."
    )


class Preflight:
    """The refusals of one command's checks, in the order they ran (``refusals``); ``network``: see the module."""

    def __init__(self, network: bool = True, here: bool = True):
        self.network, self.here = network, here
        self.refusals: list[str] = []

    def add(self, *problems: str | Iterable[str] | None) -> None:
        """Each problem given (text, or a list of them), on one line; None and empty ones are skipped."""
        for problem in problems:
            if isinstance(problem, str):
                self.refusals += [one_line(problem)] if problem else []
            elif problem:
                self.refusals += [one_line(p) for p in problem if p]

    def output_folder(self, path: str | Path, option: str = "--output-dir") -> None:
        """A folder the command may write into: not a file, nor under one."""
        self.add(output_dir_problem(path, option))

    def model(self, name: str) -> None:
        """A model that can be loaded as far as is known here: an alias, `tiny`, a model folder, a Hub id that is in
        the local cache when offline (or, with ``network``, when the Hub cannot be reached); not ``here``: any
        well-formed Hub id."""
        self.add(model_problem(name, hub=self.here and (self.network or hub_offline())))

    def packages(self, values: Mapping[str, Any]) -> None:
        """The engine, tracker and adapter libraries the settings need are installed (``here`` only)."""
        self.add(missing_packages(values) if self.here else None)

    def hub_data(self, source: str, what: str = "dataset") -> bool:
        """Whether ``source`` is read from the Hub (True; ``here``, it is refused when it cannot be: see
        hub_data_problem)."""
        self.add(hub_data_problem(source, self.network, what) if self.here else None)
        return hub_dataset(source) is not None

    def data(self, source: str, what: str = "", **loader_kwargs: Any) -> ProblemSet | None:
        """The problems of ``source`` read as the command reads them (`pacs_rl.data.load_problems`) where that needs
        no Hub: a file must exist and its rows parse; a Hub source is checked with :meth:`hub_data` instead. None
        when it was not read (a Hub source, or refused). ``what``: the setting that names it, before a refusal."""
        if self.hub_data(source, what or "dataset"):
            return None
        try:
            return load_problems(source, **loader_kwargs)
        except (DataError, ValueError) as e:
            self.add(f"{what} {source!r} cannot be used: {e}" if what else str(e))
            return None

    def reward_funcs(self, spec: Any, weights: Any = None) -> int:
        """Every reward function of ``spec`` (``math``, ``module:function``, ``file.py:function``) imports and can be
        called with the keywords the trainer passes, and ``weights`` has one weight per function. Returns how many
        functions ``spec`` names."""
        specs = split_reward_specs(spec) if isinstance(spec, (str, list)) else []
        for one in specs:
            if one == MATH_REWARD:
                continue
            try:
                load_reward_function(one)
            except ValueError as e:
                self.add(f"reward_funcs: {e}")
        self.add(reward_weights_problem(weights, len(specs), spec))
        return len(specs)

    def json_file(self, value: Any, setting: str) -> dict | None:
        """A setting that names a JSON file (or holds its mapping already): the file exists and parses. Returns the
        mapping (None when refused)."""
        if isinstance(value, Mapping):
            return dict(value)
        path = Path(str(value)).expanduser()
        if not path.is_file():
            self.add(
                f"{setting}={value!r}: no such file (from the current folder, {Path.cwd()}; in a --config file a "
                f"relative path is read from the file's own folder first); give the path of a JSON file"
            )
            return None
        try:
            loaded = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            where = f" at line {e.lineno}" if isinstance(e, json.JSONDecodeError) else ""
            self.add(f"{setting}={value!r}: not valid JSON ({getattr(e, 'msg', e)}{where})")
            return None
        if not isinstance(loaded, dict):
            self.add(f"{setting}={value!r}: expected a JSON object, got a {type(loaded).__name__}")
            return None
        return loaded


__all__ = [
    "TRACKERS",
    "Missing",
    "Preflight",
    "hub_data_problem",
    "install_line",
    "missing_packages",
    "missing_requirements",
    "reward_weights_problem",
    "tracker_names",
]
