"""The sections of summary.md (:mod:`evaltasks.reports.markdown`), in reading order: the head (verdict, counts,
warnings), "Cases that changed", the metric table, and the folded parts (worst cases, score distributions,
statistics, LLM judges); :func:`summary_sections` assembles them for :func:`~evaltasks.reports.markdown.render_summary`.
Every untrusted string passes through :func:`~evaltasks.reports._escape.markdown_inline`.
"""

from __future__ import annotations

from typing import Literal

import regex

from evaltasks.engine.compare import CaseChange, ChangeTest, Comparison
from evaltasks.engine.outcome import RunReport
from evaltasks.reports._escape import markdown_inline
from evaltasks.reports._markdown_text import (
    VERDICT_ICONS,
    Highlights,
    Section,
    WorstCase,
    _fmt,
    _ids,
    _signed,
    _statistics_note,
    change_test_text,
    histogram_lines,
    interval_text,
    is_tested,
    level_text,
    p_equals,
    verdict_headline,
)
from evaltasks.reports._run_metrics import run_metric_rows
from evaltasks.reports.verdict import case_label, conversation_label, verdict_line
from evaltasks.results import EvaluationSummary, Interval, TestCaseResult, budget_message, percent_text

CHANGES_OPEN = 5
"""Changed cases shown open under "Cases that changed"; the rest are inside a ``<details>`` block."""
TEXT_SHOWN = 160
"""Characters of a question, expected answer or output shown per changed or worst case (results.json has them
whole)."""
CHANGES_KEPT = 2
"""Open changed cases never cut for size (the other open ones go after the folded rows, before the metric rows)."""
CHANGES_LISTED = 100
"""Changed cases listed at most (the first :data:`CHANGES_OPEN` open); all of them are in results.json."""
CHANGE_METRICS_LISTED = 5
"""Changed metrics named per changed case (the rest counted; results.json has them all)."""
CHANGE_ICONS = {
    "newly failing": "🔻",
    "worse": "🔻",
    "new": "🆕",
    "removed": "➖",
    "better": "🟢",
    "newly passing": "🟢",
}


def details(summary: str, lines: list[str]) -> list[str]:
    """``lines`` folded into ``<details><summary>SUMMARY</summary>`` (``summary``: evaltasks' own words, or
    escaped), with the blank lines GitHub needs to render the markdown inside."""
    return [f"<details><summary>{summary}</summary>", "", *lines, "", "</details>", ""]


def folded(summary: str, rows: list[str], priority: int, min_rows: int = 0, *, open_heading: bool = False) -> Section:
    """A :class:`Section` inside ``<details>`` (see :func:`details`) whose ``rows`` (markdown blocks) may be cut
    from the end, the whole block dropped when none is left. ``open_heading``: under a ``### SUMMARY`` heading
    instead, for renderers that show ``<details>`` open anyway (Prefect's UI: the parts go under "## More")."""
    fold = ["### " + summary, "", "@@", ""] if open_heading else details(summary, ["@@"])
    at = fold.index("@@")
    return Section(head=fold[:at], rows=rows, tail=fold[at + 1 :], priority=priority, min_rows=min_rows)


def _score_status(score: float | None, status: str | None) -> str:
    """``0.8123 (passed)``; ``n/a (errored)`` without a score."""
    return f"{_fmt(score)} ({status})" if status else _fmt(score)


def ordered_changes(comparison: Comparison) -> list[tuple[str, CaseChange]]:
    """The comparison's changes in the order a reviewer reads them, each with its kind in words: a newly failing
    case's changes first (``newly failing``), then the other ``worse`` ones, ``new``, ``removed``, and ``better``
    (``newly passing`` for a case that passed again); each group in the comparison's order (largest drop first)."""
    failing, passing = set(comparison.newly_failing), set(comparison.newly_passing)
    rank = {"newly failing": 0, "worse": 1, "new": 2, "removed": 3, "newly passing": 4, "better": 4}
    named = []
    for change in comparison.changes:
        kind: str = change.kind
        if kind == "worse" and change.case_id in failing:
            kind = "newly failing"
        elif kind == "better" and change.case_id in passing:
            kind = "newly passing"
        named.append((kind, change))
    return sorted(named, key=lambda item: rank[item[0]])  # stable: keeps the comparison's order within a group


def change_lines(kind: str, changes: list[CaseChange]) -> str:
    """One changed case as a markdown list item (several lines): its kind, readable name, and per changed metric
    its score before → after (the first :data:`CHANGE_METRICS_LISTED`, then how many more; a new case its own lowest
    score and status, a removed one the baseline's), then its
    question, reference (``reference:``: the expected output, else the first reference), and output before → after,
    each cut to :data:`TEXT_SHOWN` characters and escaped.
    ``changes``: the case's changes of this kind (one for a new or removed case)."""
    change = changes[0]
    label = markdown_inline(
        conversation_label(change.case_id, change.turns, total=change.turns_total)
        if change.turns
        else case_label(change.case_id, change.input, change.current_output or change.baseline_output)
    )
    if change.kind == "new":
        what = f"lowest score {_score_status(change.current_score, change.current_status)}"
    elif change.kind == "removed":
        what = f"lowest score in the baseline {_score_status(change.baseline_score, change.baseline_status)}"
    else:
        what = "; ".join(
            f"{markdown_inline(c.metric)} {_score_status(c.baseline_score, c.baseline_status)} → "
            f"{_score_status(c.current_score, c.current_status)}"
            f"{f', Δ {_signed(c.delta)}' if c.delta is not None else ''}"
            for c in changes[:CHANGE_METRICS_LISTED]
        )
        if len(changes) > CHANGE_METRICS_LISTED:  # a suite of hundreds of metrics: the line stays short
            what += f"; … {len(changes) - CHANGE_METRICS_LISTED} more metrics in results.json"
    lines = [f"- {CHANGE_ICONS[kind]} **{kind}: {label}** · {what}"]
    if change.turns:
        return "\n".join(lines + _change_turn_items(change))
    if change.input is not None:
        lines.append(f"  - question: {markdown_inline(change.input, TEXT_SHOWN)}")
    if change.expected_output is not None:
        lines.append(f"  - reference: {markdown_inline(change.expected_output, TEXT_SHOWN)}")
    if change.kind in ("worse", "better"):
        lines.append(f"  - output before: {markdown_inline(change.baseline_output, TEXT_SHOWN)}")
        lines.append(f"  - output after: {markdown_inline(change.current_output, TEXT_SHOWN)}")
    elif change.kind == "new":
        lines.append(f"  - output: {markdown_inline(change.current_output, TEXT_SHOWN)}")
    else:
        lines.append(f"  - output in the baseline: {markdown_inline(change.baseline_output, TEXT_SHOWN)}")
    return "\n".join(lines)


def changes_sections(comparison: Comparison, *, rest_apart: bool = False) -> list[Section]:
    """ "Cases that changed": one item per case (its changed metrics together), in :func:`ordered_changes`' order;
    the first :data:`CHANGES_OPEN` open (cut last for size, the first :data:`CHANGES_KEPT` never), the next up to :data:`CHANGES_LISTED` inside
    ``<details>`` (cut first when the text must shrink); a sentence when no case changed. ``rest_apart``: those
    next ones under a ``### N more changed cases`` heading instead, as the last section returned (Prefect's
    flavour places it under "## More"; :func:`summary_sections`)."""
    ordered = ordered_changes(comparison)
    counts = comparison.counts
    newly = len(comparison.newly_failing)
    head = [
        "## Cases that changed",
        "",
        f"Since {markdown_inline(comparison.baseline, 120)}: {newly} newly failing, "
        f"{counts.get('worse', 0)} worse, {counts.get('better', 0)} better, {counts.get('new', 0)} new, "
        f"{counts.get('removed', 0)} removed (case × metric changes beyond the tolerance "
        f"{comparison.tolerance:g}; new and removed cases once each).",
        "",
    ]
    if not ordered:
        return [
            Section(
                head=[
                    *head[:2],
                    f"No case changed beyond the tolerance ({comparison.tolerance:g}) since "
                    f"{markdown_inline(comparison.baseline, 120)}.",
                    "",
                ]
            )
        ]
    cases: dict[tuple[str, str], list[CaseChange]] = {}
    for kind, change in ordered:  # one item per case and kind, its metrics together
        cases.setdefault((kind, change.case_id), []).append(change)
    rows = [change_lines(kind, changes) for (kind, _), changes in list(cases.items())[:CHANGES_LISTED]]
    sections = [
        Section(head=head, rows=rows[:CHANGES_OPEN], tail=[""], priority=-1, min_rows=min(len(rows), CHANGES_KEPT))
    ]
    rest = rows[CHANGES_OPEN:]
    if rest:
        more = len(cases) - CHANGES_OPEN
        unlisted = len(cases) - len(rows)
        title = f"{more} more changed case{'' if more == 1 else 's'}"
        folded = ["### " + title, "", "@@", ""] if rest_apart else details(title, ["@@"])
        if unlisted:
            at = len(folded) - (1 if rest_apart else 3)
            folded[at:at] = ["", f"… {unlisted} more in results.json (comparison.changes)."]
        at = folded.index("@@")
        sections.append(Section(head=folded[:at], rows=rest, tail=folded[at + 1 :], priority=3))
    return sections


def _cell(*lines: str) -> str:
    """A table cell of several lines (``<br>`` between them), empty lines left out."""
    return "<br>".join(line for line in lines if line)


def _delta_cell(delta: float | None, test: ChangeTest | None, *, percent: bool, regressed: bool) -> str:
    """A Δ cell: the change between the runs (🔻 when it regressed), then on their own lines the test's Δ over
    the paired cases when it differs (new or removed cases), its interval and p-value."""
    if delta is None and test is None:
        return "n/a"
    value = delta if delta is not None else test.delta  # type: ignore[union-attr]
    mark = "🔻 " if regressed else ""
    if test is None:
        return f"{mark}{_signed(value, percent)}"
    paired = (
        f"paired {_signed(test.delta, percent)}"
        if test.delta is not None and value is not None and abs(test.delta - value) > 1e-9
        else ""
    )  # the test's Δ over the paired cases only
    return _cell(
        f"{mark}{_signed(value, percent)}",
        paired,
        interval_text(test.interval, percent=percent, signed=True),
        p_equals(test.p_value) if test.p_value is not None else "",
    )


SHORT_VERDICTS = {
    "regressed": "🔻 regressed",
    "improved": "🟢 improved",
    "no significant change": "⚪ no change",
    "inconclusive": "❔ inconclusive",
}


def metric_table(report: RunReport) -> Section:
    """The metric table, narrow enough for an ~830 px column (docs/reports.md#what-each-surface-shows): without a
    baseline metric | pass rate | mean | threshold | failed | errored | skipped; with one metric | pass rate |
    Δ pass rate | mean | Δ mean | verdict, an "all cases" row first. Intervals and p-values sit under their
    numbers (``<br>``); a 🔻 marks every regressed change (a Δ whose test regressed; without tests a regressed
    metric's Δ mean, and the overall pass-rate drop of a comparison that regressed), nothing else; a ❌ marks the
    "all cases" pass rate when it failed the gate's ``min_pass_rate`` (the rate the gate compared,
    :attr:`RunReport.rate <evaltasks.engine.lifecycle.RunReport.rate>`, below it and ``fail_on`` not
    ``regression``)."""
    summary, comparison, gate = report.summary, report.comparison, report.gate

    def rate_cell(value: float | None, interval: Interval | None) -> str:
        return _cell(percent_text(value), interval_text(interval, percent=True) if value is not None else "")

    def mean_cell(value: float | None, interval: Interval | None) -> str:
        return _cell(_fmt(value), interval_text(interval) if value is not None else "")

    if comparison is None:
        section = Section(
            head=[
                "| metric | pass rate | mean | threshold | failed | errored | skipped |",
                "|---|---:|---:|---:|---:|---:|---:|",
            ],
            tail=[""],
            min_rows=1,
        )
        for name, m in summary.metrics.items():
            section.rows.append(
                f"| {markdown_inline(name)} | {rate_cell(m.pass_rate, m.pass_rate_interval)} | "
                f"{mean_cell(m.mean_score, m.mean_score_interval)} | {m.threshold} | {m.failed} | "
                f"{m.errored} | {m.skipped} |"
            )
        return section
    tested = is_tested(comparison)
    by_name = {m.name: m for m in comparison.metrics}
    section = Section(
        head=["| metric | pass rate | Δ pass rate | mean | Δ mean | verdict |", "|---|---:|---:|---:|---:|---|"],
        tail=[""],
        min_rows=2,
    )
    overall = comparison.pass_rate_test
    drop = comparison.pass_rate_delta is not None and comparison.pass_rate_delta < 0
    overall_regressed = (overall is not None and overall.verdict == "regressed") or (
        overall is None and not tested and comparison.regressed and drop
    )
    below_gate = not report.passed and gate.fail_on != "regression" and report.rate < gate.min_pass_rate - 1e-12
    evaluated = summary.cases - summary.skipped_cases
    overall_verdict = (
        SHORT_VERDICTS.get(overall.verdict, "")
        if overall is not None
        else ("🔻 regressed" if not tested and comparison.regressed else "")
    )
    section.rows.append(
        f"| **all cases** | {'❌ ' if below_gate and evaluated else ''}"
        f"{rate_cell(summary.pass_rate if evaluated else None, summary.pass_rate_interval)} | "
        f"{_delta_cell(comparison.pass_rate_delta, overall, percent=True, regressed=overall_regressed)} | | | "
        f"{overall_verdict} |"
    )
    for name, m in summary.metrics.items():
        c = by_name.get(name)
        rate_test, score_test = (c.pass_rate_test, c.score_test) if c is not None else (None, None)
        rate_regressed = rate_test is not None and rate_test.verdict == "regressed"
        mean_regressed = (score_test is not None and score_test.verdict == "regressed") or (
            not tested and c is not None and c.regressed
        )
        verdict = (
            "not in the baseline"
            if c is None or (c.verdict is None and tested)
            else SHORT_VERDICTS.get(c.verdict or "", "🔻 regressed" if c.regressed else "")
        )
        section.rows.append(
            f"| {markdown_inline(name)} | {rate_cell(m.pass_rate, m.pass_rate_interval)} | "
            f"{_delta_cell(c.pass_rate_delta if c else None, rate_test, percent=True, regressed=rate_regressed)} | "
            f"{mean_cell(m.mean_score, m.mean_score_interval)} | "
            f"{_delta_cell(c.mean_delta if c else None, score_test, percent=False, regressed=mean_regressed)} | "
            f"{verdict} |"
        )
    return section


def counts_lines(summary: EvaluationSummary) -> list[str]:
    """Per metric its threshold and counts of passed, failed, errored and skipped results (a table)."""
    return [
        "| metric | threshold | passed | failed | errored | skipped |",
        "|---|---:|---:|---:|---:|---:|",
        *(
            f"| {markdown_inline(name)} | {m.threshold} | {m.passed} | {m.failed} | {m.errored} | {m.skipped} |"
            for name, m in summary.metrics.items()
        ),
        "",
    ]


def worst_lines(w: WorstCase) -> str:
    """One worst case as a markdown list item: its readable name, metric and score, the metric's reason (the
    score named once: a reason that states it, e.g. ReferenceMatch's "Max cosine similarity 0.0173 …", is shown
    alone), its output and reference (``reference:``: the expected output, else the first reference: the text the
    output is judged against); with the target that produced the output, when one did."""
    label = markdown_inline(w.label or w.case_id, 60)
    score = _fmt(w.score)
    shown_score = w.score is not None and (
        score in w.reason or f"{w.score:.2f}" in w.reason or "score" in w.reason.lower()
    )
    target = f" · target {markdown_inline(w.target, 40)}" if w.target else ""
    head = f"- **{label}**{target} · {markdown_inline(w.metric)}"
    head += (
        f": {markdown_inline(w.reason, TEXT_SHOWN)}"
        if shown_score
        else f" · score {score}: {markdown_inline(w.reason, TEXT_SHOWN)}"
    )
    lines = [head, *_turn_items(w)] if w.turns else [head, f"  - output: {markdown_inline(w.output, TEXT_SHOWN)}"]
    if w.expected is not None:
        lines.append(f"  - reference: {markdown_inline(w.expected, TEXT_SHOWN)}")
    return "\n".join(lines)


def _change_turn_items(change: CaseChange) -> list[str]:
    """A changed conversation's turns as sub-items (this run's; a removed case's from the baseline), then, when
    its last answer differs from the baseline's, that answer before (docs/conversations.md#reports)."""
    turns = change.turns or []
    earlier = (change.turns_total or len(turns)) - len(turns)
    w = WorstCase(None, change.case_id, change.metric, "", "", turns=turns, turns_left_out=earlier)
    lines = _turn_items(w)
    if change.kind in ("worse", "better") and change.baseline_output != change.current_output:
        lines.append(f"  - last answer before: {markdown_inline(change.baseline_output, TEXT_SHOWN)}")
    return lines


def _turn_items(w: WorstCase) -> list[str]:
    """A conversation's turns as sub-items of its worst-case entry (docs/conversations.md#reports): its role,
    how many earlier turns are left out, then one item per turn: ``turn 2: user: … → assistant: …`` (expected:
    …)."""
    lines = [f"  - role: {markdown_inline(w.role, TEXT_SHOWN)}"] if w.role is not None else []
    if w.turns_left_out:
        lines.append(f"  - … {w.turns_left_out} earlier turn{'' if w.turns_left_out == 1 else 's'}")
    for number, turn in enumerate(w.turns or [], start=w.turns_left_out + 1):
        said = f"user: {markdown_inline(turn.input, TEXT_SHOWN)} → " if turn.input is not None else ""
        line = f"  - turn {number}: {said}assistant: {markdown_inline(turn.actual_output, TEXT_SHOWN)}"
        if turn.expected_output is not None:
            line += f" (expected: {markdown_inline(turn.expected_output, TEXT_SHOWN)})"
        lines.append(line)
    return lines


def mermaid_chart(name: str, counts: list[int]) -> list[str]:
    """A Mermaid ``xychart-beta`` bar chart of per-bin ``counts`` over [0, 1] (GitHub renders it); the metric's
    ``name`` in the title keeps only letters, digits, spaces and ``_.-`` (a suite's text inside a chart)."""
    bins = len(counts)
    title = regex.sub(r"[^\p{L}\p{N} _.\-]", "", name)[:60] or "scores"
    labels = ", ".join(f'"{i / bins:.1f}–{(i + 1) / bins:.1f}"' for i in range(bins))
    return [
        "```mermaid",
        "xychart-beta",
        f'    title "{title}"',
        f"    x-axis [{labels}]",
        f'    y-axis "results" 0 --> {max(max(counts), 1)}',
        f"    bar [{', '.join(map(str, counts))}]",
        "```",
        "",
    ]


def summary_sections(
    report: RunReport,
    cases: list[TestCaseResult] | Highlights,
    *,
    charts: Literal["mermaid", "text"] = "mermaid",
    baseline_note: str | None = None,
) -> list[Section]:
    """The summary as :class:`Section` blocks (see :func:`render_summary`)."""
    summary, comparison = report.summary, report.comparison
    sections = [head_section(report, baseline_note)]
    prefect = charts == "text"  # Prefect's flavour: its markdown view shows <details> open, so no <details>
    more_changes: list[Section] = []
    if comparison is not None:
        changed = changes_sections(comparison, rest_apart=prefect)
        if prefect and len(changed) > 1:
            changed, more_changes = changed[:1], changed[1:]
        sections += changed

    sections.append(Section(head=["## Metrics", ""]))
    sections.append(metric_table(report))
    run_rows = run_metric_rows(summary)  # run-level metrics (CalibrationMetric): one row for the whole run
    if run_rows:
        sections.append(Section(head=["", *run_rows, ""]))
    if prefect:
        sections.append(Section(head=["## More", ""]))
        sections += more_changes

    def part(title: str, rows: list[str], priority: int, min_rows: int = 0) -> Section:  # folded, or under More
        return folded(title, rows, priority, min_rows, open_heading=prefect)

    stopped = budget_message(summary) is not None
    if summary.judges and stopped:  # the judge budget decided the gate: its costs in the open
        sections.append(judge_section(summary))

    highlights = cases if isinstance(cases, Highlights) else Highlights.of(cases)
    if highlights.worst:
        sections.append(
            part(
                f"Worst cases ({len(highlights.worst)} lowest-scoring failed or errored results)",
                [worst_lines(w) for w in highlights.worst],
                priority=4,
            )
        )

    dist = distribution_rows(summary, highlights, charts)
    if dist:
        sections.append(part("Score distributions", dist, priority=5))

    title = "Statistics, counts and embeddings" if comparison is not None else "Statistics and embeddings"
    sections.append(part(title, ["\n".join(statistics_notes(summary, comparison))], priority=2))

    if summary.judges and not stopped:
        judge = judge_section(summary)
        fold = part("LLM judges: requests, tokens and cost", judge.rows, priority=1, min_rows=judge.min_rows)
        fold.head += judge.head[2:]
        fold.tail[:0] = judge.tail
        sections.append(fold)
    return sections


def head_section(report: RunReport, baseline_note: str | None) -> Section:
    """The summary's head, never cut: the title, the verdict line, the "no baseline" note (``baseline_note``, else
    one when the gate's ``fail_on`` needed a baseline), the case counts and the run's warnings."""
    suite_name, summary, comparison, passed = report.suite, report.summary, report.comparison, report.passed
    fail_on = report.gate.fail_on
    line = verdict_line(report)
    status, _, rest = line.partition(":")
    evaluated = summary.cases - summary.skipped_cases
    rate = report.rate
    interval = summary.pass_rate_interval if rate == summary.pass_rate else None  # allow_errors: another rate
    ci = f" ({level_text(interval.level)} CI {interval_text(interval, percent=True)}%)" if interval else ""
    head = [f"# evaltasks: {markdown_inline(suite_name)}", "", f"{'✅' if passed else '❌'} **{status}**:{rest}", ""]
    if comparison is None and (baseline_note or fail_on in ("regression", "either")):
        note = baseline_note or "No baseline to compare with: the regression check had nothing to compare."
        head += [f"> ℹ️ {note}", ""]
    rate_ci = f"; pass rate {ci[2:-1]}" if evaluated and ci else ""
    head += [
        f"Cases: {summary.passed_cases} passed, {summary.failed_cases} failed, {summary.errored_cases} errored, "
        f"{summary.skipped_cases} skipped{rate_ci}.",
        "",
    ]
    for warning in report.warnings:
        head += [f"> ⚠️ {markdown_inline(warning, 400)}", ""]
    return Section(head=head)


def distribution_rows(
    summary: EvaluationSummary, highlights: Highlights, charts: Literal["mermaid", "text"]
) -> list[str]:
    """ "Score distributions": per metric with scores, a chart of them (Mermaid, or ``#`` bars for ``text``), or
    for a metric whose scores are all 0 or 1 the two counts."""
    dist: list[str] = []
    for name in summary.metrics:
        counts = highlights.histograms.get(name)
        if counts and sum(counts) and name not in highlights.graded:  # scores 0 and 1 only: counts, no chart
            dist.append(
                f"**{markdown_inline(name)}** ({sum(counts)} scores, each 0 or 1): {counts[-1]} × 1, {counts[0]} × 0\n"
            )
        elif counts and sum(counts):
            chart = (
                mermaid_chart(name, counts) if charts == "mermaid" else ["```text", *histogram_lines(counts), "```", ""]
            )
            dist.append("\n".join([f"**{markdown_inline(name)}** ({sum(counts)} scores)", "", *chart]))
    return dist


def statistics_notes(summary: EvaluationSummary, comparison: Comparison | None) -> list[str]:
    """ "Statistics, counts and embeddings": with a comparison the per-metric counts, the tests' verdict and
    method, and the new, removed and flaky cases; how the intervals were computed; the embeddings reused."""
    notes: list[str] = []
    if comparison is not None:
        notes += counts_lines(summary)
    if comparison is not None and is_tested(comparison):
        notes += [
            f"{VERDICT_ICONS.get(comparison.verdict, '')} **{verdict_headline(comparison)}.** "
            f"(alpha {comparison.alpha:g}, min effect {comparison.min_effect:g})",
            "",
        ]
        if comparison.pass_rate_test is not None:
            text = change_test_text(comparison.pass_rate_test, lambda t: markdown_inline(t, 60))
            notes += [f"Overall {text}.", ""]
        notes += [
            f"Paired by case id. Regressed or improved: p < {comparison.alpha:g} and a change larger than "
            f"{comparison.min_effect:g}; inconclusive: too few paired cases to detect a change that small. "
            "Each metric is tested on its own (no multiple-testing correction).",
            "",
        ]
    if comparison is not None:
        for label, ids in (
            ("New since the baseline (left out of the paired tests)", comparison.new_cases),
            ("Removed since the baseline", comparison.removed_cases),
            ("Flaky (judge samples on both sides of the threshold)", comparison.flaky_cases),
        ):
            if ids:
                notes += [f"{label}: {_ids(ids)}.", ""]
    statistics = _statistics_note(summary)
    if statistics:
        notes += [statistics, ""]
    e = summary.embeddings
    notes += [
        f"Embeddings: {e.references_computed} references computed, {e.references_reused} reused from the "
        f"index; {e.outputs_computed} outputs computed, {e.outputs_reused} reused.",
        "",
    ]
    return notes


UNSTABLE_LISTED = 20
"""Unstable case ids listed per judge metric in summary.md (all of them are in results.json)."""


def judge_section(summary: EvaluationSummary) -> Section:
    """The "LLM judges" table: per judge metric its model, requests sent (answers reused from the store under
    them), tokens in and out, US dollars and unstable cases, then the run's total; the unstable cases' ids (the first
    :data:`UNSTABLE_LISTED` per metric) under the table, so the table stays narrow."""
    rows, listed = [], []
    for name, j in summary.judges.items():
        rows.append(
            f"| {markdown_inline(name)} | {markdown_inline(j.model, 60)} | {j.requests}<br>{j.reused} reused | "
            f"{j.prompt_tokens} in<br>{j.completion_tokens} out | ${j.cost:.4f} | {j.unstable} |"
        )
        if j.unstable_cases:
            ids = ", ".join(markdown_inline(c, 40) for c in j.unstable_cases[:UNSTABLE_LISTED])
            more = (
                f", … {len(j.unstable_cases) - UNSTABLE_LISTED} more" if len(j.unstable_cases) > UNSTABLE_LISTED else ""
            )
            listed.append(f"Unstable in {markdown_inline(name)}: {ids}{more}.")
    t = summary.judge_total
    if t is not None and len(summary.judges) > 1:
        rows.append(
            f"| **total** | | {t.requests}<br>{t.reused} reused | {t.prompt_tokens} in<br>"
            f"{t.completion_tokens} out | ${t.cost:.4f} | {t.unstable} |"
        )
    return Section(
        head=[
            "## LLM judges",
            "",
            "| metric | judge model | requests | tokens | cost | unstable |",
            "|---|---|---:|---:|---:|---:|",
        ],
        rows=rows,
        tail=[
            "",
            "Unstable: the case's samples fell on both sides of the threshold.",
            *(["", *listed] if listed else []),
            "",
        ],
        priority=1,
        min_rows=1,
    )
