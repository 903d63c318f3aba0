"""The score stage's unit of work: one metric over one batch of cases (:func:`score_metric_batch`).

A metric's failure errors the cases it failed on, never the run; missing or rejected credentials stop the run.
The pipeline's executors (:mod:`evaltasks.engine.pipeline`, the flow's Prefect tasks) call it per batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from evaltasks.embeddings.base import VectorTable
from evaltasks.engine import progress as _progress
from evaltasks.errors import CredentialsError, ProviderError
from evaltasks.metrics import METRICS
from evaltasks.metrics.base import BaseMetric
from evaltasks.results import MetricResult, result_problem
from evaltasks.test_case import EvalTestCase

_BUILT_IN_METRICS = frozenset(METRICS.values())  # built-in metric classes (not their subclasses)


def score_metric_batch(
    metric: BaseMetric,
    cases: Sequence[EvalTestCase],
    vectors: dict[str, VectorTable] | None,
    failed_namespaces: dict[str, str] | None = None,
    *,
    raise_provider_errors: bool = False,
) -> list[MetricResult]:
    """Score one metric over a batch; a failure errors cases, never the run (docs/metrics/custom.md#your-own-metrics),
    except missing or rejected credentials (:class:`CredentialsError`, e.g. a judge endpoint's HTTP 401/403),
    which propagate: the run stops as a credentials problem (CLI exit 2), as for embeddings.

    - A provider failure (:class:`ProviderError`) makes the batch's results ``errored``; with
      ``raise_provider_errors`` it propagates instead (a Prefect task then fails, is retried when transient,
      and is never cached as errored results).
    - Any other exception from ``metric.score_batch`` (a bug in a user's metric) re-scores the batch one case
      at a time, so only the cases that raise are ``errored``, each with ``ExceptionType: message``.
    - A result list of the wrong length, or an item that is not a :class:`MetricResult`, errors the cases it
      cannot vouch for, with a message naming the metric; so does a MetricResult whose score (or threshold) is
      not a finite number in [0, 1] (built without :meth:`MetricResult.scored`, which rejects one:
      docs/metrics/custom.md#your-own-metrics). Built-in metrics build their results with ``scored`` only, so theirs are not
      re-checked (~0.07 µs per case saved: a quarter of a LengthCheck case).

    Returns one result per case, in order. While it runs, the metric is recorded as running
    (:func:`evaltasks.engine.progress.metric_running`).
    """
    with _progress.metric_running(getattr(metric, "name", type(metric).__name__)):
        return _score_metric_batch(metric, cases, vectors, failed_namespaces, raise_provider_errors)


def _score_metric_batch(
    metric: BaseMetric,
    cases: Sequence[EvalTestCase],
    vectors: dict[str, VectorTable] | None,
    failed_namespaces: dict[str, str] | None,
    raise_provider_errors: bool,
) -> list[MetricResult]:
    """:func:`score_metric_batch`'s work."""
    namespace = metric.embedding_namespace if failed_namespaces else None
    if namespace and failed_namespaces and namespace in failed_namespaces:
        # one (immutable) result for every case: built once, so its message is redacted once, not per case
        return [MetricResult.errored(metric.name, metric.threshold, failed_namespaces[namespace])] * len(cases)
    try:
        results = metric.score_batch(cases, vectors)
    except CredentialsError as exc:
        # A key missing or rejected (HTTP 401/403) stops the run: every later request would fail the same. Its
        # cause (the SDK's error) is dropped: it does not survive the pickling that brings it from a worker.
        exc.__cause__ = exc.__context__ = None
        raise
    except ProviderError as exc:
        if raise_provider_errors:
            raise
        return [MetricResult.errored(metric.name, metric.threshold, str(exc))] * len(cases)  # one, as above
    except BaseException as exc:  # the metric's bug: find the cases that raise (sys.exit() included)
        if not metric_failure(exc):
            raise
        if len(cases) == 1:
            return [_score_one(metric, cases[0], vectors, raise_provider_errors)]
        return [_score_one(metric, case, vectors, raise_provider_errors) for case in cases]
    if type(results) is list and len(results) == len(cases):
        if type(metric) in _BUILT_IN_METRICS:  # their results come from MetricResult.scored, which checks scores
            if all(type(r) is MetricResult for r in results):
                return results  # the fast path: one C-level pass over the list
        else:
            try:  # one pass over the list (a comparison is False for NaN, a TypeError for a non-number)
                if all(
                    type(r) is MetricResult
                    and (s := r.score) is not None
                    and 0.0 <= s <= 1.0
                    and 0.0 <= (th := r.threshold) <= 1.0
                    and r.success is (s >= th)
                    and r.status == ("passed" if s >= th else "failed")
                    for r in results
                ):
                    return results
            except TypeError:
                pass
    return _checked_results(metric, cases, results)


_CONTROL_FLOW_PACKAGES = frozenset({"builtins", "asyncio", "concurrent", "anyio", "prefect", "trio"})


def metric_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a metric's own code, is the metric's failure (its case is ``errored`` with it)
    rather than control flow that must go on up: any ``Exception``, ``SystemExit`` (a metric's ``sys.exit()``),
    and a user's own ``BaseException`` subclass; not ``KeyboardInterrupt``, ``GeneratorExit``, task cancellation
    or an orchestrator's termination signal (``BaseException`` subclasses of the standard library, asyncio,
    concurrent.futures, anyio, trio or Prefect)."""
    if isinstance(exc, (Exception, SystemExit)):
        return True
    if isinstance(exc, (KeyboardInterrupt, GeneratorExit)):
        return False
    return type(exc).__module__.partition(".")[0] not in _CONTROL_FLOW_PACKAGES


def _score_one(
    metric: BaseMetric, case: EvalTestCase, vectors: dict[str, VectorTable] | None, raise_provider_errors: bool
) -> MetricResult:
    """``metric`` on one case; an exception gives an ``errored`` result ``ExceptionType: message``."""
    try:
        results = metric.score_batch([case], vectors)
    except CredentialsError as exc:
        exc.__cause__ = exc.__context__ = None  # as in score_metric_batch
        raise
    except ProviderError as exc:
        if raise_provider_errors:
            raise
        return MetricResult.errored(metric.name, metric.threshold, str(exc))
    except BaseException as exc:  # a metric's bug errors this case only (sys.exit() included)
        if not metric_failure(exc):
            raise
        return MetricResult.errored(metric.name, metric.threshold, f"{type(exc).__name__}: {exc}")
    return _checked_results(metric, [case], results)[0]


def _checked_results(metric: BaseMetric, cases: Sequence[EvalTestCase], results: object) -> list[MetricResult]:
    """``results`` when they are one :class:`MetricResult` per case; otherwise each case whose result is missing,
    not a MetricResult, or has a score or threshold out of [0, 1] or a status its score contradicts
    (:func:`~evaltasks.results.result_problem`) is
    ``errored`` with a message naming the metric (all of them when the count is wrong)."""
    name, threshold = getattr(metric, "name", type(metric).__name__), getattr(metric, "threshold", 0.0)
    try:
        items = list(results)  # type: ignore[call-overload]
    except TypeError:
        items = None
    if items is None or len(items) != len(cases):
        got = f"{len(items)} results" if items is not None else f"a {type(results).__name__}"
        message = (
            f"metric {name} ({type(metric).__qualname__}) returned {got} for {len(cases)} cases: score_batch "
            "must return one MetricResult per case, in order"
        )
        return [MetricResult.errored(name, threshold, message) for _ in cases]
    checked = []
    for item in items:
        if not isinstance(item, MetricResult):
            checked.append(
                MetricResult.errored(
                    name,
                    threshold,
                    f"metric {name} ({type(metric).__qualname__}) "
                    f"returned a {type(item).__name__} instead of a MetricResult",
                )
            )
        elif (problem := result_problem(name, item)) is not None:
            checked.append(MetricResult.errored(name, threshold, problem))
        else:
            checked.append(item)
    return checked
