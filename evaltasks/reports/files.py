"""The three report files of a finished result, written at once (:func:`write_reports`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evaltasks.engine.compare import Comparison
from evaltasks.engine.outcome import RunReport
from evaltasks.engine.side_by_side import compare_targets
from evaltasks.reports.stream import ReportWriter
from evaltasks.results import EvaluationResult


def write_reports(
    output_dir: Path,
    result: EvaluationResult,
    header: Mapping[str, Any],
    *,
    passed: bool,
    min_pass_rate: float,
    duration_s: float = 0.0,
    comparison: Comparison | None = None,
) -> dict[str, Path]:
    """Write results.json, junit.xml and summary.md into ``output_dir``; return their paths by file name.

    ``header`` holds the top-level keys of results.json before ``summary`` and ``cases``, as given (its
    ``warnings``, ``gate.pass_rate`` and ``gate.fail_on`` also appear in summary.md; a run's own header is a
    :class:`~evaltasks.engine.lifecycle.RunHeader`, written by :meth:`ReportWriter.write`); ``comparison`` (with a
    baseline) is written as the ``comparison`` key and adds deltas and changes to summary.md. A result with two or
    more ``targets`` gets them compared side by side (:func:`~evaltasks.engine.side_by_side.compare_targets` at
    the header's ``gate`` ``alpha``, ``min_effect`` and ``allow_errors``), written as the ``side_by_side`` key and
    rendered in summary.md. A run that streams its cases uses :class:`ReportWriter` directly.
    """
    thresholds = {name: m.threshold for name, m in result.summary.metrics.items()}
    # what summary.md renders: the header read as results.json is, the gate's threshold and verdict as given
    report = RunReport.of_results(
        header, result.summary, passed=passed, min_pass_rate=min_pass_rate, comparison=comparison
    )
    if len(result.targets) >= 2:
        gate = report.gate
        side = compare_targets(result, alpha=gate.alpha, min_effect=gate.min_effect, allow_errors=gate.allow_errors)
        report = report.model_copy(update={"side_by_side": side})
    with ReportWriter(Path(output_dir), report.suite, thresholds) as writer:
        writer.add(result.test_results)
        return writer.write_results(header, report, duration_s=duration_s)


__all__ = ["write_reports"]
