"""How the reports show run-level metrics (``summary.run_metrics``: CalibrationMetric): one line each, in
summary.md (a table under the metric table) and in the terminal (docs/metrics/reliability.md#calibrationmetric)."""

from __future__ import annotations

from evaltasks.reports._escape import markdown_inline
from evaltasks.results import EvaluationSummary, RunMetricResult


def _number(value: object) -> str:
    """A figure with three decimals, ``n/a`` when it is not a number (not measured)."""
    return f"{value:.3f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "n/a"


def _figures(result: RunMetricResult) -> str:
    """The result's figures: score, ECE and AUROC when measured (``n/a`` when not)."""
    d = result.details
    return (
        f"score {_number(result.score)} (threshold {result.threshold:g}), ECE {_number(d.get('ece'))}, "
        f"AUROC {_number(d.get('auroc'))}"
    )


def run_metric_line(result: RunMetricResult) -> str:
    """One plain-text line: ``run-level <name>: <status>, <figures> over N cases``, then the reason when errored."""
    cases = result.details.get("cases", 0)
    line = f"run-level {result.name}: {result.status}, {_figures(result)} over {cases} cases"
    return line + (f" ({result.error})" if result.error else "")


def run_metric_rows(summary: EvaluationSummary) -> list[str]:
    """summary.md's table of the run-level metrics (empty without any): metric, status, score, ECE, AUROC, cases,
    reason."""
    if not summary.run_metrics:
        return []
    rows = [
        "| Run-level metric | Status | Score | Threshold | ECE | AUROC | Cases | Reason |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for result in summary.run_metrics.values():
        d = result.details
        rows.append(
            f"| {markdown_inline(result.name)} | {result.status} | {_number(result.score)} | {result.threshold:g} | "
            f"{_number(d.get('ece'))} | {_number(d.get('auroc'))} | {d.get('cases', 0)} | "
            f"{markdown_inline(result.reason, 300)} |"
        )
    return rows
