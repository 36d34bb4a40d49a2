"""A run's final weights and its last checkpoint hold the same weights: they are stored once (a hard link, else a
symbolic link, else the copy stays), every loader still reads final/, a resumed run writes new weights without
touching the checkpoint's; a run that took no optimizer step says so in its summary and card."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from pacs_rl.cli import app
from pacs_rl.run_folder import share_weights, unshare_weights

HELPERS = Path(__file__).resolve().parent / "train_helpers.py"
SETS = ["per_device_train_batch_size=4", "num_generations=2", "max_completion_length=6", "train_size=40",
        "eval_batch_size=4", "save_steps=10", "learning_rate=1e-3"]  # fmt: skip


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    final, checkpoint = tmp_path / "final", tmp_path / "checkpoint-2"
    for folder in (final, checkpoint):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"weights" * 100)
        (folder / "config.json").write_text("{}")
    (final / "adapter_model.safetensors").write_bytes(b"mine")
    (checkpoint / "adapter_model.safetensors").write_bytes(b"theirs")
    return final, checkpoint


def test_identical_weight_files_become_one_file_and_others_stay(tmp_path):
    final, checkpoint = _folders(tmp_path)
    assert share_weights(final, checkpoint) == ["model.safetensors"]
    assert os.path.samefile(final / "model.safetensors", checkpoint / "model.safetensors")
    assert (final / "adapter_model.safetensors").read_bytes() == b"mine"  # differs: kept as it is
    assert not os.path.samefile(final / "config.json", checkpoint / "config.json")  # not a weight file
    assert share_weights(final, checkpoint) == ["model.safetensors"]  # again: already one file
    assert not list(final.glob(".*"))  # no temporary file left
    # writing final/ again: the link goes first, so the checkpoint keeps its bytes
    unshare_weights(final)
    assert not (final / "model.safetensors").exists() and (final / "adapter_model.safetensors").exists()
    (final / "model.safetensors").write_bytes(b"new weights")
    assert (checkpoint / "model.safetensors").read_bytes() == b"weights" * 100


def test_without_hard_links_a_symbolic_link_and_without_either_the_copy(tmp_path, monkeypatch):
    def no_link(*args, **kwargs):
        raise OSError("not supported here")

    final, checkpoint = _folders(tmp_path)
    monkeypatch.setattr(os, "link", no_link)
    assert share_weights(final, checkpoint) == ["model.safetensors"]
    path = final / "model.safetensors"
    assert path.is_symlink() and os.readlink(path) == os.path.join("..", "checkpoint-2", "model.safetensors")
    assert path.read_bytes() == b"weights" * 100
    unshare_weights(final)
    assert not path.exists() and (checkpoint / "model.safetensors").is_file()
    path.write_bytes(b"weights" * 100)
    monkeypatch.setattr(os, "symlink", no_link)
    assert share_weights(final, checkpoint) == []
    assert not path.is_symlink() and path.stat().st_nlink == 1 and path.read_bytes() == b"weights" * 100


def _train(out: Path, *extra: str):
    args = [
        "train",
        "--model",
        "tiny",
        "--max-steps",
        "2",
        "--eval-size",
        "4",
        "-o",
        str(out),
        "--no-progress",
    ]
    return CliRunner().invoke(app, [*args, *(a for s in SETS for a in ("--set", s)), *extra])


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """A tiny run of 2 steps whose every step is skipped (the tiny random model earns no reward: no signal)."""
    out = tmp_path_factory.mktemp("stored_once") / "run"
    result = _train(out)
    assert result.exit_code == 0, result.output
    return out, result


def test_a_run_stores_its_final_weights_once_and_says_it_took_no_step(untrained):
    out, result = untrained
    final, checkpoint = out / "final" / "model.safetensors", out / "checkpoint-2" / "model.safetensors"
    assert os.path.samefile(final, checkpoint)  # one file, two names
    assert (
        "no optimizer step changed the weights: all 2 were skipped, so final/ holds the weights the run"
        in (result.output)
    )
    for card in (out / "README.md", out / "final" / "README.md"):
        text = card.read_text()
        assert "**Untrained:** no optimizer step changed the weights: all 2 were skipped" in text, card


def test_the_loaders_read_the_final_weights_stored_once(untrained):
    from transformers import AutoModelForCausalLM

    out, _ = untrained
    model = AutoModelForCausalLM.from_pretrained(out / "final")
    base = AutoModelForCausalLM.from_pretrained(out / "base_model")  # the weights it started from
    for (name, a), (_, b) in zip(model.state_dict().items(), base.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    result = CliRunner().invoke(app, ["eval", "--model", str(out / "final"), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "eval" / "greedy-n1-6tok" / "metrics.json").read_text())["n"] == 1


def test_a_resumed_run_writes_new_final_weights_and_leaves_the_checkpoint_as_it_was(untrained, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(untrained[0], out, symlinks=True)  # its own copy: the module's run stays as it was
    shutil.rmtree(out / "eval", ignore_errors=True)
    checkpoint = out / "checkpoint-2" / "model.safetensors"
    os.link(checkpoint, out / "final" / "model.safetensors.tmp")  # copytree copies: make them one file again
    os.replace(out / "final" / "model.safetensors.tmp", out / "final" / "model.safetensors")
    before = _digest(checkpoint)
    # a signal this time (a label by the digits' parity), so the steps move the weights
    result = _train(out, "--resume", "--max-steps", "4", "--set", f"reward_funcs={HELPERS}:parity_reward")
    assert result.exit_code == 0, result.output
    assert _digest(checkpoint) == before  # the checkpoint kept its bytes while final/ was written again
    final, last = out / "final" / "model.safetensors", out / "checkpoint-4" / "model.safetensors"
    assert _digest(final) != before and os.path.samefile(final, last)
    assert "no optimizer step changed the weights" not in result.output
