#!/usr/bin/env bash
# PACS on one GPU: Qwen2.5-0.5B-Instruct, 64 prompts x 8 completions per step, 4 optimizer steps each.
# Install from the root of a clone of this repository:
#   pip install torch==<your CUDA build> && pip install -e ".[verl]" "verl[vllm]==0.9.1"
# Extra arguments are hydra overrides, e.g. actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-$HOME/data/pacs}
# Any JSONL with problem/answer fields works as the training set: TRAIN_SOURCE=path/to/train.jsonl.
[ -f "$DATA_DIR/train.parquet" ] || python -m pacs_rl.integrations.verl.data \
  "${TRAIN_SOURCE:-agentica-org/DeepScaleR-Preview-Dataset}" "$DATA_DIR/train.parquet"
[ -f "$DATA_DIR/math500.parquet" ] || python -m pacs_rl.integrations.verl.data \
  math500 "$DATA_DIR/math500.parquet" --data-source math500

export PACS_TRAIN_FILES="$DATA_DIR/train.parquet" PACS_VAL_FILES="$DATA_DIR/math500.parquet"
python -m pacs_rl.integrations.verl \
  --config-path="$PWD/examples/verl" --config-name=pacs_qwen2.5_0.5b_single_gpu "$@"
