"""The comparison report: ``report.md`` and PNGs in the comparison folder.

- a pass@k table per benchmark laid out like the paper's Tables 1/2 (rows = Base and each variant,
  columns = k, mean ± standard error over seeds, best mean bold, second underlined);
- pass@k curves; training dynamics as in Figure 4 (entropy, gradient norm, response length, reward;
  mean over seeds with a min–max band); one heatmap per sweep as in Figure 3 (value × k);
- for PACS, the critic's accuracy and Brier score over training (from metrics.jsonl) and its
  calibration-in-the-large (mean σ(ψ) against the mean reward of each logged step);
- a paired sign-flip permutation test of per-problem pass@1 between PACS and every other row.

Every number is recomputed from the samples files with `pass_at_k`, so the table equals eq. 10 of the
per-problem counts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from pacs_rl.algorithms.passk import mean_pass_at_k
from pacs_rl.compare.methods import method_label
from pacs_rl.compare.plan import (
    TRAIN_DONE_FILE,
    RunSpec,
    eval_dir_of,
    grader_note,
    sweep_table,
)
from pacs_rl.compare.stats import mean_se, sign_flip_test, wilcoxon_p
from pacs_rl.evaluation.report import rank_marks
from pacs_rl.evaluation.samples import count_correct, read_samples
from pacs_rl.run_folder import EVAL_METRICS_FILE, EVAL_SAMPLES_FILE, METRICS_FILE, read_jsonl

# metrics.jsonl keys for the Figure-4 panels: (title, candidate keys in order of preference)
DYNAMICS = [
    ("entropy", ("entropy",)),
    ("gradient norm", ("grad_norm",)),
    ("response length (tokens)", ("completions/mean_length",)),
    ("reward (rollout mean)", ("reward", "accuracy")),
]
# The implicit critic by its within-group AUC (ranking of ψ against R on mixed groups): with π_ref = the rollout
# policy, ψ = 0 on a rollout's first update, where σ(ψ)'s accuracy and Brier score sit at chance by construction.
CRITIC = [
    ("critic AUC of ψ within mixed groups (0.5 = chance)", ("pacs/critic_auc",)),
]


def variant_label(variant: str, method: str) -> str:
    base = method_label(method)
    return base + variant[len(method) :] if variant.startswith(method) else variant


# ----------------------------------------------------------------------------------------------- loading
def load_counts(eval_dir: Path) -> dict[str, Any] | None:
    """Per-problem correct counts of one finished evaluation: {"ids", "c" (P,), "n", "ks",
    "num_problems"} over the problems with all n samples (ids sorted), or None when it is not finished."""
    mpath = eval_dir / EVAL_METRICS_FILE
    if not mpath.is_file():
        return None
    m = json.loads(mpath.read_text())
    n = int(m["n"])
    rows, _ = read_samples(eval_dir / EVAL_SAMPLES_FILE)
    counts = count_correct(rows, n)
    ids = sorted(pid for pid, count in counts.items() if count.samples == n)
    return {
        "ids": ids,
        "c": np.array([counts[pid].correct for pid in ids], dtype=np.int64),
        "n": n,
        "ks": [int(k) for k in m["ks"]],
        "num_problems": int(m["num_problems"]),
    }


def passk_of_counts(c: np.ndarray, n: int, ks: list[int]) -> dict[int, float]:
    """Mean pass@k (eq. 10) over problems, in %."""
    return {k: 100.0 * v for k, v in mean_pass_at_k([n] * len(c), c, ks).items()}


def collect(out: Path, settings: dict[str, Any], plan: list[RunSpec]) -> dict[str, Any]:
    """Everything the report needs: per benchmark, per row (Base + variants), per seed: counts and pass@k."""
    variants: dict[str, str] = {}  # variant -> method, in plan order
    for s in plan:
        variants.setdefault(s.variant, s.method)
    benches = {}
    for b in settings["eval"]["benchmarks"]:
        rows: dict[str, dict[int | None, dict[str, Any]]] = {"Base": {}}
        base = load_counts(eval_dir_of(out, None, b))
        if base is not None:
            rows["Base"][None] = base
        for v in variants:
            rows[v] = {}
        for s in plan:
            got = load_counts(eval_dir_of(out, s, b))
            if got is not None:
                rows[s.variant][s.seed] = got
        benches[b] = rows
    return {"variants": variants, "benchmarks": benches}


# ----------------------------------------------------------------------------------------------- tables
def _cell(mean: float, se: float, mark: str) -> str:
    if mean is None or math.isnan(mean):
        return "–"
    text = f"{mean:.2f}" + ("" if se is None or math.isnan(se) else f" ± {se:.2f}")
    return f"**{text}**" if mark == "best" else f"<u>{text}</u>" if mark == "second" else text


def passk_table(rows: list[tuple[str, dict[int, list[float]]]], ks: list[int], title: str) -> str:
    """A paper-style Markdown table. rows: (label, {k: per-seed pass@k in %}); best/second by mean.

    A row with one value per k shows no ± (nothing to estimate a standard error from)."""
    stats = [[mean_se(r.get(k, [])) for k in ks] for _, r in rows]
    marks = [rank_marks([stats[i][j][0] for i in range(len(rows))]) for j in range(len(ks))]
    lines = [
        title,
        "",
        "| Model | " + " | ".join(f"k = {k}" if j == 0 else str(k) for j, k in enumerate(ks)) + " |",
        "|---|" + "---:|" * len(ks),
    ]
    for i, (label, _) in enumerate(rows):
        cells = [_cell(stats[i][j][0], stats[i][j][1], marks[j][i]) for j in range(len(ks))]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_seed_passk(entries: dict[int | None, dict[str, Any]], ks: list[int]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {k: [] for k in ks}
    for e in entries.values():
        pk = passk_of_counts(e["c"], e["n"], [k for k in ks if k <= e["n"]])
        for k, v in pk.items():
            out[k].append(v)
    return out


def per_problem_pass1(entries: dict[int | None, dict[str, Any]], ids: list[str]) -> np.ndarray | None:
    """Per-problem pass@1 (= c/n) averaged over seeds, on the problems ``ids``; shape (P,)."""
    if not entries:
        return None
    cols = []
    for e in entries.values():
        index = {pid: j for j, pid in enumerate(e["ids"])}
        if any(pid not in index for pid in ids):
            return None
        cols.append(np.array([e["c"][index[pid]] / e["n"] for pid in ids]))
    return np.mean(cols, axis=0)


# ----------------------------------------------------------------------------------------------- plots
def _plt():
    """matplotlib.pyplot on the file-only Agg backend (imported on first plot: it is slow to import)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_passk_curves(
    bench_rows: dict[str, list[tuple[str, dict[int, list[float]]]]], ks, path: Path
) -> Path:
    plt = _plt()
    fig, axes = plt.subplots(1, len(bench_rows), figsize=(5.5 * len(bench_rows), 4), squeeze=False)
    for ax, (bench, rows) in zip(axes[0], bench_rows.items(), strict=True):
        for label, r in rows:
            kk = [k for k in ks[bench] if r.get(k)]
            if not kk:
                continue
            ms = [mean_se(r[k]) for k in kk]
            ax.errorbar(kk, [m for m, _ in ms], yerr=[0 if math.isnan(s) else s for _, s in ms],
                        marker="o", capsize=3, label=label)  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks[bench], [str(k) for k in ks[bench]])  # each k named, one or two of them too
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k (%)")
        ax.set_title(bench, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _series(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> tuple[str | None, dict[int, float]]:
    for key in keys:
        pts = {int(r["step"]): float(r[key]) for r in rows if r.get(key) is not None and "step" in r}
        if pts:
            return key, pts
    return None, {}


def plot_dynamics(
    by_variant: dict[str, list[list[dict[str, Any]]]], panels, path: Path, title: str
) -> tuple[Path, dict[str, str]]:
    """One panel per metric; per variant the mean over seeds (line) and min–max over seeds (band)."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    used: dict[str, str] = {}
    for ax, (name, keys) in zip(axes[0], panels, strict=True):
        drawn: set[int] = set()
        for label, runs in by_variant.items():
            per_seed = []
            for rows in runs:
                key, pts = _series(rows, keys)
                if key:
                    used[name] = key
                    per_seed.append(pts)
            if not per_seed:
                continue
            steps = sorted(set().union(*per_seed))
            drawn.update(steps)
            vals = np.array([[s.get(t, np.nan) for t in steps] for s in per_seed])
            mean = np.nanmean(vals, axis=0)
            few = len(steps) <= 3  # a line of one point draws nothing: mark the points
            ax.plot(steps, mean, marker="o" if few else None,
                    label=f"{label} ({len(per_seed)} seed{'s' if len(per_seed) > 1 else ''})")  # fmt: skip
            if len(per_seed) > 1:
                ax.fill_between(steps, np.nanmin(vals, axis=0), np.nanmax(vals, axis=0), alpha=0.2)
        ax.set_title(name, fontsize=9)
        if 0 < len(drawn) <= 3:
            ax.set_xticks(sorted(drawn))  # each step named (a locator would split one step into fractions)
        else:
            ax.xaxis.set_major_locator(_integer_ticks())
        ax.ticklabel_format(axis="y", useOffset=False)  # no "+1e-5" offset label over one value
        ax.set_xlabel("optimizer step")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path, used


def _integer_ticks():
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def plot_calibration(by_variant: dict[str, list[list[dict[str, Any]]]], path: Path) -> Path | None:
    """Calibration in the large: per logged step, mean σ(ψ) (x) against the mean reward (y)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.2, 4))
    any_point = False
    for label, runs in by_variant.items():
        xs, ys = [], []
        for rows in runs:
            for r in rows:
                p, y = r.get("pacs/prob_mean"), r.get("pacs/reward_mean")
                if p is not None and y is not None:
                    xs.append(p)
                    ys.append(y)
        if xs:
            any_point = True
            ax.scatter(xs, ys, s=14, alpha=0.7, label=f"{label} ({len(xs)} steps)")
    if not any_point:
        plt.close(fig)
        return None
    ax.plot([0, 1], [0, 1], "k--", lw=0.8, label="perfect calibration")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean predicted P(correct) = mean σ(ψ)")
    ax.set_ylabel("mean reward (fraction correct)")
    ax.set_title("PACS critic: calibration in the large", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_sweep_heatmap(
    field: str, values: list[Any], grid: np.ndarray, ks: list[int], path: Path, bench: str
):
    """Figure 3 style: rows = sweep values, columns = k, colour = mean pass@k (%)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(ks), 1.2 + 0.5 * len(values)))
    im = ax.imshow(grid, aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(ks)), [str(k) for k in ks])
    ax.set_yticks(range(len(values)), [str(v) for v in values])
    ax.set_xlabel("k")
    ax.set_ylabel(field)
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", fontsize=7, color="w")
    fig.colorbar(im, ax=ax, label="pass@k (%)")
    ax.set_title(f"PACS pass@k by {field}\n{bench}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------------------- report
BenchRows = dict[str, list[tuple[str, dict[int, list[float]]]]]  # benchmark -> [(row label, {k: per seed})]


def write_comparison_report(out: Path, settings: dict[str, Any], plan: list[RunSpec]) -> Path:
    """Write ``report.md`` and the PNGs into ``out`` from whatever is finished; return the report path."""
    out = Path(out)
    data = collect(out, settings, plan)
    labels = {v: variant_label(v, m) for v, m in data["variants"].items()}
    ks_of = finished_ks(data)
    md = header_section(out, settings, plan)
    md += warnings_section(out, plan, labels, data)
    tables, bench_rows = passk_section(data, labels, ks_of)
    md += tables
    if bench_rows:
        md += curves_section(out, bench_rows, ks_of)
        md += paired_test_section(data, labels)
        md += sweeps_section(out, settings, plan, data, ks_of)
    logs = training_logs(out, plan, labels)
    if logs:
        md += dynamics_section(out, logs)
        md += critic_section(out, plan, data["variants"], labels, logs)
    path = out / "report.md"
    path.write_text("\n".join(md).rstrip() + "\n")
    return path


def finished_ks(data: dict[str, Any]) -> dict[str, list[int]]:
    """Per benchmark with a finished evaluation, the k values of its first finished evaluation."""
    ks_of = {}
    for b, rows in data["benchmarks"].items():
        first = next((e for r in rows.values() for e in r.values()), None)
        if first is not None:
            ks_of[b] = first["ks"]
    return ks_of


def header_section(out: Path, settings: dict[str, Any], plan: list[RunSpec]) -> list[str]:
    """Title, the training and evaluation settings, and which training runs are not finished."""
    ev, tr = settings["eval"], settings["train"]
    md = [
        "# Comparison report",
        "",
        f"Base model `{settings['model']}`; methods {', '.join(settings['methods'])}; seeds {settings['seeds']}; "
        f"training data `{tr['dataset']}`; {tr.get('max_steps')} optimizer steps per run, "
        f"G = {tr.get('num_generations')}, {tr.get('per_device_train_batch_size')} completions per mini-batch, "
        f"{tr.get('mini_batches_per_rollout')} mini-batches per rollout batch, "
        f"max {tr.get('max_completion_length')} completion tokens, lr {tr.get('learning_rate')}.",
        "",
        f"Evaluation (same for every row): n = {ev['n']} samples per problem, temperature {ev['temperature']}, "
        f"top-p {ev['top_p']}, max {ev['max_new_tokens']} new tokens, sampling seed {ev['seed']}; "
        f"answers graded by `{ev.get('grader', 'auto')}`{grader_note(ev)}; pass@k by the unbiased estimator (paper eq. 10), in %.",
        "",
    ]
    missing = [s.key for s in plan if not (out / s.folder / TRAIN_DONE_FILE).is_file()]
    if missing:
        md += [f"**Unfinished:** {len(missing)} of {len(plan)} training runs are not finished: "
               f"{', '.join(missing)}. Rows below use what is finished.", ""]  # fmt: skip
    return md


def run_warnings(out: Path, plan: list[RunSpec], labels: dict[str, str], data: dict[str, Any]) -> list[str]:
    """What makes a row of the tables mean less than it seems, one line each: a run that saw no learning signal (a
    reward of 0 in every rollout, or no group holding both a right and a wrong answer: PACS and the group
    baselines learn from mixed groups only), and a row whose every evaluation equals the base model's, problem by
    problem."""
    lines = []
    for s in plan:
        rows = read_jsonl(out / s.folder / METRICS_FILE)
        rewards = [float(r["reward"]) for r in rows if r.get("reward") is not None]
        mixed = [float(r["groups/mixed_frac"]) for r in rows if r.get("groups/mixed_frac") is not None]
        name = f"{labels[s.variant]} seed {s.seed}"
        if rewards and max(rewards) == 0:
            lines.append(f"{name} saw no learning signal: the reward was 0 in all {len(rewards)} logged rollouts "
                         "(raise max_completion_length or the budget, or train on problems the base model "
                         "sometimes solves)")  # fmt: skip
        elif mixed and max(mixed) == 0:
            lines.append(f"{name} saw no learning signal: no group held both a right and a wrong answer in "
                         f"{len(mixed)} logged rollouts, and the losses learn from those only")  # fmt: skip
    for v in data["variants"]:
        same, compared = True, 0
        for rows in data["benchmarks"].values():
            base = rows["Base"].get(None)
            for e in rows[v].values():
                if base is None or e["ids"] != base["ids"] or e["n"] != base["n"]:
                    continue
                compared += 1
                same = same and bool(np.array_equal(e["c"], base["c"]))
        if compared and same:
            lines.append(f"{labels[v]} ended equal to the base model: every evaluation of it has the base model's "
                         "right answers on every problem, so its row measures no training")  # fmt: skip
    return lines


def warnings_section(
    out: Path, plan: list[RunSpec], labels: dict[str, str], data: dict[str, Any]
) -> list[str]:
    """The run_warnings, as a section at the top of the report (nothing when there are none)."""
    lines = run_warnings(out, plan, labels, data)
    if not lines:
        return []
    return ["## Warnings", "", *(f"- **warning:** {line}" for line in lines), ""]


def passk_section(
    data: dict[str, Any], labels: dict[str, str], ks_of: dict[str, list[int]]
) -> tuple[list[str], BenchRows]:
    """One pass@k table per benchmark (Base, then each variant with a finished evaluation). Returns the
    Markdown lines and, per benchmark with a finished evaluation, the table's rows."""
    md = ["## pass@k", ""]
    bench_rows: BenchRows = {}
    for b, rows in data["benchmarks"].items():
        if b not in ks_of:
            md += [f"### {b}", "", "No finished evaluation yet.", ""]
            continue
        ks = ks_of[b]
        first = next(e for r in rows.values() for e in r.values())
        finished = [v for v in data["variants"] if rows[v]]
        table_rows = [("Base", per_seed_passk(rows["Base"], ks))]
        table_rows += [(labels[v], per_seed_passk(rows[v], ks)) for v in finished]
        bench_rows[b] = table_rows
        n_seeds = {labels[v]: len(rows[v]) for v in finished}
        title = (
            f"### {b} (pass@k, %; {first['num_problems']} problems, n = {first['n']}; "
            "mean ± standard error over seeds)"
        )
        md += [
            passk_table(table_rows, ks, title),
            "",
            ("Seeds per row: " + ", ".join(f"{k} {v}" for k, v in n_seeds.items()) + "; " if n_seeds else "")
            + "Base is one evaluation of the untrained model (no ±). "
            "**Bold**: best mean in the column, <u>underlined</u>: second best (at two decimals).",
            "",
        ]
    return md, bench_rows


def curves_section(out: Path, bench_rows: BenchRows, ks_of: dict[str, list[int]]) -> list[str]:
    """pass@k against k for every row (passk_curves.png)."""
    plot_passk_curves(bench_rows, ks_of, out / "passk_curves.png")
    return ["![pass@k curves](passk_curves.png)", "",
            "pass@k against k, mean over seeds with ± standard-error bars.", ""]  # fmt: skip


def paired_test_section(data: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """Per benchmark, per-problem pass@1 of PACS (else the first variant) against every other row."""
    variants = data["variants"]
    ref = "pacs" if "pacs" in variants else next(iter(variants), None)
    if ref is None:
        return []
    md = [
        "## Paired test on pass@1",
        "",
        f"Per problem, pass@1 = c/n of each run, averaged over the seeds of the row; d = {labels[ref]} "
        "minus the other row, on the same problems. p: two-sided sign-flip permutation test of mean d = 0 "
        "(exact over all sign patterns when at most 20 differences are non-zero, else 100,000 Monte-Carlo "
        "patterns), and Wilcoxon signed-rank (scipy).",
        "",
    ]
    lines = [
        line
        for b, rows in data["benchmarks"].items()
        if rows.get(ref)
        for line in paired_test_rows(b, rows, ref, ["Base", *(v for v in variants if v != ref)], labels)
    ]
    if lines:
        md += [
            "| Benchmark | Comparison | problems | seeds | mean d (pp) | SE (pp) | p (sign-flip) | p (Wilcoxon) |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
            *lines,
        ]
    else:
        md += [f"No finished evaluation of {labels[ref]} yet: nothing to pair."]
    md += ["", "pp = percentage points. Seeds differ in training; every run is evaluated on the same problems "
           "with the same sampling seed, so the test pairs problems, not seeds.", ""]  # fmt: skip
    return md


def paired_test_rows(
    bench: str,
    rows: dict[str, dict[int | None, dict[str, Any]]],
    ref: str,
    others: list[str],
    labels: dict[str, str],
) -> list[str]:
    """Table rows of :func:`paired_test_section` for one benchmark: ``ref`` against each of ``others``,
    on the problems every finished evaluation of the benchmark holds."""
    ids = sorted(set.intersection(*(set(e["ids"]) for r in rows.values() for e in r.values())))
    ref_pass1 = per_problem_pass1(rows[ref], ids)
    lines = []
    for o in others:
        other = per_problem_pass1(rows[o], ids) if rows.get(o) else None
        if ref_pass1 is None or other is None or not ids:
            continue
        t = sign_flip_test(ref_pass1 - other)
        w = wilcoxon_p(ref_pass1 - other)
        name = "Base" if o == "Base" else labels[o]
        seeds = f"{len(rows[ref])} vs {len(rows[o])}"
        lines.append(
            f"| {bench} | {labels[ref]} − {name} | {t['n']} | {seeds} | {100 * t['mean']:+.2f} | "
            f"{100 * t['se']:.2f} | {t['p_value']:.3g} ({t['method']}, {t['n_nonzero']} non-zero) | "
            f"{'–' if w is None else f'{w:.3g}'} |"
        )
    return lines


def sweeps_section(
    out: Path,
    settings: dict[str, Any],
    plan: list[RunSpec],
    data: dict[str, Any],
    ks_of: dict[str, list[int]],
) -> list[str]:
    """Per swept field, method and benchmark: a table and a Figure-3 heatmap (value × k)."""
    table = sweep_table(settings, plan)
    if not table:
        return []
    md = ["## Sweeps", ""]
    bench_index = {b: i for i, b in enumerate(data["benchmarks"])}
    for field, by_method in table.items():
        for method, value_to_variant in by_method.items():
            values = list(value_to_variant)
            for b, rows in data["benchmarks"].items():
                if b not in ks_of:
                    continue
                ks = ks_of[b]
                srows = [(f"{field} = {v}", per_seed_passk(rows[value_to_variant[v]], ks)) for v in values]
                grid = np.array([[mean_se(r.get(k, []))[0] for k in ks] for _, r in srows])
                name = f"sweep_{field}_{method}_{bench_index[b]}.png"
                plot_sweep_heatmap(field, values, grid, ks, out / name, b)
                n_runs = [len(rows[value_to_variant[v]]) for v in values]
                md += [
                    passk_table(srows, ks, f"### {method_label(method)}: {field} on {b}"),
                    "",
                    f"Seeds per value: {n_runs}; {settings['eval']['n']} samples on each of the same problems.",
                    "",
                    f"![{field} sweep]({name})",
                    "",
                ]
    return md


def training_logs(
    out: Path, plan: list[RunSpec], labels: dict[str, str]
) -> dict[str, list[list[dict[str, Any]]]]:
    """Per row label, the metrics.jsonl rows of each of its training runs that logged any."""
    logs: dict[str, list[list[dict[str, Any]]]] = {}
    for s in plan:
        rows = read_jsonl(out / s.folder / METRICS_FILE)
        if rows:
            logs.setdefault(labels[s.variant], []).append(rows)
    return logs


def dynamics_section(out: Path, logs: dict[str, list[list[dict[str, Any]]]]) -> list[str]:
    """Figure-4 panels (entropy, gradient norm, response length, reward) over training."""
    _, used = plot_dynamics(
        logs, DYNAMICS, out / "training_dynamics.png", "Training dynamics (cf. paper Fig. 4)"
    )
    counts = ", ".join(f"{k}: {len(v)} run(s)" for k, v in logs.items())
    return [
        "## Training dynamics",
        "",
        "![training dynamics](training_dynamics.png)",
        "",
        f"From each run's metrics.jsonl ({counts}); line = mean over seeds, band = min–max over seeds. "
        f"Keys: {', '.join(f'{k} = `{v}`' for k, v in used.items())}. Entropy is the mean per-token entropy "
        "of the sampled completions (the paper plots verl's entropy loss, a different scale).",
        "",
    ]


def critic_section(
    out: Path,
    plan: list[RunSpec],
    variants: dict[str, str],
    labels: dict[str, str],
    logs: dict[str, list[list[dict[str, Any]]]],
) -> list[str]:
    """For the PACS rows: the critic's within-group AUC over training, and its calibration."""
    pacs_logs = {
        labels[s.variant]: logs[labels[s.variant]]
        for s in plan
        if variants[s.variant] in ("pacs", "pacs_no_weight") and labels[s.variant] in logs
    }
    if not pacs_logs:
        return []
    _, used = plot_dynamics(pacs_logs, CRITIC, out / "critic.png", "PACS critic σ(ψ) over training")
    md = [
        "## PACS as a critic",
        "",
        "![critic AUC](critic.png)",
        "",
        "Per logged optimizer step, on that mini-batch's groups with both outcomes: the share of (right, wrong) "
        "pairs of a group whose ψ ranks the right completion higher "
        f"(key {', '.join(f'`{v}`' for v in used.values())}; 0.5 is chance). With the default reference (the "
        "policy that sampled the rollout) ψ is 0 on a rollout's first update, so the AUC is 0.5 there by "
        "construction; it means something on the later updates of the same rollout.",
        "",
    ]
    if plot_calibration(pacs_logs, out / "critic_calibration.png") is not None:
        md += [
            "![calibration](critic_calibration.png)",
            "",
            "Calibration in the large: each point is one logged step, mean σ(ψ) against the mean reward of "
            "the same completions. A per-sample reliability diagram needs per-completion σ(ψ), which the "
            "trainer does not log (metrics.jsonl holds step means), so it is not drawn.",
            "",
        ]
    return md
