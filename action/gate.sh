#!/usr/bin/env bash
# Last step of the action: fail when the gate failed (unless fail-on-gate is false) or evaltasks could not run.
# The gate holds only when evaltasks exited 0 AND its results.json (in OUTPUT_DIR) says "passed": true: an exit
# code alone is not trusted (docs/action.md#github-action).
# A run whose every target lacked its secret (a fork's pull request; SKIPPED=true from run.sh) evaluated nothing
# and passes with a warning: a missing key never fails the run (docs/action.md#prompt-changes-on-every-pull-request).
# Environment: EXIT_CODE (evaltasks' exit code; empty when it never ran), SKIPPED, FAIL_ON_GATE (true/false, normalised
# by prepare.py from true/false/yes/no/1/0), OUTPUT_DIR (where results.json was written), PYTHON (a Python to
# read it with; default python3).
set -euo pipefail
fail_on_gate="$(printf '%s' "${FAIL_ON_GATE:-true}" | tr '[:upper:]' '[:lower:]')"

# "true", "false", or why results.json cannot tell (missing, unreadable, no boolean "passed")
results_passed() {
  local results="${OUTPUT_DIR:-.}/results.json"
  if [ ! -f "$results" ]; then echo "$results is missing"; return; fi
  "${PYTHON:-python3}" - "$results" <<'PY' 2>/dev/null || echo "$results cannot be read"
import json, sys
try:
    with open(sys.argv[1], encoding="utf-8") as handle:
        passed = json.load(handle).get("passed")
except (OSError, ValueError, AttributeError) as exc:
    print(f"{sys.argv[1]} cannot be read ({type(exc).__name__})")
else:
    print({True: "true", False: "false"}.get(passed, f'{sys.argv[1]} has no boolean "passed"')
          if isinstance(passed, bool) else f'{sys.argv[1]} has no boolean "passed"')
PY
}

if [ "${SKIPPED:-}" = "true" ] && [ "${EXIT_CODE:-}" = "0" ]; then
  echo "::warning title=evaltasks::nothing was evaluated: every target needs a secret this run does not have; the gate was not applied"
  exit 0
fi

case "${EXIT_CODE:-}" in
  0)
    passed="$(results_passed)"
    if [ "$passed" = "true" ]; then
      echo "evaltasks: the gate held"
    elif [ "$passed" = "false" ]; then
      echo "::error title=evaltasks::evaltasks exited 0 but results.json says passed: false; the gate fails"
      exit 1
    else
      echo "::error title=evaltasks::evaltasks exited 0 but $passed; the gate fails"
      exit 1
    fi
    ;;
  1)
    if [ "$fail_on_gate" = "false" ]; then
      echo "::warning title=evaltasks::the gate failed (fail-on-gate: false, so the step passes)"
    else
      echo "evaltasks: the gate failed"
      exit 1
    fi
    ;;
  2) echo "evaltasks: invalid input, nothing was scored (see the run step's log)"; exit 1 ;;
  "") echo "evaltasks did not run (an earlier step failed)"; exit 1 ;;
  *) echo "evaltasks: the run aborted with exit code $EXIT_CODE (see the run step's log)"; exit 1 ;;
esac
