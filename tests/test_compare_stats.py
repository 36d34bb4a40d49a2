"""pacs-rl compare without training: the plan, sweeps, manifest refusal, the paper-style table with
mean ± SE, and the paired sign-flip test against hand-computed values."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pacs_rl.compare.methods import METHODS
from pacs_rl.compare.plan import (
    PRESETS,
    CompareError,
    ManifestMismatch,
    as_recorded,
    build_plan,
    grader_note,
    parse_sweep,
    resolve_settings,
    sweep_table,
    write_or_check_manifest,
)
from pacs_rl.compare.report import passk_table
from pacs_rl.compare.stats import mean_se, paired_interval, sign_flip_test


# ---------------------------------------------------------------- statistics
@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.7062), (2, 4.3027), (4, 2.7764), (3, 3.1824), (9, 2.2622), (30, 2.0423), (100, 1.9840)],
)
def test_paired_interval_takes_students_t_from_the_table(df, expected):
    """Half-width = t(0.975, pairs - 1) x SD / sqrt(pairs), t read from a printed table."""
    diffs = [(-1.0) ** i * (1 + i % 3) for i in range(df + 1)]
    out = paired_interval(diffs)
    assert out["half_width"] == pytest.approx(expected * out["sd"] / math.sqrt(df + 1), abs=1e-4 * out["sd"])


def test_paired_interval_states_the_pairs_a_target_needs_only_when_asked():
    diffs = [0.10, -0.05, 0.20, 0.05]
    assert "pairs_needed" not in paired_interval(diffs)
    assert paired_interval(diffs, 0.10)["pairs_needed"] < paired_interval(diffs, 0.05)["pairs_needed"]


def test_mean_se_by_hand():
    m, se = mean_se([10.0, 20.0])
    assert m == 15.0
    assert se == pytest.approx(math.sqrt(50.0) / math.sqrt(2))  # sd = √((25+25)/1), SE = sd/√2 = 5
    assert se == pytest.approx(5.0)
    m1, se1 = mean_se([3.0])
    assert m1 == 3.0 and math.isnan(se1)


def test_sign_flip_exact_four_problems_by_hand():
    # |d| = (0.5, 0.25, 0.25, 0.75), observed |Σd| = 1.25. Of the 16 sign patterns, |Σ s|d|| >= 1.25 holds
    # for: all +  (1.75), one of the two 0.25 flipped (1.25, 1.25), and the three mirror images: 6 / 16.
    d = [0.5, -0.25, 0.25, 0.75]
    t = sign_flip_test(d)
    assert t["method"] == "exact" and t["n_nonzero"] == 4
    assert t["p_value"] == pytest.approx(6 / 16)
    assert t["mean"] == pytest.approx(1.25 / 4)
    sd = math.sqrt(sum((x - 0.3125) ** 2 for x in d) / 3)
    assert t["se"] == pytest.approx(sd / 2)


def test_sign_flip_zeros_carry_no_sign_and_all_zero_gives_one():
    # one non-zero difference: both signs give |Σ| = 0.5 >= 0.5, so p = 1
    assert sign_flip_test([0.0, 0.5, 0.0])["p_value"] == 1.0
    assert sign_flip_test([0.0, 0.0])["p_value"] == 1.0
    # five equal positive differences: only the all-+ and all-− patterns reach |Σ| = 5: p = 2 / 32
    assert sign_flip_test([1.0] * 5)["p_value"] == pytest.approx(2 / 32)


def test_sign_flip_monte_carlo_beyond_exact_limit():
    # 25 equal differences: exact p = 2 / 2^25 ≈ 6e-8, so 999 random patterns almost surely never reach it
    t = sign_flip_test([1.0] * 25, n_draws=999, seed=0)
    assert t["method"] == "monte-carlo"
    assert t["p_value"] == pytest.approx(1 / 1000)  # the +1 correction: (1 + 0) / (1 + 999)
    with pytest.raises(ValueError, match="nan"):
        sign_flip_test([1.0, float("nan")])


# ---------------------------------------------------------------- table
def test_passk_table_mean_se_bold_and_underline():
    rows = [
        ("Base", {1: [5.0], 2: [50.0]}),  # one evaluation: no ±
        ("A", {1: [10.0, 20.0], 2: [40.0, 40.0]}),  # 15 ± 5, 40 ± 0
        ("B", {1: [30.0, 30.0], 2: [60.0, 20.0]}),  # 30 ± 0, 40 ± 20
    ]
    md = passk_table(rows, [1, 2], "### t")
    lines = md.splitlines()
    assert lines[2] == "| Model | k = 1 | 2 |"
    assert lines[4] == "| Base | 5.00 | **50.00** |"
    assert lines[5] == "| A | <u>15.00 ± 5.00</u> | <u>40.00 ± 0.00</u> |"
    assert lines[6] == "| B | **30.00 ± 0.00** | <u>40.00 ± 20.00</u> |"  # ties share the mark


# ---------------------------------------------------------------- plan and manifest
def test_parse_sweep_types_and_errors():
    assert parse_sweep("pacs_beta=0.1,1,10") == ("pacs_beta", [0.1, 1.0, 10.0])
    assert parse_sweep("pacs_score=rloo,grpo") == ("pacs_score", ["rloo", "grpo"])
    assert parse_sweep("pacs_weighted=true,false") == ("pacs_weighted", [True, False])
    with pytest.raises(CompareError, match=r"pacs_beta=.big.: expected float"):
        parse_sweep("pacs_beta=big")
    with pytest.raises(CompareError, match="not a PACSConfig field"):
        parse_sweep("nonsense=1")


def test_plan_sweep_variants_and_dedupe():
    s = resolve_settings(
        preset="smoke",
        cli={"methods": ["pacs", "grpo"], "seeds": [0, 1], "sweeps": {"pacs_beta": [0.1, 1.0, 10.0]}},
    )
    plan = build_plan(s)
    variants = list(dict.fromkeys(p.variant for p in plan))
    # β = 1 is PACS's default: it is the plain "pacs" run, not trained twice; GRPO has no β
    assert variants == ["pacs", "grpo", "pacs[pacs_beta=0.1]", "pacs[pacs_beta=10]"]
    assert len(plan) == 4 * 2
    assert sweep_table(s, plan) == {
        "pacs_beta": {"pacs": {0.1: "pacs[pacs_beta=0.1]", 1.0: "pacs", 10.0: "pacs[pacs_beta=10]"}}
    }
    nw = resolve_settings(preset="smoke", cli={"methods": ["pacs_no_weight", "pacs_clip"]})
    assert [p.overrides for p in build_plan(nw)] == [
        METHODS["pacs_no_weight"].overrides,
        METHODS["pacs_clip"].overrides,
    ]


def test_one_method_table_one_meaning_per_name(tmp_path):
    """`pacs-rl compare` and `compare paired` read one table: pacs unclipped as its authors ran it, pacs_clip at 1.0;
    a comparison folder made when pacs meant the CPU default's clip keeps its recorded overrides on resume."""
    from pacs_rl.compare.methods import method_names
    from pacs_rl.compare.paired.record import protocol

    assert (
        METHODS["pacs"].overrides["max_grad_norm"] is None
        and METHODS["pacs_clip"].overrides["max_grad_norm"] == 1.0
    )
    assert protocol(methods=["pacs", "pacs_clip", "grpo"])["methods"] == {
        m: METHODS[m].overrides for m in ("pacs", "pacs_clip", "grpo")
    }
    s = resolve_settings(preset="smoke")
    assert {p.method: p.overrides for p in build_plan(s)} == {
        m: METHODS[m].overrides for m in ("pacs", "grpo")
    }
    assert method_names()[:3] == ["pacs", "pacs_clip", "pacs_no_weight"] and "ppo" in method_names()
    old = write_or_check_manifest(
        tmp_path, s, build_plan(s)
    )  # as an earlier version wrote it: pacs = loss_type only
    old["runs"][0]["overrides"] = {"loss_type": "pacs"}
    plan, lines = as_recorded(build_plan(s), old)
    assert plan[0].overrides == {"loss_type": "pacs"} and plan[1].overrides == METHODS["grpo"].overrides
    assert lines == [f"pacs: this folder's runs keep the settings they were trained with, {{'loss_type': 'pacs'}}; "
                     f"a new folder's pacs is {METHODS['pacs'].overrides}"]  # fmt: skip


def test_settings_errors_name_the_setting():
    with pytest.raises(CompareError, match="unknown method"):
        resolve_settings(preset="smoke", cli={"methods": ["pacs", "ppo2"]})
    with pytest.raises(CompareError, match=r"train\.seed is set by the comparison"):
        resolve_settings(preset="smoke", config={"train": {"seed": 3}})
    with pytest.raises(
        CompareError, match="neither a data setting nor a PACSConfig field; did you mean max_steps"
    ):
        resolve_settings(preset="smoke", config={"train": {"max_stepz": 3}})
    with pytest.raises(CompareError, match="unknown"):
        resolve_settings(preset="nope")
    with pytest.raises(CompareError, match=r"eval\.grader 'lenient': unknown base grader"):
        resolve_settings(preset="smoke", config={"eval": {"grader": "lenient"}})
    assert resolve_settings(preset="smoke")["eval"]["grader"] == "auto"  # paper on the paper's benchmarks
    assert (
        grader_note(resolve_settings(preset="smoke")["eval"]) == " (sound)"
    )  # arithmetic: the training grader
    assert (
        grader_note({"benchmarks": ["math500", "arithmetic"]}) == " (paper on math500, sound on arithmetic)"
    )
    assert grader_note({"grader": "paper", "benchmarks": ["arithmetic"]}) == ""


def test_method_settings_change_one_method_and_never_the_budget():
    per_method = {
        "grpo": {"max_grad_norm": 1.0, "loss_options": {"clip_ratio_c": 3.0}},
        "pacs": {"max_grad_norm": None},
    }
    s = resolve_settings(preset="smoke", config={"method_settings": per_method})
    overrides = {p.variant: p.overrides for p in build_plan(s)}
    assert overrides["grpo"] == {
        "loss_type": "grpo",
        "max_grad_norm": 1.0,
        "loss_options": {"clip_ratio_c": 3.0},
    }
    assert overrides["pacs"] == {"loss_type": "pacs", "max_grad_norm": None}
    from pacs_rl.compare.execute import check_methods_buildable

    check_methods_buildable(s)
    ppo = resolve_settings(
        preset="smoke",
        cli={"methods": ["pacs", "ppo"]},
        config={"method_settings": {"ppo": {"critic_loss_agg_mode": "seq-mean-token-sum-norm"}}},
    )
    assert build_plan(ppo)[1].overrides["critic_loss_agg_mode"] == "seq-mean-token-sum-norm"
    for bad, message in [
        ({"grpo": {"max_steps": 4}}, r"method_settings\.grpo\.max_steps: max_steps must be the same"),
        ({"grpo": {"temperature": 0.5}}, "must be the same for every method"),
        ({"ppo": {"max_grad_norm": 1.0}}, "not among the methods"),
        ({"grpo": {"critic_loss_agg_mode": "token-mean"}}, r"not a field of grpo's config"),
        ({"grpo": {"loss_type": "rloo"}}, "must be the same for every method"),
    ]:
        with pytest.raises(CompareError, match=message):
            resolve_settings(preset="smoke", config={"method_settings": bad})
    assert "method_settings" not in resolve_settings(
        preset="smoke"
    )  # absent unless given: old manifests match


def test_manifest_refuses_other_settings(tmp_path):
    s = resolve_settings(preset="smoke")
    write_or_check_manifest(tmp_path, s, build_plan(s))
    first = json.loads((tmp_path / "manifest.json").read_text())
    assert [r["key"] for r in first["runs"]] == ["pacs/seed0", "grpo/seed0"]
    write_or_check_manifest(tmp_path, s, build_plan(s))  # same settings: accepted
    other = resolve_settings(preset="smoke", cli={"train": {"max_steps": 3}, "seeds": [0, 1]})
    with pytest.raises(ManifestMismatch) as e:
        write_or_check_manifest(tmp_path, other, build_plan(other))
    msg = str(e.value)
    assert "train.max_steps: folder has 2, this command has 3" in msg
    assert "seeds: folder has [0], this command has [0, 1]" in msg
    assert "another --output" in msg
    np.testing.assert_equal(json.loads((tmp_path / "manifest.json").read_text()), first)  # unchanged


def test_shipped_configs_resolve_and_cpu_small_matches_preset():
    from pathlib import Path

    from pacs_rl.compare.plan import load_settings_file

    configs = Path(__file__).resolve().parents[1] / "configs"
    from_file = resolve_settings(config=load_settings_file(configs / "compare_cpu_small.yaml"))
    preset = resolve_settings(preset="cpu-small")
    assert {k: v for k, v in from_file.items() if k != "preset"} == {
        k: v for k, v in preset.items() if k != "preset"
    }
    sweep = resolve_settings(config=load_settings_file(configs / "compare_beta_sweep.yaml"))
    variants = list(dict.fromkeys(s.variant for s in build_plan(sweep)))
    assert variants == [
        "pacs",
        "pacs[pacs_beta=0.1]",
        "pacs[pacs_beta=0.5]",
        "pacs[pacs_beta=2]",
        "pacs[pacs_beta=10]",
    ]
    paper = resolve_settings(config=load_settings_file(configs / "compare_paper_7b.yaml"))
    assert paper["eval"]["backend"] == "vllm" and paper["train"]["max_steps"] == 1200


# ---------------------------------------------------------------- report from made-up finished folders
def _fake_eval(folder, counts, n):
    folder.mkdir(parents=True)
    rows = [
        {"problem_id": f"p{i}", "sample_index": j, "score": float(j < c)}
        for i, c in enumerate(counts)
        for j in range(n)
    ]
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "metrics.json").write_text(json.dumps({"n": n, "ks": [1, 2], "num_problems": len(counts)}))


def test_report_paired_test_and_sweep_from_made_up_runs(tmp_path):
    from pacs_rl.compare.plan import eval_dir_of
    from pacs_rl.compare.report import write_comparison_report

    s = resolve_settings(
        preset="smoke",
        cli={
            "seeds": [0, 1],
            "sweeps": {"pacs_beta": [0.1, 1.0]},
            "eval": {"benchmarks": ["b"], "n": 2, "ks": [1, 2]},
        },
    )
    plan = build_plan(s)
    counts = {  # correct samples of 2 per problem, per (variant, seed)
        ("pacs", 0): [2, 1, 0, 2],
        ("pacs", 1): [2, 1, 1, 2],
        ("grpo", 0): [1, 1, 0, 0],
        ("grpo", 1): [1, 0, 0, 0],
        ("pacs[pacs_beta=0.1]", 0): [0, 0, 0, 0],
        ("pacs[pacs_beta=0.1]", 1): [2, 2, 2, 2],
    }
    _fake_eval(eval_dir_of(tmp_path, None, "b"), [0, 0, 0, 0], 2)
    for spec in plan:
        _fake_eval(eval_dir_of(tmp_path, spec, "b"), counts[(spec.variant, spec.seed)], 2)
        run = tmp_path / spec.folder
        rows = [{"step": t, "entropy": 1.0 + t, "grad_norm": 0.5, "completions/mean_length": 8, "reward": 0.1,
                 "pacs/critic_auc": 0.6, "pacs/brier": 0.2, "pacs/prob_mean": 0.4, "pacs/reward_mean": 0.3}
                for t in (1, 2)]  # fmt: skip
        (run).mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    md = write_comparison_report(tmp_path, s, plan).read_text()

    # PACS per-problem pass@1 over seeds: (1, .5, .25, 1); GRPO: (.5, .25, 0, 0); d = (.5, .25, .25, 1), all
    # positive: only the all-+ and all-− sign patterns reach |Σd| = 2, so p = 2/16; mean d = 50 pp
    sd = np.std([50, 25, 25, 100], ddof=1) / 2
    assert f"| b | PACS − GRPO | 4 | 2 vs 2 | +50.00 | {sd:.2f} | 0.125 (exact, 4 non-zero) |" in md
    # pass@1 table: PACS seeds 62.5, 75 -> 68.75 ± 6.25 (best); β=0.1 seeds 0, 100 -> 50 ± 50 (second)
    assert "| PACS | **68.75 ± 6.25** |" in md
    assert "| GRPO | 18.75 ± 6.25 |" in md
    assert "| PACS[pacs_beta=0.1] | <u>50.00 ± 50.00</u> |" in md
    assert "| Base | 0.00 |" in md
    assert "| pacs_beta = 0.1 | <u>50.00 ± 50.00</u> |" in md
    assert "| pacs_beta = 1.0 | **68.75 ± 6.25** |" in md
    for png in ("passk_curves.png", "training_dynamics.png", "critic.png", "critic_calibration.png"):
        assert (tmp_path / png).stat().st_size > 1000
    assert any(tmp_path.glob("sweep_pacs_beta_pacs_*.png"))
    assert "not finished" in md  # no run has its final model: the report says so


def test_every_method_builds_its_config_before_training():
    """PPO is built with PPOConfig (its own config class); a bad setting is refused before any training."""
    from pacs_rl.compare.execute import check_methods_buildable

    check_methods_buildable(resolve_settings(preset="smoke", cli={"methods": ["pacs", "grpo", "ppo"]}))
    bad = resolve_settings(preset="smoke", cli={"methods": ["ppo"]})
    bad["train"]["gae_lambda"] = 2.0
    with pytest.raises(CompareError, match="'ppo' cannot be trained"):
        check_methods_buildable(bad)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_preset_trains_and_evaluates_on_the_same_arithmetic_task(preset):
    """A comparison's arithmetic source strings read as the evaluation reads them (not as `pacs-rl train`'s
    CPU default task), so the training set loads and draws the operators and operand lengths it is tested on."""
    from pacs_rl.compare.execute import check_training_data, training_settings
    from pacs_rl.compare.plan import build_plan
    from pacs_rl.data import load_problems
    from pacs_rl.training.data import load_run_data

    settings = resolve_settings(preset=preset)
    check_training_data(settings)
    run, _ = training_settings(settings, build_plan(settings)[0], "base")
    train, _ = load_run_data(run, seed=0)

    def task(problems):
        return {p.extras["op"] for p in problems}, {
            (len(str(p.extras["a"])), len(str(p.extras["b"]))) for p in problems
        }

    held = [p for b in settings["eval"]["benchmarks"] for p in load_problems(b)]
    train_ops, train_lengths = task(train)
    held_ops, held_lengths = task(held)
    assert train_ops == held_ops
    assert train_lengths <= {(a, b) for a in (1, 2) for b in (1, 2)} and max(train_lengths) == max(
        held_lengths
    )


def test_compare_settings_are_declared_with_their_checks_and_refused_by_name():
    """The comparison's settings (top level and eval section) are declarations: their defaults are the settings' own,
    every number or enumeration carries its check, and a value out of its domain is refused naming the setting."""
    from pacs_rl.compare.plan import EVAL_DEFAULTS, EVAL_FIELDS, TOP_FIELDS
    from pacs_rl.settings.declarations import declared

    s = resolve_settings()
    assert s["eval"] == EVAL_DEFAULTS and (s["methods"], s["seeds"]) == (["pacs", "grpo"], [0])
    for name, f in {**TOP_FIELDS, **EVAL_FIELDS}.items():
        domain = ("int", "float", "tuple[str", "tuple[int, ...]", "str") if name != "model" else ()
        if f.type.startswith(domain) and name != "plain_prompt":
            assert declared(f).check is not None, name
    for section, bad, message in [
        ("eval", {"temperature": -0.5}, r"eval\.temperature=-0\.5: give a number >= 0"),
        ("eval", {"temperature": "hot"}, r"eval\.temperature='hot': expected float"),
        ("eval", {"top_p": 0}, r"eval\.top_p=0: give a number in \(0, 1\]"),
        ("eval", {"batch_size": 0}, r"eval\.batch_size=0: give a whole number >= 1"),
        ("eval", {"backend": "sglang"}, r"eval\.backend='sglang': choose transformers or vllm"),
        ("eval", {"ks": [0, 1]}, r"eval\.ks=\[0, 1\]: give whole numbers >= 1"),
        ("eval", {"n": "math500=0"}, r"eval\.n: --n 'math500=0': samples per problem must be >= 1"),
        ("eval", {"benchmarks": []}, r"eval\.benchmarks is empty"),
        (None, {"seeds": [0, -1]}, "seeds must be a non-empty list of distinct whole numbers >= 0"),
        (None, {"methods": []}, "--methods is empty"),
    ]:
        with pytest.raises(CompareError, match=message):
            resolve_settings(preset="smoke", config={section: bad} if section else bad)
