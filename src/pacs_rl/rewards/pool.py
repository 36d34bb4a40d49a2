"""Time-bounded verification: single checks, batches, and a reusable worker-process pool.

A pathological answer (``\\boxed{9^{9^{9^{9}}}}``) can hold sympy for minutes. Every check here is bounded
by ``timeout`` seconds, in two layers:

- soft: an interval timer raises inside the check. Signals only reach a process's main thread, so this
  is used in the caller's main thread and inside worker processes. It counts the process's CPU time
  (SIGPROF) whenever the process runs a single OS thread (workers always do): a machine crowded by other
  jobs slows a check down but does not turn a legitimate check into a timeout, so rewards do not depend
  on the load. In a multi-threaded caller (torch starts threads) it counts wall-clock time (SIGALRM);
- hard: a worker still busy ``timeout + kill_grace`` seconds after starting a task is killed and
  replaced if it also used that much CPU (a C-level loop that never returns to the interpreter), or in
  any case after ``wall_cap_factor`` times that wall time. Its task scores 0 with reason "timeout".

A check requested from a non-main thread in "in-process" mode runs in a one-worker guard pool instead,
so the bound holds in every thread.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from pacs_rl.progress import started_bar
from pacs_rl.rewards.cutoff import CUT_OFF_REASON, refuses_cut_off
from pacs_rl.rewards.graders import DEFAULT_GRADER, parse_grader
from pacs_rl.rewards.math_verifier import Verdict, check

DEFAULT_TIMEOUT = 3.0  # seconds per (completion, answer) pair; legitimate checks take milliseconds


class _CheckTimeout(BaseException):
    """Raised by the interval timer. A BaseException so math-verify's ``except Exception`` cannot eat it."""


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _check_with_alarm(
    completion, answer, grader: str, prompt, timeout: float | None, cpu_clock: bool = False
) -> Verdict:
    """``check`` bounded by an interval timer. Call only from a main thread.

    ``cpu_clock=False`` bounds wall-clock time (SIGALRM); ``cpu_clock=True`` bounds the CPU time of the
    whole process (SIGPROF), which a busy machine cannot exhaust: use it only in a single-threaded worker.
    """
    if not timeout or timeout <= 0:
        return check(completion, answer, grader=grader, prompt=prompt)
    which, signum = (
        (signal.ITIMER_PROF, signal.SIGPROF) if cpu_clock else (signal.ITIMER_REAL, signal.SIGALRM)
    )

    def _on_alarm(signum, frame):
        raise _CheckTimeout

    old_handler = signal.signal(signum, _on_alarm)
    old_delay, _ = signal.setitimer(which, timeout)
    started = time.monotonic()
    try:
        return check(completion, answer, grader=grader, prompt=prompt)
    except _CheckTimeout:
        return Verdict(0.0, None, "timeout")
    finally:
        signal.setitimer(which, 0)
        signal.signal(signum, old_handler)
        if old_delay > 0:  # someone else's timer was running: re-arm what is left of it
            signal.setitimer(which, max(old_delay - (time.monotonic() - started), 1e-3))


def _only_thread_of_process() -> bool:
    """True when this process runs one OS thread (then its CPU clock measures this check alone)."""
    try:
        with open("/proc/self/status") as f:
            return any(line.split() == ["Threads:", "1"] for line in f)
    except OSError:
        return False


def _process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (Linux /proc); None where unavailable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


# --------------------------------------------------------------------------------------------- workers


def _worker_main(conn, soft_timeout: bool) -> None:
    """Worker loop: receive ``(task_id, completion, answer, grader, prompt, timeout)``, send back
    ``(task_id, verdict, cpu_seconds_so_far)``; ``None`` or a closed pipe stops it.

    The worker's own limit counts its CPU time, so a machine crowded by other jobs does not turn slow
    but legitimate checks into timeouts (rewards stay reproducible under load)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn.send(("ready", time.process_time()))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        task_id, completion, answer, grader, prompt, timeout = task
        if soft_timeout:
            verdict = _check_with_alarm(completion, answer, grader, prompt, timeout, cpu_clock=True)
        else:
            verdict = check(completion, answer, grader=grader, prompt=prompt)
        conn.send((task_id, verdict, time.process_time()))


@dataclass
class _Worker:
    process: mp.process.BaseProcess
    conn: object
    ready: bool = False
    inflight: collections.deque = field(default_factory=collections.deque)  # task ids, oldest first
    head_started: float = 0.0  # wall clock (monotonic) when the oldest in-flight task began
    head_cpu: float = 0.0  # the worker's CPU seconds when that task began (reported by the worker)
    next_check: float = float("inf")  # when to look at the oldest task's deadline again


@dataclass
class BatchResult:
    """Scores of a batch in input order, with their verdicts, reason counts and throughput."""

    scores: list[float]
    verdicts: list[Verdict]
    reasons: collections.Counter
    seconds: float
    pairs_per_second: float
    num_workers: int

    def summary(self) -> str:
        n = len(self.scores)
        counts = ", ".join(f"{k}={v}" for k, v in self.reasons.most_common())
        return (
            f"{n} pairs, mean reward {sum(self.scores) / max(n, 1):.4f}, {counts}; "
            f"{self.pairs_per_second:.1f} pairs/s on {self.num_workers} worker(s)"
        )


def _default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _check_lengths(
    completions: Sequence, answers: Sequence, prompts: Sequence | None, truncated: Sequence | None = None
) -> None:
    if len(completions) != len(answers):
        raise ValueError(
            f"verify_batch got {len(completions)} completions but {len(answers)} answers; pass one gold "
            "answer per completion (repeat each answer G times for G samples per prompt)."
        )
    if prompts is not None and len(prompts) != len(completions):
        raise ValueError(
            f"verify_batch got {len(prompts)} prompts for {len(completions)} completions; pass one prompt "
            "per completion or prompts=None."
        )
    if truncated is not None and len(truncated) != len(completions):
        raise ValueError(
            f"verify_batch got {len(truncated)} cut-off flags for {len(completions)} completions; pass one per "
            "completion (pacs_rl.rewards.cutoff.is_cut_off) or truncated=None."
        )


# A completion cut at the token limit, under a grader that refuses those: 0, unread (what it says is unfinished).
CUT_OFF_VERDICT = Verdict(0.0, None, CUT_OFF_REASON, CUT_OFF_REASON)


def _with_cut_offs(n: int, truncated: Sequence | None, grader: str, check_some) -> list[Verdict]:
    """Every pair's verdict, in order: a cut-off completion (``truncated[i]``) refused unread as
    :data:`CUT_OFF_VERDICT` where ``grader`` refuses those, the others from ``check_some(indices)``."""
    refused = set()
    if truncated is not None and refuses_cut_off(grader):
        refused = {i for i in range(n) if truncated[i]}
    checked = iter(check_some([i for i in range(n) if i not in refused]))
    return [CUT_OFF_VERDICT if i in refused else next(checked) for i in range(n)]


class RewardPool:
    """A reusable pool of verifier processes with a per-task deadline.

    Start it once and call :meth:`verify_batch` every training step (start-up, where each worker imports
    sympy, is paid once). Order is preserved. Each task gets ``timeout`` CPU seconds in
    its worker; a worker stuck past ``timeout + kill_grace`` (see the module docstring) is killed and
    replaced, and its task scores 0 ("timeout"). Thread-safe (one batch at a time) and usable from any
    thread. Use as a context manager, or call :meth:`close`. Workers are spawned: a script that creates
    a pool needs an ``if __name__ == "__main__":`` guard.

    Example::

        with RewardPool(num_workers=2) as pool:
            result = pool.verify_batch(completions, answers)
            rewards = result.scores
    """

    def __init__(
        self,
        num_workers: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        kill_grace: float = 1.0,
        prefetch: int = 4,
        wall_cap_factor: float = 10.0,
        start_method: str = "spawn",
        start_timeout: float = 120.0,
        _soft_timeout: bool = True,
    ):
        """
        Args:
            num_workers: worker processes; ``None`` = the CPUs this process may use.
            timeout: default per-pair time limit in seconds (a call may override it).
            kill_grace: extra seconds before a worker that ignores its own timer is killed.
            prefetch: tasks queued per worker, so a worker never waits for the parent to be scheduled.
            wall_cap_factor: a task is killed after ``wall_cap_factor * (timeout + kill_grace)`` wall
                seconds even if it used little CPU (a worker blocked on something other than CPU).
            start_method: multiprocessing start method; "spawn" is safe with threads and torch.
            start_timeout: seconds a new worker may take to import its libraries before the pool gives up.
        """
        if num_workers is not None and num_workers < 1:
            raise ValueError(
                f"RewardPool needs num_workers >= 1, got {num_workers}; use verify_batch(num_workers=0) for in-process checks."
            )
        if timeout is None or timeout <= 0:
            raise ValueError(f"RewardPool needs a positive timeout in seconds, got {timeout!r}.")
        self.num_workers = num_workers or _default_workers()
        self.timeout = float(timeout)
        self.kill_grace = float(kill_grace)
        self.prefetch = max(1, int(prefetch))
        self.wall_cap_factor = float(wall_cap_factor)
        self.start_timeout = float(start_timeout)
        self.restarts = 0  # workers killed (timeouts) or found dead (crashes) and replaced
        self._soft_timeout = _soft_timeout
        self._ctx = mp.get_context(start_method)
        self._lock = threading.Lock()
        self._closed = False
        self._workers: list[_Worker] = [self._spawn() for _ in range(self.num_workers)]
        _LIVE_POOLS.add(self)

    # ------------------------------------------------------------------ lifecycle
    def _spawn(self) -> _Worker:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(
            target=_worker_main, args=(child_conn, self._soft_timeout), daemon=True, name="pacs-rl-verifier"
        )
        process.start()
        child_conn.close()
        return _Worker(process=process, conn=parent_conn, head_started=time.monotonic())

    def _kill(self, worker: _Worker) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(timeout=5)
        worker.conn.close()

    def worker_cpu_seconds(self) -> float | None:
        """CPU seconds used so far by the current workers (Linux /proc; None elsewhere)."""
        values = [_process_cpu_seconds(w.process.pid) for w in self._workers]
        return None if any(v is None for v in values) else sum(values)

    def wait_ready(self) -> RewardPool:
        """Block until every worker has imported its libraries (optional; batches wait anyway)."""
        with self._lock:
            self._run([], [], DEFAULT_GRADER, None, self.timeout, None)
        return self

    def close(self) -> None:
        """Stop the workers (politely, then by force). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for worker in self._workers:
            with contextlib.suppress(OSError, BrokenPipeError):
                worker.conn.send(None)
        for worker in self._workers:
            worker.process.join(timeout=2)
            self._kill(worker)
        self._workers = []
        _LIVE_POOLS.discard(self)

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()

    # ------------------------------------------------------------------ work
    def verify_batch(
        self,
        completions: Sequence,
        answers: Sequence,
        grader: str = DEFAULT_GRADER,
        timeout: float | None = None,
        progress: bool = False,
        prompts: Sequence | None = None,
        truncated: Sequence[bool] | None = None,
    ) -> BatchResult:
        """Grade ``completions[i]`` against ``answers[i]`` for every i; see :func:`verify_batch`."""
        if self._closed:
            raise RuntimeError("this RewardPool is closed; create a new one (or use it inside `with`).")
        _check_lengths(completions, answers, prompts, truncated)
        grader = parse_grader(grader).name  # an unknown grader fails here, not in every worker
        timeout = self.timeout if timeout is None else float(timeout)
        started = time.perf_counter()

        def check_some(indices: list[int]) -> list[Verdict]:
            pick = [completions[i] for i in indices], [answers[i] for i in indices]
            asked = None if prompts is None else [prompts[i] for i in indices]
            return self._run(*pick, grader, asked, timeout, progress)

        with self._lock:
            verdicts = _with_cut_offs(len(completions), truncated, grader, check_some)
        return _result(verdicts, time.perf_counter() - started, self.num_workers)

    def _run(self, completions, answers, grader, prompts, timeout, progress) -> list[Verdict]:
        """Grade every task on the workers, in task order: each round feeds the ready workers, collects their
        answers until the next deadline, then kills overrunning workers; until every task is done and every
        worker is ready (so an empty batch waits for start-up)."""
        n = len(completions)
        results: list[Verdict | None] = [None] * n
        pending = collections.deque(range(n))
        tasks = (completions, answers, grader, prompts, timeout)
        done = 0
        bar = started_bar("verifying", n, enabled=bool(progress) and n > 0)
        hard_limit = timeout + self.kill_grace
        try:
            while done < n or not all(w.ready for w in self._workers):
                now = time.monotonic()
                done += self._feed(tasks, results, pending, now, hard_limit)
                deadlines = [w.next_check for w in self._workers if w.ready and w.inflight]
                wait_for = max(0.0, min(deadlines) - now) if deadlines else 1.0
                done += self._collect(results, pending, wait_for, hard_limit, bar)
                done += self._enforce_deadlines(results, pending, hard_limit)
        except BaseException:
            # Interrupted (Ctrl-C, start-up failure): tasks still in flight would answer into the next
            # batch, so their workers are replaced.
            for worker in list(self._workers):
                if worker.inflight:
                    worker.inflight.clear()
                    self._replace(worker, results, pending, "worker_crash")
            raise
        finally:
            if bar is not None:
                bar.stop()
        return results  # type: ignore[return-value]

    def _feed(self, tasks, results, pending, now: float, hard_limit: float) -> int:
        """Send pending tasks to every ready worker, up to ``prefetch`` in flight each; a worker found dead
        is replaced. Returns the tasks finished here (a dead worker's current task fails)."""
        completions, answers, grader, prompts, timeout = tasks
        done = 0
        for worker in self._workers:
            while worker.ready and pending and len(worker.inflight) < self.prefetch:
                task_id = pending.popleft()
                prompt = None if prompts is None else prompts[task_id]
                if not worker.inflight:
                    worker.head_started, worker.next_check = now, now + hard_limit
                try:
                    worker.conn.send(
                        (task_id, completions[task_id], answers[task_id], grader, prompt, timeout)
                    )
                except (OSError, ValueError):  # the worker died: blame its current task, if any
                    pending.appendleft(task_id)
                    done += self._replace(worker, results, pending, "worker_crash")
                    break
                worker.inflight.append(task_id)
        return done

    def _collect(self, results, pending, wait_for: float, hard_limit: float, bar) -> int:
        """Wait up to ``wait_for`` seconds for messages, then take every one that came: a worker's start-up
        ("ready") or a verdict (its next task's clock starts). A worker that died is replaced, failing its
        current task; one that died while starting raises. Returns the tasks finished here."""
        done = 0
        by_conn = {w.conn: w for w in self._workers}
        for conn in wait(list(by_conn), timeout=wait_for):
            worker = by_conn[conn]
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the worker died: its current task is the culprit
                if not worker.ready:  # died while starting: a setup problem, not a bad input
                    worker.process.join(timeout=1)
                    raise RuntimeError(
                        f"a verifier worker exited with code {worker.process.exitcode} before it was "
                        "ready. Worker processes are spawned: the script that starts a RewardPool "
                        "needs an `if __name__ == '__main__':` guard, and `pacs_rl.rewards` must import "
                        "cleanly in a fresh interpreter."
                    ) from None
                done += self._replace(worker, results, pending, "worker_crash")
                continue
            if message[0] == "ready":
                worker.ready, worker.head_cpu = True, message[1]
                continue
            task_id, verdict, worker.head_cpu = message
            worker.inflight.popleft()
            worker.head_started = time.monotonic()
            worker.next_check = worker.head_started + hard_limit
            results[task_id] = verdict
            done += 1
            if bar is not None:
                bar.advance(0)
        return done

    def _enforce_deadlines(self, results, pending, hard_limit: float) -> int:
        """Replace each worker whose current task overran (see :meth:`_overran`), failing it as "timeout";
        raise when a worker has not started within ``start_timeout``. Returns the tasks failed here."""
        done = 0
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.ready and worker.inflight and now >= worker.next_check:
                if self._overran(worker, now, hard_limit):
                    done += self._replace(worker, results, pending, "timeout")
            elif not worker.ready and now - worker.head_started > self.start_timeout:
                raise RuntimeError(
                    f"a verifier worker did not start within {self.start_timeout:.0f} s (is the machine "
                    "overloaded, or does the main script lack an `if __name__ == '__main__':` guard?)"
                )
        return done

    def _overran(self, worker: _Worker, now: float, hard_limit: float) -> bool:
        """Past its wall deadline: kill only if the task also burnt ``hard_limit`` CPU seconds (a stuck
        C-level loop) or has waited ``wall_cap_factor`` times the limit; a starved worker gets more time."""
        wall = now - worker.head_started
        cpu_now = _process_cpu_seconds(worker.process.pid)
        if cpu_now is None or wall >= self.wall_cap_factor * hard_limit:
            return True
        cpu_used = cpu_now - worker.head_cpu
        if cpu_used >= hard_limit:
            return True
        worker.next_check = now + max(0.05, hard_limit - cpu_used)
        return False

    def _replace(self, worker: _Worker, results, pending, reason: str) -> int:
        """Kill ``worker``, fail its current task with ``reason``, requeue its other tasks, start a new one."""
        culprit = worker.inflight.popleft() if worker.inflight else None
        pending.extendleft(reversed(worker.inflight))
        worker.inflight.clear()
        self._kill(worker)
        self._workers[self._workers.index(worker)] = self._spawn()
        self.restarts += 1
        if culprit is None:
            return 0
        results[culprit] = Verdict(0.0, None, reason)
        return 1


_LIVE_POOLS: weakref.WeakSet[RewardPool] = weakref.WeakSet()
_GUARD_POOL: RewardPool | None = None
_GUARD_LOCK = threading.Lock()


@atexit.register
def _close_all_pools() -> None:
    for pool in list(_LIVE_POOLS):
        pool.close()


def _guard_pool() -> RewardPool:
    """One shared worker for bounded checks requested from non-main threads."""
    global _GUARD_POOL
    with _GUARD_LOCK:
        if _GUARD_POOL is None or _GUARD_POOL._closed:
            _GUARD_POOL = RewardPool(num_workers=1)
        return _GUARD_POOL


def _result(verdicts: list[Verdict], seconds: float, num_workers: int) -> BatchResult:
    scores = [v.score for v in verdicts]
    return BatchResult(
        scores=scores,
        verdicts=verdicts,
        reasons=collections.Counter(v.reason for v in verdicts),
        seconds=seconds,
        pairs_per_second=len(verdicts) / seconds if seconds > 0 else float("inf"),
        num_workers=num_workers,
    )


# ------------------------------------------------------------------------------------------ public API


def verify(
    completion,
    answer,
    grader: str = DEFAULT_GRADER,
    timeout: float = DEFAULT_TIMEOUT,
    prompt: str | None = None,
    truncated: bool = False,
) -> Verdict:
    """Grade one completion against one gold answer, bounded by ``timeout`` seconds; never raises on model
    output (an unknown grader name raises ValueError).

    Args:
        completion: model output (``None`` or non-strings are read as text).
        answer: gold answer as LaTeX or plain text, e.g. ``"025"``, ``"\\frac{3}{4}"``.
        grader: ``paper`` (math-verify as the PACS authors call it), ``strict`` (a ``\\boxed{}`` answer),
            either with ``+rule``s: see ``pacs_rl.rewards.math_verifier``.
        timeout: time limit in seconds; an overrun scores 0 with reason "timeout".
        prompt: the question or prompt text, for the rules ``restatement`` and ``echo``.
        truncated: the completion was cut off at the token limit (``pacs_rl.rewards.cutoff.is_cut_off``): the
            training grader (``sound``) then scores 0 with reason "truncated", unread; the others grade it.
    """
    grader = parse_grader(grader).name
    if truncated and refuses_cut_off(grader):
        return CUT_OFF_VERDICT
    if _in_main_thread():
        return _check_with_alarm(completion, answer, grader, prompt, timeout, _only_thread_of_process())
    return (
        _guard_pool()
        .verify_batch([completion], [answer], grader=grader, timeout=timeout, prompts=[prompt])
        .verdicts[0]
    )


def math_reward(
    completion,
    answer,
    grader: str = DEFAULT_GRADER,
    timeout: float = DEFAULT_TIMEOUT,
    prompt: str | None = None,
    truncated: bool = False,
) -> float:
    """1.0 when the completion's final answer equals the gold answer, else 0.0 (``verify(...).score``)."""
    return verify(
        completion, answer, grader=grader, timeout=timeout, prompt=prompt, truncated=truncated
    ).score


def verify_batch(
    completions: Sequence,
    answers: Sequence,
    grader: str = DEFAULT_GRADER,
    num_workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    progress: bool = False,
    prompts: Sequence | None = None,
    truncated: Sequence[bool] | None = None,
) -> BatchResult:
    """Grade ``completions[i]`` against ``answers[i]`` (with ``prompts[i]``, if given) for every i, in order.

    ``num_workers`` = 0 or 1 checks in this process (bounded by a signal timer in the main thread, by a
    one-worker guard pool in other threads); more starts a temporary :class:`RewardPool` (each of its
    workers imports sympy first; keep a ``RewardPool`` open instead when calling this every step);
    ``None`` = one worker per available CPU. ``truncated[i]``: completion i was cut off at the token limit
    (see :func:`verify`).
    """
    _check_lengths(completions, answers, prompts, truncated)
    grader = parse_grader(grader).name
    workers = _default_workers() if num_workers is None else int(num_workers)
    if workers > 1:
        with RewardPool(num_workers=workers, timeout=timeout) as pool:
            return pool.verify_batch(
                completions, answers, grader=grader, progress=progress, prompts=prompts, truncated=truncated
            )
    if not _in_main_thread():
        return _guard_pool().verify_batch(completions, answers, grader, timeout, progress, prompts, truncated)
    started = time.perf_counter()
    cpu_clock = _only_thread_of_process()  # no other thread can eat this process's CPU budget

    def check_some(indices: list[int]) -> list[Verdict]:
        bar = started_bar("verifying", len(indices), enabled=bool(progress) and len(indices) > 0)
        verdicts = []
        try:
            for i in indices:
                prompt = None if prompts is None else prompts[i]
                verdicts.append(
                    _check_with_alarm(completions[i], answers[i], grader, prompt, timeout, cpu_clock)
                )
                if bar is not None:
                    bar.advance(0)
        finally:
            if bar is not None:
                bar.stop()
        return verdicts

    verdicts = _with_cut_offs(len(completions), truncated, grader, check_some)
    return _result(verdicts, time.perf_counter() - started, 1)
