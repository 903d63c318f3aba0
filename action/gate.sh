#!/usr/bin/env bash
# Last step of the action: fail when the gate failed (unless fail-on-gate is false) or evaltasks could not run.
# Environment: EXIT_CODE (evaltasks' exit code; empty when it never ran), FAIL_ON_GATE (true/false, normalised
# by prepare.py from true/false/yes/no/1/0).
set -euo pipefail
fail_on_gate="$(printf '%s' "${FAIL_ON_GATE:-true}" | tr '[:upper:]' '[:lower:]')"
case "${EXIT_CODE:-}" in
  0) echo "evaltasks: the gate held" ;;
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
