"""Tables and plots from finished runs (``metrics.json`` files), laid out like the paper's tables:
rows = models, columns = k, pass@k in percent, the best value of a column in bold and the second best
underlined (``<u>..</u>``, as Markdown has no underline)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.json"


def find_metrics(paths: list[str | Path]) -> list[Path]:
    """``metrics.json`` files of run folders: a folder holding one, or its direct sub-folders' ones."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_file() and p.name == METRICS_FILE:
            found.append(p)
        elif (p / METRICS_FILE).is_file():
            found.append(p / METRICS_FILE)
        elif p.is_dir():
            sub = sorted(p.glob(f"*/{METRICS_FILE}"))
            if not sub:
                raise FileNotFoundError(f"no {METRICS_FILE} in {p} or its sub-folders: is that run finished?")
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


def results_table(runs: list[dict[str, Any]]) -> str:
    """Markdown: one table per benchmark, rows = runs (their ``label``), columns = k, pass@k in %."""
    by_bench: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_bench.setdefault(bench_title(r), []).append(r)
    parts = []
    for bench, rs in by_bench.items():
        ks = sorted({int(k) for r in rs for k in r["pass_at_k"]})
        ns = sorted({r.get("n") for r in rs if r.get("n") is not None})
        probs = sorted({r.get("num_problems") for r in rs if r.get("num_problems") is not None})
        lines = [
            f"### {bench} (pass@k, %; n = {', '.join(map(str, ns))}; {', '.join(map(str, probs))} problems)",
            "",
            "| Model | " + " | ".join(f"k = {k}" if i == 0 else str(k) for i, k in enumerate(ks)) + " |",
            "|---|" + "---:|" * len(ks),
        ]
        grid = [[_get(r, k) for k in ks] for r in rs]
        marks_by_col = [rank_marks([row[j] for row in grid]) for j in range(len(ks))]
        for i, r in enumerate(rs):
            cells = [_cell(grid[i][j], marks_by_col[j][i]) for j in range(len(ks))]
            lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
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
    md = out / "results.md"
    md.write_text(results_table(runs))
    return md, plot_passk(runs, out / "passk.png")
