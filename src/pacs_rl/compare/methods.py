"""The methods a comparison trains, one table for every way of comparing (`pacs-rl compare` and `pacs-rl compare
paired`): a name, the trainer config overrides it stands for, its row name in the tables and what it is; and the one
spelling of a variant of a method, ``pacs[pacs_beta=0.5,reference=frozen]``, read and checked as `pacs-rl train`
reads and checks its settings.

One meaning per name, each method as the PACS authors ran it (docs/ALGORITHMS.md, "Ours vs the authors' runs"):
their PACS actor never clips the gradient; their GRPO ran on stock verl (clip 1.0, token losses summed and divided
by the response budget, dual clip 3). ``pacs_clip`` asks the clip question of PACS. Every other registered loss
(``dr_grpo``, ``rloo``, ``cw_grpo``, ``ppo``, a loss registered from your code) is a method of its own name with
its config defaults.

A record keeps the overrides its runs were trained with (in its protocol), so a name whose meaning changed reads as
recorded: before this table, ``pacs`` in a `pacs-rl compare` folder was clipped at 1.0 (the CPU default's clip), as
``pacs_clip`` is now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from pacs_rl.settings.errors import SettingsError
from pacs_rl.training.checks import config_problems, read_settings, split_typed
from pacs_rl.training.schema import loss_type_names


class CompareError(SettingsError):
    """A comparison setting that cannot be run; the message names it and what to do."""


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
# What a comparison sets for every run itself: never a variant's (nor a train section's) setting
RESERVED_KEYS = ("output_dir", "seed", "data_seed", "loss_type")


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
    option's is beside the loss, algorithms/options.py). Raises CompareError naming ``where`` and the setting."""
    try:
        read = read_settings(values, where)
    except SettingsError as e:
        raise CompareError(str(e)) from None
    reserved = [k for k in read if k in RESERVED_KEYS]
    if reserved:
        raise CompareError(f"{where}: {', '.join(reserved)} is set by the comparison itself (the method's loss, the "
                           "run's seed and folder); leave it out of the variant")  # fmt: skip
    overrides = {**method_overrides(method), **read}
    try:
        _, config = split_typed(overrides)  # a run key's own check runs here
    except SettingsError as e:
        raise CompareError(f"{where}: {e}") from None
    problems = config_problems(config, installed=False)
    if problems:
        raise CompareError(f"{where}: {'; '.join(problems)}")
    return overrides


def variant_values(spec: str, option: str = "--methods") -> tuple[str, dict[str, Any]]:
    """(the method, its settings as given) of a method or variant ``spec``: a method name (`method_names`: the
    table's and every registered loss), or ``name[key=value,...]`` (``pacs[reference=frozen,ref_reset_steps=8]``,
    each value read as YAML)."""
    name, _, rest = spec.partition("[")
    if name not in method_names() or (rest and not rest.endswith("]")):
        raise CompareError(f"{option} {spec!r}: give one of {', '.join(method_names())}, or a variant like "
                           "pacs[pacs_beta=0.5]")  # fmt: skip
    values = {}
    for item in filter(None, rest[:-1].split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise CompareError(f"{option} {spec!r}: {item!r} is not key=value")
        values[key.strip()] = yaml.safe_load(value)
    return name, values


def parse_method(spec: str, option: str = "--methods") -> dict[str, Any]:
    """The config overrides of a method or variant ``spec`` (`variant_values`), each setting typed and checked as
    `pacs-rl train` checks it (`variant_overrides`)."""
    name, values = variant_values(spec, option)
    return variant_overrides(name, values, f"{option} {spec!r}")


def base_method(spec: str) -> str:
    """The method a variant varies: ``pacs`` of ``pacs[pacs_beta=0.5]``."""
    return spec.partition("[")[0]


def split_methods(text: str | list[str] | None) -> list[str] | None:
    """Comma-separated methods, where a variant's own commas (``pacs[reference=frozen,ref_reset_steps=8]``) stay
    inside its brackets; a list is taken as it is."""
    if not text:
        return None
    if not isinstance(text, str):
        return [str(m).strip() for m in text]
    out, depth, part = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(part.strip())
            part = ""
        else:
            part += ch
    return [m for m in [*out, part.strip()] if m]


def method_label(method: str) -> str:
    """Row name of a method or a variant in the tables, as the paper writes it: ``PACS[pacs_beta=0.5]``."""
    name = base_method(method)
    if name in METHODS:
        label = METHODS[name].label
    else:
        from pacs_rl.algorithms import LOSS_LABELS  # torch: only the report needs the labels of other losses

        label = LOSS_LABELS.get(name, name)
    return label + method[len(name) :]
