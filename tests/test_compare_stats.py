"""pacs-rl compare without training: the plan (methods, variants and sweeps, each checked as `pacs-rl train` checks
it), a record of other settings refused, the paper-style table with mean ± SE, and the paired sign-flip test against
hand-computed values."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pacs_rl.compare.methods import METHODS, CompareError
from pacs_rl.compare.plan import (
    PRESETS,
    comparison_protocol,
    grader_note,
    parse_sweep,
    resolve_settings,
    sweep_table,
    variants,
)
from pacs_rl.compare.record import open_record, save_record
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
    with pytest.raises(
        CompareError, match=r"unknown setting 'pacs_bta' in --sweep 'pacs_bta=1'. Did you mean: pacs_beta\?"
    ):
        parse_sweep("pacs_bta=1")


def test_plan_sweep_variants_and_dedupe():
    s = resolve_settings(
        preset="smoke",
        cli={"methods": ["pacs", "grpo"], "seeds": [0, 1], "sweeps": {"pacs_beta": [0.1, 1.0, 10.0]}},
    )
    # β = 1 is PACS's default: it is the plain "pacs" run, not trained twice; GRPO has no β
    assert list(variants(s)) == ["pacs", "grpo", "pacs[pacs_beta=0.1]", "pacs[pacs_beta=10]"]
    assert sweep_table(s) == {
        "pacs_beta": {"pacs": [[0.1, "pacs[pacs_beta=0.1]"], [1.0, "pacs"], [10.0, "pacs[pacs_beta=10]"]]}
    }
    # the sweep is a spelling of variants: the same variants listed give the same plan
    listed = resolve_settings(preset="smoke", cli={"methods": ["pacs", "grpo", "pacs[pacs_beta=0.1]",
                                                               "pacs[pacs_beta=10]"]})  # fmt: skip
    assert variants(listed) == variants(s)
    nw = resolve_settings(preset="smoke", cli={"methods": ["pacs_no_weight", "pacs_clip"]})
    assert list(variants(nw).values()) == [
        METHODS["pacs_no_weight"].overrides,
        METHODS["pacs_clip"].overrides,
    ]
    # a variant of a listed variant, and every registered loss as a method
    frozen = resolve_settings(preset="smoke", cli={"methods": ["pacs[reference=frozen]", "dr_grpo", "rloo", "ppo"],
                                                   "sweeps": {"pacs_beta": [0.5]}})  # fmt: skip
    assert list(variants(frozen)) == ["pacs[reference=frozen]", "dr_grpo", "rloo", "ppo",
                                      "pacs[reference=frozen,pacs_beta=0.5]"]  # fmt: skip


def test_every_variant_is_checked_as_train_checks_it():
    """Each method and variant, each sweep value and each run's whole config, refused by name before anything runs
    when `pacs-rl train` would refuse it; a method given twice, or one that trains as another, refused too."""
    for cli, message in [
        (
            {"sweeps": {"pacs_beta": [0.0, 1.0]}},
            r"--sweep pacs_beta=0 \(pacs\): pacs_beta=0.0: give a number > 0",
        ),
        (
            {"methods": ["pacs[pacs_beta=0]"]},
            r"--methods 'pacs\[pacs_beta=0\]': pacs_beta=0: give a number > 0",
        ),
        (
            {"methods": ["pacs[nosuchkey=1]"]},
            r"unknown setting 'nosuchkey' in --methods 'pacs\[nosuchkey=1\]'",
        ),
        ({"methods": ["pacs[pacs_bta=1]"]}, r"Did you mean: pacs_beta\?"),
        ({"methods": ["pacs[seed=3]"]}, "seed is set by the comparison itself"),
        ({"methods": ["grpo[num_generations=3]"]}, "with the train section: .*num_generations"),
        ({"methods": ["pacs", "pacs"]}, "lists a method twice"),
        ({"methods": ["pacs", "pacs[pacs_beta=1.0]"]}, r"pacs\[pacs_beta=1.0\] trains as pacs"),
        ({"methods": ["grpo"], "sweeps": {"pacs_beta": [0.5]}}, "none of the methods .* has pacs_beta"),
        ({"methods": ["nosuch"]}, r"unknown method\(s\) \['nosuch'\]"),
    ]:
        with pytest.raises(CompareError, match=message):
            resolve_settings(preset="smoke", cli=cli)


def test_one_method_table_one_meaning_per_name(tmp_path):
    """`pacs-rl compare` and `compare paired` read one table: pacs unclipped as its authors ran it, pacs_clip at 1.0;
    a record keeps the overrides its runs were trained with, so a comparison whose pacs meant otherwise is refused,
    naming the difference, rather than trained on with another meaning."""
    from pacs_rl.compare.methods import method_names
    from pacs_rl.compare.record import protocol

    assert (
        METHODS["pacs"].overrides["max_grad_norm"] is None
        and METHODS["pacs_clip"].overrides["max_grad_norm"] == 1.0
    )
    assert protocol(methods=["pacs", "pacs_clip", "grpo"])["methods"] == {
        m: METHODS[m].overrides for m in ("pacs", "pacs_clip", "grpo")
    }
    s = resolve_settings(preset="smoke")
    assert variants(s) == {m: METHODS[m].overrides for m in ("pacs", "grpo")}
    assert method_names()[:3] == ["pacs", "pacs_clip", "pacs_no_weight"] and "ppo" in method_names()
    proto = comparison_protocol(s)
    old = {"what": "", "protocol": json.loads(json.dumps(proto)), "runs": [], "base": None}
    old["protocol"]["methods"]["pacs"] = {"loss_type": "pacs"}  # as an earlier version recorded it
    save_record(tmp_path / "record.json", old)
    with pytest.raises(CompareError, match=r"methods.pacs.max_grad_norm: absent against None"):
        open_record(tmp_path / "record.json", proto, "")


def test_settings_errors_name_the_setting():
    with pytest.raises(CompareError, match="unknown method"):
        resolve_settings(preset="smoke", cli={"methods": ["pacs", "ppo2"]})
    with pytest.raises(CompareError, match=r"train\.seed is set by the comparison"):
        resolve_settings(preset="smoke", config={"train": {"seed": 3}})
    with pytest.raises(CompareError, match=r"unknown setting 'max_stepz' in train. Did you mean: max_steps"):
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
    overrides = variants(s)
    assert overrides["grpo"] == {
        "loss_type": "grpo",
        "max_grad_norm": 1.0,
        "loss_options": {"clip_ratio_c": 3.0},
    }
    assert overrides["pacs"] == {"loss_type": "pacs", "max_grad_norm": None}
    ppo = resolve_settings(
        preset="smoke",
        cli={"methods": ["pacs", "ppo"]},
        config={"method_settings": {"ppo": {"critic_loss_agg_mode": "seq-mean-token-sum-norm"}}},
    )
    assert variants(ppo)["ppo"]["critic_loss_agg_mode"] == "seq-mean-token-sum-norm"
    for bad, message in [
        ({"grpo": {"max_steps": 4}}, r"method_settings\.grpo\.max_steps: max_steps must be the same"),
        ({"grpo": {"temperature": 0.5}}, "must be the same for every method"),
        ({"ppo": {"max_grad_norm": 1.0}}, "not among the methods"),
        (
            {"grpo": {"critic_loss_agg_mode": "token-mean"}},
            r"critic_loss_agg_mode only apply to loss_type='ppo'",
        ),
        ({"grpo": {"loss_type": "rloo"}}, "loss_type is set by the comparison itself"),
        ({"pacs": {"pacs_beta": -1}}, r"\(with method_settings.pacs\): pacs_beta=-1: give a number > 0"),
    ]:
        with pytest.raises(CompareError, match=message):
            resolve_settings(preset="smoke", config={"method_settings": bad})
    assert "method_settings" not in resolve_settings(preset="smoke")  # absent unless given


def test_a_record_of_other_settings_is_refused_naming_each_and_more_seeds_go_on(tmp_path):
    s = resolve_settings(preset="smoke")
    path = tmp_path / "record.json"
    record = open_record(path, comparison_protocol(s), "")
    save_record(path, record)
    first = json.loads(path.read_text())
    more = resolve_settings(preset="smoke", cli={"seeds": [0, 1]})
    assert (
        open_record(path, comparison_protocol(more), "")["protocol"] == first["protocol"]
    )  # seeds are added
    other = resolve_settings(preset="smoke", cli={"train": {"max_steps": 3}, "eval": {"n": 2, "ks": [1, 2]}})
    with pytest.raises(CompareError) as e:
        open_record(path, comparison_protocol(other), "")
    msg = str(e.value)
    assert "train.max_steps: 2 against 3" in msg and "eval.n: 4 against 2" in msg
    assert "give a new --output-dir" in msg
    np.testing.assert_equal(json.loads(path.read_text()), first)  # unchanged


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
    assert list(variants(sweep)) == [
        "pacs",
        "pacs[pacs_beta=0.1]",
        "pacs[pacs_beta=0.5]",
        "pacs[pacs_beta=2]",
        "pacs[pacs_beta=10]",
    ]
    paper = resolve_settings(config=load_settings_file(configs / "compare_paper_7b.yaml"))
    assert paper["eval"]["backend"] == "vllm" and paper["train"]["max_steps"] == 1200


# ---------------------------------------------------------------- the report, a view over made-up records
def _evaluated(counts: list[int], n: int) -> dict:
    """A run's evaluation as a record holds it: its pass@k (eq. 10 of the counts) and the counts."""
    from pacs_rl.algorithms.passk import mean_pass_at_k

    return {"n": n, "ks": [1, 2], "num_problems": len(counts), "correct": {f"p{i}": c for i, c in enumerate(counts)},
            "pass_at_k": {str(k): v for k, v in mean_pass_at_k([n] * len(counts), counts, [1, 2]).items()}}  # fmt: skip


def test_report_paired_test_and_sweep_from_made_up_runs(tmp_path):
    from pacs_rl.compare.report import write_comparison_report

    s = resolve_settings(
        preset="smoke",
        cli={
            "seeds": [0, 1],
            "sweeps": {"pacs_beta": [0.1, 1.0]},
            "eval": {"benchmarks": ["b"], "n": 2, "ks": [1, 2]},
        },
    )
    counts = {  # correct samples of 2 per problem, per (variant, seed)
        ("pacs", 0): [2, 1, 0, 2],
        ("pacs", 1): [2, 1, 1, 2],
        ("grpo", 0): [1, 1, 0, 0],
        ("grpo", 1): [1, 0, 0, 0],
        ("pacs[pacs_beta=0.1]", 0): [0, 0, 0, 0],
        ("pacs[pacs_beta=0.1]", 1): [2, 2, 2, 2],
    }
    curves = {"entropy": [2.0, 3.0], "grad_norm": [0.5, 0.5], "length": [8, 8], "reward": [0.1, 0.1],
              "critic_auc": [0.6, 0.6], "critic_prob": [0.4, 0.4], "critic_reward": [0.3, 0.3]}  # fmt: skip
    record = {"protocol": comparison_protocol(s), "base": {"evals": {"b": _evaluated([0, 0, 0, 0], 2)}},
              "runs": [{"method": v, "seed": seed, "evals": {"b": _evaluated(c, 2)},
                        "dynamics": {"steps": 2, "curves": curves}} for (v, seed), c in counts.items()]}  # fmt: skip
    md = write_comparison_report(record, tmp_path, [0, 1, 2]).read_text()

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
    assert "3 of 9 training runs are not finished: pacs/seed2, grpo/seed2, pacs[pacs_beta=0.1]/seed2" in md


def test_an_earlier_comparison_folder_reads_as_a_record():
    """The cpu-small comparison in docs/results (made before comparisons kept a record: a manifest, its evaluations'
    metrics) is read as a record: the report drawn from it gives the pass@k table its own report.md holds."""
    from pathlib import Path

    from pacs_rl.compare.methods import method_label
    from pacs_rl.compare.report import collect, legacy_record, passk_section

    folder = Path(__file__).resolve().parents[1] / "docs" / "results" / "cpu-small"
    record = legacy_record(folder)
    assert list(record["protocol"]["methods"]) == ["pacs", "grpo", "ppo"] and record["seeds"] == [0, 1]
    assert record["protocol"]["methods"]["pacs"] == {"loss_type": "pacs"}  # as its runs were trained
    labels = {v: method_label(v) for v in record["protocol"]["methods"]}
    benches = collect(record)
    table = "\n".join(passk_section(benches, labels, {b: [1, 2, 4] for b in benches})[0])
    kept = (folder / "report.md").read_text()
    for row in ("| Base | **7.03** | **11.98** | **20.31** |", "| PACS | <u>5.47 ± 1.56</u> | <u>9.90 ± 2.86</u> |",
                "| GRPO | 4.30 ± 1.56 | 7.16 ± 1.69 | 11.72 ± 0.78 |", "| PPO | 2.34 ± 0.78 | 4.17 ± 1.04 | 7.03 ± 0.78 |"):  # fmt: skip
        assert row in table and row in kept, row


def test_every_method_is_checked_with_its_own_config_before_training():
    """PPO's critic fields are PPO's (its own config class); a value out of a field's domain is refused before any
    run starts, whether a method's setting or a variant's."""
    resolve_settings(preset="smoke", cli={"methods": ["pacs", "grpo", "ppo[gae_lambda=0.9]"]})
    for cli, config in [({"methods": ["ppo[gae_lambda=2.0]"]}, None),
                        ({"methods": ["ppo"]}, {"method_settings": {"ppo": {"gae_lambda": 2.0}}})]:  # fmt: skip
        with pytest.raises(CompareError, match=r"gae_lambda=2.0: give a number in \[0, 1\]"):
            resolve_settings(preset="smoke", cli=cli, config=config)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_preset_trains_and_evaluates_on_the_same_arithmetic_task(preset, monkeypatch):
    """A comparison's arithmetic source strings read as the evaluation reads them (not as `pacs-rl train`'s
    CPU default task), so the training set loads and draws the operators and operand lengths it is tested on."""
    from pacs_rl import device
    from pacs_rl.compare.job import run_values
    from pacs_rl.compare.plan import check_training_data
    from pacs_rl.data import load_problems
    from pacs_rl.training.checks import split_settings
    from pacs_rl.training.data import load_run_data

    monkeypatch.setattr(device, "cuda_info", lambda: device.CudaInfo(available=False))
    settings = resolve_settings(preset=preset)
    check_training_data(settings)
    values, _ = run_values(comparison_protocol(settings), "pacs", 0)
    run, _ = split_settings(values)
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
