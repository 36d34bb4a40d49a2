"""How long `pacs-rl` takes to answer a mistake, and how long its dry runs take: each command below runs as a fresh
process, as a user starts it, and its wall time from start to exit is recorded (best, median and worst of --repeat
runs), with its exit status and the error line it printed (a dry run: its last line). Writes
docs/benchmarks/cli_error_latency.json.

    python benchmarks/cli_error_latency.py                  # 5 runs of each command
    python benchmarks/cli_error_latency.py --repeat 1 --out /tmp/x.json
    python benchmarks/cli_error_latency.py --vs-root /tmp/old      # paired against another checkout
    python benchmarks/cli_error_latency.py --only "dry run"        # the commands whose name holds the text

Three kinds of command (``kind`` in the record): a mistake the command answers before torch loads ("error"), a
dry run that refuses such a mistake ("dry run refusal": the checks the run makes before torch, `pacs_rl.preflight`,
made first), and a dry run whose input passes them and prints its plan ("dry run plan": it then loads the trainer's
library to build the config, as the run does).

With --vs-root each command also runs from that checkout (its src/ first on PYTHONPATH), in turn with this
one, and the record keeps the other's message and the median of the paired time ratios (this / that): whether a
change answers the same mistakes with the same words in the same time. --bytecode lets Python cache compiled
modules (as an installed package runs) where the environment says not to (PYTHONDONTWRITEBYTECODE), after one
run of each command has compiled them.

The commands run in a scratch folder holding the files they name (a YAML file with a syntax error, a file where
a folder is expected, a JSONL file with two usable rows), offline (HF_HUB_OFFLINE=1) with empty Hugging Face
caches, so that no figure depends on the network or on what this machine has downloaded. The machine's load
average is recorded beside the figures: on a shared machine it is part of them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (what it shows, the arguments of pacs-rl)
COMMANDS = [
    ("unknown setting", ["train", "--set", "nosuchkey=1"]),
    ("max_steps 0", ["train", "--max-steps", "0"]),
    ("YAML syntax error", ["train", "--config", "syntax.yaml"]),
    ("output folder is a file", ["train", "--output-dir", "a_file.txt"]),
    ("model folder missing", ["train", "--model", "/no/such/model"]),
    ("too few training problems", ["train", "--model", "tiny", "--dataset", "two.jsonl"]),
    ("engine not installed", ["train", "--set", "use_vllm=true"]),
    ("eval: benchmark file missing", ["eval", "--model", "tiny", "-b", "missing.jsonl"]),
    ("compare: unknown method", ["compare", "--methods", "nosuch"]),
    ("train --help", ["train", "--help"]),
    # dry runs that refuse: the run's checks before torch, made first
    ("dry run: training file missing", ["train", "--dataset", "missing.jsonl", "--dry-run"]),
    (
        "dry run: held-out set not in the offline cache",
        ["train", "--set", "eval_dataset=math500", "--dry-run"],
    ),
    (
        "dry run: Hub model not in the offline cache",
        ["train", "--model", "nobody/no-such-model", "--dry-run"],
    ),
    (
        "dry run: reward module that does not import",
        ["train", "--set", "reward_funcs=no_such_module:f", "--dry-run"],
    ),
    (
        "dry run: eval benchmark not in the offline cache",
        ["eval", "--model", "tiny", "-b", "math500", "--dry-run"],
    ),
    (
        "dry run: compare training file missing",
        ["compare", "--preset", "smoke", "-d", "missing.jsonl", "--dry-run"],
    ),
    # every method and variant of a comparison checked as `pacs-rl train` checks it, in the dry run
    (
        "dry run: compare, a sweep value train refuses",
        ["compare", "--preset", "smoke", "--sweep", "pacs_beta=0,1", "--dry-run"],
    ),
    (
        "dry run: compare, a method named twice",
        ["compare", "--preset", "smoke", "--methods", "pacs,grpo,pacs", "--dry-run"],
    ),
    (
        "dry run: compare paired, a variant's value train refuses",
        ["compare", "paired", "--methods", "pacs[pacs_beta=0],grpo", "--dry-run"],
    ),
    (
        "dry run: compare paired, a variant's unknown setting",
        ["compare", "paired", "--methods", "pacs[nosuchkey=1],grpo", "--dry-run"],
    ),
    (
        "dry run: compare paired, a method named twice",
        ["compare", "paired", "--methods", "pacs,grpo,pacs", "--dry-run"],
    ),
    (
        "dry run: compare paired, no GRPO arm",
        ["compare", "paired", "--methods", "pacs,pacs_clip", "--dry-run"],
    ),
    # dry runs that pass and print the plan
    ("dry run plan: train, the tiny model", ["train", "--model", "tiny", "--dry-run"]),
    ("dry run plan: eval", ["eval", "--model", "tiny", "-b", "arithmetic?n=10", "--dry-run"]),
    ("dry run plan: compare", ["compare", "--preset", "smoke", "--dry-run"]),
    ("dry run plan: compare paired", ["compare", "paired", "--dry-run"]),
]


def kind(what: str) -> str:
    """The kind of a command of COMMANDS, by its name."""
    if what.startswith("dry run plan"):
        return "dry run plan"
    return "dry run refusal" if what.startswith("dry run") else "error"


def scratch_files(folder: Path) -> None:
    (folder / "syntax.yaml").write_text("learning_rate: 1e-5\nmax_steps: [3\n")
    (folder / "a_file.txt").write_text("not a folder\n")
    rows = [{"problem": "What is 1+1?", "answer": "2"}, {"problem": "What is 2+2?", "answer": "4"}]
    (folder / "two.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def time_command(args: list[str], folder: Path, env: dict[str, str]) -> tuple[float, int, str, float]:
    """(wall seconds, exit status, what it answered, CPU seconds) of one fresh `python -m pacs_rl ARGS`: what it
    answered is the last line it printed on stderr, or a dry run's first refusal or last line; the CPU seconds
    (user + system) are what the process used, which the machine's load changes less than the wall time."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pacs_rl", *args], cwd=folder, env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - used.ru_utime + after.ru_stime - used.ru_stime
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("note: ")]
    out = [line for line in done.stdout.splitlines() if line.strip()]
    if "--dry-run" in args and done.returncode in (0, 1):
        refused = [line.strip().removeprefix("- ") for line in out if line.startswith("  - ")]
        return seconds, done.returncode, refused[0] if refused else out[-1], cpu
    return seconds, done.returncode, lines[-1] if lines else out[0], cpu


def _commit(root: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="Runs of each command.")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "cli_error_latency.json")
    parser.add_argument("--vs-root", type=Path, help="Another checkout to time against, run for run.")
    parser.add_argument("--bytecode", action="store_true", help="Cache compiled modules, as an install does.")
    parser.add_argument("--only", help="Only the commands whose name holds this text.")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PACS_RL_"))}
    env |= {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    if args.bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    other = None
    if args.vs_root:
        other = {
            **env,
            "PYTHONPATH": os.pathsep.join([str(args.vs_root.resolve() / "src"), env.get("PYTHONPATH", "")]),
        }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        scratch_files(folder)
        env |= {"PACS_RL_CACHE": str(folder / "cache"), "HF_HOME": str(folder / "hf")}  # empty caches
        if other:
            other |= {k: v for k, v in env.items() if k != "PYTHONPATH"}
        load_before = os.getloadavg()
        for what, command in [c for c in COMMANDS if args.only is None or args.only in c[0]]:
            if args.bytecode:  # a first run compiles and caches the modules
                time_command(command, folder, env), other and time_command(command, folder, other)
            runs, theirs = [], []
            for _ in range(args.repeat):
                runs.append(time_command(command, folder, env))
                if other:
                    theirs.append(time_command(command, folder, other))
            seconds = [run[0] for run in runs]
            row = {
                "what": what,
                "kind": kind(what),
                "command": "pacs-rl " + " ".join(command),
                "exit_status": runs[0][1],
                "message": runs[0][2],
                "seconds_best": round(min(seconds), 3),
                "seconds_median": round(statistics.median(seconds), 3),
                "seconds_worst": round(max(seconds), 3),
                "cpu_seconds_median": round(statistics.median(run[3] for run in runs), 3),
            }
            if other:
                row["vs_message"] = theirs[0][2]
                row["vs_same_answer"] = (theirs[0][1], theirs[0][2]) == (runs[0][1], runs[0][2])
                row["vs_exit_status"] = theirs[0][1]
                row["vs_seconds_median"] = round(statistics.median(run[0] for run in theirs), 3)
                row["vs_cpu_seconds_median"] = round(statistics.median(run[3] for run in theirs), 3)
                ratios = [a[0] / b[0] for a, b in zip(runs, theirs, strict=True)]
                row["vs_ratio_median"] = round(statistics.median(ratios), 3)
            rows.append(row)
            vs = (
                f"  {row['vs_ratio_median']:.3f}x the other's, same answer {row['vs_same_answer']}"
                if other
                else ""
            )
            print(
                f"{row['seconds_median']:6.2f} s ({row['cpu_seconds_median']:.2f} CPU s)  exit {row['exit_status']}  "
                f"{row['command']}{vs}",
                flush=True,
            )
        load_after = os.getloadavg()
    import pacs_rl
    from pacs_rl.sampling.transformers_backend import cpu_capability  # torch: after the timed commands

    record = {
        "benchmark": "benchmarks/cli_error_latency.py",
        "date": time.strftime("%Y-%m-%d"),
        "command": f"python benchmarks/cli_error_latency.py --repeat {args.repeat}"
        + (" --bytecode" if args.bytecode else "")
        + (f" --only {args.only!r}" if args.only else "")
        + (" --vs-root <checkout of the other commit>" if other else ""),
        "bytecode_cached": args.bytecode or not os.environ.get("PYTHONDONTWRITEBYTECODE"),
        **({"vs_root_commit": _commit(args.vs_root)} if other else {}),
        "pacs_rl_version": pacs_rl.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu_capability": cpu_capability(),
        "load_average_1min": {"before": round(load_before[0], 2), "after": round(load_after[0], 2)},
        "repeat": args.repeat,
        "commands": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
