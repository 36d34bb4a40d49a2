"""The one executor of a comparison: runs in processes of their own (:mod:`pacs_rl.compare.job`), ``workers`` at a
time, each result into the record as it lands, until the plan is done or the stopping rule holds: the time is up,
the seeds asked for are complete, or (a paired record) PACS − GRPO's interval is within the target and the record's
other methods have run on its seeds.

Stopped (Ctrl-C, end of session, or its own ``stop_after``) and started again, it goes on: a run in the record is
done, a run folder left half-way resumes from its last checkpoint, an evaluation from the samples it has.
``stop_after`` ends it cleanly inside a time limit it cannot outlive (a lent machine's call): the runs still going
are stopped, every finished one is in the record. Each run has ``threads`` torch threads (default 1: two
single-threaded runs use 2 cores better than one two-threaded run, and a run at one thread repeats itself); on a
GPU, as many run at once as its memory holds. A second machine adds to a copy of the record from ``first_seed`` on,
and :func:`pacs_rl.compare.record.merge_records` brings its runs back.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from filelock import Timeout

from pacs_rl.compare.job import JOB_ENV
from pacs_rl.compare.lock import lock_of
from pacs_rl.compare.methods import CompareError
from pacs_rl.compare.plan import next_jobs, other_jobs
from pacs_rl.compare.record import (
    MAX_PAIRS,
    PRIMARY,
    RESULT_FILE,
    TARGET,
    complete_seeds,
    is_comparison,
    load_record,
    open_record,
    passk_due,
    save_record,
    slug,
    target_reached,
)
from pacs_rl.compare.tables import cost_line, run_line, summary_text, verdict
from pacs_rl.device import cuda_info


@dataclasses.dataclass
class Options:
    """How :func:`run` adds to a record: where it and the run folders are, how many runs at once with how many
    threads each, when to stop (hours: no run starts after them; the target half-width of PACS − PRIMARY; a number
    of complete seeds; ``stop_after`` seconds: the driver ends, its running runs stopped; None: no such limit), which
    seeds (``seeds``: these, a planned comparison's; else from ``first_seed`` on, a second machine taking seeds the
    first will not reach), from which seed on only PACS and PRIMARY run (``full_seeds``; None: every method on every
    seed), and the protocol of a new paired record (methods, train overrides, pass@k)."""

    record: Path
    work: Path
    workers: int = 2
    threads: int = 1
    hours: float | None = 8.0
    target: float | None = TARGET
    max_seeds: int | None = MAX_PAIRS
    stop_after: float | None = None
    full_seeds: int | None = None
    first_seed: int = 0
    seeds: list[int] | None = None
    methods: list[str] | None = None
    overrides: dict | None = None
    no_passk: bool = False
    passk_every: int | None = None


def finished_result(folder: Path, proto: dict, seed: int | None) -> dict | None:
    """The result a run folder holds, if it is all ``proto`` asks of that run: one evaluated before the record
    took on pass@k is not, for a seed (or the base model) that pass@k is due on."""
    path = folder / RESULT_FILE
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    return None if passk_due(proto, seed) and not result.get("passk") else result


# a run's two checkpoints (~1.6 GB each for the bundled model's weights and Adam moments) and its evaluations, with
# room to spare: below it no run starts (a full disk once stopped every run on the machine)
MIN_FREE_GIB = 5.0


# GPU memory one run process takes: 4.7-5.2 GiB each was measured (nvidia-smi, the CUDA context included) with 16
# runs of this protocol sharing one H100, where the 16th overflowed its 79 GiB; the rest is room to spare.
GPU_RUN_GIB = 6.0


def disk_free_gib(path: Path) -> float:
    """Free space on the disk that holds ``path`` (or its nearest existing parent), in GiB."""
    path = Path(path).resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free / 1024**3


def gpu_slots(workers: int, cuda) -> tuple[int, str | None]:
    """How many of ``workers`` runs fit at once on the GPU ``cuda`` (a :class:`pacs_rl.device.CudaInfo`), at
    ``GPU_RUN_GIB`` each, and a line saying so where that is fewer; all of them on a CPU."""
    if not cuda.available or not cuda.memory_gib:
        return workers, None
    fit = max(1, int(cuda.memory_gib // GPU_RUN_GIB))
    if workers <= fit:
        return workers, None
    return fit, (
        f"--workers {workers}: {workers} runs at about {GPU_RUN_GIB:g} GiB each need {workers * GPU_RUN_GIB:g} GiB of "
        f"the GPU ({cuda.name or 'device 0'}: {cuda.memory_gib:.1f} GiB), so {fit} run at a time"
    )


WORK_PROTOCOL = "protocol.json"  # in a record's folder of run folders: the protocol they train under
LEGACY_MANIFEST = "manifest.json"  # a comparison folder of the engine before records (its own layout)


def _training(proto: dict) -> dict:
    """A protocol less its pass@k rule (which a record may take on later, its training unchanged)."""
    return {k: v for k, v in proto.items() if k not in ("passk", "ks", "passk_seeds")}


def work_problem(work: Path, proto: dict) -> str | None:
    """Why the run folders under ``work`` cannot serve a record of ``proto``, or None: they were made under another
    protocol (their WORK_PROTOCOL), by an older record that wrote none, or by the comparisons before records (a
    manifest.json). A finished run folder there would be taken as this record's run."""
    marker = work / WORK_PROTOCOL
    if marker.is_file():
        if _training(json.loads(marker.read_text())) == _training(proto):
            return None
        return f"--output-dir {work} holds the runs of another protocol ({marker}): give this record a folder of its own"
    if (work / LEGACY_MANIFEST).is_file():
        return (f"--output-dir {work} holds a comparison made before comparisons kept a record (its "
                f"{LEGACY_MANIFEST}): `pacs-rl compare --report-only -o {work}` reads it; give a new comparison a "
                "folder of its own")  # fmt: skip
    if started_seeds(work) or (work / "base").is_dir():
        return (f"--output-dir {work} holds run folders without a {WORK_PROTOCOL} (an older record's): give this "
                "record a folder of its own")  # fmt: skip
    return None


def started_seeds(work: Path) -> tuple[int, ...]:
    """The seeds with a run folder under ``work`` (finished or not)."""
    return tuple(int(p.name[4:]) for p in work.glob("*/seed*") if p.is_dir() and p.name[4:].isdigit())


def run(args: Options, proto: dict | None = None, what: str = "") -> dict:
    """Add runs to the record ``args.record`` until its plan is done or its stopping rule holds (:class:`Options`),
    ``args.workers`` at a time, each a process of its own; prints a line per finished run, and for a paired record
    its summary at the end. ``proto``: a planned comparison's protocol (its record is ``what``); None: a paired
    record's, from ``args``. Returns the record."""
    started = time.time()  # stop_after counts from here
    lock = lock_of(args.work / args.record.name)  # in the run folders: the record may sit among the docs
    try:
        lock.acquire()
    except Timeout:
        raise CompareError(
            f"{args.record} is being added to by another process (it holds {lock.lock_file}); let it finish or stop it"
        ) from None
    try:
        return _run(args, started, proto, what)
    finally:
        lock.release()


def _run(args: Options, started: float, proto: dict | None, what: str) -> dict:
    if proto is not None:
        record = open_record(args.record, proto, what)
    else:
        record = load_record(args.record, args.overrides, args.methods, not args.no_passk, args.passk_every,
                             started_seeds(args.work))  # fmt: skip
    problem = work_problem(args.work, record["protocol"])
    if problem:
        raise CompareError(problem)
    if args.record.is_file():
        save_record(args.record, record)  # a protocol change (pass@k taken on) holds from now, whatever stops
    args.work.mkdir(parents=True, exist_ok=True)
    (args.work / WORK_PROTOCOL).write_text(json.dumps(record["protocol"], indent=1) + "\n")
    cuda = cuda_info()
    workers, note = gpu_slots(args.workers, cuda)
    if note:
        print(note, flush=True)
        args = dataclasses.replace(args, workers=workers)
    driver = _Driver(args, record, started, cuda.name if cuda.available else "cpu")
    signal.signal(signal.SIGTERM, driver.stop_children)
    try:
        driver.loop()
    except KeyboardInterrupt:
        driver.stop_children()
    if not is_comparison(record["protocol"]):
        print(summary_text(record))
        print(verdict(record, args.target or TARGET, args.max_seeds))
        print(cost_line(record))
    return record


def run_seconds(record: dict, device: str) -> float | None:
    """The median wall time of the record's runs on ``device`` (a run's ``host.device``) that ran in one go: how long
    a run started now will take, roughly; None where none has run there."""
    hosts = [(r.get("host", {}), r["dynamics"].get("train_seconds") or 0) for r in record["runs"]]
    walls = [h["wall_seconds"] for h, train in hosts
             if h.get("device", "cpu") == device and h.get("wall_seconds", 0) >= train > 0]  # fmt: skip
    return statistics.median(walls) if walls else None


class _Driver:
    """The loop of :func:`run`: runs in processes of their own, ``args.workers`` at a time, each result into the
    record as it lands, one retry of a failed run (it resumes from its checkpoint)."""

    def __init__(self, args: Options, record: dict, started: float | None = None, device: str = "cpu"):
        self.args, self.record = args, record
        self.methods = list(record["protocol"]["methods"])
        started = time.time() if started is None else started
        self.deadline = None if args.hours is None else started + args.hours * 3600  # no run starts after it
        self.end = None if args.stop_after is None else started + args.stop_after  # the driver ends here
        self.run_seconds = run_seconds(record, device)  # how long a run takes here, by the record
        self.jobs = next_jobs(record, self.methods, args.full_seeds, args.first_seed, args.seeds)
        self.running: dict[subprocess.Popen, tuple] = {}
        self.failures: dict[tuple, int] = {}
        self.pending: list[tuple] = []
        self.warned = self.warned_time = False  # said once: the disk is short; a run would outlast stop_after
        self.answered = False  # PACS - PRIMARY reached the target: the other methods run

    def folder_of(self, method, seed) -> Path:
        return self.args.work / ("base" if method is None else f"{slug(method)}/seed{seed}")

    def collect(self, method, seed, result) -> None:
        if method is None:
            self.record["base"] = result
        else:
            self.record["runs"].append(result)
        save_record(self.args.record, self.record)
        print(run_line(self.record, method, seed, result), flush=True)

    def stop_children(self, *_) -> None:
        for proc in self.running:
            proc.terminate()
        print(f"stopped: every finished run is in {self.args.record}; the same command goes on from there (a run "
              "from its last checkpoint)", flush=True)  # fmt: skip
        raise SystemExit(130)

    def reap(self) -> None:
        """Record the runs that finished; queue a failed one again, once."""
        for proc in [p for p in self.running if p.poll() is not None]:
            method, seed = self.running.pop(proc)
            folder = self.folder_of(method, seed)
            if proc.returncode == 0 and (folder / RESULT_FILE).is_file():
                self.collect(method, seed, json.loads((folder / RESULT_FILE).read_text()))
                continue
            self.failures[method, seed] = self.failures.get((method, seed), 0) + 1
            print(f"FAILED {method} seed {seed} (exit {proc.returncode}; log {folder}.log)", flush=True)
            if self.failures[method, seed] < 2:
                self.pending.append((method, seed))

    def stopping(self) -> bool:
        """The time is up, or the seeds asked for are complete (with --full-seeds, a seed counts once PACS and
        PRIMARY have it), or the target is reached and the record's other methods have run on the seeds of the
        pairs (from then on the jobs are those: the primary pair first, the other methods once it is answered)."""
        args = self.args
        pair = [m for m in self.methods if m in ("pacs", PRIMARY)]
        counted = pair if args.full_seeds is not None and len(pair) == 2 else self.methods
        done = len(complete_seeds(self.record, counted))
        if (self.deadline is not None and time.time() > self.deadline) or (
            args.max_seeds is not None and done >= args.max_seeds
        ):
            return True
        if args.target is None or not target_reached(self.record, args.target):
            return False
        if not self.answered:
            self.answered = True
            # a run already under way (or queued) is not started twice
            started = {*self.running.values(), *self.pending}
            due = other_jobs(self.record, self.methods, args.full_seeds)
            self.jobs = iter([job for job in due if job not in started])
            print(
                f"PACS - {PRIMARY} is within ±{100 * args.target:g} pp: the other methods on its seeds now",
                flush=True,
            )
        return not other_jobs(self.record, self.methods, args.full_seeds) and not self.pending

    def seeds_full(self, seed: int) -> bool:
        """Whether starting ``seed`` would make more seeds (recorded, running or queued) than --max-pairs."""
        if self.args.max_seeds is None:
            return False
        seeds = {r["seed"] for r in self.record["runs"]} | {
            s for _, s in [*self.running.values(), *self.pending]
        }
        return seed not in seeds and len(seeds - {None}) >= self.args.max_seeds

    def disk_short(self) -> bool:
        free = disk_free_gib(self.args.work)
        if free < MIN_FREE_GIB and not self.warned:
            print(f"no new run: {free:.1f} GiB free under {self.args.work}, a run needs about {MIN_FREE_GIB:g} (its "
                  "two checkpoints, then its evaluations); free space and start again", flush=True)  # fmt: skip
            self.warned = True
        return free < MIN_FREE_GIB

    def start(self, method, seed) -> None:
        args, folder = self.args, self.folder_of(method, seed)
        folder.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pacs_rl.compare.job", "job", "--work", str(args.work),
               "--threads", str(args.threads), "--protocol", json.dumps(self.record["protocol"])]  # fmt: skip
        cmd += [] if method is None else ["--method", method, "--seed", str(seed)]
        env = {
            **JOB_ENV,
            **os.environ,
            "OMP_NUM_THREADS": str(args.threads),
            "MKL_NUM_THREADS": str(args.threads),
        }
        log = open(f"{folder}.log", "a")  # noqa: SIM115 (closed with the process)
        self.running[subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)] = (method, seed)
        print(f"started {'base' if method is None else f'{method} seed {seed}'}", flush=True)

    def may_start(self) -> bool:
        """Whether a run started now would end before stop_after, by how long the record's runs took on this device
        (a run that cannot finish would only slow those that can); without stop_after or a measure, it may."""
        if self.end is None or self.run_seconds is None:
            return True
        left = self.end - time.time()
        if left < self.run_seconds and not self.warned_time:
            print(f"no new run: a run here takes about {self.run_seconds:.0f} s (the record's median on this device), "
                  f"{max(left, 0):.0f} s are left before --stop-after", flush=True)  # fmt: skip
            self.warned_time = True
        return left >= self.run_seconds

    def end_runs(self) -> None:
        """At stop_after: the running runs are stopped (each resumes from its last checkpoint, its evaluation from
        what it has, when the record is continued); a run that finished as it was stopped is recorded."""
        for proc in self.running:
            proc.terminate()
        stopped = []
        for proc, (method, seed) in self.running.items():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            done = finished_result(self.folder_of(method, seed), self.record["protocol"], seed)
            if done is not None:
                self.collect(method, seed, done)
            else:
                stopped.append("base" if method is None else f"{method} seed {seed}")
        self.running.clear()
        print(f"stopped after {self.args.stop_after:g} s (--stop-after): {len(stopped)} runs ended unfinished"
              f"{': ' + ', '.join(stopped) if stopped else ''}; each resumes where it was when this record is "
              "continued here", flush=True)  # fmt: skip

    def loop(self) -> None:
        args = self.args
        while True:
            self.reap()
            if self.end is not None and time.time() >= self.end:
                self.end_runs()
                return
            stop = self.stopping() or self.disk_short() or not self.may_start()
            while not stop and len(self.running) < args.workers:
                method, seed = self.pending.pop(0) if self.pending else next(self.jobs, (False, None))
                if method is False:  # the plan, or the other methods' jobs, are all out
                    break
                if seed is not None and self.seeds_full(seed):
                    break
                done = finished_result(self.folder_of(method, seed), self.record["protocol"], seed)
                if done is not None:  # finished before the driver could record it (a crash)
                    self.collect(method, seed, done)
                    continue
                self.start(method, seed)
            if not self.running:
                return
            time.sleep(5 if self.end is None else max(0.0, min(5.0, self.end - time.time())))
