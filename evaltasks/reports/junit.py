"""junit.xml: one ``<testcase>`` per test case × metric; failures carry the metric's reason.

Written as a stream (one element at a time) with the standard library's XML escaping; characters XML
forbids are removed from untrusted text.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from evaltasks._atomic import atomic_writer
from evaltasks.reports._escape import xml_text
from evaltasks.results import EvaluationSummary, TestCaseResult


def write_junit_xml(
    path: Path, suite_name: str, summary: EvaluationSummary, cases: Iterable[TestCaseResult], duration_s: float = 0.0
) -> None:
    """Stream a JUnit XML report to ``path`` atomically.

    Counts: ``tests`` = cases × metrics; ``failures`` = failed metric results; ``errors`` = errored;
    ``skipped`` = skipped.
    """
    per_metric = summary.metrics.values()
    tests = sum(m.passed + m.failed + m.errored + m.skipped for m in per_metric)
    failures = sum(m.failed for m in per_metric)
    errors = sum(m.errored for m in per_metric)
    skipped = sum(m.skipped for m in per_metric)
    name = quoteattr(xml_text(suite_name))
    with atomic_writer(path) as out:
        out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
        out.write(
            f'<testsuites name={name} tests="{tests}" failures="{failures}" errors="{errors}" '
            f'skipped="{skipped}" time="{duration_s:.3f}">\n'
        )
        out.write(
            f'  <testsuite name={name} tests="{tests}" failures="{failures}" errors="{errors}" '
            f'skipped="{skipped}" time="{duration_s:.3f}">\n'
        )
        for case in cases:
            for metric in case.metrics:
                test_name = quoteattr(xml_text(f"{case.id} :: {metric.name}"))
                classname = quoteattr(xml_text(f"{suite_name}.{metric.name}"))
                out.write(f"    <testcase name={test_name} classname={classname}")
                if metric.status == "passed":
                    out.write("/>\n")
                    continue
                out.write(">\n")
                message = quoteattr(xml_text(metric.reason)[:1000])
                body = escape(xml_text(_details(case, metric)))
                tag = {"failed": "failure", "errored": "error", "skipped": "skipped"}[metric.status]
                if tag == "skipped":
                    out.write(f"      <skipped message={message}/>\n")
                else:
                    out.write(f"      <{tag} message={message} type={quoteattr(metric.status)}>{body}</{tag}>\n")
                out.write("    </testcase>\n")
        out.write("  </testsuite>\n</testsuites>\n")


def _details(case: TestCaseResult, metric) -> str:
    score = "n/a" if metric.score is None else f"{metric.score:.6f}"
    return (
        f"score: {score} (threshold {metric.threshold})\nreason: {metric.reason}\n"
        f"input: {case.input or ''}\nactual_output: {case.actual_output}"
    )
