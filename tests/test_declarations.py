"""Every setting with a domain carries its check. A walker reads every declaration (`setting(...)` in the modules of
DECLARATIONS, and TRL's fields in training/trl_fields.py) and fails on a number (an int or float type) or an
enumerated setting (declared choices, an enum type, TRL's own choices) without a check, naming it; every default
passes its own check. Adding a module of declarations is one line of DECLARATIONS."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from dataclasses import dataclass

import pytest

from pacs_rl.settings import at_least, declared, interval, is_declared, one_of, setting

# The modules that declare settings with `setting(...)`: every dataclass defined in one is walked.
DECLARATIONS = [
    "pacs_rl.settings",  # DataSettings: train's, eval's and compare's data and prompt settings
    "pacs_rl.training.schema",  # pacs-rl train: RunSettings, PACSFields, CriticFields
    "pacs_rl.evaluation.runner",  # pacs-rl eval: EvalConfig
    "pacs_rl.integrations.verl.options",  # the verl plug-in: PACSLossSettings
    "pacs_rl.compare.plan",  # pacs-rl compare: Comparison (the top level), EvalSection (the eval section)
    "pacs_rl.compare.paired.record",  # a paired record's protocol: Protocol and its parts
    "pacs_rl.compare.paired.cli",  # pacs-rl compare paired: PairedOptions
]

NUMBER = re.compile(r"\b(int|float)\b")
ENUM = re.compile(r"\b\w*(Strategy|SchedulerType|OptimizerNames)\b")  # transformers' enumerated types


def has_domain(kind: str, choices=None) -> bool:
    """A setting's type (as text) or its declared choices give it a domain a value can fall out of."""
    return bool(NUMBER.search(kind) or ENUM.search(kind) or choices)


def declared_fields(module_name: str) -> list[tuple[str, dataclasses.Field]]:
    """(class.field, field) of every setting the dataclasses defined in ``module_name`` declare."""
    module = importlib.import_module(module_name)
    classes = [
        c
        for c in vars(module).values()
        if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == module_name
    ]
    return [
        (f"{c.__name__}.{f.name}", f)
        for c in classes
        for f in dataclasses.fields(c)
        if is_declared(f) and f.name in inspect.get_annotations(c)
    ]


def unchecked(fields: list[tuple[str, dataclasses.Field]]) -> list[str]:
    """The settings among ``fields`` whose type has a domain but whose declaration has no check."""
    return [
        name
        for name, f in fields
        if has_domain(str(f.type), f.metadata.get("choices")) and declared(f).check is None
    ]


@pytest.mark.parametrize("module_name", DECLARATIONS)
def test_every_declared_setting_with_a_domain_has_its_check(module_name):
    fields = declared_fields(module_name)
    assert fields, f"{module_name} declares no setting: take it out of DECLARATIONS"
    assert unchecked(fields) == [], f"{module_name}: settings with a domain but no check"


@pytest.mark.parametrize("module_name", DECLARATIONS)
def test_every_declared_default_passes_its_own_check(module_name):
    refused = [
        (name, problem)
        for name, f in declared_fields(module_name)
        if declared(f).check is not None and f.default is not dataclasses.MISSING
        for problem in [declared(f).check(name, f.default)]
        if problem
    ]
    assert refused == []


def test_the_walker_fails_on_a_setting_without_its_check():
    @dataclass
    class Forgot:
        rate: float = setting(0.1, "A number without its check.")
        count: int | None = setting(None, "A count with its check.", check=at_least(1, null=True))
        mode: str = setting("a", "An enumerated setting without its check.", choices=("a", "b"))
        name: str = setting("x", "Free text: no domain.")
        on: bool = setting(True, "A switch: no domain.")

    fields = [(f"Forgot.{f.name}", f) for f in dataclasses.fields(Forgot)]
    assert unchecked(fields) == ["Forgot.rate", "Forgot.mode"]


def test_trl_fields_with_a_domain_have_their_check():
    """TRL's fields as trl_fields.py declares them: every one with a domain (its type, an enum, or TRL's own
    choices) has a check, unless this project declares the field itself, refuses it whatever its value, or no code
    the run executes reads it; every check passes TRL's default."""
    trl = pytest.importorskip("trl")
    from pacs_rl.training.schema import CONFIG_FIELDS
    from pacs_rl.training.trl_fields import GRPO_FIELDS, IRRELEVANT, REFUSED, grpo_default

    trl_fields = {f.name: f for f in dataclasses.fields(trl.GRPOConfig)}
    missing, refused = [], []
    for name, (kind, rule) in GRPO_FIELDS.items():
        if name in CONFIG_FIELDS or rule.status == IRRELEVANT or (rule.status == REFUSED and not rule.losses):
            continue
        choices = trl_fields[name].metadata.get("choices") if name in trl_fields else None
        if has_domain(kind, choices) and rule.check is None:
            missing.append(name)
        if rule.check is not None and name in trl_fields and rule.check(name, grpo_default(name)):
            refused.append(name)
    assert missing == [], "TRL fields with a domain but no check in trl_fields.py"
    assert refused == [], "TRL fields whose default their own check refuses"


def test_the_check_builders_name_the_setting_and_the_domain():
    assert interval(0, open_low=True)("pacs_beta", 0) == "pacs_beta=0: give a number > 0"
    assert interval(0, 1, open_low=True)("top_p", 1.5) == "top_p=1.5: give a number in (0, 1]"
    assert interval(0, 1, open_high=True)("lora_dropout", 1.0) == "lora_dropout=1.0: give a number in [0, 1)"
    assert interval(0)("learning_rate", float("nan")) == "learning_rate=nan: give a number >= 0"
    assert interval(0)("learning_rate", float("inf")) == "learning_rate=inf: give a number >= 0"
    assert interval(1, whole_number=True)("pad_to_multiple_of", 2.5) is not None
    assert (
        interval(0)("learning_rate", None) is None and interval(0)("learning_rate", "auto") is None
    )  # the type's
    assert at_least(1)("lora_r", 0) == "lora_r=0: give a whole number >= 1"
    assert at_least(1, null=True)("limit", None) is None
    assert one_of(("a", "b"))("mode", "c") == "mode='c'; use one of ['a', 'b']."
