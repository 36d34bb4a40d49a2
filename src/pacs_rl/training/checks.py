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

from pacs_rl.data import Problem, hub_dataset
from pacs_rl.models import hub_unreachable, model_problem
from pacs_rl.run_folder import output_folder_problem
from pacs_rl.settings import (
    SettingsError,
    coerce,
    missing_packages,
    read_assignments,
    read_values,
    read_yaml,
)
from pacs_rl.training.batch import group_split_problem
from pacs_rl.training.data import load_run_data
from pacs_rl.training.schema import (
    CONFIG_FIELDS,
    CRITIC_FIELDS,
    CRITIC_LOSS_TYPES,
    RUN_FIELDS,
    RunSettings,
    config_problems_declared,
    known_keys,
    setting_type,
)
from pacs_rl.training.trl_fields import field_problems


# ---------------------------------------------------------------------------------------------------- names and types
def coerce_setting(key: str, value: Any) -> Any:
    """``value`` as the declared type of setting ``key`` (ours, else TRL's): `pacs_rl.settings.coerce`."""
    return coerce(key, value, setting_type(key))


def read_settings(values: Mapping[str, Any], where: str, notes: list[str] | None = None) -> dict[str, Any]:
    """Settings as given (a YAML file, --set, a comparison's train section) under their current names, every
    name known and every value of its declared type (`pacs_rl.settings.read_values`)."""
    kinds = {key: setting_type(key) for key in known_keys()}
    return read_values(values, where, kinds, "See `pacs-rl train --list-keys`.", notes)


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
    return read_settings(read_assignments(items, where), where, notes)


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


def declared_config_problems(cfg: Mapping[str, Any]) -> list[str]:
    """The declared check of every trainer config field given (training/schema.py's, then TRL's own in
    trl_fields.py; the loss's name too, whatever is given)."""
    loss_type = str(cfg.get("loss_type", "pacs"))
    return config_problems_declared({"loss_type": loss_type, **cfg}) + field_problems(cfg, skip=CONFIG_FIELDS)


def config_problems(cfg: Mapping[str, Any], installed: bool = True) -> list[str]:
    """The trainer config values refused before TRL loads: the declared check of every field given
    (`declared_config_problems`), a critic field without the critic loss, a batch that splits a group, and
    (``installed``) an engine or tracker that is not installed here."""
    out = declared_config_problems(cfg)
    loss_type = str(cfg.get("loss_type", "pacs"))
    stray = [k for k in CRITIC_FIELDS if k in cfg]
    if stray and loss_type not in CRITIC_LOSS_TYPES:
        out.append(f"{', '.join(stray)} only apply to loss_type='ppo' (got loss_type={loss_type!r})")
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
