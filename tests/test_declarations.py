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

from pacs_rl.settings.declarations import at_least, declared, interval, is_declared, one_of, setting

# The modules that declare settings with `setting(...)`: every dataclass defined in one is walked.
DECLARATIONS = [
    "pacs_rl.settings.data",  # DataSettings: train's, eval's and compare's data and prompt settings
    "pacs_rl.training.schema",  # pacs-rl train: RunSettings, PACSFields, CriticFields
    "pacs_rl.evaluation.runner",  # pacs-rl eval: EvalConfig
    "pacs_rl.integrations.verl.options",  # the verl plug-in: PACSLossSettings
    "pacs_rl.compare.plan",  # pacs-rl compare: Comparison (the top level), EvalSection (the eval section)
    "pacs_rl.compare.record",  # a paired record's protocol: Protocol and its parts
    "pacs_rl.compare.cli",  # pacs-rl compare and compare paired: RunnerOptions, PairedOptions
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


def test_every_loss_option_declares_its_domain_and_every_command_takes_it_from_there():
    """A loss option is declared once, as plain data beside the loss (algorithms/options.py): a number declares its
    bounds (a declaration without them is refused), a text its choices; `pacs-rl train`'s config fields and the verl
    plug-in's fields are generated from it, with its type, default, help, check and keyword."""
    from pacs_rl.algorithms.options import PACS_OPTIONS, LossOption
    from pacs_rl.integrations.verl.options import LOSS_FIELDS
    from pacs_rl.training.schema import CONFIG_FIELDS, PACS_OPTION_FIELDS

    for option in PACS_OPTIONS:
        assert option.type is bool or option.choices or (option.low, option.high) != (None, None), option.name
    with pytest.raises(ValueError, match="a number option declares its domain"):
        LossOption("pacs_x", "x", float, 0.0, "A number without its domain.")
    with pytest.raises(TypeError, match="bool, int, float or str"):
        LossOption("pacs_x", "x", list, [], "A type the commands cannot read from text.")
    verl = {f.name: f for f in LOSS_FIELDS}
    assert list(verl) == [o.name for o in PACS_OPTIONS]
    assert {o.keyword: o.name for o in PACS_OPTIONS} == PACS_OPTION_FIELDS
    for option in PACS_OPTIONS:
        for f in (CONFIG_FIELDS[option.name], verl[option.name]):
            assert (f.type, f.default, f.metadata["help"]) == (option.type, option.default, option.help)
            assert declared(f).loss_option == option.keyword and declared(f).check is not None


def test_a_loss_options_check_is_its_type_then_its_domain():
    from pacs_rl.algorithms.options import LossOption
    from pacs_rl.settings.declarations import option_check, typed

    beta = option_check(LossOption("b", "b", float, 1.0, "", low=0, open_low=True))
    assert beta("b", 1) is None and beta("b", 0.5) is None  # an int is a float's value too
    assert beta("b", 0) == "b=0: give a number > 0"
    assert beta("b", float("inf")) == "b=inf: give a number > 0"
    assert beta("b", "x") == "b='x': expected float" and beta("b", True) == "b=True: expected float"
    count = option_check(LossOption("c", "c", int, 1, "", low=1, high=8))
    assert count("c", 2.0) == "c=2.0: expected int" and count("c", 9) == "c=9: give a whole number in [1, 8]"
    mode = option_check(LossOption("m", "m", str, "a", "", choices=("a", "b")))
    assert mode("m", "c") == "m='c'; choose one of ['a', 'b']." and mode("m", 1) == "m=1: expected str"
    switch = option_check(LossOption("s", "s", bool, True, ""))
    assert switch("s", False) is None and switch("s", 1) == "s=1: expected bool"
    assert typed(str)("t", None) == "t=None: expected str"


def test_a_finite_value_is_meant_and_a_learning_rate_of_0_is_refused():
    """The rates, clips and discounts of `pacs-rl train` take finite values only, and learning_rate 0 (which trains
    nothing) is refused, naming why."""
    from pacs_rl.training.checks import config_problems

    inf = float("inf")
    cases = {
        "learning_rate": (0, "learning_rate=0: give a number > 0 (0 trains nothing)"),
        "max_grad_norm": (inf, "max_grad_norm=inf: give a number >= 0 (0 or null: no clipping)"),
        "critic_learning_rate": (inf, "critic_learning_rate=inf: give a number > 0"),
        "critic_max_grad_norm": (inf, "critic_max_grad_norm=inf: give a number >= 0"),
        "value_clip_eps": (inf, "value_clip_eps=inf: give a number > 0"),
        "gae_gamma": (1.5, "gae_gamma=1.5: give a number in [0, 1]"),
    }
    for key, (value, refusal) in cases.items():
        problems = config_problems({"loss_type": "ppo", key: value}, installed=False)
        assert any(p.startswith(refusal) for p in problems), (key, problems)
    fine = {"loss_type": "ppo", "learning_rate": 1e-6, "max_grad_norm": None}
    assert config_problems(fine, installed=False) == []
