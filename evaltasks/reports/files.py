"""The three report files of a finished result, written at once (:func:`write_reports`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaltasks.engine.compare import Comparison
from evaltasks.reports.stream import ReportWriter
from evaltasks.results import EvaluationResult


def write_reports(
    output_dir: Path, result: EvaluationResult, header: dict[str, Any], *, passed: bool, min_pass_rate: float,
    duration_s: float = 0.0, comparison: Comparison | None = None,
) -> dict[str, Path]:
    """Write results.json, junit.xml and summary.md into ``output_dir``; return their paths by file name.

    ``header`` holds the top-level keys of results.json before ``summary`` and ``cases`` (its ``warnings``
    and ``gate.pass_rate`` also appear in summary.md); ``comparison`` (with a baseline) is written as the
    ``comparison`` key and adds deltas and changes to summary.md. A run that streams its cases uses
    :class:`ReportWriter` directly.
    """
    thresholds = {name: m.threshold for name, m in result.summary.metrics.items()}
    with ReportWriter(Path(output_dir), str(header.get("suite", "evaltasks")), thresholds) as writer:
        writer.add(result.test_results)
        return writer.write(header, passed=passed, min_pass_rate=min_pass_rate, duration_s=duration_s,
                            comparison=comparison, summary=result.summary)


__all__ = ["write_reports"]
