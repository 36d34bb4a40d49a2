"""The one planner of a comparison: which methods and variants it trains (methods × variants), on which seeds, in
which order, and, for `pacs-rl compare`, its settings (presets, a settings file, the options) made into the protocol
its record holds (`pacs_rl.compare.record`).

A *method* is a name of the method table (compare/methods.py: ``pacs`` = PACS unclipped as its authors ran it,
``pacs_clip`` = PACS with clip 1.0, ...) or any registered loss; a *variant* is a method with settings of its own,
spelt ``pacs[pacs_beta=0.1]``; a *run* is a variant and a seed. Every variant is read and checked as `pacs-rl train`
reads and checks its settings (its names known, close matches named; each value typed and in its domain; the whole
run's config too), before anything runs, in the dry run and the run alike.

`pacs-rl compare`'s settings (a YAML/JSON file, a preset, then the command-line options, each over the previous)::

    model: smollm2-135m            # base model: bundled alias, Hub id or local folder ("tiny" = a tiny random one)
    methods: [pacs, grpo, "pacs[pacs_beta=0.5]"]
    seeds: [0, 1]
    sweeps: {pacs_beta: [0.1, 1, 10]}   # another spelling of variants: pacs[pacs_beta=0.1], pacs[pacs_beta=10]
    train:  {dataset: "arithmetic?n=256&split=train", max_steps: 8, ...a data setting or a trainer config field}
    method_settings: {grpo: {max_grad_norm: 1.0}, pacs: {max_grad_norm: null}}   # optional, per method
    eval:   {benchmarks: ["arithmetic?n=40&split=test&seed=1"], n: 8, ks: [1, 2, 4, 8], temperature: 0.6, ...}

Every run starts from the same base model, sees the same training problems in the same order for a given seed, and
has the same rollout budget (the ``train`` section, shared); a variant or ``method_settings`` changes what it names.
Both sections take the data settings of `pacs-rl train` and `eval` (pacs_rl.settings.DataSettings); the prompt of
the training section (instruction, system_prompt) is the evaluation's too unless the eval section sets its own.
``eval.n`` is written as `pacs-rl eval --n` is: 32, math500=32,aime24=512, or paper.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pacs_rl.compare.methods import (
    RESERVED_KEYS,
    CompareError,
    base_method,
    method_names,
    split_methods,
    variant_overrides,
    variant_values,
)
from pacs_rl.compare.record import PRIMARY, PROTOCOL, complete_seeds, cpu_default
from pacs_rl.data import ARITHMETIC_DIGITS, ARITHMETIC_OPS, benchmark_name
from pacs_rl.evaluation.runner import EvalConfig, parse_samples, samples_per_benchmark
from pacs_rl.rewards.graders import TRAINING_GRADER
from pacs_rl.settings.aliases import rename_keys
from pacs_rl.settings.data import DATA_KEYS
from pacs_rl.settings.declarations import Check, declared, declared_problems, setting
from pacs_rl.settings.errors import SettingsError
from pacs_rl.settings.reading import coerce, read_yaml
from pacs_rl.training.checks import coerce_setting, config_problems, read_settings, split_typed
from pacs_rl.training.data import load_run_data
from pacs_rl.training.schema import RUN_FIELDS

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
    unknown = [m for m in value if base_method(m) not in method_names()]
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
        ("pacs", "grpo"),
        "Methods and variants (pacs[pacs_beta=0.5]), each a run per seed (compare/methods.py).",
        check=_methods,
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


def check_settings(settings: dict[str, Any]) -> None:
    """Refuse, by name and without torch or TRL, what `pacs-rl train` would refuse in any run of the comparison and
    what the comparison cannot run: unknown methods and settings (close matches named), values out of their domain,
    a method or variant named twice, a setting the comparison sets itself, a sweep that varies nothing, empty lists.
    A comma-separated ``methods`` and a number of ``seeds`` are made lists in place."""
    _check_methods_and_seeds(settings)
    _check_train(settings["train"])
    _check_method_settings(settings)
    _check_eval(settings["eval"])
    variants(settings)  # every method, variant and sweep value, and every run's whole config


def _check_methods_and_seeds(settings: dict[str, Any]) -> None:
    """methods and seeds by their declared checks, a comma-separated ``methods`` made a list (a variant's own commas
    kept) and a number N of ``seeds`` made seeds 0..N-1 first."""
    settings["methods"] = split_methods(settings["methods"]) or []
    if isinstance(settings["seeds"], int) and not isinstance(settings["seeds"], bool):
        settings["seeds"] = list(range(settings["seeds"]))
    problems = declared_problems(settings, TOP_FIELDS.values())
    if problems:
        raise CompareError(problems[0])


def _check_train(train: dict[str, Any]) -> None:
    """The train section: a dataset, then settings every run shares, read and checked as `pacs-rl train` reads them
    (known names, close matches named; typed; in their domain): data settings and trainer config fields, none the
    comparison sets itself (the packages are checked where it runs)."""
    if "dataset" not in train:
        raise CompareError(
            "train.dataset is missing: the training problems (e.g. 'arithmetic?n=256&split=train')."
        )
    try:
        typed = read_settings(train, "train")
    except SettingsError as e:
        raise CompareError(str(e)) from None
    for key in typed:
        if key in RESERVED_KEYS or (key in RUN_FIELDS and key not in ("dataset", *DATA_KEYS)):
            raise CompareError(f"train.{key} is set by the comparison itself (the model, every run's seed and "
                               "folder, the method's loss, its own evaluation); remove it from the settings.")  # fmt: skip
    problems = config_problems(train_config(train), installed=False)
    if problems:
        raise CompareError(f"train: {problems[0]}")


def train_config(train: dict[str, Any]) -> dict[str, Any]:
    """The trainer config fields of a train section, typed (its dataset and data settings left out)."""
    return {k: coerce_setting(k, v) for k, v in train.items() if k not in ("dataset", *DATA_KEYS)}


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
    """method_settings: {method: {field: value}} for methods of this comparison, never a budget field (each value
    is read and checked with the method's variants, by `variants`)."""
    per_method = settings.get("method_settings") or {}
    if not isinstance(per_method, dict):
        raise CompareError(
            f"method_settings must map method -> {{field: value}}, got {type(per_method).__name__}."
        )
    bases = [base_method(m) for m in settings["methods"]]
    for method, values in per_method.items():
        if method not in bases:
            raise CompareError(
                f"method_settings.{method}: {method!r} is not among the methods of this comparison "
                f"({', '.join(settings['methods'])})."
            )
        if not isinstance(values, dict):
            raise CompareError(
                f"method_settings.{method} must map field -> value, got {type(values).__name__}."
            )
        for key in values:
            if key in BUDGET_KEYS:
                raise CompareError(
                    f"method_settings.{method}.{key}: {key} must be the same for every method (the rollout budget); "
                    "set it in train."
                )


def parse_sweep(text: str) -> tuple[str, list[Any]]:
    """``"pacs_beta=0.1,0.5,1"`` -> ``("pacs_beta", [0.1, 0.5, 1.0])``, the name read and each value typed as
    `pacs-rl train` reads them (an unknown name refused with its close matches)."""
    name, eq, raw = text.partition("=")
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not eq or not values:
        raise CompareError(f"--sweep {text!r}: expected FIELD=V1,V2,... e.g. --sweep pacs_beta=0.1,1,10.")
    try:
        return name.strip(), [
            read_settings({name.strip(): v}, f"--sweep {text!r}")[name.strip()] for v in values
        ]
    except SettingsError as e:
        raise CompareError(str(e)) from None


# ----------------------------------------------------------------------------------------------- variants
def _text(value: Any) -> str:
    """A value as a variant's name writes it, read back as the same value: 0.1, 1e-05, true, null, rloo."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def variant_name(spec: str, key: str, value: Any) -> str:
    """``spec`` (a method or variant) with ``key`` set to ``value``: pacs[reference=frozen] -> pacs[reference=frozen,
    pacs_beta=0.1]."""
    name, _, rest = spec.partition("[")
    items = [i for i in rest.rstrip("]").split(",") if i and i.partition("=")[0].strip() != key]
    return f"{name}[{','.join([*items, f'{key}={_text(value)}'])}]"


def variants(settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every variant a comparison trains, name -> its config overrides: the methods as listed (their
    ``method_settings`` under a variant's own settings), then one variant per sweep value of each method the swept
    setting applies to (a PACS option: the PACS methods), unless it trains as an earlier one (a value a method
    already has is its plain run). Each is read and checked as `pacs-rl train` checks it, alone and as the whole run's
    config with the train section; refused (CompareError) too: a method that trains as another listed before it, a
    sweep that varies none of the methods."""
    return _expand(settings)[0]


def sweep_table(settings: dict[str, Any]) -> dict[str, dict[str, list]]:
    """{setting: {method: [[value, variant], ...]}}: which variant holds each sweep value (a value a method already
    has: its plain run)."""
    return _expand(settings)[1]


def _expand(settings: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, list]]]:
    shared = {**cpu_default(), **train_config(settings["train"])}
    per_method = settings.get("method_settings") or {}
    out: dict[str, dict[str, Any]] = {}
    given: dict[str, dict[str, Any]] = {}  # a listed variant's own settings, method_settings under them

    def add(name: str, values: dict[str, Any], where: str) -> str:
        overrides = _checked(settings, base_method(name), values, where)
        first = next((v for v, o in out.items() if {**shared, **o} == {**shared, **overrides}), name)
        out.setdefault(first, overrides)
        return first

    for spec in settings["methods"]:
        base, values = variant_values(spec)
        given[spec] = {**per_method.get(base, {}), **values}
        first = add(
            spec,
            given[spec],
            f"--methods {spec!r}" + (f" (with method_settings.{base})" if base in per_method else ""),
        )
        if first != spec:
            raise CompareError(same_training(spec, first))
    table: dict[str, dict[str, list]] = {}
    for key, values in (settings.get("sweeps") or {}).items():
        if not isinstance(values, list) or not values:
            raise CompareError(f"--sweep {key}: give at least one value, e.g. --sweep {key}=0.1,1,10.")
        applies = [
            m for m in settings["methods"] if not key.startswith("pacs_") or out[m]["loss_type"] == "pacs"
        ]
        if not applies:
            raise CompareError(f"--sweep {key}=...: none of the methods {settings['methods']} has {key} (a PACS "
                               "option varies the PACS methods); add one, or sweep another setting")  # fmt: skip
        for spec in applies:
            table.setdefault(key, {})[spec] = [
                [
                    v,
                    add(
                        variant_name(spec, key, v),
                        {**given[spec], key: v},
                        f"--sweep {key}={_text(v)} ({spec})",
                    ),
                ]
                for v in values
            ]
    return out, table


def same_training(name: str, first: str) -> str:
    """The refusal of a method listed after one it trains as."""
    return f"--methods: {name} trains as {first} (every setting the same); list it once."


def duplicate_problem(methods: dict[str, dict[str, Any]], shared: dict[str, Any]) -> str | None:
    """Why ``methods`` (name -> config overrides) name one training twice (None when they do not), each over the
    settings every run shares (``shared``)."""
    for i, (name, overrides) in enumerate(methods.items()):
        first = next(
            (m for m, o in list(methods.items())[:i] if {**shared, **o} == {**shared, **overrides}), None
        )
        if first is not None:
            return same_training(name, first)
    return None


def _checked(settings: dict[str, Any], method: str, values: dict[str, Any], where: str) -> dict[str, Any]:
    """The overrides of a variant of ``method`` (``values`` over the method's own), checked alone and as the whole
    run's config with the train section (a group that does not fit the batch, a critic field without a critic,
    ...); a refusal starts with ``where``."""
    overrides = variant_overrides(method, values, where)
    problems = config_problems({**train_config(settings["train"]), **overrides}, installed=False)
    if problems:
        raise CompareError(f"{where} with the train section: {'; '.join(problems)}")
    return overrides


def sweep_note(settings: dict[str, Any]) -> str | None:
    """What the sweeps expand to, in one line (`pacs-rl compare` prints it): each a spelling of variants."""
    parts = [f"{key}={_text(v)} of {spec}: {name if name != spec else 'its own run'}"
             for key, by_method in sweep_table(settings).items() for spec, pairs in by_method.items()
             for v, name in pairs]  # fmt: skip
    return f"--sweep is a spelling of variants: {'; '.join(parts)}" if parts else None


# ----------------------------------------------------------------------------------------------- the protocol
PROMPT_KEYS = ("instruction", "system_prompt")  # the training section's prompt is the evaluation's too


def run_keys(settings: dict[str, Any]) -> dict[str, Any]:
    """The `pacs-rl train` run keys of every run of a comparison: the base model, the train section's dataset and
    data settings, no held-out evaluation (the comparison evaluates every model itself)."""
    train = settings["train"]
    return {
        "model": settings["model"],
        "dataset": train["dataset"],
        "train_size": 0,
        "eval_size": 0,  # the comparison evaluates every model itself, with one protocol
        # an arithmetic source string means here what it means to the evaluation (load_problems): its own
        # ops=/digits=, else the task's defaults, not `pacs-rl train`'s CPU default task
        "arithmetic_ops": ARITHMETIC_OPS,
        "arithmetic_digits": str(ARITHMETIC_DIGITS),
        **{k: coerce_setting(k, train[k]) for k in DATA_KEYS if k in train},
    }


def eval_data_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The data settings of the evaluations: the eval section's, the training prompt where it sets none."""
    train, ev = settings["train"], settings["eval"]
    given = {**{k: train[k] for k in PROMPT_KEYS if k in train}, **{k: ev[k] for k in DATA_KEYS if k in ev}}
    return {k: coerce_setting(k, v) for k, v in given.items()}


def comparison_protocol(settings: dict[str, Any]) -> dict[str, Any]:
    """What every run of a planned comparison shares, as its record holds it: the runs' `pacs-rl train` settings
    (``train``, over the CPU default it holds, ``cpu_default``), the variants with their config overrides
    (``methods``), which variant holds each sweep value (``sweeps``), and the evaluation (``eval``: the section's
    settings, its data settings, and per benchmark the n and ks drawn)."""
    ev = {k: v for k, v in settings["eval"].items() if k not in DATA_KEYS}
    default_n, by_bench = parse_samples(str(ev["n"]), ev["benchmarks"])
    ns = samples_per_benchmark(ev["benchmarks"], by_bench, default_n)
    drawn = {b: {"n": n, "ks": EvalConfig(model="-", benchmark=b, n=n, ks=ev.get("ks")).resolved_ks()}
             for b, n in zip(ev["benchmarks"], ns, strict=True)}  # fmt: skip
    trained, table = _expand(settings)
    proto = {
        "version": PROTOCOL["version"],
        "train": {**run_keys(settings), **train_config(settings["train"])},
        "methods": trained,
        "sweeps": table,
        "eval": {**ev, "data": eval_data_settings(settings), "samples": drawn},
        "cpu_default": cpu_default(),
    }
    return json.loads(json.dumps(proto, default=str))


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
        run, _ = split_typed({**run_keys(settings), "model": settings["model"]})
        load_run_data(run, seed=0)
    except SettingsError as e:
        raise CompareError(f"train.dataset cannot be used: {e}") from None
    _DATA_CHECKED.add(key)


# ----------------------------------------------------------------------------------------------- the runs' order
def paired_arms_problem(methods: Iterable[str], max_pairs_given: bool) -> str | None:
    """Why a paired record of ``methods`` could never stop by its rule (PACS − GRPO within the target): it lacks a
    ``pacs`` or a ``grpo`` arm, and no --max-pairs stops it instead (None when it can stop)."""
    missing = [m for m in ("pacs", PRIMARY) if m not in methods]
    if not missing or max_pairs_given:
        return None
    return (f"--methods {','.join(methods)}: a paired record without a {' and a '.join(missing)} arm never reaches "
            f"its stopping rule (PACS − {PRIMARY} within the target); add {','.join(missing)}, or give --max-pairs N "
            "to stop after N seeds")  # fmt: skip


def next_jobs(
    record: dict,
    methods: list[str],
    full_seeds: int | None = None,
    first_seed: int = 0,
    seeds: Iterable[int] | None = None,
) -> Iterator[tuple[str | None, int | None]]:
    """(method, seed) in order: the base model, then seed after seed (``seeds``, else from ``first_seed`` on without
    end), every method of a seed together, what the record does not hold. From seed ``full_seeds`` on, only PACS and
    PRIMARY (the pair a paired record's stopping rule is on) when the record has both."""
    have = {(r["method"], r["seed"]) for r in record["runs"]}
    base = record.get("base")
    if base is None or (
        record.get("protocol", {}).get("passk") and "passk" not in base
    ):  # pass@k taken on later
        yield None, None
    pair = [m for m in methods if m in ("pacs", PRIMARY)]
    for seed in itertools.count(first_seed) if seeds is None else seeds:
        later = full_seeds is not None and seed >= full_seeds and len(pair) == 2
        for method in pair if later else methods:
            if (method, seed) not in have:
                yield method, seed


def other_jobs(record: dict, methods: list[str], full_seeds: int | None = None) -> list[tuple[str, int]]:
    """Once PACS − PRIMARY has its interval: the record's other methods on the seeds that hold that pair, seed by
    seed, what the record does not have yet; with ``full_seeds``, only on the first ``full_seeds`` of those seeds,
    as the protocol's --full-seeds promises."""
    have = {(r["method"], r["seed"]) for r in record["runs"]}
    paired_seeds = complete_seeds(record, ["pacs", PRIMARY])[:full_seeds]  # [:None]: every one
    others = [m for m in methods if m not in ("pacs", PRIMARY)]
    return [(m, s) for s in paired_seeds for m in others if (m, s) not in have]
