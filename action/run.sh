#!/usr/bin/env bash
# Step 3 of the action: run `evaltasks run` on the suite; never fails the step (the last step applies the
# gate), so that caches are saved and reports written whatever happens. Outputs: exit-code=<evaltasks' code>
# (0 gate held, 1 gate failed, 2 invalid input, 3 aborted); baseline-saved=true when results.json was copied
# into BASELINE_DIR to be cached as this branch's baseline.
# Environment: PYTHON, SUITE, OUTPUT_DIR, INDEX_DIR (EVALTASKS_INDEX_DIR), BASELINE_FILE, BASELINE_AUTO,
# BASELINE_DIR, SAVE_BASELINE, SKIP_MISSING_CREDENTIALS, REGRESSION_TOLERANCE, RUN_LOG.
set -uo pipefail

args=(-m evaltasks run "$SUITE" --output-dir "$OUTPUT_DIR" --regression-tolerance "$REGRESSION_TOLERANCE")
if [ "${SKIP_MISSING_CREDENTIALS:-false}" = "true" ]; then args+=(--skip-missing-credentials); fi
baseline_copy=""
if [ -n "${BASELINE_FILE:-}" ]; then
  if [ -f "$BASELINE_FILE" ]; then
    baseline_copy="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/evaltasks-baseline-$$.json"
    cp "$BASELINE_FILE" "$baseline_copy"  # the cache directory is overwritten with this run's results below
    args+=(--baseline "$baseline_copy")
  elif [ "${BASELINE_AUTO:-false}" = "true" ]; then
    echo "no baseline: no earlier results of this suite in the cache for the base branch"
  else
    echo "::error title=evaltasks::input 'baseline': $BASELINE_FILE does not exist"
    echo "exit-code=2" >> "$GITHUB_OUTPUT"
    exit 0
  fi
fi

if [ -n "${OPENAI_API_KEY:-}" ]; then echo "::add-mask::$OPENAI_API_KEY"; fi  # masked even when not a secret
# Model outputs are untrusted and the summary table prints them: stop workflow-command processing while
# evaltasks runs, with a token nobody can guess, so no output line can forge ::set-output, ::add-mask, etc.
token="evaltasks-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
echo "::stop-commands::$token"
"$PYTHON" "${args[@]}" 2> >(tee "$RUN_LOG" >&2)
code=$?
wait  # let tee finish writing the log
echo "::$token::"

if [ "${SAVE_BASELINE:-false}" = "true" ] && [ -f "$OUTPUT_DIR/results.json" ] && [ "$code" -le 1 ]; then
  mkdir -p "$BASELINE_DIR" && cp "$OUTPUT_DIR/results.json" "$BASELINE_DIR/results.json" \
    && echo "baseline-saved=true" >> "$GITHUB_OUTPUT"
fi
echo "exit-code=$code" >> "$GITHUB_OUTPUT"
exit 0
