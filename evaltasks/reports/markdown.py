"""summary.md: a human summary of a run, also the job summary, PR comment and Prefect artifact.

Content, most important first (docs/reports.md#what-each-surface-shows): the verdict line
(:func:`~evaltasks.reports.verdict.verdict_line`: passed or failed, the pass rate and its change, cases newly
failing), the "no baseline" note, case counts, warnings; with a baseline the cases that changed (newly failing
first, each with its readable name, question, expected answer and outputs before → after; the first
:data:`CHANGES_OPEN` open, the rest folded); the metric table (narrow: with a baseline its Δ columns and verdicts,
🔻 on every regressed change); then, folded in ``<details>``, the worst cases, score distributions (Mermaid bar
charts, or ``#`` bars for renderers without Mermaid; pass/fail metrics as counts), the statistics, counts and
embeddings, and the LLM judges' costs (open when the judge budget stopped the run); in Prefect's flavour
(``charts="text"``) those parts are under one ``## More`` heading instead of ``<details>``. With a size limit (a GitHub
job summary holds 1 MiB, a comment 65,536 characters) rows are dropped from the folded sections first, and a note
says how many were left out and where the full report is.

Every untrusted string (inputs, outputs, reasons, ids, metric names) passes through
:func:`~evaltasks.reports._escape.markdown_inline`, so nothing a model wrote can inject markup.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from evaltasks._atomic import atomic_writer
from evaltasks.engine.compare import Comparison
from evaltasks.engine.outcome import RunReport
from evaltasks.engine.side_by_side import SideBySide
from evaltasks.reports._markdown_sections import (
    CHANGE_ICONS,
    CHANGE_METRICS_LISTED,
    CHANGES_KEPT,
    CHANGES_LISTED,
    CHANGES_OPEN,
    SHORT_VERDICTS,
    TEXT_SHOWN,
    UNSTABLE_LISTED,
    change_lines,
    changes_sections,
    counts_lines,
    details,
    folded,
    judge_section,
    mermaid_chart,
    metric_table,
    ordered_changes,
    summary_sections,
    worst_lines,
)
from evaltasks.reports._markdown_side_by_side import side_by_side_sections, split_lines, versus_text
from evaltasks.reports._markdown_text import (
    HISTOGRAM_BINS,
    IDS_LISTED,
    VERDICT_ICONS,
    WORST_CASES,
    Highlights,
    Section,
    WorstCase,
    change_test_text,
    fit_sections,
    histogram_lines,
    interval_digits,
    interval_text,
    is_tested,
    level_text,
    p_equals,
    p_text,
    verdict_headline,
    with_interval,
)
from evaltasks.results import EvaluationSummary, TestCaseResult

__all__ = [
    "CHANGES_KEPT",
    "CHANGES_LISTED",
    "CHANGES_OPEN",
    "CHANGE_ICONS",
    "CHANGE_METRICS_LISTED",
    "HISTOGRAM_BINS",
    "IDS_LISTED",
    "SHORT_VERDICTS",
    "TEXT_SHOWN",
    "UNSTABLE_LISTED",
    "VERDICT_ICONS",
    "WORST_CASES",
    "Highlights",
    "Section",
    "WorstCase",
    "change_lines",
    "change_test_text",
    "changes_sections",
    "counts_lines",
    "details",
    "fit_sections",
    "folded",
    "histogram_lines",
    "interval_digits",
    "interval_text",
    "is_tested",
    "judge_section",
    "level_text",
    "mermaid_chart",
    "metric_table",
    "ordered_changes",
    "p_equals",
    "p_text",
    "render_summary",
    "render_summary_markdown",
    "score_histogram",
    "side_by_side_sections",
    "split_lines",
    "summary_sections",
    "verdict_headline",
    "versus_text",
    "with_interval",
    "worst_lines",
    "write_summary_markdown",
]


def render_summary(
    report: RunReport,
    cases: list[TestCaseResult] | Highlights,
    *,
    max_size: int | None = None,
    size: Callable[[str], int] = len,
    truncation_note: str = "The full report is in results.json.",
    charts: Literal["mermaid", "text"] = "mermaid",
    baseline_note: str | None = None,
) -> str:
    """The markdown summary of a run (a string; see :func:`write_summary_markdown`).

    Args:
        report: the run (:class:`~evaltasks.engine.lifecycle.RunReport`: suite, summary, the gate's verdict, the
            comparison, the warnings). Its gate: the verdict and threshold, the rate it compared (default
            ``summary.pass_rate``) and its ``fail_on`` (``min_pass_rate``, ``regression``, ``either``; None:
            ``min_pass_rate``), named in the verdict. Its comparison with a baseline: its figures in the verdict
            line, "Cases that changed" (newly failing first, each with its question, expected answer and
            outputs), Δ columns and verdicts in the metric table, the tests' details, new, removed and flaky
            cases (folded). Its warnings: shown under the verdict.
        cases: its case results, or their :class:`Highlights` (a streamed run).
        max_size: the most ``size(text)`` may be (e.g. ``len`` for characters, UTF-8 bytes for GitHub's
            1 MiB job summary); rows are cut as :func:`fit_sections` describes (folded rows first, then metric
            rows, the first changed cases last; the verdict never). None: no limit.
        truncation_note: appended to the truncation notice (where the full report is).
        charts: the flavour. ``mermaid``: GitHub's (summary.md, the job summary, the PR comment): score
            distributions as Mermaid bar charts, the secondary parts folded in ``<details>``. ``text``: Prefect's
            (its UI renders no Mermaid and shows ``<details>`` open): ``#`` bars in a code block, and no
            ``<details>``: the folded parts (more changed cases, worst cases, distributions, statistics, judges)
            under one ``## More`` heading after the metric table, each under a ``###`` heading.
        baseline_note: evaltasks' own sentence (markdown) shown right under the verdict when there is no
            comparison (e.g. the Action's "No baseline: …"); without it a note appears only when the gate's
            ``fail_on`` needed a baseline.

    A report with several targets (its ``side_by_side``) shows "Targets side by side" right under the head: each
    target's verdict against the first, a table of the targets, the cases their verdicts split with every answer,
    and one metric table per target (docs/targets.md#side-by-side).
    """
    sections = summary_sections(report, cases, charts=charts, baseline_note=baseline_note)
    sections[1:1] = side_by_side_sections(report, prefect=charts == "text")
    return fit_sections(sections, max_size, size=size, note=truncation_note)


def render_summary_markdown(
    suite_name: str,
    summary: EvaluationSummary,
    cases: list[TestCaseResult] | Highlights,
    *,
    passed: bool,
    min_pass_rate: float,
    comparison: Comparison | None = None,
    warnings: list[str] | None = None,
    gate_pass_rate: float | None = None,
    fail_on: str | None = None,
    max_size: int | None = None,
    size: Callable[[str], int] = len,
    truncation_note: str = "The full report is in results.json.",
    charts: Literal["mermaid", "text"] = "mermaid",
    baseline_note: str | None = None,
    side_by_side: SideBySide | Mapping[str, Any] | None = None,
) -> str:
    """:func:`render_summary` of a report given by its parts: the GitHub Action's report step calls this name
    with what it reads from results.json (docs/action.md#github-action), including an older evaltasks' files. The
    parts are :class:`~evaltasks.engine.lifecycle.RunReport`'s (``gate_pass_rate`` is ``gate.pass_rate``;
    ``side_by_side``: results.json's, several targets compared, as read or parsed); the other arguments are
    :func:`render_summary`'s.

    Raises:
        pydantic.ValidationError: ``side_by_side`` is a mapping that is not a side-by-side comparison.
    """
    report = RunReport.of(
        summary,
        passed=passed,
        min_pass_rate=min_pass_rate,
        suite=suite_name,
        comparison=comparison,
        warnings=warnings or [],
        pass_rate=gate_pass_rate,
        fail_on=fail_on,
        side_by_side=side_by_side if not isinstance(side_by_side, Mapping) else SideBySide.model_validate(side_by_side),
    )
    return render_summary(
        report,
        cases,
        max_size=max_size,
        size=size,
        truncation_note=truncation_note,
        charts=charts,
        baseline_note=baseline_note,
    )


def score_histogram(scores: list[float], bins: int = HISTOGRAM_BINS, width: int = 30) -> list[str]:
    """A text bar chart of ``scores`` in [0, 1]: one line per bin ``[i/bins, (i+1)/bins)`` (1.0 in the last)."""
    counts = [0] * bins
    for score in scores:
        counts[min(int(score * bins), bins - 1)] += 1
    return histogram_lines(counts, width)


def write_summary_markdown(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_writer(path) as out:
        out.write(text)
