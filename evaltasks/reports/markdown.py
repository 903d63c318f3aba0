"""summary.md: a human summary of a run (banner, per-metric table, worst failing cases, embedding work).

Every untrusted string (inputs, outputs, reasons, ids) passes through
:func:`~evaltasks.reports._escape.markdown_inline`, so nothing a model wrote can inject markup.
"""

from __future__ import annotations

from pathlib import Path

from evaltasks._atomic import atomic_writer
from evaltasks.reports._escape import markdown_inline
from evaltasks.results import EvaluationSummary, TestCaseResult

WORST_CASES = 10


def _fmt(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def render_summary_markdown(
    suite_name: str,
    summary: EvaluationSummary,
    cases: list[TestCaseResult],
    *,
    passed: bool,
    min_pass_rate: float,
) -> str:
    """The markdown summary of a run (a string; see :func:`write_summary_markdown`)."""
    banner = "✅ **PASSED**" if passed else "❌ **FAILED**"
    lines = [
        f"# evaltasks: {markdown_inline(suite_name)}",
        "",
        f"{banner}: pass rate {summary.pass_rate:.2%} ({summary.passed_cases}/{summary.cases} cases), "
        f"gate {min_pass_rate:.2%}.",
        "",
        f"Cases: {summary.passed_cases} passed, {summary.failed_cases} failed, {summary.errored_cases} errored, "
        f"{summary.skipped_cases} skipped.",
        "",
        "| metric | mean score | pass rate | threshold | passed | failed | errored | skipped |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in summary.metrics.items():
        lines.append(
            f"| {markdown_inline(name)} | {_fmt(m.mean_score)} | {m.pass_rate:.2%} | {m.threshold} | {m.passed} | "
            f"{m.failed} | {m.errored} | {m.skipped} |"
        )
    lines += _distributions(summary, cases)
    worst = sorted(
        ((metric.score if metric.score is not None else -1.0, case, metric)
         for case in cases for metric in case.metrics if metric.status in ("failed", "errored")),
        key=lambda item: item[0],
    )[:WORST_CASES]
    if worst:
        lines += ["", f"## Worst cases (up to {WORST_CASES})", "", "| case | metric | score | reason | output |",
                  "|---|---|---:|---|---|"]
        for _, case, metric in worst:
            lines.append(
                f"| {markdown_inline(case.id, 40)} | {markdown_inline(metric.name)} | {_fmt(metric.score)} | "
                f"{markdown_inline(metric.reason, 160)} | {markdown_inline(case.actual_output, 120)} |"
            )
    e = summary.embeddings
    lines += [
        "",
        f"Embeddings: {e.references_computed} references computed, {e.references_reused} reused from the index; "
        f"{e.outputs_computed} outputs computed, {e.outputs_reused} reused.",
        "",
    ]
    return "\n".join(lines)


def score_histogram(scores: list[float], bins: int = 10, width: int = 30) -> list[str]:
    """A text bar chart of ``scores`` in [0, 1]: one line per bin ``[i/bins, (i+1)/bins)`` (1.0 in the last)."""
    counts = [0] * bins
    for score in scores:
        counts[min(int(score * bins), bins - 1)] += 1
    top = max(counts) or 1
    return [
        f"{i / bins:.1f}–{(i + 1) / bins:.1f} {'█' * round(width * c / top):<{width}} {c}"
        for i, c in enumerate(counts)
    ]


def _distributions(summary: EvaluationSummary, cases: list[TestCaseResult]) -> list[str]:
    lines = ["", "## Score distribution", ""]
    for name in summary.metrics:
        scores = [m.score for case in cases for m in case.metrics if m.name == name and m.score is not None]
        if not scores:
            continue
        lines += [f"**{markdown_inline(name)}** ({len(scores)} scores)", "", "```text", *score_histogram(scores), "```", ""]
    return lines if len(lines) > 3 else []


def write_summary_markdown(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_writer(path) as out:
        out.write(text)
