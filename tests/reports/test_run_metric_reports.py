"""How the reports show a run-level metric (CalibrationMetric; docs/metrics/reliability.md#calibrationmetric):
summary.md's table under the metric table (also the Action's PR comment, rendered from results.json's parts),
the terminal's line, junit.xml's test case; an errored one with its reason; nothing without any."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

from rich.console import Console

from evaltasks.reports.console import print_summary
from evaltasks.reports.junit import JUNIT_TAIL, junit_head, junit_run_metrics
from evaltasks.reports.markdown import render_summary_markdown
from evaltasks.results import EvaluationSummary, RunMetricResult

PASSED = RunMetricResult(
    name="CalibrationMetric",
    score=0.44667,
    threshold=0.0,
    success=True,
    status="passed",
    reason="Brier skill score 0.447 | over 6 cases",
    details={"ece": 0.31667, "auroc": 8 / 9, "cases": 6},
)
ERRORED = RunMetricResult(
    name="late",
    score=None,
    threshold=0.0,
    success=False,
    status="errored",
    reason="Errored: 3 case(s) with a confidence and an outcome; calibration needs 5",
    details={"cases": 3},
    error="3 case(s) with a confidence and an outcome; calibration needs 5",
)


def _summary(**run: RunMetricResult) -> EvaluationSummary:
    return EvaluationSummary(
        cases=6,
        passed_cases=4,
        failed_cases=2,
        errored_cases=0,
        skipped_cases=0,
        pass_rate=4 / 6,
        metrics={},
        run_metrics=run,
    )


def test_summary_md_terminal_and_junit_show_each_run_level_result() -> None:
    summary = _summary(CalibrationMetric=PASSED, late=ERRORED)
    md = render_summary_markdown("s", summary, [], passed=True, min_pass_rate=0.5)
    rows = [line for line in md.splitlines() if line.startswith("| CalibrationMetric |") or line.startswith("| late |")]
    assert rows[0].startswith("| CalibrationMetric | passed | 0.447 | 0 | 0.317 | 0.889 | 6 | Brier skill score")
    assert "\\| over 6 cases |" in rows[0]  # the reason's pipe cannot break the table
    assert rows[1].startswith("| late | errored | n/a | 0 | n/a | n/a | 3 | Errored\\: 3 case\\(s\\)")  # escaped

    console = Console(width=200, record=True, file=io.StringIO())
    print_summary(summary, console=console)
    text = console.export_text()
    assert "run-level CalibrationMetric: passed, score 0.447 (threshold 0), ECE 0.317, AUROC 0.889 over 6 cases" in text
    assert "run-level late: errored, score n/a (threshold 0), ECE n/a, AUROC n/a over 3 cases (3 case(s)" in text

    xml = ET.fromstring(junit_head("s", summary) + junit_run_metrics("s", summary) + JUNIT_TAIL)
    assert (xml.get("tests"), xml.get("failures"), xml.get("errors")) == ("2", "0", "1")
    cases = {t.get("name"): t for t in xml.iter("testcase")}
    assert cases["run :: CalibrationMetric"].find("failure") is None
    assert "calibration needs 5" in (cases["run :: late"].find("error").get("message") or "")  # type: ignore[union-attr]


def test_nothing_is_added_without_run_level_metrics() -> None:
    summary = _summary()
    md = render_summary_markdown("s", summary, [], passed=True, min_pass_rate=0.5)
    assert "Run-level metric" not in md and junit_run_metrics("s", summary) == ""
    console = Console(width=200, record=True, file=io.StringIO())
    print_summary(summary, console=console)
    assert "run-level" not in console.export_text()
