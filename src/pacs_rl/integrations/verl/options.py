"""The PACS settings of verl's ``actor_rollout_ref.actor.policy_loss``, declared once (`pacs_rl.settings.setting`:
type, default, help, check). The guard checks them before Ray starts (guard.py), and verl's own config class for
them, ``PACSPolicyLossConfig`` (core.py), is generated from them by :func:`policy_loss_config_class`: a setting
added here is a field of both. No verl import.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any

from pacs_rl.algorithms import SCORE_METHODS
from pacs_rl.settings import declared_problems, number, rule, setting

PACS_NAME = "pacs"  # the name registered in verl's advantage-estimator and policy-loss registries
POLICY_LOSS = "actor_rollout_ref.actor.policy_loss"


@dataclass
class PACSLossSettings:
    """The fields PACS adds to verl's ``actor.policy_loss`` (set with ``+actor_rollout_ref.actor.policy_loss.NAME=``
    on hydra's command line, or in the config file; docs/VERL.md)."""

    pacs_beta: float = setting(
        1.0,
        "β of the reward proxy r̂ = β·Σ_t (log π_θ − log π_old) (paper eq. 8; the paper: 1.0).",
        check=rule(
            lambda v: number(v) and math.isfinite(v) and v > 0, ": β must be a positive number (paper: 1.0)."
        ),
    )
    pacs_score: str = setting(
        "rloo",
        "ψ over the group: rloo (eq. 7), grpo (eq. 11) or dr_grpo (eq. 12).",
        check=rule(lambda v: v in SCORE_METHODS, f": choose one of {list(SCORE_METHODS)}."),
        choices=SCORE_METHODS,
    )
    pacs_weighted: bool = setting(
        True, "Class-imbalance weights of §3.4.2; false is the paper's 'w/o weight'."
    )


LOSS_FIELDS = dataclasses.fields(PACSLossSettings)


def loss_setting_problems(policy_loss: Any, prefix: str = f"{POLICY_LOSS}.") -> list[str]:
    """What the declared checks find in verl's ``policy_loss`` section (a DictConfig, a mapping or verl's config
    object; a setting it lacks, or holds as None, takes its default), each naming the setting as ``prefix`` + its
    name."""
    get = policy_loss.get if hasattr(policy_loss, "get") else (lambda n, d=None: getattr(policy_loss, n, d))
    given = {f.name: get(f.name, None) for f in LOSS_FIELDS}
    return declared_problems({k: v for k, v in given.items() if v is not None}, LOSS_FIELDS, prefix)


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
