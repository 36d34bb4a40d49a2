"""Every other spelling of a setting or an option, in one table (`ALIASES`), and the setting keys under their
current names (`rename_keys`): the commands' argument rewriting (`pacs_rl.command.rewrite_args`) and every reading
of settings (`pacs_rl.settings.reading.read_values`, a comparison's file) take them from here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pacs_rl.settings.errors import SettingsError


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


__all__ = ["ALIASES", "RENAMED_SETTINGS", "canonical_key", "old_options", "rename_keys"]
