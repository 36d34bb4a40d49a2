"""The bf16-against-fp32 record (benchmarks/cpu_bf16.py): its seed lists, its paired summary, and the note that
quotes it agree with the numbers in the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from train_helpers import load_script, rounded

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "docs" / "benchmarks" / "cpu_bf16.json"
NOTE = REPO / "docs" / "benchmarks" / "cpu_bf16.md"


@pytest.fixture(scope="module")
def probe():
    return load_script("benchmarks/cpu_bf16.py")


def test_seed_lists(probe):
    assert probe.parse_seeds("0-2,5") == [0, 1, 2, 5]
    assert probe.parse_seeds("3") == [3]


def test_summary_pairs_only_seeds_with_both_precisions(probe):
    run = lambda acc, t: {"heldout_before": 0.065, "heldout_after": acc, "train_seconds": t}  # noqa: E731
    record = {"runs": {"fp32": {"0": run(0.10, 600), "1": run(0.20, 620), "2": run(0.3, 610)},
                       "bf16": {"0": run(0.15, 300), "1": run(0.10, 310)}}}  # fmt: skip
    summary = probe.summarize(record)
    assert summary["seeds"] == [0, 1]
    assert summary["bf16_minus_fp32"]["mean"] == pytest.approx(-0.025)
    assert summary["heldout_after_mean"] == pytest.approx({"fp32": 0.15, "bf16": 0.125})
    assert summary["train_seconds_median"] == {
        "fp32": 610,
        "bf16": 305,
    }  # the median of an even count: the mean
    # of the middle two
    table = probe.markdown(record)
    assert "| 1 | 20.0% | 10.0% | -10.0 pp | 620 / 310 |" in table
    assert "over 2 pairs: -2.5 pp" in table


def test_the_note_quotes_the_record(probe):
    record = json.loads(RECORD.read_text())
    if record.get("runs"):
        assert rounded(record["pairs_summary"]) == rounded(json.loads(json.dumps(probe.summarize(record))))
        assert probe.markdown(record) in NOTE.read_text()
    first = record["first_run"]
    text = NOTE.read_text()
    for precision in ("bf16", "fp32"):
        assert f"({first[precision]['train_seconds']} s)" in text
        assert f"{first[precision]['max_rss_kib']:,} KiB" in text
    assert f"**{first['fp32_over_bf16']['step_seconds_per_completion_token']:.2f}**" in text
    rollouts = record["sampling"]  # the sampler's rollouts of the base model, fp32 against the bf16 copy
    for precision in ("fp32", "bf16"):
        got = rollouts[precision]
        assert (
            f"{100 * got['paid']:.2f}% ({sum(got['paid_per_prompt']):.0f} of {rollouts['prompts'] * rollouts['n']})"
            in text
        )
        assert f"| {got['mean_length']:.1f} |" in text
    gap = rollouts["bf16_minus_fp32_paid_per_prompt"]
    assert (
        f"{100 * gap['mean']:.1f} pp, 95% interval [{100 * gap['ci95'][0]:.1f}, +{100 * gap['ci95'][1]:.1f}] pp"
        in text.replace("−", "-")
    )


def test_one_bf16_speed_figure_is_quoted_everywhere_with_its_date():
    """The figure is the paired seeds' median training times (fp32 / bf16), computed from the record; every place
    that quotes a bf16 speed-up quotes it, with its date, and no other."""
    from pacs_rl.device import CPU_BF16_NOT_DEFAULT

    record = json.loads(RECORD.read_text())
    median = record["pairs_summary"]["train_seconds_median"]
    figure, date = f"{median['fp32'] / median['bf16']:.2f}×", record["pairs_host"]["date"]
    assert figure == "1.24×"
    places = {
        name: (REPO / name).read_text()
        for name in ("README.md", "docs/TRAINING.md", "docs/benchmarks/first_run.md", "docs/benchmarks/cpu_bf16.md",
                     "docs/benchmarks/README.md", "CHANGELOG.md")
    }  # fmt: skip
    places["pacs-rl info"] = CPU_BF16_NOT_DEFAULT
    for name, text in places.items():
        assert figure in text and date in text, name
        for stale in ("0.78×", "0.78 ×", "1.43× faster", "~1.3x", "633 s", "493 s"):
            assert stale not in text, (name, stale)
    note = NOTE.read_text()
    assert f"{median['bf16']:.0f} s against fp32's {median['fp32']:.0f} s" in note
