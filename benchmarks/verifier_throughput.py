"""Verifier throughput: one process vs. a RewardPool, on 10,000 (completion, answer) pairs built from real data.

The pairs come from the worked solutions in the shared data folder (--data: ../shared/data beside the
project, or $PACS_RL_SHARED_DATA; MATH-500, Minerva-Math, AIME 2024, AIME 1983-2023 training set: 1,769
solutions, each ending in a boxed answer), in six variants each:

    boxed_gold        the solution as written, with its own gold answer            (expected: correct)
    boxed_mismatch    the solution, with the gold answer of another problem        (expected: wrong)
    unboxed_gold      every \\boxed{X}/\\fbox{X} replaced by X, own gold (plain-text reading)
    unboxed_mismatch  the unboxed solution, another problem's gold answer
    truncated         the first half of the solution (a cut-off generation), own gold
    hedged            the solution + "Alternatively, \\boxed{<another problem's answer>}."  (multiple answers)

1,769 x 6 = 10,614 pairs, shuffled with a fixed seed; the first --pairs (10,000) are used. "Another
problem" is the next one in a seeded permutation of the same file whose answer string differs.

Timing is interleaved so both modes see the same machine load: the pairs are cut into blocks, and each
block is verified by the single process (in this process, main thread, same per-pair timeout) and by
the pool, alternating which goes first. Pool start-up is measured separately and excluded. CPU seconds
of both modes are recorded too (this process for the single mode, the workers via /proc for the pool):
on a machine shared with other jobs, Linux's autogroup scheduler gives each login session a fair share
of the cores, so the pool's workers compete for the same share as the single process did; the CPU
figures show whether the pool was slowed by the machine or by its own overhead.

    python benchmarks/verifier_throughput.py [--data ../shared/data] [--pairs 10000] [--workers 2]

Writes docs/benchmarks/verifier_throughput.json; the recorded run is in docs/benchmarks/verifier.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("math500", "minerva_math", "aime24", "train_aime_1983_2023")
BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def unbox(text: str) -> str:
    """Replace every \\boxed{X} / \\fbox{X} by X (balanced braces)."""
    out, i = [], 0
    for match in BOX.finditer(text):
        if match.start() < i:
            continue
        depth, j = 0, match.end() - 1
        while j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        out.append(text[i : match.start()])
        out.append(text[match.end() : j])
        i = j + 1
    out.append(text[i:])
    return "".join(out)


def build_pairs(data_dir: Path, n_pairs: int, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    rng = random.Random(seed)
    pairs = []
    for name in SOURCES:
        rows = [json.loads(line) for line in (data_dir / f"{name}.jsonl").open()]
        rows = [r for r in rows if r.get("solution")]
        order = list(range(len(rows)))
        rng.shuffle(order)
        for pos, idx in enumerate(order):
            row = rows[idx]
            other = next(
                rows[order[(pos + step) % len(order)]]["answer"]
                for step in range(1, len(order))
                if rows[order[(pos + step) % len(order)]]["answer"].strip() != row["answer"].strip()
            )
            sol, gold = row["solution"], row["answer"]
            plain = unbox(sol)
            pairs += [
                ("boxed_gold", sol, gold),
                ("boxed_mismatch", sol, other),
                ("unboxed_gold", plain, gold),
                ("unboxed_mismatch", plain, other),
                ("truncated", sol[: len(sol) // 2], gold),
                ("hedged", f"{sol}\n\nAlternatively, \\boxed{{{other}}}.", gold),
            ]
    rng.shuffle(pairs)
    if len(pairs) < n_pairs:
        raise SystemExit(
            f"only {len(pairs)} pairs can be built from {data_dir}; ask for --pairs <= {len(pairs)}"
        )
    pairs = pairs[:n_pairs]
    kinds, completions, answers = (list(x) for x in zip(*pairs, strict=True))
    return kinds, completions, answers


def main() -> None:
    from pacs_rl.rewards import DEFAULT_TIMEOUT, RewardPool, verify_batch

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(os.environ.get("PACS_RL_SHARED_DATA", ROOT.parent / "shared" / "data")),
    )
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--block", type=int, default=500, help="pairs per interleaved timing block")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="per-pair time limit, seconds")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks" / "verifier_throughput.json")
    args = parser.parse_args()

    kinds, completions, answers = build_pairs(args.data, args.pairs)
    load_before = os.getloadavg()
    started = time.perf_counter()
    pool = RewardPool(num_workers=args.workers, timeout=args.timeout).wait_ready()
    pool_start_seconds = time.perf_counter() - started

    seconds = {"single": 0.0, "pool": 0.0}
    cpu = {"single": 0.0, "pool": 0.0}
    verdicts = {"single": [], "pool": []}
    blocks = range(0, len(completions), args.block)
    try:
        from rich.progress import track

        # auto_refresh=False: no refresh thread, so this process stays single-threaded and its in-process
        # checks use the same CPU-time limit as the workers.
        bar = track(blocks, description=f"{len(completions)} pairs, single vs pool", auto_refresh=False)
        for b, lo in enumerate(bar):
            hi = lo + args.block
            order = ("single", "pool") if b % 2 == 0 else ("pool", "single")
            for mode in order:
                if mode == "single":
                    cpu0 = time.process_time()
                    result = verify_batch(
                        completions[lo:hi], answers[lo:hi], num_workers=0, timeout=args.timeout
                    )
                    cpu[mode] += time.process_time() - cpu0
                else:
                    cpu0 = pool.worker_cpu_seconds() or 0.0
                    restarts = pool.restarts
                    result = pool.verify_batch(completions[lo:hi], answers[lo:hi], timeout=args.timeout)
                    if pool.restarts == restarts:  # a replaced worker takes its CPU count with it
                        cpu[mode] += (pool.worker_cpu_seconds() or 0.0) - cpu0
                seconds[mode] += result.seconds
                verdicts[mode] += result.verdicts
    finally:
        pool.close()
    load_after = os.getloadavg()
    try:
        autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        autogroup = None

    n = len(completions)
    single_rate, pool_rate = n / seconds["single"], n / seconds["pool"]
    by_kind: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for kind, verdict in zip(kinds, verdicts["pool"], strict=True):
        by_kind[kind][verdict.reason] += 1
    disagreements = sum(a != b for a, b in zip(verdicts["single"], verdicts["pool"], strict=True))
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = ""
    report = {
        "command": "python benchmarks/verifier_throughput.py " + " ".join(sys.argv[1:]),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": commit,
        "pairs": n,
        "workers": args.workers,
        "timeout_seconds": args.timeout,
        "block": args.block,
        "single_process_pairs_per_second": round(single_rate, 1),
        "pool_pairs_per_second": round(pool_rate, 1),
        "ratio_pool_over_single": round(pool_rate / single_rate, 3),
        "target_ratio": 1.6,
        "single_process_seconds": round(seconds["single"], 2),
        "pool_seconds": round(seconds["pool"], 2),
        "pool_start_seconds": round(pool_start_seconds, 2),
        "single_process_cpu_seconds": round(cpu["single"], 2),
        "pool_workers_cpu_seconds": round(cpu["pool"], 2),
        "cores_obtained_single": round(cpu["single"] / seconds["single"], 2),
        "cores_obtained_pool": round(cpu["pool"] / seconds["pool"], 2),
        "cpu_per_pair_ms_single": round(1000 * cpu["single"] / n, 2),
        "cpu_per_pair_ms_pool": round(1000 * cpu["pool"] / n, 2),
        # derived, not measured: workers x (single CPU per pair / pool CPU per pair), the speed-up if the
        # single process and every worker each had a core of its own
        "derived_ratio_if_each_process_had_a_free_core": round(
            args.workers * cpu["single"] / max(cpu["pool"], 1e-9), 3
        ),
        "sched_autogroup_enabled": autogroup,
        "pool_restarts": pool.restarts,
        "verdict_disagreements_single_vs_pool": disagreements,
        "load_average_1_5_15_before": [round(x, 2) for x in load_before],
        "load_average_1_5_15_after": [round(x, 2) for x in load_after],
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "reasons_by_variant": {k: dict(v.most_common()) for k, v in sorted(by_kind.items())},
        "reasons_total": dict(collections.Counter(v.reason for v in verdicts["pool"]).most_common()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"single process : {single_rate:8.1f} pairs/s ({seconds['single']:.1f} s)")
    print(
        f"pool x{args.workers}       : {pool_rate:8.1f} pairs/s ({seconds['pool']:.1f} s; start-up {pool_start_seconds:.1f} s)"
    )
    print(f"ratio          : {pool_rate / single_rate:8.2f}x (target 1.6x)")
    print(
        f"cores obtained : single {cpu['single'] / seconds['single']:.2f}, pool {cpu['pool'] / seconds['pool']:.2f} "
        f"(CPU ms/pair: single {1000 * cpu['single'] / n:.1f}, pool {1000 * cpu['pool'] / n:.1f}; autogroup={autogroup})"
    )
    print(f"load average   : before {load_before}, after {load_after}")
    print(f"disagreements  : {disagreements} of {n} verdicts differ between single and pool")
    for kind, counts in sorted(by_kind.items()):
        print(f"  {kind:17s} {dict(counts.most_common())}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
