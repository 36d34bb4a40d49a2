#!/usr/bin/env bash
# CI step for DeepSpeed ZeRO-3 on 2 CPU processes: adds the deepspeed extra to the active environment (the one the
# main suite ran in: torch, pacs-rl and its dev extra are there), then runs only tests/test_train_deepspeed.py,
# slow tests included. DeepSpeed's CPU accelerator talks over gloo (no oneCCL needed); its first start compiles a
# small shared-memory op with the system's C++ compiler (cached in ~/.cache/torch_extensions). How long it took is
# in docs/SCALING.md.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
  echo "deepspeed step: activate the environment pacs-rl is installed in first" >&2
  exit 1
fi
export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false DS_ACCELERATOR=cpu DS_BUILD_OPS=0
start=$(date +%s)
python -m pip install -q -e ".[deepspeed]"
python -c "import deepspeed, torch; print('deepspeed', deepspeed.__version__, 'torch', torch.__version__)"
echo "deepspeed step: install took $(( $(date +%s) - start )) s"
python -m pytest -m "slow or not slow" tests/test_train_deepspeed.py -p no:cacheprovider
echo "deepspeed step: total $(( $(date +%s) - start )) s"
