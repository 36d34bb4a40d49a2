"""`pacs-rl audit`: saved samples graded again with another grader, on tiny hand-written samples files (an eval
folder, a training run folder, folders of them): what it prints, the JSON, pass@k recomputed, where the questions
come from, exit codes and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pacs_rl.algorithms.passk import pass_at_k
from pacs_rl.cli import app
from pacs_rl.evaluation.audit import audit, default_grader, find_samples, shorten, training_grader

SUM = "What is 47 + 8?"
PRODUCT = "What is 3 * 4?"
RESTATED = "The answer is 8 + 47."  # paper evaluates the question given back: paid; sound refuses it
# paper reads the last number (47): refused; sound reads the last "the answer is" (55): paid
SELF_CORRECTION = "The answer is 54. No wait: 47 + 8 = 55, so the answer is 55. Check: 55 - 8 = 47."
IN_PASSING = (
    "I think it is 55 but let me see"  # paper reads the last number: paid; sound: no committed answer
)


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _eval_row(pid, index, completion, score, reason, answer="55", problem=SUM, **extra):
    row = {"problem_id": pid, "sample_index": index, "completion": completion, "extracted": None, "score": score,
           "reason": reason, "finish_reason": "stop", "num_tokens": 9, "answer": answer, **extra}  # fmt: skip
    if problem is not None:
        row["problem"] = problem
    return row


def eval_folder(
    folder: Path, grader="paper", questions=True, benchmark="arithmetic?n=2", restated=RESTATED
) -> Path:
    """A `pacs-rl eval` folder of 2 problems x 2 samples scored by ``grader`` (paper's verdicts), rows without a
    form (written before forms existed)."""
    q = (lambda text: text) if questions else (lambda text: None)
    _write(
        folder / "samples.jsonl",
        [
            _eval_row("p0", 0, restated, 1.0, "correct", problem=q(SUM)),
            _eval_row("p0", 1, SELF_CORRECTION, 0.0, "wrong", problem=q(SUM)),
            _eval_row("p1", 0, "So \\boxed{12}.", 1.0, "correct", answer="12", problem=q(PRODUCT)),
            _eval_row("p1", 1, "3 * 4 is 12", 1.0, "correct", "12", q(PRODUCT), finish_reason="length"),
        ],
    )
    (folder / "run.json").write_text(json.dumps({"settings": {"benchmark": benchmark, "grader": grader}}))
    (folder / "metrics.json").write_text(json.dumps({"ks": [1, 2]}))
    return folder


def training_folder(folder: Path, grader_file: dict | None = None) -> Path:
    """A `pacs-rl train` run folder with its samples: rollouts scored by sound, held-out answers before/after."""
    row = {"problem": SUM, "answer": "55", "extracted": None, "num_tokens": 9}
    _write(
        folder / "samples" / "rollouts.jsonl",
        [
            {**row, "step": 1, "completion": IN_PASSING, "score": 0.0, "reason": "no_answer", "form": "none",
             "truncated": False},
            {**row, "step": 2, "completion": "So \\boxed{55}.", "score": 1.0, "reason": "correct", "form": "plain",
             "truncated": False},
            {**row, "step": 2, "completion": "The answer is 55 because", "score": 1.0, "reason": "correct",
             "form": "no_box", "truncated": True},
        ],
    )  # fmt: skip
    for name, completion in (("heldout_before", IN_PASSING), ("heldout_after", "So \\boxed{55}.")):
        paid = completion != IN_PASSING
        _write(
            folder / "samples" / f"{name}.jsonl",
            [{**row, "problem_id": "arith-test-0", "completion": completion, "score": float(paid),
              "reason": "correct" if paid else "no_answer", "form": "plain" if paid else "none",
              "finish_reason": "stop"}],
        )  # fmt: skip
    if grader_file is not None:
        (folder / "answer_forms.json").write_text(json.dumps(grader_file))
    return folder


def invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.output


def test_eval_folder_regraded_with_sound(tmp_path):
    folder = eval_folder(tmp_path / "eval")
    code, out = invoke("audit", folder, "--no-progress")
    assert code == 0, out
    lines = out.splitlines()
    assert (
        lines[0]
        == f"{folder / 'samples.jsonl'} (pacs-rl eval, 4 rows; recorded grader paper; graded again with sound)"
    )
    assert "  paid as recorded (paper): 3 (75.0%); under sound: 2 (50.0%)" in lines
    # the paid answer cut off at the token limit (its finish reason) is refused as such by the training grader
    assert (
        "  paid -> refused: 2 (not_a_number 1, truncated 1); refused -> paid: 1 (recorded wrong 1)" in lines
    )
    # the rows hold no form: read from their answers; the cut-off paid answer is "truncated"
    assert (
        "  recorded paid answers by form (read from the recorded answers): plain 1 (33.3%), truncated 1, restated 1"
        in lines
    )
    assert "  paid answers by form under sound: plain 1 (50.0%), no_box 1" in lines
    assert f"  paid -> refused [p0#0, gold 55, now not_a_number]: {RESTATED}" in lines
    assert f"  refused -> paid [p0#1, gold 55, was wrong]: {SELF_CORRECTION}" in lines
    # pass@k recomputed: p0 has 1 of 2 paid now (1 as recorded), p1 1 of 2 (2 as recorded)
    now = {k: (pass_at_k(2, 1, k) + pass_at_k(2, 1, k)) / 2 for k in (1, 2)}
    was = {k: (pass_at_k(2, 1, k) + pass_at_k(2, 2, k)) / 2 for k in (1, 2)}
    assert (
        f"  pass@k under sound (2 problems): 1 {100 * now[1]:.1f}% (was {100 * was[1]:.1f}%), "
        f"2 {100 * now[2]:.1f}% (was {100 * was[2]:.1f}%)" in lines
    )
    assert lines[-1] == f"wrote {folder / 'audit.json'}"  # the default: in the first RUN_DIR
    result = json.loads((folder / "audit.json").read_text())
    (f,) = result["files"]
    assert (f["kind"], f["recorded_grader"], f["grader"], f["rows"]) == ("eval", "paper", "sound", 4)
    assert (f["paid_recorded"], f["paid_now"]) == (3, 2)
    assert f["paid_to_refused"] == {"count": 2, "by_reason_now": {"not_a_number": 1, "truncated": 1}}
    assert f["refused_to_paid"] == {"count": 1, "by_reason_recorded": {"wrong": 1}}
    assert f["paid_forms_recorded"] == {"plain": 1, "truncated": 1, "restated": 1}
    assert f["pass_at_k"]["ks"] == [1, 2] and f["pass_at_k"]["problems"] == 2
    assert f["pass_at_k"]["now"] == pytest.approx({str(k): v for k, v in now.items()})
    assert f["pass_at_k"]["recorded"] == pytest.approx({str(k): v for k, v in was.items()})
    assert [e["where"] for e in f["examples"]["paid_to_refused"]] == ["p0#0", "p1#1"]
    assert f["questions"] == {"from_rows": 4, "missing": 0}
    assert result["totals"] == {"rows": 4, "paid_recorded": 3, "paid_now": 2, "paid_to_refused": 2,
                                "refused_to_paid": 1}  # fmt: skip


def test_samples_scored_by_sound_are_audited_with_paper(tmp_path):
    """The default grader is the other one; a training run names its grader in answer_forms.json."""
    run = training_folder(tmp_path / "run", {"grader": "sound"})
    result = audit([run])
    files = {Path(f["path"]).name: f for f in result["files"]}
    assert list(files) == ["heldout_before.jsonl", "heldout_after.jsonl", "rollouts.jsonl"]
    assert {f["grader"] for f in files.values()} == {"paper"} and result["grader"] is None
    rollouts = files["rollouts.jsonl"]
    assert (rollouts["kind"], rollouts["recorded_grader"], rollouts["rows"]) == ("rollouts", "sound", 3)
    assert rollouts["refused_to_paid"] == {"count": 1, "by_reason_recorded": {"no_answer": 1}}
    assert rollouts["examples"]["refused_to_paid"][0]["where"] == "step 1"
    # recorded forms as the run wrote them; a paid answer cut off at the token limit counts as truncated
    assert rollouts["paid_forms_recorded"] == {"plain": 1, "truncated": 1}
    assert rollouts["paid_forms_recorded_read_from_answers"] == 0 and "pass_at_k" not in rollouts
    assert files["heldout_before.jsonl"]["kind"] == "heldout"
    assert files["heldout_before.jsonl"]["refused_to_paid"]["count"] == 1
    assert files["heldout_after.jsonl"]["paid_to_refused"]["count"] == 0


def test_a_training_run_without_a_named_grader_says_as_recorded(tmp_path):
    run = training_folder(tmp_path / "run")
    assert training_grader(run) is None
    code, out = invoke("audit", run / "samples" / "rollouts.jsonl", "--grader", "paper", "--no-progress")
    assert code == 0, out
    assert "(training rollouts, 3 rows; recorded grader not named; graded again with paper)" in out
    assert "  paid as recorded: 2 (66.7%); under paper: 3 (100.0%)" in out
    assert (run / "samples" / "audit.json").is_file()  # a file given: its folder
    # settings.json's grader (auto: the training grader) when answer_forms.json names none
    (run / "settings.json").write_text(json.dumps({"run": {"grader": "auto"}}))
    assert training_grader(run) == "sound"
    (run / "run_settings.json").write_text(json.dumps({"grader": "paper+echo+restatement"}))
    assert training_grader(run) == "paper+restatement+echo"
    assert (
        default_grader("sound") == "paper"
        and default_grader("paper") == "sound"
        and default_grader(None) == "sound"
    )


def test_folders_of_runs_are_searched_at_any_depth(tmp_path):
    root = tmp_path / "runs"
    for path in ("pacs/seed0/eval/greedy", "pacs/seed0/eval-24/greedy", "grpo/seed0/eval/passk"):
        eval_folder(root / path)
    training_folder(root / "pacs" / "seed0", {"grader": "sound"})
    found = find_samples([root, root / "grpo"])  # each file once
    names = [str(s.path.relative_to(root)) for s in found]
    assert names == [
        "grpo/seed0/eval/passk/samples.jsonl",
        "pacs/seed0/samples/heldout_before.jsonl",
        "pacs/seed0/samples/heldout_after.jsonl",
        "pacs/seed0/samples/rollouts.jsonl",
        "pacs/seed0/eval-24/greedy/samples.jsonl",
        "pacs/seed0/eval/greedy/samples.jsonl",
    ]
    code, out = invoke(
        "audit", root, "--grader", "paper+restatement", "--json", tmp_path / "a.json", "--no-progress"
    )
    assert code == 0, out
    assert out.splitlines()[-2].startswith("6 samples files, 17 rows: paid as recorded ")
    result = json.loads((tmp_path / "a.json").read_text())
    assert {f["grader"] for f in result["files"]} == {"paper+restatement"}
    assert len(result["files"]) == 6


def test_questions_come_from_the_benchmark_or_questions_option(tmp_path):
    """Rows without their question: the benchmark of run.json is reloaded; one that cannot be is said, and the
    rows are graded without questions (a restatement is then not told); --questions gives them."""
    data = _write(tmp_path / "mine.jsonl", [{"id": "p0", "problem": SUM, "answer": "55"},
                                            {"id": "p1", "problem": PRODUCT, "answer": "12"}])  # fmt: skip
    same_order = "The answer is 47 + 8."  # paper+restatement's rule compares the question's own spelling
    good = eval_folder(tmp_path / "good", questions=False, benchmark=str(data), restated=same_order)
    result = audit([good], "paper+restatement")
    (f,) = result["files"]
    assert f["questions"]["looked_up"] == 4 and f["questions"]["missing"] == 0
    assert f["paid_to_refused"]["by_reason_now"] == {"restatement": 1}  # the restated question, told

    lost = eval_folder(
        tmp_path / "lost", questions=False, benchmark="arithmetic-heldout", restated=same_order
    )
    code, out = invoke("audit", lost, "--grader", "paper+restatement", "--no-progress")
    assert code == 0, out
    note = next(line for line in out.splitlines() if line.startswith("  note:"))
    assert "no question for 4 of 4 rows (looked up in the benchmark 'arithmetic-heldout' (run.json)" in note
    assert "could not be loaded" in note and note.endswith("--questions SOURCE gives them")
    assert "paid -> refused: 0" in out  # without questions the restatement is paid
    code, out = invoke("audit", lost, "--grader", "paper+restatement", "--questions", data, "--no-progress")
    assert code == 0 and "paid -> refused: 1 (restatement 1)" in out and "note:" not in out


def test_dry_run_lists_what_it_would_read_and_writes_nothing(tmp_path):
    folder = eval_folder(tmp_path / "eval", questions=False)
    run = training_folder(tmp_path / "run", {"grader": "sound"})
    before = sorted(tmp_path.rglob("*"))
    code, out = invoke("audit", folder, run, "--dry-run")
    assert code == 0, out
    assert out.splitlines() == [
        "dry run: nothing is graded or written",
        f"  {folder / 'samples.jsonl'}: pacs-rl eval, 4 rows; recorded grader paper -> sound; questions from the "
        "benchmark 'arithmetic?n=2' (run.json)",
        f"  {run / 'samples' / 'heldout_before.jsonl'}: training held-out, 1 rows; recorded grader sound -> paper; "
        "questions in the rows",
        f"  {run / 'samples' / 'heldout_after.jsonl'}: training held-out, 1 rows; recorded grader sound -> paper; "
        "questions in the rows",
        f"  {run / 'samples' / 'rollouts.jsonl'}: training rollouts, 3 rows; recorded grader sound -> paper; "
        "questions in the rows",
        f"  would write {folder / 'audit.json'}",
        "every check passed",
    ]
    assert sorted(tmp_path.rglob("*")) == before


def test_errors_are_one_line_with_exit_status_2(tmp_path):
    (tmp_path / "empty").mkdir()
    stray = _write(tmp_path / "other.jsonl", [{"a": 1}])
    folder = eval_folder(tmp_path / "eval")
    cases = [
        ((tmp_path / "missing",), "no such file or folder"),
        ((tmp_path / "empty",), "no samples in it or its sub-folders"),
        ((stray,), "not a samples file"),
        ((folder, "--grader", "paper+nonsense"), "unknown rule"),
        ((folder, "--json", tmp_path), "is a folder"),
        ((folder, "--examples", "-1"), "give numbers >= 0"),
    ]
    for args, expected in cases:
        code, out = invoke("audit", *args)
        assert code == 2, (args, out)
        assert (
            len(out.strip().splitlines()) == 1
            and out.startswith("pacs-rl audit: error: ")
            and expected in out
        )
    code, out = invoke("audit")
    assert code == 2 and "Missing argument" in out


def test_broken_lines_are_left_out_and_an_empty_file_is_reported(tmp_path):
    folder = eval_folder(tmp_path / "eval")
    with (folder / "samples.jsonl").open("a") as f:
        f.write('{"problem_id": "p9", "sample_index": 0, "completion": "cut\n')
        f.write(json.dumps(_eval_row("p0", 0, "dup", 0.0, "wrong")) + "\n")
    empty = tmp_path / "empty"
    _write(empty / "samples.jsonl", [])
    code, out = invoke("audit", folder, empty, "--examples", "0", "--no-progress")
    assert code == 0, out
    assert "  2 line(s) left out: broken, duplicate, or without completion/answer/score" in out
    assert (
        f"{empty / 'samples.jsonl'} (pacs-rl eval, 0 rows; recorded grader not named; graded again with sound)"
        in out
    )
    assert "  nothing to grade" in out and " [p0#0" not in out  # no examples asked for


def test_shorten_keeps_the_end_of_a_long_completion():
    text = "Let me think.\n" * 40 + "So the answer is \\boxed{55}."
    short = shorten(text)
    assert len(short) <= 160 and short.endswith("So the answer is \\boxed{55}.") and " ... " in short
    assert "\n" not in short and shorten("a\n b") == "a b"


def test_help_lists_defaults_at_80_columns():
    result = CliRunner().invoke(app, ["audit", "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    assert max(map(len, result.output.splitlines())) <= 80 and "…" not in result.output
    text = " ".join(result.output.split())
    for shown in ("RUN_DIR", "--grader GRADER", "--examples N", "[default: 3]", "--workers N", "[default: 0]",
                  "--timeout SECONDS", "[default: 3.0]",
                  "Default: audit.json in the first RUN_DIR", "Default: sound, or paper for samples scored by sound"):  # fmt: skip
        assert shown in text, shown


def test_the_command_imports_without_the_verifier():
    import subprocess
    import sys

    code = (
        "import sys, pacs_rl.cli, pacs_rl.evaluation.audit; "
        "print(sorted(m for m in ('torch', 'sympy', 'math_verify') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
