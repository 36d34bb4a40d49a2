"""The methods a comparison trains, one table for every way of comparing (`pacs-rl compare` and `pacs-rl compare
paired`): a name, the trainer config overrides it stands for, its row name in the tables and what it is.

One meaning per name, each method as the PACS authors ran it (docs/ALGORITHMS.md, "Ours vs the authors' runs"):
their PACS actor never clips the gradient; their GRPO ran on stock verl (clip 1.0, token losses summed and divided
by the response budget, dual clip 3). ``pacs_clip`` asks the clip question of PACS. Every other registered loss
(``dr_grpo``, ``rloo``, ``cw_grpo``, ``ppo``, a loss registered from your code) is a method of its own name with
its config defaults.

A record keeps the overrides its runs were trained with (a paired record in its protocol, a comparison folder in
its manifest), so a name whose meaning changed reads as recorded: before this table, ``pacs`` in a `pacs-rl
compare` folder was clipped at 1.0 (the CPU default's clip), as ``pacs_clip`` is now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pacs_rl.settings.errors import SettingsError
from pacs_rl.training.checks import config_problems, read_settings, split_typed
from pacs_rl.training.schema import loss_type_names


@dataclass(frozen=True)
class Method:
    """A method: the config overrides it trains with, its row name in the tables and what it is."""

    overrides: dict[str, Any]
    label: str
    about: str


_VERL_GRPO = {"loss_agg_mode": "seq-mean-token-sum-norm", "clip_ratio_c": 3.0}

METHODS: dict[str, Method] = {
    "pacs": Method(
        {"loss_type": "pacs", "max_grad_norm": None}, "PACS", "PACS as the authors ran it: no gradient clip"
    ),
    "pacs_clip": Method(
        {"loss_type": "pacs", "max_grad_norm": 1.0}, "PACS (clip 1.0)", "PACS with gradient clip 1.0"
    ),
    "pacs_no_weight": Method(
        {"loss_type": "pacs", "max_grad_norm": None, "pacs_weighted": False},
        "PACS w/o weight",
        "PACS without the class-imbalance weight (no clip)",
    ),
    "grpo": Method(
        {"loss_type": "grpo", "max_grad_norm": 1.0, "loss_options": _VERL_GRPO},
        "GRPO",
        "GRPO as the PACS authors ran it (verl): clip 1.0, seq-mean-token-sum-norm, dual clip 3",
    ),
    "grpo_trl": Method(
        {"loss_type": "grpo", "max_grad_norm": 1.0, "loss_options": {"loss_agg_mode": "token-mean"}},
        "GRPO (TRL)",
        "GRPO as TRL 1.16 runs it by default: clip 1.0, token-level mean (its 'dapo' aggregation), ε = 0.2",
    ),
}


def method_names() -> list[str]:
    """Every method: each registered loss (registry order), each method of the table after the loss it trains."""
    out = []
    for name in loss_type_names():
        out += [name] if name not in METHODS else []
        out += [m for m, method in METHODS.items() if method.overrides["loss_type"] == name]
    return list(dict.fromkeys(out))


def method_overrides(method: str) -> dict[str, Any]:
    """The config overrides of ``method`` (a copy; a registered loss outside the table: its loss_type alone)."""
    return dict(METHODS[method].overrides) if method in METHODS else {"loss_type": method}


def variant_overrides(method: str, values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The config overrides of a variant of ``method`` (``pacs[pacs_beta=0.5]``: ``values`` {"pacs_beta": 0.5} over
    the method's own), each setting read and checked as `pacs-rl train` reads and checks it (training/checks.py): its
    name known (close matches named), its value typed and checked by its declaration (training/schema.py; a PACS
    option's is beside the loss, algorithms/options.py). Raises SettingsError naming ``where`` and the setting."""
    overrides = {**method_overrides(method), **read_settings(values, where)}
    try:
        _, config = split_typed(overrides)  # a run key's own check runs here
    except SettingsError as e:
        raise SettingsError(f"{where}: {e}") from None
    problems = config_problems(config, installed=False)
    if problems:
        raise SettingsError(f"{where}: {'; '.join(problems)}")
    return overrides


def method_label(method: str) -> str:
    """Row name of ``method`` in the tables, as the paper writes it."""
    if method in METHODS:
        return METHODS[method].label
    from pacs_rl.algorithms import LOSS_LABELS  # torch: only the report needs the labels of other losses

    return LOSS_LABELS.get(method, method)
