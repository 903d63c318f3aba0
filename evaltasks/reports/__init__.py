"""Report writers: results.json, junit.xml, summary.md (and the console table in :mod:`.console`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaltasks.compare import Comparison
from evaltasks.reports.json_report import SCHEMA_VERSION, write_results_json
from evaltasks.reports.junit import write_junit_xml
from evaltasks.reports.markdown import render_summary_markdown, write_summary_markdown
from evaltasks.results import EvaluationResult

RESULTS_JSON = "results.json"
JUNIT_XML = "junit.xml"
SUMMARY_MD = "summary.md"


def write_reports(
    output_dir: Path, result: EvaluationResult, header: dict[str, Any], *, passed: bool, min_pass_rate: float,
    duration_s: float = 0.0, comparison: Comparison | None = None,
) -> dict[str, Path]:
    """Write results.json, junit.xml and summary.md into ``output_dir``; return their paths by file name.

    ``header`` holds the top-level keys of results.json before ``summary`` and ``cases`` (its ``warnings``
    and ``gate.pass_rate`` also appear in summary.md); ``comparison`` (with a baseline) is written as the
    ``comparison`` key and adds deltas and changes to summary.md.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: output_dir / name for name in (RESULTS_JSON, JUNIT_XML, SUMMARY_MD)}
    suite_name = str(header.get("suite", "evaltasks"))
    if comparison is not None:
        header = {**header, "comparison": comparison.model_dump()}
    write_results_json(paths[RESULTS_JSON], header, result.summary, result.test_results)
    write_junit_xml(paths[JUNIT_XML], suite_name, result.summary, result.test_results, duration_s)
    markdown = render_summary_markdown(
        suite_name, result.summary, result.test_results, passed=passed, min_pass_rate=min_pass_rate,
        comparison=comparison, warnings=header.get("warnings"), gate_pass_rate=(header.get("gate") or {}).get("pass_rate"),
    )
    write_summary_markdown(paths[SUMMARY_MD], markdown)
    return paths


__all__ = ["JUNIT_XML", "RESULTS_JSON", "SCHEMA_VERSION", "SUMMARY_MD", "write_reports"]
