"""The PACS settings of verl's ``actor_rollout_ref.actor.policy_loss``, generated from their declaration beside the
loss (`pacs_rl.algorithms.options.PACS_OPTIONS`: name, type, default, check, help), as `pacs-rl train`'s are. The
guard checks them before Ray starts (guard.py), the loss reads them (`loss_keywords`), and verl's own config class for
them, ``PACSPolicyLossConfig`` (core.py), is generated from them by :func:`policy_loss_config_class`: an option added
beside the loss is a field of each. No verl import.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from pacs_rl.algorithms.options import PACS_OPTIONS
from pacs_rl.settings.declarations import declared_problems, option_class

PACS_NAME = "pacs"  # the name registered in verl's advantage-estimator and policy-loss registries
POLICY_LOSS = "actor_rollout_ref.actor.policy_loss"

PACSLossSettings = option_class(
    "PACSLossSettings",
    PACS_OPTIONS,
    __name__,
    "The fields PACS adds to verl's ``actor.policy_loss`` (set with ``+actor_rollout_ref.actor.policy_loss.NAME=`` "
    "on hydra's command line, or in the config file; docs/VERL.md), one per PACS option.",
)
LOSS_FIELDS = dataclasses.fields(PACSLossSettings)


def _section_get(policy_loss: Any):
    """``get(name, default)`` of verl's ``policy_loss`` section: a DictConfig, a mapping or verl's config object."""
    if policy_loss is None:
        return lambda name, default=None: default
    return policy_loss.get if hasattr(policy_loss, "get") else (lambda n, d=None: getattr(policy_loss, n, d))


def loss_settings(policy_loss: Any) -> dict[str, Any]:
    """Each PACS setting of verl's ``policy_loss`` section by its name, its declared default where the section lacks
    it or holds None."""
    get = _section_get(policy_loss)
    given = {f.name: get(f.name, None) for f in LOSS_FIELDS}
    return {f.name: f.default if given[f.name] is None else given[f.name] for f in LOSS_FIELDS}


def loss_setting_problems(policy_loss: Any, prefix: str = f"{POLICY_LOSS}.") -> list[str]:
    """What the declared checks find in verl's ``policy_loss`` section (`loss_settings`), each naming the setting
    as ``prefix`` + its name."""
    return declared_problems(loss_settings(policy_loss), LOSS_FIELDS, prefix)


def loss_keywords(policy_loss: Any) -> dict[str, Any]:
    """The keywords `pacs_rl.algorithms.pacs_loss` takes, from verl's ``policy_loss`` section (`loss_settings`, each
    value as its declared type; the guard has checked them)."""
    values = loss_settings(policy_loss)
    return {o.keyword: o.type(values[o.name]) for o in PACS_OPTIONS}


def policy_loss_config_class(base: type, module: str) -> type:
    """verl's config class of a PACS policy loss: ``base`` (verl's ``PolicyLossConfig``) with ``loss_mode`` = pacs
    and every field of :class:`PACSLossSettings` (its type, default and help); building one runs their checks.
    ``module``: where the class is found by name (hydra's ``_target_``, pickling to Ray's workers)."""

    def __post_init__(self) -> None:
        problems = loss_setting_problems(self, "actor.policy_loss.")
        if problems:
            raise ValueError(" ".join(problems))

    types = typing.get_type_hints(PACSLossSettings)
    fields = [("loss_mode", str, dataclasses.field(default=PACS_NAME))] + [
        (f.name, types[f.name], dataclasses.field(default=f.default, metadata=f.metadata))
        for f in LOSS_FIELDS
    ]
    doc = (
        "verl's ``actor.policy_loss`` config with the PACS fields (generated from PACSLossSettings). Select it with "
        f"``actor_rollout_ref.actor.policy_loss._target_={module}.PACSPolicyLossConfig``; set the fields with "
        "``+actor_rollout_ref.actor.policy_loss.pacs_beta=1.0`` (hydra's ``+`` adds a key)."
    )
    namespace = {"__post_init__": __post_init__, "__doc__": doc, "__module__": module}
    return dataclasses.make_dataclass("PACSPolicyLossConfig", fields, bases=(base,), namespace=namespace)
