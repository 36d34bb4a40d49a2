"""Shared fixtures. Tests never touch the network: tiny random models are built in code, real data is
read from the shared data folder beside the project (``../shared/data``) when it is there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tiny models gain nothing from a second OpenMP thread, and on a loaded machine the threads of an
# oversubscribed pool wait on each other and run several times slower. Set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]


def _shared_data_dir() -> Path:
    return Path(os.environ.get("PACS_RL_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real benchmark/training JSONL files (MATH-500, AIME 2024, ...)."""
    path = _shared_data_dir()
    if not (path / "math500.jsonl").is_file():
        pytest.skip(f"shared data not found at {path} (set PACS_RL_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from pacs_rl.models import tiny_tokenizer as make

    return make()


@pytest.fixture()
def tiny_model(tiny_tokenizer):
    from pacs_rl.models import tiny_random_model

    return tiny_random_model(tiny_tokenizer, seed=0)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A folder holding a tiny random model + tokenizer, usable wherever a --model path is taken."""
    from pacs_rl.models import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0)


@pytest.fixture(scope="session")
def bundled_model_dir() -> Path:
    """The real SmolLM2-135M-Instruct, converted once and cached (skip when not installed)."""
    from pacs_rl.models import bundled_gguf_path, convert_bundled

    try:
        bundled_gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    return convert_bundled()
