"""Tables and plots from finished runs (``metrics.json`` files), laid out like the paper's Tables 2 and 3:
rows = models, columns = k grouped by benchmark (two benchmarks side by side), pass@k in percent, the best
value of a column in bold and the second best underlined (``<u>..</u>``, as Markdown has no underline),
with a caption naming the grader and the sampling settings."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pacs_rl.rewards.answers import TRUSTED_FORMS
from pacs_rl.run_folder import EVAL_METRICS_FILE, PASSK_PLOT_FILE, RESULTS_FILE

NOT_PLAIN_WARN = 0.10  # paid answers not plain above this share of the paid ones: the command warns


def paid_not_plain(paid_forms: dict[str, int] | None) -> tuple[int, int] | None:
    """(paid answers whose form is known and not trusted -- neither ``plain`` nor ``no_box``, an answer in prose --,
    paid answers whose form is known) from a run's
    ``paid_forms``; None for a run without forms (written before they existed) or with nothing paid."""
    known = {f: c for f, c in (paid_forms or {}).items() if f != "unknown"}
    total = sum(known.values())
    if not total:
        return None
    return total - sum(known.get(f, 0) for f in TRUSTED_FORMS), total


def forms_text(forms: dict[str, int]) -> str:
    """``plain 412 (96.3%), no_box 12, restated 4``: the plain ones with their share, then the other forms."""
    total = sum(forms.values())
    if not total:
        return "none"
    plain = forms.get("plain", 0)
    others = [f"{f} {c}" for f, c in forms.items() if f != "plain" and c]
    return ", ".join([f"plain {plain} ({plain / total:.1%})", *others])


def forms_note(run: dict[str, Any]) -> str | None:
    """One line on a run's paid answers that are not plain, and on those cut off at the token limit (which the
    paper's grader pays and the training grader refuses); None for a run without forms or paid answers."""
    if not run.get("paid_forms"):
        return None
    cut = run.get("paid_cut_off") or 0
    cut_note = f"; {cut} cut off at the token limit" if cut else ""
    share = paid_not_plain(run["paid_forms"])
    if share is None:
        return f"paid answers of unknown form (samples written before forms were recorded){cut_note}"
    not_plain, paid = share
    others = {f: c for f, c in run["paid_forms"].items() if f not in (*TRUSTED_FORMS, "unknown") and c}
    detail = f" ({', '.join(f'{f} {c}' for f, c in others.items())})" if others else ""
    return f"{not_plain / paid:.1%} of {paid} paid answers neither boxed nor in prose{detail}{cut_note}"


def find_metrics(paths: list[str | Path]) -> list[Path]:
    """``metrics.json`` files of run folders: a folder holding one, or its direct sub-folders' ones."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_file() and p.name == EVAL_METRICS_FILE:
            found.append(p)
        elif (p / EVAL_METRICS_FILE).is_file():
            found.append(p / EVAL_METRICS_FILE)
        elif p.is_dir():
            sub = sorted(p.glob(f"*/{EVAL_METRICS_FILE}"))
            if not sub:
                raise FileNotFoundError(
                    f"no {EVAL_METRICS_FILE} in {p} or its sub-folders: is that run finished?"
                )
            found.extend(sub)
        else:
            raise FileNotFoundError(f"run folder not found: {p}")
    return found


def load_metrics(paths: list[str | Path]) -> list[dict[str, Any]]:
    """Read the metrics of finished runs (see :func:`find_metrics`), in the order given."""
    out = []
    for f in find_metrics(paths):
        m = json.loads(f.read_text())
        m.setdefault("label", m.get("model", f.parent.name))
        m["_path"] = str(f.parent)
        out.append(m)
    return out


def rank_marks(values: list[float | None], decimals: int = 2) -> list[str]:
    """Per value ``"best"``, ``"second"`` or ``""``, compared at the precision shown.

    Ties share a mark; the second best is the next distinct value below the best. A column with fewer
    than two values gets no marks (nothing to compare).
    """
    shown = [None if v is None or math.isnan(v) else round(v, decimals) for v in values]
    present = sorted({v for v in shown if v is not None}, reverse=True)
    if sum(v is not None for v in shown) < 2:
        return ["" for _ in shown]
    best = present[0]
    second = present[1] if len(present) > 1 else None
    return ["best" if v == best else "second" if v is not None and v == second else "" for v in shown]


def _cell(value: float | None, mark: str) -> str:
    if value is None or math.isnan(value):
        return "–"
    text = f"{value:.2f}"
    return f"**{text}**" if mark == "best" else f"<u>{text}</u>" if mark == "second" else text


def bench_title(run: dict[str, Any]) -> str:
    """The benchmark as shown: a file's stem (``.../math500.jsonl`` -> ``math500``), else the source."""
    b = str(run.get("benchmark", "?"))
    return Path(b).stem if b.lower().endswith((".jsonl", ".json", ".parquet")) else b


def _grader(run: dict[str, Any]) -> str:
    """The grader a run was scored with (runs from before graders had names: their strictness)."""
    if run.get("grader"):
        return str(run["grader"])
    strict = (run.get("sampling") or {}).get("strict")
    return "?" if strict is None else ("strict (old)" if strict else "lenient (old)")


def _rows(runs: list[dict[str, Any]]) -> list[dict[str, dict[str, Any]]]:
    """Table rows: runs grouped by label, one run per benchmark in a row (a second run of the same label
    and benchmark, e.g. another seed, starts a new row)."""
    rows: list[tuple[str, dict[str, dict[str, Any]]]] = []
    for r in runs:
        bench = bench_title(r)
        row = next((cells for label, cells in rows if label == r["label"] and bench not in cells), None)
        if row is None:
            row = {}
            rows.append((r["label"], row))
        row[bench] = r
    return [cells for _, cells in rows]


def _caption(runs: list[dict[str, Any]]) -> str:
    graders = list(dict.fromkeys(_grader(r) for r in runs))
    settings = list(
        dict.fromkeys(
            "T = {temperature}, top-p = {top_p}, at most {max_new_tokens} new tokens".format(**r["sampling"])
            for r in runs
            if {"temperature", "top_p", "max_new_tokens"} <= set(r.get("sampling") or {})
        )
    )
    return (
        f"pass@k (%), unbiased estimator from n samples per problem; grader: {', '.join(graders)}"
        + (f"; sampling: {'; '.join(settings)}" if settings else "")
        + "."
    )


def results_table(runs: list[dict[str, Any]], benchmarks_per_table: int = 2) -> str:
    """Markdown laid out like the paper's Tables 2 and 3: rows = models (their ``label``), columns = k
    grouped by benchmark, two benchmarks side by side per table, pass@k in %; the best value of a column
    bold, the second best underlined. A caption names the grader and the sampling settings."""
    benches = list(dict.fromkeys(bench_title(r) for r in runs))
    rows = _rows(runs)
    several_graders = len({_grader(r) for r in runs}) > 1
    parts = [_caption(runs)]
    for start in range(0, len(benches), benchmarks_per_table):
        block = benches[start : start + benchmarks_per_table]
        in_block = [row for row in rows if any(b in row for b in block)]
        columns = [
            (b, k)
            for b in block
            for k in sorted({int(k) for row in in_block if b in row for k in row[b]["pass_at_k"]})
        ]
        heading = []
        for b in block:
            ns = sorted({row[b].get("n") for row in in_block if b in row and row[b].get("n") is not None})
            probs = sorted(
                {row[b].get("num_problems") for row in in_block if b in row and row[b].get("num_problems")}
            )
            heading.append(f"{b} (n = {', '.join(map(str, ns))}; {', '.join(map(str, probs))} problems)")
        header = [
            (f"{b} k = {k}" if len(block) > 1 else f"k = {k}") if i == 0 or columns[i - 1][0] != b else str(k)
            for i, (b, k) in enumerate(columns)
        ]
        grid = [[_get(row[b], k) if b in row else None for b, k in columns] for row in in_block]
        marks_by_col = [rank_marks([line[j] for line in grid]) for j in range(len(columns))]
        lines = [
            f"### {' | '.join(heading)}",
            "",
            "| Model | " + " | ".join(header) + " |",
            "|---|" + "---:|" * len(columns),
        ]
        notes = []
        for i, row in enumerate(in_block):
            first = next(iter(row.values()))
            label = f"{first['label']} ({_grader(first)})" if several_graders else first["label"]
            cells = [_cell(grid[i][j], marks_by_col[j][i]) for j in range(len(columns))]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
            for b in (b for b in block if b in row):
                note = forms_note(row[b])
                if note:
                    notes.append(f"- {label}{f' on {b}' if len(block) > 1 else ''}: {note}")
        if notes:  # what the grader paid for: a share of answers that are not plain may be a hack it pays
            lines += ["", *notes]
        parts.append("\n".join(lines))
    legend = "**Bold**: best in the column; <u>underlined</u>: second best (compared at two decimals)."
    return "\n\n".join(parts) + "\n\n" + legend + "\n"


def _get(run: dict[str, Any], k: int) -> float | None:
    v = run["pass_at_k"].get(str(k), run["pass_at_k"].get(k))
    return None if v is None else 100.0 * float(v)


def plot_passk(runs: list[dict[str, Any]], path: str | Path) -> Path:
    """pass@k against k (log2 axis), one panel per benchmark, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    benches = list(dict.fromkeys(bench_title(r) for r in runs))
    fig, axes = plt.subplots(1, len(benches), figsize=(5 * len(benches), 4), squeeze=False)
    for ax, bench in zip(axes[0], benches, strict=True):
        for r in (r for r in runs if bench_title(r) == bench):
            ks = sorted(int(k) for k in r["pass_at_k"])
            ax.plot(ks, [_get(r, k) for k in ks], marker="o", label=r["label"])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k (%)")
        ax.set_title(bench)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(runs: list[dict[str, Any]], out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``results.md`` and ``passk.png`` for ``runs`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = out / RESULTS_FILE
    md.write_text(results_table(runs))
    return md, plot_passk(runs, out / PASSK_PLOT_FILE)
