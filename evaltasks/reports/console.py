"""The summary printed at the end of a run (rich): the verdict line first
(:func:`evaltasks.reports.verdict.verdict_line`), then per metric the mean score and pass rate with their 95 % intervals (on a second line) and, against a baseline,
their Δ (regressed ones marked), then the failing or newly failing cases by readable name (:func:`notable_cases`),
then the verdict and per-metric Δ, interval and p-value of the tests
(docs/cli.md#cli and docs/statistics.md#uncertainty-and-regressions)."""

from __future__ import annotations

import heapq
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from evaltasks.engine.compare import CaseChange, ChangeTest, Comparison, MetricComparison
from evaltasks.engine.generation import GENERATION_FAILED
from evaltasks.engine.outcome import RunReport
from evaltasks.engine.side_by_side import SideBySide, SplitCase
from evaltasks.reports._run_metrics import run_metric_line
from evaltasks.reports.markdown import (
    VERDICT_ICONS,
    interval_text,
    is_tested,
    level_text,
    p_text,
    verdict_headline,
    versus_text,
)
from evaltasks.reports.verdict import case_label, conversation_label, shorten, turn_line, verdict_line
from evaltasks.results import EvaluationSummary, Turn, budget_message

CASES_SHOWN = 10
"""Cases listed under the table at most (:func:`notable_cases`); the rest are counted, with where to find them."""
METRICS_SHOWN = 3
"""Metrics named per listed case at most (the failing or worse ones, worst first); the rest are counted."""
NAME_WIDTH = 24
"""Columns of a metric name in the tables: a longer name folds at its ``_``/``-``/camel-case boundaries."""
_NAME_BREAKS = re.compile(r"(?<=[_\-.])|(?<=[a-z0-9])(?=[A-Z])")

_VERDICT_STYLES = {"regressed": "bold red", "improved": "bold green", "inconclusive": "bold yellow"}


def print_summary(
    report: RunReport | EvaluationSummary,
    *,
    console: Console | None = None,
    cases: NotableCases | None = None,
    brief: bool = False,
) -> None:
    """Print the verdict line (of a :class:`~evaltasks.engine.lifecycle.RunReport`), a per-metric table and the
    pass rate, the cases that failed or got worse (``cases``), and the gate verdict (of a report).

    ``report``: the run (its summary, the gate's verdict, the comparison), or a bare summary (no gate: the table
    only, as ``evaluate(verbose=True)`` prints). The gate's pass rate is the rate it compared, when it differs from
    ``summary.pass_rate`` (``allow_errors``); its ``fail_on`` is named in the gate line, and its ``message``
    (why the gate failed) printed after ``GATE FAILED``.
    Intervals (when the summary has them) go on a second line under each metric's numbers, so that an 80-column
    log shows every number whole. The report's ``comparison``: with its statistical tests, the verdict line and a
    table of the tests (Δ with its interval, p-value, verdict) follow; a comparison without tests (a baseline from
    an older evaltasks) prints only its pass-rate change. With a comparison (and tests in it) the table gains a
    ``Δ mean`` and a ``Δ pass`` column, a regressed one marked ``▼`` (in red). ``cases``: the failing (no
    baseline) or newly failing and regressed cases (:func:`notable_cases`), listed under the table. ``brief``
    (``--quiet``): only the verdict line and the gate line.
    """
    console = console or Console()
    gated = report if isinstance(report, RunReport) else None
    s = report.summary if isinstance(report, RunReport) else report
    comparison = gated.comparison if gated is not None else None
    if gated is not None:
        console.print(
            Text(verdict_line(gated), style="bold green" if gated.passed else "bold red"),
            soft_wrap=not console.is_terminal,
        )  # a log or pipe: one line to grep, whatever its width
    if brief:
        if gated is not None:
            _print_gate(console, gated)
        return
    deltas = {m.name: m for m in comparison.metrics} if comparison is not None and is_tested(comparison) else None
    table = _results_table(s, deltas, delta_rows=False)
    if (
        deltas is not None
        and console.measure(table, options=console.options.update_width(1000)).maximum > console.width
    ):
        table = _results_table(s, deltas, delta_rows=True)  # an 80-column log: each Δ under its number instead
    console.print(table)
    if s.statistics is not None:
        console.print(Text(f"under each number: its {level_text(s.statistics.level)} interval", style="dim"))
    ci = interval_text(s.pass_rate_interval, percent=True)
    counts = (
        f"cases: {s.cases}  passed: {s.passed_cases}  failed: {s.failed_cases}  errored: {s.errored_cases}  "
        f"skipped: {s.skipped_cases}"
    )
    rate = (
        f"pass rate: {s.pass_rate:.2%}" + (f" ({ci}%)" if ci else "")
        if s.cases > s.skipped_cases
        else "pass rate: n/a (nothing was evaluated)"
    )
    if len(counts) + 2 + len(rate) <= console.width or not console.is_terminal:
        console.print(Text(f"{counts}  {rate}"), soft_wrap=not console.is_terminal)  # a pipe: never wrapped
    else:  # two lines rather than a wrap inside the pass rate (its interval alone on a line)
        console.print(Text(counts))
        console.print(Text(rate), soft_wrap=True)
    for result in s.run_metrics.values():  # run-level metrics (CalibrationMetric): one line each
        console.print(Text(run_metric_line(result)), soft_wrap=not console.is_terminal)
    if cases is not None:
        _print_cases(console, cases)
    if comparison is not None:
        _print_comparison(console, comparison)
    if gated is not None and gated.side_by_side is not None:
        _print_side_by_side(console, gated.side_by_side)
    e = s.embeddings
    console.print(
        Text(
            f"embeddings: references computed {e.references_computed}, reused {e.references_reused}; "
            f"outputs computed {e.outputs_computed}, reused {e.outputs_reused}"
        )
    )
    for name, j in s.judges.items():
        served = f", {j.task_cached} from Prefect's task cache" if j.task_cached else ""
        line = (
            f"judge {name} ({j.model}): {j.requests} requests, {j.reused - j.task_cached} reused from the "
            f"store{served}, tokens {j.prompt_tokens} in / {j.completion_tokens} out, ${j.cost:.4f}"
        )
        console.print(Text(line + (f", {j.unstable} unstable" if j.unstable else "")))
    if gated is not None:
        _print_gate(console, gated)


def _print_gate(console: Console, report: RunReport) -> None:
    """The ``GATE PASSED`` / ``GATE FAILED`` line of :func:`print_summary`."""
    passed, comparison, gate_message = report.passed, report.comparison, report.gate.message
    min_pass_rate, fail_on = report.gate.min_pass_rate, report.gate.fail_on
    verdict = "[bold green]GATE PASSED[/]" if passed else "[bold red]GATE FAILED[/]"
    rate = report.rate
    stopped = gate_message.removeprefix("gate failed: ") if gate_message else budget_message(report.summary)
    why = f": {escape(stopped)}" if stopped and not passed else ""
    unchecked = ": no baseline to compare with" if comparison is None else ""
    if fail_on == "regression":
        rule = f"required: no significant regression{unchecked}"
    else:
        rule = f"required {min_pass_rate:.2%}" + (
            f" and no significant regression{unchecked}" if fail_on == "either" else ""
        )
    wrap = console.is_terminal  # a pipe: never wrapped (docs/cli.md#what-the-terminal-shows), as the verdict line
    if gate_message and not passed:  # the gate's own sentence names the rate and the rule already
        console.print(f"{verdict}{why}", soft_wrap=not wrap)
    else:
        console.print(f"{verdict}{why} (pass rate {rate:.2%}, {rule})", soft_wrap=not wrap)


def _results_table(
    s: EvaluationSummary,
    deltas: dict[str, MetricComparison] | None,
    delta_rows: bool,
    title: str = "evaltasks results",
    delta_label: str = "since baseline",
) -> Table:
    """The per-metric table of :func:`print_summary`, titled ``title``. ``deltas`` (metric name → its comparison;
    None without a tested baseline) adds each metric's ``Δ mean`` and ``Δ pass``: as two columns, or with
    ``delta_rows`` as a row ``Δ DELTA_LABEL`` under the metric's numbers (and their intervals), which keeps the
    table as narrow as without them."""
    # Short headers, no vertical rules, and columns that never shrink: an 80-column CI log shows the metric
    # names and the numbers whole (not "Refere…" or "0.74…"); a longer name folds onto a second line.
    table = Table(title=title, show_lines=False, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    # a name too long for the line folds onto more; up to 24 characters it stays whole (the numbers never wrap)
    longest = max([len("metric"), *(len(name) for name in s.metrics)])
    table.add_column("metric", justify="left", overflow="fold", min_width=longest if longest <= NAME_WIDTH else None)
    columns = ("Δ mean", "Δ pass") if deltas is not None and not delta_rows else ()
    for column in ("mean", "pass rate", "thr.", "pass", "fail", "err.", "skip", *columns):
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    thresholds = threshold_texts([m.threshold for m in s.metrics.values()])
    for (name, m), threshold in zip(s.metrics.items(), thresholds, strict=False):
        table.add_row(
            folded_name(name),
            "n/a" if m.mean_score is None else f"{m.mean_score:.4f}",
            "n/a" if m.pass_rate is None else f"{m.pass_rate:.2%}",
            threshold,
            str(m.passed),
            str(m.failed),
            str(m.errored),
            str(m.skipped),
            *(_delta_cells(deltas.get(name)) if columns and deltas is not None else ()),
        )
        mean_ci = interval_text(m.mean_score_interval) if m.mean_score is not None else ""
        rate_ci = interval_text(m.pass_rate_interval, percent=True) if m.pass_rate is not None else ""
        if mean_ci or rate_ci:  # the interval under its number, dimmed: a column as wide as the number's
            table.add_row("", Text(mean_ci, style="dim"), Text(rate_ci and f"{rate_ci}%", style="dim"))
        if delta_rows and deltas is not None and deltas.get(name) is not None:
            table.add_row(Text(f"  Δ {delta_label}", style="dim"), *_delta_cells(deltas[name]))
    return table


def threshold_texts(thresholds: list[float], most: int = 4) -> list[str]:
    """``thresholds`` for one table column, all with the same number of decimals: as many as the most precise
    one needs (at least 1, at most ``most``), so ``1`` and ``0.6`` read ``1.0`` and ``0.6``, and ``1`` beside
    ``0.75`` reads ``1.00``."""

    def decimals(value: float) -> int:
        text = f"{value:.{most}f}".rstrip("0")
        return len(text) - text.index(".") - 1

    places = max([1, *(decimals(value) for value in thresholds)])
    return [f"{value:.{places}f}" for value in thresholds]


def folded_name(name: str, width: int = NAME_WIDTH) -> Text:
    """Metric ``name`` for a table cell: whole when it has at most ``width`` characters, else on lines of at most
    ``width`` broken after ``_``, ``-`` or ``.`` or before a capital that follows a lower-case letter or digit
    (``contains_metric_with_a_`` / ``rather_long_name_00``); a part longer than ``width`` is cut there."""
    lines: list[str] = []
    for part in _NAME_BREAKS.split(name):
        while len(part) > width:  # no boundary inside: cut (rich's fold would do the same)
            lines.append(part[:width])
            part = part[width:]
        if lines and len(lines[-1]) + len(part) <= width:
            lines[-1] += part
        elif part:
            lines.append(part)
    return Text("\n".join(lines))


def _delta_cells(m: MetricComparison | None) -> tuple[Text, Text]:
    """The ``Δ mean`` and ``Δ pass`` cells of metric ``m`` (blank when it is in one run only); a delta whose
    test found a regression ends with ``▼`` and is red (the mark reads in a log without colours)."""
    if m is None:
        return Text(""), Text("")

    def cell(delta: float | None, test: ChangeTest | None, text: str) -> Text:
        if delta is None:
            return Text("n/a")
        regressed = test is not None and test.verdict == "regressed"
        return Text(text + (" ▼" if regressed else ""), style="bold red" if regressed else "")

    return (
        cell(m.mean_delta, m.score_test, f"{m.mean_delta or 0:+.4f}"),
        cell(m.pass_rate_delta, m.pass_rate_test, f"{100 * (m.pass_rate_delta or 0):+.2f} pt"),
    )


@dataclass
class NotableCases:
    """The cases listed under the terminal's table (:func:`notable_cases`).

    Attributes:
        title: what the list holds, e.g. ``failing cases (12 of 30)``.
        rows: per case its readable name (:func:`~evaltasks.reports.verdict.case_label`, plain text) and one
            entry per metric that failed or got worse, with its score (``before → after`` against a baseline),
            the lowest score or largest drop first; at most :data:`METRICS_SHOWN` of them, then
            ``… N more metrics``.
        more: how many more cases belong to the list (found in summary.md and results.json).
        turns: per row of a conversation, its last :data:`TURNS_LISTED` turns as ``(number, turn)``, printed
            under it (docs/conversations.md#reports); absent or empty for a single-turn case.
    """

    title: str
    rows: list[tuple[str, list[str]]] = field(default_factory=list)
    more: int = 0
    turns: list[list[tuple[int, Turn]]] = field(default_factory=list)


TURNS_LISTED = 3
"""A conversation's turns the terminal prints under its row (its last ones)."""


def _case_name(case: dict[str, Any]) -> tuple[str, list[tuple[int, Turn]]]:
    """A failing case's readable name from its results.json entry, and a conversation's last
    :data:`TURNS_LISTED` turns numbered from 1 (none for a single-turn case)."""
    raw = case.get("turns")
    if not raw:
        return case_label(case["id"], case.get("input"), case.get("actual_output")), []
    turns = [Turn.model_validate(turn) for turn in raw]
    first = max(len(turns) - TURNS_LISTED, 0)
    return conversation_label(case["id"], turns), list(enumerate(turns, start=1))[first:]


def _printable(text: str) -> str:
    """``text`` with control characters (a terminal escape in model output) shown as ``?``."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _score(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _capped(parts: list[str], shown: int = METRICS_SHOWN) -> list[str]:
    """The first ``shown`` of ``parts``, then ``… N more metrics`` for the rest: a case's entry stays a few
    lines long whatever the number of metrics in the suite."""
    if len(parts) <= shown:
        return parts
    rest = len(parts) - shown
    return [*parts[:shown], f"… {rest} more metric{'' if rest == 1 else 's'}"]


def stored_splits(results_path: Path, limit: int = CASES_SHOWN) -> list[SplitCase]:
    """The first ``limit`` cases the targets split, read from the run's ``results.json`` (its ``side_by_side``
    header line; the flow's returned outcome leaves the per-case parts out). Empty when the file cannot be read
    or has none."""
    prefix = '  "side_by_side": '
    try:
        with open(results_path, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith(prefix):
                    value = json.loads(line[len(prefix) :].rstrip().rstrip(","))
                    splits = value.get("splits", []) if isinstance(value, dict) else []
                    return [SplitCase.model_validate(split) for split in splits[:limit]]
                if line.startswith('  "cases": ['):
                    break
    except (OSError, ValueError):
        pass
    return []


def notable_cases(results_path: Path, summary: EvaluationSummary, limit: int = CASES_SHOWN) -> NotableCases | None:
    """The cases a reader of the terminal wants named, read from the run's ``results.json``: without a baseline
    the failing and errored cases, errored ones first, then by lowest metric score (dataset order among equals);
    with one the newly failing cases (passed in the baseline, failed or errored now), then the other cases whose
    score got worse beyond the tolerance, each group by largest drop first, the order of ``comparison.changes``
    (summary.md's order).

    At most ``limit`` rows; ``more`` counts the rest. results.json holds one header key and one case per line
    (:mod:`evaltasks.reports.json_report`), so the file is read line by line, and only lines of failing cases
    are parsed (the ``limit`` lowest kept). Side by side (several ``targets``), every target's cases are listed,
    each named with its target. Returns None when there is nothing to list or the file cannot be read.
    """
    total = summary.failed_cases + summary.errored_cases
    cases = summary.cases
    try:
        with open(results_path, encoding="utf-8") as handle:
            comparison: dict[str, Any] | None = None
            lowest: list[tuple[float, int, str, list[str], list[tuple[int, Turn]]]] = []  # heap: (-key, -position…)
            several_targets = False  # side by side: each case is named with its target
            position = 0
            for line in handle:
                if line.startswith('  "cases": [') and not total:
                    return None  # no baseline (its comparison comes before the cases) and nothing failed
                if line.startswith('  "targets": '):
                    value = json.loads(line[len('  "targets": ') :].rstrip().rstrip(","))
                    several_targets = isinstance(value, list) and len(value) > 1
                    if several_targets:  # every target's failing cases, not only the reference's (the summary's)
                        total = sum(t["summary"]["failed_cases"] + t["summary"]["errored_cases"] for t in value)
                        cases = sum(t["summary"]["cases"] for t in value)
                elif line.startswith('  "comparison": '):
                    value = json.loads(line[len('  "comparison": ') :].rstrip().rstrip(","))
                    comparison = value if isinstance(value, dict) else None
                    if comparison is not None:
                        return _changed_cases(comparison, limit)
                elif line.startswith("    {"):
                    if '"failed"' not in line and '"errored"' not in line:
                        continue
                    case = json.loads(line.strip().rstrip(","))
                    if case.get("status") not in ("failed", "errored"):
                        continue
                    bad = sorted(
                        (
                            (-1.0 if m.get("status") == "errored" or m.get("score") is None else float(m["score"]), m)
                            for m in case.get("metrics", [])
                            if m.get("status") in ("failed", "errored")
                        ),
                        key=lambda pair: pair[0],
                    )
                    worse = _failures([m for _, m in bad])
                    key = -1.0 if case.get("status") == "errored" else (bad[0][0] if bad else 0.0)
                    name, turns = _case_name(case)
                    generation = case.get("generation")
                    if several_targets and isinstance(generation, dict) and generation.get("target"):
                        name = f"{generation['target']}: {name}"
                    entry = (-key, -position, _printable(name), _capped(worse), turns)
                    position += 1
                    if len(lowest) < limit:
                        heapq.heappush(lowest, entry)
                    elif entry[:2] > lowest[0][:2]:
                        heapq.heapreplace(lowest, entry)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not total:
        return None
    ordered = sorted(lowest, key=lambda e: e[:2], reverse=True)
    return NotableCases(
        f"failing cases ({total} of {cases}, lowest score first)",
        [(label, parts) for _, _, label, parts, _ in ordered],
        max(total - len(ordered), 0),
        [turns for *_, turns in ordered],
    )


def _failures(metrics: list[dict[str, Any]]) -> list[str]:
    """What a failing case's row says of its failed or errored ``metrics``: ``Name 0.42`` / ``Name error`` each,
    or, when the case's generation failed (every metric errored with that reason), the one reason why."""
    errors = [m.get("error") or "" for m in metrics]
    if metrics and all(isinstance(e, str) and e.startswith(GENERATION_FAILED) for e in errors):
        return [errors[0]]
    return [f"{m['name']} {'error' if m.get('status') == 'errored' else _score(m.get('score'))}" for m in metrics]


def _changed_cases(comparison: dict[str, Any], limit: int) -> NotableCases | None:
    """:func:`notable_cases` against a baseline, from results.json's ``comparison`` (with its ``changes``)."""
    changes = [CaseChange.model_validate(c) for c in comparison.get("changes", [])]
    worse: dict[str, list[CaseChange]] = {}
    for change in changes:
        if change.kind == "worse":
            worse.setdefault(change.case_id, []).append(change)
    rank = {case_id: i for i, case_id in enumerate(worse)}  # first change of each case: its largest drop
    newly_ids = list(comparison.get("newly_failing", []))
    listed = {case_id: i for i, case_id in enumerate(newly_ids)}
    newly = sorted(newly_ids, key=lambda case_id: (rank.get(case_id, len(rank)), listed[case_id]))
    order = newly + [case_id for case_id in worse if case_id not in listed]
    if not order:
        return None
    texts = {c.case_id: c for c in changes}
    rows = []
    turns: list[list[tuple[int, Turn]]] = []  # a conversation's last turns, printed under its row
    for case_id in order[:limit]:
        text = texts.get(case_id)
        label = (
            conversation_label(case_id, text.turns, total=text.turns_total)
            if text is not None and text.turns
            else case_label(
                case_id, text.input if text else None, (text.current_output or text.baseline_output) if text else None
            )
        )
        parts = [f"{c.metric} {_score(c.baseline_score)} → {_score(c.current_score)}" for c in worse.get(case_id, [])]
        rows.append((_printable(label) + (" (newly failing)" if case_id in newly else ""), _capped(parts)))
        kept = text.turns if text is not None and text.turns else []
        first = (text.turns_total or len(kept)) - len(kept) + 1 if text is not None else 1
        turns.append(list(enumerate(kept, start=first))[-TURNS_LISTED:])
    regressed = len(order) - len(newly)
    title = f"since the baseline: {len(newly)} case{'' if len(newly) == 1 else 's'} newly failing"
    if regressed:
        title += f", {regressed} other{'' if regressed == 1 else 's'} scoring lower"
    return NotableCases(title, rows, max(len(order) - limit, 0), turns)


def _print_cases(console: Console, cases: NotableCases) -> None:
    """``cases`` under the table: its title, one line per case (its name — each metric and score) or, when that
    line would not fit the console, the name on one line and its metrics on at most two more, as many to a line
    as fit (numbers whole; those that do not fit are counted in the last line's ``… N more metrics``), then
    where the rest are: at most 3 lines a case, ``3 × CASES_SHOWN + 2`` lines in all, and under a conversation its
    last :data:`TURNS_LISTED` turns, one line each (:func:`~evaltasks.reports.verdict.turn_line`)."""
    console.print(Text(cases.title + ":", style="bold"))
    for row, (label, parts) in enumerate(cases.rows):
        line = f"  {label} — {'; '.join(parts)}" if parts else f"  {label}"
        if len(line) <= console.width:
            console.print(Text(line), overflow="fold")
        else:
            console.print(Text("  " + shorten(label, console.width - 2)))
            for part_line in _packed(parts, console.width):
                console.print(Text(part_line), overflow="fold")
        for number, turn in cases.turns[row] if row < len(cases.turns) else []:  # a conversation's last turns
            console.print(Text("      " + _printable(turn_line(number, turn, console.width - 6))), style="dim")
    if cases.more:
        console.print(Text(f"  … {cases.more} more: see summary.md / results.json", style="dim"))


def _packed(parts: list[str], width: int, lines: int = 2, indent: str = "      ") -> list[str]:
    """``parts`` (metric entries, the last maybe ``… N more metrics``) on at most ``lines`` lines of ``width``
    columns after ``indent``, joined by ``; ``; what does not fit is counted in a closing ``… N more metrics``."""
    more = 0
    if parts and parts[-1].startswith("… "):
        more = int(parts[-1].split()[1])
        parts = parts[:-1]
    for shown in range(len(parts), -1, -1):
        rest = more + len(parts) - shown
        items = parts[:shown] + ([f"… {rest} more metric{'' if rest == 1 else 's'}"] if rest else [])
        packed: list[str] = []
        for item in items:
            if packed and len(packed[-1]) + 2 + len(item) <= width:
                packed[-1] += f"; {item}"
            else:
                packed.append(indent + item)
        if len(packed) <= lines or shown == 0:
            return packed
    return []


def _test_row(table: Table, label: str, test: ChangeTest | None) -> None:
    if test is None:
        return
    percent = test.statistic == "pass_rate"
    delta = "n/a" if test.delta is None else (f"{100 * test.delta:+.2f} pt" if percent else f"{test.delta:+.4f}")
    table.add_row(
        folded_name(label),
        "pass rate" if percent else "mean",
        delta,
        p_text(test.p_value),
        Text(test.verdict, style=_VERDICT_STYLES.get(test.verdict, "")),
    )
    interval = interval_text(test.interval, percent=percent, signed=True)
    if interval:  # under Δ, dimmed, as the intervals of the results table: 80 columns keep every number whole
        table.add_row("", "", Text(interval, style="dim"))


def _print_comparison(console: Console, comparison: Comparison) -> None:
    """The verdict against the baseline and one row per test (see :func:`print_summary`)."""
    if not is_tested(comparison):
        delta = comparison.pass_rate_delta
        console.print(
            Text(
                f"baseline {comparison.baseline}: pass rate change "
                f"{'n/a' if delta is None else f'{100 * delta:+.2f} pt'}"
            )
        )
        return
    console.print(
        Text(
            f"{VERDICT_ICONS.get(comparison.verdict, '')} {verdict_headline(comparison)} "
            f"(baseline {comparison.baseline}; alpha {comparison.alpha:g}, "
            f"min effect {comparison.min_effect:g})",
            style=_VERDICT_STYLES.get(comparison.verdict, ""),
        )
    )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, show_lines=False)
    # metric names whole (up to 24 characters) before anything else: the verdict wraps at its spaces instead
    longest = max([len("all cases"), *(len(m.name) for m in comparison.metrics)])
    table.add_column("metric", justify="left", overflow="fold", min_width=longest if longest <= NAME_WIDTH else None)
    table.add_column("test", justify="left", no_wrap=True)
    table.add_column(f"Δ ({level_text(1 - comparison.alpha)} CI)", justify="right", no_wrap=True)
    table.add_column("p", justify="right", no_wrap=True)
    table.add_column("verdict", justify="left", overflow="fold", min_width=len("inconclusive"))
    _test_row(table, "all cases", comparison.pass_rate_test)
    for m in comparison.metrics:
        _test_row(table, m.name, m.pass_rate_test)
        _test_row(table, "" if m.pass_rate_test is not None else m.name, m.score_test)
    if table.rows:
        console.print(table)
    for label, ids in (
        ("new (not tested)", comparison.new_cases),
        ("removed (not tested)", comparison.removed_cases),
        ("flaky", comparison.flaky_cases),
    ):
        if ids:
            more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
            console.print(Text(f"{label}: {len(ids)}: {', '.join(ids[:5])}{more}"))


def _print_side_by_side(console: Console, side: SideBySide) -> None:
    """A run with several targets (docs/targets.md#side-by-side): per target its verdict against the first (the
    reference) and its metric table (Δ against the reference, regressions marked ``▼``), with the tests' rows
    under it; then the cases the targets split, each with every target's status (the first
    :data:`CASES_SHOWN`)."""
    console.print(
        Text(f"targets side by side: each compared with {side.reference} (the first)", style="bold"),
        soft_wrap=not console.is_terminal,
    )
    for versus in side.targets:
        run, comparison = versus.target, versus.comparison
        verdict = comparison.verdict if comparison is not None else ""
        icon = VERDICT_ICONS.get(verdict, "")
        console.print(
            Text(
                f"{icon + ' ' if icon else ''}target {run.name} ({run.kind}): {versus_text(versus, side.reference)}",
                style=_VERDICT_STYLES.get(verdict, ""),
            ),
            soft_wrap=not console.is_terminal,
        )
        deltas = {m.name: m for m in comparison.metrics} if comparison is not None else None
        label = f"vs {side.reference}"
        table = _results_table(run.summary, deltas, delta_rows=False, title=run.name, delta_label=label)
        if deltas is not None and console.measure(table, options=console.options.update_width(1000)).maximum > (
            console.width
        ):
            table = _results_table(run.summary, deltas, delta_rows=True, title=run.name, delta_label=label)
        console.print(table)
        if comparison is not None:
            tests = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, show_lines=False)
            for column, justify in (("metric", "left"), ("test", "left"), ("Δ", "right"), ("p", "right")):
                tests.add_column(column, justify=justify, no_wrap=column != "metric")  # type: ignore[arg-type]
            tests.add_column("verdict", justify="left", overflow="fold", min_width=len("inconclusive"))
            _test_row(tests, "all cases", comparison.pass_rate_test)
            for m in comparison.metrics:
                _test_row(tests, m.name, m.pass_rate_test)
                _test_row(tests, "" if m.pass_rate_test is not None else m.name, m.score_test)
            if tests.rows:
                console.print(tests)
    console.print(Text(f"cases the targets split: {side.split_cases}", style="bold"))
    for split in side.splits[:CASES_SHOWN]:
        label = case_label(split.case_id, split.input, split.answers[0].output if split.answers else None)
        statuses = " · ".join(f"{a.target} {a.status}" for a in split.answers)
        console.print(Text(f"  {_printable(label)} — {_printable(statuses)}"), overflow="fold")
    if side.split_cases > CASES_SHOWN:
        console.print(Text(f"  … {side.split_cases - CASES_SHOWN} more: see summary.md / results.json", style="dim"))
