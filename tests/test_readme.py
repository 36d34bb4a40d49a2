"""Every command in README.md's code blocks is run here: `pacs-rl` commands that need a GPU, the network or
minutes of CPU as their `--dry-run` (which checks the whole call and plans it), the verl launch script as the
guard on what it launches, `pacs-rl info` for real. The install and test commands are what CI itself runs
(.ci/run, .ci/verl.sh). A README command this file cannot place fails the first test: README and tests move
together."""

from __future__ import annotations

import copy
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pacs_rl.cli import app

REPO = Path(__file__).resolve().parents[1]
# Run by CI as they are: .ci/run installs and runs the tests; .ci/verl.sh installs the verl extra
RUN_BY_CI = {"bash scripts/install.sh", "python -m pytest", 'pip install -e ".[verl]" "verl[vllm]==0.9.1"'}
# the dry run's refusals of what this machine lacks and the training machine has: an engine, a Hub model downloaded
# (offline, the run reads only the local cache)
NOT_INSTALLED = ("which is not installed", "is not in the local cache while offline")


def readme_commands() -> list[str]:
    """Every command of the README's ```bash blocks, `&&` chains split."""
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [part.strip() for line in lines if line for part in line.split("&&")]


def cli_args(command: str) -> list[str] | None:
    """The `pacs-rl` arguments that check ``command`` (its dry run where it has one), or None."""
    words = shlex.split(command)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # VAR=value before the command
        words = words[1:]
    if words[:2] == ["accelerate", "launch"] and "-m" in words:
        n = words[words.index("--num_processes") + 1] if "--num_processes" in words else "1"
        rest = words[words.index("-m") + 2 :]  # after "-m pacs_rl"
        return [*rest, "--dry-run", "--num-processes", n]
    if words[0] != "pacs-rl":
        return None
    args = words[1:]
    if args[0] in ("train", "eval", "compare") and "--dry-run" not in args:
        args.append("--dry-run")
    return args


def test_every_readme_command_has_a_test():
    unplaced = [
        c for c in readme_commands() if c not in RUN_BY_CI and cli_args(c) is None and not verl_script(c)
    ]
    assert not unplaced, f"README commands no test runs: {unplaced}"
    assert "bash scripts/install.sh && python -m pytest" in (REPO / "README.md").read_text()
    assert "bash scripts/install.sh && python -m pytest" in (REPO / ".ci" / "run").read_text()  # the same


@pytest.fixture
def workdir(tmp_path, monkeypatch, shared_data):
    """The files the README's commands name: problems.jsonl (your own data), train.jsonl (the paper's)."""
    rows = (shared_data / "train_deepscaler_subset.jsonl").read_text().splitlines()
    (tmp_path / "problems.jsonl").write_text("\n".join(rows[:200]) + "\n")
    (tmp_path / "train.jsonl").write_text("\n".join(rows) + "\n")
    for name in ("configs", "examples"):
        (tmp_path / name).symlink_to(REPO / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PACS_RL_DATA_DIR", str(shared_data))  # benchmarks by name, read locally
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


@pytest.mark.parametrize("command", [c for c in readme_commands() if cli_args(c) is not None])
def test_readme_command_checks_clean(command, workdir):
    before = sorted(p.name for p in workdir.iterdir())
    result = CliRunner().invoke(app, cli_args(command))
    out = result.output
    refusals = [line for line in out.splitlines() if line.startswith("  - ")]
    assert "Traceback" not in out and "error:" not in out, out
    # exit 0, or 1 where the only refusals are engines this machine has not installed (vLLM, DeepSpeed, wandb) or
    # Hub models it has not downloaded
    assert (result.exit_code, bool(refusals)) in ((0, False), (1, True)), out
    assert all(any(m in line for m in NOT_INSTALLED) for line in refusals), out
    assert sorted(p.name for p in workdir.iterdir()) == before  # a dry run writes nothing


def verl_script(command: str) -> Path | None:
    words = shlex.split(command)
    if words[0] == "bash" and words[1].startswith("examples/verl/"):
        return REPO / words[1]
    return None


@pytest.mark.parametrize("command", [c for c in readme_commands() if verl_script(c)])
def test_readme_verl_launch_passes_the_guard(command):
    """What the script launches: its config with its fixed overrides, through the guard the runner applies."""
    from pacs_rl.integrations.verl.guard import verl_batch_problems, verl_config_problems
    from test_verl_guard import _set, example_scripts

    launches = [
        (name, overrides) for script, name, overrides in example_scripts() if script == verl_script(command)
    ]
    assert launches, f"{command}: the script launches no config"
    for name, overrides in launches:
        config = copy.deepcopy(yaml.safe_load((REPO / "examples" / "verl" / f"{name}.yaml").read_text()))
        for override in overrides:
            key, value = override.split("=", 1)
            _set(config, key, yaml.safe_load(value))
        assert verl_config_problems(config) == [] and verl_batch_problems(config) == []


def test_readme_quick_start_trains_on_the_cpu_default_and_says_so(workdir):
    result = CliRunner().invoke(app, ["train", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "model: smollm2-135m" in result.output and "every check passed" in result.output
    info = CliRunner().invoke(app, ["info"])
    assert info.exit_code == 0 and "pacs-rl train runs on:" in info.output
    assert json.loads(json.dumps(readme_commands()))  # the README has commands at all
