#!/usr/bin/env bash
# CI step for the slow tests that launch several processes and need nothing beyond the main suite's environment:
# 2 CPU processes over gloo (accelerate launch --multi_gpu), where the no-signal skip and dynamic sampling are
# decided across processes and a run resumes exactly (tests/test_train_ddp.py), and where a SIGTERM to the launcher
# stops both processes in the middle of a step (tests/test_train_stop.py, which also stops `pacs-rl train` on one
# process mid-sampling, mid-update and in the evaluation before training, and reads its log file). The main suite
# skips them (`slow`); the DeepSpeed ones run in .ci/deepspeed.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
start=$(date +%s)
python -m pytest -m slow tests/test_train_ddp.py tests/test_train_stop.py -p no:cacheprovider
echo "multi-process step: $(( $(date +%s) - start )) s"
