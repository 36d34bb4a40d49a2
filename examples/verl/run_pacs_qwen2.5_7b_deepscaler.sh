#!/usr/bin/env bash
# PACS, the paper's recipe (Appendix B.2): Qwen2.5-7B on DeepScaleR, 8 nodes x 8 GPUs, 300 steps.
# Run on the head node of a Ray cluster that spans the 8 nodes (`ray start --head` here,
# `ray start --address=<head>:6379` on the others), in an environment made on every node, from the root
# of a clone of this repository, with
#   pip install torch==<your CUDA build> && pip install -e ".[verl]" "verl[vllm]==0.9.1"
# Extra arguments are hydra overrides, e.g. trainer.total_training_steps=10.
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA_DIR=${DATA_DIR:-$HOME/data/pacs}
# DeepScaleR (~40k problems) and MATH-500 into verl's parquet layout, the paper's prompt (Appendix B.1).
[ -f "$DATA_DIR/deepscaler.parquet" ] || python -m pacs_rl.integrations.verl.data \
  "${DEEPSCALER:-agentica-org/DeepScaleR-Preview-Dataset}" "$DATA_DIR/deepscaler.parquet" --data-source deepscaler
[ -f "$DATA_DIR/math500.parquet" ] || python -m pacs_rl.integrations.verl.data \
  math500 "$DATA_DIR/math500.parquet" --data-source math500

export PACS_TRAIN_FILES="$DATA_DIR/deepscaler.parquet" PACS_VAL_FILES="$DATA_DIR/math500.parquet"
# Registers PACS, refuses settings that split groups, then runs verl's PPO main with this config.
python -m pacs_rl.integrations.verl \
  --config-path="$PWD/examples/verl" --config-name=pacs_qwen2.5_7b_deepscaler "$@"
