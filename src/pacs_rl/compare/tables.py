"""A record as tables: the line a driver prints per finished run; and a paired record's plain table for the terminal,
the markdown ones docs/RESULTS.md quotes, where its stopping rule stands, and the cost per pair."""

from __future__ import annotations

from pacs_rl.compare.record import MAX_PAIRS, MIN_PAIRS, PRIMARY, TARGET, cost, is_comparison, summarize


def _fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def cost_line(record: dict) -> str:
    """The cost per pair of PACS and PRIMARY, each kind of evaluation the record has, in one line; a line per device
    where the record's runs ran on more than one (a GPU's medians would otherwise mix with a CPU's)."""
    devices = _runs_by_device(record)
    if len(devices) < 2:
        return _cost_line(record)
    return "\n".join(
        _cost_line({**record, "runs": runs}).replace("cost per pair", f"cost per pair on {device}", 1)
        for device, runs in devices.items()
    )


def _runs_by_device(record: dict) -> dict[str, list[dict]]:
    """The record's runs by the device each ran on (``host.device``; cpu where a run names none), most runs first."""
    out: dict[str, list[dict]] = {}
    for r in record["runs"]:
        out.setdefault(r.get("host", {}).get("device", "cpu"), []).append(r)
    return dict(sorted(out.items(), key=lambda kv: -len(kv[1])))


def _cost_line(record: dict) -> str:
    c = cost(record)
    if not c["pair"]:
        return "cost per pair: not enough runs trained in one go"
    train = " + ".join(f"{m} {c['per_method'][m]['train_seconds_median']:.0f} s" for m in ("pacs", PRIMARY))
    kinds = {"greedy": "greedy only", "passk": "with pass@k"}
    pairs = "; ".join(
        f"{kinds[k]}: {v['seconds']} s, {v['eval_seconds']} s of it evaluation and start-up"
        for k, v in c["pair"].items()
    )
    line = f"cost per pair (medians, one thread each; training {train}): {pairs}"
    names = {
        "greedy_eval_seconds_median": "greedy",
        "passk_seconds_median": "pass@k",
        "import_seconds_median": "imports",
    }
    parts = []
    for m in ("pacs", PRIMARY):
        timed = [f"{names[k]} {v:.0f} s" for k, v in c["per_method"][m].items() if k in names]
        if timed:
            parts.append(f"{m} " + ", ".join(timed))
    return line + (f"; a run's evaluation: {'; '.join(parts)}" if parts else "")


def verdict(record: dict, target: float = TARGET, max_pairs: int | None = MAX_PAIRS) -> str:
    """Where the stopping rule stands, in one line: PACS − PRIMARY's greedy difference at the last step with its 95%
    interval, and whether it is within ±``target`` (answered), or ``max_pairs`` seeds were reached first (then what
    ±``target`` would need at the spread measured), or neither yet."""
    gap = summarize(record).get(PRIMARY, {}).get("pacs_minus_this", {}).get("greedy_accuracy", {})
    if not gap.get("ci95"):
        return f"PACS - {PRIMARY}: {gap.get('pairs', 0)} pair(s), no interval yet"
    lo, hi = gap["ci95"]
    text = (f"PACS - {PRIMARY} (greedy, last step): {100 * gap['mean']:+.1f} pp [{100 * lo:+.1f}, {100 * hi:+.1f}] "
            f"over {gap['pairs']} pairs, ± {100 * gap['half_width']:.1f} pp (paired SD {100 * gap['sd']:.1f} pp)")  # fmt: skip
    if gap["half_width"] <= target:
        if gap["pairs"] >= MIN_PAIRS:
            return text + f": within ±{100 * target:g} pp with at least {MIN_PAIRS} pairs, answered"
        return text + (f": within ±{100 * target:g} pp, but the rule holds from {MIN_PAIRS} pairs on "
                       f"({MIN_PAIRS - gap['pairs']} more)")  # fmt: skip
    need = gap.get("pairs_needed")
    if max_pairs is not None and gap["pairs"] >= max_pairs:
        return text + (f": the record stopped at {max_pairs} pairs; at this spread ±{100 * target:g} pp would need "
                       f"about {need} pairs")  # fmt: skip
    cap = f" (the record stops at {max_pairs})" if max_pairs is not None else ""
    return text + f": ±{100 * target:g} pp needs about {need} pairs{cap}"


def run_line(record: dict, method, seed, result) -> str:
    """The line a driver prints as a run lands in ``record``: what it scored (a planned comparison: pass@1 and
    pass@(largest k) on each benchmark) and, in a paired record, PACS − PRIMARY so far."""
    name = "base" if method is None else f"{method} seed {seed}"
    if is_comparison(record["protocol"]):
        scores = [f"pass@1 {_fmt(e['pass_at_k'].get('1'))}, pass@{e['ks'][-1]} {_fmt(e['pass_at_k'].get(str(e['ks'][-1])))} "
                  f"on {b}" for b, e in result["evals"].items()]  # fmt: skip
        wall = "" if method is None else f", {result['host']['wall_seconds']} s"
        return f"{name}: {'; '.join(scores)}{wall}"
    pass64 = (result.get("passk") or {}).get("pass_at_k", {}).get("64")
    if method is None:
        return f"base: greedy {result['greedy']['accuracy']:.3f}, pass@64 {_fmt(pass64)}"
    gap = summarize(record).get(PRIMARY, {}).get("pacs_minus_this", {}).get("greedy_accuracy", {})
    text = f"{name}: greedy {result['greedy']['accuracy']:.3f}, pass@64 {_fmt(pass64)}, {result['host']['wall_seconds']} s"
    if gap.get("half_width") is not None:
        text += f" | PACS - {PRIMARY}: {gap['mean']:+.3f} ± {gap['half_width']:.3f} ({gap['pairs']} pairs)"
    return text


def summary_text(record: dict) -> str:
    """The record as a plain table: per method its seeds, mean greedy accuracy and pass@1/64, and PACS − method
    (greedy) with its 95% interval and the pairs ±5 pp would need."""
    lines = [
        f"{'method':40} {'seeds':>5} {'greedy':>7} {'pass@1':>7} {'pass@64':>8}   PACS − method (greedy), 95% CI"
    ]
    for method, entry in summarize(record).items():
        m = entry["mean"]
        gap = entry.get("pacs_minus_this", {}).get("greedy_accuracy", {})
        ci = (
            f"{gap['mean']:+.3f} [{gap['ci95'][0]:+.3f}, {gap['ci95'][1]:+.3f}], {gap['pairs']} pairs, "
            f"±5 pp needs {gap['pairs_needed']}"
            if gap.get("ci95")
            else ""
        )
        lines.append(
            f"{method:40} {len(entry['seeds']):>5} {_fmt(m['greedy_accuracy']):>7} {_fmt(m.get('pass@1')):>7} "
            f"{_fmt(m.get('pass@64')):>8}   {ci}"
        )
    return "\n".join(lines)


def markdown_tables(record: dict) -> str:
    """The record as two markdown tables: each method's mean (and per-run SD over seeds), and PACS − method paired
    by seed with its 95% interval, the SD of the paired differences (what sets the pairs a record needs) and the
    pairs a ±5 pp interval would need. Accuracies in percent."""
    summary = summarize(record)
    steps = record["protocol"]["train"].get("max_steps", 24)
    # a checkpoint at the last step is the final model: one column, not two
    at = [f"greedy_accuracy@{s}" for s in record["protocol"].get("greedy_at", []) if s != steps]
    ks = [k for k in (1, 8, 64) if k in record["protocol"]["ks"]]
    cols = [*at, "greedy_accuracy", *[f"pass@{k}" for k in ks]]
    names = {**{c: f"greedy @{c.rsplit('@', 1)[1]}" for c in at}, "greedy_accuracy": f"greedy @{steps}"}
    head = [names.get(c, c) for c in cols]

    def pct(x):
        return "–" if x is None else f"{round(100 * x, 1) + 0.0:.1f}"  # + 0.0: no "-0.0"

    lines = ["| method | seeds | " + " | ".join(f"{h} (SD)" for h in head) + " | entropy, length (last) |",
             "|---|---:|" + "---:|" * len(cols) + "---|"]  # fmt: skip
    for method, e in summary.items():
        cells = [f"{pct(e['mean'][c])} ({pct(e['sd'][c])})" for c in cols]
        dyn = f"{e['mean']['entropy_last'] or 0:.2f}, {e['mean']['length_last'] or 0:.0f}"
        lines.append(f"| {method} | {len(e['seeds'])} | " + " | ".join(cells) + f" | {dyn} |")
    lines += ["", "| PACS − method: mean [95% CI] (paired SD) | pairs | " + " | ".join(head) + " | ±5 pp needs |",
              "|---|---:|" + "---:|" * len(cols) + "---:|"]  # fmt: skip
    for method, e in summary.items():
        gaps = e.get("pacs_minus_this")
        if not gaps:
            continue
        cells = []
        for c in cols:
            g = gaps[c]
            if g.get("ci95"):
                cells.append(f"{pct(g['mean'])} [{pct(g['ci95'][0])}, {pct(g['ci95'][1])}] ({pct(g['sd'])})")
            else:  # one pair: its difference, no interval
                cells.append(f"{pct(g.get('mean'))} [–]")
        need = gaps["greedy_accuracy"].get("pairs_needed", "–")
        lines.append(
            f"| {method} | {gaps['greedy_accuracy']['pairs']} | " + " | ".join(cells) + f" | {need} |"
        )
    devices = by_device(record)
    if devices:
        lines += ["", devices]
    return "\n".join(lines)


def by_device(record: dict) -> str | None:
    """Where a record's runs ran, when on more than one device, and PACS − PRIMARY (greedy at the last step) over
    each device's pairs alone beside the pooled figure (a pair is trained on one machine); None for a record of one
    device."""
    devices = _runs_by_device(record)
    if len(devices) < 2:
        return None
    parts = []
    for where, runs in devices.items():
        seen = sorted({r["seed"] for r in runs})
        parts.append(f"{where} {len(runs)} (seed{'s' if len(seen) > 1 else ''} {_seed_ranges(seen)})")
    line = f"Runs by device: {'; '.join(parts)}."
    steps = record["protocol"]["train"].get("max_steps", 24)
    figures = []
    for where, runs in [("pooled", record["runs"]), *[(f"{d} alone", r) for d, r in devices.items()]]:
        gap = (
            summarize({**record, "runs": runs})
            .get(PRIMARY, {})
            .get("pacs_minus_this", {})
            .get("greedy_accuracy", {})
        )
        if gap.get("ci95"):
            lo, hi = gap["ci95"]
            figures.append(f"{where} {100 * gap['mean']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] over {gap['pairs']} "
                           "pairs")  # fmt: skip
        elif gap.get("pairs"):
            figures.append(f"{where} {100 * gap['mean']:+.1f} over {gap['pairs']} pair (no interval)")
    if figures:
        line += f" PACS − {PRIMARY} (greedy @{steps}): {'; '.join(figures)}."
    return line


def _seed_ranges(seeds: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0–2, 5, 7–8"."""
    out, start = [], None
    for i, s in enumerate(seeds):
        start = s if start is None else start
        if i + 1 == len(seeds) or seeds[i + 1] != s + 1:
            out.append(str(s) if s == start else f"{start}–{s}")
            start = None
    return ", ".join(out)
