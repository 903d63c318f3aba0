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

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import regex

from evaltasks._atomic import atomic_writer
from evaltasks.engine.compare import CaseChange, ChangeTest, Comparison
from evaltasks.engine.outcome import RunReport
from evaltasks.reports._escape import markdown_inline
from evaltasks.reports.verdict import case_label, verdict_line
from evaltasks.results import EvaluationSummary, Interval, TestCaseResult, budget_message, percent_text

WORST_CASES = 10
HISTOGRAM_BINS = 10


def _fmt(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None, percent: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:+.2f} pt" if percent else f"{value:+.4f}"


def interval_digits(width: float, least: int, most: int) -> int:
    """Decimals that show an interval of ``width`` (in the units printed) apart: ``least`` for a wide one, more as
    it narrows (one per factor of ten below 1), at most ``most``; ``least`` for an interval of width 0 (every
    resample gave the same value, e.g. a metric every case passed: more decimals would show nothing more)."""
    if width <= 0:
        return least
    return max(least, min(most, math.ceil(-math.log10(width))))


def interval_text(interval: Interval | None, *, percent: bool = False, signed: bool = False) -> str:
    """The bounds of ``interval`` without its point value: ``78.1–83.6`` for a pass rate (``percent``: points of
    a percentage, 1 decimal, 2 when narrower than 1 point), ``0.72–0.76`` for a mean (2 decimals, up to 4 when
    narrow); ``signed`` (a difference): ``-10.1 to -3.9`` / ``-0.021 to +0.004``. "" when ``interval`` is None."""
    if interval is None:
        return ""
    scale = 100.0 if percent else 1.0
    low, high = scale * interval.low, scale * interval.high
    digits = interval_digits(high - low, 1, 2) if percent else interval_digits(high - low, 2, 4)
    if signed:
        return f"{low:+.{digits}f} to {high:+.{digits}f}"
    return f"{low:.{digits}f}–{high:.{digits}f}"


def with_interval(text: str, interval: Interval | None, *, percent: bool = False, signed: bool = False) -> str:
    """``text`` (a formatted value) followed by `` (LOW–HIGH)`` when there is an interval (see
    :func:`interval_text`); ``text`` alone when there is none (e.g. a results.json of schema 1)."""
    bounds = interval_text(interval, percent=percent, signed=signed)
    return f"{text} ({bounds})" if bounds else text


def p_text(p_value: float | None) -> str:
    """A p-value in 4 decimals (``0.0312``), ``< 0.0001`` below that, ``n/a`` when there is none."""
    if p_value is None:
        return "n/a"
    return "< 0.0001" if p_value < 0.0001 else f"{p_value:.4f}"


def p_equals(p_value: float | None) -> str:
    """``p = 0.0312``, ``p < 0.0001`` (not ``p = < 0.0001``) or ``p n/a`` (see :func:`p_text`)."""
    text = p_text(p_value)
    return f"p {text}" if text.startswith("<") or text == "n/a" else f"p = {text}"


def level_text(level: float) -> str:
    """A confidence level as a percentage without needless decimals: 0.95 → ``95%``, 0.975 → ``97.5%``."""
    return f"{100 * level:.10g}%"


def is_tested(comparison: Comparison) -> bool:
    """Whether ``comparison`` carries the statistical tests and verdict (docs/statistics.md#uncertainty-and-regressions).

    A comparison read from a results.json of schema 1 (an older evaltasks, e.g. the Action reading an old run)
    has no tests, no paired cases and the default verdict, which must not be shown as a finding.
    """
    return (comparison.pass_rate_test is not None or comparison.paired_cases > 0
            or comparison.verdict != "no significant change"
            or any(m.pass_rate_test is not None or m.score_test is not None for m in comparison.metrics))


VERDICT_ICONS = {"regressed": "🔻", "improved": "🟢", "no significant change": "⚪", "inconclusive": "❔"}
IDS_LISTED = 10
"""Case ids listed for new, removed and flaky cases in summary.md (all of them are in results.json)."""


def _tests(comparison: Comparison) -> list[ChangeTest]:
    """The comparison's tests: the overall pass-rate test first, then each metric's pass-rate and score tests."""
    tests = [comparison.pass_rate_test] + [t for m in comparison.metrics for t in (m.pass_rate_test, m.score_test)]
    return [t for t in tests if t is not None]


def verdict_headline(comparison: Comparison) -> str:
    """The overall verdict as a sentence (no final period): ``Regressed since the baseline``, ``Improved since the
    baseline``, ``No significant change since the baseline``, or ``Inconclusive: N paired cases can detect
    pass-rate changes of X points or more; the gate's min_effect is Y`` (the overall pass-rate test's minimum
    detectable effect when it is the inconclusive one, else the first inconclusive metric test's); ``… too few for
    any change to be significant`` when that effect is 1.0 or more (no change in [0, 1] could be detected), ``no
    case is in both runs`` when nothing was paired."""
    verdict = comparison.verdict
    if verdict != "inconclusive":
        return {"regressed": "Regressed since the baseline", "improved": "Improved since the baseline"}.get(
            verdict, "No significant change since the baseline")
    effect = comparison.min_effect
    test = next((t for t in _tests(comparison) if t.verdict == "inconclusive"), None)
    if test is None or test.min_detectable_effect is None or test.min_detectable_effect >= 1.0:
        n = comparison.paired_cases if test is None else test.paired_cases
        if n == 0:
            return "Inconclusive: no case is in both runs, so nothing was compared"
        return f"Inconclusive: {n} paired cases are too few for any change to be significant"
    if test.statistic == "pass_rate":
        return (f"Inconclusive: {test.paired_cases} paired cases can detect pass-rate changes of "
                f"{100 * test.min_detectable_effect:.1f} points or more; the gate's min_effect is {effect:g} "
                f"({100 * effect:.1f} points)")
    return (f"Inconclusive: {test.paired_cases} paired cases can detect mean-score changes of "
            f"{test.min_detectable_effect:.4f} or more; the gate's min_effect is {effect:g}")


def change_test_text(test: ChangeTest, escape: Callable[[str], str] = str) -> str:
    """One test in words: ``pass rate on 800 paired cases: 81.00% → 74.00%, Δ -7.00 pt (95% CI -10.1 to -3.9),
    p = 0.0003 (exact McNemar; 60 worse, 4 better)`` (a mean score: 4 decimals, no worse/better counts).
    ``escape`` is applied to the test's name (read from a results.json)."""
    percent = test.statistic == "pass_rate"
    value = percent_text if percent else _fmt
    ci = f" ({level_text(test.interval.level)} CI {interval_text(test.interval, percent=percent, signed=True)})" \
        if test.interval is not None else ""
    counts = f"; {test.worse} worse, {test.better} better" if percent else ""
    return (f"{'pass rate' if percent else 'mean score'} on {test.paired_cases} paired cases: "
            f"{value(test.baseline)} → {value(test.current)}, Δ {_signed(test.delta, percent)}{ci}, "
            f"{p_equals(test.p_value)} ({escape(test.test)}{counts})")


def _ids(ids: list[str]) -> str:
    listed = ", ".join(markdown_inline(i, 40) for i in ids[:IDS_LISTED])
    more = f", … {len(ids) - IDS_LISTED} more" if len(ids) > IDS_LISTED else ""
    return f"{len(ids)} ({listed}{more})"


def _statistics_note(summary: EvaluationSummary) -> str | None:
    """How the intervals under the numbers were computed, from ``summary.statistics`` (None without it)."""
    info = summary.statistics
    if info is None:
        return None
    rates = [summary.pass_rate_interval] + [m.pass_rate_interval for m in summary.metrics.values()]
    means = [m.mean_score_interval for m in summary.metrics.values()]
    methods = [", ".join(dict.fromkeys(i.method for i in group if i is not None)) for group in (rates, means)]
    methods = [m[:1].upper() + m[1:] if m and m.startswith("wilson") else m for m in methods]  # a name: Wilson
    parts = [f"pass rates by {methods[0]}" if methods[0] else "", f"mean scores by {methods[1]}" if methods[1] else ""]
    cluster = (f"; grouped by the {markdown_inline(info.cluster, 60)} column ({info.clusters} groups)"
               if info.cluster else "")
    how = " and ".join(p for p in parts if p)
    return (f"Intervals (under the numbers): {level_text(info.level)} confidence{': ' + how if how else ''} "
            f"({info.bootstrap_resamples} bootstrap resamples, seed {info.seed}){cluster}.")


@dataclass
class Section:
    """A block of markdown: fixed ``head`` lines, ``rows`` that may be cut from the end, ``tail`` lines.

    ``priority``: lower keeps its rows longer when the text must shrink. ``min_rows`` rows are kept always.
    """

    head: list[str]
    rows: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    priority: int = 0
    min_rows: int = 0


def fit_sections(
    sections: list[Section], max_size: int | None, *, size: Callable[[str], int] = len, note: str = ""
) -> str:
    """Join ``sections`` into one markdown text of at most ``max_size`` (by ``size``; None: no limit).

    When too large, rows are removed from the end of the sections with the highest ``priority`` number first
    (a section left with no rows loses its head and tail too), and ``note`` plus the number of rows left out
    is appended. When even the fixed lines and ``min_rows`` do not fit (e.g. a suite of hundreds of metrics in a
    65,536-character comment), the text is cut harder: the first section's lines up to its second non-blank line
    (the title and the verdict line) and a note that the report was too large to show, with ``note``; that cut
    short by characters if it still does not fit. Never raises for a ``max_size`` of 1 or more.
    """
    def render(keep: list[int], omitted: int) -> str:
        lines: list[str] = []
        for section, n in zip(sections, keep, strict=False):
            if section.rows and n == 0 and section.min_rows == 0:
                continue
            lines += [*section.head, *section.rows[:n], *section.tail]
        if omitted:
            lines += ["", f"> ⚠️ Truncated: {omitted} row(s) left out to stay under the size limit. {note}".rstrip(), ""]
        return "\n".join(lines)

    keep = [len(s.rows) for s in sections]
    text = render(keep, 0)
    if max_size is None or size(text) <= max_size:
        return text
    total = sum(keep)
    order = sorted(range(len(sections)), key=lambda i: -sections[i].priority)
    for i in order:  # binary-search how many rows of section i fit, lower-priority sections emptied first
        lo, hi = sections[i].min_rows, keep[i]
        keep[i] = lo
        if size(render(keep, total - sum(keep))) > max_size:
            continue
        while lo < hi:
            mid = (lo + hi + 1) // 2
            keep[i] = mid
            if size(render(keep, total - sum(keep))) <= max_size:
                lo = mid
            else:
                hi = mid - 1
        keep[i] = lo
        return render(keep, total - sum(keep))
    text = render(keep, total - sum(keep))
    if size(text) <= max_size:
        return text
    lines, shown = [], 0
    for line in sections[0].head if sections else []:
        if shown == 2:
            break
        lines.append(line)
        shown += bool(line.strip())
    lines += ["", f"> ⚠️ Truncated: the report is too large to show here. {note}".rstrip(), ""]
    text = "\n".join(lines)
    lo, hi = 0, len(text)  # the longest prefix that fits (size grows with the prefix)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(text[:mid]) <= max_size:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


@dataclass
class WorstCase:
    """One failed or errored metric result shown under "Worst cases" (texts already cut short).

    ``label``: the case's readable name (:func:`~evaltasks.reports.verdict.case_label`, plain text);
    ``expected``: its expected answer or reference (None when it has none)."""

    score: float | None
    case_id: str
    metric: str
    reason: str
    output: str
    label: str = ""
    expected: str | None = None


@dataclass
class Highlights:
    """What the summary shows about individual cases, collected in one pass (so a run can stream its cases):
    the :data:`WORST_CASES` lowest-scoring failed/errored metric results and a 10-bin score histogram per metric.
    """

    worst: list[WorstCase] = field(default_factory=list)
    histograms: dict[str, list[int]] = field(default_factory=dict)
    graded: set[str] = field(default_factory=set)  # metrics with a score other than 0 and 1 (not pass/fail only)
    _heap: list[tuple[float, int, WorstCase]] = field(default_factory=list, repr=False)
    _seen: int = 0

    def add(self, cases: Iterable[TestCaseResult]) -> None:
        """Fold ``cases`` in (any number of calls, in case order)."""
        import heapq

        for case in cases:
            for metric in case.metrics:
                if metric.score is not None:
                    bins = self.histograms.setdefault(metric.name, [0] * HISTOGRAM_BINS)
                    bins[min(int(metric.score * HISTOGRAM_BINS), HISTOGRAM_BINS - 1)] += 1
                    if metric.score != 0.0 and metric.score != 1.0:
                        self.graded.add(metric.name)
                if metric.status in ("failed", "errored"):
                    key = metric.score if metric.score is not None else -1.0
                    self._seen += 1
                    if len(self._heap) >= WORST_CASES and (-key, -self._seen) < self._heap[0][:2]:
                        continue  # not among the worst: skip building its row
                    item = (-key, -self._seen, WorstCase(
                        metric.score, case.id[:80], metric.name, metric.reason[:400], case.actual_output[:400],
                        label=case_label(case.id, case.input, case.actual_output),
                        expected=None if case.expected_output is None else case.expected_output[:400]))
                    if len(self._heap) < WORST_CASES:
                        heapq.heappush(self._heap, item)
                    elif item > self._heap[0]:
                        heapq.heapreplace(self._heap, item)  # keeps the lowest scores, earliest case first on ties
        self.worst = [w for _, _, w in sorted(self._heap, reverse=True)]

    @classmethod
    def of(cls, cases: Iterable[TestCaseResult]) -> Highlights:
        """The highlights of ``cases``."""
        highlights = cls()
        highlights.add(cases)
        return highlights


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
CHANGE_ICONS = {"newly failing": "🔻", "worse": "🔻", "new": "🆕", "removed": "➖", "better": "🟢",
                "newly passing": "🟢"}


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
    return Section(head=fold[:at], rows=rows, tail=fold[at + 1:], priority=priority, min_rows=min_rows)


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
    label = markdown_inline(case_label(change.case_id, change.input, change.current_output or change.baseline_output))
    if change.kind == "new":
        what = f"lowest score {_score_status(change.current_score, change.current_status)}"
    elif change.kind == "removed":
        what = f"lowest score in the baseline {_score_status(change.baseline_score, change.baseline_status)}"
    else:
        what = "; ".join(
            f"{markdown_inline(c.metric)} {_score_status(c.baseline_score, c.baseline_status)} → "
            f"{_score_status(c.current_score, c.current_status)}"
            f"{f', Δ {_signed(c.delta)}' if c.delta is not None else ''}" for c in changes[:CHANGE_METRICS_LISTED])
        if len(changes) > CHANGE_METRICS_LISTED:  # a suite of hundreds of metrics: the line stays short
            what += f"; … {len(changes) - CHANGE_METRICS_LISTED} more metrics in results.json"
    lines = [f"- {CHANGE_ICONS[kind]} **{kind}: {label}** · {what}"]
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
    """"Cases that changed": one item per case (its changed metrics together), in :func:`ordered_changes`' order;
    the first :data:`CHANGES_OPEN` open (cut last for size, the first :data:`CHANGES_KEPT` never), the next up to :data:`CHANGES_LISTED` inside
    ``<details>`` (cut first when the text must shrink); a sentence when no case changed. ``rest_apart``: those
    next ones under a ``### N more changed cases`` heading instead, as the last section returned (Prefect's
    flavour places it under "## More"; :func:`summary_sections`)."""
    ordered = ordered_changes(comparison)
    counts = comparison.counts
    newly = len(comparison.newly_failing)
    head = ["## Cases that changed", "",
            f"Since {markdown_inline(comparison.baseline, 120)}: {newly} newly failing, "
            f"{counts.get('worse', 0)} worse, {counts.get('better', 0)} better, {counts.get('new', 0)} new, "
            f"{counts.get('removed', 0)} removed (case × metric changes beyond the tolerance "
            f"{comparison.tolerance:g}; new and removed cases once each).", ""]
    if not ordered:
        return [Section(head=[*head[:2], f"No case changed beyond the tolerance ({comparison.tolerance:g}) since "
                                         f"{markdown_inline(comparison.baseline, 120)}.", ""])]
    cases: dict[tuple[str, str], list[CaseChange]] = {}
    for kind, change in ordered:  # one item per case and kind, its metrics together
        cases.setdefault((kind, change.case_id), []).append(change)
    rows = [change_lines(kind, changes) for (kind, _), changes in list(cases.items())[:CHANGES_LISTED]]
    sections = [Section(head=head, rows=rows[:CHANGES_OPEN], tail=[""], priority=-1,
                        min_rows=min(len(rows), CHANGES_KEPT))]
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
        sections.append(Section(head=folded[:at], rows=rest, tail=folded[at + 1:], priority=3))
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
    paired = (f"paired {_signed(test.delta, percent)}" if test.delta is not None and value is not None
              and abs(test.delta - value) > 1e-9 else "")  # the test's Δ over the paired cases only
    return _cell(f"{mark}{_signed(value, percent)}", paired,
                 interval_text(test.interval, percent=percent, signed=True),
                 p_equals(test.p_value) if test.p_value is not None else "")


SHORT_VERDICTS = {"regressed": "🔻 regressed", "improved": "🟢 improved", "no significant change": "⚪ no change",
                  "inconclusive": "❔ inconclusive"}


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
        section = Section(head=["| metric | pass rate | mean | threshold | failed | errored | skipped |",
                                "|---|---:|---:|---:|---:|---:|---:|"], tail=[""], min_rows=1)
        for name, m in summary.metrics.items():
            section.rows.append(f"| {markdown_inline(name)} | {rate_cell(m.pass_rate, m.pass_rate_interval)} | "
                                f"{mean_cell(m.mean_score, m.mean_score_interval)} | {m.threshold} | {m.failed} | "
                                f"{m.errored} | {m.skipped} |")
        return section
    tested = is_tested(comparison)
    by_name = {m.name: m for m in comparison.metrics}
    section = Section(head=["| metric | pass rate | Δ pass rate | mean | Δ mean | verdict |",
                            "|---|---:|---:|---:|---:|---|"], tail=[""], min_rows=2)
    overall = comparison.pass_rate_test
    drop = comparison.pass_rate_delta is not None and comparison.pass_rate_delta < 0
    overall_regressed = (overall is not None and overall.verdict == "regressed") or (
        overall is None and not tested and comparison.regressed and drop)
    below_gate = not report.passed and gate.fail_on != "regression" and report.rate < gate.min_pass_rate - 1e-12
    evaluated = summary.cases - summary.skipped_cases
    overall_verdict = SHORT_VERDICTS.get(overall.verdict, "") if overall is not None else (
        "🔻 regressed" if not tested and comparison.regressed else "")
    section.rows.append(
        f"| **all cases** | {'❌ ' if below_gate and evaluated else ''}"
        f"{rate_cell(summary.pass_rate if evaluated else None, summary.pass_rate_interval)} | "
        f"{_delta_cell(comparison.pass_rate_delta, overall, percent=True, regressed=overall_regressed)} | | | "
        f"{overall_verdict} |")
    for name, m in summary.metrics.items():
        c = by_name.get(name)
        rate_test, score_test = (c.pass_rate_test, c.score_test) if c is not None else (None, None)
        rate_regressed = rate_test is not None and rate_test.verdict == "regressed"
        mean_regressed = (score_test is not None and score_test.verdict == "regressed") or (
            not tested and c is not None and c.regressed)
        verdict = ("not in the baseline" if c is None or (c.verdict is None and tested) else
                   SHORT_VERDICTS.get(c.verdict or "", "🔻 regressed" if c.regressed else ""))
        section.rows.append(
            f"| {markdown_inline(name)} | {rate_cell(m.pass_rate, m.pass_rate_interval)} | "
            f"{_delta_cell(c.pass_rate_delta if c else None, rate_test, percent=True, regressed=rate_regressed)} | "
            f"{mean_cell(m.mean_score, m.mean_score_interval)} | "
            f"{_delta_cell(c.mean_delta if c else None, score_test, percent=False, regressed=mean_regressed)} | "
            f"{verdict} |")
    return section


def counts_lines(summary: EvaluationSummary) -> list[str]:
    """Per metric its threshold and counts of passed, failed, errored and skipped results (a table)."""
    return ["| metric | threshold | passed | failed | errored | skipped |", "|---|---:|---:|---:|---:|---:|",
            *(f"| {markdown_inline(name)} | {m.threshold} | {m.passed} | {m.failed} | {m.errored} | {m.skipped} |"
              for name, m in summary.metrics.items()), ""]


def worst_lines(w: WorstCase) -> str:
    """One worst case as a markdown list item: its readable name, metric and score, the metric's reason (the
    score named once: a reason that states it, e.g. ReferenceMatch's "Max cosine similarity 0.0173 …", is shown
    alone), its output and reference (``reference:``: the expected output, else the first reference: the text the
    output is judged against)."""
    label = markdown_inline(w.label or w.case_id, 60)
    score = _fmt(w.score)
    shown_score = w.score is not None and (score in w.reason or f"{w.score:.2f}" in w.reason
                                           or "score" in w.reason.lower())
    head = f"- **{label}** · {markdown_inline(w.metric)}"
    head += f": {markdown_inline(w.reason, TEXT_SHOWN)}" if shown_score else \
        f" · score {score}: {markdown_inline(w.reason, TEXT_SHOWN)}"
    lines = [head, f"  - output: {markdown_inline(w.output, TEXT_SHOWN)}"]
    if w.expected is not None:
        lines.append(f"  - reference: {markdown_inline(w.expected, TEXT_SHOWN)}")
    return "\n".join(lines)


def mermaid_chart(name: str, counts: list[int]) -> list[str]:
    """A Mermaid ``xychart-beta`` bar chart of per-bin ``counts`` over [0, 1] (GitHub renders it); the metric's
    ``name`` in the title keeps only letters, digits, spaces and ``_.-`` (a suite's text inside a chart)."""
    bins = len(counts)
    title = regex.sub(r"[^\p{L}\p{N} _.\-]", "", name)[:60] or "scores"
    labels = ", ".join(f'"{i / bins:.1f}–{(i + 1) / bins:.1f}"' for i in range(bins))
    return ["```mermaid", "xychart-beta", f'    title "{title}"', f"    x-axis [{labels}]",
            f'    y-axis "results" 0 --> {max(max(counts), 1)}', f"    bar [{', '.join(map(str, counts))}]", "```", ""]


def summary_sections(
    report: RunReport,
    cases: list[TestCaseResult] | Highlights,
    *,
    charts: Literal["mermaid", "text"] = "mermaid",
    baseline_note: str | None = None,
) -> list[Section]:
    """The summary as :class:`Section` blocks (see :func:`render_summary`)."""
    suite_name, summary, comparison, passed = report.suite, report.summary, report.comparison, report.passed
    fail_on = report.gate.fail_on
    line = verdict_line(report)
    status, _, rest = line.partition(":")
    evaluated = summary.cases - summary.skipped_cases
    rate = report.rate
    interval = summary.pass_rate_interval if rate == summary.pass_rate else None  # allow_errors: another rate
    ci = f" ({level_text(interval.level)} CI {interval_text(interval, percent=True)}%)" if interval else ""
    head = [f"# evaltasks: {markdown_inline(suite_name)}", "",
            f"{'✅' if passed else '❌'} **{status}**:{rest}", ""]
    if comparison is None and (baseline_note or fail_on in ("regression", "either")):
        note = baseline_note or "No baseline to compare with: the regression check had nothing to compare."
        head += [f"> ℹ️ {note}", ""]
    rate_ci = f"; pass rate {ci[2:-1]}" if evaluated and ci else ""
    head += [f"Cases: {summary.passed_cases} passed, {summary.failed_cases} failed, {summary.errored_cases} errored, "
             f"{summary.skipped_cases} skipped{rate_ci}.", ""]
    for warning in report.warnings:
        head += [f"> ⚠️ {markdown_inline(warning, 400)}", ""]
    sections = [Section(head=head)]
    prefect = charts == "text"  # Prefect's flavour: its markdown view shows <details> open, so no <details>
    more_changes: list[Section] = []
    if comparison is not None:
        changed = changes_sections(comparison, rest_apart=prefect)
        if prefect and len(changed) > 1:
            changed, more_changes = changed[:1], changed[1:]
        sections += changed

    sections.append(Section(head=["## Metrics", ""]))
    sections.append(metric_table(report))
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
        sections.append(part(f"Worst cases ({len(highlights.worst)} lowest-scoring failed or errored results)",
                               [worst_lines(w) for w in highlights.worst], priority=4))

    dist: list[str] = []
    for name in summary.metrics:
        counts = highlights.histograms.get(name)
        if counts and sum(counts) and name not in highlights.graded:  # scores 0 and 1 only: counts, no chart
            dist.append(f"**{markdown_inline(name)}** ({sum(counts)} scores, each 0 or 1): {counts[-1]} × 1, "
                        f"{counts[0]} × 0\n")
        elif counts and sum(counts):
            chart = mermaid_chart(name, counts) if charts == "mermaid" else \
                ["```text", *histogram_lines(counts), "```", ""]
            dist.append("\n".join([f"**{markdown_inline(name)}** ({sum(counts)} scores)", "", *chart]))
    if dist:
        sections.append(part("Score distributions", dist, priority=5))

    notes: list[str] = []
    if comparison is not None:
        notes += counts_lines(summary)
    if comparison is not None and is_tested(comparison):
        notes += [f"{VERDICT_ICONS.get(comparison.verdict, '')} **{verdict_headline(comparison)}.** "
                  f"(alpha {comparison.alpha:g}, min effect {comparison.min_effect:g})", ""]
        if comparison.pass_rate_test is not None:
            text = change_test_text(comparison.pass_rate_test, lambda t: markdown_inline(t, 60))
            notes += [f"Overall {text}.", ""]
        notes += [f"Paired by case id. Regressed or improved: p < {comparison.alpha:g} and a change larger than "
                  f"{comparison.min_effect:g}; inconclusive: too few paired cases to detect a change that small. "
                  "Each metric is tested on its own (no multiple-testing correction).", ""]
    if comparison is not None:
        for label, ids in (("New since the baseline (left out of the paired tests)", comparison.new_cases),
                           ("Removed since the baseline", comparison.removed_cases),
                           ("Flaky (judge samples on both sides of the threshold)", comparison.flaky_cases)):
            if ids:
                notes += [f"{label}: {_ids(ids)}.", ""]
    statistics = _statistics_note(summary)
    if statistics:
        notes += [statistics, ""]
    e = summary.embeddings
    notes += [f"Embeddings: {e.references_computed} references computed, {e.references_reused} reused from the "
              f"index; {e.outputs_computed} outputs computed, {e.outputs_reused} reused.", ""]
    title = "Statistics, counts and embeddings" if comparison is not None else "Statistics and embeddings"
    sections.append(part(title, ["\n".join(notes)], priority=2))

    if summary.judges and not stopped:
        judge = judge_section(summary)
        fold = part("LLM judges: requests, tokens and cost", judge.rows, priority=1, min_rows=judge.min_rows)
        fold.head += judge.head[2:]
        fold.tail[:0] = judge.tail
        sections.append(fold)
    return sections


UNSTABLE_LISTED = 20
"""Unstable case ids listed per judge metric in summary.md (all of them are in results.json)."""


def judge_section(summary: EvaluationSummary) -> Section:
    """The "LLM judges" table: per judge metric its model, requests sent (answers reused from the store under
    them), tokens in and out, US dollars and unstable cases, then the run's total; the unstable cases' ids (the first
    :data:`UNSTABLE_LISTED` per metric) under the table, so the table stays narrow."""
    rows, listed = [], []
    for name, j in summary.judges.items():
        rows.append(f"| {markdown_inline(name)} | {markdown_inline(j.model, 60)} | {j.requests}<br>{j.reused} reused | "
                    f"{j.prompt_tokens} in<br>{j.completion_tokens} out | ${j.cost:.4f} | {j.unstable} |")
        if j.unstable_cases:
            ids = ", ".join(markdown_inline(c, 40) for c in j.unstable_cases[:UNSTABLE_LISTED])
            more = (f", … {len(j.unstable_cases) - UNSTABLE_LISTED} more"
                    if len(j.unstable_cases) > UNSTABLE_LISTED else "")
            listed.append(f"Unstable in {markdown_inline(name)}: {ids}{more}.")
    t = summary.judge_total
    if t is not None and len(summary.judges) > 1:
        rows.append(f"| **total** | | {t.requests}<br>{t.reused} reused | {t.prompt_tokens} in<br>"
                    f"{t.completion_tokens} out | ${t.cost:.4f} | {t.unstable} |")
    return Section(
        head=["## LLM judges", "", "| metric | judge model | requests | tokens | cost | unstable |",
              "|---|---|---:|---:|---:|---:|"],
        rows=rows, tail=["", "Unstable: the case's samples fell on both sides of the threshold.",
                         *(["", *listed] if listed else []), ""], priority=1, min_rows=1,
    )


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
    """
    sections = summary_sections(report, cases, charts=charts, baseline_note=baseline_note)
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
) -> str:
    """:func:`render_summary` of a report given by its parts: the GitHub Action's report step calls this name
    with what it reads from results.json (docs/action.md#github-action), including an older evaltasks' files. The
    parts are :class:`~evaltasks.engine.lifecycle.RunReport`'s (``gate_pass_rate`` is ``gate.pass_rate``); the
    other arguments are :func:`render_summary`'s."""
    report = RunReport.of(summary, passed=passed, min_pass_rate=min_pass_rate, suite=suite_name,
                          comparison=comparison, warnings=warnings or [], pass_rate=gate_pass_rate, fail_on=fail_on)
    return render_summary(report, cases, max_size=max_size, size=size, truncation_note=truncation_note,
                          charts=charts, baseline_note=baseline_note)


def score_histogram(scores: list[float], bins: int = HISTOGRAM_BINS, width: int = 30) -> list[str]:
    """A text bar chart of ``scores`` in [0, 1]: one line per bin ``[i/bins, (i+1)/bins)`` (1.0 in the last)."""
    counts = [0] * bins
    for score in scores:
        counts[min(int(score * bins), bins - 1)] += 1
    return histogram_lines(counts, width)


def histogram_lines(counts: list[int], width: int = 30) -> list[str]:
    """The bar chart of per-bin ``counts`` over [0, 1] (see :func:`score_histogram`)."""
    bins = len(counts)
    top = max(counts) or 1
    # "#", not a block character: Prefect's UI renders code in a font without U+2588, whose fallback glyph is
    # narrower, so block bars and the counts after them zig-zag there
    return [
        f"{i / bins:.1f}–{(i + 1) / bins:.1f} {'#' * round(width * c / top):<{width}} {c}"
        for i, c in enumerate(counts)
    ]


def write_summary_markdown(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with atomic_writer(path) as out:
        out.write(text)
