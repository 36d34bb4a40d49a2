"""`pacs-rl eval --dry-run` and `pacs-rl compare --dry-run`: the plan of a call, checked, with nothing loaded,
read from the Hub or written."""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from pacs_rl.cli import app


def invoke(*args, env=None):
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.output


def tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_eval_dry_run_plans_every_model_and_benchmark_without_writing(tmp_path, monkeypatch):
    data = tmp_path / "mine.jsonl"
    data.write_text(
        "".join(json.dumps({"problem": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(5))
    )
    data.open("a").write("not json\n")
    before = tree(tmp_path)
    monkeypatch.delenv("PACS_RL_DATA_DIR", raising=False)
    args = ["eval", "-m", "tiny", "-m", "Qwen/Qwen2.5-0.5B-Instruct", "-b", f"{data},math500", "--n", "paper",
            "-o", str(tmp_path / "out"), "--dry-run"]  # fmt: skip
    # online: what the run reads from the Hub is named, not read (a dry run uses no network)
    code, out = invoke(*args, env={"HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0"})
    assert code == 0, out
    assert "5 problems, 1 bad rows skipped" in out  # the local file was read, as the run would
    assert "math500: from the Hub (HuggingFaceH4/MATH-500) when the run starts" in out
    assert "Qwen/Qwen2.5-0.5B-Instruct (from the Hub when the run starts)" in out
    assert f"-> {tmp_path / 'out' / 'tiny' / 'mine'} (new)" in out  # one folder per model and benchmark
    assert "\nevery check passed" in out and "refused" not in out
    # offline, the run reads only the local caches, which hold neither: both refused, as the run refuses them
    empty = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": None, "HF_DATASETS_CACHE": None}
    code, out = invoke(*args, env={"HF_HUB_OFFLINE": "1", **empty})
    assert code == 1 and "refused (2):" in out, out
    assert "the Hub model 'Qwen/Qwen2.5-0.5B-Instruct' is not in the local cache while offline" in out
    assert (
        "'math500' is read from the Hugging Face Hub (HuggingFaceH4/MATH-500) and is not in the local" in out
    )
    assert tree(tmp_path) == before  # nothing written


def test_eval_dry_run_says_what_a_rerun_resumes_and_refuses_a_missing_engine(tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "samples.jsonl").write_text('{"id": "a"}\n{"id": "b"}\n')
    code, out = invoke("eval", "-m", "tiny", "-b", "arithmetic?n=6&seed=1", "--n", "2", "-o", str(out_dir),
                       "--dry-run")  # fmt: skip
    assert code == 0 and "6 problems; n = 2, k = 1,2" in out and "(resumes (2 samples there))" in out
    if importlib.util.find_spec("vllm") is None:
        code, out = invoke("eval", "-m", "tiny", "-b", "arithmetic?n=6", "--backend", "vllm", "--dry-run",
                           "-o", str(tmp_path / "v"))  # fmt: skip
        assert code == 1 and "--backend vllm needs vLLM, which is not installed" in out
        assert not (tmp_path / "v").exists()


def test_compare_dry_run_counts_the_runs_and_what_is_done(tmp_path):
    out_dir = tmp_path / "cmp"
    code, out = invoke("compare", "--preset", "smoke", "--methods", "pacs,grpo,pacs_no_weight", "--seed", "0,1",
                       "-o", str(out_dir), "--dry-run")  # fmt: skip
    assert code == 0, out
    assert "training runs: 6 = 3 variant(s) x seeds [0, 1]" in out
    assert "pacs_no_weight (PACS w/o weight)" in out
    assert "(its record holds 0 of 6 runs, the base model not yet)" in out
    assert not out_dir.exists()
    # what its record holds: a finished run of the same protocol counts, the base model's evaluation too
    from pacs_rl.compare.plan import comparison_protocol, resolve_settings
    from pacs_rl.compare.record import new_record, save_record

    settings = resolve_settings(preset="smoke", cli={"methods": ["pacs", "grpo", "pacs_no_weight"]})
    record = new_record(comparison_protocol(settings))
    record["base"] = {"method": "base", "evals": {}}
    record["runs"] = [
        {
            "method": "grpo",
            "seed": 1,
            "evals": {},
            "dynamics": {"steps": 0, "curves": {"entropy": [], "length": []}},
        }
    ]
    save_record(out_dir / "record.json", record)
    code, out = invoke("compare", "--preset", "smoke", "--methods", "pacs,grpo,pacs_no_weight", "--seed", "0,1",
                       "-o", str(out_dir), "--dry-run")  # fmt: skip
    assert code == 0 and "(its record holds 1 of 6 runs, the base model evaluated)" in out, out
    code, out = invoke(
        "compare", "--preset", "smoke", "-d", "missing.jsonl", "-o", str(tmp_path / "x"), "--dry-run"
    )
    assert code == 1 and "train.dataset cannot be used: file not found: missing.jsonl" in out
    assert "Traceback" not in out and not (tmp_path / "x").exists()


@pytest.mark.parametrize("command", ["eval", "compare"])
def test_dry_run_is_in_the_help(command):
    code, out = invoke(command, "--help")
    assert code == 0 and "--dry-run" in out


def test_train_dry_run_refuses_counts_of_zero_by_name_without_a_traceback(tmp_path):
    """A batch count of 0 used to end the plan in a ZeroDivisionError; each is now refused by its declared check,
    and the trainer config (which would divide by them) is not built."""
    code, out = invoke("train", "--model", "tiny", "--dry-run", "-o", str(tmp_path / "x"), "--set", "num_generations=0",
                       "--set", "gradient_accumulation_steps=0", "--set", "per_device_train_batch_size=0")  # fmt: skip
    assert code == 1 and "Traceback" not in out and "ZeroDivisionError" not in out, out
    assert "refused (3):" in out, out
    for name, least in (
        ("num_generations", 2),
        ("gradient_accumulation_steps", 1),
        ("per_device_train_batch_size", 1),
    ):
        assert f"  - {name}=0: give a whole number >= {least}" in out, out
