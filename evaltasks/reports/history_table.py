"""The table ``evaltasks history`` prints (docs/history.md#run-history-and-drift): one row per recorded run, laid
out like ``evaltasks run``'s table so that every column stays on an 80-column terminal, and whole on a pipe.

A terminal gets the widest of three layouts that fits its width: each metric's mean in a column headed by its
(folded) name; the same columns headed ``m1``, ``m2``, … with a legend line under the table; or, for more
metrics than that fits, all means in one column (``m1 m2 …`` order) that folds. A pipe or a file gets the first
layout at its natural width, so each run stays one line to grep, however many metrics there are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from evaltasks.reports.console import folded_name

if TYPE_CHECKING:
    from evaltasks.engine.history import RunRecord

HEADER_WIDTH = 12
"""Columns of a metric's header in the widest layout: a longer name folds at its word boundaries."""
DRIFT_WIDTH = 8
"""The narrowest the drift column gets on a terminal (its text folds)."""
MEANS_WIDTH = 6
"""The narrowest the one column of all mean scores gets (one score, ``0.123``, and its header's words)."""


def print_history(console: Console, title: str, records: list[RunRecord]) -> None:
    """Print ``title`` (on its own line: it wraps, a table title would be cut) and the table of ``records``
    (oldest first) on ``console``, in the widest layout that fits (module docstring); a legend line names the
    ``mN`` labels of the narrower layouts."""
    names = list(dict.fromkeys(name for record in records for name in record.metrics))
    console.print(Text(title, style="italic"), soft_wrap=not console.is_terminal)
    if console.is_terminal:  # the first that fits, the last (the narrowest) otherwise
        layouts = [(layout, split) for layout in ("names", "labels", "folded") for split in (False, True)]
        for layout, split in layouts:
            # the columns that never wrap, beside the narrowest useful width of each folding one
            rest = _table(records, names, layout, split, drift=False)
            folding = 1 + DRIFT_WIDTH + (1 + MEANS_WIDTH if layout == "folded" and names else 0)
            if _natural_width(console, rest) + folding <= console.width:
                break
        table = _table(records, names, layout, split)
    else:  # a pipe or a file: one line per run, never cut
        layout, table = "names", _table(records, names, "names", split_time=False)
        console = Console(file=console.file, width=_natural_width(console, table), no_color=console.no_color)
    console.print(table)
    intervals = [r.pass_rate_interval for r in records if r.pass_rate_interval is not None]
    if intervals:
        console.print(Text(f"under each pass rate: its {100 * intervals[0].level:g}% interval", style="dim"))
    if layout != "names" and names:
        legend = ", ".join(f"m{i} = {name}" for i, name in enumerate(names, 1))
        console.print(Text(f"mean scores: {legend}", style="dim"))


def _natural_width(console: Console, table: Table) -> int:
    """The columns ``table`` takes without wrapping a cell."""
    return console.measure(table, options=console.options.update_width(100_000)).maximum


def _table(records: list[RunRecord], names: list[str], layout: str, split_time: bool, drift: bool = True) -> Table:
    """The history table of ``records`` in ``layout`` (``names``, ``labels`` or ``folded``: module docstring),
    the time on two lines (date, then time) with ``split_time``, without the drift column unless ``drift``.
    Columns are one space apart, with no outer edge; only the drift column and the folded means wrap (as
    ``ratio`` columns: rich folds those at their final width)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=0, show_lines=False)
    for column in ("time (UTC)", "commit", "dataset"):
        table.add_column(column, no_wrap=True)
    table.add_column("pass rate", justify="right", no_wrap=True)
    if layout == "names":
        for name in names:
            table.add_column(folded_name(f"{name} mean", HEADER_WIDTH), justify="right", no_wrap=True)
    elif layout == "labels":
        for i, _ in enumerate(names, 1):
            table.add_column(f"m{i}", justify="right", no_wrap=True)
    elif names and drift:  # (measured without it: see print_history)
        table.add_column("mean scores", overflow="fold", min_width=MEANS_WIDTH, ratio=2)
    table.add_column("gate", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    if drift:
        table.add_column("drift", overflow="fold", min_width=DRIFT_WIDTH, ratio=1)
    for r in records:
        means = [
            "—" if n not in r.metrics or r.metrics[n].mean_score is None else f"{r.metrics[n].mean_score:.3f}"
            for n in names
        ]
        interval = r.pass_rate_interval
        pass_rate = "—" if r.pass_rate is None else f"{100 * r.pass_rate:.1f}%"
        if interval is not None:  # the interval under its number, dimmed, as in `evaltasks run`'s table
            pass_rate += f"\n[dim]{100 * interval.low:.1f}–{100 * interval.high:.1f}%[/dim]"
        started = (r.started_at or "—")[:16].replace("T", "\n" if split_time else " ")
        table.add_row(
            escape(started),
            escape((r.commit or "—")[:8]),
            escape(r.dataset_sha256[:8] or "—"),
            pass_rate,
            *(means if layout != "folded" else [" ".join(means)] if names and drift else []),
            "passed" if r.passed else Text("FAILED", style="red"),
            escape(r.verdict or "—"),
            *([Text(", ".join(r.drift), style="red") if r.drift else "—"] if drift else []),
        )
    return table
