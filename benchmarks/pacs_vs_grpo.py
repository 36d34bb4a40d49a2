"""The PACS-vs-GRPO record (docs/benchmarks/pacs_vs_grpo.json): `pacs-rl compare paired` with the record's file and
settings, and the figures of docs/RESULTS.md. The engine is pacs_rl.compare.paired.

    python benchmarks/pacs_vs_grpo.py run --hours 8      # add pairs to the record (resumes; two runs at a time)
    python benchmarks/pacs_vs_grpo.py summary --markdown # the tables of docs/RESULTS.md
    python benchmarks/pacs_vs_grpo.py plot               # docs/results/pacs_vs_grpo/comparison.png
    python benchmarks/pacs_vs_grpo.py results            # docs/RESULTS.md's tables and cost, from the record
    python benchmarks/pacs_vs_grpo.py plot --record docs/benchmarks/pacs_vs_grpo_restatement_leak.json \\
        --critic docs/benchmarks/pacs_critic.json --out docs/results/pacs_vs_grpo_restatement_leak
    python benchmarks/pacs_vs_grpo.py regrade --record FILE --work FOLDER   # a closed record's samples, re-graded
    python benchmarks/pacs_vs_grpo.py replay pacs:2 grpo:2 --steps 6   # does this checkout train them as recorded?

`replay` trains recorded runs again with this checkout's code for their first steps (one thread, the record's
protocol, each alone) and compares every logged value bit for bit with the run folder's metrics.jsonl: the record
pools runs trained by many commits, which is sound only while the training they share is unchanged. It writes
docs/benchmarks/pacs_vs_grpo_replay.json and exits 1 when a run differs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pacs_rl.compare.paired import job as run_job
from pacs_rl.compare.paired import record as records
from pacs_rl.compare.paired import tables
from pacs_rl.compare.paired.figures import critic_table, plot_comparison, plot_critic

RECORD = Path("docs/benchmarks/pacs_vs_grpo.json")
WORK = Path("runs/pacs_vs_grpo")
# how the record is made: PACS and GRPO only on every seed, greedy at 24 and 48 steps, pass@64 on every second
# seed since it was taken on (the record's protocol and protocol_changes)
RUN = ["paired", "--record", str(RECORD), "--output-dir", str(WORK), "--workers", "2",
       "--threads", "1", "--n", "64", "--passk-every", "2"]  # fmt: skip


RESULTS = Path("docs/RESULTS.md")
REPLAY = Path("docs/benchmarks/pacs_vs_grpo_replay.json")


def loss_rows(metrics: Path, steps: int | None = None) -> list[dict]:
    """The optimizer steps' rows of a metrics.jsonl (read while a run appends to it: a cut last line is skipped)."""
    from pacs_rl.training.output import read_metrics

    return [r for r in read_metrics(metrics) if "step" in r and "loss" in r][:steps]


def replay_runs(record: dict, specs: list[str]) -> list[tuple[str, int]]:
    """(method, seed) of each ``method:seed`` in ``specs``; ValueError naming a spec that is not a finished run of
    ``record`` with its run folder here."""
    runs = {(r["method"], r["seed"]) for r in record["runs"]}
    out = []
    for spec in specs:
        method, _, seed = spec.partition(":")
        if not seed.isdigit() or (method, int(seed)) not in runs:
            known = ", ".join(f"{m}:{s}" for m, s in sorted(runs))
            raise ValueError(f"{spec!r} is not a run of {RECORD} (method:seed, one of {known})")
        if not (WORK / records.slug(method) / f"seed{seed}" / "metrics.jsonl").is_file():
            raise ValueError(
                f"{spec!r}: its run folder {WORK / records.slug(method) / f'seed{seed}'} is not here"
            )
        out.append((method, int(seed)))
    return out


def replay(record: dict, method: str, seed: int, steps: int) -> dict:
    """Train ``method`` seed ``seed`` of ``record`` again for ``steps`` steps (a run process of the engine, stopped
    once it logged them) and compare with its recorded run folder."""
    from repeatability import first_difference  # benchmarks/ is this script's folder

    recorded = loss_rows(WORK / records.slug(method) / f"seed{seed}" / "metrics.jsonl", steps)
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / records.slug(method) / f"seed{seed}" / "metrics.jsonl"
        cmd = [sys.executable, "-m", "pacs_rl.compare.paired.job", "job", "--work", tmp, "--threads", "1",
               "--protocol", json.dumps(record["protocol"]), "--method", method, "--seed", str(seed)]  # fmt: skip
        job = subprocess.Popen(cmd, env={**os.environ, **run_job.JOB_ENV}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
        while job.poll() is None and not (metrics.is_file() and len(loss_rows(metrics)) >= steps):
            time.sleep(2)
        job.kill()
        job.wait()
        again = loss_rows(metrics, steps) if metrics.is_file() else []
    trained_by = next(
        r["host"].get("commit") for r in record["runs"] if (r["method"], r["seed"]) == (method, seed)
    )
    diff = first_difference(recorded, again)
    return {"method": method, "seed": seed, "recorded_commit": trained_by, "steps": len(again),
            "trained_steps": sum(1 for r in recorded if r.get("grad_norm")), "identical": diff is None,
            "first_difference": diff}  # fmt: skip


def refill_results(record: dict, path: Path = RESULTS) -> Path:
    """Write the record's tables, its critic table and its cost per pair into docs/RESULTS.md, where its
    `<!-- tables: ... -->` and `<!-- critic_sound: ... -->` blocks and its cost sentence stand."""
    text = path.read_text()
    for name, body in (("tables", tables.markdown_tables(record)), ("critic_sound", critic_table([record]))):
        start = text.index("\n", text.index(f"<!-- {name}:")) + 1
        text = text[:start] + body + "\n" + text[text.index(f"<!-- end {name} -->") :]
    now = records.cost(record)["pair"].get("greedy")
    if now:
        text = re.sub(r"greedy only, as now, [\d,]+ s, [\d,]+ s of it evaluation",
                      f"greedy only, as now, {now['seconds']:,} s, {now['eval_seconds']:,} s of it evaluation", text)  # fmt: skip
    path.write_text(text)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="pacs-rl compare paired on the record")
    r.add_argument("--hours", default="8")
    s = sub.add_parser("summary", help="the record's tables and cost per pair")
    s.add_argument("--record", type=Path, default=RECORD)
    s.add_argument("--markdown", action="store_true", help="the tables of docs/RESULTS.md")
    s.add_argument("--write", action="store_true", help="write the record back, summary and cost recomputed")
    f = sub.add_parser("plot", help="figures of a record (and of implicit-critic records)")
    f.add_argument("--record", type=Path, default=RECORD)
    f.add_argument(
        "--critic", type=Path, nargs="*", default=[], help="records of PACS variants (frozen π_ref)"
    )
    f.add_argument("--out", type=Path, default=Path("docs/results/pacs_vs_grpo"))
    sub.add_parser("results", help="rewrite docs/RESULTS.md's tables, critic table and cost from the record")
    g = sub.add_parser("regrade", help="score a record's kept samples again with its protocol's grader")
    g.add_argument("--record", type=Path, default=RECORD)
    g.add_argument("--work", type=Path, default=WORK, help="the record's run folders")
    rp = sub.add_parser("replay", help="train recorded runs again for a few steps; compare bit for bit")
    rp.add_argument("runs", nargs="+", help="method:seed of the record, e.g. pacs:2 grpo:2")
    rp.add_argument("--steps", type=int, default=6)
    sub.add_parser("job", add_help=False)  # one run, as drivers started before the engine moved call it
    a, rest = p.parse_known_args()
    if a.command == "job":
        run_job.main(["job", *rest])
    elif a.command == "run":
        sys.exit(subprocess.call([sys.executable, "-m", "pacs_rl", "compare", *RUN, "--hours", a.hours]))
    elif a.command == "plot":
        records = [json.loads(x.read_text()) for x in [a.record, *a.critic]]
        print(plot_comparison(records[0], a.out / "comparison.png"))
        if (
            a.critic
        ):  # the critic's figure and table pool the record's PACS runs with the frozen-π_ref records
            print(plot_critic(records, a.out / "critic_auc.png"))
            print(critic_table(records))
    elif a.command == "results":
        print(refill_results(json.loads(RECORD.read_text())))
    elif a.command == "replay":
        from pacs_rl.sampling.transformers_backend import cpu_capability

        record = json.loads(RECORD.read_text())
        try:
            runs = replay_runs(record, a.runs)
        except ValueError as e:
            p.error(str(e))
        found = []
        for method, seed in runs:
            found.append(replay(record, method, seed, a.steps))
            print(json.dumps(found[-1]))
        out = {"what": "recorded runs trained again by this checkout, first steps compared bit for bit",
               "command": "python benchmarks/pacs_vs_grpo.py replay " + " ".join(a.runs) + f" --steps {a.steps}",
               "date": time.strftime("%Y-%m-%d"), "commit": run_job.commit(), "cpu_capability": cpu_capability(),
               "runs": found}  # fmt: skip
        REPLAY.write_text(json.dumps(out, indent=1) + "\n")
        sys.exit(0 if all(r["identical"] and r["steps"] == a.steps for r in found) else 1)
    elif a.command == "regrade":
        record = json.loads(a.record.read_text())
        runs = run_job.regrade(a.work)
        record["regraded"] = {"grader": records.PROTOCOL["grader"], "commit": run_job.commit(), "runs": runs}
        records.save_record(a.record, record)
        print(json.dumps(runs, indent=1))
    else:
        record = json.loads(a.record.read_text())  # whatever its protocol
        print(tables.markdown_tables(record) if a.markdown else tables.summary_text(record))
        print(tables.cost_line(record))
        if a.write:
            records.save_record(a.record, record)


if __name__ == "__main__":
    main()
