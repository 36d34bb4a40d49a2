"""The checks of `pacs-rl train`'s settings that need neither torch nor TRL, shared by the command, the dry run and
the run: a flat mapping of settings (a YAML file, `--set key=value`, TRL's `--name value`, a comparison's train
section) is renamed, checked for unknown names and typed once (`split_settings`), its config values checked
(`config_problems`: the declared checks of training/schema.py and the rules across fields), and the run's paths,
model, data and packages checked before anything heavy loads (`preflight`).

Every refusal is a `SettingsError` (a `ValueError`) naming the setting and what to do.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from pacs_rl.data import Problem, hub_dataset
from pacs_rl.models import hub_unreachable, model_problem
from pacs_rl.run_folder import output_folder_problem
from pacs_rl.settings import (
    SettingsError,
    missing_packages,
    read_yaml,
    rename_keys,
    unknown_name,
)
from pacs_rl.training.batch import group_split_problem
from pacs_rl.training.data import load_run_data
from pacs_rl.training.schema import (
    CRITIC_FIELDS,
    CRITIC_LOSS_TYPES,
    RUN_FIELDS,
    RunSettings,
    config_problems_declared,
    known_keys,
    setting_type,
)

# ---------------------------------------------------------------------------------------------------- names and types
_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")
_PLAIN = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}


def coerce_setting(key: str, value: Any) -> Any:
    """Convert ``value`` to the declared type of setting ``key`` when it arrives as text (from a command
    line, or a YAML file that reads 1e-5 as a string); check a value of a plain type (int, float, bool, str,
    or one of them or None) that arrives as another type. Raises SettingsError naming the key."""
    kind = setting_type(key)
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


def check_keys(keys, where: str) -> None:
    """Refuse unknown setting names, naming the close matches."""
    known = known_keys()
    for key in keys:
        if key not in known:
            raise SettingsError(unknown_name(key, known, where, "See `pacs-rl train --list-keys`."))


def read_settings(values: Mapping[str, Any], where: str, notes: list[str] | None = None) -> dict[str, Any]:
    """Settings as given (a YAML file, --set, a comparison's train section) under their current names, every
    name known and every value of its declared type: the one pass a value takes (older spellings renamed, with a
    note in ``notes``; unknown names refused with close matches; text typed, other types checked)."""
    values = rename_keys(values, where, notes)
    check_keys(values, where)
    return {k: coerce_setting(k, v) for k, v in values.items()}


def split_typed(typed: Mapping[str, Any]) -> tuple[RunSettings, dict[str, Any]]:
    """Settings already read (`read_settings`) -> (RunSettings, the trainer config's keyword arguments)."""
    settings = RunSettings(**{k: v for k, v in typed.items() if k in RUN_FIELDS})
    return settings, {k: v for k, v in typed.items() if k not in RUN_FIELDS}


def split_settings(
    values: Mapping[str, Any], where: str = "the settings"
) -> tuple[RunSettings, dict[str, Any]]:
    """One flat mapping of settings as given -> (RunSettings, the config's keyword arguments): `read_settings`,
    then `split_typed`."""
    return split_typed(read_settings(values, where))


def load_settings_file(path: str | Path, notes: list[str] | None = None) -> dict[str, Any]:
    """A YAML file of settings (`setting: value` per line), read (`read_settings`): YAML syntax errors
    (file:line:column) and unknown names are refused; ``notes`` gets a line per older spelling."""
    return read_settings(read_yaml(path), str(path), notes)


def parse_assignments(
    items: list[str], where: str = "--set", notes: list[str] | None = None
) -> dict[str, Any]:
    """``["learning_rate=1e-5", "pacs_weighted=false"]`` -> the settings, read (`read_settings`); each value's
    text is read as YAML first."""
    out = {}
    for item in items:
        key, eq, text = item.partition("=")
        if not eq or not key.strip():
            raise SettingsError(f"{where} {item!r}: expected key=value, e.g. {where} learning_rate=1e-5")
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError:
            out[key.strip()] = text
    return read_settings(out, where, notes)


# ---------------------------------------------------------------------------------------------------- checks
def rollout_prompts(cfg: Mapping[str, Any], num_processes: int) -> int | None:
    """Prompts per rollout batch (TRL's generation_batch_size / num_generations) as PACSConfig derives it from
    the flat config values; None when a value it needs is not given (the config then decides)."""
    try:
        G, per_device = int(cfg["num_generations"]), int(cfg["per_device_train_batch_size"])
        ga = int(cfg.get("gradient_accumulation_steps", 1))
        if cfg.get("generation_batch_size") is not None:
            return int(cfg["generation_batch_size"]) // G
        steps = cfg.get("mini_batches_per_rollout")
        steps = int(steps) * ga if steps is not None else cfg.get("steps_per_generation") or 4 * ga
        return per_device * int(steps) * num_processes // G
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def too_few_problems(count: int, per_rollout: int, source: str) -> str | None:
    """Why ``count`` training problems would train no step at all: TRL's sampler only draws whole rollout
    batches of ``per_rollout`` prompts (None when there is at least one)."""
    if count >= per_rollout:
        return None
    return (
        f"dataset {source!r} gives {count} usable training problem(s), fewer than one rollout batch of "
        f"{per_rollout} prompts, so no step would be trained: give more problems, or a smaller rollout batch "
        "(mini_batches_per_rollout, gradient_accumulation_steps, per_device_train_batch_size)"
    )


def max_steps_problem(steps: Any) -> str | None:
    """Why ``max_steps`` would train nothing (0) or means nothing (below -1); None when it is fine."""
    if isinstance(steps, int) and (steps == 0 or steps < -1):
        return f"max_steps={steps}: give a number of optimizer steps >= 1 (or -1 to train num_train_epochs epochs)"
    return None


def config_problems(cfg: Mapping[str, Any], installed: bool = True) -> list[str]:
    """The trainer config values refused before TRL loads: the declared check of every field given
    (training/schema.py; the loss's name too, whatever is given), a critic field without the critic loss, max_steps, a batch that splits a group,
    and (``installed``) an engine or tracker that is not installed here."""
    out = []
    loss_type = str(cfg.get("loss_type", "pacs"))
    out += config_problems_declared({"loss_type": loss_type, **cfg})
    stray = [k for k in CRITIC_FIELDS if k in cfg]
    if stray and loss_type not in CRITIC_LOSS_TYPES:
        out.append(f"{', '.join(stray)} only apply to loss_type='ppo' (got loss_type={loss_type!r})")
    steps = max_steps_problem(cfg.get("max_steps"))
    out += [steps] if steps else []
    split = group_split_problem(
        cfg.get("per_device_train_batch_size"), cfg.get("num_generations"), cfg.get("generation_batch_size")
    )
    out += [split] if split else []
    return out + (missing_packages(cfg) if installed else [])


def preflight(
    settings: RunSettings,
    cfg: Mapping[str, Any],
    output_dir: str | Path,
    resume: bool = False,
    num_processes: int = 1,
) -> tuple[list[str], tuple[list[Problem], list[Problem]] | None]:
    """Everything about a run that can be checked before torch and TRL load: the config values
    (:func:`config_problems`), the output folder, the model name (a Hub name offline, or with the Hub
    unreachable, must be in the local cache), LoRA's library, and the data: read here when it is local (a file,
    arithmetic, a benchmark in $PACS_RL_DATA_DIR), with at least one rollout batch of problems.

    Returns (every problem, the (training, held-out) problems when read here: `run_training`'s ``data``)."""
    out = config_problems(cfg) + missing_packages({"use_lora": settings.use_lora})
    folder = output_folder_problem(output_dir, resume)
    out += [folder] if folder else []
    model = model_problem(settings.model)
    out += [model] if model else []
    sources = [settings.dataset] + (
        [settings.eval_dataset] if settings.eval_size and settings.eval_dataset else []
    )
    hub = [s for s in sources if hub_dataset(s)]
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")
    why = hub_unreachable() if hub and not offline else None
    if why:
        out += [
            f"dataset {s!r} is read from the Hugging Face Hub, which cannot be reached ({why}): give a local file, "
            "or set HF_HUB_OFFLINE=1 to read it from the local datasets cache"
            for s in hub
        ]
    if out or hub:
        return out, None
    try:
        data = load_run_data(settings, int(cfg.get("seed", 42)))
    except SettingsError as e:
        return [str(e)], None
    per_rollout = rollout_prompts(cfg, num_processes)
    few = per_rollout and too_few_problems(len(data[0]), per_rollout, settings.dataset)
    return ([few] if few else []), data
