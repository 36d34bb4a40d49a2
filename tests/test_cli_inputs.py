"""Bad input to `pacs-rl train`, `eval` and `compare`: each is refused with exit status 2 and exactly one line
(`pacs-rl <command>: error: ...`) that names the input, without a traceback, and nothing is written. The same
mistakes are answered before torch or TRL is imported (checked in a fresh process; the time it takes is measured
by benchmarks/cli_error_latency.py, not here)."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pacs_rl.cli import app

TWO_ROWS = [{"problem": "What is 1+1?", "answer": "2"}, {"problem": "What is 2+2?", "answer": "4"}]


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    """An empty folder as the working directory, with the files the cases name; the cache inside it too."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PACS_RL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    Path("a_file.txt").write_text("not a folder\n")
    Path("two.jsonl").write_text(
        "\n".join(json.dumps(r) for r in [*TWO_ROWS, {"problem": "no answer"}]) + "\n"
    )
    Path("syntax.yaml").write_text("learning_rate: 1e-5\nmax_steps: [3\n")
    Path("list.yaml").write_text("- learning_rate\n- max_steps\n")
    Path("typo.yaml").write_text("lerning_rate: 1e-5\n")
    Path("compare_typo.yaml").write_text("model: tiny\ntrain:\n  dataset: arithmetic\n  lerning_rate: 1e-5\n")
    Path("compare_eval.yaml").write_text("model: tiny\neval:\n  temperature: -1\n")
    Path("vllm.yaml").write_text("train:\n  dataset: arithmetic?n=16\n  use_vllm: true\n")
    Path("empty_run").mkdir()
    Path("old_run/checkpoint-2").mkdir(parents=True)
    yield tmp_path
    logger = logging.getLogger("pacs_rl")  # the command's note handler wrote to the runner's closed stream
    for handler in [h for h in logger.handlers if getattr(h, "_pacs_cli", False)]:
        logger.removeHandler(handler)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# (arguments, a piece of the one error line that names the input); exit status 2 for all
CASES = [
    # ---- train: names and types of settings
    (["train", "--set", "nosuchkey=1"], "unknown setting 'nosuchkey' in --set"),
    (["train", "--set", "learning_rat=1e-5"], "Did you mean: learning_rate"),
    (["train", "--set", "learning_rate"], "--set 'learning_rate': expected key=value"),
    (["train", "--max-steps", "0"], "max_steps=0: give a number of optimizer steps >= 1"),
    (["train", "--max-steps", "abc"], "max_steps='abc': expected int"),
    (["train", "--set", "max_steps=-5"], "max_steps=-5"),
    (["train", "--set", "pacs_weighted=maybe"], "pacs_weighted='maybe': expected a bool"),
    (["train", "--set", "eval_size=-1"], "eval_size=-1"),
    (["train", "--set", "grader=lenient"], "unknown base grader 'lenient'"),
    (["train", "--loss-type", "nosuch"], "loss_type='nosuch' is not a registered policy loss"),
    (["train", "--set", "num_generations=3"], "not a multiple of num_generations=3"),
    (["train", "--set", "value_clip_eps=0.5"], "value_clip_eps only apply to loss_type='ppo'"),
    (["train", "--set", "disable_tqdm=true"], "disable_tqdm in --set"),
    (["train", "--set", "report_to=nosuchtracker"], "report_to='nosuchtracker' is no tracker"),
    (["train", "--nosuch-option", "1"], "No such option: --nosuch-option"),
    (["train", "--num-processes", "2"], "--num-processes plans a --dry-run"),
    # ---- train: files, folders, model, data
    (["train", "--config", "missing.yaml"], "--config missing.yaml: the file does not exist"),
    (["train", "--config", "syntax.yaml"], "syntax.yaml:3:1: YAML syntax error"),
    (["train", "--config", "list.yaml"], "list.yaml: expected a mapping"),
    (
        ["train", "--config", "typo.yaml"],
        "unknown setting 'lerning_rate' in typo.yaml. Did you mean: learning_rate",
    ),
    (["train", "--output-dir", "a_file.txt"], "--output-dir a_file.txt is a file"),
    (["train", "-o", "a_file.txt/run"], "is under a_file.txt, which is a file"),
    (["train", "--resume"], "--resume needs --output-dir"),
    (["train", "--resume", "-o", "empty_run"], "--resume: no complete checkpoint-* folder in empty_run"),
    (["train", "-o", "old_run"], "old_run already holds checkpoints: pass --resume"),
    (["train", "--model", "/no/such/model"], "model '/no/such/model' is no bundled alias"),
    (["train", "--model", "nobody/no-such-model-xyz"], "not in the local cache while offline"),
    (["train", "--dataset", "missing.jsonl"], "file not found: missing.jsonl"),
    (
        ["train", "--model", "tiny", "--dataset", "two.jsonl"],
        "dataset 'two.jsonl' gives 2 usable training problem(s)",
    ),
    (["train", "--dataset", "two.jsonl", "--no-skip-bad-rows"], "line 3: missing field 'answer'"),
    (["train", "--dataset", "arithmetic?ops=^"], "ops must be a non-empty combination"),
    # ---- train: values out of their declared domain (training/schema.py, trl_fields.py)
    (["train", "--set", "pacs_beta=0"], "pacs_beta=0: give a number > 0"),
    (["train", "--set", "pacs_beta=-1"], "pacs_beta=-1: give a number > 0"),
    (["train", "--set", "temperature=-1"], "temperature=-1: give a number > 0"),
    (["train", "--set", "top_p=1.5"], "top_p=1.5: give a number in (0, 1]"),
    (["train", "--set", "top_p=0"], "top_p=0: give a number in (0, 1]"),
    (["train", "--learning-rate", "-1"], "learning_rate=-1.0: give a number > 0"),
    (["train", "--learning-rate", "0"], "learning_rate=0.0: give a number > 0 (0 trains nothing)"),
    (
        ["train", "--set", "max_grad_norm=.inf"],
        "max_grad_norm=inf: give a number >= 0 (0 or null: no clipping)",
    ),
    (["train", "--set", "max_completion_length=0"], "max_completion_length=0: give a whole number >= 1"),
    (["train", "--set", "lora_r=0"], "lora_r=0: give a whole number >= 1"),
    (["train", "--set", "lora_dropout=1.5"], "lora_dropout=1.5: give a number in [0, 1)"),
    (["train", "--set", "num_generations=0"], "num_generations=0: give a whole number >= 2"),
    (
        ["train", "--set", "gradient_accumulation_steps=0"],
        "gradient_accumulation_steps=0: give a whole number >= 1",
    ),
    (
        ["train", "--set", "per_device_train_batch_size=0"],
        "per_device_train_batch_size=0: give a whole number >= 1",
    ),
    (["train", "--set", "lr_scheduler_type=cosin"], "lr_scheduler_type='cosin'; use one of"),
    (["train", "--set", "seed=-1"], "seed=-1: give a whole number in [0, 4294967295]"),
    # ---- eval
    (["eval"], "give --model"),
    (
        ["eval", "--model", "/no/such/model", "-b", "arithmetic?n=2"],
        "model '/no/such/model' is no bundled alias",
    ),
    (["eval", "--model", "tiny", "-b", "missing.jsonl"], "file not found: missing.jsonl"),
    (
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--n", "0"],
        "--n '0': samples per problem must be >= 1",
    ),
    (["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--n", "many"], "--n takes a number"),
    (["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--k", "1,x"], "--k takes comma-separated integers"),
    (
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--n", "4", "--k", "64"],
        "k values [64] are outside",
    ),
    (
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--grader", "lenient"],
        "unknown base grader 'lenient'",
    ),
    (["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--backend", "nosuch"], "backend='nosuch'"),
    (
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--chat-template-kwargs", "{bad"],
        "--chat-template-kwargs",
    ),
    (
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "-o", "a_file.txt"],
        "--output-dir a_file.txt is a file",
    ),
    (["eval", "--model", "tiny", "--max-new-tokens", "abc"], "Invalid value for '--max-new-tokens'"),
    # ---- eval: values out of their declared domain (EvalConfig, evaluation/runner.py), as options and with --set
    (
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--temperature", "-1"],
        "temperature=-1.0: give a number >= 0",
    ),
    (
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--set", "top_p=1.5"],
        "top_p=1.5: give a number in (0, 1]",
    ),
    (
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--max-new-tokens", "0"],
        "max_new_tokens=0: give a whole",
    ),
    (
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--batch-size", "0"],
        "batch_size=0: give a whole number",
    ),
    (
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--set", "verify_timeout=0"],
        "verify_timeout=0: give a",
    ),
    (
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--set", "nosuch=1"],
        "unknown setting 'nosuch' in --set",
    ),
    (
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--set", "temperatur=1"],
        "Did you mean: temperature",
    ),
    (["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--set", "n=abc"], "n='abc': expected int"),
    # ---- compare
    (["compare", "--methods", "pacs,nosuch"], "unknown method(s) ['nosuch']"),
    (["compare", "--max-steps", "0", "--model", "tiny"], "--max-steps 0: give a whole number >= 1"),
    (["compare", "--sweep", "nosuch=1,2"], "unknown setting 'nosuch' in --sweep 'nosuch=1,2'"),
    # ---- compare: every method, variant and sweep value checked as `pacs-rl train` checks it
    (["compare", "--sweep", "pacs_beta=0,1"], "--sweep pacs_beta=0 (pacs): pacs_beta=0.0: give a number > 0"),
    (["compare", "--methods", "pacs,pacs[pacs_bta=1]"], "Did you mean: pacs_beta?"),
    (["compare", "--methods", "pacs,grpo,pacs[pacs_beta=1]"], "pacs[pacs_beta=1] trains as pacs"),
    (["compare", "--config", "missing.yaml"], "--config missing.yaml: the file does not exist"),
    (["compare", "--config", "syntax.yaml"], "syntax.yaml:3:1: YAML syntax error"),
    (
        ["compare", "--config", "compare_typo.yaml"],
        "unknown setting 'lerning_rate' in train. Did you mean: learning_rate",
    ),
    (["compare", "--preset", "nosuch"], "--preset 'nosuch' is unknown"),
    (["compare", "--seed", "a,b"], "--seed 'a,b': give whole numbers"),
    (["compare", "--model", "tiny", "-o", "a_file.txt"], "--output-dir a_file.txt is a file"),
    (["compare", "--model", "/no/such/model"], "model '/no/such/model' is no bundled alias"),
    (["compare", "--model", "tiny", "--dataset", "missing.jsonl"], "file not found: missing.jsonl"),
    (["compare", "--model", "tiny", "--n", "0"], "samples per problem must be >= 1"),
    # ---- compare: eval section values out of the domain EvalConfig declares for them (compare/plan.py)
    (["compare", "--config", "compare_eval.yaml"], "eval.temperature=-1: give a number >= 0"),
    (["compare", "--model", "tiny", "--k", "0"], "eval.ks=[0]: give whole numbers >= 1"),
]
# an engine or tracker that is not installed (only where it is not)
if not _installed("vllm"):
    CASES.append((["train", "--set", "use_vllm=true"], "use_vllm=true needs vLLM, which is not installed"))
    CASES.append((["compare", "--model", "tiny", "--config", "vllm.yaml"], "train: use_vllm=true needs vLLM"))
if not _installed("wandb"):
    CASES.append((["train", "--report_to", "wandb"], "report_to='wandb' needs wandb"))


def test_the_table_is_at_least_thirty_inputs():
    assert len(CASES) >= 30 and {args[0] for args, _ in CASES} == {"train", "eval", "compare"}


@pytest.mark.parametrize(("args", "needle"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(workdir, args, needle):
    before = _tree(workdir)
    result = CliRunner().invoke(app, args)
    lines = [line for line in result.output.splitlines() if line.strip() and not line.startswith("note: ")]
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)  # no other exception
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"pacs-rl {args[0]}: error: "), lines[0]
    assert needle in lines[0], lines[0]
    assert _tree(workdir) == before  # no run folder, no model in the cache, nothing


def test_mistakes_are_answered_before_torch_or_trl_load(workdir):
    """In a fresh process (the test process has torch loaded): a bad setting, a YAML error, max_steps 0, an output
    path that is a file and too few training problems are refused with torch and TRL never imported."""
    script = (
        "import sys\n"
        "from pacs_rl.cli import main\n"
        "sys.argv = ['pacs-rl', *sys.argv[1:]]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as e:\n"
        "    loaded = [m for m in ('torch', 'trl', 'transformers', 'datasets') if m in sys.modules]\n"
        "    print('exit', e.code, 'loaded', loaded)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"), *sys.path])}
    for args in (
        ["train", "--set", "nosuchkey=1"],
        ["train", "--config", "syntax.yaml"],
        ["train", "--max-steps", "0"],
        ["train", "--set", "pacs_beta=0"],
        ["train", "--set", "num_generations=0"],
        ["train", "-o", "a_file.txt"],
        ["train", "--model", "tiny", "--dataset", "two.jsonl"],
        ["compare", "--methods", "nosuch"],
        ["compare", "--config", "compare_eval.yaml"],
        ["compare", "--sweep", "pacs_beta=0,1"],
        ["compare", "paired", "--methods", "pacs[nosuchkey=1],grpo"],
        ["eval", "--model", "tiny", "-b", "missing.jsonl"],
        ["eval", "--model", "tiny", "-b", "arithmetic?n=2", "--set", "temperature=-1"],
    ):
        out = subprocess.run(
            [sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, cwd=workdir
        )
        assert "exit 2 loaded []" in out.stdout, (args, out.stdout, out.stderr)
