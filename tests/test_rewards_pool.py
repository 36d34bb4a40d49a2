"""Batched verification: worker pool, order, per-task deadlines, threads."""

from __future__ import annotations

import threading
import time

import pytest

from pacs_rl.rewards import RewardPool, make_math_reward_func, verify, verify_batch

PATHOLOGICAL = r"The answer is \boxed{9^{9^{9^{9}}}}."


@pytest.fixture(scope="module")
def pool():
    with RewardPool(num_workers=2) as p:
        yield p.wait_ready()


def _pairs(n: int):
    # completion i answers i; gold is i for even i and i + 1 for odd i -> expected score 1, 0, 1, 0, ...
    completions = [rf"so the result is \boxed{{{i}}}" for i in range(n)]
    answers = [str(i if i % 2 == 0 else i + 1) for i in range(n)]
    expected = [1.0 if i % 2 == 0 else 0.0 for i in range(n)]
    return completions, answers, expected


def test_pool_preserves_order_and_counts(pool):
    completions, answers, expected = _pairs(40)
    result = pool.verify_batch(completions, answers)
    assert result.scores == expected
    assert result.reasons == {"correct": 20, "wrong": 20}
    assert result.num_workers == 2 and result.pairs_per_second > 0
    assert [v.extracted for v in result.verdicts] == [str(i) for i in range(40)]


def test_pool_matches_in_process(pool, shared_data):
    import json

    rows = [json.loads(line) for line in (shared_data / "minerva_math.jsonl").open()][:12]
    completions = [r["solution"] for r in rows] * 2
    answers = [r["answer"] for r in rows] + [r["answer"] for r in rows[1:] + rows[:1]]
    in_process = verify_batch(completions, answers, num_workers=0, timeout=20)
    pooled = pool.verify_batch(completions, answers, timeout=20)
    assert pooled.verdicts == in_process.verdicts


def test_pathological_answer_times_out_in_pool_without_stalling_the_batch(pool):
    completions, answers, expected = _pairs(10)
    completions[3], answers[3], expected[3] = PATHOLOGICAL, "5", 0.0
    started = time.monotonic()
    result = pool.verify_batch(completions, answers, timeout=0.5)
    # a hang guard, not a speed claim (the machine may be loaded): unbounded, sympy never finishes the power tower
    assert time.monotonic() - started < 60.0
    assert result.scores == expected
    assert result.verdicts[3].reason == "timeout" and result.reasons["timeout"] == 1


def test_stuck_worker_is_killed_and_replaced():
    # The worker's own timer is switched off, so only the parent's hard deadline can stop the task.
    with RewardPool(num_workers=1, timeout=0.3, kill_grace=0.3, _soft_timeout=False) as stuck:
        completions, answers, expected = _pairs(4)
        completions.insert(1, PATHOLOGICAL)
        answers.insert(1, "5")
        expected.insert(1, 0.0)
        result = stuck.verify_batch(completions, answers)
        assert result.scores == expected
        assert result.verdicts[1].reason == "timeout"
        assert stuck.restarts == 1
        assert stuck.verify_batch([r"\boxed{2}"], ["2"]).scores == [1.0]  # the replacement works


def test_calls_from_a_non_main_thread(pool):
    completions, answers, expected = _pairs(6)
    out = {}

    def work():
        out["single"] = verify(PATHOLOGICAL, "5", timeout=0.5)
        out["in_process"] = verify_batch(completions, answers, num_workers=0)
        out["pool"] = pool.verify_batch(completions, answers)
        out["trl"] = make_math_reward_func(pool=pool)(completions=completions, answer=answers)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert out["single"].reason == "timeout"
    assert out["in_process"].scores == expected
    assert out["pool"].scores == expected
    assert out["trl"] == expected


def test_bad_arguments_are_explained(pool):
    with pytest.raises(ValueError, match="3 completions but 2 answers"):
        verify_batch(["1", "2", "3"], ["1", "2"], num_workers=0)
    with pytest.raises(ValueError, match="num_workers >= 1"):
        RewardPool(num_workers=0)
    closed = RewardPool(num_workers=1)
    closed.close()
    with pytest.raises(RuntimeError, match="closed"):
        closed.verify_batch(["1"], ["1"])
    with pytest.raises(ValueError, match="unknown base grader 'lenient'"):
        pool.verify_batch(["1"], ["1"], grader="lenient")


def test_graders_and_questions_reach_the_workers(pool):
    completions = [r"\boxed{33 - 51}", r"\boxed{-18}", "so it is 42", r"\boxed{3} or \boxed{5}"]
    answers, questions = ["-18", "-18", "42", "5"], ["What is 33 - 51?"] * 2 + ["q", "q"]
    for grader in ("paper", "paper+restatement", "strict+multiple_boxed"):
        in_process = verify_batch(completions, answers, grader, num_workers=0, prompts=questions)
        pooled = pool.verify_batch(completions, answers, grader, prompts=questions)
        assert pooled.verdicts == in_process.verdicts, grader
    reasons = pool.verify_batch(completions, answers, "strict+restatement", prompts=questions).reasons
    assert reasons == {"restatement": 1, "correct": 2, "no_answer": 1}  # strict reads the last box, 5


def test_hard_deadline_spares_a_starved_worker_but_not_forever():
    """Past its wall deadline, a worker that used little CPU (crowded machine) gets more time; past the
    wall cap it is killed anyway. A real idle process stands in for the starved worker."""
    import subprocess

    from pacs_rl.rewards.pool import _process_cpu_seconds, _Worker

    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        pool = RewardPool.__new__(RewardPool)  # only the decision logic, no workers
        pool.wall_cap_factor = 10.0
        worker = _Worker(process=sleeper, conn=None, ready=True)
        worker.head_cpu = _process_cpu_seconds(sleeper.pid)
        now = time.monotonic()
        worker.head_started = now - 2.0  # 2 s of wall time against a 1 s limit, ~0 s of CPU
        assert pool._overran(worker, now, hard_limit=1.0) is False
        assert worker.next_check > now
        worker.head_started = now - 10.5  # past 10 x the limit: killed whatever its CPU use
        assert pool._overran(worker, now, hard_limit=1.0) is True
        worker.head_cpu -= 5.0  # as if it had burnt 5 CPU seconds since the task began
        worker.head_started = now - 2.0
        assert pool._overran(worker, now, hard_limit=1.0) is True
    finally:
        sleeper.kill()
        sleeper.wait()


def test_interrupted_batch_does_not_leak_into_the_next(pool, monkeypatch):
    import pacs_rl.rewards.pool as pool_module

    def interrupt(*args, **kwargs):  # Ctrl-C while the first tasks are in flight
        raise KeyboardInterrupt

    monkeypatch.setattr(pool_module, "wait", interrupt)
    with pytest.raises(KeyboardInterrupt):
        pool.verify_batch([r"\boxed{1}"] * 8, ["2"] * 8)  # would all be "wrong"
    monkeypatch.undo()
    completions, answers, expected = _pairs(8)
    result = pool.verify_batch(completions, answers)
    assert result.scores == expected
    assert [v.extracted for v in result.verdicts] == [str(i) for i in range(8)]
