"""Tables and plots: bold / underline placement on made-up metrics, merging finished runs."""

from __future__ import annotations

import json
import re

from pacs_rl.evaluation.report import load_metrics, rank_marks, results_table, write_report


def _run(label, values, bench="math500", n=8):
    return {
        "label": label,
        "benchmark": bench,
        "n": n,
        "num_problems": 10,
        "pass_at_k": {str(k): v for k, v in values.items()},
    }


def _cells(table: str, label: str) -> list[str]:
    line = next(line for line in table.splitlines() if line.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


def test_rank_marks_ties_and_second():
    assert rank_marks([0.5, 0.7, 0.6]) == ["", "best", "second"]
    assert rank_marks([0.7, 0.7, 0.6, 0.1]) == ["best", "best", "second", ""]
    # equal at the precision shown (two decimals) counts as a tie
    assert rank_marks([12.344, 12.341, 3.0]) == ["best", "best", "second"]
    assert rank_marks([0.3, None, 0.2]) == ["best", "", "second"]
    assert rank_marks([0.3]) == [""]  # nothing to compare with
    assert rank_marks([0.3, 0.3]) == ["best", "best"]


def test_table_bold_and_underline_placement():
    runs = [
        _run("Base", {1: 0.6155, 2: 0.7390, 4: 0.8209}),
        _run("GRPO", {1: 0.7829, 2: 0.8208, 4: 0.8470}),
        _run("PACS", {1: 0.7897, 2: 0.8439, 4: 0.8818}),
        _run("w/o weight", {1: 0.7784, 2: 0.8374, 4: 0.8768}),
    ]
    t = results_table(runs)
    assert "| Model | k = 1 | 2 | 4 |" in t
    assert _cells(t, "PACS") == ["**78.97**", "**84.39**", "**88.18**"]
    assert _cells(t, "GRPO") == ["<u>78.29</u>", "82.08", "84.70"]
    assert _cells(t, "w/o weight") == ["77.84", "<u>83.74</u>", "<u>87.68</u>"]
    assert _cells(t, "Base") == ["61.55", "73.90", "82.09"]


def test_table_puts_two_benchmarks_side_by_side_and_fills_missing_k():
    runs = [
        _run("A", {1: 0.1, 8: 0.5}, bench="aime24"),
        _run("B", {1: 0.2}, bench="aime24"),
        _run("A", {1: 0.9, 2: 0.95}),
        _run("C", {1: 0.3}, bench="amc23"),
    ]
    t = results_table(runs)
    assert t.count("### ") == 2  # aime24 and math500 side by side, then amc23 (as the paper's Tables 2, 3)
    assert "### aime24 (n = 8; 10 problems) | math500 (n = 8; 10 problems)" in t
    assert "| Model | aime24 k = 1 | 8 | math500 k = 1 | 2 |" in t
    first = t.split("### amc23")[0]
    assert _cells(first, "A") == [
        "<u>10.00</u>",
        "50.00",
        "90.00",
        "95.00",
    ]  # one value in a column: unmarked
    assert _cells(first, "B") == ["**20.00**", "–", "–", "–"]
    assert "| Model | k = 1 |" in t.split("### amc23")[1]  # a benchmark alone keeps the plain header


def test_table_names_the_grader_and_the_sampling():
    runs = [_run("A", {1: 0.5}), _run("B", {1: 0.6})]
    for r in runs:
        r.update(grader="paper", sampling={"temperature": 0.6, "top_p": 0.95, "max_new_tokens": 1024})
    t = results_table(runs)
    assert "grader: paper; sampling: T = 0.6, top-p = 0.95, at most 1024 new tokens." in t
    runs[1]["grader"] = "strict"
    t = results_table(runs)
    assert "grader: paper, strict" in t and "| A (paper) |" in t and "| B (strict) |" in t


def test_merge_finished_runs(tmp_path):
    for name, v in [("a", 0.25), ("b", 0.5)]:
        d = tmp_path / "runs" / name
        d.mkdir(parents=True)
        (d / "metrics.json").write_text(json.dumps(_run(name, {1: v, 2: v + 0.1})))
    runs = load_metrics([tmp_path / "runs"])  # a folder of runs
    assert [r["label"] for r in runs] == ["a", "b"]
    assert [r["label"] for r in load_metrics([tmp_path / "runs" / "b", tmp_path / "runs" / "a"])] == [
        "b",
        "a",
    ]
    md, png = write_report(runs, tmp_path / "merged")
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"
    assert re.search(r"\| b \| \*\*50\.00\*\* \| \*\*60\.00\*\* \|", md.read_text())


def test_table_names_the_share_of_paid_answers_that_are_not_plain():
    """Under each table, one line per run with forms: the share of its paid answers that are not plain; runs
    from before forms were recorded get none."""
    from pacs_rl.evaluation.report import forms_text

    runs = [
        _run("A", {1: 0.5}, bench="aime24"),
        _run("A", {1: 0.6}),
        _run("B", {1: 0.7}),
        _run("C", {1: 0.1}),
    ]
    runs[0]["paid_forms"] = {"plain": 412, "no_box": 12, "restated": 4}
    runs[1]["paid_forms"] = {"plain": 10}
    runs[2]["paid_forms"] = {}
    t = results_table(runs)
    notes = t.split("| C |")[1].split("**Bold**")[0].strip().splitlines()
    assert notes[1:] == [
        "",
        "- A on aime24: 0.9% of 428 paid answers neither boxed nor in prose (restated 4)",
        "- A on math500: 0.0% of 10 paid answers neither boxed nor in prose",
    ]  # B: nothing paid, nothing to say
    assert forms_text(runs[0]["paid_forms"]) == "plain 412 (96.3%), no_box 12, restated 4"
    assert forms_text({"restated": 3}) == "plain 0 (0.0%), restated 3" and forms_text({}) == "none"
    assert "paid answers" not in results_table([_run("D", {1: 0.5})])  # an older run: no line
