#!/usr/bin/env bash
# Step 2 of the action: install evaltasks into its own virtualenv (the user's environment stays untouched).
# Inputs (environment): BASE_PYTHON (setup-python's interpreter), VENV_DIR, EVALTASKS_VERSION ('' = the action's
# own checkout at $GITHUB_ACTION_PATH), TORCH_INDEX_URL ('' = PyPI's torch; default PyTorch's CPU wheel index, so
# Linux runners do not download the multi-GB CUDA build), PIP_CACHE_DIR.
# EVALTASKS_ACTION_PYTHON: an interpreter that already has evaltasks (self-hosted runners, action/run-local.sh):
# nothing is installed. VENV_RESTORED=true: VENV_DIR came whole from the cache; used as it is when it runs
# evaltasks. Outputs: python=<the interpreter the other steps use>; lock=<the install lock used, or ''>.
# With a lock matching the runner (action/lock/, see action/lock.py) nothing is resolved: `pip download --no-deps`
# fetches torch==<its pin> from TORCH_INDEX_URL and every other wheel by URL and sha256 into
# $PIP_CACHE_DIR/lock-wheels (a file already there, restored by the pip cache step, is checked against its sha256
# and not fetched again: a warm cache needs no network), then `pip install --no-deps --no-index` installs those
# files and evaltasks from the checkout. Without a lock (another Python or platform, EVALTASKS_VERSION set,
# TORCH_INDEX_URL empty, or an index without the pinned torch) pip resolves the install with constraints.txt, and
# the log says why.
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
if [ "${VENV_RESTORED:-}" = "true" ]; then  # the whole venv came from the cache (key: prepare.py's venv_key)
  python="$VENV_DIR/bin/python"
  if "$python" -m evaltasks --version; then
    echo "using the virtualenv restored from the cache: nothing to install"
    echo "python=$python" >> "$GITHUB_OUTPUT"
    echo "lock=" >> "$GITHUB_OUTPUT"
    exit 0
  fi
  echo "the virtualenv restored from the cache does not run evaltasks: installing anew"
  rm -rf "$VENV_DIR"
fi
"${BASE_PYTHON:-python3}" -m venv "$VENV_DIR"
if [ -x "$VENV_DIR/bin/python" ]; then python="$VENV_DIR/bin/python"; else python="$VENV_DIR/Scripts/python.exe"; fi
pip=("$python" -m pip install --disable-pip-version-check --progress-bar off)

lock="" torch_pin="" why=""
if [ -n "${EVALTASKS_VERSION:-}" ]; then
  why="evaltasks-version is set; the lock is of the action's checkout"
elif [ -z "${TORCH_INDEX_URL:-}" ]; then
  why="torch-index-url is empty; the lock pins the CPU build of torch"
elif selected="$("$python" "$action_path/action/lock.py" select)"; then
  lock="${selected%%$'\t'*}" torch_pin="${selected#*$'\t'}"
else
  why="$selected"
fi
if [ -n "$lock" ]; then
  echo "installing from the lock ${lock#"$action_path/"}: pip install --no-deps, nothing to resolve"
  wheels="${PIP_CACHE_DIR:-$VENV_DIR.wheels}/lock-wheels"
  # --no-cache-dir: the wheels directory is the cache; pip's HTTP cache would keep a second copy of every file
  fetch=("$python" -m pip download --disable-pip-version-check --progress-bar off --no-cache-dir --no-deps
         --only-binary :all: -d "$wheels")
  torch_wheels=("$wheels/torch-${torch_pin#torch==}-"*.whl)
  if [ ! -f "${torch_wheels[0]}" ]; then
    if ! "${fetch[@]}" --index-url "$TORCH_INDEX_URL" "$torch_pin"; then
      why="$TORCH_INDEX_URL has no $torch_pin for this runner" lock=""
    fi
    torch_wheels=("$wheels/torch-${torch_pin#torch==}-"*.whl)
  fi
fi
if [ -n "$lock" ]; then
  "${fetch[@]}" --require-hashes -r "$lock"
  # the lock's files, by the names pip saved them under (the last path segment of each URL)
  files=()
  while IFS= read -r name; do files+=("$wheels/$name"); done < <(sed -nE 's|^[^# ]+ @ [^ ]*/([^/ ]+\.whl) .*$|\1|p' "$lock")
  "${pip[@]}" --no-cache-dir --no-deps --no-index "${torch_wheels[0]}" "${files[@]}"
  # setuptools (evaltasks' build backend) is in the lock: no isolated build environment to resolve
  "${pip[@]}" --no-cache-dir --no-deps --no-index --no-build-isolation "$action_path"
  "$python" -m evaltasks --version
  echo "python=$python" >> "$GITHUB_OUTPUT"
  echo "lock=$lock" >> "$GITHUB_OUTPUT"
  exit 0
fi

echo "no install lock applies ($why): pip resolves the install with constraints.txt"
pip+=(-c "$action_path/constraints.txt")
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
echo "lock=" >> "$GITHUB_OUTPUT"
