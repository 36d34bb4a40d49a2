#!/usr/bin/env bash
# CI step: every `pip install` line README.md and docs/ print, resolved by pip's dry run (nothing is installed) and
# checked: it resolves, TRL gets a vLLM and DeepSpeed inside the ranges it declares, and a line does not replace the
# torch a line before it installs (.ci/install_lines.py says how). Needs the package index and pip >= 22.2 (for
# --report); runs in the active environment, or in python3 where none is active. A few minutes: one resolve a line.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
PY=python
[ -n "${VIRTUAL_ENV:-}" ] || PY=python3
"$PY" -c "import packaging" 2>/dev/null || "$PY" -m pip install -q packaging
"$PY" -u .ci/install_lines.py
echo "install lines step: $(( $(date +%s) - start )) s"
