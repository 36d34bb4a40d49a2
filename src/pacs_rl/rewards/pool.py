"""Time-bounded verification: single checks, batches, and a reusable worker-process pool.

A pathological answer (``\\boxed{9^{9^{9^{9}}}}``) can hold sympy for minutes. Every check here is bounded
by ``timeout`` seconds of wall-clock time, in two layers:

- soft: a ``SIGALRM`` interval timer raises inside the check. It only works in a process's main thread,
  so it is used in the caller's main thread and inside worker processes (whose checks run in their main
  thread);
- hard: a worker that has not answered ``timeout + kill_grace`` seconds after starting a task (a C-level
  loop that ignores signals) is killed and replaced; its task scores 0 with reason "timeout".

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

from pacs_rl.rewards.math_verifier import Verdict, check

DEFAULT_TIMEOUT = 3.0  # seconds per (completion, answer) pair; legitimate checks take milliseconds


class _CheckTimeout(BaseException):
    """Raised by the interval timer. A BaseException so math-verify's ``except Exception`` cannot eat it."""


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _check_with_alarm(completion, answer, strict: bool, prompt, timeout: float | None) -> Verdict:
    """``check`` bounded by a SIGALRM interval timer. Call only from a main thread."""
    if not timeout or timeout <= 0:
        return check(completion, answer, strict=strict, prompt=prompt)

    def _on_alarm(signum, frame):
        raise _CheckTimeout

    old_handler = signal.signal(signal.SIGALRM, _on_alarm)
    old_delay, _ = signal.setitimer(signal.ITIMER_REAL, timeout)
    started = time.monotonic()
    try:
        return check(completion, answer, strict=strict, prompt=prompt)
    except _CheckTimeout:
        return Verdict(0.0, None, "timeout")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:  # someone else's timer was running: re-arm what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (time.monotonic() - started), 1e-3))


# --------------------------------------------------------------------------------------------- workers


def _worker_main(conn, soft_timeout: bool) -> None:
    """Worker loop: receive ``(task_id, completion, answer, strict, prompt, timeout)``, send back
    ``(task_id, score, extracted, reason)``; ``None`` or a closed pipe stops it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    conn.send(("ready", os.getpid()))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        task_id, completion, answer, strict, prompt, timeout = task
        if soft_timeout:
            verdict = _check_with_alarm(completion, answer, strict, prompt, timeout)
        else:
            verdict = check(completion, answer, strict=strict, prompt=prompt)
        conn.send((task_id, verdict.score, verdict.extracted, verdict.reason))


@dataclass
class _Worker:
    process: mp.process.BaseProcess
    conn: object
    ready: bool = False
    inflight: collections.deque = field(default_factory=collections.deque)  # task ids, oldest first
    head_started: float = 0.0  # when the oldest in-flight task began


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


def _check_lengths(completions: Sequence, answers: Sequence, prompts: Sequence | None) -> None:
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


def _progress_bar(total: int, enabled: bool, description: str):
    if not enabled:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    bar = Progress(
        "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()
    )
    bar.start()
    bar.add_task(description, total=total)
    return bar


class RewardPool:
    """A reusable pool of verifier processes with a per-task deadline.

    Start it once and call :meth:`verify_batch` every training step (start-up, about a second per worker
    to import sympy, is paid once). Order is preserved; a worker stuck past ``timeout + kill_grace`` is
    killed and replaced, and its task scores 0 ("timeout"). Thread-safe (one batch at a time) and usable
    from any thread. Use as a context manager, or call :meth:`close`.

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
        prefetch: int = 2,
        start_method: str = "spawn",
        start_timeout: float = 120.0,
        _soft_timeout: bool = True,
    ):
        """
        Args:
            num_workers: worker processes; ``None`` = the CPUs this process may use.
            timeout: default per-pair time limit in seconds (a call may override it).
            kill_grace: extra seconds before a worker that ignores its own timer is killed.
            prefetch: tasks queued per worker, so a worker never waits for the next one.
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

    def wait_ready(self) -> RewardPool:
        """Block until every worker has imported its libraries (optional; batches wait anyway)."""
        with self._lock:
            self._run([], [], False, None, self.timeout, None)
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
        strict: bool = False,
        timeout: float | None = None,
        progress: bool = False,
        prompts: Sequence | None = None,
    ) -> BatchResult:
        """Grade ``completions[i]`` against ``answers[i]`` for every i; see :func:`verify_batch`."""
        if self._closed:
            raise RuntimeError("this RewardPool is closed; create a new one (or use it inside `with`).")
        _check_lengths(completions, answers, prompts)
        timeout = self.timeout if timeout is None else float(timeout)
        started = time.perf_counter()
        with self._lock:
            verdicts = self._run(completions, answers, strict, prompts, timeout, progress)
        return _result(verdicts, time.perf_counter() - started, self.num_workers)

    def _run(self, completions, answers, strict, prompts, timeout, progress) -> list[Verdict]:
        n = len(completions)
        results: list[Verdict | None] = [None] * n
        pending = collections.deque(range(n))
        done = 0
        bar = _progress_bar(n, bool(progress) and n > 0, "verifying")
        hard_limit = timeout + self.kill_grace
        try:
            while done < n or not all(w.ready for w in self._workers):
                now = time.monotonic()
                for worker in self._workers:  # keep every ready worker fed
                    while worker.ready and pending and len(worker.inflight) < self.prefetch:
                        task_id = pending.popleft()
                        prompt = None if prompts is None else prompts[task_id]
                        if not worker.inflight:
                            worker.head_started = now
                        worker.conn.send(
                            (task_id, completions[task_id], answers[task_id], strict, prompt, timeout)
                        )
                        worker.inflight.append(task_id)
                deadlines = [w.head_started + hard_limit for w in self._workers if w.ready and w.inflight]
                wait_for = max(0.0, min(deadlines) - now) if deadlines else 1.0
                by_conn = {w.conn: w for w in self._workers}
                for conn in wait(list(by_conn), timeout=wait_for):
                    worker = by_conn[conn]
                    try:
                        message = conn.recv()
                    except (EOFError, OSError):  # the worker died: its current task is the culprit
                        done += self._replace(worker, results, pending, "worker_crash")
                        continue
                    if message[0] == "ready":
                        worker.ready = True
                        continue
                    task_id, score, extracted, reason = message
                    worker.inflight.popleft()
                    worker.head_started = time.monotonic()
                    results[task_id] = Verdict(score, extracted, reason)
                    done += 1
                    if bar is not None:
                        bar.advance(0)
                now = time.monotonic()
                for worker in list(self._workers):
                    if worker.ready and worker.inflight and now - worker.head_started > hard_limit:
                        done += self._replace(worker, results, pending, "timeout")
                    elif not worker.ready and now - worker.head_started > self.start_timeout:
                        raise RuntimeError(
                            f"a verifier worker did not start within {self.start_timeout:.0f} s (is the machine "
                            "overloaded, or does the main script lack an `if __name__ == '__main__':` guard?)"
                        )
        finally:
            if bar is not None:
                bar.stop()
        return results  # type: ignore[return-value]

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
    completion, answer, strict: bool = False, timeout: float = DEFAULT_TIMEOUT, prompt: str | None = None
) -> Verdict:
    """Grade one completion against one gold answer, bounded by ``timeout`` seconds; never raises.

    Args:
        completion: model output (``None`` or non-strings are read as text).
        answer: gold answer as LaTeX or plain text, e.g. ``"025"``, ``"\\frac{3}{4}"``.
        strict: only a non-empty last ``\\boxed{...}`` counts (no plain-text fallback).
        timeout: wall-clock limit in seconds; an overrun scores 0 with reason "timeout".
        prompt: the prompt text, when known: text of the completion repeating it is ignored.
    """
    if _in_main_thread():
        return _check_with_alarm(completion, answer, strict, prompt, timeout)
    return (
        _guard_pool()
        .verify_batch([completion], [answer], strict=strict, timeout=timeout, prompts=[prompt])
        .verdicts[0]
    )


def math_reward(completion, answer, strict: bool = False, timeout: float = DEFAULT_TIMEOUT) -> float:
    """1.0 when the completion's final answer equals the gold answer, else 0.0 (``verify(...).score``)."""
    return verify(completion, answer, strict=strict, timeout=timeout).score


def verify_batch(
    completions: Sequence,
    answers: Sequence,
    strict: bool = False,
    num_workers: int | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    progress: bool = False,
    prompts: Sequence | None = None,
) -> BatchResult:
    """Grade ``completions[i]`` against ``answers[i]`` for every i, in input order.

    ``num_workers`` = 0 or 1 checks in this process (bounded by a signal timer in the main thread, by a
    one-worker guard pool in other threads); more starts a temporary :class:`RewardPool` (start-up cost
    about a second; keep a ``RewardPool`` open instead when calling this every step); ``None`` = one
    worker per available CPU.
    """
    _check_lengths(completions, answers, prompts)
    workers = _default_workers() if num_workers is None else int(num_workers)
    if workers <= 1:
        if not _in_main_thread():
            return _guard_pool().verify_batch(completions, answers, strict, timeout, progress, prompts)
        started = time.perf_counter()
        bar = _progress_bar(len(completions), progress and len(completions) > 0, "verifying")
        verdicts = []
        try:
            for i, (completion, answer) in enumerate(zip(completions, answers, strict=True)):
                prompt = None if prompts is None else prompts[i]
                verdicts.append(_check_with_alarm(completion, answer, strict, prompt, timeout))
                if bar is not None:
                    bar.advance(0)
        finally:
            if bar is not None:
                bar.stop()
        return _result(verdicts, time.perf_counter() - started, 1)
    with RewardPool(num_workers=workers, timeout=timeout) as pool:
        return pool.verify_batch(completions, answers, strict=strict, progress=progress, prompts=prompts)
