"""What a paired record keeps of each run's training (pacs_rl.compare.record.dynamics: the cut-off share, the
clips, the groups with both labels, the skipped steps, dynamic sampling), and the tables read from it
(pacs_rl.compare.collapses: per method, and the collapsed runs against the others in their first steps; the
stopping rule's line), on metrics files and records made here."""

from __future__ import annotations

import json

import pytest

from pacs_rl.compare import collapses, tables
from pacs_rl.compare import record as records


def _rows(loss_type: str = "grpo") -> list[dict]:
    """Six optimizer steps as a run logs them: two per rollout, the rollout's figures at its first step."""
    norms = [0.5, 2.0, 3.0, 0.0, 4.0, 0.8]
    no_signal = [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]  # the second rollout held no group with both labels
    rows = []
    for i in range(6):
        row = {"step": i + 1, "loss": 0.5, "grad_norm": norms[i], "reward": 0.1 * i, "entropy": 0.9,
               "groups/mixed_frac_minibatch": 0.0 if no_signal[i] else 0.5, "optimizer/skipped_no_signal": no_signal[i],
               "optimizer/skipped_nonfinite": 0.0, f"{loss_type}/clip_ratio_region": 0.01 * i, "step_time": 1.0}  # fmt: skip
        if i % 2 == 0:  # a rollout
            row.update({"completions/clipped_ratio": [0.25, 0.5, 0.0][i // 2], "completions/mean_length": 50.0,
                        "groups/mixed_frac": [0.5, 0.0, 0.25][i // 2]})  # fmt: skip
        rows.append(row)
    return rows


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_run_keeps_its_cut_offs_clips_groups_and_skipped_steps(tmp_path):
    out = records.dynamics(_write(tmp_path / "metrics.jsonl", _rows()), "grpo", max_grad_norm=1.0)
    c = out["curves"]
    assert c["cut_off"] == [0.25, None, 0.5, None, 0.0, None]  # logged at the rollout's step only
    assert c["mixed_groups"] == [0.5, None, 0.0, None, 0.25, None]
    assert c["mixed_groups_minibatch"] == [0.5, 0.5, 0.0, 0.0, 0.5, 0.5]
    assert c["skipped_no_signal"] == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert c["ratio_clipped"] == [0.0, 0.01, 0.02, 0.03, 0.04, 0.05]  # grpo/clip_ratio_region
    # the gradient clip acted where the norm passed 1.0 on a step the optimizer took (step 3 was skipped)
    assert c["grad_clipped"] == [0.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    assert not any(k.startswith("dynamic_sampling/") for k in c)  # a run without dynamic sampling
    unclipped = records.dynamics(tmp_path / "metrics.jsonl", "pacs", max_grad_norm=None)["curves"]
    assert "grad_clipped" not in unclipped  # no clip: no fraction of it
    assert "ratio_clipped" not in unclipped  # PACS logs no ratio clip (its rows are grpo's here)


def test_a_run_with_dynamic_sampling_keeps_its_figures(tmp_path):
    rows = _rows("pacs")
    for row, (sampled, kept) in zip(rows[::2], [(8, 4), (12, 2), (4, 4)], strict=True):
        row.update({"dynamic_sampling/groups_sampled": sampled, "dynamic_sampling/groups_kept": kept,
                    "dynamic_sampling/rounds": sampled / 4})  # fmt: skip
    c = records.dynamics(_write(tmp_path / "m.jsonl", rows), "pacs", None)["curves"]
    assert c["dynamic_sampling/groups_kept"] == [4.0, None, 2.0, None, 4.0, None]
    run = {"method": "pacs", "seed": 0, "greedy": {"accuracy": 0.5}, "dynamics": {"curves": c}}
    whole, early = collapses.run_figures(run), collapses.run_figures(run, first=2)
    assert whole["dynamic_sampling_kept"] == pytest.approx(10 / 24) and early["dynamic_sampling_kept"] == 0.5
    assert whole["dynamic_sampling_rounds"] == pytest.approx(2.0)


def _record_run(method, seed, accuracy, mixed, cut, clipped=None):
    """A run of a record whose first rollouts held ``mixed`` of their groups with both labels."""
    curves = {"mixed_groups": [mixed, None] * 3 + [0.9, None] * 3, "cut_off": [cut, None] * 6,
              "skipped_no_signal": [0.0] * 12, "grad_norm": [1.0] * 12, "reward": [mixed / 2] * 12,
              "entropy": [0.5] * 12, "length": [50.0] * 12}  # fmt: skip
    if clipped is not None:
        curves["grad_clipped"] = [clipped] * 12
    greedy = {"accuracy": accuracy, "mean_length": 50.0}
    return {"method": method, "seed": seed, "greedy": greedy, "dynamics": {"curves": curves}}


def _record():
    runs = [_record_run("pacs", 0, 0.05, 0.1, 0.6), _record_run("pacs", 1, 0.45, 0.3, 0.2),
            _record_run("pacs", 2, 0.55, 0.5, 0.2), _record_run("grpo", 0, 0.5, 0.2, 0.4, clipped=1.0),
            _record_run("grpo", 1, 0.15, 0.0, 0.8, clipped=0.5), _record_run("grpo", 2, 0.6, 0.4, 0.2, clipped=0.0)]  # fmt: skip
    return {"protocol": records.protocol(methods=["pacs", "grpo"], passk=False), "runs": runs}


def test_collapsed_runs_against_the_others_in_their_first_steps():
    record = _record()
    split = collapses.collapse_split(record, first=6)
    assert split["pacs"]["collapsed"]["seeds"] == [0] and split["pacs"]["others"]["seeds"] == [1, 2]
    assert split["grpo"]["collapsed"]["seeds"] == [1]
    assert split["all"]["collapsed"]["seeds"] == [0, 1]  # every method pooled: PACS's seed 0, GRPO's seed 1
    # the first six steps are three rollouts at the run's early figure; the later rollouts (0.9) are left out
    assert split["pacs"]["others"]["mean"]["mixed_groups"] == pytest.approx(0.4)
    assert split["pacs"]["collapsed"]["mean"]["cut_off"] == pytest.approx(0.6)
    assert split["grpo"]["others"]["mean"]["grad_clipped"] == pytest.approx(0.5)
    assert split["pacs"]["others"]["mean"]["grad_clipped"] is None  # PACS unclipped: no clip fraction
    assert split["all"]["others"]["mean"]["mixed_groups"] == pytest.approx((0.3 + 0.5 + 0.2 + 0.4) / 4)
    table = collapses.collapse_table(record)
    assert table.splitlines()[0] == (
        "| method | runs | cut off | grad clipped | both labels, rollout | skipped, no signal | reward | entropy "
        "| grad norm |"
    )  # no column of a figure no run logged (ratio clip, dynamic sampling, per-step groups)
    assert "| pacs | collapsed (1) | 60.0 | – | 10.0 | 0.0 | 5.0 | 0.5 | 1 |" in table
    assert "| grpo | others (2) | 30.0 | 50.0 | 30.0 |" in table
    whole = collapses.collapse_split(record, first=12)  # the whole run: the later rollouts count
    assert whole["pacs"]["others"]["mean"]["mixed_groups"] == pytest.approx((0.4 + 0.9) / 2)


def test_the_per_method_table_counts_collapses_and_means_whole_runs():
    record = _record()
    found = collapses.method_figures(record)
    assert found["pacs"]["runs"] == 3 and found["pacs"]["collapsed_seeds"] == [0]
    assert found["grpo"]["mean"]["grad_clipped"] == pytest.approx(0.5)
    table = collapses.dynamics_table(record)
    assert "| pacs | 3 | 1 (0) | 33.3 | – |" in table and "| grpo | 3 | 1 (1) | 46.7 | 50.0 |" in table


def test_steps_on_no_signal_counts_the_steps_the_optimizer_took_without_one():
    curves = {
        "mixed_groups": [0.5, None, 0.0, None, 0.0, None],
        "grad_norm": [2.0, 1.0, 0.0, 0.003, 0.0, 0.0],
    }
    found = collapses.steps_on_no_signal({"dynamics": {"curves": curves}})
    # the second rollout (steps 3, 4) and the third (5, 6) held no group of both labels; step 4 moved on rounding
    assert found == {"steps": 6, "no_signal": 4, "moved": 1, "moved_grad_norms": [0.003]}
    skipped = {**curves, "skipped_no_signal": [0.0, 0.0, 1.0, 1.0, 1.0, 1.0]}  # a run that skips them
    assert collapses.steps_on_no_signal({"dynamics": {"curves": skipped}})["moved"] == 0


def _pairs(diffs):
    runs = []
    for seed, d in enumerate(diffs):
        runs += [_record_run("grpo", seed, 0.4, 0.2, 0.1), _record_run("pacs", seed, 0.4 + d, 0.2, 0.1)]
    return {"protocol": records.protocol(methods=["pacs", "grpo"], passk=False), "runs": runs}


def test_the_stopping_rule_says_where_it_stands():
    assert tables.verdict(_pairs([0.1])) == "PACS - grpo: 1 pair(s), no interval yet"
    narrow = tables.verdict(_pairs([0.01, 0.02, 0.0, 0.01] * 3))  # at least MIN_PAIRS pairs, within ±5 pp
    assert narrow.startswith("PACS - grpo (greedy, last step): +1.0 pp [") and narrow.endswith("answered")
    early = tables.verdict(_pairs([0.01, 0.02, 0.0, 0.01]))  # as narrow, under ten pairs: not yet
    assert early.endswith(f"but the rule holds from {records.MIN_PAIRS} pairs on ({records.MIN_PAIRS - 4} more)")
    wide = _pairs([0.3, -0.3, 0.25, -0.2, 0.1])
    gap = records.summarize(wide)["grpo"]["pacs_minus_this"]["greedy_accuracy"]
    going = tables.verdict(wide)
    assert f"±5 pp needs about {gap['pairs_needed']} pairs (the record stops at 40)" in going
    assert f"(paired SD {100 * gap['sd']:.1f} pp)" in going
    stopped = tables.verdict(wide, max_pairs=5)  # at the cap: it says so, with the figure
    assert stopped.endswith(
        f"the record stopped at 5 pairs; at this spread ±5 pp would need about {gap['pairs_needed']} pairs"
    )
