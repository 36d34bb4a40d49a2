"""The problems a run trains and is measured on: the training set (the arithmetic task, a file, a Hub dataset, a
benchmark or a procedural task) and the held-out set, disjoint from it; the prompts that fit max_prompt_tokens;
the trainer's dataset. Light (no torch): the command reads local data while it checks the settings, so that a bad
row is answered before the model loads.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pacs_rl.data import (
    DataError,
    Problem,
    ProblemSet,
    arithmetic_pool_size,
    arithmetic_problems,
    benchmark_name,
    build_messages,
    encode_prompts,
    load_problems,
    split_disjoint,
)
from pacs_rl.data.procedural import arithmetic_task, is_procedural, parse_query
from pacs_rl.run_folder import FIELD_KEYS, HELDOUT_SEED
from pacs_rl.settings.errors import SettingsError
from pacs_rl.training.schema import RunSettings

log = logging.getLogger("pacs_rl.training")


def _arithmetic_sets(settings: RunSettings, seed: int) -> tuple[list[Problem], dict[str, Any]]:
    """The arithmetic training problems; a source string's own options win over the run keys."""
    source = settings.dataset
    opts = parse_query(source.partition("?")[2])
    if str(opts.pop("split", "train")) != "train":
        raise DataError(
            f"{source!r}: a training set is drawn from the train split (the held-out set from test)"
        )
    unknown = set(opts) - {"n", "seed", "ops", "digits"}
    if unknown:
        raise DataError(
            f"{source!r}: unknown option(s) {', '.join(sorted(unknown))}; known: n, seed, ops, digits"
        )
    task = arithmetic_task(source, settings.arithmetic_ops, settings.arithmetic_digits)
    want = int(opts.get("n", settings.train_size or 2000))
    pool = arithmetic_pool_size(split="train", **task)
    if want > pool and "n" not in opts:  # train_size is a ceiling here; an explicit n= is a demand
        default = RunSettings.__dataclass_fields__["train_size"].default
        if (
            settings.train_size != default
        ):  # a size the user asked for: say it is capped (the default is quiet)
            log.info(
                "training on all %d problems of arithmetic ops=%s digits=%s (train_size=%d is more)",
                pool, task["ops"], task["digits"], want,
            )  # fmt: skip
        want = pool
    return arithmetic_problems(want, seed=int(opts.get("seed", seed)), split="train", **task), task


def _field_names(settings: RunSettings) -> dict[str, str | None]:
    return {k: getattr(settings, k) for k in FIELD_KEYS}


def _file_problems(settings: RunSettings) -> list[Problem]:
    """The training problems of a file, Hub dataset or reasoning-gym task: a ProblemSet, which counts the skipped
    rows and keeps their first messages (the loader's note prints the first)."""
    return load_problems(settings.dataset, limit=settings.train_size or None, **settings.loader_kwargs())


def load_run_data(settings: RunSettings, seed: int) -> tuple[list[Problem], list[Problem]]:
    """Training problems and held-out problems (disjoint from training). Raises SettingsError naming the
    data settings when a source, a row or an arithmetic option is bad."""
    return _naming_settings(settings, _load_run_data, settings, seed)


def load_heldout_file(settings: RunSettings) -> list[Problem]:
    """The held-out problems of ``eval_dataset`` as a run reads them, before they are made disjoint from training
    (none without one, or with eval_size 0): the check of a held-out file when the training set is read from the
    Hub. Raises SettingsError as load_run_data does."""
    return _naming_settings(settings, _heldout_file, settings)


def _naming_settings(settings: RunSettings, read, *args):
    """``read(*args)``, a ValueError (DataError included: a bad file row, source string or arithmetic option)
    raised as a SettingsError that names the data settings."""
    try:
        return read(*args)
    except ValueError as e:
        raise SettingsError(
            f"{e} (settings: dataset={settings.dataset!r}, arithmetic_ops={settings.arithmetic_ops!r}, "
            f"arithmetic_digits={settings.arithmetic_digits!r}, eval_dataset={settings.eval_dataset!r})"
        ) from None


def _heldout_file(settings: RunSettings) -> list[Problem]:
    source = settings.eval_dataset
    if not settings.eval_size or source is None:
        return []
    own_fields = benchmark_name(source) is not None or is_procedural(source)
    fields = {} if own_fields else _field_names(settings)
    return list(load_problems(source, limit=settings.eval_size, on_error="skip", **fields))


def _load_run_data(settings: RunSettings, seed: int) -> tuple[list[Problem], list[Problem]]:
    source = settings.dataset
    arithmetic = settings.on_arithmetic()
    task: dict[str, Any] = {}
    if arithmetic:
        train, task = _arithmetic_sets(settings, seed)
    else:
        train = _file_problems(settings)
    held: list[Problem] = []
    if settings.eval_size:
        if settings.eval_dataset is None and arithmetic:
            n = min(settings.eval_size, arithmetic_pool_size(split="test", **task))
            held = arithmetic_problems(n, seed=HELDOUT_SEED, split="test", **task)
        elif settings.eval_dataset is not None:
            source = settings.eval_dataset
            held = _heldout_file(settings)
    if held:
        kept, dropped = split_disjoint(train, held)
        skipped = (getattr(train, "skipped", 0), getattr(train, "skip_messages", []))
        train = ProblemSet(kept, source=str(source), skipped=skipped[0], skip_messages=skipped[1])
        if dropped:
            log.info("dropped %d training problems that also appear in the held-out set", dropped)
    if not train:
        raise DataError(f"dataset {source!r} gave no usable training problems")
    return train, held


# ---------------------------------------------------------------------------------------------------- prompts
def prompt_lengths(problems: list[Problem], tokenizer, prompt_kwargs: Mapping[str, Any]) -> list[int]:
    """Tokens of each problem's prompt after the chat template, as the trainer renders it."""
    return [len(ids) for ids in encode_prompts(tokenizer, problems, dict(prompt_kwargs))]


def drop_long_prompts(
    problems: list[Problem], lengths: list[int], max_tokens: int | None
) -> tuple[list[Problem], int]:
    """(the problems whose prompt has at most ``max_tokens`` tokens, how many were dropped); None keeps all."""
    if max_tokens is None:
        return problems, 0
    kept = [p for p, n in zip(problems, lengths, strict=True) if n <= max_tokens]
    return kept, len(problems) - len(kept)


def filter_prompts(problems: list[Problem], tokenizer, settings: RunSettings, config) -> list[Problem]:
    """The training problems without those whose prompt is longer than ``max_prompt_tokens`` (counted, logged).
    Raises SettingsError when none is left."""
    if settings.max_prompt_tokens is None:
        return problems
    lengths = prompt_lengths(problems, tokenizer, settings.prompt_kwargs(config))
    kept, dropped = drop_long_prompts(problems, lengths, settings.max_prompt_tokens)
    if not kept:
        raise SettingsError(
            f"max_prompt_tokens={settings.max_prompt_tokens}: every one of the {len(problems)} training prompts is "
            f"longer (the shortest has {min(lengths)} tokens): raise it, or set it to null"
        )
    if dropped:
        log.info(
            "dropped %d of %d training prompts longer than %d tokens (max_prompt_tokens)",
            dropped, len(problems), settings.max_prompt_tokens,
        )  # fmt: skip
    return kept


def build_dataset(problems: list[Problem], settings: RunSettings | None = None):
    """The trainer's dataset, one row per problem: the chat prompt (the paper's unless the settings say
    otherwise, or the row's own messages), the gold answer, the problem text (the restatement rule's question)
    and the problem id."""
    from datasets import Dataset  # the trainer's (heavy): the rest of this module loads with the command

    settings = settings or RunSettings()
    return Dataset.from_list(
        [
            {
                "prompt": build_messages(p.problem, settings.system_prompt, settings.instruction, p.messages),
                "answer": p.answer,
                "problem": p.problem,
                "problem_id": p.id,
            }
            for p in problems
        ]
    )
