"""The summary table printed at the end of a run (rich)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from evaltasks.results import EvaluationSummary, budget_message


def print_summary(summary: EvaluationSummary, *, passed: bool | None = None, min_pass_rate: float | None = None,
                  console: Console | None = None, gate_pass_rate: float | None = None) -> None:
    """Print a per-metric table and the pass rate (and the gate verdict when ``passed`` is given).

    ``gate_pass_rate``: the rate the gate compared, when it differs from ``summary.pass_rate`` (``allow_errors``).
    """
    console = console or Console()
    s = summary
    # Short headers, no vertical rules, and columns that never shrink: an 80-column CI log shows the metric
    # names and the numbers whole (not "Refere…" or "0.74…"); a longer name folds onto a second line.
    table = Table(title="evaltasks results", show_lines=False, box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    table.add_column("metric", justify="left", overflow="fold")  # a name too long for the line folds onto more
    for column in ("mean", "pass rate", "thr.", "pass", "fail", "err.", "skip"):
        table.add_column(column, justify="right", no_wrap=True, min_width=len(column))
    for name, m in s.metrics.items():
        table.add_row(
            Text(name), "n/a" if m.mean_score is None else f"{m.mean_score:.4f}",
            "n/a" if m.pass_rate is None else f"{m.pass_rate:.2%}",
            f"{m.threshold:g}", str(m.passed), str(m.failed), str(m.errored), str(m.skipped),
        )
    console.print(table)
    line = f"cases: {s.cases}  passed: {s.passed_cases}  failed: {s.failed_cases}  errored: {s.errored_cases}  " \
           f"skipped: {s.skipped_cases}  pass rate: {s.pass_rate:.2%}"
    console.print(Text(line))
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
        stopped = budget_message(s)
        why = f": {escape(stopped)}" if stopped and not passed else ""
        console.print(f"{verdict}{why} (pass rate {rate:.2%}, required {min_pass_rate:.2%})")
