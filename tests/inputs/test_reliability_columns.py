"""Dataset columns of the reliability metrics (docs/metrics/reliability.md#reliability-metrics): ``multi_outputs``
(a list field, as ``references``) for OutcomeConsistencyMetric and ``agent_confidence`` (a number in [0, 1]) for
CalibrationMetric, read without a target; a bad confidence is an input error naming file, row and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaltasks import evaluate_sync
from evaltasks.engine.run import plan_run
from evaltasks.errors import DatasetError

ROWS = [
    {"id": "a", "actual_output": "4", "expected_output": "4", "multi_outputs": ["4", "4"], "agent_confidence": 0.9},
    {"id": "b", "actual_output": "5", "expected_output": "4", "multi_outputs": ["5", "four"], "agent_confidence": 0.8},
    {"id": "c", "actual_output": "4", "expected_output": "4", "multi_outputs": ["4", "4"], "agent_confidence": 0.7},
    {"id": "d", "actual_output": "3", "expected_output": "4", "multi_outputs": ["3", "3"], "agent_confidence": 0.2},
    {"id": "e", "actual_output": "4", "expected_output": "4", "multi_outputs": ["4", "4."], "agent_confidence": 0.6},
]
SUITE = """name: columns
dataset:
  path: {path}
metrics:
  - metric: ExactMatchMetric
  - metric: OutcomeConsistencyMetric
  - metric: CalibrationMetric
    outcome_metric: ExactMatchMetric
"""


def _suite(directory: Path, name: str, text: str) -> Path:
    (directory / name).write_text(text, encoding="utf-8")
    suite = directory / "suite.yaml"
    suite.write_text(SUITE.format(path=name), encoding="utf-8")
    return suite


def test_jsonl_and_csv_columns_feed_consistency_and_calibration(tmp_path: Path) -> None:
    suite = _suite(tmp_path, "d.jsonl", "".join(json.dumps(r) + "\n" for r in ROWS))
    plan = plan_run(suite)
    assert [c.multi_outputs for c in plan.dataset.cases] == [r["multi_outputs"] for r in ROWS]
    assert [type(m).__name__ for m in plan.suite.run_metrics] == ["CalibrationMetric"]
    result = evaluate_sync(plan.dataset.cases, [*plan.suite.metrics, *plan.suite.run_metrics])
    consistency = [r.metrics[1].score for r in result.test_results]
    assert consistency == [1.0, 0.0, 1.0, 1.0, 0.0]  # "4" vs "4.": 1 - 1/2 = 0.5 < 0.85; "5" vs "four": 0
    run = result.summary.run_metrics["CalibrationMetric"]
    right = [True, False, True, False, True]
    conf = [0.9, 0.8, 0.7, 0.2, 0.6]
    brier = sum((c - r) ** 2 for c, r in zip(conf, right)) / 5
    assert run.score == pytest.approx(1 - brier / (0.6 * 0.4))

    header = "id,actual_output,expected_output,multi_outputs,agent_confidence\n"
    csv = header + "".join(
        f'{r["id"]},{r["actual_output"]},{r["expected_output"]},"{json.dumps(r["multi_outputs"]).replace(chr(34), chr(34) * 2)}",{r["agent_confidence"]}\n'
        for r in ROWS
    )
    plan = plan_run(_suite(tmp_path, "d.csv", csv))
    assert [c.agent_confidence for c in plan.dataset.cases] == conf


def test_a_confidence_outside_0_1_is_an_input_error(tmp_path: Path) -> None:
    rows = [dict(ROWS[0], agent_confidence=1.5), dict(ROWS[1], agent_confidence="sure")]
    suite = _suite(tmp_path, "d.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError) as caught:
        plan_run(suite)
    assert [(p.location, p.field) for p in caught.value.problems] == [
        ("line 1", "agent_confidence"),
        ("line 2", "agent_confidence"),
    ]


@pytest.mark.slow
def test_the_cli_prints_the_run_level_result_and_fails_the_gate_on_it(tmp_path: Path, prefect_api_url: str) -> None:
    """``evaltasks run`` on the columns' suite: the terminal shows the calibration line; a threshold above the run's
    Brier skill score fails the gate (exit 1) and says why, though every case-level rule holds."""
    from tests.cli_forkserver import run_cli
    from tests.process_env import subprocess_env

    suite = _suite(tmp_path, "d.jsonl", "".join(json.dumps(r) + "\n" for r in ROWS))
    text = suite.read_text(encoding="utf-8").replace(
        "outcome_metric: ExactMatchMetric\n", "outcome_metric: ExactMatchMetric\n    threshold: 0.9\n"
    )
    suite.write_text(text + "gate: {min_pass_rate: 0}\n", encoding="utf-8")
    env = subprocess_env(tmp_path / "prefect-home", prefect_api_url)
    proc = run_cli("run", str(suite), "--output-dir", "out", cwd=tmp_path, env=env)
    right, conf = [True, False, True, False, True], [0.9, 0.8, 0.7, 0.2, 0.6]
    skill = 1 - sum((c - r) ** 2 for c, r in zip(conf, right)) / 5 / (0.6 * 0.4)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"run-level CalibrationMetric: failed, score {skill:.3f} (threshold 0.9)" in proc.stdout
    assert f"run-level CalibrationMetric scored {skill:.3f}, below its threshold 0.9" in proc.stdout + proc.stderr
