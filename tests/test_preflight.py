"""The dry run refuses what the run refuses: every refusal `pacs-rl train`, `eval` and `compare` make before the
weights load comes from their `--dry-run` too, with the same words in the same order; those made before torch
(`pacs_rl.preflight` and each command's checks built on it) come from the dry run with no heavy library imported.

All the commands run in one fresh process (the test process has torch loaded): first every dry run, the ones
answered before torch first, recording after each which heavy libraries are imported; then every real command.
The time a dry run takes to answer is measured by benchmarks/cli_error_latency.py, not here."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from pacs_rl.data.loaders import hub_dataset_cached
from pacs_rl.preflight import Preflight
from pacs_rl.rewards.graders import REWARD_KEYWORDS, load_reward_function, reward_call_problem

SRC = Path(__file__).resolve().parents[1] / "src"
HEAVY = ("torch", "transformers", "trl", "accelerate", "datasets")


class Case(NamedTuple):
    what: str
    args: list[str]
    needle: str  # a piece of the refusal, so that a case refused for another reason fails
    before_torch: bool = True  # refused by the checks before torch (else by the trainer config or tokenizer)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


TINY = ["--model", "tiny"]
# fmt: off
CASES = [
    # ---- train: names, types and domains (read by the command line itself, the same for both)
    Case("train: unknown setting", ["train", "--set", "nosuchkey=1"], "unknown setting 'nosuchkey'"),
    Case("train: a value out of its domain", ["train", "--max-steps", "0"], "max_steps=0"),
    Case("train: a run key out of its domain", ["train", "--set", "eval_size=-1"], "eval_size=-1"),
    Case("train: YAML syntax error", ["train", "--config", "syntax.yaml"], "YAML syntax error"),
    # ---- train: data
    Case("train: dataset file missing", ["train", "--dataset", "nosuch.jsonl"], "file not found: nosuch.jsonl"),
    Case("train: bad row", ["train", *TINY, "--dataset", "bad_row.jsonl", "--no-skip-bad-rows"],
         "line 2: missing field 'answer'"),
    Case("train: too few problems", ["train", *TINY, "--dataset", "two.jsonl"], "gives 2 usable training problem"),
    Case("train: eval_dataset file missing", ["train", *TINY, "--set", "eval_dataset=held_missing.jsonl"],
         "file not found: held_missing.jsonl"),
    Case("train: eval_dataset not in the offline cache", ["train", *TINY, "--set", "eval_dataset=math500"],
         "'math500' is read from the Hugging Face Hub (HuggingFaceH4/MATH-500) and is not in the local"),
    Case("train: Hub dataset not cached, and a held-out file missing",
         ["train", *TINY, "--dataset", "nobody/no-such-dataset", "--set", "eval_dataset=held_missing.jsonl"],
         "dataset 'nobody/no-such-dataset' is read from the Hugging Face Hub"),
    # ---- train: the model
    Case("train: Hub model not in the offline cache", ["train", "--model", "nobody/no-such-model"],
         "not in the local cache while offline"),
    Case("train: model folder without config.json", ["train", "--model", "empty_dir"], "has no config.json"),
    # ---- train: reward functions
    Case("train: reward module that does not import", ["train", *TINY, "--set", "reward_funcs=math,nosuch_mod_xyz:f"],
         "cannot import 'nosuch_mod_xyz'"),
    Case("train: reward file missing", ["train", *TINY, "--set", "reward_funcs=missing_rewards.py:f"],
         "does not exist"),
    Case("train: reward file that fails as it imports", ["train", *TINY, "--set", "reward_funcs=broken_rewards.py:f"],
         "RuntimeError: broken on purpose"),
    Case("train: reward function missing", ["train", *TINY, "--set", "reward_funcs=rewards.py:nosuch"],
         "has no attribute 'nosuch'"),
    Case("train: reward that is not callable", ["train", *TINY, "--set", "reward_funcs=rewards.py:not_callable"],
         "is a int, not callable"),
    Case("train: reward function of the wrong arguments", ["train", *TINY, "--set", "reward_funcs=rewards.py:bare"],
         "bare(completions) cannot be called as the trainer calls a reward function"),
    Case("train: reward weights of another count", ["train", *TINY, "--set", "reward_weights=[1.0,0.5]"],
         "has 2 weight(s) for 1 reward function(s)"),
    # ---- train: the output folder
    Case("train: output folder is a file", ["train", *TINY, "-o", "a_file.txt"], "--output-dir a_file.txt is a file"),
    Case("train: checkpoints without --resume", ["train", *TINY, "-o", "old_run"], "already holds checkpoints"),
    Case("train: --resume without a checkpoint", ["train", *TINY, "--resume", "-o", "empty_dir"],
         "no complete checkpoint-* folder"),
    Case("train: --resume of another number of processes", ["train", *TINY, "--resume", "-o", "two_process_run"],
         "was written by 2 processes and this run has 1"),
    # ---- train: a DeepSpeed file (and DeepSpeed itself where it is not installed)
    Case("train: DeepSpeed file missing", ["train", *TINY, "--set", "deepspeed=nosuch_ds.json"],
         "deepspeed='nosuch_ds.json': no such file"),
    Case("train: DeepSpeed file not JSON", ["train", *TINY, "--set", "deepspeed=syntax.yaml"], "not valid JSON"),
    # ---- eval
    Case("eval: benchmark file missing", ["eval", *TINY, "-b", "nosuch.jsonl"], "file not found: nosuch.jsonl"),
    Case("eval: benchmark not in the offline cache", ["eval", *TINY, "--benchmarks", "math500"],
         "'math500' is read from the Hugging Face Hub"),
    Case("eval: benchmark without problems", ["eval", *TINY, "-b", "empty.jsonl"], "no problems to evaluate"),
    Case("eval: Hub model not in the offline cache", ["eval", "--model", "nobody/no-such-model", "-b", "two.jsonl"],
         "not in the local cache while offline"),
    Case("eval: samples drawn with other settings", ["eval", *TINY, "-b", "two.jsonl", "-o", "other_eval"],
         "holds samples drawn with other settings"),
    Case("eval: output folder is a file", ["eval", *TINY, "-b", "two.jsonl", "-o", "a_file.txt"], "is a file"),
    # ---- compare
    Case("compare: training file missing", ["compare", "--preset", "smoke", "--dataset", "nosuch.jsonl"],
         "train.dataset cannot be used: file not found"),
    Case("compare: benchmark file missing", ["compare", "--preset", "smoke", "--benchmarks", "nosuch.jsonl"],
         "eval.benchmarks 'nosuch.jsonl' cannot be used: file not found"),
    Case("compare: benchmark not in the offline cache", ["compare", "--preset", "smoke", "--benchmarks", "math500"],
         "eval.benchmarks 'math500' is read from the Hugging Face Hub"),
    Case("compare: Hub model not in the offline cache", ["compare", "--preset", "smoke", "-m", "nobody/no-such-model"],
         "not in the local cache while offline"),
    Case("compare: output folder is a file", ["compare", "--preset", "smoke", "-o", "a_file.txt"], "is a file"),
    Case("compare paired: output folder is a file", ["compare", "paired", "-o", "a_file.txt"], "is a file"),
    # ---- compare: every method and variant checked as `pacs-rl train` checks it, before any run starts
    Case("compare: a sweep value train refuses", ["compare", "--preset", "smoke", "--sweep", "pacs_beta=0,1"],
         "--sweep pacs_beta=0 (pacs): pacs_beta=0.0: give a number > 0"),
    Case("compare: a method named twice", ["compare", "--preset", "smoke", "--methods", "pacs,grpo,pacs"],
         "--methods lists a method twice"),
    Case("compare paired: a variant's value train refuses", ["compare", "paired", "--methods", "pacs[pacs_beta=0],grpo"],
         "--methods 'pacs[pacs_beta=0]': pacs_beta=0: give a number > 0"),
    Case("compare paired: a variant's unknown setting", ["compare", "paired", "--methods", "pacs[pacs_bta=1],grpo"],
         "unknown setting 'pacs_bta' in --methods 'pacs[pacs_bta=1]'. Did you mean: pacs_beta?"),
    Case("compare paired: a method named twice", ["compare", "paired", "--methods", "pacs,grpo,pacs"],
         "--methods lists a method twice"),
    Case("compare paired: no GRPO arm", ["compare", "paired", "--methods", "pacs,pacs_clip"],
         "a paired record without a grpo arm never reaches its stopping rule"),
    # ---- refused by the trainer config class (TRL) or with the tokenizer: the dry run imports them too
    Case("train: a KL term PACS does not have", ["train", *TINY, "--set", "beta=0.1"], "beta=0.1", False),
    Case("train: a TRL field PACSTrainer would ignore", ["train", *TINY, "--set", "scale_rewards=none"],
         "scale_rewards='none' is not honoured", False),
    Case("train: TRL's evaluate", ["train", *TINY, "--set", "eval_strategy=steps"], "eval_strategy='steps'", False),
    Case("train: every prompt too long", ["train", *TINY, "--set", "max_prompt_tokens=2", "-o", "long_prompts"],
         "max_prompt_tokens=2: every one of the", False),
]
# fmt: on
if not _installed("vllm"):
    CASES += [
        Case("train: engine not installed", ["train", *TINY, "--set", "use_vllm=true"], "needs vLLM"),
        Case(
            "eval: engine not installed",
            ["eval", *TINY, "-b", "two.jsonl", "--backend", "vllm"],
            "needs vLLM",
        ),
    ]
CASES.sort(key=lambda c: not c.before_torch)  # the dry runs answered before torch run first in the process

SCRIPT = f"""
import json, sys
from pathlib import Path
from typer.testing import CliRunner
from pacs_rl.cli import app

cases, heavy = json.loads(Path(sys.argv[1]).read_text()), {HEAVY!r}
tree = lambda: sorted(str(p) for p in Path('.').rglob('*'))
answers, runner, before = {{}}, CliRunner(), tree()
for what, args in cases:
    result = runner.invoke(app, [*args, "--dry-run"])
    loaded = [m for m in heavy if m in sys.modules]
    answers[what] = {{"dry_code": result.exit_code, "dry": result.output, "heavy": loaded}}
written = sorted(set(tree()) - set(before))
for what, args in cases:
    result = runner.invoke(app, args)
    answers[what].update(real_code=result.exit_code, real=result.output)
print(json.dumps({{"answers": answers, "written_by_dry_runs": written}}))
"""


def _files(folder: Path) -> None:
    rows = [{"problem": "What is 1+1?", "answer": "2"}, {"problem": "What is 2+2?", "answer": "4"}]
    (folder / "two.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "bad_row.jsonl").write_text(
        json.dumps(rows[0]) + "\n" + json.dumps({"problem": "no answer"}) + "\n"
    )
    (folder / "empty.jsonl").write_text("")
    (folder / "a_file.txt").write_text("not a folder\n")
    (folder / "syntax.yaml").write_text("learning_rate: 1e-5\nmax_steps: [3\n")
    (folder / "rewards.py").write_text(
        "def bare(completions):\n    return [0.0] * len(completions)\n\nnot_callable = 3\n"
    )
    (folder / "broken_rewards.py").write_text("raise RuntimeError('broken on purpose')\n")
    (folder / "empty_dir").mkdir()
    (folder / "old_run" / "checkpoint-2").mkdir(parents=True)
    checkpoint = folder / "two_process_run" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2, "max_steps": 4}))
    for rank in (0, 1):
        (checkpoint / f"pacs_trainer_state_rank{rank}.pt").write_bytes(b"")
    (folder / "other_eval").mkdir()
    (folder / "other_eval" / "samples.jsonl").write_text(
        json.dumps({"problem_id": "a", "sample_index": 0, "score": 1.0}) + "\n"
    )
    (folder / "other_eval" / "run.json").write_text(json.dumps({"settings": {"model": "another-model"}}))


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    """Every case's dry run and real command, in one fresh process, offline with empty caches."""
    folder = tmp_path_factory.mktemp("preflight")
    _files(folder)
    (folder / "cases.json").write_text(json.dumps([[c.what, c.args] for c in CASES]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PACS_RL_"))}
    env |= {"HF_HUB_OFFLINE": "1", "HF_HOME": str(folder / "hf"), "PACS_RL_CACHE": str(folder / "cache")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *sys.path])
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(folder / "cases.json")], cwd=folder, env=env, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _message(code: int, output: str, dry: bool) -> str:
    """The refusals of one answer as the run's one error line gives them: ``pacs-rl ...: error: A; B`` (exit 2),
    or a dry run's list (exit 1), joined the same way."""
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("note: ")]
    errors = [line.split(": error: ", 1)[1] for line in lines if ": error: " in line]
    if code == 2 and len(errors) == 1:
        return errors[0]
    assert dry and code == 1, output
    return "; ".join(line.removeprefix("  - ") for line in lines[lines.index(next(x for x in lines if x.startswith("refused ("))) + 1:])  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.what for c in CASES])
def test_the_dry_run_refuses_what_the_run_refuses(answers, case):
    answer = answers["answers"][case.what]
    real = _message(answer["real_code"], answer["real"], dry=False)
    dry = _message(answer["dry_code"], answer["dry"], dry=True)
    assert case.needle in real, real
    assert dry == real  # the same refusals, in the same order, with the same words
    if case.before_torch:
        assert answer["heavy"] == [], f"the dry run imported {answer['heavy']} before refusing"


def test_the_dry_runs_wrote_nothing(answers):
    assert answers["written_by_dry_runs"] == []


def test_two_refusals_come_in_the_order_the_run_makes_them(answers):
    answer = answers["answers"]["train: Hub dataset not cached, and a held-out file missing"]
    refused = answer["dry"].split("refused (2):")[1]
    assert refused.index("nobody/no-such-dataset") < refused.index("held_missing.jsonl"), answer["dry"]


def test_a_hub_dataset_counts_as_cached_where_the_datasets_library_reads_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    for key in ("HF_DATASETS_CACHE", "HF_HUB_CACHE"):
        monkeypatch.delenv(key, raising=False)
    assert not hub_dataset_cached("HuggingFaceH4/MATH-500")
    (tmp_path / "datasets" / "HuggingFaceH4___math-500" / "default" / "0.0.0" / "abc123").mkdir(parents=True)
    assert hub_dataset_cached("HuggingFaceH4/MATH-500")
    assert not hub_dataset_cached("math-ai/aime25")
    (tmp_path / "hub" / "datasets--math-ai--aime25" / "snapshots" / "0123abcd").mkdir(parents=True)
    assert hub_dataset_cached("math-ai/aime25")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("PACS_RL_DATA_DIR", raising=False)
    check = Preflight(network=False)
    check.hub_data("aime25", "eval_dataset")  # cached: not refused
    check.hub_data("aime24", "eval_dataset")
    assert len(check.refusals) == 1 and "'aime24' is read from the Hugging Face Hub" in check.refusals[0]


def test_a_reward_function_is_checked_against_the_keywords_the_trainer_passes(tmp_path):
    from pacs_rl.data import Problem
    from pacs_rl.training.data import build_dataset

    columns = set(build_dataset([Problem("a", "What is 1+1?", "2")]).column_names)
    assert columns - {"prompt"} <= set(REWARD_KEYWORDS)  # every column but the prompt reaches the function

    def takes_what_it_uses(completions, answer, **kwargs):
        return [0.0] * len(completions)

    def names_every_one(prompts, completions, completion_ids, answer, problem, problem_id, truncated,
                        trainer_state, log_extra, log_metric):  # fmt: skip
        return [0.0] * len(completions)

    def misses_kwargs(completions, answer):
        return [0.0] * len(completions)

    assert reward_call_problem(takes_what_it_uses) is None and reward_call_problem(names_every_one) is None
    assert "def misses_kwargs(completions, answer, **kwargs)" in reward_call_problem(misses_kwargs)
    module = tmp_path / "once.py"
    module.write_text("RUNS = []\nRUNS.append(1)\ndef f(completions, **kwargs):\n    return [0.0]\n")
    first = load_reward_function(f"{module}:f")
    assert load_reward_function(f"{module}:f") is first  # a file is run once: the check and the run share it
    assert sys.modules[first.__module__].RUNS == [1]
