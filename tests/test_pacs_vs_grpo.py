"""The comparison engine as `pacs-rl compare paired` drives it (pacs_rl.compare: its record, planner, job, driver,
tables, figures and command-line checks): its statistics, its job order, its cost per pair, resuming a record and
refusing to mix protocols. Training itself is covered by the trainer's tests."""

from __future__ import annotations

import itertools
import json
import math
import re
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest
from filelock import FileLock
from scipy.stats import t as student_t
from typer.testing import CliRunner

from pacs_rl.cli import app
from pacs_rl.compare import driver as drive
from pacs_rl.compare import figures, job, methods, plan, tables
from pacs_rl.compare import record as records
from pacs_rl.compare.methods import CompareError
from pacs_rl.settings.declarations import declared
from train_helpers import load_script, rounded

REPO = Path(__file__).resolve().parents[1]
# the engine's modules as one namespace, to read from (a test that replaces a function patches its module)
paired = types.SimpleNamespace(
    **{
        **vars(methods),
        **vars(plan),
        **vars(figures),
        **vars(tables),
        **vars(job),
        **vars(drive),
        **vars(records),
    }
)


@pytest.fixture(scope="module")
def driver():
    """The engine and its figures as one namespace."""
    return paired


def test_paired_interval_hand_computed(driver):
    diffs = [0.10, -0.05, 0.20, 0.05]  # mean 0.075, sd 0.1041
    out = driver.paired_interval(diffs)
    sd = math.sqrt(sum((d - 0.075) ** 2 for d in diffs) / 3)
    half = 3.1824 * sd / 2  # t(0.975, 3) = 3.1824
    assert out["mean"] == pytest.approx(0.075)
    assert out["sd"] == pytest.approx(sd)
    assert out["half_width"] == pytest.approx(half, rel=1e-4)
    assert out["ci95"] == pytest.approx([0.075 - half, 0.075 + half], rel=1e-4)
    # at this SD a ±5 pp interval needs n with t(n-1) * sd / sqrt(n) <= 0.05, and n - 1 does not reach it
    n = out["pairs_needed"]
    assert student_t.ppf(0.975, n - 1) * sd / math.sqrt(n) <= 0.05
    assert student_t.ppf(0.975, n - 2) * sd / math.sqrt(n - 1) > 0.05
    assert driver.paired_interval([0.3]) == {"pairs": 1, "mean": 0.3}  # no interval from one pair


def _run(method, seed, greedy):
    return {
        "method": method,
        "seed": seed,
        "greedy": {"accuracy": greedy, "n": 10, "mean_length": 20.0},
        "greedy_at": {"24": {"accuracy": greedy / 2, "n": 10, "mean_length": 30.0}},
        "passk": {"pass_at_k": {str(k): min(1.0, greedy + 0.01 * k) for k in (1, 2, 4, 8, 16, 32, 64)}},
        "dynamics": {"curves": {"entropy": [0.9, 0.5, 0.5, 0.5], "length": [60.0, None, 30.0, 30.0, 30.0]}},
    }


def test_summary_pairs_by_seed_and_the_stopping_rule(driver):
    record = {"runs": [_run("pacs", 0, 0.5), _run("grpo", 0, 0.4), _run("pacs", 1, 0.6), _run("grpo", 1, 0.6),
                       _run("grpo", 2, 0.9)], "protocol": driver.protocol()}  # fmt: skip
    summary = driver.summarize(record)
    gap = summary["grpo"]["pacs_minus_this"]["greedy_accuracy"]
    assert gap["pairs"] == 2 and gap["mean"] == pytest.approx(0.05)  # seed 2 has no PACS run: not paired
    at24 = summary["grpo"]["pacs_minus_this"]["greedy_accuracy@24"]  # the checkpoint halfway, paired alike
    assert at24["pairs"] == 2 and at24["mean"] == pytest.approx(0.025)
    assert summary["grpo"]["mean"]["greedy_accuracy"] == pytest.approx((0.4 + 0.6 + 0.9) / 3)
    # the dynamics: means of the last 3 logged values (length is logged at rollout steps only)
    assert summary["grpo"]["mean"]["entropy_last"] == pytest.approx(0.5)
    assert summary["grpo"]["mean"]["length_last"] == pytest.approx(30.0)
    assert summary["grpo"]["sd"]["greedy_accuracy"] == pytest.approx(0.25166, abs=1e-4)  # 0.4, 0.6, 0.9
    tables = driver.markdown_tables(record)
    assert "| grpo | 3 | 31.7 (12.6) | 63.3 (25.2) |" in tables  # means (per-run SD) at steps 24 and 48, in %
    # PACS − GRPO at step 24 over seeds 0, 1: 0.05 and 0, mean 2.5 pp, paired SD 3.54, t(1) = 12.706 x 3.54 / sqrt(2)
    assert "| grpo | 2 | 2.5 [-29.3, 34.3] (3.5) | 5.0 [-58.5, 68.5] (7.1) |" in tables
    # ±5 pp is a target for accuracies only: lengths (tokens) and entropies get an interval, no pairs_needed
    # (the search for one at a token-sized SD once ran for hours)
    assert "pairs_needed" in summary["grpo"]["pacs_minus_this"]["pass@64"]
    assert "pairs_needed" not in summary["grpo"]["pacs_minus_this"]["length_last"]
    one_pair = driver.markdown_tables({**record, "runs": record["runs"][:2]})
    assert "| grpo | 1 | 5.0 [–] | 10.0 [–] |" in one_pair  # one pair: its difference, no interval
    assert driver.complete_seeds(record, ["pacs", "grpo"]) == [0, 1]
    assert not driver.target_reached(record)  # two pairs never stop it
    n = driver.MIN_PAIRS
    tight = {
        "protocol": driver.protocol(),
        "runs": [
            _run(m, s, 0.5 + (0.001 * (s % 4) if m == "pacs" else 0))
            for s in range(n)
            for m in ("pacs", "grpo")
        ],
    }
    assert driver.target_reached(tight)
    wide = {
        "protocol": driver.protocol(),
        "runs": [_run(m, s, 0.1 + 0.8 * (s % 2) * (m == "pacs")) for s in range(n) for m in ("pacs", "grpo")],
    }
    assert not driver.target_reached(wide)


def test_the_checkpoint_table_counts_what_fell_between_the_checkpoint_and_the_end(driver):
    """A record evaluated at 24 and at 48: per arm the runs below 20% at each, the seeds that collapsed between (above
    20% at 24, below at 48), the runs that ended lower, the mean change and the least, the lowest at 48."""
    from pacs_rl.compare.collapses import checkpoint_table

    runs = [_run("pacs", 0, 0.6), _run("pacs", 1, 0.3), _run("grpo", 0, 0.8), _run("grpo", 1, 0.5)]
    runs[1]["greedy_at"]["24"]["accuracy"] = 0.45  # pacs seed 1: 45% at 24, 30% at 48: fell, not collapsed
    runs[3]["greedy"]["accuracy"] = 0.1  # grpo seed 1: 25% at 24, 10% at 48: collapsed between
    record = {"protocol": driver.protocol(), "runs": runs}
    table = checkpoint_table(record).splitlines()
    assert table[0].startswith("| method | runs | below 20% @24 | below 20% @48 | collapsed between |")
    # pacs: 30 -> 60 (+30), 45 -> 30 (-15): mean +7.5, least -15; grpo: 40 -> 80 (+40), 25 -> 10 (-15)
    assert table[2] == "| pacs | 2 | 0 | 0 | 0 | 1 | +7.5 (-15.0) | 30.0 |"
    assert table[3] == "| grpo | 2 | 0 | 1 | 1 (1) | 1 | +12.5 (-15.0) | 10.0 |"
    one_checkpoint = {**record, "protocol": {**record["protocol"], "greedy_at": [48]}}
    assert checkpoint_table(one_checkpoint) == ""  # evaluated only at its end: nothing to say


def test_jobs_come_seed_by_seed_and_skip_what_the_record_holds(driver):
    record = {"runs": [_run("pacs", 0, 0.5), _run("grpo", 1, 0.5)], "base": None}
    jobs = list(itertools.islice(driver.next_jobs(record, ["pacs", "grpo"]), 5))
    assert jobs == [(None, None), ("grpo", 0), ("pacs", 1), ("pacs", 2), ("grpo", 2)]
    record["base"] = {"greedy": {}}
    assert next(driver.next_jobs(record, ["pacs"])) == ("pacs", 1)
    # --full-seeds 2: every method on seeds 0 and 1, then only PACS and the primary GRPO
    jobs = list(itertools.islice(driver.next_jobs(record, ["pacs", "grpo", "pacs_clip"], full_seeds=2), 6))
    assert jobs == [("grpo", 0), ("pacs_clip", 0), ("pacs", 1), ("pacs_clip", 1), ("pacs", 2), ("grpo", 2)]


def test_a_record_of_another_protocol_is_refused_and_saving_adds_the_summary(driver, tmp_path):
    path = tmp_path / "record.json"
    record = driver.load_record(path)  # a new record
    assert record["runs"] == [] and record["protocol"] == driver.protocol()
    record["runs"].append({**_run("pacs", 0, 0.5), "host": {"cpu_capability": "AVX2", "date": "2026-11-24"}})
    record["runs"].append(
        {**_run("grpo", 0, 0.5), "host": {"cpu_capability": "AVX512", "date": "2026-11-25"}}
    )
    driver.save_record(path, record)
    saved = json.loads(path.read_text())
    assert saved["summary"]["pacs"]["seeds"] == [0]
    # where and when, for the record's index: every host level its runs had, the latest run's date
    assert saved["cpu_capability"] == "AVX2; AVX512" and saved["date"] == "2026-11-25"
    assert driver.load_record(path)["runs"] == saved["runs"]  # the same protocol continues
    saved["protocol"]["methods"]["pacs"]["max_grad_norm"] = 1.0
    path.write_text(json.dumps(saved))
    with pytest.raises(CompareError, match="another protocol"):
        driver.load_record(path)


def test_a_record_holds_the_cpu_default_and_refuses_a_changed_one_by_name(driver, tmp_path):
    """A new record holds the `pacs-rl train` CPU default of its day (the settings the train command runs with when
    given none); once that default changes, the record is refused naming each setting that changed, and a closed
    record (another protocol version) is refused naming its version. A run trains on the default the record holds."""
    from pacs_rl.training.schema import CPU_DEFAULTS, default_settings

    path = tmp_path / "record.json"
    record = driver.new_record(driver.protocol(methods=["pacs", "grpo"], passk=False))
    held = record["protocol"]["cpu_default"]
    assert held == driver.cpu_default() and {**held, **default_settings()} == held
    assert {k: held[k] for k in CPU_DEFAULTS} == CPU_DEFAULTS and "pacs_beta" in held  # PACS's own fields too
    driver.save_record(path, record)
    changed = json.loads(path.read_text())
    changed["protocol"]["cpu_default"]["learning_rate"] = 1e-4  # made when the default's lr was 1e-4
    del changed["protocol"]["cpu_default"]["temperature"]  # ... and before it had a temperature setting
    path.write_text(json.dumps(changed))
    now = default_settings()
    message = f"CPU default has changed since it was made (learning_rate 0.0001 -> {now['learning_rate']!r}; " \
              f"temperature: new, {now['temperature']!r})"  # fmt: skip
    with pytest.raises(CompareError, match=re.escape(message)):
        driver.load_record(path, methods=["pacs", "grpo"], passk=False)
    closed = {**record, "protocol": {**record["protocol"], "version": 2}}
    path.write_text(json.dumps(closed))
    with pytest.raises(CompareError, match="protocol version 2, this code runs version 3"):
        driver.load_record(path)
    # the changed record's runs train as it holds them, whatever this code's default
    values, _ = driver.run_values(changed["protocol"], "grpo", 0)
    assert values["learning_rate"] == 1e-4
    assert values["temperature"] == default_settings()["temperature"]  # a setting it lacks: this code's
    ours = json.loads(json.dumps(record))
    with pytest.raises(
        CompareError, match=re.escape(f"its CPU default: learning_rate {now['learning_rate']!r} -> 0.0001")
    ):
        driver.merge_records(ours, {**changed, "runs": []}, "gpu.json")


def test_cost_per_pair_splits_training_from_evaluation_and_skips_resumed_runs(driver):
    def timed(method, seed, train, wall, passk=False):
        run = _run(method, seed, 0.5)
        run = {**run, "dynamics": {**run["dynamics"], "train_seconds": train}, "host": {"wall_seconds": wall}}
        return run if passk else {k: v for k, v in run.items() if k != "passk"}

    record = {
        "protocol": driver.protocol(methods=["pacs", "grpo"], passk=False),
        "runs": [
            timed("pacs", 0, 1000, 1300), timed("pacs", 1, 1200, 1400), timed("pacs", 2, 800, 1200),
            timed("grpo", 0, 900, 1100), timed("grpo", 1, 700, 100),  # resumed: its wall leaves training out
        ],
    }  # fmt: skip
    c = driver.cost(record)
    assert c["per_method"]["pacs"]["train_seconds_median"] == 1000
    assert c["per_method"]["pacs"]["eval_greedy_seconds_median"] == 300
    assert c["per_method"]["grpo"]["train_seconds_median"] == 800.0
    assert (
        c["per_method"]["grpo"]["eval_greedy_seconds_median"],
        c["per_method"]["grpo"]["eval_greedy_runs"],
    ) == (
        200,
        1,
    )
    assert c["pair"] == {"greedy": {"seconds": 1000 + 300 + 800 + 200, "eval_seconds": 500}}
    assert "greedy only: 2300 s, 500 s of it evaluation" in driver.cost_line(record)
    assert driver.cost({**record, "runs": record["runs"][:3]})["pair"] == {}  # no GRPO run yet
    # runs evaluated with pass@k are costed apart
    record["runs"] += [timed("pacs", 3, 1000, 1900, passk=True), timed("grpo", 3, 800, 1500, passk=True)]
    c = driver.cost(record)
    assert c["pair"]["passk"] == {"seconds": 1000 + 900 + 800 + 700, "eval_seconds": 1600}
    assert c["pair"]["greedy"]["eval_seconds"] == 500  # unchanged by the pass@k runs
    # where the evaluation goes, from runs that timed it
    for r in record["runs"][-2:]:
        r["greedy"]["seconds"], r["greedy_at"]["24"]["seconds"] = 200, 100
        r["passk"]["seconds"], r["host"]["import_seconds"] = 350, 20
    c = driver.cost(record)
    assert {
        k: c["per_method"]["pacs"][k] for k in ("greedy_eval_seconds_median", "passk_seconds_median")
    } == {
        "greedy_eval_seconds_median": 300,
        "passk_seconds_median": 350,
    }
    assert "a run's evaluation: pacs greedy 300 s, pass@k 350 s, imports 20 s" in driver.cost_line(record)
    # a run resumed after a stop in its evaluation timed only what was left of it: not counted
    resumed = timed("pacs", 4, 1000, 250, passk=True)
    resumed["greedy"]["seconds"] = resumed["greedy_at"]["24"]["seconds"] = 0
    resumed["passk"]["seconds"] = 250
    record["runs"].append(resumed)
    c = driver.cost(record)
    assert c["per_method"]["pacs"]["greedy_eval_seconds_median"] == 300
    assert c["per_method"]["pacs"]["passk_seconds_median"] == 350


def test_a_record_without_passk_takes_it_on_from_its_next_seed(driver, tmp_path):
    """Training unchanged, pass@k from the first seed neither recorded nor started, on every E-th seed after;
    the base model is evaluated again for it; the change is written down and holds on the next call."""
    path = tmp_path / "record.json"
    record = driver.load_record(path, methods=["pacs", "grpo"], passk=False)
    record["base"] = {"greedy": {"accuracy": 0.1}}
    record["runs"] = [_run("pacs", 0, 0.5), _run("grpo", 0, 0.4), _run("pacs", 1, 0.5)]
    driver.save_record(path, record)
    with pytest.raises(CompareError, match="another protocol"):  # pass@k on every run is not a step it takes
        driver.load_record(path, methods=["pacs", "grpo"], passk=True)
    taken = driver.load_record(path, methods=["pacs", "grpo"], passk=True, passk_every=2, started=(2,))
    proto = taken["protocol"]
    assert proto["passk_seeds"] == {"from": 3, "every": 2} and proto["ks"] == driver.KS
    assert "seeds 3, 5, ..." in taken["protocol_changes"][0]["what"]
    assert [driver.passk_due(proto, s) for s in (None, 1, 2, 3, 4, 5)] == [
        True,
        False,
        False,
        True,
        False,
        True,
    ]
    assert {k: v for k, v in proto.items() if k not in ("passk", "ks", "passk_seeds")} == {
        k: v for k, v in record["protocol"].items() if k not in ("passk", "ks")
    }  # the training protocol is the same
    jobs = driver.next_jobs(taken, ["pacs", "grpo"])
    assert list(itertools.islice(jobs, 3)) == [(None, None), ("grpo", 1), ("pacs", 2)]  # the base again first
    base = tmp_path / "work" / "base"
    base.mkdir(parents=True)
    (base / driver.RESULT_FILE).write_text(json.dumps(record["base"]))  # evaluated before pass@k was taken on
    assert driver.finished_result(base, proto, None) is None
    assert driver.finished_result(base, record["protocol"], None) == record["base"]
    driver.save_record(path, taken)
    again = driver.load_record(path, methods=["pacs", "grpo"], passk=True, passk_every=2, started=(2, 3, 4))
    assert again["protocol"] == proto  # the rule stays where it was set, whatever has started since
    # a run without pass@k has no pass@k figures; pairs of pass@k are over the seeds that have it
    taken["runs"] += [_run("pacs", 3, 0.6), _run("grpo", 3, 0.5)]
    for r in taken["runs"][:3]:
        r.pop("passk")
    gaps = driver.summarize(taken)["grpo"]["pacs_minus_this"]
    assert gaps["pass@64"]["pairs"] == 1 and gaps["greedy_accuracy"]["pairs"] == 2
    assert "pass@64" in driver.markdown_tables(taken)


def test_dynamics_reads_the_curves_and_the_second_minibatch_auc(driver, tmp_path):
    rows = [{"step": s, "loss": 0.6, "reward": 0.1 * s, "entropy": 1.0 - 0.1 * s, "completions/mean_length": 50 - s,
             "step_time": 10.4} for s in range(1, 7)]  # fmt: skip
    for row in rows[1::2]:
        row["pacs/critic_auc"] = 0.7  # steps 2, 4, 6: each rollout's second mini-batch
    rows[0]["pacs/critic_auc"] = 0.5
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in [*rows, {"train_runtime": 9}]) + '{"step": 7, "lo'
    )  # the last line cut mid-write (a run killed while logging): skipped
    out = driver.dynamics(tmp_path / "metrics.jsonl")
    assert out["steps"] == 6
    assert out["entropy_first_3"] == pytest.approx(0.8) and out["entropy_last_3"] == pytest.approx(0.5)
    assert out["length_last_3"] == pytest.approx(45.0)
    assert out["critic_auc_second_minibatch"] == pytest.approx(0.7)
    assert out["curves"]["critic_auc"][2] is None
    assert out["train_seconds"] == 62  # the steps' own times: 6 x 10.4 s


def test_method_variants_and_a_record_that_keeps_its_own_methods(driver, tmp_path):
    assert driver.parse_method("pacs[reference=frozen,ref_reset_steps=8,pacs_beta=0.25]") == {
        **driver.METHODS["pacs"].overrides,
        "reference": "frozen",
        "ref_reset_steps": 8,
        "pacs_beta": 0.25,
    }
    for bad in ("nosuch", "pacs[reference=frozen", "pacs[reference]"):
        with pytest.raises(CompareError, match="--methods"):
            driver.parse_method(bad)
    # a variant's settings are typed and checked as `pacs-rl train` checks them (a PACS option: by its declaration)
    assert driver.parse_method("pacs[pacs_beta=1,pacs_weighted=false]")["pacs_weighted"] is False
    for bad, refusal in [
        ("pacs[pacs_beta=0]", "--methods 'pacs[pacs_beta=0]': pacs_beta=0: give a number > 0"),
        ("pacs[pacs_score=mean]", "pacs_score='mean'; choose one of ['rloo', 'grpo', 'dr_grpo']"),
        ("pacs[pacs_weighted=maybe]", "pacs_weighted='maybe': expected a bool"),
        ("pacs[nosuchkey=1]", "unknown setting 'nosuchkey' in --methods 'pacs[nosuchkey=1]'"),
        ("pacs[gae_gamma=0.5]", "gae_gamma only apply to loss_type='ppo'"),
    ]:
        with pytest.raises(CompareError, match=re.escape(refusal)):
            driver.parse_method(bad)
    path = tmp_path / "critic.json"
    variants = ["pacs[reference=frozen]", "pacs[reference=frozen,ref_reset_steps=8]"]
    record = driver.load_record(path, {"max_steps": 4}, variants, passk=False)
    assert list(record["protocol"]["methods"]) == variants
    assert record["protocol"]["passk"] is None and record["protocol"]["ks"] == []
    run = _run(variants[0], 0, 0.4)
    del run["passk"]
    record["runs"].append(run)
    driver.save_record(path, record)
    again = driver.load_record(path, {"max_steps": 4}, None, passk=False)  # its own methods
    assert again["runs"] == record["runs"]
    summary = driver.summarize(again)
    assert summary[variants[0]]["mean"]["greedy_accuracy"] == pytest.approx(0.4)
    assert "pacs_minus_this" not in summary[variants[0]]  # no plain PACS in this record to pair with
    assert "pass@64" not in summary[variants[0]]["mean"]
    with pytest.raises(CompareError, match="another protocol"):
        driver.load_record(path, {"max_steps": 8}, None, passk=False)
    assert driver.slug(variants[1]) == "pacs__reference=frozen__ref_reset_steps=8"


def test_repeatability_finds_the_first_differing_step():
    module = load_script("benchmarks/repeatability.py")
    a = [{"step": 1, "loss": 0.69, "time": 1.0}, {"step": 2, "loss": 0.5, "grad_norm": 66.40255737}]
    b = [{"step": 1, "loss": 0.69, "time": 2.0}, {"step": 2, "loss": 0.5, "grad_norm": 66.40256500}]
    assert module.first_difference(a, a) is None
    assert module.first_difference(a, b) == {"step": 2, "values": {"grad_norm": [66.40255737, 66.40256500]}}
    assert module.first_difference(a, a[:1])["step"] == 2  # one run stopped early


def test_steps_since_the_reference_equalled_the_policy(driver):
    old, never, every8 = {}, {"reference": "frozen"}, {"reference": "frozen", "ref_reset_steps": 8}
    assert [driver.steps_since_reset(old, s) for s in (1, 2, 3, 4)] == [
        0,
        1,
        0,
        1,
    ]  # a new rollout every 2 steps
    assert [driver.steps_since_reset(never, s) for s in (1, 2, 24)] == [0, 1, 23]
    assert [driver.steps_since_reset(every8, s) for s in (1, 8, 9, 17)] == [0, 7, 0, 0]


def test_critic_auc_pooled_by_steps_since_reset(driver):
    auc = [0.5, 0.7, 0.5, 0.9, None, 1.0]  # steps 1..6 of a PACS run with reference = the rollout policy
    run = {"method": "pacs", "seed": 0, "dynamics": {"curves": {"critic_auc": auc}}}
    record = {"protocol": driver.protocol(methods=["pacs", "grpo"]), "runs": [run, {**run, "method": "grpo"}]}
    rows = driver.critic_bins([record])
    assert list(rows) == ["pacs"]  # only PACS has an implicit critic
    label, mean, se, n = rows["pacs"][0]
    assert (label, mean, se, n) == ("0", 0.5, 0.0, 2)  # ψ = 0 on each rollout's first mini-batch: chance
    label, mean, se, n = rows["pacs"][1]
    assert label == "1" and n == 3 and mean == pytest.approx((0.7 + 0.9 + 1.0) / 3)
    assert "| pacs | 0.50 ± 0.00 (2) | 0.87 ± 0.09 (3) | – |" in driver.critic_table([record])
    frozen = {"protocol": driver.protocol(methods=["pacs[reference=frozen]", "pacs[reference=frozen,pacs_beta=0.25]"]),
              "runs": [{**run, "method": "pacs[reference=frozen]"},
                       {**run, "method": "pacs[reference=frozen,pacs_beta=0.25]"}]}  # fmt: skip
    rows = driver.critic_bins([record, frozen])
    assert list(rows) == ["pacs", "pacs[reference=frozen]", "pacs[reference=frozen,pacs_beta=0.25]",
                          driver.FROZEN_POOLED]  # fmt: skip
    # never reset: steps 1..6 are 0..5 steps since; both variants pooled (the old-reference run is not)
    assert [(label, n) for label, _, _, n in rows[driver.FROZEN_POOLED]][:3] == [
        ("0", 2),
        ("1", 2),
        ("2-3", 4),
    ]


def _block(text: str, name: str) -> str:
    """The lines between `<!-- name: ... -->` and `<!-- end name -->` in docs/RESULTS.md."""
    start = text.index(f"<!-- {name}:")
    start = text.index("\n", start) + 1
    return text[start : text.index(f"<!-- end {name} -->")].strip()


def test_results_page_quotes_the_records(driver):
    """docs/RESULTS.md's tables are the records' own (printed by `summary --markdown`, `--dynamics` and `plot`), not
    typed; the current record's blocks are empty while it has no runs, and the page says so."""
    script = load_script("benchmarks/pacs_vs_grpo.py")
    text = (REPO / "docs" / "RESULTS.md").read_text()
    bench = REPO / "docs" / "benchmarks"
    closed = {name: json.loads((REPO / path).read_text()) for name, path in script.NAMED.items()}
    assert set(script.CLOSED_BLOCKS) < set(script.QUOTED_BLOCKS)
    for name, (record_name, what) in script.QUOTED_BLOCKS.items():
        assert _block(text, name) == script.block(closed[record_name], what).strip(), name
    current = REPO / script.RECORD
    record = json.loads(current.read_text()) if current.is_file() else None
    for name, body in script.current_blocks(record).items():
        assert _block(text, name) == body.strip(), name
    if record is None:  # the fourth record starts later: its section says so, and holds no figure
        assert "**No pairs exist yet.**" in text and not any(script.current_blocks(None).values())
    for saved in [*closed.values(), *([record] if record else [])]:
        # the saved summary is this code's (to the last digits of a t quantile)
        assert rounded(saved["summary"]) == rounded(driver.summarize(saved))
    third = closed["noise_steps"]
    assert third["protocol"]["grader"] == "sound" and third["protocol"]["version"] == 2
    critic = json.loads((bench / "pacs_critic.json").read_text())
    assert _block(text, "critic") == driver.critic_table(
        [closed["restatement_leak"], critic]
    )  # the leak's runs
    before, then = (
        driver.cost(closed["restatement_rule"])["pair"]["passk"],
        driver.cost(third)["pair"]["greedy"],
    )
    flat = " ".join(text.split())
    assert f"a pair took {before['seconds']:,} s, {before['eval_seconds']:,} s of it evaluation" in flat
    assert f"greedy only, as now, {then['seconds']:,} s, {then['eval_seconds']:,} s of it evaluation" in flat
    for name in ("noise_steps", "restatement_rule"):
        assert (REPO / "docs" / "results" / f"pacs_vs_grpo_{name}" / "comparison.png").is_file()
    for name in ("comparison.png", "critic_auc.png"):
        assert (REPO / "docs" / "results" / "pacs_vs_grpo_restatement_leak" / name).is_file()


def test_the_closed_third_record_says_what_it_measured(driver):
    """pacs_vs_grpo_noise_steps.json's `closed` figures are its runs' own (steps_on_no_signal over its curves), and
    RESULTS quotes them: PACS took optimizer steps with no group of both labels in its rollout, GRPO none."""
    from pacs_rl.compare.collapses import steps_on_no_signal

    third = json.loads((REPO / "docs" / "benchmarks" / "pacs_vs_grpo_noise_steps.json").read_text())
    figures = third["closed"]["steps_on_no_signal"]
    for method in ("pacs", "grpo"):
        parts = [steps_on_no_signal(r) for r in third["runs"] if r["method"] == method]
        assert figures[method]["steps"] == sum(p["steps"] for p in parts)
        assert figures[method]["no_signal"] == sum(p["no_signal"] for p in parts)
        assert figures[method]["moved"] == sum(p["moved"] for p in parts)
    assert figures["grpo"]["moved"] == 0 and figures["pacs"]["moved"] > 0
    first = [1 - r["dynamics"]["curves"]["mixed_groups"][0] for r in third["runs"]]
    assert third["closed"]["first_rollout_single_label"] == round(sum(first) / len(first), 4)
    flat = " ".join((REPO / "docs" / "RESULTS.md").read_text().split())
    pacs = figures["pacs"]
    assert (f"In {pacs['no_signal']} of PACS's {pacs['steps']:,} optimizer steps" in flat
            and f"the optimizer still took {pacs['moved']} of them ({100 * pacs['moved'] / pacs['steps']:.1f}%" in flat)  # fmt: skip
    assert f"{round(100 * third['closed']['first_rollout_single_label'])}% of the groups" in flat


def test_regrade_scores_kept_samples_with_this_grader(driver, tmp_path):
    """A restatement that the leaking rule paid ("The answer is 92 + 5.") is 0 under the protocol's grader; the
    re-grade is `pacs-rl audit`'s (pacs_rl.evaluation.audit), with the questions of the held-out split."""
    from pacs_rl.evaluation.audit import audit

    folder = tmp_path / "pacs" / "seed3" / "eval" / "passk"
    folder.mkdir(parents=True)
    # the base model's evaluation is not re-graded
    (tmp_path / "base" / "eval" / "greedy").mkdir(parents=True)
    rows = [
        {
            "problem_id": "arith-test-10000-0",
            "completion": "The answer is 92 + 5.",
            "answer": "97",
            "score": 1.0,
        },
        {"problem_id": "arith-test-10000-0", "completion": "The answer is 97.", "answer": "97", "score": 1.0},
    ]
    (folder / "samples.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "base" / "eval" / "greedy" / "samples.jsonl").write_text(json.dumps(rows[1]) + "\n")
    regraded = driver.regrade(tmp_path)
    assert list(regraded) == ["pacs/seed3/eval/passk"]
    out = regraded["pacs/seed3/eval/passk"]
    assert (out["samples"], out["correct_as_recorded"], out["correct_now"]) == (2, 1.0, 0.5)
    assert out["pass_at_k_now"]["1"] == 0.5
    assert out["pass_at_k_now"]["2"] == 1.0
    # the same figures from the product command's code, which also names the change
    (f,) = audit([folder], driver.PROTOCOL["grader"], {"arith-test-10000-0": "What is 92 + 5?"})["files"]
    assert (f["paid_recorded"], f["paid_now"], f["paid_to_refused"]["count"]) == (2, 1, 1)
    assert f["examples"]["paid_to_refused"][0]["completion"] == "The answer is 92 + 5."
    assert driver.regrade(tmp_path / "nothing") == {}


def test_methods_split_outside_brackets():
    from pacs_rl.compare.methods import split_methods

    assert split_methods("pacs, grpo") == ["pacs", "grpo"]
    assert split_methods("pacs[reference=frozen,ref_reset_steps=8],grpo") == [
        "pacs[reference=frozen,ref_reset_steps=8]",
        "grpo",
    ]
    assert split_methods(None) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["paired", "--seed", "1"], "No such option: --seed"),  # its protocol sets the seeds
        (["paired", "--model", "tiny"], "No such option: --model"),
        (
            ["--hours", "3"],
            "No such option: --hours",
        ),  # the planned comparison has no stopping rule of its own
        (["--preset", "smoke", "--record", "r.json"], "No such option: --record"),
        (["--seed", "1", "paired"], "--seed: an option of the planned comparison"),
        (["paired", "--n", "32"], "--n 32; use one of [64]."),
        (["paired", "--workers", "0"], "--workers 0: give a whole number >= 1"),
        (["paired", "--target", "0"], "--target 0.0: give a number in (0, 100)"),
        (["paired", "--hours", "-1"], "--hours -1.0: give a number > 0"),
        (["paired", "--stop-after", "0"], "--stop-after 0.0: give a number > 0"),
        (["paired", "--passk-every", "2"], "--passk-every 2: pass@k on every N-th seed needs --n 64"),
        (["paired", "--methods", "pacs,foo"], "--methods 'foo'"),
        (["paired", "--methods", "pacs[pacs_beta=0]", "--dry-run"], "pacs_beta=0: give a number > 0"),
        (["paired", "--methods", "pacs[pacs_bta=1]", "--dry-run"], "Did you mean: pacs_beta?"),
        (["--preset", "pacs-vs-grpo", "--workers", "0"], "--workers 0"),  # the older spelling, checked alike
    ],
)
def test_paired_options_are_checked_before_anything_runs(args, message, tmp_path):
    result = CliRunner().invoke(app, ["compare", *args, "--output-dir", str(tmp_path / "out")])
    assert result.exit_code != 0 and message in result.output, result.output
    assert not (tmp_path / "out").exists()


def _paired_command(record: Path, work: Path) -> list[str]:
    return ["compare", "paired", "--record", str(record), "--output-dir", str(work)]


def test_dry_run_reads_the_record_and_names_the_next_runs(tmp_path):
    record = tmp_path / "record.json"
    made = paired.new_record(paired.protocol(passk=True, passk_every=2))
    made["runs"] = [_run(m, s, 0.3 + 0.1 * s * (m == "pacs")) for s in range(3) for m in paired.ARMS]
    paired.save_record(record, made)
    saved = json.loads(record.read_text())
    args = [*_paired_command(record, tmp_path / "w"), "--n", "64", "--passk-every", "2"]
    result = CliRunner().invoke(app, [*args, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "methods: pacs, grpo, pacs_clip; every method on every seed" in result.output
    assert paired.verdict(saved) in result.output  # where the stopping rule stands
    assert "it stops at ±5 pp or 40 pairs" in result.output
    assert f"learning_rate {saved['protocol']['cpu_default']['learning_rate']}" in result.output
    first = next(paired.next_jobs(saved, list(saved["protocol"]["methods"])))
    assert f"next runs: {'base' if first[0] is None else f'{first[0]} seed {first[1]}'}" in result.output
    assert json.loads(record.read_text()) == saved  # a dry run writes nothing
    # the same record with another protocol (24 steps) is refused, and the dry run says so
    refused = CliRunner().invoke(app, [*args, "--dry-run", "--max-steps", "24"])
    assert refused.exit_code == 1 and "another protocol" in refused.output
    # the closed third record: its version named
    closed = tmp_path / "closed.json"
    closed.write_text((REPO / "docs" / "benchmarks" / "pacs_vs_grpo_noise_steps.json").read_text())
    old = CliRunner().invoke(app, [*_paired_command(closed, tmp_path / "w"), "--n", "64", "--passk-every", "2",
                                   "--dry-run"])  # fmt: skip
    assert old.exit_code == 1 and "protocol version 2, this code runs version 3" in old.output
    # a folder of run folders made by an older record (no protocol.json) is not this record's
    (tmp_path / "w" / "pacs" / "seed0").mkdir(parents=True)
    taken = CliRunner().invoke(app, [*args, "--dry-run"])
    assert taken.exit_code == 1 and "holds run folders without a protocol.json" in taken.output


def test_a_paired_record_runs_end_to_end_in_run_processes(tmp_path):
    """Two methods and the base model, one seed, on the tiny model: each run its own `python -m
    pacs_rl.compare.job job` process, the record written as runs finish, and read back on a second call."""
    opts = paired.Options(record=tmp_path / "record.json", work=tmp_path / "work", workers=2, max_seeds=1,
                          methods=["pacs", "grpo"], no_passk=False, passk_every=2,
                          overrides={"model": "tiny", "max_steps": 2, "max_completion_length": 8})  # fmt: skip
    paired.run(opts)
    record = json.loads(opts.record.read_text())
    assert record["base"]["greedy"]["n"] == len(paired.heldout_problems())
    assert sorted((r["method"], r["seed"]) for r in record["runs"]) == [("grpo", 0), ("pacs", 0)]
    assert all(r["dynamics"]["steps"] == 2 for r in record["runs"])
    # pass@k on seed 0 (every 2nd seed from 0) and the base model: 64 samples of the first 32 problems
    assert record["protocol"]["passk_seeds"] == {"from": 0, "every": 2}
    assert all(
        r["passk"]["n"] == 64 and r["passk"]["problems"] == 32 for r in [record["base"], *record["runs"]]
    )
    assert all(r["greedy"]["seconds"] >= 0 and r["host"]["import_seconds"] >= 0 for r in record["runs"])
    assert record["summary"]["grpo"]["pacs_minus_this"]["greedy_accuracy"]["pairs"] == 1
    assert not list(opts.work.glob("*/seed0/checkpoint-*"))  # weights go once evaluated
    before = opts.record.read_text()
    paired.run(opts)  # complete: nothing runs again
    assert json.loads(opts.record.read_text())["runs"] == json.loads(before)["runs"]


def test_a_run_trains_as_the_cpu_default_on_a_cpu_and_alike_on_a_gpu(monkeypatch):
    """On this CPU a run's settings are the CPU default's under the protocol (fp32); where CUDA is present the run
    trains there, still in fp32 and with the same sampler and update pieces, so runs differ only in kernels."""
    from pacs_rl import device
    from pacs_rl.training.schema import default_settings

    proto = paired.protocol(methods=["pacs", "grpo"], passk=False)
    monkeypatch.setattr(device, "cuda_info", lambda: device.CudaInfo(available=False))
    values, choice = paired.run_values(proto, "grpo", 3)
    assert choice.device == "cpu"
    assert values == {
        **default_settings(),
        **proto["cpu_default"],  # the same values, and PACS's declared fields with theirs
        "bf16": False,
        **proto["train"],
        **proto["methods"]["grpo"],
        "seed": 3,
    }
    gpu = device.CudaInfo(available=True, bf16=True, name="NVIDIA H100 80GB HBM3", memory_gib=79.2, count=1,
                          torch_cuda="13.0")  # fmt: skip
    monkeypatch.setattr(device, "cuda_info", lambda: gpu)
    on_gpu, choice = paired.run_values(proto, "grpo", 3)
    assert choice.device == "cuda" and on_gpu["bf16"] is False and on_gpu["use_cpu"] is False
    differ = {k for k in set(values) | set(on_gpu) if values.get(k) != on_gpu.get(k)}
    assert differ == {"use_cpu"}, differ


def test_no_run_starts_on_a_nearly_full_disk(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(drive, "disk_free_gib", lambda path: 1.0)
    opts = paired.Options(record=tmp_path / "record.json", work=tmp_path / "work", methods=["pacs", "grpo"],
                          no_passk=True, overrides={"model": "tiny"})  # fmt: skip
    paired.run(opts)
    assert "no new run: 1.0 GiB free" in capsys.readouterr().out
    assert not list((tmp_path / "work").glob("*/seed*")) and not (tmp_path / "work" / "base").exists()
    assert paired.disk_free_gib(tmp_path / "not" / "yet") > 0  # a folder still to be made: its parent's disk


def _narrow_record(n: int) -> dict:
    """A record of pacs, grpo and pacs_clip whose n PACS - GRPO pairs differ by at most 0.3 pp (a narrow interval)."""
    return {
        "protocol": paired.protocol(methods=["pacs", "grpo", "pacs_clip"], passk=False),
        "runs": [
            _run(m, s, 0.5 + (0.001 * (s % 4) if m == "pacs" else 0))
            for s in range(n)
            for m in ("pacs", "grpo")
        ],
        "base": {"greedy": {"accuracy": 0.1}},
    }


def test_the_other_methods_run_once_the_primary_pair_is_answered(tmp_path):
    """PACS and GRPO first; once PACS − GRPO is within the target with at least MIN_PAIRS pairs, the record's other
    methods on the seeds of the pairs, and then the driver stops. A narrow interval over fewer pairs answers
    nothing (checked from the third pair on, such a rule covers less than its 95%)."""
    n = paired.MIN_PAIRS
    record = _narrow_record(n)
    assert paired.target_reached(record)
    early = {**record, "runs": [r for r in record["runs"] if r["seed"] < n - 1]}
    assert not paired.target_reached(early)  # as narrow, one pair short
    assert "answered" not in paired.verdict(early) and "answered" in paired.verdict(record)
    assert paired.other_jobs(record, ["pacs", "grpo", "pacs_clip"]) == [("pacs_clip", s) for s in range(n)]
    opts = paired.Options(record=tmp_path / "r.json", work=tmp_path)
    driver = paired._Driver(opts, record)
    assert driver.stopping() is False and driver.answered
    assert list(driver.jobs) == [("pacs_clip", s) for s in range(n)]
    record["runs"] += [_run("pacs_clip", s, 0.4) for s in range(n)]
    assert driver.stopping() is True
    wide = {
        **record,
        "runs": [_run(m, s, 0.1 + 0.8 * (s % 2) * (m == "pacs")) for s in range(n) for m in ("pacs", "grpo")],
    }
    assert paired._Driver(opts, wide).stopping() is False  # not answered: the pair goes on


def test_the_other_methods_keep_to_full_seeds_and_start_no_run_twice(tmp_path):
    """Answered with more pairs than --full-seeds: the other methods run on the first full_seeds paired seeds only
    (less those they have), and a run already under way when the answer comes is not started again (a
    driver that re-queued one trained it twice into one folder)."""
    n = paired.MIN_PAIRS + 4
    record = _narrow_record(n)
    record["runs"].append(_run("pacs_clip", 0, 0.4))
    assert paired.target_reached(record)
    methods = ["pacs", "grpo", "pacs_clip"]
    assert paired.other_jobs(record, methods, full_seeds=3) == [("pacs_clip", 1), ("pacs_clip", 2)]
    assert paired.other_jobs(record, methods, full_seeds=0) == []
    assert len(paired.other_jobs(record, methods)) == n - 1  # no limit: every paired seed
    driver = paired._Driver(paired.Options(record=tmp_path / "r.json", work=tmp_path, full_seeds=3), record)
    driver.running[object()] = ("pacs_clip", 1)  # under way when the answer comes
    assert driver.stopping() is False and driver.answered
    assert list(driver.jobs) == [("pacs_clip", 2)]
    record["runs"] += [_run("pacs_clip", 1, 0.4)]
    assert driver.stopping() is False  # seed 2 still due
    record["runs"] += [_run("pacs_clip", 2, 0.4)]
    assert driver.stopping() is True


def test_replay_names_a_run_it_cannot_replay(tmp_path, monkeypatch):
    """`replay method:seed`: a spec that is not method:seed, a run the record lacks, or a run whose folder is not
    here is refused naming it (and the runs there are), before any training starts."""
    script = load_script("benchmarks/pacs_vs_grpo.py")
    monkeypatch.setattr(script, "WORK", tmp_path)
    record = {"runs": [{"method": "pacs", "seed": 2}, {"method": "grpo", "seed": 2}]}
    folder = tmp_path / "pacs" / "seed2"
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "lo')  # cut mid-write
    assert script.replay_runs(record, ["pacs:2"]) == [("pacs", 2)]
    assert script.loss_rows(folder / "metrics.jsonl") == [{"step": 1, "loss": 0.5}]
    for spec in ("pacs", "pacs:x", "pacs:3", "ppo:2"):
        with pytest.raises(ValueError, match=rf"'{spec}' is not a run of .*one of grpo:2, pacs:2"):
            script.replay_runs(record, [spec])
    with pytest.raises(ValueError, match=r"'grpo:2': its run folder .*grpo/seed2 is not here"):
        script.replay_runs(record, ["grpo:2"])


def test_a_second_machine_takes_seeds_from_first_seed_and_max_pairs_counts_the_seeds_held(driver, tmp_path):
    """--first-seed: new seeds start there (a lent GPU adds to a copy of the record while the first machine goes on
    from where it is); --max-pairs counts the seeds recorded, running and queued, wherever they start."""
    record = {"runs": [_run(m, s, 0.5) for s in range(3) for m in ("pacs", "grpo")], "base": {"greedy": {}}}
    jobs = list(itertools.islice(driver.next_jobs(record, ["pacs", "grpo"], first_seed=20), 3))
    assert jobs == [("pacs", 20), ("grpo", 20), ("pacs", 21)]
    opts = paired.Options(record=tmp_path / "r.json", work=tmp_path, max_seeds=5, first_seed=20)
    d = paired._Driver(opts, {**record, "protocol": paired.protocol(passk=False)})
    d.running = {object(): ("pacs", 20), object(): ("grpo", 20)}
    assert not d.seeds_full(20) and not d.seeds_full(21)  # 3 recorded + 20 running + 21 = 5
    d.pending = [("pacs", 21)]
    assert d.seeds_full(22) and not d.seeds_full(21)  # a seed already held is not a new one
    assert not paired._Driver(paired.Options(record=opts.record, work=tmp_path), d.record).seeds_full(99)


def _one_pair_record() -> dict:
    return {
        "protocol": paired.protocol(passk=False),
        "runs": [_run(m, 0, 0.5) for m in ("pacs", "grpo")],
        "base": None,
    }


def _other_machine(record: dict, runs: list, device: str = "NVIDIA H100 80GB HBM3") -> dict:
    return {**record, "runs": [*record["runs"], *({**r, "host": {"device": device}} for r in runs)]}


def test_merging_a_second_machines_record_adds_whole_pairs_only(driver):
    base = _one_pair_record()
    theirs = _other_machine(base, [_run("pacs", 20, 0.4), _run("grpo", 20, 0.6), _run("pacs", 23, 0.7)])
    theirs["base"] = {"greedy": {"accuracy": 0.1}}
    ours = json.loads(json.dumps(base))
    added, left = driver.merge_records(ours, theirs)
    # seed 23 lacks its GRPO run: its partner would be trained on another machine later, so it stays out
    assert added == [("grpo", 20), ("pacs", 20)] and left == [("pacs", 23)]
    assert [(r["method"], r["seed"]) for r in ours["runs"]] == [
        ("pacs", 0),
        ("grpo", 0),
        ("grpo", 20),
        ("pacs", 20),
    ]
    assert ours["runs"][-1]["host"]["device"].startswith("NVIDIA") and ours["base"] == theirs["base"]
    assert driver.summarize(ours)["grpo"]["pacs_minus_this"]["greedy_accuracy"]["pairs"] == 2
    assert driver.merge_records(ours, theirs) == ([], [("pacs", 23)])  # merging again adds nothing
    clash = _other_machine(base, [{**_run("pacs", 0, 0.9)}])
    clash["runs"] = clash["runs"][1:]  # pacs seed 0 with another result than ours
    before = json.loads(json.dumps(ours))
    with pytest.raises(CompareError, match="pacs seed 0 with other results"):
        driver.merge_records(ours, clash)
    other_protocol = {**theirs, "protocol": paired.protocol(overrides={"max_steps": 24}, passk=False)}
    with pytest.raises(CompareError, match="another protocol"):
        driver.merge_records(ours, other_protocol)
    assert ours == before  # a refused merge leaves the record as it was


def test_merge_command_adds_to_the_record_and_waits_for_a_running_driver(tmp_path):
    record, other = tmp_path / "record.json", tmp_path / "gpu.json"
    base = _one_pair_record()
    paired.save_record(record, base)
    other.write_text(json.dumps(_other_machine(base, [_run("pacs", 7, 0.4), _run("grpo", 7, 0.6)])))
    args = _paired_command(record, tmp_path / "w")
    dry = CliRunner().invoke(app, [*args, "--merge", str(other), "--dry-run"])
    assert (
        dry.exit_code == 0
        and "would add 2 runs" in dry.output
        and len(json.loads(record.read_text())["runs"]) == 2
    )
    assert not (tmp_path / "w").exists()  # a dry run makes nothing
    (tmp_path / "w").mkdir()
    lock = FileLock(tmp_path / "w" / f"{record.name}.lock")  # held as a running driver holds it
    lock.acquire()
    busy = CliRunner().invoke(app, [*args, "--merge", str(other)])
    assert busy.exit_code == 2 and "being added to by a running" in busy.output
    assert len(json.loads(record.read_text())["runs"]) == 2
    lock.release()
    done = CliRunner().invoke(app, [*args, "--merge", str(other)])
    assert (
        done.exit_code == 0 and "added 2 runs" in done.output and "seed 7, run on NVIDIA H100" in done.output
    )
    saved = json.loads(record.read_text())
    assert (
        len(saved["runs"]) == 4
        and saved["summary"]["grpo"]["pacs_minus_this"]["greedy_accuracy"]["pairs"] == 2
    )
    unused = CliRunner().invoke(
        app, [*args, "--merge", str(other), "--n", "64", "--workers", "4", "--report-only"]
    )
    assert unused.exit_code == 2 and "--n, --report-only, --workers would not be used" in unused.output
    missing = CliRunner().invoke(app, [*args, "--merge", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "no such record file" in missing.output


def test_runs_that_would_overflow_the_gpu_run_fewer_at_a_time(driver):
    from pacs_rl.device import CudaInfo

    h100 = CudaInfo(True, name="NVIDIA H100 80GB HBM3", memory_gib=79.2)
    fit, note = driver.gpu_slots(16, h100)  # 16 at once overflowed this card (measured, paired.GPU_RUN_GIB)
    assert fit == int(79.2 // paired.GPU_RUN_GIB) < 16 and f"so {fit} run at a time" in note
    assert driver.gpu_slots(4, h100) == (4, None)
    assert driver.gpu_slots(13, h100) == (
        13,
        None,
    )  # 13 at 6 GiB fit an 80 GB H100 (79.2 GiB as CUDA reports it)
    assert driver.gpu_slots(13, CudaInfo(True, name="H100", memory_gib=78.0)) == (13, None)
    assert driver.gpu_slots(16, CudaInfo(False)) == (16, None)  # a CPU: as many as asked
    assert driver.gpu_slots(3, CudaInfo(True, memory_gib=2.0))[0] == 1  # at least one


def test_a_record_of_two_devices_gives_each_devices_pairs_and_the_pooled_interval(driver):
    """A pair is trained on one machine: the tables give PACS − GRPO over every device's pairs alone beside the pooled
    figure, and the cost per pair per device (a GPU's medians mixed with a CPU's would describe neither)."""
    record = {"protocol": paired.protocol(passk=False), "base": None,
              "runs": [_run(m, s, 0.5 + 0.1 * (m == "pacs") * (s % 2)) for s in range(5) for m in ("pacs", "grpo")]}  # fmt: skip
    assert driver.by_device(record) is None  # one device: nothing to say
    for r in record["runs"][6:]:  # seeds 3 and 4 on a GPU
        r["host"] = {"device": "NVIDIA H100 80GB HBM3"}
    line = driver.by_device(record)
    assert line.startswith("Runs by device: cpu 6 (seeds 0–2); NVIDIA H100 80GB HBM3 4 (seeds 3–4).")
    for label, diffs in [("pooled", [0.0, 0.1, 0.0, 0.1, 0.0]), ("cpu alone", [0.0, 0.1, 0.0]),
                         ("NVIDIA H100 80GB HBM3 alone", [0.1, 0.0])]:  # fmt: skip
        gap = driver.paired_interval(diffs)
        expected = (
            f"{label} {100 * gap['mean']:+.1f} [{100 * gap['ci95'][0]:+.1f}, {100 * gap['ci95'][1]:+.1f}]"
        )
        assert f"{expected} over {len(diffs)} pairs" in line
    assert line in driver.markdown_tables(record)
    cost = driver.cost_line(record).splitlines()
    assert len(cost) == 2 and cost[0].startswith("cost per pair on cpu")
    assert cost[1].startswith("cost per pair on NVIDIA H100 80GB HBM3")


def test_the_48_step_runs_pass_through_the_fourth_records_runs():
    """Item 5 trains pairs of the fourth record again to 48 steps on its pinned commit, under its protocol but for the
    step count; with a constant learning rate a 48-step run is the 24-step run continued, so its greedy evaluation at
    step 24 is the fourth record's for that method and seed, to the last digit. A run that differs is not a
    continuation and must not be reported as one."""
    script = load_script("benchmarks/pacs_vs_grpo.py")
    later = json.loads((REPO / script.LATER).read_text())
    fourth = json.loads((REPO / script.RECORD).read_text())
    same = {k: v for k, v in later["protocol"].items() if k not in ("methods", "train")}
    assert same == {k: v for k, v in fourth["protocol"].items() if k not in ("methods", "train")}
    assert later["protocol"]["methods"] == {m: fourth["protocol"]["methods"][m] for m in ("pacs", "grpo")}
    steps = {k: v for k, v in later["protocol"]["train"].items() if k != "max_steps"}
    assert steps == {k: v for k, v in fourth["protocol"]["train"].items() if k != "max_steps"}
    assert later["protocol"]["train"]["max_steps"] == 48 and later["protocol"]["greedy_at"] == [24]
    assert fourth["protocol"]["train"]["max_steps"] == 24
    runs = {(r["method"], r["seed"]): r for r in fourth["runs"]}
    assert later["runs"]
    started = {seed for _, seed in runs}
    for run in later["runs"]:
        assert run["host"]["commit"] == script.PINNED
        if (run["method"], run["seed"]) not in runs:
            # seed 106: the fourth record stopped with its PACS run in and no GRPO run; that GRPO run is new here
            assert run["seed"] in started, (run["method"], run["seed"])
            continue
        then = runs[run["method"], run["seed"]]["greedy"]
        assert run["greedy_at"]["24"]["accuracy"] == then["accuracy"], (run["method"], run["seed"])
        assert run["greedy_at"]["24"]["mean_length"] == then["mean_length"], (run["method"], run["seed"])


def test_the_protocol_is_declared_once_and_every_record_reads_as_recorded():
    """The protocol's declarations give the protocol the sound record was made with, each value with its check; the
    records' methods are the method table's (or, for a name that changed, their own recorded overrides)."""
    import dataclasses

    from pacs_rl.compare.methods import METHODS

    bench = REPO / "docs" / "benchmarks"
    third = json.loads(
        (bench / "pacs_vs_grpo_noise_steps.json").read_text()
    )  # version 2: version 3 adds nothing
    assert {k: v for k, v in third["protocol"].items() if k in records.PROTOCOL} == {
        **records.PROTOCOL,
        "version": 2,
    }
    assert records.protocol_problems(records.Protocol()) == []
    bad = records.Protocol(passk=records.PassKEval(top_p=1.5), train=records.TrainProtocol(max_steps=0))
    assert records.protocol_problems(bad) == [
        "train.max_steps=0: give a whole number >= 1",
        "passk.top_p=1.5: give a number in (0, 1]",
    ]
    with pytest.raises(CompareError, match=r"max_steps=0: give a whole number >= 1"):
        records.protocol(overrides={"max_steps": 0})
    for name in (
        "pacs_vs_grpo_noise_steps.json",
        "pacs_vs_grpo_restatement_rule.json",
        "pacs_vs_grpo_restatement_leak.json",
    ):
        methods = json.loads((bench / name).read_text())["protocol"]["methods"]
        assert methods == {m: METHODS[m].overrides for m in methods}, (
            name
        )  # one meaning per name, as recorded
    for part in (records.Protocol, records.TrainProtocol, records.PassKEval, records.GreedyEval):
        for f in dataclasses.fields(part):  # a number has a domain: its declaration carries the check
            if f.type in ("int", "float"):
                assert declared(f).check is not None, f"{part.__name__}.{f.name}"


def test_every_option_of_compare_paired_is_declared_with_its_check():
    from pacs_rl.compare.cli import FIELDS, PairedOptions, option_problems

    for name, f in FIELDS.items():
        if f.type.startswith(("int", "float")):
            assert declared(f).check is not None, name
    assert option_problems(PairedOptions()) == []
    many = PairedOptions(workers=0, threads=0, max_pairs=0, first_seed=-1, full_seeds=-1, n=32, passk_every=0)
    assert [re.split("[:;]", p)[0] for p in option_problems(many)] == [
        "--workers 0", "--threads 0", "--n 32", "--passk-every 0", "--max-pairs 0", "--full-seeds -1",
        "--first-seed -1",
    ]  # fmt: skip


def test_the_older_preset_spelling_runs_the_sub_command_with_a_note(tmp_path):
    old = CliRunner().invoke(
        app, ["compare", "--preset", "pacs-vs-grpo", "--dry-run", "-o", str(tmp_path / "w")]
    )
    new = CliRunner().invoke(app, ["compare", "paired", "--dry-run", "-o", str(tmp_path / "w")])
    assert old.exit_code == new.exit_code == 0, old.output
    assert "note: --preset pacs-vs-grpo is now `pacs-rl compare paired`" in old.output
    assert old.output.split("\n", 1)[1] == new.output  # the same dry run after the note
    assert not (tmp_path / "w").exists()


_FAKE_PROCESSES: list[tuple[subprocess.Popen, bool]] = []  # (process, finished) of each _fake_start


def _fake_start(self, method, seed):
    """_Driver.start without training: the base model and seed 0 have their result written before their process
    starts (a process that ends at once), later seeds run on until stopped (a run in its evaluation when the time is
    up). However slowly the processes start, the first are finished and the others are not."""
    folder = self.folder_of(method, seed)
    folder.mkdir(parents=True, exist_ok=True)
    finished = seed in (None, 0)
    if finished:
        result = (
            {"method": "base", "greedy": {"accuracy": 0.1, "n": 10, "mean_length": 20.0}}
            if method is None
            else {
                **_run(method, seed, 0.5 + 0.1 * (method == "pacs")),
                "host": {"device": "NVIDIA H100", "wall_seconds": 1},
            }
        )
        (folder / paired.RESULT_FILE).write_text(json.dumps(result))
    proc = subprocess.Popen([sys.executable, "-c", "pass" if finished else "import time; time.sleep(120)"])
    self.running[proc] = (method, seed)
    _FAKE_PROCESSES.append((proc, finished))
    print(f"started {method or 'base'} seed {seed}", flush=True)


class _Clock:
    """The driver's clock (its module's ``time``): it moves only when the driver sleeps, so that what the driver
    does by --stop-after does not depend on how fast this machine runs it."""

    def __init__(self):
        self.now = 1.0e9

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_stop_after_ends_the_driver_in_time_keeping_its_finished_runs_for_merge(tmp_path, monkeypatch):
    """--stop-after: inside a call with a time limit, the driver stops its runs still going and exits cleanly
    at the limit, every finished run in its copy of the record; --merge then brings that copy's whole pairs into the
    record."""
    monkeypatch.setattr(drive._Driver, "start", _fake_start)
    monkeypatch.setattr(drive, "time", _Clock())
    _FAKE_PROCESSES.clear()
    copy, record = tmp_path / "gpu.json", tmp_path / "record.json"
    result = CliRunner().invoke(app, [*_paired_command(copy, tmp_path / "gpu"), "--methods", "pacs,grpo",
                                      "--workers", "4", "--stop-after", "4"])  # fmt: skip
    assert result.exit_code == 0, result.output
    # four at once: the base model, seed 0's pair and PACS's seed 1, which is still going at the end
    started = [x for x in result.output.splitlines() if x.startswith("started ")]
    assert started == [
        "started base seed None",
        "started pacs seed 0",
        "started grpo seed 0",
        "started pacs seed 1",
    ]
    assert "stopped after 4 s (--stop-after): 1 runs ended unfinished: pacs seed 1;" in result.output
    # the run still going was stopped (terminated), not waited for; the others had ended or were finished anyway
    assert [p.returncode for p, finished in _FAKE_PROCESSES if not finished] == [-signal.SIGTERM]
    held = json.loads(copy.read_text())
    assert sorted((r["method"], r["seed"]) for r in held["runs"]) == [("grpo", 0), ("pacs", 0)]
    assert held["base"]["greedy"]["accuracy"] == 0.1
    assert json.loads((tmp_path / "gpu" / drive.WORK_PROTOCOL).read_text()) == held["protocol"]
    paired.save_record(record, paired.new_record(paired.protocol(methods=["pacs", "grpo"], passk=False)))
    merged = CliRunner().invoke(app, [*_paired_command(record, tmp_path / "w"), "--merge", str(copy)])
    assert merged.exit_code == 0 and "added 2 runs" in merged.output and "run on NVIDIA H100" in merged.output


def test_no_run_starts_that_the_record_says_cannot_finish_before_stop_after(tmp_path, capsys):
    record = {"protocol": paired.protocol(methods=["pacs", "grpo"], passk=False), "base": {"greedy": {}},
              "runs": [{**_run("pacs", s, 0.5), "host": {"device": "cpu", "wall_seconds": w}}
                       for s, w in ((0, 100), (1, 300), (2, 200))]}  # fmt: skip
    for r in record["runs"]:
        r["dynamics"]["train_seconds"] = 90
    assert drive.run_seconds(record, "cpu") == 200 and drive.run_seconds(record, "NVIDIA H100") is None
    opts = paired.Options(record=tmp_path / "r.json", work=tmp_path, stop_after=150.0)
    assert not paired._Driver(opts, record).may_start()  # 150 s left, a run takes 200
    assert "no new run: a run here takes about 200 s" in capsys.readouterr().out
    assert paired._Driver(
        paired.Options(record=opts.record, work=tmp_path, stop_after=300.0), record
    ).may_start()
    assert paired._Driver(opts, record, device="NVIDIA H100").may_start()  # no run there yet: it may


def test_a_folder_of_another_protocols_runs_is_refused(tmp_path):
    proto = paired.protocol(methods=["pacs", "grpo"], passk=False)
    assert paired.work_problem(tmp_path / "new", proto) is None
    (tmp_path / "old" / "pacs" / "seed3").mkdir(
        parents=True
    )  # an older record's run folder, no protocol.json
    assert "holds run folders without a protocol.json" in paired.work_problem(tmp_path / "old", proto)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / drive.WORK_PROTOCOL).write_text(json.dumps(proto))
    assert paired.work_problem(tmp_path / "mine", proto) is None
    # the same record having taken on pass@k later: still its folder
    assert (
        paired.work_problem(tmp_path / "mine", paired.protocol(methods=["pacs", "grpo"], passk_every=2))
        is None
    )
    other = paired.protocol(methods=["pacs", "grpo"], overrides={"max_steps": 24}, passk=False)
    assert "holds the runs of another protocol" in paired.work_problem(tmp_path / "mine", other)


def test_the_growing_record_goes_on_under_this_code_in_its_own_format(tmp_path):
    """The fourth record (docs/benchmarks/pacs_vs_grpo.json, grown by the driver of an older pinned commit) is
    continued by this engine: read with the settings it is made with, it is taken as it is, and saved again it is
    the same file byte for byte, so the pinned driver and this one can each go on with what the other wrote."""
    script = load_script("benchmarks/pacs_vs_grpo.py")
    copy = tmp_path / "record.json"
    copy.write_text((REPO / script.RECORD).read_text())
    args = script.RUN[script.RUN.index("--methods") :]
    methods = args[1].split(",")
    steps = int(args[args.index("--max-steps") + 1])
    record = records.load_record(copy, {"max_steps": steps}, methods, passk=False)
    assert record == json.loads(copy.read_text())
    records.save_record(copy, record)
    assert copy.read_text() == (REPO / script.RECORD).read_text()
    result = CliRunner().invoke(app, ["compare", *script.RUN[:1], "--record", str(copy), "--output-dir",
                                      str(tmp_path / "w"), *args, "--dry-run"])  # fmt: skip
    assert result.exit_code == 0 and "every check passed" in result.output, result.output


def test_figures_of_the_fourth_record(tmp_path):
    """The fourth record's figures: its protocol names its last step in greedy_at (which its runs hold as their own
    greedy, not in greedy_at), and its pairs ran on two devices; a figure of pairs refuses a record of one pair."""
    record = json.loads((REPO / "docs/benchmarks/pacs_vs_grpo.json").read_text())
    assert record["protocol"]["greedy_at"] == [record["protocol"]["train"]["max_steps"]]
    for path in (
        figures.plot_comparison(record, tmp_path / "comparison.png"),
        figures.plot_pairs(record, tmp_path / "pairs.png"),
    ):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    one = {**record, "runs": [r for r in record["runs"] if r["seed"] == record["runs"][0]["seed"]]}
    with pytest.raises(ValueError, match="1 seeds hold both pacs and grpo"):
        figures.plot_pairs(one, tmp_path / "one.png")
