#!/usr/bin/env bash
# Step 3 of the action: run `evaltasks run` on the suite; never fails the step (the last step applies the
# gate), so that caches are saved and reports written whatever happens. Outputs: exit-code=<evaltasks' code>
# (0 gate held, 1 gate failed, 2 invalid input, 3 aborted); baseline-saved=true when results.json was copied
# into BASELINE_DIR to be cached as this branch's baseline; skipped=true when every target of the suite lacked
# its secret, so nothing ran, and skipped-reason naming the targets skipped (missing_targets.py).
# Environment: PYTHON, SUITE, OUTPUT_DIR, INDEX_DIR (EVALTASKS_INDEX_DIR), BASELINE_FILE, BASELINE_AUTO,
# BASELINE_LABEL, BASELINE_DIR, SAVE_BASELINE, SKIP_MISSING_CREDENTIALS, REGRESSION_TOLERANCE, RUN_LOG,
# PREFECT_RESULTS_LOCAL_STORAGE_PATH.
set -uo pipefail

: > "$RUN_LOG"
fail_input() {  # a user mistake found here: say it in the log, the run log (shown in the job summary), exit 2
  echo "::error title=evaltasks::$1"
  echo "evaltasks: error: $1" >> "$RUN_LOG"
  echo "exit-code=2" >> "$GITHUB_OUTPUT"
  exit 0
}

# Reports of an earlier run in the same directory must never pass for this run's.
for name in results.json junit.xml summary.md comment.md pull-request.json evaltasks-error.log; do
  rm -f "$OUTPUT_DIR/$name"
done
# Prefect's task-result storage is cached between runs: drop entries unused for 30 days so it cannot grow forever.
if [ -n "${PREFECT_RESULTS_LOCAL_STORAGE_PATH:-}" ] && [ -d "$PREFECT_RESULTS_LOCAL_STORAGE_PATH" ]; then
  find "$PREFECT_RESULTS_LOCAL_STORAGE_PATH" -type f -mtime +30 -delete 2>/dev/null || true
fi

# The working directory (the repository) stays off sys.path, so a `yaml.py` in it never replaces a module evaltasks
# imports (docs/metrics/custom.md#your-own-metrics): `-P` on Python 3.11+; 3.10 has none, so a `-c` start removes it first.
if "$PYTHON" -P -c '' 2>/dev/null; then
  launch=(-P -m evaltasks)
else
  launch=(-c 'import sys; sys.path[:1] = [] if sys.path[:1] == [""] else sys.path[:1]; import runpy; module = sys.argv.pop(1); runpy.run_module(module, run_name="__main__", alter_sys=True)' evaltasks)
fi
args=("${launch[@]}" run --output-dir "$OUTPUT_DIR" --regression-tolerance "$REGRESSION_TOLERANCE")
if [ "${SKIP_MISSING_CREDENTIALS:-false}" = "true" ]; then args+=(--skip-missing-credentials); fi
if [ -n "${BASELINE_FILE:-}" ]; then
  if [ -f "$BASELINE_FILE" ]; then
    baseline="$BASELINE_FILE"
    if [ "${BASELINE_AUTO:-false}" = "true" ]; then
      # a cached baseline that cannot be used is a warning, not invalid input (action/baseline.py says why)
      if "$PYTHON" "$(dirname "${BASH_SOURCE[0]}")/baseline.py" "$BASELINE_FILE" "${BASELINE_LABEL:-}"; then
        # the cache directory is overwritten with this run's results below: compare with a copy
        baseline="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/evaltasks-baseline-$$.json"
        cp "$BASELINE_FILE" "$baseline" || baseline=""
      else
        baseline=""
      fi
    fi
    if [ -n "$baseline" ]; then
      args+=(--baseline "$baseline" --baseline-label "${BASELINE_LABEL:-$BASELINE_FILE}")
    fi
  elif [ "${BASELINE_AUTO:-false}" = "true" ]; then
    echo "no baseline: no earlier results of this suite in the cache for the base branch"
  else
    fail_input "input 'baseline': $BASELINE_FILE does not exist"
  fi
fi

# Mask every secret evaltasks redacts (evaltasks/_redact.py: SECRET_VARIABLES, plus the variables named in
# EVALTASKS_SECRET_VARIABLES), one line at a time (a multi-line value is masked line by line), before anything runs.
mask_secrets() {
  local name value line extra="${EVALTASKS_SECRET_VARIABLES:-}"
  for name in OPENAI_API_KEY AZURE_OPENAI_API_KEY PREFECT_API_KEY ${extra//,/ }; do
    if ! [[ "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
      echo "::warning title=evaltasks::EVALTASKS_SECRET_VARIABLES names '${name//[^A-Za-z0-9_-]/?}', not a variable name: ignored"
      continue
    fi
    value="${!name:-}"
    while IFS= read -r line; do
      if [ -n "$line" ]; then echo "::add-mask::$line"; fi
    done <<< "$value"
  done
}
mask_secrets
# A target whose secret this run lacks (a fork's pull request) has its cases skipped with a warning, never fails
# the run: missing_targets.py decides (docs/action.md#prompt-changes-on-every-pull-request).
suite="$SUITE"
filtered=""
if [ "${SKIP_MISSING_CREDENTIALS:-false}" = "true" ]; then
  candidate="$(dirname -- "$SUITE")/.evaltasks-skipped-targets-$$-$(basename -- "$SUITE")"
  "$PYTHON" "$(dirname "${BASH_SOURCE[0]}")/missing_targets.py" "$SUITE" "$candidate"
  case $? in
    10) suite="$candidate"; filtered="$candidate" ;;
    11)
      echo "evaltasks: every target of the suite needs a secret this run does not have; nothing was evaluated" \
        | tee -a "$RUN_LOG"
      echo "exit-code=0" >> "$GITHUB_OUTPUT"
      exit 0
      ;;
  esac
fi
args+=(-- "$suite")  # "--": a suite path starting with "-" is still a path
# Model outputs are untrusted and the summary table prints them: stop workflow-command processing while
# evaltasks runs, with a token nobody can guess, so no output line can forge ::set-output, ::add-mask, etc.
# stderr joins stdout through one pipe, so every line is printed before the token that resumes commands.
token="evaltasks-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
echo "::stop-commands::$token"
"$PYTHON" "${args[@]}" 2>&1 | tee -a "$RUN_LOG"
code=${PIPESTATUS[0]}
echo "::$token::"
if [ -n "$filtered" ]; then rm -f -- "$filtered"; fi

if [ "${SAVE_BASELINE:-false}" = "true" ] && [ -f "$OUTPUT_DIR/results.json" ] && [ "$code" -le 1 ]; then
  mkdir -p "$BASELINE_DIR" && cp "$OUTPUT_DIR/results.json" "$BASELINE_DIR/results.json" \
    && echo "baseline-saved=true" >> "$GITHUB_OUTPUT"
fi
echo "exit-code=$code" >> "$GITHUB_OUTPUT"
exit 0
