#!/usr/bin/env bash
# Run this composite action (action.yml) locally the way a GitHub runner would: every `run:` step in bash
# with GITHUB_OUTPUT / GITHUB_STEP_SUMMARY / GITHUB_EVENT_PATH, `if:` conditions and `${{ }}` expressions
# evaluated, and the `uses:` steps (setup-python, cache, upload-artifact) replaced by local equivalents.
#
#   EVALTASKS_ACTION_PYTHON=.venv/bin/python action/run-local.sh --with suite=examples/quickstart/suite.yaml
#   action/run-local.sh --help
#
# EVALTASKS_ACTION_PYTHON: an interpreter with evaltasks installed (the install step then installs nothing);
# without it the install step builds a fresh virtualenv as on a runner (minutes; needs the package index).
# GITHUB_API_URL / GITHUB_TOKEN: where the PR comment goes (e.g. a local test server).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${EVALTASKS_ACTION_PYTHON:-python3}"
exec "$python" "$here/_local_runner.py" "$@"
