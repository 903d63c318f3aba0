"""Prefect tasks wrapping the plain engine in :mod:`evaltasks.evaluate`, for use in any flow.

Each task sits next to the plain function it wraps (use those without Prefect):

========================  =========================================  ===============================
task                      wraps                                      caching
========================  =========================================  ===============================
``embed_references``      :func:`evaltasks.evaluate.embed_references`  none (the FAISS index is the cache)
``embed_outputs``         :func:`evaltasks.evaluate.embed_outputs`     ``INPUTS + TASK_SOURCE``
``score_batch``           :func:`evaluate.score_metric_batch`          ``(INPUTS - metric) + TASK_SOURCE``
========================  =========================================  ===============================

Retries: embedding tasks retry twice (1 s, then 4 s, with jitter) and only when the failure is transient
(:class:`~evaltasks.errors.ProviderError` with ``transient=True``); deterministic errors fail at once.
The OpenAI client's own HTTP retries come first (``max_retries``), so an embedding request is attempted at
most (max_retries + 1) × 3 times. Change them per call with ``embed_outputs.with_options(retries=...)``.

Cache keys never include the model or the index: providers are named by (provider, model, namespace
fingerprint) strings and metrics by :meth:`~evaltasks.metrics.base.BaseMetric.cache_key` (class, version,
configuration), so two different metrics on the same inputs never share a cached result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefect import task
from prefect.cache_policies import INPUTS, NO_CACHE, TASK_SOURCE

from evaltasks._version import __version__
from evaltasks.embeddings import VectorTable, get_provider
from evaltasks.errors import ProviderError
from evaltasks.evaluate import embed_outputs as _embed_outputs
from evaltasks.evaluate import embed_references as _embed_references
from evaltasks.evaluate import score_metric_batch
from evaltasks.index import ReferenceIndex
from evaltasks.metrics.base import BaseMetric
from evaltasks.results import EmbeddingCounts, MetricResult
from evaltasks.test_case import EvalTestCase


CACHE_VERSION = f"evaltasks-{__version__}/results-1"


def retry_if_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry only a :class:`ProviderError` marked transient."""
    try:
        state.result()
    except ProviderError as exc:
        return exc.transient
    except Exception:  # noqa: BLE001 - anything else is deterministic
        return False
    return False


_RETRY = {"retries": 2, "retry_delay_seconds": [1, 4], "retry_jitter_factor": 0.5,
          "retry_condition_fn": retry_if_transient}


@task(name="embed-references", cache_policy=NO_CACHE, **_RETRY)
def embed_references(
    provider: str,
    model_name: str,
    texts: Sequence[str],
    index_dir: str | None,
    provider_options: dict[str, Any] | None = None,
) -> tuple[VectorTable, EmbeddingCounts]:
    """Embed unique reference ``texts`` into the reference index at ``index_dir`` (or directly when None).

    Returns the vectors of all ``texts`` and the counts (``references_computed``, ``references_reused``).
    Raises ProviderError after retries when the provider keeps failing.
    """
    index = ReferenceIndex(index_dir) if index_dir else None
    return _embed_references(get_provider(provider, model_name, **(provider_options or {})), texts, index)


@task(name="embed-outputs", cache_policy=INPUTS + TASK_SOURCE, **_RETRY)
def embed_outputs(
    provider: str,
    model_name: str,
    namespace: str,
    texts: Sequence[str],
    provider_options: dict[str, Any] | None = None,
    cache_version: str = CACHE_VERSION,
) -> VectorTable:
    """Embed unique non-empty outputs.

    ``namespace`` (model fingerprint) and ``cache_version`` (evaltasks version and result format) are part of
    the cache key, so new weights or a new evaltasks never reuse old cached vectors. Raises ProviderError after
    retries when the provider keeps failing.
    """
    return _embed_outputs(get_provider(provider, model_name, **(provider_options or {})), texts)


@task(name="score-batch", cache_policy=(INPUTS - "metric") + TASK_SOURCE)
def score_batch(
    metric: BaseMetric,
    cases: Sequence[EvalTestCase],
    vectors: dict[str, VectorTable] | None,
    metric_key: str,
    failed_namespaces: dict[str, str] | None = None,
    cache_version: str = CACHE_VERSION,
) -> list[MetricResult]:
    """Score one metric over a batch of cases (many cases per task run, never one task per case).

    Args:
        metric: the metric (excluded from the cache key; ``metric_key`` stands for it).
        cases: the batch.
        vectors: namespace -> embeddings the batch needs (None for metrics without embeddings).
        metric_key: ``metric.cache_key()``: class, version and configuration.
        cache_version: evaltasks version and result format (part of the cache key).
        failed_namespaces: namespaces whose embedding failed at run time; their metrics' results are errored.
    """
    return score_metric_batch(metric, cases, vectors, failed_namespaces)
