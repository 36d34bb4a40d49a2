"""The one pass a setting's value takes, wherever it is given: read from a YAML file (`read_yaml`, its relative
paths read against the file's folder: `resolve_paths`) or from ``--set key=value`` text (`read_assignments`), then
under its current name, its name checked and its value typed from its declaration (`read_values`, `coerce`)."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from pacs_rl.settings.aliases import rename_keys
from pacs_rl.settings.errors import SettingsError, one_line

# ---------------------------------------------------------------------------------------------------- values
# the words a bool is written in, any case (`coerce`; `pacs_rl.command.rewrite_args` tells a bare bool option by them)
TRUE_WORDS, FALSE_WORDS = ("true", "yes", "1", "on"), ("false", "no", "0", "off")
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
        if low in TRUE_WORDS + FALSE_WORDS:
            return low in TRUE_WORDS
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


def unknown_name(name: str, known: Iterable[str], where: str, hint: str) -> str:
    """'unknown setting 'x' in WHERE. Did you mean: y?' or, without a close match, the hint."""
    close = difflib.get_close_matches(name, list(known), n=4, cutoff=0.6)
    tail = f" Did you mean: {', '.join(close)}?" if close else f" {hint}"
    return f"unknown setting {name!r} in {where}.{tail}"


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


__all__ = [
    "FALSE_WORDS",
    "PATH_SETTINGS",
    "TRUE_WORDS",
    "coerce",
    "read_assignments",
    "read_values",
    "read_yaml",
    "resolve_paths",
    "unknown_name",
]
