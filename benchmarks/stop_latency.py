"""How long does a signal take to stop `pacs-rl train`, and how often does its log file speak? The bundled model at the
CPU default, output to a file: a SIGTERM (or Ctrl-C) sent at chosen moments, each in a run of its own, found by the
run's own log lines:

- ``evaluation``: 5 s after the held-out evaluation before training starts (--eval-size problems);
- ``sampling``: 5 s after step 1's sampling starts;
- ``update``: 5 s after step 1's update starts (its rollout sampled).

The runs of the last two evaluate nothing before training (--eval-size 0), which on a loaded machine takes minutes,
and the update's samples one round (dynamic_sampling_max_rounds=1) to reach its update sooner.

    python benchmarks/stop_latency.py                          # the three moments, SIGTERM
    python benchmarks/stop_latency.py --moments sampling --signal INT

Prints, per moment, the seconds from the signal to the process's end, its exit status and its last line (what it
kept, the command that goes on), and the longest silence of its log (seconds between two lines after the first
phase line); writes --out (default docs/benchmarks/stop_latency.json) with the date and the host's CPU level.
Each run writes into a folder of its own under --work, removed afterwards.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

OUT = Path("docs/benchmarks/stop_latency.json")
# the moment: the log line that starts it, then the seconds to wait before the signal
MOMENTS = {
    "evaluation": ("held-out evaluation before training:", 5.0),
    "sampling": ("step 1/{steps}: sampling", 5.0),
    "update": ("step 1/{steps}: update", 5.0),
}
STAMP = re.compile(r"^(\d\d):(\d\d):(\d\d)  ")


def longest_silence(lines: list[str]) -> float:
    """The most seconds between two time-stamped lines of a run's log (0 with fewer than two)."""
    times = [int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3]) for m in map(STAMP.match, lines) if m]
    gaps = [(b - a) % 86400 for a, b in itertools.pairwise(times)]
    return float(max(gaps, default=0))


def stop_once(moment: str, signum: int, work: Path, eval_size: int, steps: int) -> dict:
    """One run of `pacs-rl train`, signalled at ``moment``: the seconds from the signal to its end, and more."""
    out = work / f"run-{moment}"
    shutil.rmtree(out, ignore_errors=True)
    log = work / f"{moment}.log"
    cmd = [sys.executable, "-m", "pacs_rl.cli", "train", "--output-dir", str(out), "--max-steps", str(steps),
           "--eval-size", str(eval_size if moment == "evaluation" else 0)]  # fmt: skip
    if moment == "update":
        cmd += ["--set", "dynamic_sampling_max_rounds=1"]
    wanted, wait = MOMENTS[moment]
    wanted = wanted.format(steps=steps)
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=os.environ)
        try:
            seen = None
            while proc.poll() is None:
                text = log.read_text()
                if seen is None and any(wanted in x for x in text.splitlines()):
                    seen = time.time()
                if seen is not None and time.time() - seen >= wait:
                    break
                time.sleep(0.1)
            if proc.poll() is not None:
                raise RuntimeError(f"the run ended before {moment}: {log.read_text()[-2000:]}")
            sent = time.time()
            proc.send_signal(signum)
            proc.wait()
            seconds = time.time() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    lines = log.read_text().splitlines()
    last = next((x for x in reversed(lines) if x.startswith("interrupted")), lines[-1] if lines else "")
    shutil.rmtree(out, ignore_errors=True)
    return {
        "moment": moment,
        "signal": signal.Signals(signum).name,
        "seconds_to_exit": round(seconds, 2),
        "exit_status": proc.returncode,
        "said": last,
        "longest_log_silence_s": longest_silence(lines),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--moments", default=",".join(MOMENTS), help=f"of {', '.join(MOMENTS)}")
    parser.add_argument("--signal", default="TERM", choices=["TERM", "INT"])
    parser.add_argument(
        "--eval-size", type=int, default=50, help="held-out problems of the evaluation moment"
    )
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--work", type=Path, default=Path("runs/stop_latency"))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    moments = [m for m in args.moments.split(",") if m]
    unknown = [m for m in moments if m not in MOMENTS]
    if unknown:
        parser.error(f"--moments {','.join(unknown)}: choose from {', '.join(MOMENTS)}")
    args.work.mkdir(parents=True, exist_ok=True)
    signum = signal.SIGTERM if args.signal == "TERM" else signal.SIGINT
    from pacs_rl.sampling.transformers_backend import cpu_capability

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    record = {"command": " ".join(["python", "benchmarks/stop_latency.py", *sys.argv[1:]]), "runs": [],
              "date": time.strftime("%Y-%m-%d"), "commit": commit.strip(), "cpu_capability": cpu_capability()}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for moment in moments:
        row = stop_once(moment, signum, args.work, args.eval_size, args.steps)
        print(f"{moment}: {row['signal']} -> exit {row['exit_status']} in {row['seconds_to_exit']:.1f} s "
              f"(longest log silence {row['longest_log_silence_s']:.0f} s): {row['said']}", flush=True)  # fmt: skip
        record["runs"].append(row)
        args.out.write_text(json.dumps(record, indent=1) + "\n")  # after each run: what ran is kept
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
