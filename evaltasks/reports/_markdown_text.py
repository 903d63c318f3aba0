"""The building blocks of summary.md (:mod:`evaltasks.reports.markdown`): number, interval and p-value text,
the comparison's verdict in words, :class:`Section` blocks and :func:`fit_sections` (cutting them to a size),
and the :class:`Highlights` a run collects from its cases (worst cases, score histograms).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from evaltasks.engine.compare import ChangeTest, Comparison
from evaltasks.reports._escape import markdown_inline
from evaltasks.reports.verdict import case_label, conversation_label
from evaltasks.results import EvaluationSummary, Interval, TestCaseResult, Turn, percent_text

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
    return (
        comparison.pass_rate_test is not None
        or comparison.paired_cases > 0
        or comparison.verdict != "no significant change"
        or any(m.pass_rate_test is not None or m.score_test is not None for m in comparison.metrics)
    )


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
            verdict, "No significant change since the baseline"
        )
    effect = comparison.min_effect
    test = next((t for t in _tests(comparison) if t.verdict == "inconclusive"), None)
    if test is None or test.min_detectable_effect is None or test.min_detectable_effect >= 1.0:
        n = comparison.paired_cases if test is None else test.paired_cases
        if n == 0:
            return "Inconclusive: no case is in both runs, so nothing was compared"
        return f"Inconclusive: {n} paired cases are too few for any change to be significant"
    if test.statistic == "pass_rate":
        return (
            f"Inconclusive: {test.paired_cases} paired cases can detect pass-rate changes of "
            f"{100 * test.min_detectable_effect:.1f} points or more; the gate's min_effect is {effect:g} "
            f"({100 * effect:.1f} points)"
        )
    return (
        f"Inconclusive: {test.paired_cases} paired cases can detect mean-score changes of "
        f"{test.min_detectable_effect:.4f} or more; the gate's min_effect is {effect:g}"
    )


def change_test_text(test: ChangeTest, escape: Callable[[str], str] = str) -> str:
    """One test in words: ``pass rate on 800 paired cases: 81.00% → 74.00%, Δ -7.00 pt (95% CI -10.1 to -3.9),
    p = 0.0003 (exact McNemar; 60 worse, 4 better)`` (a mean score: 4 decimals, no worse/better counts).
    ``escape`` is applied to the test's name (read from a results.json)."""
    percent = test.statistic == "pass_rate"
    value = percent_text if percent else _fmt
    ci = (
        f" ({level_text(test.interval.level)} CI {interval_text(test.interval, percent=percent, signed=True)})"
        if test.interval is not None
        else ""
    )
    counts = f"; {test.worse} worse, {test.better} better" if percent else ""
    return (
        f"{'pass rate' if percent else 'mean score'} on {test.paired_cases} paired cases: "
        f"{value(test.baseline)} → {value(test.current)}, Δ {_signed(test.delta, percent)}{ci}, "
        f"{p_equals(test.p_value)} ({escape(test.test)}{counts})"
    )


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
    cluster = (
        f"; grouped by the {markdown_inline(info.cluster, 60)} column ({info.clusters} groups)" if info.cluster else ""
    )
    how = " and ".join(p for p in parts if p)
    return (
        f"Intervals (under the numbers): {level_text(info.level)} confidence{': ' + how if how else ''} "
        f"({info.bootstrap_resamples} bootstrap resamples, seed {info.seed}){cluster}."
    )


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
    ``expected``: its expected answer or reference (None when it has none); ``target``: the target that produced
    the output (None: the output came with the dataset); ``turns``: a conversation's turns (the last
    :data:`TURNS_SHOWN`, texts cut) and ``turns_left_out`` how many earlier ones are not kept; ``role``: its
    ``chatbot_role`` (docs/conversations.md#reports)."""

    score: float | None
    case_id: str
    metric: str
    reason: str
    output: str
    label: str = ""
    expected: str | None = None
    target: str | None = None
    turns: list[Turn] | None = None
    turns_left_out: int = 0
    role: str | None = None


TURNS_SHOWN = 10
"""A conversation's turns shown per worst case (its last ones; the count of the others is said)."""


def _shown_turns(turns: list[Turn]) -> list[Turn]:
    """The last :data:`TURNS_SHOWN` of ``turns``, each text cut to 400 characters."""

    def cut(text: str | None) -> str | None:
        return None if text is None else text[:400]

    return [
        Turn(input=cut(t.input), actual_output=t.actual_output[:400], expected_output=cut(t.expected_output))
        for t in turns[-TURNS_SHOWN:]
    ]


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
                    item = (
                        -key,
                        -self._seen,
                        WorstCase(
                            metric.score,
                            case.id[:80],
                            metric.name,
                            metric.reason[:400],
                            case.actual_output[:400],
                            label=conversation_label(case.id, case.turns)
                            if case.turns
                            else case_label(case.id, case.input, case.actual_output),
                            expected=None if case.expected_output is None else case.expected_output[:400],
                            target=None if case.generation is None else case.generation.target,
                            turns=_shown_turns(case.turns) if case.turns else None,
                            turns_left_out=max(len(case.turns) - TURNS_SHOWN, 0) if case.turns else 0,
                            role=None if case.chatbot_role is None else case.chatbot_role[:400],
                        ),
                    )
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


def histogram_lines(counts: list[int], width: int = 30) -> list[str]:
    """The bar chart of per-bin ``counts`` over [0, 1] (see :func:`score_histogram`)."""
    bins = len(counts)
    top = max(counts) or 1
    # "#", not a block character: Prefect's UI renders code in a font without U+2588, whose fallback glyph is
    # narrower, so block bars and the counts after them zig-zag there
    return [
        f"{i / bins:.1f}–{(i + 1) / bins:.1f} {'#' * round(width * c / top):<{width}} {c}" for i, c in enumerate(counts)
    ]
