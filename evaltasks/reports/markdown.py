"""summary.md: a human summary of a run, also the job summary, PR comment and Prefect artifact.

Content, most important first: the gate banner (pass rate with its 95 % interval), the verdict against a
baseline, warnings (e.g. skipped metrics), the per-metric table (means and pass rates with their intervals),
the per-metric verdicts against the baseline (Δ with interval, p-value), regressions, the worst cases, the
changes since the baseline, and a score-distribution chart per metric. With a size limit (a GitHub job summary
holds 1 MiB, a comment 65,536 characters) rows are dropped from the end of the least important tables first,
and a note says how many were left out and where the full report is.

Every untrusted string (inputs, outputs, reasons, ids, metric names) passes through
:func:`~evaltasks.reports._escape.markdown_inline`, so nothing a model wrote can inject markup.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from evaltasks._atomic import atomic_writer
from evaltasks.compare import ChangeTest, Comparison, regression_sentence
from evaltasks.reports._escape import markdown_inline
from evaltasks.results import EvaluationSummary, Interval, TestCaseResult, budget_message

WORST_CASES = 10
HISTOGRAM_BINS = 10


def _fmt(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"


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
    """Whether ``comparison`` carries the statistical tests and verdict (README, "Uncertainty and regressions").

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


def regression_lines(comparison: Comparison) -> list[str]:
    """The regressions as markdown, one per regressed test: evaltasks' own words as they are (``pass rate 81.00%
    → 74.00% (-7.00 points, p = 0.0003)``, nothing in them means anything to markdown mid-line) after the metric's
    name escaped (:func:`markdown_inline`: a suite's text). A comparison without tests (a results.json of
    schema 1) has only its sentences: escaped whole, as they may hold any metric name anywhere."""
    if not is_tested(comparison):
        return [markdown_inline(r, 300) for r in comparison.regressions]
    tests = [("", comparison.pass_rate_test)]
    tests += [(f"{markdown_inline(m.name)}: ", t) for m in comparison.metrics for t in (m.pass_rate_test, m.score_test)]
    return [regression_sentence(subject, t) for subject, t in tests
            if t is not None and t.verdict == "regressed" and t.baseline is not None and t.current is not None
            and t.p_value is not None]


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
    value = _pct if percent else _fmt
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


def _test_cells(test: ChangeTest | None) -> str:
    """Two table cells for a test: Δ with its interval, and the p-value."""
    if test is None:
        return " n/a | |"
    percent = test.statistic == "pass_rate"
    return f" {with_interval(_signed(test.delta, percent), test.interval, percent=percent, signed=True)} | " \
           f"{p_text(test.p_value)} |"


def comparison_section(comparison: Comparison) -> Section:
    """The "Compared with the baseline" table of a tested comparison: per metric (and all cases) the verdict,
    Δ pass rate and Δ mean score with their intervals (level 1 − alpha) and p-values."""
    level = level_text(1 - comparison.alpha)

    def verdict_cell(verdict: str | None) -> str:
        return "not in both runs" if verdict is None else f"{VERDICT_ICONS.get(verdict, '')} {verdict}".strip()

    overall = comparison.pass_rate_test
    rows = [f"| **all cases** | {verdict_cell(overall.verdict if overall else None)} |{_test_cells(overall)} n/a | |"]
    rows += [f"| {markdown_inline(m.name)} | {verdict_cell(m.verdict)} |{_test_cells(m.pass_rate_test)}"
             f"{_test_cells(m.score_test)}" for m in comparison.metrics]
    return Section(
        head=["## Compared with the baseline", "",
              f"| metric | verdict | Δ pass rate ({level} CI) | p | Δ mean score ({level} CI) | p |",
              "|---|---|---:|---:|---:|---:|"],
        rows=rows,
        tail=["", f"Paired by case id. Regressed or improved: p < {comparison.alpha:g} and a change larger than "
                  f"{comparison.min_effect:g}; inconclusive: too few paired cases to detect a change that small. "
                  "Each metric is tested on its own (no multiple-testing correction).", ""],
        priority=0, min_rows=len(rows),
    )


def _statistics_note(summary: EvaluationSummary) -> str | None:
    """How the intervals in parentheses were computed, from ``summary.statistics`` (None without it)."""
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
    return (f"Intervals in parentheses: {level_text(info.level)} confidence{': ' + how if how else ''} "
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
    is appended. Raises ValueError when even the fixed lines do not fit.
    """
    def render(keep: list[int], omitted: int) -> str:
        lines: list[str] = []
        for section, n in zip(sections, keep):
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
    if size(text) > max_size:
        raise ValueError(f"the summary's fixed part ({size(text)}) exceeds the limit ({max_size})")
    return text


@dataclass
class WorstCase:
    """One failed or errored metric result shown in the "Worst cases" table (texts already cut short)."""

    score: float | None
    case_id: str
    metric: str
    reason: str
    output: str


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
                    item = (-key, -self._seen, WorstCase(metric.score, case.id[:80], metric.name, metric.reason[:400],
                                                         case.actual_output[:400]))
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


def summary_sections(
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
) -> list[Section]:
    """The summary as :class:`Section` blocks (see :func:`render_summary_markdown`)."""
    banner = "✅ **PASSED**" if passed else "❌ **FAILED**"
    stopped = budget_message(summary)
    if stopped and not passed:
        banner += f" ({stopped})"
    evaluated = summary.cases - summary.skipped_cases
    rate = summary.pass_rate if gate_pass_rate is None else gate_pass_rate
    interval = summary.pass_rate_interval if rate == summary.pass_rate else None  # allow_errors: another rate
    ci = f"; {level_text(interval.level)} CI {interval_text(interval, percent=True)}%" if interval else ""
    unchecked = " (no baseline to compare with)" if comparison is None else ""
    gate = {"regression": f"required: no significant regression{unchecked}",
            "either": f"gate {min_pass_rate:.2%} and no significant regression{unchecked}"}.get(
                fail_on or "", f"gate {min_pass_rate:.2%}")
    tested = comparison is not None and is_tested(comparison)
    head = [
        f"# evaltasks: {markdown_inline(suite_name)}",
        "",
        f"{banner}: pass rate {rate:.2%} ({summary.passed_cases}/{evaluated} evaluated cases{ci}), "
        f"{gate}." if evaluated else f"{banner}: no case was evaluated (all skipped).",
        "",
        f"Cases: {summary.passed_cases} passed, {summary.failed_cases} failed, {summary.errored_cases} errored, "
        f"{summary.skipped_cases} skipped.",
        "",
    ]
    if comparison is not None and tested:
        head += [f"{VERDICT_ICONS.get(comparison.verdict, '')} **{verdict_headline(comparison)}.** "
                 f"(alpha {comparison.alpha:g}, min effect {comparison.min_effect:g})", ""]
        if comparison.pass_rate_test is not None:
            text = change_test_text(comparison.pass_rate_test, lambda t: markdown_inline(t, 60))
            head += [f"Overall {text}.", ""]
    for warning in warnings or []:
        head += [f"> ⚠️ {markdown_inline(warning, 400)}", ""]
    if comparison is not None:
        head += [
            f"Compared with {markdown_inline(comparison.baseline, 120)}: pass rate "
            f"{_pct(comparison.baseline_pass_rate)} → {_pct(comparison.current_pass_rate)} "
            f"({_signed(comparison.pass_rate_delta, percent=True)}); "
            f"{comparison.counts.get('worse', 0)} worse, {comparison.counts.get('better', 0)} better, "
            f"{comparison.counts.get('new', 0)} new, {comparison.counts.get('removed', 0)} removed "
            f"(tolerance {comparison.tolerance:g}).",
            "",
        ]
        for label, ids in (("New since the baseline (left out of the paired tests)", comparison.new_cases),
                           ("Removed since the baseline", comparison.removed_cases),
                           ("Flaky (judge samples on both sides of the threshold)", comparison.flaky_cases)):
            if ids:
                head += [f"{label}: {_ids(ids)}.", ""]
    sections = [Section(head=head)]

    by_name = {m.name: m for m in comparison.metrics} if comparison else {}
    deltas = comparison is not None and not tested  # a tested comparison has its own table
    delta_head = " Δ mean | Δ pass rate |" if deltas else ""
    note = _statistics_note(summary)
    table = Section(
        head=[f"| metric | mean score | pass rate | threshold | passed | failed | errored | skipped |{delta_head}",
              "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if deltas else "")],
        tail=["", *([note, ""] if note else [])], priority=0, min_rows=1,
    )
    for name, m in summary.metrics.items():
        mean = with_interval(_fmt(m.mean_score), m.mean_score_interval if m.mean_score is not None else None)
        rate = with_interval(_pct(m.pass_rate), m.pass_rate_interval if m.pass_rate is not None else None,
                             percent=True)
        row = (f"| {markdown_inline(name)} | {mean} | {rate} | {m.threshold} | {m.passed} | "
               f"{m.failed} | {m.errored} | {m.skipped} |")
        if comparison and deltas:
            c = by_name.get(name)
            flag = " 🔻" if c is not None and c.regressed else ""
            row += f" {_signed(c.mean_delta if c else None)}{flag} | {_signed(c.pass_rate_delta if c else None, True)} |"
        table.rows.append(row)
    sections.append(table)
    if comparison is not None and tested:
        sections.append(comparison_section(comparison))

    if summary.judges:
        sections.append(judge_section(summary))

    if comparison is not None and comparison.regressions:
        title = (f"## Regressions (significant at alpha {comparison.alpha:g}, larger than {comparison.min_effect:g})"
                 if tested else f"## Regressions beyond the tolerance ({comparison.tolerance:g})")
        sections.append(Section(
            head=[title, ""],
            rows=[f"- 🔻 {line}" for line in regression_lines(comparison)], tail=[""], priority=1,
            min_rows=1,
        ))

    highlights = cases if isinstance(cases, Highlights) else Highlights.of(cases)
    if highlights.worst:
        sections.append(Section(
            head=[f"## Worst cases (up to {WORST_CASES})", "", "| case | metric | score | reason | output |",
                  "|---|---|---:|---|---|"],
            rows=[
                f"| {markdown_inline(w.case_id, 40)} | {markdown_inline(w.metric)} | {_fmt(w.score)} | "
                f"{markdown_inline(w.reason, 160)} | {markdown_inline(w.output, 120)} |"
                for w in highlights.worst
            ],
            tail=[""], priority=2,
        ))

    if comparison is not None and comparison.changes:
        sections.append(Section(
            head=["## Changes since the baseline", "", "| change | case | metric | baseline | current | Δ |",
                  "|---|---|---|---:|---:|---:|"],
            rows=[
                f"| {c.kind} | {markdown_inline(c.case_id, 40)} | {markdown_inline(c.metric)} | "
                f"{_fmt(c.baseline_score)} ({c.baseline_status or '–'}) | {_fmt(c.current_score)} "
                f"({c.current_status or '–'}) | {_signed(c.delta)} |"
                for c in comparison.changes
            ],
            tail=[""], priority=4,
        ))

    dist = Section(head=["## Score distribution", ""], priority=3)
    for name in summary.metrics:
        counts = highlights.histograms.get(name)
        if counts and sum(counts) and name not in highlights.graded:  # scores 0 and 1 only: counts, no chart
            dist.rows.append(f"**{markdown_inline(name)}** ({sum(counts)} scores, each 0 or 1): {counts[-1]} × 1, "
                             f"{counts[0]} × 0\n")
        elif counts and sum(counts):
            dist.rows.append("\n".join([f"**{markdown_inline(name)}** ({sum(counts)} scores)", "", "```text",
                                        *histogram_lines(counts), "```", ""]))
    if dist.rows:
        sections.append(dist)

    e = summary.embeddings
    sections.append(Section(head=[
        f"Embeddings: {e.references_computed} references computed, {e.references_reused} reused from the index; "
        f"{e.outputs_computed} outputs computed, {e.outputs_reused} reused.",
        "",
    ]))
    return sections


UNSTABLE_LISTED = 20
"""Unstable case ids listed per judge metric in summary.md (all of them are in results.json)."""


def judge_section(summary: EvaluationSummary) -> Section:
    """The "LLM judges" table: per judge metric its model, requests sent, answers reused from the store,
    tokens, US dollars and unstable cases (the first :data:`UNSTABLE_LISTED` ids named), then the run's total."""
    rows = []
    for name, j in summary.judges.items():
        listed = ", ".join(markdown_inline(c, 40) for c in j.unstable_cases[:UNSTABLE_LISTED])
        more = f", … {len(j.unstable_cases) - UNSTABLE_LISTED} more" if len(j.unstable_cases) > UNSTABLE_LISTED else ""
        rows.append(f"| {markdown_inline(name)} | {markdown_inline(j.model, 60)} | {j.requests} | {j.reused} | "
                    f"{j.prompt_tokens} / {j.completion_tokens} | ${j.cost:.4f} | {j.unstable}"
                    f"{' (' + listed + more + ')' if listed else ''} |")
    t = summary.judge_total
    if t is not None and len(summary.judges) > 1:
        rows.append(f"| **total** | | {t.requests} | {t.reused} | {t.prompt_tokens} / {t.completion_tokens} | "
                    f"${t.cost:.4f} | {t.unstable} |")
    return Section(
        head=["## LLM judges", "", "| metric | judge model | requests | reused | tokens in / out | cost | unstable |",
              "|---|---|---:|---:|---:|---:|---|"],
        rows=rows, tail=["", "Unstable: the case's samples fell on both sides of the threshold.", ""], priority=1,
        min_rows=1,
    )


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
) -> str:
    """The markdown summary of a run (a string; see :func:`write_summary_markdown`).

    Args:
        suite_name, summary: the run; cases: its case results, or their :class:`Highlights` (a streamed run).
        passed, min_pass_rate: the gate verdict and threshold; ``gate_pass_rate`` the rate the gate compared
            (default ``summary.pass_rate``).
        comparison: a comparison with a baseline: its verdict line near the top (when it carries the statistical
            tests; a comparison from a results.json of schema 1 gets the delta columns instead), the "Compared
            with the baseline" table (verdict, Δ with interval and p-value per metric), new, removed and flaky
            cases, regressions and the changes table.
        warnings: shown under the banner.
        fail_on: the gate's ``fail_on`` (``min_pass_rate``, ``regression``, ``either``; None: ``min_pass_rate``),
            named in the banner.
        max_size: the most ``size(text)`` may be (e.g. ``len`` for characters, UTF-8 bytes for GitHub's
            1 MiB job summary); rows are cut as :func:`fit_sections` describes. None: no limit.
        truncation_note: appended to the truncation notice (where the full report is).
    """
    sections = summary_sections(
        suite_name, summary, cases, passed=passed, min_pass_rate=min_pass_rate, comparison=comparison,
        warnings=warnings, gate_pass_rate=gate_pass_rate, fail_on=fail_on,
    )
    return fit_sections(sections, max_size, size=size, note=truncation_note)


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
