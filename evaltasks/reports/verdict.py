"""The one verdict line every report surface leads with, and readable case names.

Every surface (summary.md, the PR comment and job summary, the Prefect run's state message and artifact
descriptions, the terminal) opens with :func:`verdict_line`: passed or failed, the pass rate with its change since
the baseline, how many cases newly fail, and the verdict of the comparison (docs/reports.md#what-each-surface-shows).
Cases are named by :func:`case_label`: the dataset's id when it has one, else a short prefix of the input.

Plain text: callers escape nothing in it but what came from the suite or the data (the suite name is not in it;
:func:`case_label` returns data, which a markdown caller must escape).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from evaltasks.engine.outcome import RunReport
from evaltasks.results import Turn, budget_message

LABEL_WIDTH = 48
"""Characters of a case label (:func:`case_label`) at most, an ellipsis included."""

_DERIVED = re.compile(r"(?P<base>[0-9a-f]{12})(?P<repeat>#\d+)?")


def is_derived_id(case_id: str, input: str | None, output: str | None = None) -> bool:
    """Whether ``case_id`` was derived by evaltasks (the first 12 hex digits of sha256 of the input, of the output
    when there is no input, ``#2``… for repeats; :func:`evaltasks.test_case.assign_ids`) rather than taken from
    the dataset's ``id`` column or the case's ``name``. Recomputed exactly, so a dataset id that merely looks like
    a hash is still the dataset's."""
    match = _DERIVED.fullmatch(case_id)
    if match is None:
        return False
    text = input if input is not None else output
    return text is not None and hashlib.sha256(text.encode("utf-8")).hexdigest()[:12] == match["base"]


def conversation_label(case_id: str, turns: Sequence[Turn], width: int = LABEL_WIDTH, total: int | None = None) -> str:
    """A readable name for a conversation (docs/conversations.md#reports): its id when the dataset or the case's
    ``name`` gave one, else (an id derived from its turns, :func:`evaltasks.test_case.assign_ids`) its first
    turn's input, with ``#2``… kept; then its number of turns: ``refund-flow (3 turns)``. ``total``: how many turns
    it has when ``turns`` holds only its last ones (its id is then shown). Plain text."""
    from evaltasks.test_case import turns_text

    total = len(turns) if total is None else total
    count = f" ({total} turn{'' if total == 1 else 's'})"
    match = _DERIVED.fullmatch(case_id)
    text = turns_text([(turn.input, turn.actual_output) for turn in turns])
    derived = match is not None and hashlib.sha256(text.encode("utf-8")).hexdigest()[:12] == match["base"]
    if match is None or total != len(turns) or not derived:
        return shorten(case_id, max(width - len(count), 8)) + count
    first = turns[0].input if turns[0].input is not None else turns[0].actual_output
    repeat = match["repeat"] or ""
    label = shorten(first, max(width - len(repeat) - len(count), 8)) + repeat
    return (label if label.strip() else case_id) + count


def turn_line(number: int, turn: Turn, width: int) -> str:
    """One turn on one line, ``turn 2: user: <input> → assistant: <output>``, the texts cut so the line fits
    ``width`` characters: a text shorter than half the room is whole, the other gets the rest. Plain text."""
    head = f"turn {number}: "
    room = max(width - len(head) - len("user:  → assistant: "), 20)
    said = " ".join(turn.input.split()) if turn.input is not None else None
    answer = " ".join(turn.actual_output.split())
    if said is not None and len(said) + len(answer) > room:
        keep = min(len(answer), room // 2) if len(said) > room // 2 else room - len(said)
        said, answer = shorten(said, room - keep), shorten(answer, keep)
    return head + (f"user: {said} → " if said is not None else "") + f"assistant: {shorten(answer, room)}"


def shorten(text: str, width: int = LABEL_WIDTH) -> str:
    """``text`` on one line (runs of whitespace as one space), cut to ``width`` characters with ``…``."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: max(width - 1, 0)].rstrip() + "…"


def case_label(case_id: str, input: str | None, output: str | None = None, width: int = LABEL_WIDTH) -> str:
    """A readable name for a case: its id when the dataset gave one, else (a derived hash id,
    :func:`is_derived_id`) the first ``width`` characters of its input on one line, with ``#2``… kept for a
    repeated input; the id itself when there is no text to show. Plain text (data: escape it for markdown)."""
    if not is_derived_id(case_id, input, output):
        return shorten(case_id, width)
    text = input if input is not None else output or ""
    repeat = _DERIVED.fullmatch(case_id)["repeat"] or ""  # type: ignore[index]
    label = shorten(text, width - len(repeat)) + repeat
    return label if label.strip() else case_id


def _points(delta: float) -> str:
    return f"{100 * delta:+.2f} points".replace("-", "−")


def verdict_line(report: RunReport) -> str:
    """The run's verdict in one line of plain text, e.g. ``FAILED: pass rate 50.43% (−5.51 points since the
    baseline), 12 cases newly failing; regressed since the baseline (p = 4.4e-12)`` or ``PASSED: pass rate
    81.00% (81 of 100 cases), gate 75.00%``. A comparison without tests (read from a results.json of schema 1)
    adds only ``regressed beyond the tolerance`` when it regressed. A baseline that shares no case id with the run
    (``comparison.paired_cases`` 0) claims no change: ``FAILED: pass rate 25.00% (1 of 4 cases), gate 50.00%;
    inconclusive: no case is in both runs``.

    ``report`` (:class:`~evaltasks.engine.lifecycle.RunReport`): its summary; ``passed``, the gate's verdict;
    its gate's ``min_pass_rate`` (a fraction), the pass rate it compared (``allow_errors`` leaves errored cases
    out; default ``summary.pass_rate``) and ``fail_on`` (None: ``min_pass_rate``); its comparison with a
    baseline (None: none was given).
    """
    summary, comparison, passed = report.summary, report.comparison, report.passed
    min_pass_rate, fail_on = report.gate.min_pass_rate, report.gate.fail_on
    status = "PASSED" if passed else "FAILED"
    evaluated = summary.cases - summary.skipped_cases
    if summary.cases == 0:
        return f"{status}: no case was evaluated (the dataset is empty)"
    if evaluated == 0:
        return f"{status}: no case was evaluated (all {summary.cases} skipped)"
    rate = report.rate
    tested = comparison is not None and (
        comparison.pass_rate_test is not None
        or comparison.paired_cases > 0
        or comparison.verdict != "no significant change"
        or any(m.pass_rate_test is not None or m.score_test is not None for m in comparison.metrics)
    )
    unpaired = tested and comparison is not None and comparison.paired_cases == 0  # no case id in common
    if comparison is not None and comparison.pass_rate_delta is not None and not unpaired:
        head = f"{status}: pass rate {rate:.2%} ({_points(comparison.pass_rate_delta)} since the baseline)"
    else:
        head = f"{status}: pass rate {rate:.2%} ({summary.passed_cases} of {evaluated} cases)"
    if fail_on in (None, "min_pass_rate", "either"):
        head += f", gate {min_pass_rate:.2%}"
    stopped = budget_message(summary)
    if stopped:
        head += f" ({stopped})"
    if comparison is None:
        return head + ("; no baseline to compare with" if fail_on in ("regression", "either") else "")
    if unpaired:  # the runs share no case: nothing was compared, so no change is claimed
        return head + "; inconclusive: no case is in both runs"
    if not tested:  # a comparison from a results.json of schema 1: no tests, no verdict, no newly failing cases
        return head + ("; regressed beyond the tolerance" if comparison.regressed else "")
    newly = len(comparison.newly_failing)
    head += f"; {newly} case{'' if newly == 1 else 's'} newly failing"
    if comparison.newly_passing:
        head += f", {len(comparison.newly_passing)} newly passing"
    verdict = {
        "regressed": "regressed since the baseline",
        "improved": "improved since the baseline",
        "inconclusive": "inconclusive against the baseline",
    }.get(comparison.verdict, "no significant change since the baseline")
    test = comparison.pass_rate_test
    if (
        comparison.verdict in ("regressed", "improved")
        and test is not None
        and test.verdict == comparison.verdict
        and test.p_value is not None
    ):
        verdict += f" (p = {test.p_value:.2g})"
    return f"{head}; {verdict}"
