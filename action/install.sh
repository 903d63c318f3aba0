#!/usr/bin/env bash
# Step 2 of the action: install evaltasks into its own virtualenv (the user's environment stays untouched).
# Inputs (environment): BASE_PYTHON (setup-python's interpreter), VENV_DIR, EVALTASKS_VERSION ('' = the action's
# own checkout at $GITHUB_ACTION_PATH), TORCH_INDEX_URL ('' = PyPI's torch; default PyTorch's CPU wheel index, so
# Linux runners do not download the multi-GB CUDA build), PIP_CACHE_DIR.
# EVALTASKS_ACTION_PYTHON: an interpreter that already has evaltasks (self-hosted runners, action/run-local.sh):
# nothing is installed. Output: python=<the interpreter the other steps use>.
set -euo pipefail

if [ -n "${EVALTASKS_ACTION_PYTHON:-}" ]; then
  if ! "$EVALTASKS_ACTION_PYTHON" -c "import evaltasks" 2>/dev/null; then
    echo "::error title=evaltasks::EVALTASKS_ACTION_PYTHON=$EVALTASKS_ACTION_PYTHON cannot import evaltasks"
    exit 1
  fi
  # absolute: later steps may run in another working-directory
  python="$("$EVALTASKS_ACTION_PYTHON" -c 'import sys; print(sys.executable)')"
  echo "using the preinstalled evaltasks of $python"
  echo "python=$python" >> "$GITHUB_OUTPUT"
  exit 0
fi

action_path="${GITHUB_ACTION_PATH:?}"
"${BASE_PYTHON:-python3}" -m venv "$VENV_DIR"
if [ -x "$VENV_DIR/bin/python" ]; then python="$VENV_DIR/bin/python"; else python="$VENV_DIR/Scripts/python.exe"; fi
pip=("$python" -m pip install --disable-pip-version-check --progress-bar off -c "$action_path/constraints.txt")
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  # torch alone from PyTorch's index (constraints.txt pins its version); everything else from PyPI.
  "${pip[@]}" --index-url "$TORCH_INDEX_URL" torch
fi
if [ -n "${EVALTASKS_VERSION:-}" ]; then
  "${pip[@]}" "evaltasks==$EVALTASKS_VERSION"
else
  "${pip[@]}" "$action_path"
fi
"$python" -m evaltasks --version
echo "python=$python" >> "$GITHUB_OUTPUT"
