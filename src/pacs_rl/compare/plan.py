"""What a comparison runs: methods, sweeps, presets, the run plan and the manifest that pins it.

A *method* is a named set of `PACSConfig` overrides, one table for every comparison (compare/methods.py:
``pacs`` = PACS unclipped as its authors ran it, ``pacs_clip`` = PACS with clip 1.0, ...).
A *variant* is a method plus sweep overrides (``pacs[pacs_beta=0.1]``). A *run* is a variant and a seed.
Every run starts from the same base model, sees the same training problems in the same order for a given
seed, and has the same rollout budget (steps × prompts × G × tokens): methods and sweeps change only loss
fields, and the budget fields live in the shared ``train`` section of the settings.

Settings (a YAML/JSON file, a preset, then the command-line options, each overriding the previous)::

    model: smollm2-135m            # base model: bundled alias, Hub id or local folder ("tiny" = a tiny random one)
    methods: [pacs, grpo]
    seeds: [0, 1]
    sweeps: {pacs_beta: [0.1, 1, 10]}
    train:  {dataset: "arithmetic?n=256&split=train", max_steps: 8, ...a data setting or a PACSConfig field}
    method_settings: {grpo: {max_grad_norm: 1.0}, pacs: {max_grad_norm: null}}   # optional, per method
    eval:   {benchmarks: ["arithmetic?n=40&split=test&seed=1"], n: 8, ks: [1, 2, 4, 8], temperature: 0.6, ...}

Both sections take the data settings of `pacs-rl train` and `eval` (pacs_rl.settings.DataSettings: split,
problem_field, answer_field, prompt_field, instruction, system_prompt, skip_bad_rows); the prompt of the training
section (instruction, system_prompt) is the evaluation's too unless the eval section sets its own. ``eval.n`` is
written as `pacs-rl eval --n` is: 32, math500=32,aime24=512, or paper.

``method_settings`` sets config fields for one method only (the PACS authors clipped their baselines but
not PACS, and only PPO has a critic); the budget fields (BUDGET_KEYS) may not differ between methods.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import json
import re
import time
from pathlib import Path
from typing import Any

from pacs_rl.compare.methods import method_names, method_overrides
from pacs_rl.data import ARITHMETIC_DIGITS, ARITHMETIC_OPS, benchmark_name
from pacs_rl.evaluation.runner import EvalConfig, bench_slug, parse_samples
from pacs_rl.rewards.graders import TRAINING_GRADER
from pacs_rl.settings.aliases import rename_keys
from pacs_rl.settings.data import DATA_KEYS
from pacs_rl.settings.declarations import Check, declared, declared_problems, setting
from pacs_rl.settings.errors import SettingsError
from pacs_rl.settings.reading import coerce, read_yaml
from pacs_rl.training.checks import coerce_setting, config_problems
from pacs_rl.training.data import load_run_data
from pacs_rl.training.schema import (
    CONFIG_FIELDS,
    CRITIC_FIELDS,
    CRITIC_LOSS_TYPES,
    RunSettings,
)
from pacs_rl.training.trl_fields import GRPO_FIELDS

MANIFEST_FILE = "manifest.json"
MANIFEST_VERSION = 1

# The comparison folder (OUT = --output-dir), named here beside RunSpec.folder so that the runner and the
# report read one layout:
#   OUT/manifest.json                      the settings and the plan (a rerun must match them)
#   OUT/base_model/                        only for model "tiny": the tiny random model used as base
#   OUT/runs/<variant>/seed<s>/            a `pacs-rl train` run folder; TRAIN_DONE_FILE once finished
#   OUT/evals/<variant>/seed<s>/<bench>/   a `pacs-rl eval` folder (run.json, samples.jsonl, metrics.json)
#   OUT/evals/base/<bench>/                the base model's evaluation
#   OUT/report.md, OUT/*.png               the report
TRAIN_DONE_FILE = "compare_train_done.json"
TRAIN_CONFIG_FILE = "train_config.yaml"
BASE = "base"


@functools.cache
def _training():
    """The training library (torch, TRL), imported on first use so that `pacs-rl --help` stays fast."""
    from pacs_rl.training import run

    return run


def method_config_overrides(settings: dict[str, Any], method: str) -> dict[str, Any]:
    """The config overrides of ``method`` in a comparison: the method's own (compare/methods.py), then its
    ``method_settings``."""
    return {**method_overrides(method), **settings.get("method_settings", {}).get(method, {})}


# Fields a comparison sets for every run itself (they must not differ between methods).
RESERVED_TRAIN_KEYS = ("output_dir", "seed", "data_seed", "loss_type")
# The rollout budget (steps × prompts × G × tokens, and how completions are sampled): shared by every method,
# so never in method_settings.
BUDGET_KEYS = (
    "max_steps", "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps",
    "mini_batches_per_rollout", "steps_per_generation", "generation_batch_size", "num_iterations",
    "max_completion_length", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
)  # fmt: skip

# Training settings shared by every run unless the settings file changes them.
TRAIN_DEFAULTS: dict[str, Any] = {
    "dataset": "arithmetic?n=256&split=train&seed=0",
    "max_steps": 8,
    "learning_rate": 1e-6,
    "num_generations": 8,
    "per_device_train_batch_size": 16,
    "gradient_accumulation_steps": 1,
    "mini_batches_per_rollout": 2,
    "max_completion_length": 64,
    "temperature": 1.0,
    "save_steps": 2,
    "save_total_limit": 1,
}


def _eval_check(name: str) -> Check:
    """The check `pacs-rl eval` declares for its setting ``name`` (EvalConfig): an eval section setting that is an
    EvalConfig setting too has its domain declared there, once."""
    return declared(EvalConfig.__dataclass_fields__[name]).check


def _samples(name: str, value: Any) -> str | None:
    """``eval.n`` as `pacs-rl eval --n` takes it (32; math500=32,aime24=512; paper); the benchmarks it names are
    checked against the section's in _check_eval."""
    try:
        parse_samples(str(value), [])
    except ValueError as e:
        return f"{name}: {e}"
    return None


def _named(name: str, value: Any) -> str | None:
    return None if value else f"{name} is empty; give at least one benchmark (--benchmarks math500)."


@dataclasses.dataclass(frozen=True)
class EvalSection:
    """The ``eval`` section: one evaluation protocol for the base model and every run (`pacs-rl eval`'s settings,
    with defaults sized for a CPU), beside the data settings (DataSettings) it may set too."""

    benchmarks: tuple[str, ...] = setting(
        ("arithmetic?n=40&split=test&seed=1",),
        "Benchmarks every model is evaluated on (math500, aime24, a .jsonl file, 'arithmetic?n=40&split=test&seed=1', "
        "...).",
        check=_named,
    )
    n: int | str = setting(
        8, "Samples per problem (eval.n): 32; math500=32,aime24=512; or paper.", check=_samples
    )
    ks: tuple[int, ...] | None = setting(
        None,
        "k values of pass@k (eval.ks), each at most n. Default: powers of two up to n.",
        check=_eval_check("ks"),
    )
    temperature: float = setting(
        0.6, "Sampling temperature (the paper's 0.6).", check=_eval_check("temperature")
    )
    top_p: float = setting(0.95, "Nucleus sampling top-p (the paper's 0.95).", check=_eval_check("top_p"))
    max_new_tokens: int = setting(
        64, "Tokens generated at most per sample.", check=_eval_check("max_new_tokens")
    )
    seed: int = setting(0, "Sampling seed.", check=_eval_check("seed"))
    batch_size: int = setting(64, "Sequences sampled at once.", check=_eval_check("batch_size"))
    grader: str = setting(
        "auto",
        "Grader: auto (paper on the paper's benchmarks, sound elsewhere: pacs_rl.evaluation.EvalConfig) or a name.",
        check=_eval_check("grader"),
    )
    verify_workers: int = setting(
        0, "Processes that grade answers (0: this one).", check=_eval_check("verify_workers")
    )
    plain_prompt: bool = setting(
        False, "Use 'Question: ... Answer:' when the tokenizer has no chat template."
    )
    backend: str = setting("transformers", "Sampling engine.", check=_eval_check("backend"))
    dtype: str = setting("float32", "Model dtype.", check=_eval_check("dtype"))


EVAL_FIELDS = {f.name: f for f in dataclasses.fields(EvalSection)}
EVAL_DEFAULTS: dict[str, Any] = {k: list(f.default) if isinstance(f.default, tuple) else f.default
                                 for k, f in EVAL_FIELDS.items()}  # fmt: skip


PRESETS: dict[str, dict[str, Any]] = {
    # Checks the pipeline, not the science: a tiny random model, 2 methods × 1 seed × 2 steps.
    "smoke": {
        "model": "tiny",
        "methods": ["pacs", "grpo"],
        "seeds": [0],
        "train": {
            "dataset": "arithmetic?n=16&split=train&seed=0",
            "max_steps": 2,
            "learning_rate": 1e-3,
            "num_generations": 4,
            "per_device_train_batch_size": 8,
            "mini_batches_per_rollout": 1,
            "max_completion_length": 8,
            "save_steps": 1,
            "save_total_limit": 1,
        },
        "eval": {
            "benchmarks": ["arithmetic?n=4&split=test&seed=1"],
            "n": 4,
            "ks": [1, 2, 4],
            "max_new_tokens": 8,
            "batch_size": 16,
        },
    },
    # The bundled model on two-digit + and -, PACS against GRPO and PPO: 2 seeds x 12 optimizer steps (6 rollout
    # batches of 4 prompts x G = 8) each, then 64 held-out problems x n = 4 per model; sized to finish in
    # under an hour on 2 CPU cores. What it was recorded with, and how it differs from today's
    # `pacs-rl train` default: docs/RESULTS.md.
    "cpu-small": {
        "model": "smollm2-135m",
        "methods": ["pacs", "grpo", "ppo"],
        "seeds": [0, 1],
        "train": {
            "dataset": "arithmetic?n=2000&split=train&seed=0&ops=+-",
            "max_steps": 12,
            "learning_rate": 2e-5,
            "num_generations": 8,
            "per_device_train_batch_size": 16,
            "mini_batches_per_rollout": 2,
            "max_completion_length": 96,
            "temperature": 1.0,
            "save_steps": 10,
            "save_total_limit": 1,
        },
        "eval": {
            "benchmarks": ["arithmetic?n=64&split=test&seed=1&ops=+-"],
            "n": 4,
            "ks": [1, 2, 4],
            "max_new_tokens": 96,
            "batch_size": 64,
        },
    },
}


def grader_note(ev: dict[str, Any]) -> str:
    """What ``grader: auto`` resolves to for the comparison's benchmarks (``" (sound)"``); "" for a named grader."""
    if str(ev.get("grader", "auto")) != "auto":
        return ""
    graders = {b: "paper" if benchmark_name(str(b)) else TRAINING_GRADER for b in ev.get("benchmarks", [])}
    if len(set(graders.values())) == 1:
        return f" ({next(iter(graders.values()))})"
    return " (" + ", ".join(f"{g} on {b}" for b, g in graders.items()) + ")"


class CompareError(SettingsError):
    """A comparison setting that cannot be run; the message names it and what to do."""


class ManifestMismatch(CompareError):
    """The comparison folder was made with other settings."""


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run: a variant (method + sweep overrides) and a seed."""

    variant: str  # e.g. "pacs" or "pacs[pacs_beta=0.1]"
    method: str
    seed: int
    overrides: dict[str, Any]  # PACSConfig overrides of the method and sweep
    sweep: tuple[str, Any] | None = None  # (field, value) when this is a sweep variant

    @property
    def key(self) -> str:
        return f"{self.variant}/seed{self.seed}"

    @property
    def folder(self) -> str:
        """Relative folder of the run, a plain name per variant: runs/pacs__pacs_beta=0.1/seed0."""
        return f"runs/{variant_slug(self.variant)}/seed{self.seed}"


def eval_dir_of(out: Path, spec: RunSpec | None, benchmark: str) -> Path:
    """The evaluation folder of one run (``spec``) or of the base model (None) on one benchmark, named as `pacs-rl
    eval` names a benchmark's folder (:func:`pacs_rl.evaluation.runner.bench_slug`)."""
    if spec is None:
        return out / "evals" / BASE / bench_slug(benchmark)
    return out / "evals" / spec.folder.removeprefix("runs/") / bench_slug(benchmark)


def variant_slug(variant: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", variant.replace("[", "__").replace("]", ""))


# ----------------------------------------------------------------------------------------------- settings
def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``; nested dicts merge, everything else is replaced."""
    out = copy.deepcopy(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


SECTIONS = ("model", "methods", "seeds", "sweeps", "train", "method_settings", "eval", "preset")


def renamed(settings: dict[str, Any], where: str, notes: list[str] | None = None) -> dict[str, Any]:
    """``settings`` with every key of the top level and of its train and eval sections under its current name
    (TRL's model_name_or_path and dataset_name, an older train.data)."""
    out = rename_keys(settings, where, notes)
    for section in ("train", "eval"):
        if isinstance(out.get(section), dict):
            out[section] = rename_keys(out[section], f"{where} ({section})", notes)
    return out


def load_settings_file(path: str | Path, notes: list[str] | None = None) -> dict[str, Any]:
    """A YAML or JSON settings file as a dict, keys under their current names (``notes`` gets a line per older
    spelling); a syntax error names the file, line and column."""
    try:
        data = renamed(read_yaml(path), str(path), notes)
    except SettingsError as e:
        raise CompareError(str(e)) from None
    unknown = set(data) - set(SECTIONS)
    if unknown:
        raise CompareError(
            f"--config {path}: unknown key(s) {sorted(unknown)}; known: {', '.join(SECTIONS[:-1])}."
        )
    return data


def _methods(name: str, value: Any) -> str | None:
    if not value:
        return "--methods is empty; give e.g. --methods pacs,grpo."
    unknown = [m for m in value if m not in method_names()]
    if unknown:
        return f"--methods: unknown method(s) {unknown}; known: {', '.join(method_names())}."
    return f"--methods lists a method twice: {list(value)}." if len(set(value)) != len(value) else None


def _seeds(name: str, value: Any) -> str | None:
    ok = value and len(set(value)) == len(value) and all(isinstance(s, int) and s >= 0 for s in value)
    return None if ok else f"seeds must be a non-empty list of distinct whole numbers >= 0, got {value!r}."


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A comparison's settings besides its sections (``train``: `pacs-rl train`'s settings shared by every run,
    TRAIN_DEFAULTS; ``eval``: :class:`EvalSection`; ``sweeps``, ``method_settings``)."""

    model: str = setting(
        "smollm2-135m",
        "Base model: bundled alias smollm2-135m, tiny (a tiny random model), Hub id or local folder.",
    )
    methods: tuple[str, ...] = setting(
        ("pacs", "grpo"), "Methods, each a run per seed (compare/methods.py).", check=_methods
    )
    seeds: tuple[int, ...] = setting((0,), "Seeds: one run per method and seed.", check=_seeds)


TOP_FIELDS = {f.name: f for f in dataclasses.fields(Comparison)}


def resolve_settings(
    preset: str | None = None, config: dict[str, Any] | None = None, cli: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Defaults ← preset ← settings file ← command-line options. Returns a complete, checked dict."""
    settings: dict[str, Any] = {
        **{k: list(f.default) if isinstance(f.default, tuple) else f.default for k, f in TOP_FIELDS.items()},
        "sweeps": {},
        "train": dict(TRAIN_DEFAULTS),
        "eval": dict(EVAL_DEFAULTS),
    }
    config = renamed(dict(config or {}), "the settings")
    preset = preset or config.pop("preset", None)
    config.pop("preset", None)
    if preset is not None:
        if preset not in PRESETS:
            raise CompareError(f"--preset {preset!r} is unknown; use one of {', '.join(PRESETS)}.")
        settings = deep_merge(settings, PRESETS[preset])
    settings = deep_merge(settings, config)
    for key, value in (cli or {}).items():
        if value is None:
            continue
        if key in ("train", "eval"):
            settings[key] = deep_merge(settings[key], value)
        elif key == "sweeps":
            settings["sweeps"] = {**settings.get("sweeps", {}), **value}
        else:
            settings[key] = value
    settings["preset"] = preset
    check_settings(settings)
    return settings


def _pacs_fields() -> dict[str, dataclasses.Field]:
    """The trainer config fields every method shares (PACSConfig's: a PPO critic field is per method)."""
    return _training().config_fields("pacs")


def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def shared_config_keys(loss_type: str | None = None) -> set[str]:
    """The trainer config fields a comparison may set: every method's (a critic field only for a critic loss)."""
    critic = set(CRITIC_FIELDS) if loss_type not in CRITIC_LOSS_TYPES else set()
    return {*GRPO_FIELDS, *CONFIG_FIELDS, *CRITIC_FIELDS} - critic


def check_settings(settings: dict[str, Any]) -> None:
    """Refuse unknown methods, unknown or mistyped fields, reserved fields and empty lists, by name: all of it
    without torch or TRL. A comma-separated ``methods`` and a number of ``seeds`` are made lists in place."""
    _check_methods_and_seeds(settings)
    _check_train(settings["train"])
    _check_sweeps(settings.get("sweeps", {}))
    _check_method_settings(settings)
    _check_eval(settings["eval"])


def _check_methods_and_seeds(settings: dict[str, Any]) -> None:
    """methods and seeds by their declared checks, a comma-separated ``methods`` made a list and a number N of
    ``seeds`` made seeds 0..N-1 first."""
    if isinstance(settings["methods"], str):
        settings["methods"] = [m.strip() for m in settings["methods"].split(",") if m.strip()]
    if isinstance(settings["seeds"], int) and not isinstance(settings["seeds"], bool):
        settings["seeds"] = list(range(settings["seeds"]))
    problems = declared_problems(settings, TOP_FIELDS.values())
    if problems:
        raise CompareError(problems[0])


def _check_train(train: dict[str, Any]) -> None:
    """The train section: a dataset, then only data settings and PACSConfig fields every method shares (none the
    comparison sets itself), each of its type and usable together (the packages are checked where it runs)."""
    fields = shared_config_keys()
    if "dataset" not in train:
        raise CompareError(
            "train.dataset is missing: the training problems (e.g. 'arithmetic?n=256&split=train')."
        )
    for key in train:
        if key in ("dataset", *DATA_KEYS):
            continue
        if key in RESERVED_TRAIN_KEYS:
            raise CompareError(
                f"train.{key} is set by the comparison itself (per run / per method); remove it from the settings."
            )
        if key not in fields:
            close = difflib.get_close_matches(key, [*fields, "dataset", *DATA_KEYS], n=3, cutoff=0.6)
            hint = f"did you mean {', '.join(close)}?" if close else "see `pacs-rl train --list-keys`."
            raise CompareError(f"train.{key} is neither a data setting nor a PACSConfig field; {hint}")
    try:
        typed = {k: coerce_setting(k, v) for k, v in train.items()}
    except SettingsError as e:
        raise CompareError(f"train: {e}") from None
    problems = config_problems(typed, installed=False)  # the packages: where it runs (pacs-rl compare checks)
    if problems:
        raise CompareError(f"train: {problems[0]}")


def _check_sweeps(sweeps: dict[str, Any]) -> None:
    """Each sweep: a shared PACSConfig field the comparison does not set itself, with at least one value."""
    fields = shared_config_keys()
    for name, values in sweeps.items():
        if name not in fields or name in RESERVED_TRAIN_KEYS:
            raise CompareError(
                f"--sweep {name}=...: {name!r} is not a PACSConfig field that can be swept "
                "(e.g. pacs_beta, pacs_score, pacs_weighted, reference, ref_reset_steps)."
            )
        if not isinstance(values, list) or not values:
            raise CompareError(f"--sweep {name}: give at least one value, e.g. --sweep {name}=0.1,1,10.")


def _check_eval(ev: dict[str, Any]) -> None:
    """The eval section: known keys, each typed (in place) and checked by its declaration (:class:`EvalSection`),
    then an n `pacs-rl eval --n` takes for these benchmarks and ks within 1..n."""
    unknown_eval = set(ev) - set(EVAL_FIELDS) - set(DATA_KEYS)
    if unknown_eval:
        raise CompareError(
            f"eval: unknown key(s) {sorted(unknown_eval)}; known: {', '.join([*EVAL_FIELDS, *DATA_KEYS])}."
        )
    try:
        ev.update(
            {k: coerce(f"eval.{k}", v, str(EVAL_FIELDS[k].type)) for k, v in ev.items() if k in EVAL_FIELDS}
        )
    except SettingsError as e:
        raise CompareError(str(e)) from None
    problems = declared_problems(ev, EVAL_FIELDS.values(), prefix="eval.")
    if problems:
        raise CompareError(problems[0])
    try:
        default_n, by_bench = parse_samples(str(ev["n"]), ev["benchmarks"])
    except ValueError as e:
        raise CompareError(f"eval.n: {e}") from None
    ks = ev.get("ks")
    smallest = min([default_n, *by_bench.values()])
    if ks is not None and any(int(k) < 1 or int(k) > smallest for k in ks):
        raise CompareError(f"eval.ks {ks} must lie in 1..n (n = {ev['n']}).")


def _check_method_settings(settings: dict[str, Any]) -> None:
    """method_settings: {method: {field: value}} for methods of this comparison, fields of that method's config
    class, never a budget or reserved field."""
    per_method = settings.get("method_settings") or {}
    if not isinstance(per_method, dict):
        raise CompareError(
            f"method_settings must map method -> {{field: value}}, got {type(per_method).__name__}."
        )
    for method, values in per_method.items():
        if method not in settings["methods"]:
            raise CompareError(
                f"method_settings.{method}: {method!r} is not among the methods of this comparison "
                f"({', '.join(settings['methods'])})."
            )
        if not isinstance(values, dict):
            raise CompareError(
                f"method_settings.{method} must map field -> value, got {type(values).__name__}."
            )
        fields = shared_config_keys(method_overrides(method)["loss_type"])
        for key in values:
            if key in BUDGET_KEYS or key in RESERVED_TRAIN_KEYS:
                raise CompareError(
                    f"method_settings.{method}.{key}: {key} must be the same for every method (the rollout budget or a "
                    "field the comparison sets itself); set it in train."
                )
            if key not in fields:
                raise CompareError(
                    f"method_settings.{method}.{key} is not a field of {method}'s config; see `pacs-rl train --list-keys`."
                )


def parse_sweep(text: str) -> tuple[str, list[Any]]:
    """``"pacs_beta=0.1,0.5,1"`` -> ``("pacs_beta", [0.1, 0.5, 1.0])``, each value typed as the field is."""
    if "=" not in text:
        raise CompareError(f"--sweep {text!r}: expected FIELD=V1,V2,... e.g. --sweep pacs_beta=0.1,1,10.")
    name, _, raw = text.partition("=")
    name = name.strip()
    if name not in shared_config_keys():
        raise CompareError(
            f"--sweep {text!r}: {name!r} is not a PACSConfig field (e.g. pacs_beta, pacs_score)."
        )
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not values:
        raise CompareError(f"--sweep {text!r}: no values after '='.")
    try:
        return name, [coerce_setting(name, v) for v in values]
    except ValueError as e:
        raise CompareError(f"--sweep {text!r}: {e}.") from None


PROMPT_KEYS = ("instruction", "system_prompt")  # the training section's prompt is the evaluation's too


def run_settings(settings: dict[str, Any], base_model: str) -> RunSettings:
    """The RunSettings of every training run of a comparison (`pacs-rl train`'s run keys): the train section's
    dataset and data settings, no held-out evaluation (the comparison evaluates every model itself)."""
    train = settings["train"]
    return RunSettings(
        model=base_model,
        dataset=train["dataset"],
        train_size=0,
        eval_size=0,  # the comparison evaluates every model itself, with one protocol
        # an arithmetic source string means here what it means to the evaluation (load_problems): its own
        # ops=/digits=, else the task's defaults, not `pacs-rl train`'s CPU default task
        arithmetic_ops=ARITHMETIC_OPS,
        arithmetic_digits=str(ARITHMETIC_DIGITS),
        **{k: coerce_setting(k, train[k]) for k in DATA_KEYS if k in train},
    )


def eval_data_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The data settings of the evaluations: the eval section's, the training prompt where it sets none."""
    train, ev = settings["train"], settings["eval"]
    given = {**{k: train[k] for k in PROMPT_KEYS if k in train}, **{k: ev[k] for k in DATA_KEYS if k in ev}}
    return {k: coerce_setting(k, v) for k, v in given.items()}


_DATA_CHECKED: set[str] = (
    set()
)  # the train sections whose data was read (once per process: one skipped-row note)


def check_training_data(settings: dict[str, Any]) -> None:
    """Read the training problems once (no model, no torch) so that a bad train.dataset fails before anything
    runs or is written."""
    key = json.dumps(settings["train"], sort_keys=True, default=str)
    if key in _DATA_CHECKED:
        return
    try:
        load_run_data(run_settings(settings, settings["model"]), seed=0)
    except SettingsError as e:
        raise CompareError(f"train.dataset cannot be used: {e}") from None
    _DATA_CHECKED.add(key)


# ----------------------------------------------------------------------------------------------- plan
def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def build_plan(settings: dict[str, Any]) -> list[RunSpec]:
    """Every (variant, seed) to train, methods first, then one variant per sweep value.

    A sweep applies to the methods it can change: PACS fields (``pacs_*``) to methods with
    loss_type='pacs', other fields to every method. A sweep value that equals what a method already
    uses is not trained twice: it maps onto that method's run (see :func:`sweep_table`)."""
    fields = _pacs_fields()
    specs: list[RunSpec] = []
    seen: dict[str, str] = {}  # effective overrides -> variant name

    def effective(overrides: dict[str, Any]) -> str:
        """The overrides that change something relative to the shared train settings / field defaults."""
        eff = {}
        for k, v in overrides.items():
            base = settings["train"].get(k, _field_default(fields[k]) if k in fields else dataclasses.MISSING)
            if k == "loss_type" or base is dataclasses.MISSING or base != v:
                eff[k] = v
        return json.dumps(eff, sort_keys=True, default=str)

    variants: list[tuple[str, str, dict[str, Any], tuple[str, Any] | None]] = []
    for m in settings["methods"]:
        variants.append((m, m, method_config_overrides(settings, m), None))
    for name, values in settings.get("sweeps", {}).items():
        for m in settings["methods"]:
            if name.startswith("pacs_") and method_overrides(m)["loss_type"] != "pacs":
                continue
            for v in values:
                overrides = {**method_config_overrides(settings, m), name: v}
                variants.append((f"{m}[{name}={_fmt(v)}]", m, overrides, (name, v)))
    for variant, method, overrides, sweep in variants:
        eff = effective(overrides)
        if eff in seen:
            continue  # same training as an earlier variant
        seen[eff] = variant
        for s in settings["seeds"]:
            specs.append(RunSpec(variant, method, int(s), overrides, sweep))
    return specs


def sweep_table(settings: dict[str, Any], plan: list[RunSpec]) -> dict[str, dict[str, dict[Any, str]]]:
    """{field: {method: {value: variant}}}: which trained variant holds each sweep value.

    A value equal to the method's own setting points at the method's plain run."""
    fields = _pacs_fields()
    variants = {s.variant for s in plan}
    out: dict[str, dict[str, dict[Any, str]]] = {}
    for name, values in settings.get("sweeps", {}).items():
        for m in settings["methods"]:
            if name.startswith("pacs_") and method_overrides(m)["loss_type"] != "pacs":
                continue
            own = method_config_overrides(settings, m).get(
                name, settings["train"].get(name, _field_default(fields[name]))
            )
            for v in values:
                variant = f"{m}[{name}={_fmt(v)}]"
                if variant not in variants and v == own:
                    variant = m
                if variant in variants:
                    out.setdefault(name, {}).setdefault(m, {})[v] = variant
    return out


# ----------------------------------------------------------------------------------------------- manifest
def manifest_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The part of the settings that defines the results (everything but the preset's name)."""
    return json.loads(json.dumps({k: v for k, v in settings.items() if k != "preset"}, default=str))


def write_or_check_manifest(out: Path, settings: dict[str, Any], plan: list[RunSpec]) -> dict[str, Any]:
    """Create ``manifest.json``, or check that the one there was written with the same settings.

    Raises ManifestMismatch listing every differing setting."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / MANIFEST_FILE
    wanted = manifest_settings(settings)
    runs = [{"key": s.key, "variant": s.variant, "method": s.method, "seed": s.seed,
             "overrides": s.overrides, "folder": s.folder} for s in plan]  # fmt: skip
    if path.is_file():
        old = json.loads(path.read_text())
        # an evaluation key added to this version after the folder was made counts at its default value
        recorded = deep_merge({"eval": EVAL_DEFAULTS}, renamed(old.get("settings", {}), str(path)))
        diffs = _diff(recorded, wanted)
        if diffs:
            lines = "\n".join(f"  {k}: folder has {a!r}, this command has {b!r}" for k, a, b in diffs)
            raise ManifestMismatch(
                f"{out} holds a comparison made with other settings:\n{lines}\n"
                "Rerun with the same settings to resume it, or choose another --output-dir."
            )
        return old
    manifest = {
        "version": MANIFEST_VERSION,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "preset": settings.get("preset"),
        "settings": wanted,
        "runs": json.loads(json.dumps(runs, default=str)),
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2))
    tmp.replace(path)
    return manifest


def as_recorded(plan: list[RunSpec], manifest: dict[str, Any]) -> tuple[list[RunSpec], list[str]]:
    """The plan with each run the folder's manifest records taking its recorded overrides (a folder keeps what its
    runs were trained with, where a method's name has since changed meaning), and a line per variant that does."""
    recorded = {r["key"]: r.get("overrides") for r in manifest.get("runs", [])}
    out, changed = [], {}
    for spec in plan:
        old = recorded.get(spec.key)
        if old is not None and old != json.loads(json.dumps(spec.overrides, default=str)):
            changed[spec.variant] = (old, spec.overrides)
            spec = dataclasses.replace(spec, overrides=old)
        out.append(spec)
    lines = [f"{v}: this folder's runs keep the settings they were trained with, {old}; a new folder's {v} is {new}"
             for v, (old, new) in changed.items()]  # fmt: skip
    return out, lines


def _diff(a: Any, b: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += _diff(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else str(k))
        return out
    return [] if a == b else [(prefix or "settings", a, b)]
