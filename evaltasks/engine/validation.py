"""The validate stage: every problem with the metrics and the cases, all reported at once, before any work.

A metric's own ``validate_case`` that raises is a problem of the case it raised on, never a crash
(:func:`validate_cases`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from evaltasks.engine.scoring import metric_failure
from evaltasks.errors import QUOTE_MAX_CHARS, InputError, Problem, bounded, quote
from evaltasks.metrics.base import BaseMetric, SkippedMetric
from evaltasks.test_case import EvalTestCase


def validate_metrics(metrics: Sequence[BaseMetric]) -> None:
    """Check the metric list. Raises InputError for an empty list, a non-metric or a repeated metric name."""
    problems = []
    if not metrics:
        problems.append(Problem("<python>", "metrics", "", "at least one metric is required"))
    names: set[str] = set()
    for i, metric in enumerate(metrics):
        if not isinstance(metric, BaseMetric):
            problems.append(Problem("<python>", f"metrics[{i}]", "", f"is not a metric: {quote(metric)}"))
            continue
        if metric.name in names:
            problems.append(Problem("<python>", f"metrics[{i}]", "name", f"repeats the metric name '{metric.name}'"))
        names.add(metric.name)
    if problems:
        raise InputError(problems, title="invalid metrics")


MAX_FAULTS_SHOWN = 5  # per metric: different exceptions of its validate_case listed; the rest are counted


def _exception_text(exc: BaseException) -> str:
    """``"ExceptionType: message"`` (``"ExceptionType"`` when the message is empty), the message bounded."""
    try:
        message = str(exc)
    except Exception:  # a user's exception whose __str__ fails  # noqa: BLE001
        message = "<the message could not be printed>"
    return f"{type(exc).__name__}: {bounded(message, QUOTE_MAX_CHARS * 2)}" if message else type(exc).__name__


def _field_pairs(found: object) -> list[tuple[str, str]] | None:
    """``found`` as ``(field, message)`` string pairs, or None when it is not a list/tuple of such pairs."""
    if not isinstance(found, (list, tuple)):
        return None
    pairs = []
    for item in found:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(v, str) for v in item)):
            return None
        pairs.append((item[0], item[1]))
    return pairs


def validate_cases(
    cases: Sequence[EvalTestCase],
    metrics: Sequence[BaseMetric],
    *,
    source: str = "<python>",
    locations: Sequence[str] | None = None,
) -> list[Problem]:
    """Every problem that makes a case unusable for a metric, located by ``locations[i]`` (default ``item i``),
    in case order.

    One problem per case and field, naming every metric that reported it: ``field 'expected_output' is missing
    (needed by ExactMatchMetric, SemanticSimilarityMetric)``; metrics giving different messages for one field
    share the line (``<message> (needed by A); <message> (needed by B)``).

    A metric whose ``validate_case`` raises (or returns something other than ``(field, message)`` pairs) is a
    problem of the case, not a crash: ``BrandVoiceMetric.validate_case raised RuntimeError: validate broke``.
    The same failure on later cases is counted in that first problem (``(also on 9 more cases)``), and at most
    :data:`MAX_FAULTS_SHOWN` different failures per metric are listed (one more problem counts the rest), so a
    metric that raises on every case is reported once.
    """
    problems: list[Problem] = []
    faults: dict[tuple[int, str], list[int]] = {}  # (metric index, failure) -> [its problem's index, repeats]
    shown = [0] * len(metrics)  # per metric: different failures listed so far
    overflow: dict[int, list[int]] = {}  # metric index -> [index of the problem counting the rest, count]
    for i, case in enumerate(cases):
        if not isinstance(case, EvalTestCase):
            problems.append(Problem(source, f"item {i}", "", f"is not an EvalTestCase: {type(case).__name__}"))
            continue
        by_field: dict[str, dict[str, list[str]]] | None = None  # field -> message -> the metrics giving it
        for m, metric in enumerate(metrics):
            try:
                found = metric.validate_case(case)
            except BaseException as exc:  # a user's metric: report it as input, located (sys.exit() included)
                if not metric_failure(exc):
                    raise
                failure = f"raised {_exception_text(exc)}"
            else:
                if not found and (found.__class__ is list or found is None):
                    continue  # the common case, kept cheap: nothing wrong (None: a function without a return)
                pairs = _field_pairs(found)
                if pairs is not None:
                    by_field = {} if by_field is None else by_field
                    for field, message in pairs:
                        by_field.setdefault(field, {}).setdefault(message, []).append(metric.name)
                    continue
                failure = f"returned {quote(found)}, not a list of (field, message) pairs"
            where = locations[i] if locations else f"item {i}"
            label = f"{type(metric).__name__}.validate_case" + (
                "" if metric.name == type(metric).__name__ else f" (metric '{metric.name}')"
            )
            key = (m, failure)
            if key in faults:
                faults[key][1] += 1  # a repeat: counted in its first problem
            elif shown[m] < MAX_FAULTS_SHOWN:
                shown[m] += 1
                faults[key] = [len(problems), 0]
                problems.append(Problem(source, where, "", f"{label} {failure}"))
            elif m in overflow:
                overflow[m][1] += 1  # past the cap: counted in the first such problem
            else:
                overflow[m] = [len(problems), 0]
                problems.append(Problem(source, where, "", f"{label} {failure}"))
        if by_field is None:
            continue
        where = locations[i] if locations else f"item {i}"
        for field, messages in by_field.items():
            text = "; ".join(f"{message} (needed by {', '.join(names)})" for message, names in messages.items())
            problems.append(Problem(source, where, field, text))
    for index, repeats in faults.values():
        if repeats:
            old = problems[index]
            problems[index] = replace(old, message=f"{old.message} (also on {repeats} more case(s))")
    for index, count in overflow.values():
        if count:
            old = problems[index]
            problems[index] = replace(old, message=f"{old.message} (and {count} more failure(s) not listed)")
    return problems


CASE_KINDS = {
    "single": "single-turn cases",
    "conversation": "conversations",
    "any": "single-turn cases and conversations",
}
"""What each :attr:`~evaltasks.metrics.base.BaseMetric.case_kind` scores, in words."""


def case_kind_problems(
    cases: Sequence[EvalTestCase], metrics: Sequence[BaseMetric], locations: Sequence[str] | None = None
) -> list[tuple[int, str]]:
    """Each metric of ``metrics`` whose ``case_kind`` does not fit ``cases``: a ``"conversation"`` metric given a
    single-turn case, a ``"single"`` metric given a conversation
    (:class:`~evaltasks.test_case.ConversationalEvalTestCase`); ``"any"`` fits both (docs/conversations.md#metrics).

    Returns ``(metric index, message)`` pairs, one per metric that does not fit, the message naming the metric,
    what it scores and the first case that does not fit (``locations[i]``, default ``item i``) with the count of
    the others; the caller locates them (the suite's ``metrics[i]``, the Python API's).
    """
    from evaltasks.test_case import ConversationalEvalTestCase

    conversation = [isinstance(case, ConversationalEvalTestCase) for case in cases]
    found = []
    for m, metric in enumerate(metrics):
        kind = getattr(metric, "case_kind", "single")
        if kind not in ("single", "conversation"):
            continue
        wrong = [i for i, is_conversation in enumerate(conversation) if is_conversation != (kind == "conversation")]
        if not wrong:
            continue
        first = locations[wrong[0]] if locations else f"item {wrong[0]}"
        others = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        what = "a conversation" if conversation[wrong[0]] else "a single-turn case"
        cls = metric.name if isinstance(metric, SkippedMetric) else type(metric).__name__  # a stand-in: its name
        label = cls + ("" if metric.name == cls else f" '{metric.name}'")
        found.append(
            (
                m,
                f"{label} scores {CASE_KINDS[kind]} only, but {first}{others} is {what} (docs/conversations.md#metrics)",
            )
        )
    return found
