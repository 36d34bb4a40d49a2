"""The PACS-vs-GRPO records: the current one (docs/benchmarks/pacs_vs_grpo.json, made by its first run) and the
closed ones (CLOSED: each named by what it measured), `pacs-rl compare paired` with the current record's file and
settings, and the figures and tables of docs/RESULTS.md. The engine is pacs_rl.compare.

    python benchmarks/pacs_vs_grpo.py run --hours 8      # add seeds to the record (resumes; two runs at a time)
    python benchmarks/pacs_vs_grpo.py summary --markdown # the tables of docs/RESULTS.md (--dynamics: the runs' logs)
    python benchmarks/pacs_vs_grpo.py summary --record noise_steps   # a closed record, by its name in CLOSED
    python benchmarks/pacs_vs_grpo.py plot               # docs/results/pacs_vs_grpo/comparison.png, pairs.png
    python benchmarks/pacs_vs_grpo.py plot --record noise_steps      # docs/results/pacs_vs_grpo_noise_steps/
    python benchmarks/pacs_vs_grpo.py results            # docs/RESULTS.md's blocks of every record
    python benchmarks/pacs_vs_grpo.py summary --record later --dynamics  # item 5's 48-step runs: 24 against 48
    python benchmarks/pacs_vs_grpo.py plot --record restatement_leak \\
        --critic docs/benchmarks/pacs_critic.json
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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pacs_rl.compare import collapses, tables
from pacs_rl.compare import job as run_job
from pacs_rl.compare import record as records
from pacs_rl.compare.figures import critic_table, plot_comparison, plot_critic, plot_pairs

# the fourth record (protocol version 3): the CPU default at its own budget (24 steps), every run trained and evaluated
# by the code of commit PINNED (its runs are made from a worktree of that commit, so that main can move meanwhile)
RECORD = Path("docs/benchmarks/pacs_vs_grpo.json")
PINNED = "c579fe0"
# its run folders: a folder of its own (a driver refuses a folder of another protocol's runs)
WORK = Path("runs/pacs_vs_grpo_v4")
# the closed records, by what each measured (docs/RESULTS.md: a section each), and where their run folders were
CLOSED = {
    "noise_steps": Path("docs/benchmarks/pacs_vs_grpo_noise_steps.json"),  # the third
    "restatement_rule": Path("docs/benchmarks/pacs_vs_grpo_restatement_rule.json"),  # the second
    "restatement_leak": Path("docs/benchmarks/pacs_vs_grpo_restatement_leak.json"),  # the first
}
CLOSED_WORK = {"noise_steps": Path("runs/pacs_vs_grpo")}  # the others' samples were not kept
# issue 53's item 5: ten of the fourth record's pairs trained again to 48 steps on PINNED, evaluated at 24 and 48
LATER = Path("docs/benchmarks/pacs_vs_grpo_48.json")
LATER_WORK = Path("runs/pacs_vs_grpo_v4_48")
NAMED = {**CLOSED, "later": LATER}
NAMED_WORK = {**CLOSED_WORK, "later": LATER_WORK}  # the run folders of the named records that kept theirs
# how the record is made: pacs and grpo on every seed, pacs_clip too on seeds 0-9, 24 steps, greedy only (pass@64 only
# on seeds run on a GPU), until PACS − GRPO is within ±5 pp with at least ten pairs, or 40 pairs
RUN = ["paired", "--record", str(RECORD), "--output-dir", str(WORK), "--methods", "pacs,grpo,pacs_clip",
       "--max-steps", "24", "--full-seeds", "10", "--workers", "2", "--threads", "1"]  # fmt: skip


def record_path(name: str) -> Path:
    """A record by its name in NAMED (the closed ones and "later"), or a path."""
    return NAMED.get(name, Path(name))


def read_record(path: Path) -> dict:
    """The record at ``path``; SystemExit naming it when there is none yet."""
    if not path.is_file():
        known = ", ".join(CLOSED)
        raise SystemExit(f"{path}: no such record (the current one is made by `run`; closed ones: {known})")
    return json.loads(path.read_text())


RESULTS = Path("docs/RESULTS.md")
REPLAY = Path("docs/benchmarks/pacs_vs_grpo_replay.json")


def loss_rows(metrics: Path, steps: int | None = None) -> list[dict]:
    """The optimizer steps' rows of a metrics.jsonl (read while a run appends to it: a cut last line is skipped)."""
    from pacs_rl.run_folder import read_jsonl

    return [r for r in read_jsonl(metrics) if "step" in r and "loss" in r][:steps]


def replay_runs(record: dict, specs: list[str], work: Path | None = None) -> list[tuple[str, int]]:
    """(method, seed) of each ``method:seed`` in ``specs``; ValueError naming a spec that is not a finished run of
    ``record`` with its run folder in ``work`` (default WORK)."""
    work = WORK if work is None else work
    runs = {(r["method"], r["seed"]) for r in record["runs"]}
    out = []
    for spec in specs:
        method, _, seed = spec.partition(":")
        if not seed.isdigit() or (method, int(seed)) not in runs:
            known = ", ".join(f"{m}:{s}" for m, s in sorted(runs))
            raise ValueError(f"{spec!r} is not a run of the record (method:seed, one of {known})")
        if not (work / records.slug(method) / f"seed{seed}" / "metrics.jsonl").is_file():
            raise ValueError(
                f"{spec!r}: its run folder {work / records.slug(method) / f'seed{seed}'} is not here"
            )
        out.append((method, int(seed)))
    return out


def replay(record: dict, method: str, seed: int, steps: int, work: Path) -> dict:
    """Train ``method`` seed ``seed`` of ``record`` again for ``steps`` steps (a run process of the engine, stopped
    once it logged them) and compare with its recorded run folder under ``work``."""
    from repeatability import first_difference  # benchmarks/ is this script's folder

    recorded = loss_rows(work / records.slug(method) / f"seed{seed}" / "metrics.jsonl", steps)
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / records.slug(method) / f"seed{seed}" / "metrics.jsonl"
        cmd = [sys.executable, "-m", "pacs_rl.compare.job", "job", "--work", tmp, "--threads", "1",
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


# the current record's blocks in docs/RESULTS.md (`<!-- name: ... -->` to `<!-- end name -->`), empty until it has runs
CURRENT_BLOCKS = ("tables", "verdict", "dynamics", "collapses", "critic_current")
# a closed record's blocks: name -> (the record's name in CLOSED, what the block holds)
CLOSED_BLOCKS = {
    "noise_steps": ("noise_steps", "tables"),
    "noise_steps_critic": ("noise_steps", "critic"),
    "noise_steps_collapses": ("noise_steps", "collapses"),
    "restatement_rule": ("restatement_rule", "tables"),
    "leak": ("restatement_leak", "tables"),
}
# the other records' blocks, which the page quotes as it quotes the closed ones': name -> (its name in NAMED, what)
QUOTED_BLOCKS = {**CLOSED_BLOCKS, "later": ("later", "tables"), "later_checkpoints": ("later", "checkpoints")}


def block(record: dict, what: str) -> str:
    """One block of a record as docs/RESULTS.md quotes it."""
    makers = {
        "tables": tables.markdown_tables,
        "verdict": tables.verdict,
        "dynamics": collapses.dynamics_table,
        "collapses": collapses.collapse_table,
        "critic": lambda r: critic_table([r]),
        "checkpoints": collapses.checkpoint_table,
    }
    return makers[what](record)


def current_blocks(record: dict | None) -> dict[str, str]:
    """The current record's blocks: its tables, where its stopping rule stands, what its runs logged and what
    separates its collapses, its critic; all empty while there is no record."""
    what = {"critic_current": "critic"}
    return {name: "" if record is None else block(record, what.get(name, name)) for name in CURRENT_BLOCKS}


def quoted_blocks() -> dict[str, str]:
    """The blocks of the other records the page quotes (QUOTED_BLOCKS), each from its record's file."""
    found = {name: read_record(path) for name, path in NAMED.items()}
    return {name: block(found[record], what) for name, (record, what) in QUOTED_BLOCKS.items()}


def refill_results(record: dict, path: Path = RESULTS) -> Path:
    """Write every block docs/RESULTS.md quotes from a record (current_blocks, quoted_blocks) where it stands."""
    text = path.read_text()
    for name, body in {**current_blocks(record), **quoted_blocks()}.items():
        start = text.index("\n", text.index(f"<!-- {name}:")) + 1
        text = text[:start] + body + "\n" + text[text.index(f"<!-- end {name} -->") :]
    path.write_text(text)
    return path


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    name = f"a record: a file, or a closed record's name ({', '.join(CLOSED)})"
    r = sub.add_parser("run", help="pacs-rl compare paired on the record")
    r.add_argument("--hours", default="8")
    s = sub.add_parser("summary", help="a record's tables and cost per pair")
    s.add_argument("--record", type=record_path, default=RECORD, help=name)
    s.add_argument("--markdown", action="store_true", help="the tables of docs/RESULTS.md")
    s.add_argument(
        "--dynamics", action="store_true", help="what the runs logged, and the collapses against the rest"
    )
    s.add_argument("--write", action="store_true", help="write the record back, summary and cost recomputed")
    f = sub.add_parser("plot", help="figures of a record (and of implicit-critic records)")
    f.add_argument("--record", type=record_path, default=RECORD, help=name)
    f.add_argument(
        "--critic", type=Path, nargs="*", default=[], help="records of PACS variants (frozen π_ref)"
    )
    f.add_argument("--out", type=Path, default=None, help="[default: docs/results/<the record's file name>]")
    sub.add_parser("results", help="rewrite docs/RESULTS.md's blocks of every record from it")
    g = sub.add_parser("regrade", help="score a record's kept samples again with its protocol's grader")
    g.add_argument("--record", type=record_path, default=RECORD, help=name)
    g.add_argument("--work", type=Path, default=WORK, help="the record's run folders")
    rp = sub.add_parser("replay", help="train recorded runs again for a few steps; compare bit for bit")
    rp.add_argument("runs", nargs="+", help="method:seed of the record, e.g. pacs:2 grpo:2")
    rp.add_argument("--steps", type=int, default=6)
    rp.add_argument("--record", default=str(RECORD), help=name)
    rp.add_argument("--work", type=Path, default=None, help="its run folders [default: the record's]")
    sub.add_parser("job", add_help=False)  # one run, as drivers started before the engine moved call it
    return p


def plot(a) -> None:
    found = [read_record(x) for x in [a.record, *a.critic]]
    out = a.out or Path("docs/results") / a.record.stem
    print(plot_comparison(found[0], out / "comparison.png"))
    if "pacs" in found[0]["protocol"]["methods"] and "grpo" in found[0]["protocol"]["methods"]:
        print(plot_pairs(found[0], out / "pairs.png"))
    if a.critic:  # the critic's figure and table pool the record's PACS runs with the frozen-π_ref records
        print(plot_critic(found, out / "critic_auc.png"))
        print(critic_table(found))


def replay_command(p, a) -> None:
    from pacs_rl.sampling.transformers_backend import cpu_capability

    record = read_record(record_path(a.record))
    work = a.work or NAMED_WORK.get(a.record, WORK)
    try:
        runs = replay_runs(record, a.runs, work)
    except ValueError as e:
        p.error(str(e))
    found = []
    for method, seed in runs:
        found.append(replay(record, method, seed, a.steps, work))
        print(json.dumps(found[-1]))
    command = " ".join(["python benchmarks/pacs_vs_grpo.py replay", *a.runs, f"--steps {a.steps}",
                        *([f"--record {a.record}"] if a.record != str(RECORD) else [])])  # fmt: skip
    out = {"what": "recorded runs trained again by this checkout, first steps compared bit for bit",
           "command": command, "date": time.strftime("%Y-%m-%d"), "commit": run_job.commit(),
           "cpu_capability": cpu_capability(), "runs": found}  # fmt: skip
    REPLAY.write_text(json.dumps(out, indent=1) + "\n")
    sys.exit(0 if all(r["identical"] and r["steps"] == a.steps for r in found) else 1)


def summary(a) -> None:
    record = read_record(a.record)  # whatever its protocol
    if a.dynamics:
        print(collapses.dynamics_table(record) + "\n\n" + collapses.collapse_table(record))
        between = collapses.checkpoint_table(record)  # empty for a record evaluated only at its end
        if between:
            print("\n" + between)
    else:
        print(tables.markdown_tables(record) if a.markdown else tables.summary_text(record))
        # a closed record had no cap of 40
        current = record["protocol"].get("version") == records.PROTOCOL["version"]
        print(tables.verdict(record, max_pairs=records.MAX_PAIRS if current else None))
        print(tables.cost_line(record))
    if a.write:
        records.save_record(a.record, record)


def main() -> None:
    p = parser()
    a, rest = p.parse_known_args()
    if a.command == "job":
        run_job.main(["job", *rest])
    elif a.command == "run":
        sys.exit(subprocess.call([sys.executable, "-m", "pacs_rl", "compare", *RUN, "--hours", a.hours]))
    elif a.command == "plot":
        plot(a)
    elif a.command == "results":
        print(refill_results(read_record(RECORD)))
    elif a.command == "replay":
        replay_command(p, a)
    elif a.command == "regrade":
        record = read_record(a.record)
        runs = run_job.regrade(a.work)
        record["regraded"] = {"grader": records.PROTOCOL["grader"], "commit": run_job.commit(), "runs": runs}
        records.save_record(a.record, record)
        print(json.dumps(runs, indent=1))
    else:
        summary(a)


if __name__ == "__main__":
    main()
