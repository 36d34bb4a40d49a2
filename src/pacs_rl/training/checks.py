"""The checks of `pacs-rl train`'s settings that need neither torch nor TRL, shared by the command, the dry run and
the run: a flat mapping of settings (a YAML file, `--set key=value`, TRL's `--name value`, a comparison's train
section) is renamed, checked for unknown names and typed once (`split_settings`), its config values checked
(`config_problems`: the declared checks of training/schema.py and the rules across fields), and the run's paths,
model, data and packages checked before anything heavy loads (`preflight`).

Every refusal is a `SettingsError` (a `ValueError`) naming the setting and what to do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pacs_rl.data import Problem
from pacs_rl.preflight import Preflight, missing_packages
from pacs_rl.run_folder import output_folder_problem
from pacs_rl.settings.errors import SettingsError
from pacs_rl.settings.reading import coerce, read_assignments, read_values, read_yaml
from pacs_rl.training.batch import group_split_problem
from pacs_rl.training.data import load_heldout_file, load_run_data
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
    """``value`` as the declared type of setting ``key`` (ours, else TRL's): `pacs_rl.settings.reading.coerce`."""
    return coerce(key, value, setting_type(key))


def read_settings(values: Mapping[str, Any], where: str, notes: list[str] | None = None) -> dict[str, Any]:
    """Settings as given (a YAML file, --set, a comparison's train section) under their current names, every
    name known and every value of its declared type (`pacs_rl.settings.reading.read_values`)."""
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


# The checks of a DeepSpeed config that transformers' HfTrainerDeepSpeedConfig makes when the run starts, made here
# without DeepSpeed installed; the precision keys agree with the device choice's bf16 / fp16
PRECISION_KEYS = ("bf16.enabled", "fp16.enabled")


def deepspeed_problems(
    ds: Mapping[str, Any], cfg: Mapping[str, Any], num_processes: int, precision: bool | None = None
) -> list[str]:
    """Values of a DeepSpeed config that disagree with the run's settings ("auto" always agrees). ``precision``:
    False leaves out bf16.enabled and fp16.enabled (where the device choice sets them later), True checks only
    those; None checks everything."""
    per_device = cfg.get("per_device_train_batch_size", 8)
    ga = cfg.get("gradient_accumulation_steps", 1)
    bf16, fp16 = bool(cfg.get("bf16")), bool(cfg.get("fp16"))
    expected = {
        "train_micro_batch_size_per_gpu": per_device,
        "gradient_accumulation_steps": ga,
        "train_batch_size": per_device * ga * num_processes,
        "gradient_clipping": cfg.get("max_grad_norm", 1.0),
        "bf16.enabled": bf16,
        "fp16.enabled": fp16,
        "optimizer.params.lr": cfg.get("learning_rate"),
    }
    out = []
    stage = (ds.get("zero_optimization") or {}).get("stage", 0)
    if precision is not True and stage not in (0, 1, 2, 3):
        out.append(f"deepspeed: zero_optimization.stage={stage!r}; use 0, 1, 2 or 3")
    for key, want in expected.items():
        value: Any = ds
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if precision is not None and (key in PRECISION_KEYS) != precision:
            continue
        if value is None or value == "auto" or want is None:
            continue
        if value != want:
            out.append(
                f'deepspeed: {key}={value!r} but the run\'s settings give {want!r}; write "auto" in the DeepSpeed '
                "config (transformers fills it from the settings) or change one of them"
            )
    return out


def precision_given(cfg: Mapping[str, Any]) -> bool:
    """Whether the settings name the precision (bf16, fp16); unset, the device choice decides it (with torch)."""
    return cfg.get("bf16") is not None or cfg.get("fp16") is not None


def unchecked_run_settings(values: Mapping[str, Any]) -> RunSettings:
    """RunSettings from ``values`` without its __post_init__ refusal, so that its problems join the others."""
    settings = RunSettings.__new__(RunSettings)
    for f in dataclasses.fields(RunSettings):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        setattr(settings, f.name, values.get(f.name, default))
    return settings


@dataclass
class Checked:
    """What `preflight` found: the refusals in the order it made them, the run keys and config values, and the
    data it read."""

    refusals: list[str]
    settings: RunSettings  # not checked by its class when refusals hold its problems
    cfg: dict[str, Any]
    data: tuple[list[Problem], list[Problem]] | None  # (training, held-out) when every source is read here
    # the training problems when read here (not where the held-out set comes from the Hub)
    train: list[Problem] | None
    hub: list[str]  # the data sources read from the Hub when the run starts
    # whether what the training machine must hold was checked on this one (its libraries, its Hub cache); a dry
    # run that asks for CUDA leaves them to the plan, which knows whether it is for this machine
    here: bool


def preflight(
    values: Mapping[str, Any],
    output_dir: str | Path,
    resume: bool = False,
    num_processes: int = 1,
    network: bool = True,
    here: bool = True,
) -> Checked:
    """Everything about a run that can be checked before torch and TRL load, in this order: the run keys' declared
    checks, the config values (`config_problems`), the libraries the settings need, the output
    folder (a file; checkpoints without --resume; nothing to resume; a checkpoint of another number of processes),
    the model name (a Hub name in the local cache when offline), the DeepSpeed config file (it exists, parses and
    agrees with the settings), the reward functions (each imports and takes the trainer's keywords; one weight
    each), and the data: a local source is read (it exists, its rows parse) and holds one rollout batch at least;
    a Hub source is in the local datasets cache when offline (with ``network``, the Hub is reachable when online).

    ``values``: the flat settings (the CPU default and the user's layers, typed). `pacs-rl train` calls it before
    it imports torch with ``network`` True; its --dry-run with ``network`` False (it names the Hub sources the run
    reads instead of reaching the Hub). ``here`` False: the libraries and the Hub cache are left to the plan (see
    `pacs_rl.preflight`, which holds the checks themselves)."""
    settings = unchecked_run_settings(values)
    cfg = {k: v for k, v in values.items() if k not in RUN_FIELDS}
    check = Preflight(network, here)
    settings_problems = settings.problems()
    check.add(settings_problems, config_problems(cfg, installed=False))
    check.packages({**cfg, "use_lora": settings.use_lora})
    check.add(output_folder_problem(output_dir, resume, num_processes))
    check.model(settings.model)
    if cfg.get("deepspeed"):
        ds = check.json_file(cfg["deepspeed"], "deepspeed")
        precision = None if precision_given(cfg) else False  # unset: the device choice sets it (with torch)
        check.add(deepspeed_problems(ds, cfg, num_processes, precision) if ds is not None else [])
    if settings_problems:  # the sources and reward functions read through the settings' own types
        return Checked(check.refusals, settings, cfg, None, None, [], here)
    check.reward_funcs(settings.reward_funcs, cfg.get("reward_weights"))
    data, train, hub = _read_data(check, settings, cfg, num_processes)
    return Checked(check.refusals, settings, cfg, data, train, hub, here)


def _read_data(check: Preflight, settings: RunSettings, cfg: Mapping[str, Any], num_processes: int):
    """(the training and held-out problems when both are read here, the training problems when read here, the Hub
    sources): each Hub source checked, each local one read as the run reads it."""
    held_source = settings.eval_dataset if settings.eval_size else None
    hub = [s for s, what in ((settings.dataset, "dataset"), (held_source, "eval_dataset"))
           if s is not None and check.hub_data(s, what)]  # fmt: skip
    train = data = None
    try:
        if settings.dataset in hub and held_source is not None and held_source not in hub:
            load_heldout_file(settings)  # the training set comes from the Hub: the held-out file alone
        elif settings.dataset not in hub:
            local = settings if held_source not in hub else dataclasses.replace(settings, eval_size=0)
            train, held = load_run_data(local, int(cfg.get("seed", 42)))
            data = None if hub else (train, held)
    except SettingsError as e:
        check.add(str(e))
    per_rollout = rollout_prompts(cfg, num_processes)
    few = train is not None and per_rollout and too_few_problems(len(train), per_rollout, settings.dataset)
    check.add(few or None)
    return data, train, hub
