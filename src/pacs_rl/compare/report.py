"""A planned comparison's report, a view over its record (:mod:`pacs_rl.compare.record`): ``report.md`` and PNGs.

- a pass@k table per benchmark laid out like the paper's Tables 1/2 (rows = Base and each variant, columns = k,
  mean ± standard error over seeds, best mean bold, second underlined);
- pass@k curves; training dynamics as in Figure 4 (entropy, gradient norm, response length, reward; mean over
  seeds with a min–max band); one heatmap per sweep as in Figure 3 (value × k);
- for PACS, the critic's within-group AUC over training and its calibration in the large (mean σ(ψ) against the
  mean reward of each logged step);
- a paired sign-flip permutation test of per-problem pass@1 between PACS and every other row.

Every pass@k is the evaluation's own (eq. 10 of the per-problem counts, `pacs-rl eval`); the paired test reads the
counts each run's result keeps. A comparison folder made before comparisons kept a record (a manifest.json beside
``runs/`` and ``evals/``) is read as a record too (:func:`legacy_record`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from pacs_rl.compare.figures import plot_calibration, plot_dynamics, plot_passk_curves, plot_sweep_heatmap
from pacs_rl.compare.methods import method_label
from pacs_rl.compare.plan import grader_note, renamed
from pacs_rl.compare.record import CALIBRATION, dynamics
from pacs_rl.compare.stats import mean_se, sign_flip_test, wilcoxon_p
from pacs_rl.evaluation.report import rank_marks
from pacs_rl.evaluation.runner import bench_slug
from pacs_rl.evaluation.samples import count_correct, read_samples
from pacs_rl.run_folder import EVAL_METRICS_FILE, EVAL_SAMPLES_FILE, METRICS_FILE

REPORT_FILE = "report.md"
# the record's curves for the Figure-4 panels: (title, curve)
DYNAMICS = [
    ("entropy", "entropy"),
    ("gradient norm", "grad_norm"),
    ("response length (tokens)", "length"),
    ("reward (rollout mean)", "reward"),
]
# The implicit critic by its within-group AUC (ranking of ψ against R on mixed groups): with π_ref = the rollout
# policy, ψ = 0 on a rollout's first update, where σ(ψ)'s accuracy and Brier score sit at chance by construction.
CRITIC = [("critic AUC of ψ within mixed groups (0.5 = chance)", "critic_auc")]
BenchRows = dict[str, list[tuple[str, dict[int, list[float]]]]]  # benchmark -> [(row label, {k: per seed})]


# ----------------------------------------------------------------------------------------------- reading
def collect(record: dict) -> dict[str, Any]:
    """Per benchmark, per row (Base and each variant in the protocol's order), per seed: the evaluation the record
    holds ({"n", "ks", "num_problems", "pass_at_k", "correct"?})."""
    proto = record["protocol"]
    benches = {}
    for b in proto["eval"]["samples"]:
        rows: dict[str, dict] = {"Base": {}, **{v: {} for v in proto["methods"]}}
        base = (record.get("base") or {}).get("evals", {}).get(b)
        if base:
            rows["Base"][None] = base
        for run in record["runs"]:
            if b in run.get("evals", {}) and run["method"] in rows:
                rows[run["method"]][run["seed"]] = run["evals"][b]
        benches[b] = rows
    return benches


def per_seed_passk(entries: dict, ks: list[int]) -> dict[int, list[float]]:
    """{k: pass@k in % of each seed's evaluation}."""
    return {
        k: [100.0 * e["pass_at_k"][str(k)] for e in entries.values() if str(k) in e["pass_at_k"]] for k in ks
    }


def per_problem_pass1(entries: dict, ids: list[str]) -> np.ndarray | None:
    """Per-problem pass@1 (= c/n) averaged over seeds, on the problems ``ids``; shape (P,); None without counts."""
    if not entries or any(
        "correct" not in e or any(p not in e["correct"] for p in ids) for e in entries.values()
    ):
        return None
    return np.mean([[e["correct"][p] / e["n"] for p in ids] for e in entries.values()], axis=0)


def legacy_record(folder: Path) -> dict:
    """A comparison folder of the engine before records (its manifest.json, ``runs/<variant>/seed<s>/`` and
    ``evals/...``) as a record: its settings and variants as recorded, each finished evaluation's pass@k (and
    per-problem counts where its samples.jsonl is kept), each run's logged curves where its metrics.jsonl is."""
    manifest = json.loads((folder / "manifest.json").read_text())
    settings = renamed(manifest["settings"], str(folder / "manifest.json"))
    benches = settings["eval"]["benchmarks"]
    record: dict = {
        "what": f"{folder}: a comparison made before comparisons kept a record",
        "runs": [],
        "base": None,
    }

    def evals(under: Path) -> dict:
        found = {}
        for b in benches:
            path = under / bench_slug(b) / EVAL_METRICS_FILE
            if path.is_file():
                m = json.loads(path.read_text())
                found[b] = {k: m[k] for k in ("n", "ks", "num_problems", "pass_at_k")}
                rows, _ = read_samples(path.parent / EVAL_SAMPLES_FILE)
                if rows:
                    counts = count_correct(rows, m["n"])
                    found[b]["correct"] = {
                        p: c.correct for p, c in sorted(counts.items()) if c.samples == m["n"]
                    }
        return found

    record["base"] = {"method": "base", "evals": evals(folder / "evals" / "base")}
    for run in manifest["runs"]:
        metrics = folder / run["folder"] / METRICS_FILE
        record["runs"].append({"method": run["variant"], "seed": run["seed"],
                               "evals": evals(folder / "evals" / run["folder"].removeprefix("runs/")),
                               "dynamics": dynamics(metrics, run["overrides"].get("loss_type", "pacs"), extra=CALIBRATION)})  # fmt: skip
    methods = {r["variant"]: r["overrides"] for r in manifest["runs"]}
    samples = {}
    for b in benches:
        found = next((r["evals"][b] for r in [record["base"], *record["runs"]] if b in r["evals"]), {})
        samples[b] = {"n": found.get("n"), "ks": found.get("ks", [])}
    sweeps: dict = {}
    for key, values in settings.get("sweeps", {}).items():  # each value's variant, else the method's own run
        for m in settings["methods"]:
            named = {v: f"{m}[{key}={f'{v:g}' if isinstance(v, float) else v}]" for v in values}
            sweeps.setdefault(key, {})[m] = [[v, name if name in methods else m] for v, name in named.items()]
    train = {"model": settings["model"], **settings["train"]}
    record["protocol"] = {"train": train, "eval": {**settings["eval"], "samples": samples}, "methods": methods,
                          "sweeps": sweeps}  # fmt: skip
    record["seeds"] = settings["seeds"]
    return record


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


# ----------------------------------------------------------------------------------------------- report
def write_comparison_report(record: dict, out: Path, seeds: list[int] | None = None) -> Path:
    """Write ``report.md`` and the PNGs of ``record`` into ``out`` from whatever it holds (the runs of ``seeds`` it
    lacks named as unfinished); return the report's path."""
    out = Path(out)
    labels = {v: method_label(v) for v in record["protocol"]["methods"]}
    benches = collect(record)
    ks_of = {b: next(e["ks"] for r in rows.values() for e in r.values()) for b, rows in benches.items()
             if any(rows.values())}  # fmt: skip
    md = header_section(record, seeds)
    md += warnings_section(record, labels, benches)
    tables, bench_rows = passk_section(benches, labels, ks_of)
    md += tables
    if bench_rows:
        plot_passk_curves(bench_rows, ks_of, out / "passk_curves.png")
        md += ["![pass@k curves](passk_curves.png)", "",
               "pass@k against k, mean over seeds with ± standard-error bars.", ""]  # fmt: skip
        md += paired_test_section(benches, labels)
        md += sweeps_section(out, record, benches, ks_of)
    logs = training_logs(record, labels)
    if logs:
        md += dynamics_section(out, logs)
        md += critic_section(out, record, labels, logs)
    path = out / REPORT_FILE
    path.write_text("\n".join(md).rstrip() + "\n")
    return path


def header_section(record: dict, seeds: list[int] | None) -> list[str]:
    """Title, the training and evaluation settings, and which training runs are not finished."""
    proto = record["protocol"]
    ev, tr = proto["eval"], proto["train"]
    seeds = seeds if seeds is not None else record.get("seeds") or sorted({r["seed"] for r in record["runs"]})
    md = [
        "# Comparison report",
        "",
        f"Base model `{tr['model']}`; methods {', '.join(proto['methods'])}; seeds {seeds}; "
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
    have = {(r["method"], r["seed"]) for r in record["runs"]}
    missing = [f"{m}/seed{s}" for s in seeds for m in proto["methods"] if (m, s) not in have]
    if missing:
        md += [f"**Unfinished:** {len(missing)} of {len(seeds) * len(proto['methods'])} training runs are not "
               f"finished: {', '.join(missing)}. Rows below use what is finished.", ""]  # fmt: skip
    return md


def run_warnings(record: dict, labels: dict[str, str], benches: dict[str, Any]) -> list[str]:
    """What makes a row of the tables mean less than it seems, one line each: a run that saw no learning signal (a
    reward of 0 in every rollout, or no group holding both a right and a wrong answer: PACS and the group
    baselines learn from mixed groups only), and a row whose every evaluation equals the base model's, problem by
    problem."""
    lines = []
    for run in record["runs"]:
        curves = run.get("dynamics", {}).get("curves", {})
        rewards = [v for v in curves.get("reward", []) if v is not None]
        mixed = [v for v in curves.get("mixed_groups", []) if v is not None]
        name = f"{labels[run['method']]} seed {run['seed']}"
        if rewards and max(rewards) == 0:
            lines.append(f"{name} saw no learning signal: the reward was 0 in all {len(rewards)} logged rollouts "
                         "(raise max_completion_length or the budget, or train on problems the base model "
                         "sometimes solves)")  # fmt: skip
        elif mixed and max(mixed) == 0:
            lines.append(f"{name} saw no learning signal: no group held both a right and a wrong answer in "
                         f"{len(mixed)} logged rollouts, and the losses learn from those only")  # fmt: skip
    for v in record["protocol"]["methods"]:
        same, compared = True, 0
        for rows in benches.values():
            base = rows["Base"].get(None)
            for e in rows[v].values():
                if base is None or "correct" not in e or "correct" not in base or e["n"] != base["n"]:
                    continue
                compared += 1
                same = same and e["correct"] == base["correct"]
        if compared and same:
            lines.append(f"{labels[v]} ended equal to the base model: every evaluation of it has the base model's "
                         "right answers on every problem, so its row measures no training")  # fmt: skip
    return lines


def warnings_section(record: dict, labels: dict[str, str], benches: dict[str, Any]) -> list[str]:
    """The run_warnings, as a section at the top of the report (nothing when there are none)."""
    lines = run_warnings(record, labels, benches)
    if not lines:
        return []
    return ["## Warnings", "", *(f"- **warning:** {line}" for line in lines), ""]


def passk_section(
    benches: dict[str, Any], labels: dict[str, str], ks_of: dict[str, list[int]]
) -> tuple[list[str], BenchRows]:
    """One pass@k table per benchmark (Base, then each variant with a finished evaluation). Returns the Markdown
    lines and, per benchmark with a finished evaluation, the table's rows."""
    md = ["## pass@k", ""]
    bench_rows: BenchRows = {}
    for b, rows in benches.items():
        if b not in ks_of:
            md += [f"### {b}", "", "No finished evaluation yet.", ""]
            continue
        ks = ks_of[b]
        first = next(e for r in rows.values() for e in r.values())
        finished = [v for v in labels if rows[v]]
        table_rows = [("Base", per_seed_passk(rows["Base"], ks))]
        table_rows += [(labels[v], per_seed_passk(rows[v], ks)) for v in finished]
        bench_rows[b] = table_rows
        n_seeds = {labels[v]: len(rows[v]) for v in finished}
        title = (f"### {b} (pass@k, %; {first['num_problems']} problems, n = {first['n']}; mean ± standard error "
                 "over seeds)")  # fmt: skip
        md += [
            passk_table(table_rows, ks, title),
            "",
            ("Seeds per row: " + ", ".join(f"{k} {v}" for k, v in n_seeds.items()) + "; " if n_seeds else "")
            + "Base is one evaluation of the untrained model (no ±). "
            "**Bold**: best mean in the column, <u>underlined</u>: second best (at two decimals).",
            "",
        ]
    return md, bench_rows


def paired_test_section(benches: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """Per benchmark, per-problem pass@1 of PACS (else the first variant) against every other row."""
    ref = "pacs" if "pacs" in labels else next(iter(labels), None)
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
    others = ["Base", *(v for v in labels if v != ref)]
    lines = [line for b, rows in benches.items() if rows.get(ref)
             for line in paired_test_rows(b, rows, ref, others, labels)]  # fmt: skip
    if lines:
        md += [
            "| Benchmark | Comparison | problems | seeds | mean d (pp) | SE (pp) | p (sign-flip) | p (Wilcoxon) |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
            *lines,
        ]
    else:
        md += [f"No finished evaluation of {labels[ref]} with its per-problem counts yet: nothing to pair."]
    md += ["", "pp = percentage points. Seeds differ in training; every run is evaluated on the same problems "
           "with the same sampling seed, so the test pairs problems, not seeds.", ""]  # fmt: skip
    return md


def paired_test_rows(
    bench: str, rows: dict, ref: str, others: list[str], labels: dict[str, str]
) -> list[str]:
    """Table rows of :func:`paired_test_section` for one benchmark: ``ref`` against each of ``others``, on the
    problems every finished evaluation of the benchmark holds."""
    held = [set(e.get("correct", {})) for r in rows.values() for e in r.values()]
    ids = sorted(set.intersection(*held)) if held else []
    ref_pass1 = per_problem_pass1(rows[ref], ids)
    lines = []
    for o in others:
        other = per_problem_pass1(rows[o], ids) if rows.get(o) else None
        if ref_pass1 is None or other is None or not ids:
            continue
        t = sign_flip_test(ref_pass1 - other)
        w = wilcoxon_p(ref_pass1 - other)
        name = "Base" if o == "Base" else labels[o]
        lines.append(
            f"| {bench} | {labels[ref]} − {name} | {t['n']} | {len(rows[ref])} vs {len(rows[o])} | "
            f"{100 * t['mean']:+.2f} | {100 * t['se']:.2f} | {t['p_value']:.3g} ({t['method']}, {t['n_nonzero']} "
            f"non-zero) | {'–' if w is None else f'{w:.3g}'} |"
        )
    return lines


def sweeps_section(
    out: Path, record: dict, benches: dict[str, Any], ks_of: dict[str, list[int]]
) -> list[str]:
    """Per swept setting, method and benchmark: a table and a Figure-3 heatmap (value × k)."""
    table = record["protocol"].get("sweeps") or {}
    if not table:
        return []
    md = ["## Sweeps", ""]
    bench_index = {b: i for i, b in enumerate(benches)}
    for field, by_method in table.items():
        for method, pairs in by_method.items():
            for b, rows in benches.items():
                if b not in ks_of:
                    continue
                ks = ks_of[b]
                srows = [(f"{field} = {v}", per_seed_passk(rows[variant], ks)) for v, variant in pairs]
                grid = np.array([[mean_se(r.get(k, []))[0] for k in ks] for _, r in srows])
                name = f"sweep_{field}_{method}_{bench_index[b]}.png"
                plot_sweep_heatmap(field, [v for v, _ in pairs], grid, ks, out / name, b)
                md += [
                    passk_table(srows, ks, f"### {method_label(method)}: {field} on {b}"),
                    "",
                    f"Seeds per value: {[len(rows[variant]) for _, variant in pairs]}; "
                    f"{record['protocol']['eval']['n']} samples on each of the same problems.",
                    "",
                    f"![{field} sweep]({name})",
                    "",
                ]
    return md


def training_logs(record: dict, labels: dict[str, str]) -> dict[str, list[dict[str, list]]]:
    """Per row label, the curves of each of its runs that logged any step."""
    logs: dict[str, list[dict[str, list]]] = {}
    for run in record["runs"]:
        if run.get("dynamics", {}).get("steps"):
            logs.setdefault(labels[run["method"]], []).append(run["dynamics"]["curves"])
    return logs


def dynamics_section(out: Path, logs: dict[str, list[dict[str, list]]]) -> list[str]:
    """Figure-4 panels (entropy, gradient norm, response length, reward) over training."""
    plot_dynamics(logs, DYNAMICS, out / "training_dynamics.png", "Training dynamics (cf. paper Fig. 4)")
    counts = ", ".join(f"{k}: {len(v)} run(s)" for k, v in logs.items())
    return [
        "## Training dynamics",
        "",
        "![training dynamics](training_dynamics.png)",
        "",
        f"From each run's logged steps ({counts}); line = mean over seeds, band = min–max over seeds. Entropy is "
        "the mean per-token entropy of the sampled completions (the paper plots verl's entropy loss, a different "
        "scale).",
        "",
    ]


def critic_section(out: Path, record: dict, labels: dict[str, str], logs: dict[str, list]) -> list[str]:
    """For the PACS rows: the critic's within-group AUC over training, and its calibration."""
    pacs = {labels[v]: logs[labels[v]] for v, o in record["protocol"]["methods"].items()
            if o.get("loss_type") == "pacs" and labels[v] in logs}  # fmt: skip
    if not pacs:
        return []
    plot_dynamics(pacs, CRITIC, out / "critic.png", "PACS critic σ(ψ) over training")
    md = [
        "## PACS as a critic",
        "",
        "![critic AUC](critic.png)",
        "",
        "Per logged optimizer step, on that mini-batch's groups with both outcomes: the share of (right, wrong) "
        "pairs of a group whose ψ ranks the right completion higher (0.5 is chance). With the default reference (the "
        "policy that sampled the rollout) ψ is 0 on a rollout's first update, so the AUC is 0.5 there by "
        "construction; it means something on the later updates of the same rollout.",
        "",
    ]
    if plot_calibration(pacs, out / "critic_calibration.png") is not None:
        md += [
            "![calibration](critic_calibration.png)",
            "",
            "Calibration in the large: each point is one logged step, mean σ(ψ) against the mean reward of "
            "the same completions. A per-sample reliability diagram needs per-completion σ(ψ), which the "
            "trainer does not log (it logs step means), so it is not drawn.",
            "",
        ]
    return md
