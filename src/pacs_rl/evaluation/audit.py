"""``pacs-rl audit``: grade saved samples again with another grader, and say what changes.

A policy trained against a grader learns what that grader pays; a held-out accuracy measured with the same grader
cannot show it. Graded again by another grader, the saved completions show which answers only one of them pays,
in what form (:data:`pacs_rl.rewards.answers.FORMS`), and what that does to pass@k.

It reads the samples of

- a ``pacs-rl eval`` folder: ``samples.jsonl`` and ``run.json`` (the grader, and the benchmark to reload the
  questions from when the rows do not hold them);
- a ``pacs-rl train`` run folder: ``samples/rollouts.jsonl`` (the training rollouts) and
  ``samples/heldout_before.jsonl``, ``samples/heldout_after.jsonl`` (the held-out answers), whose rows hold their
  questions; the grader from ``answer_forms.json``, ``run_settings.json`` or ``settings.json``;
- any folder holding such folders, at any depth (``runs/pacs_vs_grpo``).

:func:`audit` does the work and returns a JSON-ready dict; :func:`report_lines` says it in lines. Light at import
(no math-verify): the verifier loads when grading starts.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pacs_rl.data import load_problems
from pacs_rl.evaluation.samples import FORM_ORDER, read_samples, sample_form
from pacs_rl.progress import advancing
from pacs_rl.rewards.answers import answer_form
from pacs_rl.rewards.graders import TRAINING_GRADER, grader_name
from pacs_rl.run_folder import (
    AUDIT_FILE,
    EVAL_METRICS_FILE,
    EVAL_RUN_FILE,
    EVAL_SAMPLES_FILE,
    FORMS_FILE,
    OTHER_SETTINGS_FILE,
    SAMPLES_DIR,
    SETTINGS_FILE,
    TRAINING_SAMPLES_FILES,
    first_jsonl_row,
)

# where a training run names its grader, first found wins: file -> paths of keys in it
GRADER_RECORDS = (
    (FORMS_FILE, (("grader",),)),
    (OTHER_SETTINGS_FILE, (("grader",), ("run", "grader"), ("settings", "grader"))),
    (SETTINGS_FILE, (("run", "grader"), ("grader",))),
)
KINDS = {"eval": "pacs-rl eval", "rollouts": "training rollouts", "heldout": "training held-out"}
EXAMPLES = 3
CHUNK = 256  # rows graded per call (the progress bar advances by these)
PROGRESS_MIN_ROWS = 200  # fewer rows are graded without a bar
_SHORT = 160  # characters of a completion shown in an example


class AuditError(ValueError):
    """A path or a setting that cannot be audited: one line naming it and what to do."""


@dataclass
class SamplesFile:
    """One samples file to audit: where it is, what wrote it, and the grader that scored it (None: unknown)."""

    path: Path
    kind: str  # "eval", "rollouts" (training), "heldout" (training, before/after)
    run_dir: Path  # the eval folder, or the training run folder
    recorded_grader: str | None
    eval_settings: dict[str, Any] = field(default_factory=dict)  # run.json's settings (eval folders)

    @property
    def what(self) -> str:
        return KINDS[self.kind]


# ------------------------------------------------------------------------------------------------ what to read
def _canonical(name: Any) -> str | None:
    if not name or not isinstance(name, str):
        return None
    if name == "auto":  # pacs-rl train's auto: the training grader (samples are kept since it became sound)
        return TRAINING_GRADER
    try:
        return grader_name(name)
    except ValueError:
        return name  # a grader this code no longer knows: named as recorded


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _dig(value: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _eval_file(path: Path) -> SamplesFile:
    folder = path.parent
    settings = _read_json(folder / EVAL_RUN_FILE).get("settings") or {}
    grader = settings.get("grader") or _read_json(folder / EVAL_METRICS_FILE).get("grader")
    return SamplesFile(path, "eval", folder, _canonical(grader), settings)


def training_grader(run_dir: Path) -> str | None:
    """The grader a training run recorded (answer_forms.json, run_settings.json, settings.json), else None."""
    for name, key_paths in GRADER_RECORDS:
        if (run_dir / name).is_file():
            record = _read_json(run_dir / name)
            for keys in key_paths:
                found = _canonical(_dig(record, keys))
                if found:
                    return found
    return None


def _training_file(path: Path) -> SamplesFile:
    run_dir = path.parent.parent
    kind = "heldout" if path.name.startswith("heldout") else "rollouts"
    return SamplesFile(path, kind, run_dir, training_grader(run_dir))


def _training_order(path: Path) -> tuple:
    name = path.name
    return (
        str(path.parent),
        TRAINING_SAMPLES_FILES.index(name) if name in TRAINING_SAMPLES_FILES else len(TRAINING_SAMPLES_FILES),
        name,
    )


def _in_folder(folder: Path) -> list[SamplesFile]:
    evals = sorted(folder.rglob(EVAL_SAMPLES_FILE))
    training = sorted((p for p in folder.rglob(f"{SAMPLES_DIR}/*.jsonl") if p.is_file()), key=_training_order)
    found = [_eval_file(p) for p in evals if p.is_file()] + [_training_file(p) for p in training]
    return sorted(found, key=lambda s: (str(s.run_dir), _training_order(s.path)))


def find_samples(paths: Iterable[str | Path]) -> list[SamplesFile]:
    """The samples files of ``paths`` (eval folders, training run folders, folders holding them at any depth, or
    samples files themselves), each once, in the order given. Raises AuditError for a path that does not exist or
    holds no samples."""
    out: list[SamplesFile] = []
    seen: set[Path] = set()
    for p in map(Path, paths):
        if not p.exists():
            raise AuditError(f"{p}: no such file or folder; give a pacs-rl eval or pacs-rl train run folder")
        if p.is_file():
            if p.name == EVAL_SAMPLES_FILE:
                found = [_eval_file(p)]
            elif p.suffix == ".jsonl" and p.parent.name == SAMPLES_DIR:
                found = [_training_file(p)]
            else:
                raise AuditError(
                    f"{p}: not a samples file (samples.jsonl of pacs-rl eval, samples/*.jsonl of pacs-rl train); "
                    "give its run folder"
                )
        else:
            found = _in_folder(p)
            if not found:
                raise AuditError(
                    f"{p}: no samples in it or its sub-folders (pacs-rl eval writes samples.jsonl, pacs-rl train "
                    "samples/rollouts.jsonl); give a run folder that has them"
                )
        for s in found:
            key = s.path.resolve()
            if key not in seen:
                seen.add(key)
                out.append(s)
    return out


def default_grader(recorded: str | None) -> str:
    """The grader to audit with when none is given: ``sound``, or ``paper`` for samples scored by ``sound``."""
    return "paper" if recorded == TRAINING_GRADER else TRAINING_GRADER


def count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


# -------------------------------------------------------------------------------------------------- questions
class Questions:
    """Where the questions of rows that do not hold their own come from: ``given`` (a mapping problem_id ->
    question, or a data source: ``--questions``), else each eval folder's benchmark, reloaded once."""

    def __init__(self, given: str | Mapping[str, str] | None = None):
        self.given = given
        self._loaded: dict[tuple, tuple[dict[str, str], str | None]] = {}

    def _load(self, source: str, settings: Mapping[str, Any]) -> tuple[dict[str, str], str | None]:
        keys = ("split", "problem_field", "answer_field", "prompt_field")
        cache_key = (source, *(settings.get(k) for k in keys))
        if cache_key not in self._loaded:
            try:
                problems = load_problems(source, on_error="skip", **{k: settings.get(k) for k in keys})
                self._loaded[cache_key] = ({p.id: p.problem for p in problems}, None)
            except Exception as e:  # a source that cannot be read here (offline, moved, not a source at all)
                self._loaded[cache_key] = ({}, f"{source!r} could not be loaded: {str(e).splitlines()[0]}")
        return self._loaded[cache_key]

    def source(self, sf: SamplesFile) -> str:
        """Where the questions of ``sf``'s rows come from when they lack them, in words."""
        if isinstance(self.given, Mapping):
            return "the questions given"
        if self.given:
            return f"--questions {self.given}"
        if sf.kind == "eval" and sf.eval_settings.get("benchmark"):
            return f"the benchmark {sf.eval_settings['benchmark']!r} (run.json)"
        return "nowhere"

    def lookup(self, sf: SamplesFile) -> tuple[dict[str, str], str | None]:
        """problem_id -> question for ``sf`` and why there are none (None when loaded)."""
        if isinstance(self.given, Mapping):
            return dict(self.given), None
        if self.given:
            return self._load(str(self.given), {})
        if sf.kind == "eval" and sf.eval_settings.get("benchmark"):
            return self._load(str(sf.eval_settings["benchmark"]), sf.eval_settings)
        return {}, "the rows hold no question and no benchmark is recorded"


def _questions_for(
    sf: SamplesFile, rows: list[dict[str, Any]], questions: Questions
) -> tuple[list[str | None], dict[str, Any]]:
    """Each row's question (its own ``problem``, else looked up by problem_id) and what was found."""
    out: list[str | None] = [r.get("problem") if isinstance(r.get("problem"), str) else None for r in rows]
    info: dict[str, Any] = {"from_rows": sum(q is not None for q in out)}
    if info["from_rows"] < len(rows):
        table, why = questions.lookup(sf)
        info["looked_up_in"] = questions.source(sf)
        for i, r in enumerate(rows):
            if out[i] is None and str(r.get("problem_id")) in table:
                out[i] = table[str(r.get("problem_id"))]
        info["looked_up"] = sum(q is not None for q in out) - info["from_rows"]
        if why:
            info["why_missing"] = why
    info["missing"] = sum(q is None for q in out)
    return out, info


# ---------------------------------------------------------------------------------------------------- grading
def _cut_off(row: Mapping[str, Any]) -> bool:
    return row.get("finish_reason") == "length" or bool(row.get("truncated"))


def _paid(score: Any) -> bool:
    return float(score) >= 0.5


def recorded_form(
    row: Mapping[str, Any], question: str | None, grader: str | None = None
) -> tuple[str, bool]:
    """The form of a row's answer as recorded, and whether it was recorded (else read from its ``extracted``
    answer, or from its completion as ``grader`` reads it, as the grader that scored it would have: rows written
    before forms existed)."""
    paid, cut = _paid(row["score"]), _cut_off(row)
    if row.get("form"):
        return sample_form(row["form"], paid, cut), True
    from pacs_rl.rewards.math_verifier import extract_answer  # math-verify, sympy

    try:
        extracted = row.get("extracted") or extract_answer(row["completion"], grader or "paper", question)
        form = answer_form(row["completion"], extracted, str(row["answer"]), question)
    except Exception:
        form = "none"
    return sample_form(form, paid, cut), False


def _ordered(counts: Counter) -> dict[str, int]:
    order = {f: i for i, f in enumerate(FORM_ORDER)}
    return dict(sorted(counts.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def shorten(text: str, width: int = _SHORT) -> str:
    """A completion on one line, its middle cut when long (the answer is usually at its end)."""
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= width:
        return text
    head = width // 4
    return f"{text[:head]} ... {text[-(width - head - 5) :]}"


def _where(sf: SamplesFile, row: Mapping[str, Any]) -> str:
    if sf.kind == "rollouts" and "step" in row:
        return f"step {row['step']}"
    pid = row.get("problem_id", "?")
    return f"{pid}#{row['sample_index']}" if "sample_index" in row and sf.kind == "eval" else str(pid)


def _ks(sf: SamplesFile, fewest: int) -> list[int]:
    recorded = _read_json(sf.run_dir / EVAL_METRICS_FILE).get("ks") if sf.kind == "eval" else None
    ks = [int(k) for k in recorded] if isinstance(recorded, list) and recorded else None
    if ks is None:
        ks = [2**i for i in range(fewest.bit_length())]
    return [k for k in ks if 1 <= k <= fewest]


def _pass_at_k(sf: SamplesFile, rows: list[dict[str, Any]], now: list[float]) -> dict[str, Any] | None:
    """pass@k of an eval folder's samples as recorded and under the new grader, for the ks every problem has
    enough samples for (the run's own ks, from metrics.json, else powers of two)."""
    from pacs_rl.algorithms.passk import mean_pass_at_k  # numpy: `pacs-rl --help` imports this module

    by_problem: dict[str, list[tuple[float, float]]] = {}
    for r, score in zip(rows, now, strict=True):
        by_problem.setdefault(str(r.get("problem_id")), []).append((float(r["score"]), score))
    if not by_problem:
        return None
    ns = [len(v) for v in by_problem.values()]
    ks = _ks(sf, min(ns))
    if not ks:
        return None
    recorded = mean_pass_at_k(ns, [sum(a >= 0.5 for a, _ in v) for v in by_problem.values()], ks)
    new = mean_pass_at_k(ns, [sum(b >= 0.5 for _, b in v) for v in by_problem.values()], ks)
    return {
        "problems": len(ns),
        "samples_per_problem": min(ns) if min(ns) == max(ns) else [min(ns), max(ns)],
        "ks": ks,
        "recorded": {str(k): v for k, v in recorded.items()},
        "now": {str(k): v for k, v in new.items()},
    }


@dataclass
class _Changes:
    """The tallies of one file's rows as :func:`audit_rows` grades them: the answers that went paid -> refused (by
    the new reason) and refused -> paid (by the recorded one), the paid answers by form as recorded and now, and up
    to ``examples`` completions of each change."""

    examples: int
    to_refused: Counter = field(default_factory=Counter)
    to_paid: Counter = field(default_factory=Counter)
    forms_recorded: Counter = field(default_factory=Counter)
    forms_now: Counter = field(default_factory=Counter)
    computed: int = 0  # recorded forms read from the answers (rows from before forms were recorded)
    shown: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"paid_to_refused": [], "refused_to_paid": []}
    )

    def add(self, sf: SamplesFile, row: Mapping[str, Any], question: str | None, verdict: Any) -> None:
        """Count one row, recorded as ``row`` says and graded again as ``verdict``."""
        before, after = _paid(row["score"]), _paid(verdict.score)
        if before:
            form, kept = recorded_form(row, question, sf.recorded_grader)
            self.forms_recorded[form] += 1
            self.computed += not kept
        if after:
            self.forms_now[sample_form(verdict.form, True, _cut_off(row))] += 1
        if before == after:
            return
        change = "paid_to_refused" if before else "refused_to_paid"
        (self.to_refused if before else self.to_paid)[
            verdict.reason if before else str(row.get("reason") or "?")
        ] += 1
        if len(self.shown[change]) < self.examples:
            self.shown[change].append(
                {
                    "where": _where(sf, row),
                    "answer": str(row["answer"]),
                    "recorded": str(row.get("reason") or "?"),
                    "now": verdict.reason,
                    "read_now": verdict.extracted,
                    "completion": shorten(row["completion"]),
                }
            )


def audit_rows(
    sf: SamplesFile,
    rows: list[dict[str, Any]],
    questions: list[str | None],
    verdicts: list,
    grader: str,
    examples: int = EXAMPLES,
) -> dict[str, Any]:
    """What changes for ``rows`` when ``verdicts`` (under ``grader``) replace their recorded scores."""
    now = [float(v.score) for v in verdicts]
    changes = _Changes(examples)
    for r, q, v in zip(rows, questions, verdicts, strict=True):
        changes.add(sf, r, q, v)
    out: dict[str, Any] = {
        "rows": len(rows),
        "paid_recorded": sum(_paid(r["score"]) for r in rows),
        "paid_now": sum(s >= 0.5 for s in now),
        "paid_to_refused": {
            "count": sum(changes.to_refused.values()),
            "by_reason_now": dict(changes.to_refused.most_common()),
        },
        "refused_to_paid": {
            "count": sum(changes.to_paid.values()),
            "by_reason_recorded": dict(changes.to_paid.most_common()),
        },
        "paid_forms_recorded": _ordered(changes.forms_recorded),
        "paid_forms_now": _ordered(changes.forms_now),
        "paid_forms_recorded_read_from_answers": changes.computed,  # rows from before forms were recorded
        "examples": changes.shown,
    }
    if sf.kind == "eval":
        passk = _pass_at_k(sf, rows, now)
        if passk:
            out["pass_at_k"] = passk
    return out


def _grader_for(sf: SamplesFile, grader: str | None) -> str:
    return grader_name(grader) if grader else default_grader(sf.recorded_grader)


def check_grader(grader: str | None) -> None:
    """Raise AuditError naming a grader that does not exist (None: each file's default)."""
    if grader:
        try:
            grader_name(grader)
        except ValueError as e:
            raise AuditError(f"--grader: {e}") from None


def plan(paths: Iterable[str | Path], grader: str | None = None) -> list[tuple[SamplesFile, str]]:
    """Each samples file of ``paths`` with the grader it would be audited with; nothing is graded."""
    check_grader(grader)
    return [(sf, _grader_for(sf, grader)) for sf in find_samples(paths)]


def audit(
    paths: Iterable[str | Path],
    grader: str | None = None,
    questions: str | Mapping[str, str] | None = None,
    workers: int = 0,
    timeout: float = 3.0,
    examples: int = EXAMPLES,
    progress: bool = False,
    root: str | Path | None = None,
) -> dict[str, Any]:
    """Grade every samples file of ``paths`` again with ``grader`` (None: ``sound``, or ``paper`` for samples
    scored by ``sound``) and return what changes, JSON-ready: per file its rows, paid as recorded and now, the
    answers that went paid -> refused (by the new reason) and refused -> paid (by the recorded one), the recorded
    paid answers by form, ``examples`` completions of each change, and for eval folders pass@k as recorded and
    now. ``questions``: a problem_id -> question mapping or a data source, for rows that do not hold their question
    (else an eval folder's benchmark is reloaded). ``workers`` > 0 grades in that many processes. Files are named
    relative to ``root`` when they are under it."""
    from pacs_rl.rewards import RewardPool  # math-verify, sympy

    loaded = _read_planned(plan(paths, grader), Questions(questions))
    started = time.perf_counter()
    files = []
    pool = RewardPool(num_workers=workers, timeout=timeout) if workers > 0 else None
    total = sum(len(f.rows) for f in loaded)
    bar = {
        "enabled": progress and total >= PROGRESS_MIN_ROWS,
        "transient": True,
        "stderr": True,
    }  # the report follows
    try:
        with advancing("re-grading", total, **bar) as advance:
            for f in loaded:
                verdicts = _regrade(f, pool, timeout, advance)
                files.append(
                    {
                        "path": _name(f.sf.path, root),
                        "kind": f.sf.kind,
                        "run_dir": _name(f.sf.run_dir, root),
                        "recorded_grader": f.sf.recorded_grader,
                        "grader": f.grader,
                        "lines_left_out": f.dropped,
                        "questions": f.info,
                        **audit_rows(f.sf, f.rows, f.questions, verdicts, f.grader, examples),
                    }
                )
    finally:
        if pool is not None:
            pool.close()
    return {
        "grader": grader_name(grader) if grader else None,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "seconds": round(time.perf_counter() - started, 3),
        "totals": _totals(files),
        "files": files,
    }


@dataclass
class _Loaded:
    """One samples file read for grading: its rows, the lines left out, each row's question and where the
    questions came from, and the grader it is audited with."""

    sf: SamplesFile
    grader: str
    rows: list[dict[str, Any]]
    dropped: int
    questions: list[str | None]
    info: dict[str, Any]


def _read_planned(planned: list[tuple[SamplesFile, str]], lookup: Questions) -> list[_Loaded]:
    """Read every planned file and find its questions, before anything is graded: a file that cannot be read
    fails first."""
    loaded = []
    for sf, g in planned:
        rows, dropped = read_samples(sf.path, keyed=False, gradable=True)
        qs, info = _questions_for(sf, rows, lookup)
        loaded.append(_Loaded(sf, g, rows, dropped, qs, info))
    return loaded


def _regrade(f: _Loaded, pool: Any, timeout: float, advance: Callable[[int], None]) -> list:
    """The verdicts of ``f``'s rows under its grader, CHUNK rows per call (in ``pool``'s processes, else in this
    one), the progress bar advanced after each."""
    from pacs_rl.rewards import verify_batch  # math-verify, sympy

    verdicts: list = []
    for i in range(0, len(f.rows), CHUNK):
        chunk, prompts = f.rows[i : i + CHUNK], f.questions[i : i + CHUNK]
        args = ([r["completion"] for r in chunk], [str(r["answer"]) for r in chunk])
        cut = [_cut_off(r) for r in chunk]  # as recorded: the training grader refuses them
        if pool is not None:
            result = pool.verify_batch(*args, grader=f.grader, prompts=prompts, truncated=cut)
        else:
            result = verify_batch(*args, f.grader, 0, timeout, prompts=prompts, truncated=cut)
        verdicts += result.verdicts
        advance(len(chunk))
    return verdicts


def _name(path: Path, root: str | Path | None) -> str:
    if root is not None:
        try:
            return str(path.relative_to(Path(root)))
        except ValueError:
            pass
    return str(path)


def _totals(files: list[dict[str, Any]]) -> dict[str, int]:
    keys = ("rows", "paid_recorded", "paid_now")
    out = {k: sum(f[k] for f in files) for k in keys}
    out["paid_to_refused"] = sum(f["paid_to_refused"]["count"] for f in files)
    out["refused_to_paid"] = sum(f["refused_to_paid"]["count"] for f in files)
    return out


# ---------------------------------------------------------------------------------------------------- report
def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def _forms(counts: Mapping[str, int]) -> str:
    total = sum(counts.values())
    if not total:
        return "none paid"
    plain = counts.get("plain", 0)
    return ", ".join(
        [f"plain {plain} ({_pct(plain, total)})", *(f"{k} {v}" for k, v in counts.items() if k != "plain")]
    )


def file_lines(f: Mapping[str, Any]) -> list[str]:
    """What changed in one samples file (an entry of :func:`audit`'s ``files``), as lines to print."""
    recorded = (
        f"recorded grader {f['recorded_grader']}" if f["recorded_grader"] else "recorded grader not named"
    )
    as_recorded = f"as recorded ({f['recorded_grader']})" if f["recorded_grader"] else "as recorded"
    g, rows = f["grader"], f["rows"]
    what = KINDS[f["kind"]]
    lines = [f"{f['path']} ({what}, {rows} rows; {recorded}; graded again with {g})"]
    if f["lines_left_out"]:
        left_out = f["lines_left_out"]
        lines.append(f"  {left_out} line(s) left out: broken, duplicate, or without completion/answer/score")
    if not rows:
        return [*lines, "  nothing to grade"]
    lines.append(
        f"  paid {as_recorded}: {f['paid_recorded']} ({_pct(f['paid_recorded'], rows)}); "
        f"under {g}: {f['paid_now']} ({_pct(f['paid_now'], rows)})"
    )
    down, up = f["paid_to_refused"], f["refused_to_paid"]
    lines.append(
        f"  paid -> refused: {down['count']}"
        + (f" ({_counts(down['by_reason_now'])})" if down["count"] else "")
        + f"; refused -> paid: {up['count']}"
        + (f" (recorded {_counts(up['by_reason_recorded'])})" if up["count"] else "")
    )
    read = " (read from the recorded answers)" if f["paid_forms_recorded_read_from_answers"] else ""
    lines.append(f"  recorded paid answers by form{read}: {_forms(f['paid_forms_recorded'])}")
    lines.append(f"  paid answers by form under {g}: {_forms(f['paid_forms_now'])}")
    pk = f.get("pass_at_k")
    if pk:
        cells = [
            f"{k} {100 * pk['now'][str(k)]:.1f}% (was {100 * pk['recorded'][str(k)]:.1f}%)" for k in pk["ks"]
        ]
        lines.append(f"  pass@k under {g} ({pk['problems']} problems): " + ", ".join(cells))
    for change, title in (("paid_to_refused", "paid -> refused"), ("refused_to_paid", "refused -> paid")):
        for e in f["examples"][change]:
            why = f"now {e['now']}" if change == "paid_to_refused" else f"was {e['recorded']}"
            lines.append(f"  {title} [{e['where']}, gold {e['answer']}, {why}]: {e['completion']}")
    q = f["questions"]
    if q["missing"]:
        why = f": {q['why_missing']}" if q.get("why_missing") else ""
        lines.append(
            f"  note: no question for {q['missing']} of {rows} rows (looked up in {q.get('looked_up_in', 'nowhere')}"
            f"{why}); graded without them, so a restated question cannot be told; --questions SOURCE gives them"
        )
    return lines


def report_lines(result: Mapping[str, Any]) -> list[str]:
    """Every file's lines, then the totals when there are several files."""
    lines: list[str] = []
    for f in result["files"]:
        lines += file_lines(f)
    t = result["totals"]
    if len(result["files"]) > 1:
        lines.append(
            f"{len(result['files'])} samples files, {t['rows']} rows: paid as recorded {t['paid_recorded']}, "
            f"now {t['paid_now']}; paid -> refused {t['paid_to_refused']}, refused -> paid {t['refused_to_paid']}"
        )
    return lines


def dry_run_lines(
    planned: list[tuple[SamplesFile, str]], questions: str | None, json_path: Path | None
) -> list[str]:
    """``--dry-run``: what would be read (each samples file, its rows, its graders, its questions), nothing graded."""
    lines = []
    lookup = Questions(questions)
    for sf, g in planned:
        recorded = sf.recorded_grader or "not named"
        has_question = isinstance(first_jsonl_row(sf.path).get("problem"), str)
        where = "in the rows" if has_question else f"from {lookup.source(sf)}"
        lines.append(
            f"  {sf.path}: {sf.what}, {count_lines(sf.path)} rows; recorded grader {recorded} -> {g}; questions {where}"
        )
    if json_path is not None:
        lines.append(f"  would write {json_path}")
    return lines


def default_json_path(paths: list[str | Path]) -> Path:
    """``audit.json`` in the first run folder given (for a samples file given, its folder)."""
    first = Path(paths[0])
    return (first.parent if first.is_file() else first) / AUDIT_FILE


def write_json(result: Mapping[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


__all__ = [
    "AuditError",
    "Questions",
    "SamplesFile",
    "audit",
    "audit_rows",
    "default_grader",
    "default_json_path",
    "dry_run_lines",
    "file_lines",
    "find_samples",
    "plan",
    "report_lines",
    "shorten",
    "training_grader",
    "write_json",
]
