"""The "Targets side by side" part of summary.md (:mod:`evaltasks.reports.markdown`): a run with several targets,
each compared with the first (:mod:`evaltasks.engine.side_by_side`; docs/targets.md#side-by-side).

In reading order: one line per target with its verdict against the reference (the overall pass-rate test in
words), a table of the targets (pass rate, Δ, verdict, latency, cost), the cases the targets' verdicts split with
every target's answer (the first :data:`~evaltasks.reports._markdown_sections.CHANGES_OPEN` open, the rest folded),
then one metric table per target (the reference's plain, the others' with Δ columns and verdicts against the
reference: the baseline comparison's table). Every untrusted string passes through
:func:`~evaltasks.reports._escape.markdown_inline`.
"""

from __future__ import annotations

from evaltasks.engine.outcome import RunReport
from evaltasks.engine.side_by_side import SideBySide, SplitCase, TargetAnswer, TargetVersus
from evaltasks.reports._escape import markdown_inline
from evaltasks.reports._markdown_sections import (
    CHANGES_KEPT,
    CHANGES_LISTED,
    CHANGES_OPEN,
    SHORT_VERDICTS,
    TEXT_SHOWN,
    details,
    metric_table,
)
from evaltasks.reports._markdown_text import (
    VERDICT_ICONS,
    Section,
    _fmt,
    change_test_text,
    verdict_headline,
)
from evaltasks.reports.verdict import case_label
from evaltasks.results import TargetRun, percent_text

STATUS_ICONS = {"passed": "✅", "failed": "❌", "errored": "⚠️", "skipped": "⏭️"}


def versus_text(versus: TargetVersus, reference: str) -> str:
    """A target's verdict against ``reference`` in words (no final period, names as given: escape them for
    markdown): ``worse than REF``, ``better than REF``, ``no significant difference from REF``, or the baseline
    comparison's inconclusive sentence (``Inconclusive: N paired cases can detect …``); ``the reference`` for the
    reference itself."""
    comparison = versus.comparison
    if comparison is None:
        return "the reference"
    verdict = comparison.verdict
    if verdict == "regressed":
        return f"worse than {reference}"
    if verdict == "improved":
        return f"better than {reference}"
    if verdict == "inconclusive":
        return verdict_headline(comparison)
    return f"no significant difference from {reference}"


def _latency(run: TargetRun) -> str:
    if run.latency_ms_median is None:
        return "n/a"
    p95 = f" / {run.latency_ms_p95:.0f}" if run.latency_ms_p95 is not None else ""
    return f"{run.latency_ms_median:.0f}{p95} ms"


def _targets_table(side: SideBySide) -> list[str]:
    """One row per target: kind, pass rate, Δ pass rate against the reference (with the test's p-value),
    verdict, median / p95 latency, cost, requests and stored outputs."""
    rows = [
        "| target | kind | pass rate | Δ pass rate | verdict | latency (median / p95) | cost | requests |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]
    for versus in side.targets:
        run, comparison = versus.target, versus.comparison
        s = run.summary
        rate = percent_text(s.pass_rate if s.cases > s.skipped_cases else None)
        test = comparison.pass_rate_test if comparison is not None else None
        delta = "" if comparison is None else "n/a"
        if test is not None and test.delta is not None:
            delta = f"{100 * test.delta:+.2f} pt<br>p = {_fmt(test.p_value)}"
        verdict = "reference" if comparison is None else SHORT_VERDICTS.get(comparison.verdict, comparison.verdict)
        rows.append(
            f"| **{markdown_inline(run.name, 60)}** | {markdown_inline(run.kind, 20)} | {rate} | {delta} | {verdict} | "
            f"{_latency(run)} | ${run.cost:.4f} | {run.requests}<br>{run.cached} stored |"
        )
    return [*rows, ""]


def _answer_line(answer: TargetAnswer) -> str:
    failing = "; ".join(
        f"{markdown_inline(name, 60)} {'error' if score is None else _fmt(score)}"
        for name, score in list(answer.failing.items())[:5]
    )
    why = f" ({failing})" if failing else ""
    error = f" — {markdown_inline(answer.error, TEXT_SHOWN)}" if answer.error else ""
    return (
        f"  - {STATUS_ICONS.get(answer.status, '')} **{markdown_inline(answer.target, 60)}** {answer.status}{why}"
        f"{error}: {markdown_inline(answer.output, TEXT_SHOWN)}"
    )


def split_lines(split: SplitCase) -> str:
    """One split case as a markdown list item: its readable name, question and reference, then each target's
    answer (status icon, target, status and failing metrics with their scores, the error, the output; texts cut to
    :data:`~evaltasks.reports._markdown_sections.TEXT_SHOWN` characters)."""
    first = split.answers[0].output if split.answers else None
    label = markdown_inline(case_label(split.case_id, split.input, first))
    statuses = " · ".join(f"{markdown_inline(a.target, 40)} {a.status}" for a in split.answers)
    lines = [f"- **{label}** · {statuses}"]
    if split.input is not None:
        lines.append(f"  - question: {markdown_inline(split.input, TEXT_SHOWN)}")
    if split.expected_output is not None:
        lines.append(f"  - reference: {markdown_inline(split.expected_output, TEXT_SHOWN)}")
    lines += [_answer_line(answer) for answer in split.answers]
    return "\n".join(lines)


def _splits_sections(side: SideBySide, prefect: bool) -> list[Section]:
    title = f"### Cases the targets split ({side.split_cases})"
    if not side.split_cases:
        return [Section(head=[title, "", "Every case got the same verdict from every target.", ""])]
    rows = [split_lines(split) for split in side.splits[:CHANGES_LISTED]]
    unlisted = side.split_cases - len(rows)
    intro = "Cases whose verdicts differ between the targets, with each target's answer."
    sections = [
        Section(
            head=[title, "", intro, ""],
            rows=rows[:CHANGES_OPEN],
            tail=[""],
            priority=-1,
            min_rows=min(len(rows), CHANGES_KEPT),
        )
    ]
    rest = rows[CHANGES_OPEN:]
    if rest or unlisted:
        more = side.split_cases - len(rows[:CHANGES_OPEN])
        fold_title = f"{more} more split case{'' if more == 1 else 's'}"
        note = [f"… {unlisted} more in results.json (side_by_side.splits)."] if unlisted else []
        if prefect:
            fold = [f"#### {fold_title}", "", "@@", *note, ""]
        else:
            fold = details(fold_title, ["@@", *(["", *note] if note else [])])
        at = fold.index("@@")
        sections.append(Section(head=fold[:at], rows=rest, tail=fold[at + 1 :], priority=3))
    return sections


def side_by_side_sections(report: RunReport, *, prefect: bool = False) -> list[Section]:
    """The "Targets side by side" sections of ``report`` (none without a side-by-side comparison); ``prefect``:
    Prefect's flavour (no ``<details>``)."""
    side = report.side_by_side
    if side is None:
        return []
    reference = side.reference
    lines = [
        "## Targets side by side",
        "",
        f"{len(side.targets)} targets, each compared with **{markdown_inline(reference, 60)}** (the first), "
        f"cases paired by id (alpha {side.alpha:g}, min effect {side.min_effect:g}).",
        "",
    ]
    for versus in side.targets[1:]:
        comparison = versus.comparison
        if comparison is None:
            continue
        test = comparison.pass_rate_test
        figures = f": {change_test_text(test, lambda t: markdown_inline(t, 60))}" if test is not None else ""
        lines += [
            f"- {VERDICT_ICONS.get(comparison.verdict, '')} **{markdown_inline(versus.target.name, 60)}**: "
            f"{markdown_inline(versus_text(versus, reference), 400)}{figures}"
        ]
    sections = [Section(head=[*lines, "", *_targets_table(side)])]
    sections += _splits_sections(side, prefect)
    for versus in side.targets:
        run = versus.target
        which = "the reference" if versus.comparison is None else f"against {markdown_inline(reference, 60)}"
        sections.append(Section(head=[f"### {markdown_inline(run.name, 60)} ({which})", ""]))
        table = RunReport(summary=run.summary, passed=True, comparison=versus.comparison)
        sections.append(metric_table(table))
    return sections
