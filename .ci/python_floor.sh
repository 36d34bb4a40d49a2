#!/usr/bin/env bash
# CI step: the grader on the lowest Python the package declares (pyproject.toml's requires-python, 3.10 today), in an
# environment of its own that holds only what the grader imports (math-verify, which brings sympy and the LaTeX
# parser) and the test tools; no torch. It runs the grader's tests there: the reading of answers by an adversary and
# by an examiner, the MATH-style corpus, the final form, the examiner's set of real completions and the reward
# functions.
#
# The interpreter: python<floor> on PATH, else one that pyenv installed, else uv's (`uv python install`, which
# downloads a build; uv itself comes from pip when missing), so a clean machine with network runs it too. Run from
# the repository root or anywhere (it changes to the root).
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
start=$(date +%s)
floor=$(sed -n 's/^requires-python *= *">= *\([0-9][0-9.]*\)".*/\1/p' pyproject.toml)
if [ -z "$floor" ]; then
  echo "python floor step: no 'requires-python = \">=X.Y\"' line in pyproject.toml" >&2
  exit 1
fi

find_python() {
  if command -v "python$floor" >/dev/null 2>&1 && "python$floor" -c "" 2>/dev/null; then
    command -v "python$floor"
    return
  fi
  if command -v pyenv >/dev/null 2>&1; then
    local found
    found=$(ls -d "$(pyenv root)/versions/$floor".*/bin/python 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -n "$found" ]; then
      echo "$found"
      return
    fi
  fi
  if ! command -v uv >/dev/null 2>&1; then
    if [ -n "${VIRTUAL_ENV:-}" ]; then
      python3 -m pip install -q uv >&2  # into the active environment (CI's), whose bin is on PATH
    else
      python3 -m pip install -q --user uv >&2
      export PATH="$HOME/.local/bin:$PATH"
    fi
  fi
  uv python install "$floor" >&2
  uv python find "$floor"
}

python_bin=$(find_python)
version=$("$python_bin" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$version" != "$floor" ]; then
  echo "python floor step: found $python_bin, which is Python $version, not $floor" >&2
  exit 1
fi
rm -rf .venv-floor
"$python_bin" -m venv .venv-floor
. .venv-floor/bin/activate
python -m pip install -q --upgrade pip
# the grader's own dependencies as pyproject.toml declares them, and the test tools of its dev extra
math_verify=$(grep -o '"math-verify[^"]*"' pyproject.toml | head -n 1 | tr -d '"')
python -m pip install -q "$math_verify" "pytest>=8" "hypothesis>=6.100"
echo "python floor step: $(python --version) from $python_bin, install took $(( $(date +%s) - start )) s"
PYTHONPATH=src python -m pytest -p no:cacheprovider -q \
  tests/test_grader_adversary.py tests/test_grader_corpus.py tests/test_grader_commitment.py \
  tests/test_grader_final_form.py tests/test_examiner_set.py tests/test_rewards.py
echo "python floor step: total $(( $(date +%s) - start )) s"
