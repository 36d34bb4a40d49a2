"""Every figure of a record (:mod:`pacs_rl.compare.record`). A paired record's: greedy accuracy per seed and step,
pass@k, entropy and length per step by method; the implicit critic's within-group AUC by steps since π_ref was last
set to the policy, pooled over records of PACS variants. A planned comparison's report (:mod:`pacs_rl.compare.report`):
pass@k against k, the training dynamics as in the paper's Figure 4, the critic's calibration, a heatmap per sweep as
in its Figure 3."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from pacs_rl.compare import stats
from pacs_rl.compare.record import tail_mean
from pacs_rl.compare.stats import mean_se


def _plt():
    """matplotlib.pyplot on the file-only Agg backend (imported on first plot: it is slow to import)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def steps_since_reset(method_overrides: dict, step: int, mini_batches: int = 2) -> int:
    """Optimizer steps since π_ref last equalled the policy, at (1-based) ``step``: 0 means ψ ≡ 0.

    reference 'old': reset at every rollout (every ``mini_batches`` steps); 'frozen': at the start and every
    ref_reset_steps (0 = never)."""
    if method_overrides.get("reference", "old") == "old":
        return (step - 1) % mini_batches
    every = int(method_overrides.get("ref_reset_steps") or 0)
    return step - 1 if every == 0 else (step - 1) % every


def _save(fig, out: Path) -> Path:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    _plt().close(fig)
    return out


def plot_pairs(record: dict, out: Path, other: str = "grpo") -> Path:
    """The per-seed pairs of PACS and ``other``: each seed's held-out accuracy of the one against the other (a dot
    above the diagonal is a seed PACS won), and the paired differences sorted, with their mean and 95% interval;
    marked by the device each pair ran on."""
    plt = _plt()
    runs = {(r["method"], r["seed"]): r for r in record["runs"]}
    seeds = sorted(s for m, s in runs if m == "pacs" and (other, s) in runs)
    if len(seeds) < 2:
        raise ValueError(f"{len(seeds)} seeds hold both pacs and {other}: a figure of pairs needs two")
    acc = {k: r["greedy"]["accuracy"] for k, r in runs.items()}
    device = {s: runs["pacs", s].get("host", {}).get("device", "cpu") for s in seeds}
    devices = sorted(set(device.values()), key=lambda d: -list(device.values()).count(d))
    colors = {d: plt.cm.tab10(i) for i, d in enumerate(devices)}
    diffs = {s: acc["pacs", s] - acc[other, s] for s in seeds}
    interval = stats.paired_interval(list(diffs.values()))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    for d in devices:
        on = [s for s in seeds if device[s] == d]
        left.scatter([acc[other, s] for s in on], [acc["pacs", s] for s in on], color=colors[d], s=24,
                     label=f"{d} ({len(on)} pairs)")  # fmt: skip
    low = min(acc[m, s] for s in seeds for m in ("pacs", other))
    high = max(acc[m, s] for s in seeds for m in ("pacs", other))
    pad = 0.05 * (high - low or 1)
    left.plot([low - pad, high + pad], [low - pad, high + pad], color="grey", ls=":", lw=1)
    left.set(xlabel=f"{other}: held-out accuracy", ylabel="pacs: held-out accuracy", aspect="equal",
             title="one dot a seed (above the diagonal: PACS higher)")  # fmt: skip
    left.legend(fontsize=8)
    order = sorted(seeds, key=lambda s: diffs[s])
    right.bar(range(len(order)), [100 * diffs[s] for s in order], color=[colors[device[s]] for s in order])
    lo, hi = (100 * x for x in interval["ci95"])
    right.axhspan(lo, hi, color="grey", alpha=0.2, label=f"95% interval [{lo:+.1f}, {hi:+.1f}] pp")
    right.axhline(100 * interval["mean"], color="black", lw=1, label=f"mean {100 * interval['mean']:+.1f} pp")
    right.axhline(0, color="grey", lw=0.8, ls=":")
    right.set(xticks=range(len(order)), ylabel=f"pacs - {other} (pp)",
              title=f"paired differences, {len(seeds)} seeds, sorted")  # fmt: skip
    right.set_xticklabels([str(s) for s in order], rotation=90, fontsize=7)
    right.legend(fontsize=8)
    return _save(fig, out)


def plot_comparison(record: dict, out: Path) -> Path:
    """Greedy accuracy per seed at each evaluated step, pass@k (when the protocol has it), entropy and length per
    step, by method."""
    plt = _plt()
    methods = [m for m in record["protocol"]["methods"] if any(r["method"] == m for r in record["runs"])]
    colors = {m: plt.cm.tab10(i) for i, m in enumerate(methods)}
    with_passk = bool(record["protocol"]["ks"])
    fig, axes = plt.subplots(1, 4 if with_passk else 3, figsize=(20 if with_passk else 15, 4.5))
    if not with_passk:  # greedy only: no pass@k panel (an empty one reads as a result)
        axes = [axes[0], None, axes[1], axes[2]]
    # the last step: a run's own greedy, which greedy_at may name too
    last = record["protocol"]["train"].get("max_steps", 24)
    steps = sorted({*(int(s) for s in record["protocol"].get("greedy_at", [])), last})
    for i, m in enumerate(methods):
        runs = [r for r in record["runs"] if r["method"] == m]
        for j, step in enumerate(steps):
            values = [r["greedy"]["accuracy"] if step == last else r["greedy_at"][str(step)]["accuracy"]
                      for r in runs]  # fmt: skip
            x = j + (i - (len(methods) - 1) / 2) * 0.12
            axes[0].scatter([x] * len(values), values, color=colors[m], s=12, alpha=0.6)
            axes[0].errorbar(x, sum(values) / len(values), fmt="_", color=colors[m], markersize=14,
                             label=f"{m} ({len(runs)} seeds)" if j == 0 else None)  # fmt: skip
        ks = record["protocol"]["ks"]
        with_k = [r for r in runs if r.get("passk")]  # pass@k on some seeds only (passk_seeds)
        if ks and with_k:
            mean = [sum(r["passk"]["pass_at_k"][str(k)] for r in with_k) / len(with_k) for k in ks]
            axes[1].plot(ks, mean, marker="o", color=colors[m], label=f"{m} ({len(with_k)} seeds)")
        for ax, key in ((axes[2], "entropy"), (axes[3], "length")):
            curves = [r["dynamics"]["curves"][key] for r in runs]
            n = min(len(c) for c in curves)
            points = [(s + 1, tail_mean([c[s] for c in curves])) for s in range(n)]
            points = [(s, v) for s, v in points if v is not None]  # length: logged at rollout steps only
            ax.plot([s for s, _ in points], [v for _, v in points], color=colors[m], label=m)
    base = record.get("base") or {}
    if base:
        axes[0].axhline(base["greedy"]["accuracy"], color="grey", ls=":", label="base model")
        if base.get("passk"):
            ks = record["protocol"]["ks"]
            axes[1].plot(
                ks, [base["passk"]["pass_at_k"][str(k)] for k in ks], color="grey", ls=":", label="base"
            )
    axes[0].set(xticks=range(len(steps)), xticklabels=[f"step {s}" for s in steps], ylabel="held-out accuracy",
                title="greedy, whole held-out split (dots: seeds)")  # fmt: skip
    if with_passk:
        axes[1].set(xscale="log", xlabel="k", ylabel="pass@k", title="pass@k, T = 0.6, top-p 0.95, n = 64")
    axes[2].set(
        xlabel="optimizer step", ylabel="entropy (nats/token)", title="policy entropy (mean over seeds)"
    )
    axes[3].set(xlabel="optimizer step", ylabel="tokens", title="completion length (mean over seeds)")
    for ax in [a for a in axes if a is not None]:
        ax.legend(
            fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1)
        )  # beside the axes: the bins stay visible
    return _save(fig, out)


FROZEN_POOLED = "every frozen-π_ref variant"  # critic_by_reset's row pooling the reference='frozen' runs


def critic_by_reset(records: list[dict]) -> dict[str, dict[int, list[float]]]:
    """method -> {steps since the last reference reset: [within-group AUC of ψ at such steps, over runs]}; the
    reference='frozen' variants also pooled under FROZEN_POOLED."""
    out: dict[str, dict[int, list[float]]] = {}
    pooled: dict[int, list[float]] = {}
    for record in records:
        mini_batches = int(record["protocol"]["train"].get("mini_batches_per_rollout", 2))
        for run in record["runs"]:
            overrides = record["protocol"]["methods"][run["method"]]
            if overrides.get("loss_type") != "pacs":
                continue
            for step, auc in enumerate(run["dynamics"]["curves"].get("critic_auc", []), start=1):
                if auc is not None:
                    since = steps_since_reset(overrides, step, mini_batches)
                    out.setdefault(run["method"], {}).setdefault(since, []).append(auc)
                    if overrides.get("reference") == "frozen":
                        pooled.setdefault(since, []).append(auc)
    if pooled:
        out[FROZEN_POOLED] = pooled
    return out


CRITIC_BINS = [(0, 0), (1, 1), (2, 3), (4, 7), (8, 15), (16, 10**6)]  # optimizer steps since the last reset


def critic_bins(records: list[dict]) -> dict[str, list[tuple[str, float | None, float | None, int]]]:
    """method -> per bin of CRITIC_BINS: (label, mean AUC, its standard error, how many step values), the values
    pooled over seeds and the steps of the bin."""
    out = {}
    for method, by_since in critic_by_reset(records).items():
        rows = []
        for lo, hi in CRITIC_BINS:
            values = [v for since, vs in by_since.items() if lo <= since <= hi for v in vs]
            label = str(lo) if lo == hi else (f"{lo}-{hi}" if hi < 10**6 else f"{lo}+")
            if not values:
                rows.append((label, None, None, 0))
                continue
            mean = sum(values) / len(values)
            sd = (
                math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
                if len(values) > 1
                else None
            )
            rows.append((label, mean, None if sd is None else sd / math.sqrt(len(values)), len(values)))
        out[method] = rows
    return out


def critic_table(records: list[dict]) -> str:
    """critic_bins as a markdown table: AUC mean ± SE (values) per bin of steps since the last reset."""
    labels = [str(lo) if lo == hi else (f"{lo}-{hi}" if hi < 10**6 else f"{lo}+") for lo, hi in CRITIC_BINS]
    lines = ["| method | " + " | ".join(f"{x} steps" for x in labels) + " |", "|---|" + "---:|" * len(labels)]
    for method, rows in critic_bins(records).items():
        cells = ["–" if m is None else f"{m:.2f} ± {se or 0:.2f} ({n})" for _, m, se, n in rows]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_critic(records: list[dict], out: Path) -> Path:
    """Within-group AUC of ψ against the reward (mixed groups) by steps since the reference was last reset."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(13, 4.5))
    bins = critic_bins(records)
    for i, (method, rows) in enumerate(bins.items()):
        points = [
            (j + (i - (len(bins) - 1) / 2) * 0.08, m, se)
            for j, (_, m, se, _) in enumerate(rows)
            if m is not None
        ]
        pooled = {"color": "black", "linewidth": 2.5, "zorder": 5} if method == FROZEN_POOLED else {}
        ax.errorbar([x for x, _, _ in points], [m for _, m, _ in points], yerr=[se or 0 for _, _, se in points],
                    marker="o", markersize=4, capsize=3, label=method, **pooled)  # fmt: skip
    ax.axhline(0.5, color="grey", ls=":", label="chance")
    labels = [row[0] for row in next(iter(bins.values()), [])]
    ax.set(xticks=range(len(labels)), xticklabels=labels, ylim=(0, 1),
           xlabel="optimizer steps since π_ref was last set to the policy",
           ylabel="AUC of ψ within mixed groups (mean ± SE)",
           title="Does σ(ψ) rank right answers above wrong ones?")  # fmt: skip
    ax.legend(
        fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1)
    )  # beside the axes: the bins stay visible
    return _save(fig, out)


# ----------------------------------------------------------------------------------------------- a planned comparison's
def plot_passk_curves(
    bench_rows: dict[str, list[tuple[str, dict[int, list[float]]]]], ks, path: Path
) -> Path:
    """pass@k against k per benchmark, a line per row (mean over seeds, ± standard-error bars)."""
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
        ax.set(xlabel="k", ylabel="pass@k (%)")
        ax.set_title(bench, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


def _points(curve: list) -> dict[int, float]:
    """A record's per-step curve as {optimizer step: value}, the steps it logged."""
    return {i + 1: v for i, v in enumerate(curve) if v is not None}


def plot_dynamics(by_row: dict[str, list[dict[str, list]]], panels, path: Path, title: str) -> Path:
    """One panel per (title, curve) of ``panels``; per row (its runs' curves) the mean over seeds (line) and the
    min-max over seeds (band)."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (name, key) in zip(axes[0], panels, strict=True):
        drawn: set[int] = set()
        for label, runs in by_row.items():
            per_seed = [pts for curves in runs if (pts := _points(curves.get(key, [])))]
            if not per_seed:
                continue
            steps = sorted(set().union(*per_seed))
            drawn.update(steps)
            vals = np.array([[s.get(t, np.nan) for t in steps] for s in per_seed])
            few = len(steps) <= 3  # a line of one point draws nothing: mark the points
            ax.plot(steps, np.nanmean(vals, axis=0), marker="o" if few else None,
                    label=f"{label} ({len(per_seed)} seed{'s' if len(per_seed) > 1 else ''})")  # fmt: skip
            if len(per_seed) > 1:
                ax.fill_between(steps, np.nanmin(vals, axis=0), np.nanmax(vals, axis=0), alpha=0.2)
        ax.set_title(name, fontsize=9)
        if 0 < len(drawn) <= 3:
            ax.set_xticks(sorted(drawn))  # each step named (a locator would split one step into fractions)
        else:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.ticklabel_format(axis="y", useOffset=False)  # no "+1e-5" offset label over one value
        ax.set_xlabel("optimizer step")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_calibration(by_row: dict[str, list[dict[str, list]]], path: Path) -> Path | None:
    """Calibration in the large: per logged step, mean σ(ψ) (x) against the mean reward (y); None when no run of
    ``by_row`` logged both."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.2, 4))
    for label, runs in by_row.items():
        pairs = [(p, y) for c in runs for p, y in zip(c.get("critic_prob", []), c.get("critic_reward", []), strict=False)
                 if p is not None and y is not None]  # fmt: skip
        if pairs:
            ax.scatter(*zip(*pairs, strict=True), s=14, alpha=0.7, label=f"{label} ({len(pairs)} steps)")
    if not ax.collections:
        plt.close(fig)
        return None
    ax.plot([0, 1], [0, 1], "k--", lw=0.8, label="perfect calibration")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean predicted P(correct) = mean σ(ψ)",
           ylabel="mean reward (fraction correct)")  # fmt: skip
    ax.set_title("PACS critic: calibration in the large", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    return _save(fig, path)


def plot_sweep_heatmap(
    field: str, values: list[Any], grid: np.ndarray, ks: list[int], path: Path, bench: str
) -> Path:
    """Figure 3 style: rows = sweep values, columns = k, colour = mean pass@k (%)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(ks), 1.2 + 0.5 * len(values)))
    im = ax.imshow(grid, aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(ks)), [str(k) for k in ks])
    ax.set_yticks(range(len(values)), [str(v) for v in values])
    ax.set(xlabel="k", ylabel=field)
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", fontsize=7, color="w")
    fig.colorbar(im, ax=ax, label="pass@k (%)")
    ax.set_title(f"PACS pass@k by {field}\n{bench}", fontsize=8)
    return _save(fig, path)
