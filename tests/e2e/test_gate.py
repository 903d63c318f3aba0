"""The gate cannot pass by accident (docs/cli.md#exit-codes, docs/suite.md#suite-file, docs/action.md#github-action): exit 0 means this
run wrote results.json and it says ``passed: true``; a run that evaluated nothing fails; the Action's gate step
checks results.json as well as the exit code.

Every run is a real ``evaltasks run`` subprocess with a real user's metric module (as ``tests/metrics/test_custom_metrics.py``
writes them) against the session's Prefect server; the Action's gate step is the real ``action/gate.sh``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.process_env import subprocess_env

REPO = Path(__file__).resolve().parents[2]
GATE_SH = REPO / "action" / "gate.sh"

# A user's metric that ends its process without a word, as a metric calling os._exit(0) does.
EXIT_MODULE = '''
import os
from evaltasks import BaseMetric


class ExitMetric(BaseMetric):
    """Ends the process that scores it, with exit code 0."""

    def __init__(self, threshold: float = 0.5, *, name=None):
        super().__init__(threshold, name=name)

    def score_batch(self, cases, vectors=None):
        os._exit(0)
'''


def _suite(root: Path, metrics: str, gate: float = 0.0) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "exit_metric.py").write_text(textwrap.dedent(EXIT_MODULE), encoding="utf-8")
    with open(root / "data.jsonl", "w", encoding="utf-8") as handle:
        for i in range(4):
            handle.write(json.dumps({"input": f"q{i}", "actual_output": f"answer {i}"}) + "\n")
    suite = root / "suite.yaml"
    suite.write_text(
        f"name: gate-check\ndataset: {{path: data.jsonl}}\nmetrics:\n{metrics}\ngate: {{min_pass_rate: {gate}}}\n",
        encoding="utf-8",
    )
    return suite


def _run(cwd: Path, suite: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evaltasks", "run", str(suite), "--output-dir", str(cwd / "out"), "--no-server", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the run's parent process needs fork (POSIX)")
@pytest.mark.parametrize("runner", ["threads", "processes:2", "dask:2"])
def test_a_metric_that_calls_os_exit_0_never_exits_0(tmp_path: Path, prefect_api_url: str, runner: str) -> None:
    """``os._exit(0)`` in a metric: exit 3 with one line saying what happened, under every task runner; a passing
    report set left by an earlier run in the same directory does not make it pass (it used to exit 0, no output)."""
    if runner.startswith("dask"):
        pytest.importorskip("prefect_dask")
    suite = _suite(tmp_path, '  - {metric: "exit_metric:ExitMetric"}')
    out = tmp_path / "out"
    out.mkdir()
    earlier = {"results.json": json.dumps({"passed": True}), "junit.xml": "<testsuites/>", "summary.md": "# earlier"}
    for name, text in earlier.items():
        (out / name).write_text(text, encoding="utf-8")
    done = _run(tmp_path, suite, "--task-runner", runner, env=subprocess_env(tmp_path / "ph", prefect_api_url))
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    if runner == "threads":  # the run's own process ended: its parent says so, naming the metric
        line = "the run ended without writing its reports: its process exited with code 0 while metric ExitMetric"
        assert line in done.stderr, done.stderr
    else:  # a worker process ended: the run itself reports its pool's failure
        assert "evaltasks: error: the run aborted: " in done.stderr, done.stderr
        assert ("BrokenProcessPool" if runner.startswith("processes") else "KilledWorker") in done.stderr
        assert "note: a process of the run ended while metric ExitMetric was running in it" in done.stderr
    assert "Traceback" not in done.stderr
    assert {name: (out / name).read_text(encoding="utf-8") for name in earlier} == earlier


def test_a_run_whose_every_case_was_skipped_fails_the_gate(tmp_path: Path, prefect_api_url: str) -> None:
    """``--skip-missing-credentials`` without a key skips every case: exit 1, a gate line that says nothing was
    evaluated and why, and the reports agree (it used to say ``GATE PASSED (pass rate 0.00%, required 70.00%)``)."""
    suite = _suite(tmp_path, "  - {metric: AnswerRelevancyMetric}", gate=0.7)
    env = subprocess_env(tmp_path / "ph", prefect_api_url)
    for name in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY"):
        env.pop(name, None)
    done = _run(tmp_path, suite, "--skip-missing-credentials", env=env)
    assert done.returncode == 1, (done.stdout, done.stderr)
    gate_line = " ".join(done.stdout.split())  # the terminal's width may wrap the line
    assert (
        "GATE FAILED: nothing was evaluated: all 4 cases were skipped (metrics skipped: AnswerRelevancyMetric; "
        "the warnings say why)"
    ) in gate_line, done.stdout
    assert "GATE PASSED" not in done.stdout
    assert "skipped: 4  pass rate: n/a (nothing was evaluated)" in done.stdout  # not "0.00%"
    assert "FAILED: no case was evaluated (all 4 skipped)" in done.stdout
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert results["passed"] is False and results["summary"]["skipped_cases"] == 4
    assert results["gate"]["message"].startswith("gate failed: nothing was evaluated: all 4 cases were skipped")
    assert "❌ **FAILED**: no case was evaluated (all 4 skipped)" in (tmp_path / "out" / "summary.md").read_text()


def test_the_gate_rules_on_runs_that_evaluated_nothing() -> None:
    """:func:`gate_passed` / :func:`gate_message` on real summaries: all skipped fails with the reason, one case
    evaluated decides as usual, an empty dataset fails."""
    from evaltasks import BaseMetric, EvalTestCase
    from evaltasks.engine.evaluate import evaluate_sync as evaluate
    from evaltasks.engine.lifecycle import gate_message, gate_passed
    from evaltasks.inputs.suite import Gate
    from evaltasks.results import MetricResult

    class Skips(BaseMetric):
        """Skips every case but the one whose output is "scored"."""

        def score_batch(self, cases, vectors=None):
            return [
                MetricResult.scored(self.name, 1.0, self.threshold, "r", {})
                if c.actual_output == "scored"
                else MetricResult.skipped(self.name, self.threshold, "no key")
                for c in cases
            ]

    skipped = evaluate([EvalTestCase(actual_output="a"), EvalTestCase(actual_output="b")], [Skips(0.5)])
    assert not gate_passed(skipped, 0.7) and not gate_passed(skipped, 0.0, fail_on="regression")
    assert gate_message(skipped, Gate(min_pass_rate=0.7), None) == (
        "gate failed: nothing was evaluated: all 2 cases were skipped (metrics skipped: Skips; the warnings say why)"
    )
    one = evaluate([EvalTestCase(actual_output="a"), EvalTestCase(actual_output="scored")], [Skips(0.5)])
    assert gate_passed(one, 0.7) and gate_message(one, Gate(min_pass_rate=0.7), None) is None


# --- the Action's gate step ---------------------------------------------------------------------------------


def _gate(tmp_path: Path, code: str, results: str | None, fail_on_gate: str = "true") -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    if results is not None:
        (out / "results.json").write_text(results, encoding="utf-8")
    env = {
        **os.environ,
        "EXIT_CODE": code,
        "FAIL_ON_GATE": fail_on_gate,
        "OUTPUT_DIR": str(out),
        "PYTHON": sys.executable,
    }
    return subprocess.run(["bash", str(GATE_SH)], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("results", "says"),
    [
        (None, "results.json is missing"),
        ('{"passed": false, "gate": {"min_pass_rate": 0.7}}', "results.json says passed: false"),
        ('{"passed": "true"}', 'has no boolean "passed"'),
        ("{not json", "cannot be read"),
    ],
    ids=["missing", "passed-false", "passed-a-string", "unreadable"],
)
def test_the_gate_step_fails_an_exit_0_that_results_json_does_not_back(
    tmp_path: Path, results: str | None, says: str
) -> None:
    """Exit 0 is not enough: results.json must exist and say ``"passed": true`` (the step used to pass on the exit
    code alone while the report step's ``passed`` output said false)."""
    done = _gate(tmp_path, "0", results)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("::error title=evaltasks::evaltasks exited 0 but ") and says in done.stdout


def test_the_gate_step_passes_exit_0_with_a_passing_results_json(tmp_path: Path) -> None:
    done = _gate(tmp_path, "0", json.dumps({"passed": True, "gate": {"min_pass_rate": 0.7}}))
    assert done.returncode == 0 and "the gate held" in done.stdout, done.stdout + done.stderr
    failed = _gate(tmp_path, "1", json.dumps({"passed": False}), fail_on_gate="false")
    assert failed.returncode == 0 and "::warning" in failed.stdout  # fail-on-gate: false, as before


def test_the_action_passes_the_reports_directory_to_the_gate_step() -> None:
    """action.yml's gate step gets OUTPUT_DIR (where results.json is) and a Python to read it."""
    import yaml

    steps = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))["runs"]["steps"]
    (gate,) = [step for step in steps if step.get("id") == "gate"]
    assert gate["env"]["OUTPUT_DIR"] == "${{ steps.prepare.outputs.output-dir }}"
    assert gate["env"]["PYTHON"] == "${{ steps.python.outputs.python-path }}"
