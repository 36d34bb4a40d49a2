"""The options of the losses, declared once as plain data (no torch, and nothing of the commands): each option's
setting name, the loss's keyword it fills, its type, default, domain and help.

Everything that takes a PACS option reads it from `PACS_OPTIONS`: `pacs-rl train`'s config fields
(`pacs_rl.training.schema.PACSFields`; a variant of `pacs-rl compare`, ``pacs[pacs_beta=0.5]``, is typed and checked
by them) and the verl plug-in's ``actor.policy_loss`` fields (`pacs_rl.integrations.verl.options`) are generated
from it by `pacs_rl.settings.declarations.option_setting`. Adding a PACS option is one `LossOption` here and its
keyword in `pacs_loss` (pacs.py); nothing else names it (tests/test_adding_an_option.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LOSS_AGG_MODES", "PACS_OPTIONS", "SCORE_METHODS", "LossOption"]

SCORE_METHODS = ("rloo", "grpo", "dr_grpo")  # how ψ is formed from a group's r̂ (and a baseline's advantage)
# how a baseline's token losses are reduced (baselines.aggregate_token_loss, verl's loss_agg_mode)
LOSS_AGG_MODES = ("seq-mean-token-mean", "seq-mean-token-sum-norm", "token-mean")


@dataclass(frozen=True)
class LossOption:
    """One option of a loss: the setting ``name`` that carries it (a config field of `pacs-rl train`, a key of a
    `compare` variant and of verl's ``actor.policy_loss``) and the loss's ``keyword`` it fills, its ``type`` (bool,
    int, float or str), ``default`` and ``help``, and its domain: a number's bounds (``low``, ``high``, each
    included unless ``open_low`` / ``open_high``; a number always finite) or a text's ``choices``; ``note`` is added
    to the refusal of a value outside it."""

    name: str
    keyword: str
    type: type
    default: Any
    help: str
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple[Any, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        if self.type not in (bool, int, float, str):
            raise TypeError(f"{self.name}: an option's type is bool, int, float or str, not {self.type!r}")
        if self.type in (int, float) and self.low is None and self.high is None:
            raise ValueError(f"{self.name}: a number option declares its domain (low and/or high)")


PACS_OPTIONS: tuple[LossOption, ...] = (
    LossOption(
        "pacs_beta",
        "beta",
        float,
        1.0,
        "β of the PACS reward proxy r̂ = β·Σ_t (log π_θ − log π_ref) (paper eq. 8; the paper: 1.0). Not the KL "
        "coefficient (TRL's `beta`, which stays 0 for PACS).",
        low=0,
        open_low=True,
        note=" (β scales the reward proxy; 0 or less zeroes or flips it)",
    ),
    LossOption(
        "pacs_score",
        "score",
        str,
        "rloo",
        "How ψ is formed from the r̂ of a group: 'rloo' (default, eq. 7: r̂_i minus the mean of the others), "
        "'grpo' (eq. 11: standardised within the group), 'dr_grpo' (eq. 12: minus the group mean).",
        choices=SCORE_METHODS,
    ),
    LossOption(
        "pacs_weighted",
        "weighted",
        bool,
        True,
        "Class-imbalance weights (paper §3.4.2): in a group with both labels, a completion of label y gets "
        "weight G / (2·count(y)); single-label groups keep weight 1. False sets every weight to 1 (the paper's "
        "'w/o weight').",
    ),
)
