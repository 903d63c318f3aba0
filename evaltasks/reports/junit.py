"""junit.xml: one ``<testcase>`` per test case × metric; failures carry the metric's reason.

Written as a stream (one element at a time) with the standard library's XML escaping; characters XML
forbids are removed from untrusted text.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from evaltasks._atomic import atomic_writer
from evaltasks.reports._escape import xml_text
from evaltasks.results import EvaluationSummary, MetricResult, TestCaseResult


def junit_head(suite_name: str, summary: EvaluationSummary, duration_s: float = 0.0) -> str:
    """The XML declaration and the opening ``<testsuites>``/``<testsuite>`` tags with the run's totals.

    Counts: ``tests`` = cases × metrics (and one per run-level metric); ``failures`` = failed metric results;
    ``errors`` = errored; ``skipped`` = skipped.
    """
    per_metric = summary.metrics.values()
    runs = [r.status for r in summary.run_metrics.values()]  # run-level metrics: one testcase each
    tests = sum(m.passed + m.failed + m.errored + m.skipped for m in per_metric) + len(runs)
    failures = sum(m.failed for m in per_metric) + runs.count("failed")
    errors = sum(m.errored for m in per_metric) + runs.count("errored")
    skipped = sum(m.skipped for m in per_metric)
    name = quoteattr(xml_text(suite_name))
    attrs = f'tests="{tests}" failures="{failures}" errors="{errors}" skipped="{skipped}" time="{duration_s:.3f}"'
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name={name} {attrs}>\n  <testsuite name={name} {attrs}>\n'
    )


JUNIT_TAIL = "  </testsuite>\n</testsuites>\n"


# For str.translate (one pass in C): what saxutils.quoteattr escapes in a double-quoted value, and the
# ASCII control characters XML 1.0 forbids (removed).
_ATTR_TABLE = {
    **{c: None for c in range(32) if c not in (9, 10, 13)},
    ord("&"): "&amp;",
    ord("<"): "&lt;",
    ord(">"): "&gt;",
    ord('"'): "&quot;",
    ord("\n"): "&#10;",
    ord("\r"): "&#13;",
    ord("\t"): "&#9;",
}


def _attr(text: str) -> str:
    """``text`` as a double-quoted XML attribute value (what ``saxutils.quoteattr`` does, minus its choice of
    quote character, ~10x faster); characters XML forbids removed first."""
    if not text.isascii():
        text = xml_text(text)
    return f'"{text.translate(_ATTR_TABLE)}"'


@functools.lru_cache(maxsize=1024)
def _classname(suite_name: str, metric_name: str) -> str:
    return _attr(f"{suite_name}.{metric_name}")


def _unstable_properties(metric: MetricResult) -> str:
    """``<properties>`` of a judge result whose samples fell on both sides of the threshold (``unstable``,
    ``score_stdev``, ``samples``); "" for every other result."""
    log = metric.evaluation_log
    if not log or log.get("unstable") is not True:
        return ""
    samples = " ".join(f"{s:g}" for s in log.get("samples", []))
    return (
        '      <properties>\n        <property name="unstable" value="true"/>\n'
        f'        <property name="score_stdev" value={_attr(str(log.get("score_stdev", "")))}/>\n'
        f'        <property name="samples" value={_attr(samples)}/>\n      </properties>\n'
    )


def junit_testcases(suite_name: str, case: TestCaseResult) -> str:
    """The ``<testcase>`` elements of one case (one per metric); untrusted text escaped. A judge result that is
    ``unstable`` (docs/judges.md#llm-judges) carries ``<properties>``: ``unstable``, ``score_stdev``, ``samples``.
    A case a target generated is classed under its target (``suite.target.metric``): with several targets the
    same case id appears once per target, and CI test reporters key test cases by class and name."""
    parts = []
    group = f"{suite_name}.{case.generation.target}" if case.generation is not None else suite_name
    for metric in case.metrics:
        test_name = _attr(f"{case.id} :: {metric.name}")
        classname = _classname(group, metric.name)
        properties = _unstable_properties(metric)
        if metric.status == "passed":
            if properties:
                parts.append(f"    <testcase name={test_name} classname={classname}>\n{properties}    </testcase>\n")
            else:
                parts.append(f"    <testcase name={test_name} classname={classname}/>\n")
            continue
        message = _attr(xml_text(metric.reason)[:1000])
        tag = {"failed": "failure", "errored": "error", "skipped": "skipped"}[metric.status]
        if tag == "skipped":
            inner = f"      <skipped message={message}/>\n"
        else:
            body = escape(xml_text(_details(case, metric)))
            inner = f"      <{tag} message={message} type={quoteattr(metric.status)}>{body}</{tag}>\n"
        parts.append(f"    <testcase name={test_name} classname={classname}>\n{properties}{inner}    </testcase>\n")
    return "".join(parts)


def junit_run_metrics(suite_name: str, summary: EvaluationSummary) -> str:
    """One ``<testcase>`` per run-level metric of ``summary`` (CalibrationMetric; named ``run :: <metric>``): its
    failure or error carries the reason (docs/metrics/reliability.md#calibrationmetric); "" without any."""
    parts = []
    for result in summary.run_metrics.values():
        test_name, classname = _attr(f"run :: {result.name}"), _classname(suite_name, result.name)
        if result.status == "passed":
            parts.append(f"    <testcase name={test_name} classname={classname}/>\n")
            continue
        tag = "failure" if result.status == "failed" else "error"
        message = _attr(xml_text(result.reason)[:1000])
        inner = f"      <{tag} message={message} type={quoteattr(result.status)}>{escape(xml_text(result.reason))}</{tag}>\n"
        parts.append(f"    <testcase name={test_name} classname={classname}>\n{inner}    </testcase>\n")
    return "".join(parts)


def write_junit_xml(
    path: Path, suite_name: str, summary: EvaluationSummary, cases: Iterable[TestCaseResult], duration_s: float = 0.0
) -> None:
    """Stream a JUnit XML report to ``path`` atomically (counts: see :func:`junit_head`)."""
    with atomic_writer(path) as out:
        out.write(junit_head(suite_name, summary, duration_s))
        for case in cases:
            out.write(junit_testcases(suite_name, case))
        out.write(junit_run_metrics(suite_name, summary))
        out.write(JUNIT_TAIL)


def _details(case: TestCaseResult, metric: MetricResult) -> str:
    """A failure's text: score, reason, then the case's input and output, or a conversation's turns (each
    ``turn N user:`` / ``turn N assistant:``; docs/conversations.md#reports)."""
    score = "n/a" if metric.score is None else f"{metric.score:.6f}"
    head = f"score: {score} (threshold {metric.threshold})\nreason: {metric.reason}\n"
    if case.turns:
        role = f"chatbot_role: {case.chatbot_role}\n" if case.chatbot_role is not None else ""
        turns = "\n".join(
            f"turn {n} user: {turn.input or ''}\nturn {n} assistant: {turn.actual_output}"
            for n, turn in enumerate(case.turns, start=1)
        )
        return head + role + turns
    return head + f"input: {case.input or ''}\nactual_output: {case.actual_output}"
