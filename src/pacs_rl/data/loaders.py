"""Problems with verifiable answers: benchmark names, local files, Hugging Face Hub datasets, and
procedural tasks, all turned into one list of :class:`Problem`.

Sources understood by :func:`load_problems`:

- a benchmark name (``math500``, ``aime24``, ``aime25``, ``amc23``, ``minerva``, ``olympiadbench``):
  read from ``$PACS_RL_DATA_DIR/<file>.jsonl`` when that file exists, else from its Hub dataset
  (see :data:`BENCHMARKS`);
- a local ``.jsonl`` / ``.json`` / ``.parquet`` file;
- a Hub dataset id (``owner/name``), with ``split`` or its ``test``/``train`` split;
- ``arithmetic?n=100&seed=0&ops=+-*&digits=2&split=test``: the procedural arithmetic task
  (:func:`pacs_rl.data.procedural.arithmetic_problems`);
- ``reasoning_gym:<task>?size=200&seed=1&<task options>``: a reasoning-gym task.

Bad rows (bad JSON, a missing, empty or non-string field, a duplicate id) raise a :class:`DataError`
naming the file, the line and the field, or with ``on_error="skip"`` are skipped and counted in the
returned :class:`ProblemSet` (``.skipped``, ``.skip_messages``) and logged.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pacs_rl.data import procedural
from pacs_rl.data.problems import DataError, Problem, ProblemSet
from pacs_rl.models import hub_offline, hub_unreachable

log = logging.getLogger("pacs_rl.data")

DATA_DIR_ENV = "PACS_RL_DATA_DIR"
LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet")


@dataclass(frozen=True)
class BenchmarkSpec:
    """Where a named benchmark lives: its Hub dataset and the file name used in a local data folder."""

    hub_id: str
    split: str
    problem_field: str
    answer_field: str
    local_file: str


# Fields and splits as published on the Hub (see each dataset card). Ids come from the row's 'id' /
# 'unique_id' when present, else the row position.
BENCHMARKS: dict[str, BenchmarkSpec] = {
    "math500": BenchmarkSpec("HuggingFaceH4/MATH-500", "test", "problem", "answer", "math500.jsonl"),
    "aime24": BenchmarkSpec("HuggingFaceH4/aime_2024", "train", "problem", "answer", "aime24.jsonl"),
    "aime25": BenchmarkSpec("math-ai/aime25", "test", "problem", "answer", "aime25.jsonl"),
    "amc23": BenchmarkSpec("math-ai/amc23", "test", "question", "answer", "amc23.jsonl"),
    "minerva": BenchmarkSpec("math-ai/minervamath", "test", "question", "answer", "minerva_math.jsonl"),
    "olympiadbench": BenchmarkSpec(
        "knoveleng/OlympiadBench", "train", "question", "answer", "olympiadbench.jsonl"
    ),
}
ALIASES = {
    "math-500": "math500",
    "math_500": "math500",
    "aime2024": "aime24",
    "aime_2024": "aime24",
    "aime2025": "aime25",
    "aime_2025": "aime25",
    "amc2023": "amc23",
    "amc": "amc23",
    "minerva_math": "minerva",
    "minervamath": "minerva",
    "olympiad": "olympiadbench",
    "olympiad_bench": "olympiadbench",
}


def benchmark_name(source: str) -> str | None:
    """The canonical benchmark name for ``source`` (``"MATH-500"`` -> ``"math500"``), or None."""
    key = source.strip().lower()
    key = ALIASES.get(key, key)
    return key if key in BENCHMARKS else None


# --------------------------------------------------------------------------------------------------
# Row validation


class _RowError(Exception):
    pass


def _as_text(value: Any, name: str, allow_numbers: bool) -> str:
    """A non-empty string from a row value; whole numbers (e.g. AMC answers stored as 27.0) allowed
    for answers and ids."""
    if isinstance(value, str):
        if not value.strip():
            raise _RowError(f"field {name!r} is empty")
        return value.strip() if allow_numbers else value
    if value is None:
        raise _RowError(f"field {name!r} is null")
    if allow_numbers and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if allow_numbers and isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() else repr(value)
    raise _RowError(f"field {name!r} must be a string, got {type(value).__name__} {value!r:.60}")


def _as_messages(value: Any, name: str) -> list[dict[str, str]]:
    """A prompt column: a list of chat messages ({"role": ..., "content": ...}), or a string = one user turn."""
    if isinstance(value, str) and value.strip():
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise _RowError(
            f"field {name!r} must hold chat messages (a list of {{'role', 'content'}} objects) or a string, "
            f"got {type(value).__name__} {value!r:.60}"
        )
    for i, m in enumerate(value):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise _RowError(
                f"field {name!r}, message {i}: expected {{'role': str, 'content': str}}, got {m!r:.80}"
            )
    return [{"role": m["role"], "content": m["content"]} for m in value]


class _RowReader:
    """Turns rows into Problems, enforcing the schema and unique ids; raises or skips+counts."""

    def __init__(
        self,
        source: str,
        problem_field,
        answer_field,
        id_field,
        id_prefix,
        on_error,
        limit,
        prompt_field=None,
    ):
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        self.source, self.on_error, self.limit = source, on_error, limit
        self.problem_field, self.answer_field, self.id_field = problem_field, answer_field, id_field
        self.prompt_field = prompt_field
        self.id_prefix = id_prefix
        self.out = ProblemSet(source=source)
        self.seen: set[str] = set()

    @property
    def full(self) -> bool:
        return self.limit is not None and len(self.out) >= self.limit

    def bad(self, where: str, message: str) -> None:
        text = f"{self.source}, {where}: {message}"
        if self.on_error == "raise":
            raise DataError(
                f"{text}. Fix or remove that row, or pass on_error='skip' (CLI: --on-error skip) to skip "
                "bad rows and count them."
            )
        self.out.skipped += 1
        if len(self.out.skip_messages) < 50:
            self.out.skip_messages.append(text)

    def add(self, row: Any, index: int, where: str) -> None:
        if not isinstance(row, dict):
            self.bad(where, f"expected a JSON object, got {type(row).__name__}")
            return
        try:
            messages = None
            needed = [self.answer_field]
            if self.prompt_field is None or self.problem_field in row:
                needed.append(self.problem_field)
            if self.prompt_field is not None:
                needed.append(self.prompt_field)
            for name in needed:
                if name not in row:
                    raise _RowError(f"missing field {name!r} (fields present: {', '.join(map(str, row))})")
            if self.prompt_field is not None:
                messages = _as_messages(row[self.prompt_field], self.prompt_field)
            if self.problem_field in row:
                problem = _as_text(row[self.problem_field], self.problem_field, allow_numbers=False)
            else:  # the question is the last user turn of the prompt
                problem = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
                if not problem.strip():
                    raise _RowError(f"field {self.prompt_field!r} has no user message")
            answer = _as_text(row[self.answer_field], self.answer_field, allow_numbers=True)
            id_key = self.id_field or next((k for k in ("id", "unique_id") if k in row), None)
            if id_key is not None and id_key in row:
                pid = _as_text(row[id_key], id_key, allow_numbers=True)
            elif self.id_field is not None:
                raise _RowError(f"missing id field {self.id_field!r}")
            else:
                pid = f"{self.id_prefix}{index}"
            if pid in self.seen:
                raise _RowError(f"duplicate id {pid!r}")
        except _RowError as e:
            self.bad(where, str(e))
            return
        self.seen.add(pid)
        skip = {self.problem_field, self.answer_field, self.prompt_field, id_key}
        extras = {k: v for k, v in row.items() if k not in skip}
        self.out.append(Problem(id=pid, problem=problem, answer=answer, extras=extras, messages=messages))

    def finish(self) -> ProblemSet:
        if self.out.skipped:
            log.warning(
                "%s: skipped %d bad row(s); first: %s",
                self.source,
                self.out.skipped,
                self.out.skip_messages[0],
            )
        return self.out


# --------------------------------------------------------------------------------------------------
# Sources


def _read_local(path: Path, reader: _RowReader) -> None:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq  # slow to import; only for parquet files

        for i, row in enumerate(pq.read_table(path).to_pylist()):
            if reader.full:
                return
            reader.add(row, i, f"row {i}")
        return
    text = path.read_text(encoding="utf-8")
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None  # maybe JSON lines with a .json name: fall through
        if isinstance(data, dict):
            data = next(
                (data[k] for k in ("data", "rows", "problems") if isinstance(data.get(k), list)), None
            )
            if data is None:
                raise DataError(
                    f"{path}: a .json file must hold a list of objects (or an object with a 'data' list)"
                )
        if isinstance(data, list):
            for i, row in enumerate(data):
                if reader.full:
                    return
                reader.add(row, i, f"item {i}")
            return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if reader.full:
            return
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            reader.bad(f"line {lineno}", f"bad JSON ({e.msg} at column {e.colno})")
            continue
        reader.add(row, lineno - 1, f"line {lineno}")


def datasets_offline() -> bool:
    """Whether the datasets library is told to stay offline (HF_HUB_OFFLINE=1 or HF_DATASETS_OFFLINE=1)."""
    return hub_offline() or os.environ.get("HF_DATASETS_OFFLINE", "0").lower() in ("1", "true", "yes")


def hub_dataset(source: str | os.PathLike) -> str | None:
    """The Hub dataset id :func:`load_problems` would read ``source`` from; None when it reads it without the
    network (a procedural task, a local file, a benchmark found in $PACS_RL_DATA_DIR) or cannot read it."""
    src = os.fspath(source)
    path = Path(src).expanduser()
    if procedural.is_procedural(src) or path.exists() or path.suffix.lower() in LOCAL_SUFFIXES:
        return None
    name = benchmark_name(src)
    if name is not None:
        data_dir = os.environ.get(DATA_DIR_ENV)
        local = bool(data_dir) and (Path(data_dir) / BENCHMARKS[name].local_file).is_file()
        return None if local else BENCHMARKS[name].hub_id
    return src if "/" in src else None


def _hf_cache(env: str, folder: str) -> Path:
    """A Hugging Face cache folder as the libraries find it: ``$env``, else ``$HF_HOME/folder``, else
    ``$XDG_CACHE_HOME/huggingface/folder`` (``~/.cache``)."""
    if os.environ.get(env):
        return Path(os.environ[env]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache"), "huggingface"
    )
    return Path(home).expanduser() / folder


def _snake(name: str) -> str:
    """A dataset name as the datasets library names its cache folder (its ``camelcase_to_snakecase``)."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z\d])([A-Z])", r"\1_\2", name).lower()


def hub_dataset_cached(hub_id: str) -> bool:
    """Whether Hub dataset ``hub_id`` is on this machine, where the datasets library reads it from offline: its
    prepared copy (``$HF_DATASETS_CACHE/<owner>___<name>/<config>/<version>/<hash>``), or a download of its files
    in the Hub cache (``$HF_HUB_CACHE/datasets--<owner>--<name>/snapshots/<commit>``). Reads folders only: no
    datasets import, no network."""
    owner, _, name = hub_id.rpartition("/")
    prepared = _hf_cache("HF_DATASETS_CACHE", "datasets") / "___".join(filter(None, [owner, _snake(name)]))
    if any(p.is_dir() for p in prepared.glob("*/*/*")):
        return True
    snapshots = _hf_cache("HF_HUB_CACHE", "hub") / f"datasets--{hub_id.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(p.is_dir() for p in snapshots.iterdir())


def _read_hub(hub_id: str, split: str | None, reader: _RowReader, local_hint: str) -> None:
    hint = (
        f"Point at a local file instead (path/to/{local_hint}, JSON lines with 'problem' and 'answer' fields), "
        f"or set {DATA_DIR_ENV} to a folder holding {local_hint}."
    )
    if not datasets_offline():
        why = hub_unreachable()  # one quick attempt, where the Hub client retries for a minute
        if why:
            raise DataError(
                f"could not load {hub_id!r} from the Hugging Face Hub, which cannot be reached ({why}). {hint} "
                "HF_HUB_OFFLINE=1 reads the local datasets cache."
            )
    try:
        import datasets  # slow to import; only for the Hub

        if split is None:
            dd = datasets.load_dataset(hub_id)
            split = next((s for s in ("test", "train") if s in dd), None) or next(iter(dd))
            ds = dd[split]
        else:
            ds = datasets.load_dataset(hub_id, split=split)
    except Exception as e:
        mode = "offline (HF_HUB_OFFLINE=1)" if datasets_offline() else "perhaps offline"
        raise DataError(
            f"could not load {hub_id!r} (split {split or 'default'}) from the Hugging Face Hub, {mode}: "
            f"{type(e).__name__}: {' '.join(str(e).split())[:300]}. {hint}"
        ) from e
    reader.source = f"{hub_id}[{split}]"
    for i, row in enumerate(ds):
        if reader.full:
            return
        reader.add(dict(row), i, f"row {i}")


def _load_procedural(src: str, split: str | None, limit: int | None, prompt_field: str | None) -> ProblemSet:
    """A procedural task's problems (the first ``limit``); it has no rows, so no prompt column to read."""
    if prompt_field is not None:
        raise DataError(f"{src!r} is a procedural task: it has no prompt column ({prompt_field!r})")
    problems = procedural.load_procedural(src, split=split)
    return ProblemSet(problems[:limit] if limit else problems, source=src)


def _load_benchmark(
    name: str,
    split: str | None,
    problem_field: str | None,
    answer_field: str | None,
    reader: Callable[[str, str | None, str | None, str], _RowReader],
) -> ProblemSet:
    """A named benchmark: its file in ``$PACS_RL_DATA_DIR`` when there is one (no network), else its Hub
    dataset with the dataset's own split and fields unless the caller names others."""
    spec = BENCHMARKS[name]
    data_dir = os.environ.get(DATA_DIR_ENV)
    if data_dir and (Path(data_dir) / spec.local_file).is_file():
        local = Path(data_dir) / spec.local_file
        r = reader(str(local), problem_field, answer_field, f"{name}-")
        _read_local(local, r)
        return r.finish()
    r = reader(
        spec.hub_id, problem_field or spec.problem_field, answer_field or spec.answer_field, f"{name}-"
    )
    _read_hub(spec.hub_id, split or spec.split, r, spec.local_file)
    return r.finish()


def load_problems(
    source: str | os.PathLike,
    problem_field: str | None = None,
    answer_field: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    on_error: Literal["raise", "skip"] = "raise",
    id_field: str | None = None,
    prompt_field: str | None = None,
) -> ProblemSet:
    """Load problems from a benchmark name, a local file, a Hub dataset id or a procedural task.

    ``problem_field``/``answer_field`` default to ``"problem"``/``"answer"`` (for a named benchmark
    read from the Hub, to that dataset's own fields). ``prompt_field``: a column that already holds the
    prompt as chat messages (or as one user turn of text), used as is (``Problem.messages``); the problem
    text is then ``problem_field`` when the row has it, else the last user message. ``limit`` keeps the
    first ``limit`` valid rows in file order. ``id_field`` defaults to ``id`` or ``unique_id`` when present,
    else the row position.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    src = os.fspath(source)
    if procedural.is_procedural(src):
        return _load_procedural(src, split, limit, prompt_field)

    def reader(name: str, pf: str | None, af: str | None, prefix: str) -> _RowReader:
        """A row reader for ``name`` with this call's options; fields default to ``problem``/``answer``."""
        return _RowReader(
            name, pf or "problem", af or "answer", id_field, prefix, on_error, limit, prompt_field
        )

    path = Path(src).expanduser()
    if path.is_file():
        r = reader(str(path), problem_field, answer_field, f"{path.stem}-")
        _read_local(path, r)
        return r.finish()
    if path.suffix.lower() in LOCAL_SUFFIXES:
        raise DataError(f"file not found: {path}. Check the path.")

    name = benchmark_name(src)
    if name is not None:
        return _load_benchmark(name, split, problem_field, answer_field, reader)

    if "/" in src and not path.exists():
        r = reader(src, problem_field, answer_field, f"{src.split('/')[-1]}-")
        _read_hub(src, split, r, f"{src.split('/')[-1]}.jsonl")
        return r.finish()

    raise DataError(
        f"unknown benchmark {src!r}. Use one of {', '.join(BENCHMARKS)}, a local .jsonl/.json/.parquet "
        "file, a Hugging Face dataset id (owner/name), 'arithmetic?n=100&seed=0', or "
        "'reasoning_gym:<task>?size=100&seed=0'."
    )
