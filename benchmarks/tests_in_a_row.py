"""Do the slow multi-process tests pass every time on a busy machine? One pytest selection run N times in a row, each
in a process of its own after the other, optionally with processes of its own spinning on every core meanwhile;
it stops at the first failure, whose log it keeps.

    python benchmarks/tests_in_a_row.py --name ddp --runs 10 -- -m slow tests/test_train_ddp.py
    python benchmarks/tests_in_a_row.py --name zero3 --runs 10 --busy 2 -- -m "slow or not slow" \\
        tests/test_train_deepspeed.py

Prints a line per run (outcome, seconds, pytest's last line, the load average) and writes, after each run, the
selection's entry into --out (default docs/benchmarks/tests_in_a_row.json, under "selections", one entry per --name,
the others kept; the date, commit and CPU level of the last write at the top): the command, runs,
passed, passed in a row from the first, each run's seconds, load averages and pytest's last line, how many spinning
processes it added, the date, the commit and the host's CPU level. ``--busy 0`` adds none: on a machine another job
already keeps busy, the load averages say how busy it was and ``--busy-with`` says what that job was.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

OUT = Path("docs/benchmarks/tests_in_a_row.json")


def _spin() -> None:  # a busy core
    while True:
        pass


def host() -> dict:
    from pacs_rl.sampling.transformers_backend import cpu_capability

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    return {"cpu_capability": cpu_capability(), "date": time.strftime("%Y-%m-%d"), "commit": commit.strip()}


def run(
    name: str, runs: int, busy: int, pytest_args: list[str], logs: Path, out: Path, busy_with: str = ""
) -> dict:
    """The selection ``runs`` times in a row (stopping at a failure), its entry written into ``out`` after each run
    (an interrupted series keeps what it ran)."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(busy)]
    for p in spinners:
        p.start()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]
    entry = {"command": shlex.join(["python", "-m", "pytest", *pytest_args]), "busy_processes": busy, "runs": 0,
             "passed": 0, "in_a_row": 0, "seconds": [], "load_average": [], "last_line": [], **host()}  # fmt: skip
    if busy_with:
        entry["busy_with"] = busy_with
    # the file: the host's CPU level and the date of its last write at the top, one entry per selection
    logs.mkdir(parents=True, exist_ok=True)
    try:
        for i in range(1, runs + 1):
            started = time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            seconds = round(time.time() - started)
            log = logs / f"{name}-{i}.log"
            log.write_text(proc.stdout + proc.stderr)
            lines = [x for x in proc.stdout.splitlines() if x.strip()]
            load = [round(x, 2) for x in os.getloadavg()]
            entry["runs"] += 1
            entry["passed"] += proc.returncode == 0
            entry["seconds"].append(seconds)
            entry["load_average"].append(load)
            entry["last_line"].append(lines[-1] if lines else "")
            entry["in_a_row"] = entry["passed"]  # the series stops at the first failure
            record = json.loads(out.read_text()) if out.is_file() else {}
            selections = {**record.get("selections", {}), name: entry}
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({**host(), "selections": selections}, indent=1) + "\n")
            print(f"{name} run {i}: exit {proc.returncode}, {seconds} s, load {load}: {entry['last_line'][-1]}",
                  flush=True)  # fmt: skip
            if proc.returncode != 0:
                print(f"failed: its log is {log}", flush=True)
                break
    finally:
        for p in spinners:
            p.terminate()
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--name", required=True, help="the selection's name in the record")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--busy", type=int, default=0, help="spinning processes to add (0: none)")
    parser.add_argument(
        "--busy-with", default="", help="what else kept the machine busy meanwhile (recorded as busy_with)"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--logs", type=Path, default=Path("runs/tests_in_a_row"), help="each run's pytest output"
    )
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: pytest's arguments")
    args = parser.parse_args()
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    if args.runs < 1 or args.busy < 0 or not pytest_args:
        parser.error("give --runs >= 1, --busy >= 0 and pytest's arguments after --")
    entry = run(args.name, args.runs, args.busy, pytest_args, args.logs, args.out, args.busy_with)
    print(
        f"{args.name}: {entry['passed']} of {entry['runs']} passed, {entry['in_a_row']} in a row; {args.out}"
    )


if __name__ == "__main__":
    main()
