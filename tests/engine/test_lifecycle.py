"""A run's life (evaltasks.engine.lifecycle): real suites planned, scored with a real metric (LengthCheckMetric),
finished through the real report writer, and recorded in a real history; the typed outcome's values are checked
against what the inputs imply and against the results.json written beside them."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest

from evaltasks.engine.evaluate import evaluate_sync
from evaltasks.engine.history import ScoreMoments
from evaltasks.engine.lifecycle import (
    SCHEMA_VERSION,
    GateVerdict,
    RunHeader,
    RunOutcome,
    RunReport,
    record_history,
    regression_summary,
)
from evaltasks.engine.run import plan_run
from evaltasks.reports.outcome import finish_run
from evaltasks.reports.verdict import verdict_line
from tests.suite_helpers import length_suite

SHORT, LONG = 2, 9  # words of an output LengthCheckMetric (at most 5 words) passes and fails


def _run(directory: Path, words: list[int], gate: str, baseline: Path | None = None) -> RunOutcome:
    """Plan the length suite ``regressing`` over outputs of ``words`` words under ``directory``, score it with
    the real metric and finish it into ``directory/out`` (compared with ``baseline`` when given)."""
    started = time.time()
    plan = plan_run(length_suite(directory, words, name="regressing", gate=gate))
    result = evaluate_sync(plan.dataset.cases, plan.suite.metrics, ids=plan.dataset.ids, index_dir=directory / "index")
    return finish_run(plan, result, directory / "out", started, baseline=baseline)


def test_a_finished_run_is_typed_and_matches_its_results_json(tmp_path: Path) -> None:
    """Three of four outputs are short enough: the gate (50 %) holds at 75 %, and every typed value is what the
    inputs imply and what results.json holds, key for key and in order."""
    outcome = _run(tmp_path, [SHORT, SHORT, LONG, SHORT], "gate: {min_pass_rate: 0.5}")
    header = outcome.header
    assert isinstance(header, RunHeader) and outcome.passed is True and header.passed is True
    assert header.schema_version == SCHEMA_VERSION == 4
    assert header.suite == "regressing"
    assert header.suite_sha256 == hashlib.sha256((tmp_path / "suite.yaml").read_bytes()).hexdigest()
    assert header.dataset_sha256 == hashlib.sha256((tmp_path / "d.jsonl").read_bytes()).hexdigest()
    assert outcome.gate == GateVerdict(
        min_pass_rate=0.5,
        allow_errors=False,
        pass_rate=0.75,
        fail_on="min_pass_rate",
        alpha=0.05,
        min_effect=0.01,
        verdict=None,
        message=None,
    )
    assert header.warnings == [] and outcome.comparison is None and outcome.drift is None
    assert 0 <= header.duration_s < 600 and header.started_at <= header.finished_at
    summary = outcome.result.summary
    assert (summary.cases, summary.passed_cases, summary.failed_cases) == (4, 3, 1)

    data = json.loads(outcome.paths["results.json"].read_text(encoding="utf-8"))
    assert list(data) == [*header.model_dump(), "summary", "cases"]
    assert {key: data[key] for key in header.model_dump()} == header.model_dump()
    assert data["gate"] == {
        "min_pass_rate": 0.5,
        "allow_errors": False,
        "pass_rate": 0.75,
        "fail_on": "min_pass_rate",
        "alpha": 0.05,
        "min_effect": 0.01,
        "verdict": None,
        "message": None,
    }
    # what the surfaces render, read back from the file and from the flow's returned dict: the same report
    assert RunReport.model_validate(data) == outcome.report
    returned = outcome.summary_dict()
    assert returned["drift"] is None and returned["results_path"] == str(outcome.paths["results.json"])
    assert RunReport.model_validate(returned).gate == outcome.gate
    assert verdict_line(outcome.report) == "PASSED: pass rate 75.00% (3 of 4 cases), gate 50.00%"
    assert (
        outcome.paths["summary.md"]
        .read_text(encoding="utf-8")
        .startswith("# evaltasks: regressing\n\n✅ **PASSED**: pass rate 75.00% (3 of 4 cases), gate 50.00%\n")
    )


@pytest.mark.parametrize(
    ("words", "gate", "passed", "pass_rate", "message"),
    [
        ([SHORT] * 4, "gate: {min_pass_rate: 1.0}", True, 1.0, None),
        (
            [SHORT, LONG, LONG, LONG],
            "gate: {min_pass_rate: 0.5}",
            False,
            0.25,
            "gate failed: pass rate 25.00% below 50.00%",
        ),
    ],
    ids=["passed", "failed-on-pass-rate"],
)
def test_the_gate_verdict_of_a_real_run(
    tmp_path: Path, words: list[int], gate: str, passed: bool, pass_rate: float | None, message: str | None
) -> None:
    """The gate's verdict as the run's header and results.json record it: held, and failed on the pass rate
    (the message names both rates)."""
    outcome = _run(tmp_path, words, gate)
    assert outcome.passed is passed
    assert outcome.gate.pass_rate == pass_rate and outcome.gate.message == message
    data = json.loads(outcome.paths["results.json"].read_text(encoding="utf-8"))
    assert data["passed"] is passed and data["gate"]["message"] == message and data["gate"]["pass_rate"] == pass_rate
    assert verdict_line(outcome.report).startswith("PASSED: " if passed else "FAILED: ")


def test_a_run_that_evaluated_nothing_fails_whatever_the_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A judge metric without credentials, skipped (``--skip-missing-credentials``): every case is skipped, so
    the gate fails at ``min_pass_rate`` 0, with no pass rate and the reason naming the skipped metric."""
    for name in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "d.jsonl").write_text(
        "".join(json.dumps({"id": f"c{i}", "input": f"q{i}", "actual_output": "a"}) + "\n" for i in range(3)),
        encoding="utf-8",
    )
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: unjudged\ndataset: {path: d.jsonl}\nmetrics:\n  - {metric: AnswerRelevancyMetric}\n"
        "gate: {min_pass_rate: 0}\n",
        encoding="utf-8",
    )
    plan = plan_run(suite, skip_missing_credentials=True)
    result = evaluate_sync(plan.dataset.cases, plan.suite.metrics, ids=plan.dataset.ids, index_dir=tmp_path / "index")
    outcome = finish_run(plan, result, tmp_path / "out", time.time())
    assert outcome.passed is False and outcome.result.summary.skipped_cases == 3
    assert outcome.gate == GateVerdict(
        min_pass_rate=0.0,
        pass_rate=None,
        fail_on="min_pass_rate",
        message="gate failed: nothing was evaluated: all 3 cases were skipped (metrics skipped: "
        "AnswerRelevancyMetric; the warnings say why)",
    )
    assert verdict_line(outcome.report) == "FAILED: no case was evaluated (all 3 skipped)"
    assert json.loads(outcome.paths["results.json"].read_text(encoding="utf-8"))["gate"] == outcome.gate.model_dump()


def test_a_regression_against_the_baseline_fails_a_regression_gate_and_drifts_in_the_history(tmp_path: Path) -> None:
    """40 cases all short in the baseline run, 20 of them long now: the paired comparison regresses, the gate
    ``fail_on: regression`` fails with the comparison's sentence although ``min_pass_rate`` 0 holds, and the
    history, with the baseline run recorded first, tests the second run as drifted (Fisher's exact test)."""
    gate = "gate: {min_pass_rate: 0, fail_on: regression}\nhistory: {dir: history}"
    base = _run(tmp_path / "base", [SHORT] * 40, gate)
    assert base.passed is True and base.comparison is None
    assert base.header.warnings == [
        "gate.fail_on is regression but no baseline was given: no regression can be detected (pass --baseline)"
    ]
    history = tmp_path / "history"
    plan = plan_run(tmp_path / "base" / "suite.yaml")
    moments = ScoreMoments(m.name for m in plan.suite.metrics)
    moments.add(base.result.test_results)
    first = record_history(plan, base, moments, history)
    assert first.previous == [] and first.drift is None and base.drift is None
    assert first.record.passed is True and first.record.pass_rate == 1.0 and first.record.cases == 40
    assert first.record.metrics["LengthCheckMetric"].scored == 40

    now = _run(tmp_path / "now", [SHORT] * 20 + [LONG] * 20, gate, baseline=base.paths["results.json"])
    assert now.comparison is not None and now.comparison.verdict == "regressed"
    assert now.gate.verdict == "regressed" and now.gate.pass_rate == 0.5 and now.passed is False
    assert now.gate.message is not None and now.gate.message.startswith(
        "gate failed: regressed since the baseline: pass rate 100.00% → 50.00%"
    )
    assert regression_summary(now.comparison) == (
        f"Regression since the baseline: {len(now.comparison.regressions)} regressions (pass rate, "
        "LengthCheckMetric); see summary.md"
    )
    assert RunReport.model_validate(json.loads(now.paths["results.json"].read_text(encoding="utf-8"))) == now.report

    plan = plan_run(tmp_path / "now" / "suite.yaml")
    moments = ScoreMoments(m.name for m in plan.suite.metrics)
    moments.add(now.result.test_results)
    second = record_history(plan, now, moments, history)
    assert [r.pass_rate for r in second.previous] == [1.0] and second.record.pass_rate == 0.5
    assert second.drift is not None and now.drift is second.drift
    assert second.drift.window == 1 and second.drift.verdict == "regressed"
    overall = second.drift.tests[0]
    assert (overall.name, overall.test, overall.before, overall.after) == ("overall", "Fisher exact", 1.0, 0.5)
    assert overall.p_value is not None and overall.p_value < 0.001
    assert "overall" in second.record.drift and second.record.verdict == "regressed"
    assert now.summary_dict()["drift"] == second.drift.model_dump()
    lines = second.path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["pass_rate"] for line in lines] == [1.0, 0.5]
