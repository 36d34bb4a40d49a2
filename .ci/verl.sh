#!/usr/bin/env bash
# CI step for the verl integration: its own venv (verl pins transformers<5.11, which the main venv does
# not use), a CPU torch first (a bare torch requirement would pull a multi-GB CUDA build), then
# pacs-rl with its verl extra, then only the tests marked `verl`. Run from the repository root or anywhere
# (it changes to the root); how long it took is in docs/VERL.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export RAY_USAGE_STATS_ENABLED=0 WANDB_MODE=disabled
start=$(date +%s)
python3 -m venv .venv-verl
. .venv-verl/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q torch==2.13.0
python -m pip install -q -e ".[verl,dev]"
python -c "import verl, torch; print('verl', verl.__version__, 'torch', torch.__version__)"
echo "verl step: install took $(( $(date +%s) - start )) s"
python -m pytest -m verl tests/test_verl*.py -p no:cacheprovider -W ignore::UserWarning
echo "verl step: total $(( $(date +%s) - start )) s"
