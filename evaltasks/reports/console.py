"""The summary table printed at the end of a run (rich): per metric the mean score and pass rate with their
95 % intervals (on a second line), the pass rate, and against a baseline the verdict and per-metric Δ,
interval and p-value (README, "Uncertainty and regressions")."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from evaltasks.compare import ChangeTest, Comparison
from evaltasks.reports.markdown import (VERDICT_ICONS, interval_text, is_tested, level_text, p_text,
                                        verdict_headline)
from evaltasks.results import EvaluationSummary, budget_message

_VERDICT_STYLES = {"regressed": "bold red", "improved": "bold green", "inconclusive": "bold yellow"}


def print_summary(summary: EvaluationSummary, *, passed: bool | None = None, min_pass_rate: float | None = None,
                  console: Console | None = None, gate_pass_rate: float | None = None,
                  comparison: Comparison | None = None, fail_on: str | None = None,
                  gate_message: str | None = None) -> None:
    """Print a per-metric table and the pass rate (and the gate verdict when ``passed`` is given).

    ``gate_pass_rate``: the rate the gate compared, when it differs from ``summary.pass_rate`` (``allow_errors``).
    Intervals (when the summary has them) go on a second line under each metric's numbers, so that an 80-column
    log shows every number whole. ``comparison``: with its statistical tests, the verdict line and a table of
    the tests (Δ with its interval, p-value, verdict) follow; a comparison without tests (a baseline from an
    older evaltasks) prints only its pass-rate change. ``fail_on``: the gate's ``fail_on``, named in the gate line.
    ``gate_message``: why the gate failed (results.json ``gate.message``), printed after ``GATE FAILED``.
    """
    console = console or Console()
    s = summary
    # Short headers, no vertical rules, and columns that never shrink: an 80-column CI log shows the metric
    # names and the numbers whole (not "Refere…" or "0.74…"); a longer name folds onto a second line.
    table = Table(title="evaltasks results", show_lines=False, box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    # a name too long for the line folds onto more; up to 24 characters it stays whole (the numbers never wrap)
    longest = max([len("metric"), *(len(name) for name in s.metrics)])
    table.add_column("metric", justify="left", overflow="fold", min_width=longest if longest <= 24 else None)
    for column in ("mean", "pass rate", "thr.", "pass", "fail", "err.", "skip"):
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    for name, m in s.metrics.items():
        table.add_row(
            Text(name), "n/a" if m.mean_score is None else f"{m.mean_score:.4f}",
            "n/a" if m.pass_rate is None else f"{m.pass_rate:.2%}",
            f"{m.threshold:g}", str(m.passed), str(m.failed), str(m.errored), str(m.skipped),
        )
        mean_ci = interval_text(m.mean_score_interval) if m.mean_score is not None else ""
        rate_ci = interval_text(m.pass_rate_interval, percent=True) if m.pass_rate is not None else ""
        if mean_ci or rate_ci:  # the interval under its number, dimmed: a column as wide as the number's
            table.add_row("", Text(mean_ci, style="dim"), Text(rate_ci and f"{rate_ci}%", style="dim"))
    console.print(table)
    if s.statistics is not None:
        console.print(Text(f"under each number: its {level_text(s.statistics.level)} interval", style="dim"))
    ci = interval_text(s.pass_rate_interval, percent=True)
    line = f"cases: {s.cases}  passed: {s.passed_cases}  failed: {s.failed_cases}  errored: {s.errored_cases}  " \
           f"skipped: {s.skipped_cases}  pass rate: {s.pass_rate:.2%}" + (f" ({ci}%)" if ci else "")
    console.print(Text(line))
    if comparison is not None:
        _print_comparison(console, comparison)
    e = s.embeddings
    console.print(Text(
        f"embeddings: references computed {e.references_computed}, reused {e.references_reused}; "
        f"outputs computed {e.outputs_computed}, reused {e.outputs_reused}"
    ))
    for name, j in s.judges.items():
        line = (f"judge {name} ({j.model}): {j.requests} requests, {j.reused} reused from the store, tokens "
                f"{j.prompt_tokens} in / {j.completion_tokens} out, ${j.cost:.4f}")
        console.print(Text(line + (f", {j.unstable} unstable" if j.unstable else "")))
    if passed is not None:
        verdict = "[bold green]GATE PASSED[/]" if passed else "[bold red]GATE FAILED[/]"
        rate = s.pass_rate if gate_pass_rate is None else gate_pass_rate
        stopped = gate_message.removeprefix("gate failed: ") if gate_message else budget_message(s)
        why = f": {escape(stopped)}" if stopped and not passed else ""
        unchecked = ": no baseline to compare with" if comparison is None else ""
        if fail_on == "regression":
            rule = f"required: no significant regression{unchecked}"
        else:
            rule = f"required {min_pass_rate:.2%}" + (
                f" and no significant regression{unchecked}" if fail_on == "either" else "")
        console.print(f"{verdict}{why} (pass rate {rate:.2%}, {rule})")


def _test_row(table: Table, label: str, test: ChangeTest | None) -> None:
    if test is None:
        return
    percent = test.statistic == "pass_rate"
    delta = "n/a" if test.delta is None else (f"{100 * test.delta:+.2f} pt" if percent else f"{test.delta:+.4f}")
    table.add_row(Text(label), "pass rate" if percent else "mean", delta, p_text(test.p_value),
                  Text(test.verdict, style=_VERDICT_STYLES.get(test.verdict, "")))
    interval = interval_text(test.interval, percent=percent, signed=True)
    if interval:  # under Δ, dimmed, as the intervals of the results table: 80 columns keep every number whole
        table.add_row("", "", Text(interval, style="dim"))


def _print_comparison(console: Console, comparison: Comparison) -> None:
    """The verdict against the baseline and one row per test (see :func:`print_summary`)."""
    if not is_tested(comparison):
        delta = comparison.pass_rate_delta
        console.print(Text(f"baseline {comparison.baseline}: pass rate change "
                           f"{'n/a' if delta is None else f'{100 * delta:+.2f} pt'}"))
        return
    console.print(Text(f"{VERDICT_ICONS.get(comparison.verdict, '')} {verdict_headline(comparison)} "
                       f"(baseline {comparison.baseline}; alpha {comparison.alpha:g}, "
                       f"min effect {comparison.min_effect:g})", style=_VERDICT_STYLES.get(comparison.verdict, "")))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, show_lines=False)
    # metric names whole (up to 24 characters) before anything else: the verdict wraps at its spaces instead
    longest = max([len("all cases"), *(len(m.name) for m in comparison.metrics)])
    table.add_column("metric", justify="left", overflow="fold", min_width=longest if longest <= 24 else None)
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
    for label, ids in (("new (not tested)", comparison.new_cases), ("removed (not tested)", comparison.removed_cases),
                       ("flaky", comparison.flaky_cases)):
        if ids:
            more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
            console.print(Text(f"{label}: {len(ids)}: {', '.join(ids[:5])}{more}"))
