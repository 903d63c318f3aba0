"""Report writers: results.json, junit.xml, summary.md (and the console table in :mod:`.console`).

A run that streams its cases uses :class:`ReportWriter` (:mod:`evaltasks.reports.stream`); a finished result is
written with :func:`write_reports` (:mod:`evaltasks.reports.files`).
"""

from evaltasks.engine.outcome import SCHEMA_VERSION
from evaltasks.reports.files import write_reports
from evaltasks.reports.json_report import write_results_json
from evaltasks.reports.stream import JUNIT_XML, RESULTS_JSON, SUMMARY_MD, ReportWriter

__all__ = [
    "JUNIT_XML",
    "RESULTS_JSON",
    "SCHEMA_VERSION",
    "SUMMARY_MD",
    "ReportWriter",
    "write_reports",
    "write_results_json",
]
