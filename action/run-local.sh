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
# EVALTASKS_LOCAL_OUT: where the job summary and the action's outputs are kept (default .evaltasks/action-local).
# --cache-store DIR: the emulated Actions cache (virtualenv, index, model, task results, and the baseline a push
# saves and a pull request compares with); default .evaltasks/action-cache in the workspace (one per checkout).
#
# Without --runner-temp the runner's scratch directory (RUNNER_TEMP: event, Prefect home, logs, the artifact
# copy) is a new temporary directory, removed on exit; what a user wants from the run is kept and its paths
# printed: the reports and comment.md in the output directory, the job summary and outputs.json in
# EVALTASKS_LOCAL_OUT. With --runner-temp DIR nothing is removed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
runner="$here/../.ci/local_runner.py"  # the runner: a developer's tool kept out of the shipped action folder
python="${EVALTASKS_ACTION_PYTHON:-python3}"

runner_temp="" outputs_json="" prev=""
for arg in "$@"; do
  case "$prev" in
    --runner-temp) runner_temp="$arg" ;;
    --outputs-json) outputs_json="$arg" ;;
  esac
  case "$arg" in
    --runner-temp=*) runner_temp="${arg#*=}" ;;
    --outputs-json=*) outputs_json="${arg#*=}" ;;
    -h | --help) exec "$python" "$runner" "$@" ;;
  esac
  prev="$arg"
done

extra=()
if [ -z "$runner_temp" ]; then
  runner_temp="$(mktemp -d "${TMPDIR:-/tmp}/evaltasks-runner-XXXXXXXX")"
  trap 'rm -rf -- "$runner_temp"' EXIT  # scratch only: what is worth keeping is copied out below
  extra+=(--runner-temp "$runner_temp")
fi
if [ -z "$outputs_json" ]; then
  outputs_json="$runner_temp/outputs.json"
  extra+=(--outputs-json "$outputs_json")
fi

code=0
"$python" "$runner" ${extra[@]+"${extra[@]}"} "$@" || code=$?

[ -f "$outputs_json" ] || exit "$code"  # usage error: the runner said why
keep="${EVALTASKS_LOCAL_OUT:-.evaltasks/action-local}"
"$python" - "$outputs_json" "$keep" <<'PY' || echo "run-local: could not keep the job summary (see above)" >&2
import json, shutil, sys
from pathlib import Path

data = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
keep = Path(sys.argv[2])
keep.mkdir(parents=True, exist_ok=True)
(keep / "job-summary.md").write_text(data.get("summary", ""), encoding="utf-8")
if Path(sys.argv[1]).resolve() != (keep / "outputs.json").resolve():
    shutil.copyfile(sys.argv[1], keep / "outputs.json")
outputs = data.get("outputs", {})
output_dir = Path(data.get("steps", {}).get("prepare", {}).get("outputs", {}).get("output-dir", ""))
print("── kept:")
print(f"   job summary  {keep / 'job-summary.md'}")
print(f"   outputs      {keep / 'outputs.json'}")
if outputs.get("results-path"):
    print(f"   reports      {outputs['results-path']}, junit.xml, summary.md")
if str(output_dir) and (output_dir / "comment.md").is_file():
    posted = f"posted as comment {outputs['comment-id']}" if outputs.get("comment-id") else "not posted"
    print(f"   comment      {output_dir / 'comment.md'} ({posted})")
PY
exit "$code"
