"""The evaluation runner: outputs, pass@k recomputed from samples.jsonl, resume after a crash, refusals.

Most tests use a scripted sampler (fast, exact control over what is correct); the end-to-end ones use
the tiny random model through the real transformers sampler and the ``pacs-rl eval`` command.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field

import pytest

from pacs_rl.algorithms.passk import pass_at_k
from pacs_rl.data import arithmetic_problems
from pacs_rl.evaluation.runner import EvalConfig, ResumeMismatch, plan_chunks, read_samples, run_eval
from pacs_rl.evaluation.samples import count_correct


@dataclass
class FakeSample:
    text: str
    token_ids: list[int] = field(default_factory=lambda: [1, 2, 3])
    finish_reason: str = "stop"


class ScriptedSampler:
    """Answers "What is a op b?" prompts; sample j of a call is right when (a + j) % 3 != 0.
    Raises on call number ``crash_on`` (1-based) to simulate a crash mid-run."""

    def __init__(self, crash_on: int | None = None):
        self.calls = 0
        self.crash_on = crash_on
        self.requested = 0
        self.prompts = []

    def generate(self, prompts, params):
        self.calls += 1
        self.prompts += prompts
        if self.crash_on is not None and self.calls == self.crash_on:
            raise RuntimeError("simulated crash")
        out = []
        for prompt in prompts:
            a, op, b = re.search(r"What is (\d+) ([+\-*]) (\d+)\?", prompt).groups()
            right = eval(f"{a}{op}{b}")  # the test's own oracle, independent of the answers stored
            out.append(
                [
                    FakeSample(f"So the answer is \\boxed{{{right if (int(a) + j) % 3 else right + 1}}}.")
                    for j in range(params.n)
                ]
            )
            self.requested += params.n
        return out


@pytest.fixture()
def built(tiny_tokenizer, monkeypatch):
    """The models the runner loads (each load gives a ScriptedSampler), in order."""
    import pacs_rl.evaluation.runner as runner

    loads = []

    def fake_build(config):
        loads.append(config.model)
        return ScriptedSampler(), tiny_tokenizer

    monkeypatch.setattr(runner, "build_sampler", fake_build)
    return loads


def _config(tmp_path, **kw):
    base = dict(
        model="scripted",
        benchmark="arithmetic?n=6&seed=3",
        output_dir=str(tmp_path / "run"),
        n=4,
        batch_size=8,  # 2 problems per chunk at n = 4
        verify_workers=0,
        progress=False,
    )
    base.update(kw)
    return EvalConfig(**base)


def _pairs(path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return rows, Counter((r["problem_id"], r["sample_index"]) for r in rows)


def test_outputs_and_passk_recomputed_from_samples(tmp_path, tiny_tokenizer):
    cfg = _config(tmp_path)
    metrics = run_eval(cfg, sampler=ScriptedSampler(), tokenizer=tiny_tokenizer)
    out = tmp_path / "run"
    rows, pairs = _pairs(out / "samples.jsonl")
    ids = [p.id for p in arithmetic_problems(6, seed=3, split="test")]
    assert set(pairs) == {(pid, i) for pid in ids for i in range(4)} and max(pairs.values()) == 1
    fields = {"completion", "extracted", "score", "reason", "form", "finish_reason", "num_tokens", "problem"}
    assert fields <= set(rows[0])
    # pass@k from the counts in samples.jsonl, computed here independently of the runner
    c = Counter()
    for r in rows:
        c[r["problem_id"]] += r["score"] == 1.0
    for k in (1, 2, 4):
        expect = sum(pass_at_k(4, c[pid], k) for pid in ids) / len(ids)
        assert metrics["pass_at_k"][str(k)] == pytest.approx(expect, abs=1e-12)
    on_disk = json.loads((out / "metrics.json").read_text())
    assert on_disk["pass_at_k"] == metrics["pass_at_k"] and on_disk["ks"] == [1, 2, 4]
    assert sum(on_disk["reasons"].values()) == 24 and on_disk["num_problems"] == 6
    # the scripted sampler is right unless (a + j) % 3 == 0: at least one wrong and one right overall
    assert 0 < metrics["pass_at_k"]["1"] < 1
    t = on_disk["timing"]
    assert t["samples_generated_this_run"] == 24 and t["generation_seconds"] >= 0
    table = (out / "results.md").read_text()
    assert "grader: sound" in table and "\n### arithmetic?n=6&seed=3 (n = 4; 6 problems)" in table
    assert on_disk["grader"] == "sound" and on_disk["sampling"]["dtype"] == "float32"  # auto on a CPU
    assert (out / "passk.png").stat().st_size > 1000


def test_resume_after_crash_samples_only_missing(tmp_path, tiny_tokenizer):
    cfg = _config(tmp_path)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_eval(cfg, sampler=ScriptedSampler(crash_on=3), tokenizer=tiny_tokenizer)
    _, pairs = _pairs(tmp_path / "run" / "samples.jsonl")
    assert len(pairs) == 16  # two chunks of 2 problems x 4 samples were written before the crash
    again = ScriptedSampler()
    metrics = run_eval(cfg, sampler=again, tokenizer=tiny_tokenizer)
    assert again.requested == 8 and metrics["timing"]["samples_generated_this_run"] == 8
    _, pairs = _pairs(tmp_path / "run" / "samples.jsonl")
    ids = [p.id for p in arithmetic_problems(6, seed=3, split="test")]
    assert set(pairs) == {(pid, i) for pid in ids for i in range(4)} and max(pairs.values()) == 1
    # an uninterrupted run gives the same metrics (the scripted sampler is deterministic)
    fresh = run_eval(_config(tmp_path, output_dir=str(tmp_path / "fresh")), ScriptedSampler(), tiny_tokenizer)
    assert fresh["pass_at_k"] == metrics["pass_at_k"]


def test_resume_after_truncated_write(tmp_path, tiny_tokenizer):
    cfg = _config(tmp_path)
    run_eval(cfg, sampler=ScriptedSampler(), tokenizer=tiny_tokenizer)
    path = tmp_path / "run" / "samples.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    # keep 9 whole rows: problem 0 complete, problem 1 with 4 and problem 2 with 1 of 4 samples,
    # then half a row, as a crash in the middle of a write leaves it
    path.write_text("".join(lines[:9]) + lines[9][: len(lines[9]) // 2])
    again = ScriptedSampler()
    metrics = run_eval(cfg, sampler=again, tokenizer=tiny_tokenizer)
    assert again.requested == 24 - 9
    assert metrics["timing"]["broken_lines_dropped"] == 1
    rows, pairs = _pairs(path)
    assert len(rows) == 24 and len(pairs) == 24  # no duplicates, nothing missing
    c = Counter()
    for r in rows:
        c[r["problem_id"]] += r["score"] == 1.0
    expect = sum(pass_at_k(4, v, 2) for v in c.values()) / 6
    assert metrics["pass_at_k"]["2"] == pytest.approx(expect, abs=1e-12)


def test_resume_refuses_other_settings_and_extends_n(tmp_path, tiny_tokenizer):
    run_eval(_config(tmp_path, n=2), sampler=ScriptedSampler(), tokenizer=tiny_tokenizer)
    with pytest.raises(ResumeMismatch, match=r"temperature: samples have 0\.6, this command has 0\.7"):
        run_eval(_config(tmp_path, n=2, temperature=0.7), sampler=ScriptedSampler(), tokenizer=tiny_tokenizer)
    with pytest.raises(ResumeMismatch, match="max_new_tokens"):
        run_eval(
            _config(tmp_path, n=2, max_new_tokens=5), sampler=ScriptedSampler(), tokenizer=tiny_tokenizer
        )
    with pytest.raises(ResumeMismatch, match="grader: samples have 'sound', this command has 'strict'"):
        run_eval(_config(tmp_path, n=2, grader="strict"), sampler=ScriptedSampler(), tokenizer=tiny_tokenizer)
    with pytest.raises(ValueError, match="unknown base grader"):
        run_eval(
            _config(tmp_path, n=2, grader="lenient"), sampler=ScriptedSampler(), tokenizer=tiny_tokenizer
        )
    more = ScriptedSampler()
    metrics = run_eval(_config(tmp_path, n=4), sampler=more, tokenizer=tiny_tokenizer)
    assert more.requested == 6 * 2 and metrics["n"] == 4  # only indices 2 and 3 were sampled
    rows, _ = read_samples(tmp_path / "run" / "samples.jsonl")
    assert sorted(Counter(r["sample_index"] for r in rows).items()) == [(0, 6), (1, 6), (2, 6), (3, 6)]


def test_resume_takes_a_model_folder_under_another_spelling(tmp_path, tiny_tokenizer, monkeypatch):
    """A run started as ``runs/x/final`` from the project folder resumes when a driver names the same folder by
    its absolute path (or through a link); a different folder, or a name that is not a folder here, is refused."""
    (tmp_path / "runs" / "final").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "runs")
    monkeypatch.chdir(tmp_path)
    run_eval(_config(tmp_path, n=2, model="runs/final"), sampler=ScriptedSampler(), tokenizer=tiny_tokenizer)
    for same in (str(tmp_path / "runs" / "final"), str(tmp_path / "link" / "final"), "./runs/../runs/final"):
        again = ScriptedSampler()
        run_eval(_config(tmp_path, n=2, model=same), sampler=again, tokenizer=tiny_tokenizer)
        assert again.requested == 0  # resumed: every sample was there
    for other in (str(tmp_path / "other"), "runs/final2", "org/model"):
        with pytest.raises(ResumeMismatch, match="model: samples have 'runs/final'"):
            run_eval(_config(tmp_path, n=2, model=other), sampler=ScriptedSampler(), tokenizer=tiny_tokenizer)


def test_several_benchmarks_load_the_model_once_and_write_one_table(tmp_path, built):
    import pacs_rl.evaluation.runner as runner

    cfg = _config(tmp_path, ks=[1, 2, 4])
    benches = ["arithmetic?n=4&seed=1", "arithmetic?n=3&seed=2&ops=+"]
    n = {"arithmetic?n=4&seed=1": 2}  # the other benchmark keeps the config's n = 4
    results = runner.run_evals(cfg, ["m1"], labels=["Base"], benchmarks=benches, n=n)
    assert built == ["m1"] and [(r["n"], r["ks"]) for r in results] == [(2, [1, 2]), (4, [1, 2, 4])]
    root = tmp_path / "run"
    assert (root / "arithmetic_n_4_seed_1" / "metrics.json").is_file()
    assert (root / "arithmetic_n_3_seed_2_ops_+" / "samples.jsonl").is_file()
    table = (root / "results.md").read_text()
    assert "| Model | arithmetic?n=4&seed=1 k = 1 | 2 | arithmetic?n=3&seed=2&ops=+ k = 1 | 2 | 4 |" in table
    assert table.count("| Base |") == 1
    again = runner.run_evals(cfg, ["m1"], labels=["Base"], benchmarks=benches, n=n)  # finished: resumes
    assert built == ["m1"] and [r["pass_at_k"] for r in again] == [r["pass_at_k"] for r in results]
    with pytest.raises(ValueError, match="match none of the benchmarks"):
        runner.run_evals(cfg, ["m1"], benchmarks=benches, n={"math500": 3})
    two = runner.run_evals(
        _config(tmp_path, output_dir=str(tmp_path / "two")), ["a", "b"], benchmarks=benches
    )
    assert len(two) == 4 and (tmp_path / "two" / "b" / "arithmetic_n_4_seed_1" / "metrics.json").is_file()


def test_prompt_settings_reach_the_sampler(tmp_path, tiny_tokenizer):
    sampler = ScriptedSampler()
    run_eval(_config(tmp_path, n=1, instruction="", system_prompt="Be brief."), sampler, tiny_tokenizer)
    assert all(p.startswith("<|im_start|>system\nBe brief.<|im_end|>") for p in sampler.prompts)
    assert not any("Please reason" in p for p in sampler.prompts)
    data = tmp_path / "chat.jsonl"
    messages = [{"role": "system", "content": "Terse."}, {"role": "user", "content": "What is 12 + 30?"}]
    data.write_text(json.dumps({"id": "q", "messages": messages, "answer": "42"}) + "\n")
    sampler = ScriptedSampler()
    metrics = run_eval(
        _config(
            tmp_path, benchmark=str(data), prompt_field="messages", n=1, output_dir=str(tmp_path / "chat")
        ),
        sampler,
        tiny_tokenizer,
    )
    assert sampler.prompts == [
        tiny_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ]
    assert metrics["num_problems"] == 1 and metrics["settings"]["prompt_field"] == "messages"


def test_benchmark_and_n_options_of_the_command():
    from pacs_rl.evaluation.cli import split_benchmarks
    from pacs_rl.evaluation.runner import parse_samples as parse_n

    assert split_benchmarks(["math500,aime24", "arithmetic?digits=2,1&n=5", " amc23 "]) == [
        "math500",
        "aime24",
        "arithmetic?digits=2,1&n=5",
        "amc23",
    ]
    assert parse_n("32", ["math500"]) == (32, {})
    assert parse_n("paper", ["MATH-500", "aime24", "minerva"]) == (32, {"math500": 32, "aime24": 512})
    assert parse_n("16,aime24=512", ["aime24"]) == (16, {"aime24": 512})
    with pytest.raises(ValueError, match="--n takes"):
        parse_n("aime24=many", ["aime24"])
    with pytest.raises(ValueError, match="must be >= 1"):
        parse_n("math500=0", ["math500"])


def test_k_outside_n_and_plan_chunks(tmp_path):
    with pytest.raises(ValueError, match=r"k values \[8\] are outside 1..n"):
        _config(tmp_path, n=4, ks=[1, 8]).resolved_ks()
    assert _config(tmp_path, n=6).resolved_ks() == [1, 2, 4]
    todo = [("a", [0, 1]), ("b", [0, 1]), ("c", [3]), ("d", [0, 1]), ("e", [0, 1]), ("f", [0, 1])]
    chunks = plan_chunks(todo, per_chunk_sequences=4)
    assert [[p for p, _ in ch] for ch in chunks] == [["a", "b"], ["c"], ["d", "e"], ["f"]]


class HackingSampler:
    """Answers "What is a op b?" in four forms, one per sample: boxed and right (plain), the question given back
    ("The answer is b op a." for a sum: restated), right in prose but cut off at the token limit (truncated), and
    a wrong box."""

    def generate(self, prompts, params):
        out = []
        for prompt in prompts:
            a, op, b = re.search(r"What is (\d+) ([+\-*]) (\d+)\?", prompt).groups()
            right = eval(f"{a}{op}{b}")
            back = f"{b} {op} {a}" if op in "+*" else f"{a} {op} {b}"
            texts = [
                (f"So \\boxed{{{right}}}.", "stop"),
                (f"The answer is {back}.", "stop"),
                (f"The answer is {right}. Let me also", "length"),
                (f"\\boxed{{{right + 1}}}", "stop"),
            ]
            out.append([FakeSample(t, finish_reason=f) for t, f in texts[: params.n]])
        return out


def test_samples_and_metrics_record_the_form_of_each_answer(tmp_path, tiny_tokenizer, capsys):
    """Every row gets its answer's form and its question; metrics.json counts the forms among the paid samples
    and among all; results.md and the command's output name the share of paid answers that are not plain."""
    cfg = _config(tmp_path, benchmark="arithmetic?n=4&seed=3&ops=+", grader="paper")  # paper pays restated
    metrics = run_eval(cfg, sampler=HackingSampler(), tokenizer=tiny_tokenizer)
    rows, _ = _pairs(tmp_path / "run" / "samples.jsonl")
    by_index = {r["sample_index"]: r for r in rows if r["problem_id"] == rows[0]["problem_id"]}
    assert [by_index[i]["form"] for i in range(4)] == ["plain", "restated", "truncated", "plain"]
    assert [by_index[i]["score"] for i in range(4)] == [1.0, 1.0, 1.0, 0.0]
    assert by_index[0]["problem"].startswith("What is ")
    assert metrics["paid_forms"] == {"plain": 4, "truncated": 4, "restated": 4}
    assert metrics["forms"] == {"plain": 8, "truncated": 4, "restated": 4}
    assert metrics["paid_cut_off"] == 4  # the paper's grader pays the cut-off answers: counted beside
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["paid_forms"] == metrics["paid_forms"]
    table = (tmp_path / "run" / "results.md").read_text()
    assert (
        "- scripted: 66.7% of 12 paid answers neither boxed nor in prose (truncated 4, restated 4); 4 cut off at the token limit"
        in table
    )

    from rich.console import Console

    from pacs_rl.evaluation.cli import _print_forms

    console = Console(stderr=True, width=60)
    _print_forms({**metrics, "_path": "runs/x"}, console)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "scripted: paid answers by form: plain 4 (33.3%), truncated 4, restated 4"
    assert err[1].startswith(
        "warning: 66.7% of scripted's paid answers are neither boxed nor in prose: the grader (paper)"
    )
    assert err[1].endswith("`pacs-rl audit runs/x` grades them again with another") and len(err) == 2


def test_the_training_grader_refuses_the_cut_off_answers_the_paper_grader_pays(
    tmp_path, tiny_tokenizer, capsys
):
    """Under the sound grader a sample cut off at the token limit (its finish reason) is refused, unread; under
    the paper's the same sample is paid and the command counts it beside its verdicts."""
    from rich.console import Console

    from pacs_rl.evaluation.cli import _print_run_summary

    sound = run_eval(_config(tmp_path / "s", benchmark="arithmetic?n=4&seed=3&ops=+", grader="sound"),
                     sampler=HackingSampler(), tokenizer=tiny_tokenizer)  # fmt: skip
    rows, _ = _pairs(tmp_path / "s" / "run" / "samples.jsonl")
    cut = [r for r in rows if r["finish_reason"] == "length"]
    assert len(cut) == 4 and all(
        (r["score"], r["reason"], r["form"]) == (0.0, "truncated", "truncated") for r in cut
    )
    assert sound["paid_cut_off"] == 0 and sound["reasons"]["truncated"] == 4
    paper = run_eval(_config(tmp_path / "p", benchmark="arithmetic?n=4&seed=3&ops=+", grader="paper"),
                     sampler=HackingSampler(), tokenizer=tiny_tokenizer)  # fmt: skip
    _print_run_summary(paper, Console(stderr=True, width=200))
    err = capsys.readouterr().err
    assert (
        "scripted: 4 of its paid answers were cut off at the token limit (the paper grader pays them" in err
    )


def test_metrics_of_samples_written_before_forms_existed(tmp_path, tiny_tokenizer):
    """A run resumed on an older samples file: its rows without a form count as unknown, and the share of paid
    answers that are not plain is taken over the known ones."""
    from pacs_rl.evaluation.report import forms_note, paid_not_plain

    cfg = _config(tmp_path, n=2)
    run_eval(cfg, sampler=ScriptedSampler(), tokenizer=tiny_tokenizer)
    samples = tmp_path / "run" / "samples.jsonl"
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    for r in rows[:4]:
        del r["form"], r["problem"]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    metrics = run_eval(cfg, sampler=ScriptedSampler(), tokenizer=tiny_tokenizer)  # nothing to sample
    paid = sum(r["score"] == 1.0 for r in rows)
    assert sum(metrics["paid_forms"].values()) == paid and metrics["forms"]["unknown"] == 4
    assert paid_not_plain(metrics["paid_forms"]) == (0, paid - metrics["paid_forms"]["unknown"])
    assert forms_note(metrics).startswith("0.0% of ")
    assert forms_note({"paid_forms": {}}) is None and forms_note({}) is None
    assert forms_note({"paid_forms": {"unknown": 3}}).startswith("paid answers of unknown form")


def test_bad_rows_are_counted_in_metrics(tmp_path, tiny_tokenizer):
    data = tmp_path / "d.jsonl"
    good = [{"id": f"p{i}", "problem": f"What is {10 + i} + 11?", "answer": str(21 + i)} for i in range(3)]
    data.write_text(
        "\n".join([json.dumps(good[0]), "{not json", json.dumps(good[1]), json.dumps(good[2])]) + "\n"
    )
    metrics = run_eval(_config(tmp_path, benchmark=str(data), n=2), ScriptedSampler(), tiny_tokenizer)
    assert metrics["skipped_rows"] == 1 and "line 2" in metrics["skipped_examples"][0]
    assert metrics["num_problems"] == 3


def test_count_correct_counts_the_first_n_samples_of_each_problem():
    rows = [
        {"problem_id": "b", "sample_index": 0, "score": 0.5},  # >= 0.5 counts as correct
        {"problem_id": "a", "sample_index": 1, "score": 0.0},
        {"problem_id": "a", "sample_index": 0, "score": 1.0},
        {"problem_id": "a", "sample_index": 2, "score": 1.0},  # index >= n: ignored
        {"problem_id": 7, "sample_index": 1, "score": 0.0},  # ids are read as text
    ]
    counts = count_correct(rows, n=2)
    assert counts == {"b": (1, 1), "a": (2, 1), "7": (1, 0)}
    assert list(counts) == ["b", "a", "7"] and counts["a"].samples == 2 and counts["a"].correct == 1


def test_eval_command_and_runner_import_without_torch_or_the_verifier():
    """`pacs-rl --help` imports the eval command: torch and sympy load only when a run starts."""
    code = (
        "import sys, pacs_rl.evaluation.cli, pacs_rl.evaluation.runner; "
        "print(sorted(m for m in ('torch', 'transformers', 'sympy', 'math_verify') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------------------
# End to end with the tiny random model (real sampler, real verifier, the CLI)


def _cli(args):
    from typer.testing import CliRunner

    from pacs_rl.cli import app

    return CliRunner().invoke(app, args)


def test_cli_several_benchmarks_one_table(tmp_path, tiny_model_dir):
    out = tmp_path / "multi"
    benches = "arithmetic?n=2&seed=0,arithmetic?n=2&seed=1&digits=2,1"
    args = ["eval", "-m", str(tiny_model_dir), "-b", benches, "--n", "2,arithmetic?n=2&seed=0=1"]
    r = _cli([*args, "--max-new-tokens", "3", "--verify-workers", "0", "--no-progress", "-o", str(out)])
    assert r.exit_code == 0, r.output
    first = json.loads((out / "arithmetic_n_2_seed_0" / "metrics.json").read_text())
    second = json.loads((out / "arithmetic_n_2_seed_1_digits_2_1" / "metrics.json").read_text())
    assert (first["n"], second["n"]) == (1, 2) and first[
        "grader"
    ] == "sound"  # auto: sound off the paper's data
    table = (out / "results.md").read_text()
    assert "arithmetic?n=2&seed=0 k = 1 | arithmetic?n=2&seed=1&digits=2,1 k = 1 | 2 |" in table
    r = _cli([*args[:5], "--grader", "paper+nonsense", "-o", str(tmp_path / "bad")])
    assert r.exit_code == 2 and "unknown rule" in r.output


def test_cli_tiny_model_on_shared_data_and_merge(tmp_path, tiny_model_dir, shared_data):
    common = [
        "--n",
        "2",
        "--k",
        "1,2",
        "--max-new-tokens",
        "6",
        "--limit",
        "2",
        "--no-progress",
        "--verify-workers",
        "0",
    ]
    bench = str(shared_data / "math500.jsonl")
    r = _cli(
        [
            "eval",
            "--model",
            str(tiny_model_dir),
            "--benchmarks",
            bench,
            "--output-dir",
            str(tmp_path / "a"),
            *common,
        ]
    )
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "a" / "metrics.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "a" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(0 < r["num_tokens"] <= 6 for r in rows)
    assert {r["problem_id"] for r in rows} == {
        "test/precalculus/807.json",
        "test/intermediate_algebra/1994.json",
    }
    c = Counter()
    for row in rows:
        c[row["problem_id"]] += row["score"] == 1.0
    assert m["pass_at_k"]["1"] == pytest.approx(sum(pass_at_k(2, v, 1) for v in c.values()) / 2)
    # rerunning the finished command samples nothing and gives the same metrics
    r = _cli(
        [
            "eval",
            "--model",
            str(tiny_model_dir),
            "--benchmarks",
            bench,
            "--output-dir",
            str(tmp_path / "a"),
            *common,
        ]
    )
    assert r.exit_code == 0, r.output
    m2 = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert m2["timing"]["samples_generated_this_run"] == 0 and m2["pass_at_k"] == m["pass_at_k"]
    # a changed sampling setting is refused with a message, not a traceback
    r = _cli(
        ["eval", "-m", str(tiny_model_dir), "-b", bench, "-o", str(tmp_path / "a"), *common, "--top-p", "0.5"]
    )
    assert r.exit_code == 2 and "top_p" in r.output
    # merging two finished runs
    r = _cli(
        [
            "eval",
            "--model",
            str(tiny_model_dir),
            "--benchmarks",
            bench,
            "--output-dir",
            str(tmp_path / "b"),
            *common,
            "--seed",
            "1",
        ]
    )
    assert r.exit_code == 0, r.output
    r = _cli(
        ["eval", "--merge", str(tmp_path / "a"), str(tmp_path / "b"), "--output-dir", str(tmp_path / "m")]
    )
    assert r.exit_code == 0, r.output
    assert (tmp_path / "m" / "passk.png").is_file() and (tmp_path / "m" / "results.md").read_text().count(
        str(tiny_model_dir)
    ) == 2


def test_tiny_model_crash_and_resume_on_arithmetic(tmp_path, tiny_model_dir, monkeypatch):
    from pacs_rl.sampling import TransformersSampler

    cfg = EvalConfig(
        model=str(tiny_model_dir),
        benchmark="arithmetic?n=5&seed=0",
        output_dir=str(tmp_path / "run"),
        n=3,
        max_new_tokens=4,
        batch_size=6,  # 2 problems per chunk
        verify_workers=0,
        progress=False,
    )
    real = TransformersSampler.generate
    calls = {"n": 0}

    def crashing(self, prompts, params):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # like a Ctrl-C in the middle of the run
        return real(self, prompts, params)

    monkeypatch.setattr(TransformersSampler, "generate", crashing)
    with pytest.raises(KeyboardInterrupt):
        run_eval(cfg)
    assert len(read_samples(tmp_path / "run" / "samples.jsonl")[0]) == 6
    monkeypatch.setattr(TransformersSampler, "generate", real)
    metrics = run_eval(cfg)
    assert metrics["timing"]["samples_generated_this_run"] == 9
    _, pairs = _pairs(tmp_path / "run" / "samples.jsonl")
    ids = [p.id for p in arithmetic_problems(5, seed=0, split="test")]
    assert set(pairs) == {(pid, i) for pid in ids for i in range(3)} and max(pairs.values()) == 1


def test_several_models_merge_into_one_table(tmp_path, built):
    import pacs_rl.evaluation.runner as runner

    cfg = _config(tmp_path, n=2)
    results = runner.run_evals(cfg, ["m1", "org/m2"], labels=["Base", "PACS"])
    assert built == ["m1", "org/m2"] and [r["label"] for r in results] == ["Base", "PACS"]
    root = tmp_path / "run"
    assert (root / "m1" / "samples.jsonl").is_file() and (root / "org__m2" / "metrics.json").is_file()
    table = (root / "results.md").read_text()
    assert "| Base |" in table and "| PACS |" in table and (root / "passk.png").is_file()


@pytest.mark.slow
def test_bundled_model_offline_cli(tmp_path, bundled_model_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = ["eval", "--model", "smollm2-135m", "--benchmarks", "arithmetic?n=2&seed=0", "--n", "2"]
    r = _cli(
        [
            *args,
            "--max-new-tokens",
            "16",
            "--threads",
            "1",
            "--no-progress",
            "--output-dir",
            str(tmp_path / "s"),
        ]
    )
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in (tmp_path / "s" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(row["num_tokens"] > 0 for row in rows)
