"""What a paired record's runs logged while they trained, per method, and what separates a run that collapses from
the others in its first steps: the share of completions cut at the token limit, how often the gradient clip and the
ratio clip acted, the groups holding both labels (per rollout and per optimizer step), the steps skipped for want of
a signal, the dynamic-sampling figures where the runs sampled so, with the reward, entropy and gradient norm beside
them. Read from the curves each run keeps (:func:`pacs_rl.compare.record.dynamics`); a figure a run did not log
(an older record, a run without a clip) is left out of its means.

A run *collapses* when its greedy held-out accuracy at the last step is below ``COLLAPSE_BELOW``.
"""

from __future__ import annotations

from pacs_rl.compare.record import tail_mean

COLLAPSE_BELOW = 0.20  # greedy held-out accuracy at the last step
FIRST_STEPS = 6  # the early window: three rollouts of two optimizer steps each

# figure -> (its column, the curve it is the mean of, how it prints); fractions print in %
FIGURES: dict[str, tuple[str, str, str]] = {
    "cut_off": ("cut off", "cut_off", "pct"),
    "grad_clipped": ("grad clipped", "grad_clipped", "pct"),
    "ratio_clipped": ("ratio clipped", "ratio_clipped", "pct"),
    "mixed_groups": ("both labels, rollout", "mixed_groups", "pct"),
    "mixed_groups_minibatch": ("both labels, step", "mixed_groups_minibatch", "pct"),
    "skipped_no_signal": ("skipped, no signal", "skipped_no_signal", "pct"),
    "dynamic_sampling_kept": ("DS kept", "", "pct"),  # groups kept / groups sampled (dynamic sampling)
    "dynamic_sampling_rounds": ("DS rounds", "dynamic_sampling/rounds", "num"),
    "reward": ("reward", "reward", "pct"),
    "entropy": ("entropy", "entropy", "num"),
    "grad_norm": ("grad norm", "grad_norm", "num"),
}


def collapsed(run: dict) -> bool:
    return run["greedy"]["accuracy"] < COLLAPSE_BELOW


def run_figures(run: dict, first: int | None = None) -> dict[str, float | None]:
    """A run's FIGURES, each the mean over its logged steps (over its first ``first`` optimizer steps where given);
    None where the run did not log it."""
    curves = run["dynamics"]["curves"]
    window = {name: curve[:first] if first else curve for name, curve in curves.items()}
    out = {name: tail_mean(window.get(curve, [])) for name, (_, curve, _) in FIGURES.items() if curve}
    sampled = [v for v in window.get("dynamic_sampling/groups_sampled", []) if v is not None]
    kept = [v for v in window.get("dynamic_sampling/groups_kept", []) if v is not None]
    out["dynamic_sampling_kept"] = sum(kept) / sum(sampled) if sum(sampled) else None
    return out


def _mean(runs: list[dict], first: int | None) -> dict[str, float | None]:
    """The mean over ``runs`` of each figure (of the runs that logged it)."""
    per_run = [run_figures(r, first) for r in runs]
    out = {}
    for name in FIGURES:
        values = [f[name] for f in per_run if f[name] is not None]
        out[name] = sum(values) / len(values) if values else None
    return out


def _by_method(record: dict) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {}
    for method in record["protocol"]["methods"]:
        found = sorted((r for r in record["runs"] if r["method"] == method), key=lambda r: r["seed"])
        if found:
            runs[method] = found
    return runs


def method_figures(record: dict) -> dict[str, dict]:
    """Per method: its runs, the seeds that collapsed, and each figure's mean over its runs (whole runs)."""
    return {
        method: {
            "runs": len(runs),
            "collapsed_seeds": [r["seed"] for r in runs if collapsed(r)],
            "mean": _mean(runs, None),
        }
        for method, runs in _by_method(record).items()
    }


def collapse_split(record: dict, first: int = FIRST_STEPS) -> dict[str, dict[str, dict]]:
    """Per method (and, with more than one, every method pooled as "all"): the collapsed runs and the others, each
    with its seeds and the mean of each figure over their first ``first`` optimizer steps."""
    groups = _by_method(record)
    if len(groups) > 1:
        groups["all"] = [r for runs in groups.values() for r in runs]
    out = {}
    for method, runs in groups.items():
        out[method] = {}
        for kind, part in (("collapsed", [r for r in runs if collapsed(r)]),
                           ("others", [r for r in runs if not collapsed(r)])):  # fmt: skip
            out[method][kind] = {
                "seeds": [r["seed"] for r in part],
                "mean": _mean(part, first) if part else None,
            }
    return out


def _cell(value: float | None, kind: str) -> str:
    if value is None:
        return "–"
    return f"{100 * value:.1f}" if kind == "pct" else f"{value:.3g}"


def _columns(rows: list[dict | None]) -> list[str]:
    """The figures some row has a value of (a figure no run logged gets no column)."""
    return [n for n in FIGURES if any(row and row.get(n) is not None for row in rows)]


def dynamics_table(record: dict) -> str:
    """method_figures as a markdown table: per method its runs, its collapses (below COLLAPSE_BELOW at the last
    step, seeds named) and each figure's mean over its runs' whole training."""
    found = method_figures(record)
    names = _columns([e["mean"] for e in found.values()])
    lines = ["| method | runs | collapsed | " + " | ".join(FIGURES[n][0] for n in names) + " |",
             "|---|---:|---|" + "---:|" * len(names)]  # fmt: skip
    for method, e in found.items():
        seeds = e["collapsed_seeds"]
        gone = f"{len(seeds)}" + (f" ({', '.join(map(str, seeds))})" if seeds else "")
        cells = [_cell(e["mean"][n], FIGURES[n][2]) for n in names]
        lines.append(f"| {method} | {e['runs']} | {gone} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def collapse_table(record: dict, first: int = FIRST_STEPS) -> str:
    """collapse_split as a markdown table: per method, the collapsed runs and the others, the mean of each figure
    over their first ``first`` optimizer steps."""
    split = collapse_split(record, first)
    names = _columns([part["mean"] for parts in split.values() for part in parts.values()])
    lines = ["| method | runs | " + " | ".join(FIGURES[n][0] for n in names) + " |",
             "|---|---|" + "---:|" * len(names)]  # fmt: skip
    for method, parts in split.items():
        for kind, part in parts.items():
            if not part["seeds"]:
                continue
            cells = [_cell(part["mean"][n], FIGURES[n][2]) for n in names]
            lines.append(f"| {method} | {kind} ({len(part['seeds'])}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def checkpoint_table(record: dict) -> str:
    """Per method, what happened between the record's first greedy checkpoint and its last step (a record whose runs
    are evaluated part-way, ``greedy_at``): the runs below COLLAPSE_BELOW at each, the runs that collapsed between
    them (above it at the checkpoint, below it at the end), the runs that ended lower than at the checkpoint, the
    change in points (mean over runs, and the least: the largest fall where a run fell) and the lowest run at the end. Empty for a record
    evaluated only at its end."""
    steps = record["protocol"]["train"].get("max_steps")
    early = sorted(s for s in record["protocol"].get("greedy_at", []) if s != steps)
    if not early:
        return ""
    at, key = early[0], str(early[0])
    lines = [f"| method | runs | below 20% @{at} | below 20% @{steps} | collapsed between | lower @{steps} than @{at} "
             f"| change @{at} → @{steps}, mean (least) | lowest @{steps} |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for method, runs in _by_method(record).items():
        runs = [r for r in runs if key in r.get("greedy_at", {})]
        if not runs:
            continue
        before = [r["greedy_at"][key]["accuracy"] for r in runs]
        after = [r["greedy"]["accuracy"] for r in runs]
        change = [b - a for a, b in zip(before, after, strict=True)]
        between = [r["seed"] for r, a, b in zip(runs, before, after, strict=True)
                   if a >= COLLAPSE_BELOW > b]  # fmt: skip
        named = f"{len(between)}" + (f" ({', '.join(map(str, between))})" if between else "")
        lines.append(
            f"| {method} | {len(runs)} | {sum(a < COLLAPSE_BELOW for a in before)} "
            f"| {sum(b < COLLAPSE_BELOW for b in after)} | {named} | {sum(c < 0 for c in change)} "
            f"| {100 * sum(change) / len(change):+.1f} ({100 * min(change):+.1f}) | {100 * min(after):.1f} |"
        )
    return "\n".join(lines)


def steps_on_no_signal(run: dict) -> dict:
    """The optimizer steps of ``run`` whose rollout held no group with both labels (its ``mixed_groups``, logged at
    the rollout's first step, carried to the rollout's other steps): how many, and how many of them the optimizer
    took (a gradient norm above 0, not skipped): with no signal, a step on float rounding. A lower bound where the
    run did not log the step's own groups (a step of a mixed rollout may still hold none)."""
    curves = run["dynamics"]["curves"]
    skipped = curves.get("skipped_no_signal") or [None] * len(curves["grad_norm"])
    rollout, steps, moved, norms = None, 0, 0, []
    for mixed, norm, skip in zip(curves["mixed_groups"], curves["grad_norm"], skipped, strict=True):
        rollout = mixed if mixed is not None else rollout
        if rollout == 0:
            steps += 1
            if norm and not skip:
                moved += 1
                norms.append(norm)
    return {"steps": len(curves["grad_norm"]), "no_signal": steps, "moved": moved, "moved_grad_norms": norms}
