"""What `pacs-rl train`, `eval` and `compare` share: the data and prompt settings, one vocabulary for their
options, and the checks that need neither torch nor TRL (so that a mistake is answered before they load).

One name per idea across the three commands:

    the output folder                   --output-dir, -o    (setting key output_dir)
    the model                           --model, -m         ("tiny": a tiny random model, built in code)
    the training problems               --dataset, -d       (train; compare's train.dataset)
    the problems scored with pass@k     --benchmarks, -b    (eval, compare; train's held-out set is
                                                             eval_dataset, TRL's name for it)
    optimizer steps                     --max-steps         (TRL's max_steps)
    the random seed                     --seed              (compare: one run per seed, --seed 0,1,2)
    samples per problem                 --n                 (32, math500=32,aime24=512, or paper)
    bad data rows                       --skip-bad-rows / --no-skip-bad-rows
    a settings file                     --config, -c

Older spellings still work and print a one-line note (:data:`ALIASES`, every other spelling in one table); TRL's
spellings (``--output_dir``, ``model_name_or_path``, ``dataset_name``, ``use_peft``, ...) work as they are.
"""

from __future__ import annotations

import difflib
import importlib.util
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any

import yaml

from pacs_rl.algorithms.options import LossOption
from pacs_rl.data.prompts import INSTRUCTION


class SettingsError(ValueError):
    """A setting, option or path that cannot be used as given; the message names it and what to do."""


def one_line(text: str) -> str:
    """``text`` on one line (an error is one line, however its parts were written): lines joined by '; ', or by
    a space after a line that ends with ':'."""
    out = ""
    for part in (p.strip() for p in str(text).splitlines() if p.strip()):
        out += part if not out else (" " if out.endswith(":") else "; ") + part
    return out


# ---------------------------------------------------------------------------------------------------- declaring
class Declared:
    """What a setting's declaration holds beyond a dataclass field's help and choices (kept out of the field's
    metadata, which argparse-based parsers such as transformers' HfArgumentParser pass to argparse whole): its
    check, ``check(name, value)`` -> a problem's text, a list of them, or None; and the loss's keyword the trainer
    fills from the setting."""

    __slots__ = ("check", "loss_option")

    def __init__(self, check: Callable[[str, Any], Any] | None = None, loss_option: str | None = None):
        self.check, self.loss_option = check, loss_option


_DECLARED: dict[Any, Declared] = {}  # dataclass field -> its declaration (a field is hashed by identity)


def setting(
    default: Any,
    help: str,
    *,
    check: Callable[[str, Any], Any] | None = None,
    choices: Iterable[str] | None = None,
    loss_option: str | None = None,
) -> Any:
    """The declaration of one setting, as a dataclass field: its default and help, and where it has them the check
    that needs no torch (``check(name, value)``: a problem's text, a list of them, or None), the choices shown in
    the help, and the loss option the trainer fills from it (``loss_option``: the loss's keyword)."""
    metadata = {"help": help, **({"choices": list(choices)} if choices else {})}
    declared = field(default=default, metadata=metadata)
    _DECLARED[declared] = Declared(check, loss_option)
    return declared


def declared(f: Any) -> Declared:
    """The declaration of dataclass field ``f`` beyond its help (an empty one for a field not made by `setting`)."""
    return _DECLARED.get(f, Declared())


def is_declared(f: Any) -> bool:
    """Whether dataclass field ``f`` was made by `setting`."""
    return f in _DECLARED


# ---------------------------------------------------------------------------------------------------- checks
# A check is ``check(name, value)`` -> a problem's text naming the setting and what to do, a list of them, or None.
Check = Callable[[str, Any], "str | list[str] | None"]


def whole(value: Any) -> bool:
    """An int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def number(value: Any) -> bool:
    """An int or a float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def rule(ok: Callable[[Any], bool], advice: str, null: bool = False) -> Check:
    """``name=value`` + ``advice`` unless ``ok(value)`` (or the value is None, with ``null``)."""

    def check(name: str, value: Any) -> str | None:
        return None if (null and value is None) or ok(value) else f"{name}={value!r}{advice}"

    return check


def at_least(least: int, note: str = "", null: bool = False) -> Check:
    """A whole number >= ``least``, its type checked too (``null``: or None)."""
    return rule(lambda v: whole(v) and v >= least, f": give a whole number >= {least}{note}", null)


def one_of(choices: Iterable[Any], verb: str = "use", null: bool = False) -> Check:
    """One of ``choices`` (``null``: or None)."""
    choices = tuple(choices)
    return rule(lambda v: v in choices, f"; {verb} one of {list(choices)}.", null)


def bounded(ok: Callable[[float], bool], advice: str) -> Check:
    """A bound on a number (a value of another type, or None, is the type check's to refuse)."""
    return rule(lambda v: not number(v) or ok(v), advice)


def interval(
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
    whole_number: bool = False,
    note: str = "",
) -> Check:
    """A finite number (``whole_number``: an int) between ``low`` and ``high`` (each bound included unless open; None:
    no bound). None, and a value of another type, are the type check's to refuse."""

    def text(bound: float) -> str:
        return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"

    if low is not None and high is not None:
        span = f"in {'(' if open_low else '['}{text(low)}, {text(high)}{')' if open_high else ']'}"
    elif low is not None:
        span = f"{'>' if open_low else '>='} {text(low)}"
    else:
        span = f"{'<' if open_high else '<='} {text(high)}"
    what = "a whole number" if whole_number else "a number"

    def ok(v: Any) -> bool:
        if (whole_number and not whole(v)) or not math.isfinite(v):
            return False
        above = low is None or (v > low if open_low else v >= low)
        return above and (high is None or (v < high if open_high else v <= high))

    return bounded(ok, f": give {what} {span}{note}")


def typed(kind: type, check: Check | None = None) -> Check:
    """A value of type ``kind`` (bool, int, float or str; a float takes an int too, and a number is never a bool),
    then ``check``: for a setting whose value arrives typed already (from Python, from verl's config) rather than
    as text `coerce` types."""
    plain = {float: number, int: whole}.get(kind, lambda v: isinstance(v, kind))

    def check_typed(name: str, value: Any) -> str | list[str] | None:
        if not plain(value):
            return f"{name}={value!r}: expected {kind.__name__}"
        return check(name, value) if check is not None else None

    return check_typed


def option_check(option: LossOption) -> Check:
    """The check of a loss option declared as plain data (`pacs_rl.algorithms.options.LossOption`): its type, then
    its choices, or its bounds (a finite number; an int option a whole one)."""
    if option.choices:
        return typed(option.type, one_of(option.choices, "choose"))
    if option.type in (int, float):
        bounds = {"open_low": option.open_low, "open_high": option.open_high, "note": option.note}
        return typed(
            option.type, interval(option.low, option.high, whole_number=option.type is int, **bounds)
        )
    return typed(option.type)


def option_setting(option: LossOption) -> Any:
    """The `setting` of a loss option declared as plain data: its default, help, check (`option_check`), choices
    and the loss's keyword (``loss_option``) the trainer fills from it."""
    choices = list(option.choices) or None
    return setting(
        option.default, option.help, check=option_check(option), choices=choices, loss_option=option.keyword
    )


def option_class(
    name: str, options: Iterable[LossOption], module: str, doc: str, **dataclass_args: Any
) -> type:
    """A dataclass ``module.name`` of one field per loss option (`option_setting`: its type, default, help and
    check), the declarations of the commands that take the options generated from the options' own."""
    fields = [(o.name, o.type, option_setting(o)) for o in options]
    namespace = {"__module__": module, "__doc__": doc}
    return make_dataclass(name, fields, namespace=namespace, **dataclass_args)


def problems_found(values: Any, checks: Iterable[tuple[str, Check | None]], prefix: str = "") -> list[str]:
    """The problems ``checks`` (setting name, its check or None) find in ``values`` (an object, or a mapping: a
    setting it lacks is not checked), in their order; each names the setting as ``prefix`` + its name (``prefix``:
    where it sits in a larger config, e.g. verl's ``actor_rollout_ref.actor.policy_loss.``)."""
    get = values.get if isinstance(values, Mapping) else (lambda n, d: getattr(values, n, d))
    missing = object()
    out: list[str] = []
    for name, check in checks:
        value = get(name, missing)
        if check is None or value is missing:
            continue
        found = check(prefix + name, value)
        out += [found] if isinstance(found, str) else list(found or [])
    return out


def declared_problems(values: Any, fields: Iterable[Any], prefix: str = "") -> list[str]:
    """What the declared checks of ``fields`` (dataclass fields made by `setting`) find in ``values``
    (`problems_found`)."""
    return problems_found(values, ((f.name, declared(f).check) for f in fields), prefix)


# ---------------------------------------------------------------------------------------------------- data
@dataclass(kw_only=True)
class DataSettings:
    """Where problems are read from and how each becomes a prompt: the settings of `pacs-rl train` (RunSettings)
    and `pacs-rl eval` (EvalConfig), and of both sections of a comparison."""

    split: str | None = setting(
        None, "Split of a Hub dataset or procedural task (default: test if it has one, else train)."
    )
    problem_field: str | None = setting(None, "Column holding the problem text (default problem).")
    answer_field: str | None = setting(None, "Column holding the reference answer (default answer).")
    prompt_field: str | None = setting(
        None,
        "Column that already holds the prompt as chat messages, used as is (no instruction added); "
        "the problem text is then problem_field if present, else the last user message.",
    )
    instruction: str = setting(
        INSTRUCTION,
        "Appended to each problem in the user turn; default the paper's (Appendix B.1); '' = none.",
    )
    system_prompt: str | None = setting(
        None, "A system turn before each problem; default none (the chat template adds its own)."
    )
    skip_bad_rows: bool = setting(
        True, "Skip bad data rows (counted and reported); false stops at the first one."
    )

    def loader_kwargs(self) -> dict[str, Any]:
        """These settings as :func:`pacs_rl.data.load_problems` takes them."""
        return {
            "split": self.split,
            "problem_field": self.problem_field,
            "answer_field": self.answer_field,
            "prompt_field": self.prompt_field,
            "on_error": "skip" if self.skip_bad_rows else "raise",
        }


DATA_KEYS = tuple(DataSettings.__dataclass_fields__)


# ---------------------------------------------------------------------------------------------------- names
def _seed_count(value: str) -> list[str]:
    try:
        return ["--seed", ",".join(str(s) for s in range(int(value)))]
    except ValueError:
        raise SettingsError(f"--seeds {value!r}: give a count, or better the seeds: --seed 0,1,2") from None


def _on_error(value: str) -> list[str]:
    if value not in ("skip", "raise"):
        raise SettingsError(f"--on-error {value!r}: use --skip-bad-rows (skip) or --no-skip-bad-rows (raise)")
    return ["--skip-bad-rows" if value == "skip" else "--no-skip-bad-rows"]


# Every other spelling, in one table: the spelling -> (what it is now, whether a note says so). A setting key
# (in a YAML file, --set, as an option, in a comparison's sections) is a key; an older option of one command is
# "command --option", now another option or a function of its value that gives the arguments now. A note is
# printed for this project's older spellings, not for TRL's names of the same thing.
ALIASES: dict[str, tuple[str | Callable[[str], list[str]], bool]] = {
    "dataset_split": ("split", True),
    "data": ("dataset", True),  # a comparison's train.data
    "model_name_or_path": ("model", False),  # TRL's ModelConfig
    "dataset_name": ("dataset", False),  # TRL's ScriptArguments
    "dataset_train_split": ("split", False),
    "use_peft": ("use_lora", False),
    "eval --output": ("--output-dir", True),
    "eval --benchmark": ("--benchmarks", True),
    "eval --on-error": (_on_error, True),
    "compare --output": ("--output-dir", True),
    "compare --steps": ("--max-steps", True),
    "compare --seeds": (_seed_count, True),
}
RENAMED_SETTINGS = {k: v for k, v in ALIASES.items() if " " not in k}  # the setting keys' part


def old_options(command: str) -> dict[str, tuple[str | Callable[[str], list[str]], bool]]:
    """The other spellings of ``command``'s options (`ALIASES`): option -> (what it is now, whether a note says so)."""
    return {k.split(" ", 1)[1]: v for k, v in ALIASES.items() if k.startswith(command + " ")}


def canonical_key(key: str, where: str, notes: list[str] | None = None) -> str:
    """The current name of setting ``key``; an older spelling adds a note to ``notes``."""
    if key not in RENAMED_SETTINGS:
        return key
    new, old_spelling = RENAMED_SETTINGS[key]
    if old_spelling and notes is not None:
        notes.append(f"{where}: {key} is now called {new}; the old name still works")
    return new


def rename_keys(values: Mapping[str, Any], where: str, notes: list[str] | None = None) -> dict[str, Any]:
    """``values`` with every key under its current name; refuses an old and a new name given together."""
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for key, value in values.items():
        new = canonical_key(str(key), where, notes)
        if new in out and given[new] != key:
            raise SettingsError(f"{given[new]} and {key} in {where} are one setting ({new}): give it once")
        out[new], given[new] = value, str(key)
    return out


_BOOL_TEXT = ("true", "false", "yes", "no", "1", "0", "on", "off")


def rewrite_args(
    command: str,
    args: list[str],
    options: Iterable[str],
    notes: list[str],
    settings: Mapping[str, str] | None = None,
) -> list[str]:
    """A command's arguments in one pass, every other spelling of an option replaced by its name: TRL's
    (``--output_dir`` for ``--output-dir``) quietly, an older one (:data:`ALIASES`)
    with a note in ``notes``; and, with ``settings`` (setting -> its type as text), ``--name value`` for a setting
    the command has no option of written ``--set name=value`` (a bool setting may stand bare: ``--use_vllm``),
    TRL's command-line spelling of its config.

    options: the option names the command declares. Arguments after ``--`` are left alone."""
    options, old = set(options), old_options(command)
    out: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg.partition("=")
        if arg == "--":
            return [*out, arg, *rest]
        if not name.startswith("--") or name in options:
            out.append(arg)
        elif name in old:
            new, noted = old[name]
            out += _old_option(name, new, value if eq else None, rest, notes if noted else [])
        else:
            spelled = name[2:].replace("-", "_")
            key, noted = RENAMED_SETTINGS.get(spelled, (spelled, False))
            flag = "--" + key.replace("_", "-")
            if flag in options:
                if noted:
                    notes.append(f"{name} is now called {flag}; the old name still works")
                out.append(flag + eq + value)
            elif settings is not None and key in settings:
                canonical_key(spelled, name, notes)  # its note, in the words a file's older key gets
                out += ["--set", f"{key}={value if eq else _option_value(name, key, settings[key], rest)}"]
            else:
                out.append(arg)
    return out


def _old_option(
    name: str, new: str | Callable[[str], list[str]], value: str | None, rest: list[str], notes
) -> list[str]:
    """An older option's arguments now, with a note: a new name, or a function of the old value."""
    if not callable(new):
        notes.append(f"{name} is now called {new}; the old name still works")
        return [new + ("" if value is None else f"={value}")]
    text = value if value is not None else (rest.pop(0) if rest else "")
    replaced = new(text)
    notes.append(f"{name} {text} is now written {' '.join(replaced)}; the old spelling still works")
    return replaced


def _option_value(name: str, key: str, kind: str, rest: list[str]) -> str:
    """The value of ``--name`` written apart (``--name VALUE``); a bool setting may stand bare."""
    following = rest[0] if rest else None
    if "bool" in kind and (following is None or following.lower() not in _BOOL_TEXT):
        return "true"
    if following is None:
        raise SettingsError(f"{name} needs a value: {name} VALUE, or --set {key}=VALUE")
    return rest.pop(0)


def unknown_name(name: str, known: Iterable[str], where: str, hint: str) -> str:
    """'unknown setting 'x' in WHERE. Did you mean: y?' or, without a close match, the hint."""
    close = difflib.get_close_matches(name, list(known), n=4, cutoff=0.6)
    tail = f" Did you mean: {', '.join(close)}?" if close else f" {hint}"
    return f"unknown setting {name!r} in {where}.{tail}"


# ---------------------------------------------------------------------------------------------------- values
_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")
_PLAIN = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}


def coerce(key: str, value: Any, kind: str) -> Any:
    """``value`` of setting ``key`` as its declared type ``kind`` (the type as text: 'int', 'float | None', ...):
    converted when it arrives as text (from a command line, or a YAML file that reads 1e-5 as a string); checked
    when a value of a plain type (int, float, bool, str, or one of them or None) arrives as another type. Raises
    SettingsError naming the key."""
    if not isinstance(value, str):
        plain = _PLAIN.get(kind.removesuffix(" | None"))
        wrong = isinstance(value, bool) and bool not in (plain or (bool,))
        if plain and value is not None and (wrong or not isinstance(value, plain)):
            raise SettingsError(f"{key}={value!r}: expected {kind}")
        return value
    low = value.strip().lower()
    if low == "null" or (low == "none" and "str" not in kind):
        return None
    takes_text = "str" in kind
    if "bool" in kind:
        if low in _TRUE + _FALSE:
            return low in _TRUE
        if not (takes_text or "int" in kind or "float" in kind):
            raise SettingsError(f"{key}={value!r}: expected a bool (true or false)")
    try:
        if "float" in kind:
            return float(value)
        if "int" in kind:
            return int(value)
    except ValueError:
        if not takes_text:
            raise SettingsError(f"{key}={value!r}: expected {kind}") from None
    return value


def read_assignments(items: Iterable[str], where: str = "--set") -> dict[str, Any]:
    """``["learning_rate=1e-5", "pacs_weighted=false"]`` -> {key: value}, each value's text read as YAML first
    (a value YAML cannot read stays text); the keys are not checked here."""
    out = {}
    for item in items:
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise SettingsError(f"{where} {item!r}: expected key=value, e.g. {where} learning_rate=1e-5")
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError:
            out[key.strip()] = text
    return out


def read_values(
    values: Mapping[str, Any],
    where: str,
    kinds: Mapping[str, str],
    hint: str,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """Settings as given (a file, --set) under their current names, every name known and every value of its
    declared type: the one pass a value takes (older spellings renamed, with a note in ``notes``; an unknown name
    refused with its close matches, else ``hint``; text typed, other types checked). ``kinds``: every setting
    name -> its declared type as text."""
    values = rename_keys(values, where, notes)
    for key in values:
        if key not in kinds:
            raise SettingsError(unknown_name(key, kinds, where, hint))
    return {k: coerce(k, v, kinds[k]) for k, v in values.items()}


# ---------------------------------------------------------------------------------------------------- files
# Settings whose text can name a file or folder (at any depth of a settings file: a comparison's train and eval
# sections too), by the names this project and TRL give them.
PATH_SETTINGS = frozenset(
    {
        "model", "model_name_or_path", "critic_model_name_or_path",  # a local model folder, else a Hub id or alias
        "dataset", "dataset_name", "data", "eval_dataset", "benchmarks",  # a data file, else a name
        "deepspeed", "fsdp_config", "accelerator_config",  # a JSON file
        "reward_funcs",  # path/to/file.py:function entries
    }
)  # fmt: skip


def _from_folder(value: str, folder: Path) -> str:
    """``value`` read against ``folder`` when it is a relative path to something there; else ``value`` as it is."""
    if not value or Path(value).is_absolute() or value.startswith("~"):
        return value
    candidate = folder / value
    return os.path.normpath(candidate) if candidate.exists() else value


def _reward_from_folder(value: str, folder: Path) -> str:
    """A reward_funcs entry: its file part (path/to/file.py:function) read against ``folder``."""
    file, colon, function = value.strip().rpartition(":")
    if colon and file.endswith(".py"):
        return f"{_from_folder(file, folder)}:{function}"
    return value


def resolve_paths(data: Any, folder: str | Path) -> Any:
    """The settings ``data`` of a file in ``folder`` with each relative path that names a file or folder there
    (`PATH_SETTINGS`, at any depth) made absolute, so that a settings file means the same from any working folder.
    A value that names nothing there stays as written: a Hub id, a benchmark or task name, a path from the
    current folder."""
    folder = Path(folder).absolute()

    def one(key: str, value: Any) -> Any:
        if isinstance(value, list):
            return [one(key, v) for v in value]
        if not isinstance(value, str):
            return value
        if key == "reward_funcs":
            return ",".join(_reward_from_folder(v, folder) for v in value.split(","))
        return _from_folder(value, folder)

    if isinstance(data, dict):
        return {
            k: one(str(k), v)
            if str(k) in PATH_SETTINGS and not isinstance(v, dict)
            else resolve_paths(v, folder)
            for k, v in data.items()
        }
    return data


def read_yaml(path: str | Path, option: str = "--config") -> dict[str, Any]:
    """A YAML (or JSON) file of settings as a mapping, its relative paths read against its own folder
    (`resolve_paths`). A missing file, a syntax error (file:line:column) or a file that is no mapping is a
    one-line SettingsError."""
    path = Path(path)
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise SettingsError(f"{option} {path}: the file {what}; give a YAML file of setting: value lines")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or one_line(str(e))
        raise SettingsError(f"{where}: YAML syntax error, {problem}; fix the file ({option})") from None
    except UnicodeDecodeError:
        raise SettingsError(
            f"{option} {path}: not a text file; give a YAML file of setting: value lines"
        ) from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise SettingsError(
            f"{option} {path}: expected a mapping of setting: value lines, got a {type(data).__name__}"
        )
    return resolve_paths(data, path.parent)


def output_dir_problem(path: str | Path, option: str = "--output-dir") -> str | None:
    """Why ``path`` cannot be an output folder (it, or a folder above it, is a file); None when it can."""
    p = Path(path).expanduser()
    for part in (p, *p.parents):
        if part.exists() and not part.is_dir():
            which = "is a file" if part == p else f"is under {part}, which is a file"
            return f"{option} {path} {which}; give a folder (a new one, or a run to --resume)"
    return None


# ---------------------------------------------------------------------------------------------------- packages
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


__all__ = [
    "ALIASES",
    "DATA_KEYS",
    "PATH_SETTINGS",
    "RENAMED_SETTINGS",
    "Check",
    "DataSettings",
    "Declared",
    "Missing",
    "SettingsError",
    "at_least",
    "bounded",
    "canonical_key",
    "coerce",
    "declared",
    "declared_problems",
    "install_line",
    "interval",
    "is_declared",
    "missing_packages",
    "missing_requirements",
    "number",
    "one_line",
    "one_of",
    "option_check",
    "option_class",
    "option_setting",
    "output_dir_problem",
    "problems_found",
    "read_assignments",
    "read_values",
    "read_yaml",
    "rename_keys",
    "resolve_paths",
    "rewrite_args",
    "rule",
    "setting",
    "tracker_names",
    "typed",
    "unknown_name",
    "whole",
]
