"""Every shell command in the code blocks of docs/*.md is run here, the way tests/test_readme.py runs the README's:
`pacs-rl train|eval|compare|audit` as their `--dry-run` (which checks the whole call and plans it: the options,
settings, files and models it names), other `pacs-rl` commands for real, `accelerate launch ... -m pacs_rl train`
as the dry run of its processes, the verl launch scripts through the guard their runner applies, the benchmark
and helper scripts by the options their `--help` lists, `pip install` lines by the extras the project declares. A command
this file cannot place fails the first test, so a docs command and the code move together.

The files the commands name (my.yaml, problems.jsonl, path/to/checkpoint, a finished run in runs/x, ...) are made
here, small: a tiny random model, a few rows, a local copy of each named benchmark in $PACS_RL_DATA_DIR."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from typer.testing import CliRunner

from pacs_rl.cli import app
from pacs_rl.evaluation.cli import eval_config, resolve_task
from train_helpers import resolve

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md"))  # the user docs; docs/benchmarks/ holds records, not instructions
# a dry run's refusals of what this machine lacks and the training machine has: an engine, a Hub model downloaded
# (offline, the run reads only the local cache)
NOT_INSTALLED = ("which is not installed", "is not installed", "is not in the local cache while offline")
# Commands of tools outside this project, run as the docs show them on a GPU machine
EXTERNAL = ("vllm serve",)


def doc_commands(path: Path) -> list[str]:
    """The commands of ``path``'s ```bash blocks: continuation lines joined, comments dropped, `&&` chains split."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.split(r"\s+#\s", " " + line)[0].strip() if not line.lstrip().startswith("#") else ""
            out += [part.strip().rstrip("&").strip() for part in line.split("&&") if part.strip()]
    return out


COMMANDS = [(doc.name, c) for doc in DOCS for c in doc_commands(doc)]


def _words(command: str) -> list[str]:
    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VAR=value before the command
        words = words[1:]
    return words


def cli_args(command: str) -> list[str] | None:
    """The `pacs-rl` arguments that check ``command`` (its dry run where it has one), or None."""
    words = _words(command)
    if "-m" in words and words[words.index("-m") + 1 : words.index("-m") + 2] == ["pacs_rl"]:
        launch = words[: words.index("-m")]  # accelerate launch ... (or "..." in a fragment)
        n = launch[launch.index("--num_processes") + 1] if "--num_processes" in launch else "1"
        rest = words[words.index("-m") + 2 :]
        if rest[:1] != ["train"] or (launch[:2] != ["accelerate", "launch"] and launch != ["..."]):
            return None
        return [*rest, "--dry-run", "--num-processes", n]
    if not words or words[0] != "pacs-rl":
        return None
    args = words[1:]
    # eval's --merge tables finished runs, for real; compare's --merge has a dry run
    merge_flag = args[0] == "eval" and "--merge" in args
    if args[0] in ("train", "eval", "compare", "audit") and "--dry-run" not in args and not merge_flag:
        args.append("--dry-run")
    return args


# accelerate launch's options that reach the run through the environment (what accelerate sets for its processes)
ACCELERATE_ENV = {
    "--use_fsdp": ("ACCELERATE_USE_FSDP", "true"),
    "--use_deepspeed": ("ACCELERATE_USE_DEEPSPEED", "true"),
    "--deepspeed_config_file": ("ACCELERATE_DEEPSPEED_CONFIG_FILE", None),
    "--mixed_precision": ("ACCELERATE_MIXED_PRECISION", None),
}


def launch_env(command: str) -> dict[str, str]:
    """The environment ``command`` gives the run: its VAR=value prefixes and accelerate launch's options."""
    words = shlex.split(command)
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    deepspeed = importlib.util.find_spec("deepspeed") is not None
    for i, word in enumerate(words[: words.index("-m")] if "-m" in words else []):
        if "deepspeed" in word and not deepspeed:
            continue  # accelerate launch refuses --use_deepspeed itself where DeepSpeed is not installed
        if word in ACCELERATE_ENV:
            key, value = ACCELERATE_ENV[word]
            env[key] = value if value is not None else words[i + 1]
    return env


def verl_script(command: str) -> Path | None:
    words = _words(command)
    if words[:1] == ["bash"] and words[1].startswith("examples/verl/"):
        return REPO / words[1]
    return None


def benchmark_script(command: str) -> tuple[Path, list[str]] | None:
    words = _words(command)
    if words[:1] == ["python"] and len(words) > 1 and words[1].startswith(("benchmarks/", "scripts/")):
        return REPO / words[1], words[2:]
    return None


def pip_extras(command: str) -> list[str] | None:
    """The extras a `pip install` line names of this project (``-e ".[vllm,deepspeed]"``); None for another command."""
    words = _words(command)
    if words[:2] != ["pip", "install"]:
        return None
    return [e for w in words if w.startswith(".[") for e in w[2:].rstrip("]").split(",")]


def verl_module(command: str) -> bool:
    """`python -m pacs_rl.integrations.verl ...`: verl's own command line, in the verl environment (docs/VERL.md)."""
    return _words(command)[:3] == ["python", "-m", "pacs_rl.integrations.verl"]


def external(command: str) -> bool:
    return " ".join(_words(command)).startswith(EXTERNAL)


def test_every_docs_command_has_a_test():
    assert COMMANDS, "no command found in docs/*.md"
    placed = (cli_args, verl_script, benchmark_script, pip_extras)
    unplaced = [
        (doc, c)
        for doc, c in COMMANDS
        if all(f(c) is None for f in placed) and not verl_module(c) and not external(c)
    ]
    assert not unplaced, f"docs commands no test runs: {unplaced}"
    assert not [c for _, c in COMMANDS if "shared/data" in c], "a docs command names a path outside the clone"


def test_docs_name_no_path_outside_the_clone():
    for doc in DOCS:
        text = doc.read_text()
        assert "../shared" not in text and "/work/" not in text, f"{doc.name} names a path outside the clone"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished tiny run (2 steps, a checkpoint each), as `pacs-rl train` leaves it."""
    from pacs_rl.training.run import build_config, run_training

    out = tmp_path_factory.mktemp("docs-run") / "run"
    sets = ["model=tiny", "max_steps=2", "save_steps=1", "per_device_train_batch_size=4", "num_generations=2",
            "max_completion_length=6", "train_size=40", "eval_size=4", "eval_batch_size=4"]  # fmt: skip
    settings, cfg = resolve(None, {}, sets)
    run_training(settings, build_config(cfg, out), progress=False)
    return out


@pytest.fixture(scope="module")
def docs_folder(tmp_path_factory, finished_run, tiny_model_dir) -> Path:
    """The files and folders the docs' commands name, made once."""
    tmp_path = tmp_path_factory.mktemp("docs")
    rows = [
        {"problem": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)} for i in range(1100)
    ]  # a paper batch
    lines = "".join(json.dumps(r) + "\n" for r in rows)
    for name in ("problems.jsonl", "train.jsonl"):
        (tmp_path / name).write_text(lines)
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps({"question": r["problem"], "solution": r["answer"]}) + "\n" for r in rows)
    )
    chats = [{"messages": [{"role": "user", "content": r["problem"]}], **r} for r in rows]
    (tmp_path / "chats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chats))
    (tmp_path / "my.yaml").write_text("model: tiny\nuse_cpu: false\nbf16: true\n")  # a config for GPUs
    data = tmp_path / "benchmark-data"  # the named benchmarks, read locally ($PACS_RL_DATA_DIR)
    data.mkdir()
    for name in ("math500", "aime24", "aime25", "amc23"):  # a local copy has problem and answer fields
        bench = [
            {"id": f"{name}-{i}", "problem": r["problem"], "answer": r["answer"]}
            for i, r in enumerate(rows[:8])
        ]
        (data / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bench))
    (tmp_path / "mypkg").mkdir()
    reward = "def {}(completions, **kwargs):\n    return [0.0 for _ in completions]\n"
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "rewards.py").write_text(reward.format("format_ok") + reward.format("my_reward"))
    (tmp_path / "path" / "to").mkdir(parents=True)
    (tmp_path / "path" / "to" / "my_rewards.py").write_text(reward.format("exact_match"))
    shutil.copytree(tiny_model_dir, tmp_path / "path" / "to" / "checkpoint")
    for name in ("runs/x", "runs/pacs-20261126", "runs/pacs_vs_grpo/pacs/seed0"):
        shutil.copytree(finished_run, tmp_path / name, symlinks=True)
    # the current paired record and a second machine's copy of it (`compare paired --merge`)
    for name in ("docs/benchmarks/pacs_vs_grpo.json", "gpu.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / "docs" / "benchmarks" / "pacs_vs_grpo.json", tmp_path / name)
    for name in ("configs", "examples", "benchmarks", "scripts"):
        (tmp_path / name).symlink_to(REPO / name)
    # an eval folder (what `pacs-rl audit runs/smol-arith` reads) and finished evaluations to merge
    mp = pytest.MonkeyPatch()
    mp.chdir(tmp_path)
    made = CliRunner().invoke(app, ["eval", "--model", str(tiny_model_dir), "-b", "arithmetic?n=2&ops=+-&digits=2,1",
                                    "--n", "1", "--max-new-tokens", "4", "-o", "runs/smol-arith", "--no-progress"])  # fmt: skip
    mp.undo()
    assert made.exit_code == 0, made.output
    for name in ("base", "pacs", "grpo"):
        shutil.copytree(tmp_path / "runs" / "smol-arith", tmp_path / "runs" / name)
    # runs/smol-arith is the folder EVALUATION.md's first evaluation writes (drawn here with the tiny model, for
    # speed): it records that command's settings, so that the docs' rerun of the command resumes it
    task = resolve_task(["smollm2-135m"], {"benchmarks": ["arithmetic?n=100&seed=0&ops=+-&digits=2,1"], "n": "8",
                                           "temperature": None, "top_p": None, "max_new_tokens": 128, "grader": None,
                                           "output_dir": "runs/smol-arith"})  # fmt: skip
    locked = eval_config(task, {})[0].locked()
    (tmp_path / "runs" / "smol-arith" / "run.json").write_text(json.dumps({"settings": locked}))
    return tmp_path


@pytest.fixture
def workdir(docs_folder, monkeypatch):
    """In the docs' folder, with its benchmarks ($PACS_RL_DATA_DIR) and reward module (mypkg) in reach, offline."""
    monkeypatch.chdir(docs_folder)
    monkeypatch.syspath_prepend(str(docs_folder))  # mypkg.rewards
    monkeypatch.setenv("PACS_RL_DATA_DIR", str(docs_folder / "benchmark-data"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return docs_folder


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts)


@pytest.mark.parametrize(("doc", "command"), [(d, c) for d, c in COMMANDS if cli_args(c) is not None])
def test_docs_command_checks_clean(doc, command, workdir, monkeypatch):
    args = cli_args(command)
    for key, value in launch_env(command).items():
        monkeypatch.setenv(key, value)
    before = _files(workdir)
    result = CliRunner().invoke(app, args)
    out = result.output
    refusals = [line for line in out.splitlines() if line.startswith("  - ")]
    assert "Traceback" not in out and "error:" not in out, f"{doc}: {command}\n{out}"
    # exit 0, or 1 where the only refusals are engines this machine has not installed (vLLM, DeepSpeed, wandb) or
    # Hub models it has not downloaded
    assert (result.exit_code, bool(refusals)) in ((0, False), (1, True)), f"{doc}: {command}\n{out}"
    assert all(any(m in line for m in NOT_INSTALLED) for line in refusals), f"{doc}: {command}\n{out}"
    if "--dry-run" in args:
        assert _files(workdir) == before, f"{doc}: {command}: a dry run wrote files"


@pytest.fixture(autouse=True)
def _no_deepspeed_state_left():
    """A plan under DeepSpeed registers transformers' process-wide DeepSpeed config: drop it after each command."""
    yield
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()


@pytest.mark.parametrize(("doc", "command"), [(d, c) for d, c in COMMANDS if verl_script(c)])
def test_docs_verl_launch_passes_the_guard(doc, command):
    from test_readme import test_readme_verl_launch_passes_the_guard as check

    check(command)


@pytest.mark.parametrize(("doc", "command"), [(d, c) for d, c in COMMANDS if benchmark_script(c)])
def test_docs_script_command_uses_options_the_script_has(doc, command):
    script, args = benchmark_script(command)
    assert script.is_file(), f"{doc}: {script.name} does not exist"
    sub = [args[0]] if args and not args[0].startswith("-") else []
    helped = subprocess.run(
        [sys.executable, str(script), *sub, "--help"], capture_output=True, text=True, cwd=REPO
    )
    assert helped.returncode == 0, helped.stderr
    for option in (a.split("=")[0] for a in args if a.startswith("--")):
        assert option in helped.stdout, f"{doc}: {command}: {script.name} {' '.join(sub)} has no {option}"


@pytest.mark.parametrize(("doc", "command"), [(d, c) for d, c in COMMANDS if pip_extras(c)])
def test_docs_pip_lines_name_extras_the_project_declares(doc, command):
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(pip_extras(command)) <= set(declared), f"{doc}: {command}"


def test_verl_module_commands_name_the_plugin_entry_point():
    if any(verl_module(c) for _, c in COMMANDS):
        assert importlib.util.find_spec("pacs_rl.integrations.verl.__main__") is not None
