"""Prefect tasks wrapping the plain engine in :mod:`evaltasks.engine.evaluate`, for use in any flow.

Each task sits next to the plain function it wraps (use those without Prefect):

=======================  ============================================  =====================================
task                     wraps                                         caching
=======================  ============================================  =====================================
``load_dataset``         :func:`evaltasks.engine.run.plan_run`                none
``load_embedding_model`` the provider's ``load`` (local models)        none
``embed_references``     :func:`evaltasks.engine.embedding.embed_references`  none (the FAISS index is the cache)
``embed_outputs``        :func:`evaltasks.engine.embedding.embed_outputs`     none (the FAISS index is the cache)
``score_batch``          :func:`evaltasks.engine.scoring.score_metric_batch`  inputs but ``metric`` (canonical
                                                                       JSON, see below) + ``TASK_SOURCE``
``generate_outputs``     :func:`evaltasks.engine.generation.generate_outputs`  none (the output store is the
                                                                       cache; no retries: the target's own)
``evaluate_test_cases``  :func:`evaltasks.evaluate_sync`               none
``publish_results``      :func:`publish_artifacts`, report writers     none
=======================  ============================================  =====================================

Retries: embedding tasks retry twice (1 s, then 4 s, with jitter) and only when the failure is transient
(:class:`~evaltasks.errors.ProviderError` with ``transient=True``); deterministic errors fail at once.
The OpenAI client's own HTTP retries come first (``max_retries``), then the provider's retries of unusable
responses (``content_retries``), so an embedding request is attempted at most
(max_retries + 1) × (content_retries + 1) × 3 times (72 with the defaults). Change them per call with ``embed_outputs.with_options(retries=...)``.

Cache keys never include the model or the index: providers are named by (provider, model, namespace
fingerprint) strings and metrics by :meth:`~evaltasks.metrics.base.BaseMetric.cache_key` (class, version,
configuration), so two different metrics on the same inputs never share a cached result. ``score_batch``
hashes its inputs from a canonical JSON form (:func:`score_batch_inputs_key`), so the key is the same in every
process and a re-run after a crash finds the batches an earlier process scored.

Importing this module applies :data:`PREFECT_DEFAULTS` the user has not set (:func:`apply_prefect_defaults`):
Prefect's temporary server gets 120 s to start and runs without analytics, as under the CLI.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from prefect import task
from prefect.cache_policies import NO_CACHE, TASK_SOURCE, CacheKeyFnPolicy
from pydantic import BaseModel

from evaltasks._env import TEMPORARY_SERVER_DEFAULTS, env_value
from evaltasks._version import __version__
from evaltasks.embeddings import VectorTable, get_provider
from evaltasks.engine.embedding import embed_outputs as _embed_outputs
from evaltasks.engine.embedding import embed_references as _embed_references
from evaltasks.engine.evaluate import evaluate_sync
from evaltasks.engine.generation import generate_outputs as _generate_outputs
from evaltasks.engine.outcome import RunReport
from evaltasks.engine.run import RunPlan, plan_run
from evaltasks.engine.scoring import score_metric_batch
from evaltasks.errors import ProviderError
from evaltasks.index import ReferenceIndex
from evaltasks.metrics.base import BaseMetric
from evaltasks.reports.markdown import Highlights
from evaltasks.results import EmbeddingCounts, EvaluationResult, MetricResult, TestCaseResult, is_judged
from evaltasks.test_case import EvalTestCase

CACHE_VERSION = f"evaltasks-{__version__}/results-1"

# Prefect settings that make a flow using these tasks as robust as the CLI (docs/prefect.md#prefect): Prefect's
# temporary server gets 120 s to start instead of 20 s (a busy machine needs more), and its analytics service
# is off (its heartbeat writes to the temporary server's SQLite database while the server is busy starting
# up, which fails with a "database is locked" traceback, and it would call the network).
PREFECT_DEFAULTS: dict[str, tuple[str, str]] = {
    accessor: (name, TEMPORARY_SERVER_DEFAULTS[name])
    for accessor, name in (
        ("server.ephemeral.startup_timeout_seconds", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"),
        ("server.analytics_enabled", "PREFECT_SERVER_ANALYTICS_ENABLED"),
    )
}


def apply_prefect_defaults() -> list[str]:
    """Set each of :data:`PREFECT_DEFAULTS` the user has not set; returns the environment variables it set.

    "Set by the user" is Prefect's own notion (``model_fields_set`` of the current settings): an environment
    variable, a profile (``prefect config set``), ``prefect.toml``/``pyproject.toml`` or a ``.env`` file. A default
    is applied as its environment variable (inherited by the temporary server's subprocess, by task-runner
    workers and by flow-run subprocesses), then Prefect's global settings are re-read
    (``prefect.context.refresh_global_settings_context``, the hook Prefect runs after its plugins change the
    environment), so it holds even when ``prefect`` was imported before evaltasks. A temporary server that is
    already running keeps the settings it started with. Runs once when :mod:`evaltasks.tasks` is imported.
    """
    from prefect.context import refresh_global_settings_context
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    applied: list[str] = []
    for accessor, (env_name, value) in PREFECT_DEFAULTS.items():
        *parents, field = accessor.split(".")
        model: Any = settings
        for parent in parents:
            model = getattr(model, parent)
        if env_value(env_name) is None and field not in model.model_fields_set:  # blank counts as unset
            os.environ[env_name] = value
            applied.append(env_name)
    if applied:
        refresh_global_settings_context()
    return applied


apply_prefect_defaults()


def retry_if_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry only a :class:`ProviderError` marked transient."""
    try:
        state.result()
    except ProviderError as exc:
        return exc.transient
    except Exception:  # noqa: BLE001 - anything else is deterministic
        return False
    return False


_RETRY: dict[str, Any] = {
    "retries": 2,
    "retry_delay_seconds": [1, 4],
    "retry_jitter_factor": 0.5,
    "retry_condition_fn": retry_if_transient,
}


def _limited(concurrency_limit: str | None) -> Any:
    """``prefect.concurrency.sync.concurrency(NAME)`` when a global concurrency limit is named, else a no-op.

    strict: a named limit that does not exist on the Prefect server is an error, not a silent no-op.
    Create one with ``prefect gcl create NAME --limit 4``.
    """
    if not concurrency_limit:
        return contextlib.nullcontext()
    from prefect.concurrency.sync import concurrency

    return concurrency(concurrency_limit, occupy=1, strict=True)


@task(name="load-embedding-model", cache_policy=NO_CACHE, persist_result=False)
def load_embedding_model(provider: str, model_name: str, provider_options: dict[str, Any] | None = None) -> None:
    """Load the embedding model of ``provider`` / ``model_name`` into this process now, so that its load is a task
    run of its own on the flow run's timeline (otherwise the first embedding task loads it, unseen).

    The model is kept once per process (:func:`evaltasks.embeddings.get_provider` and the provider's own cache):
    the embedding tasks of the same process reuse it, and a load already under way (the CLI starts one while
    Prefect's server starts) is waited for, never repeated. Nothing is returned or pickled. A provider without a
    local model (an API) has nothing to load: a no-op.

    Raises:
        ConfigError: the model cannot be loaded (not found, not downloaded while offline, corrupt).
    """
    load = getattr(get_provider(provider, model_name, **(provider_options or {})), "load", None)
    if callable(load):
        load()


@task(name="embed-references", cache_policy=NO_CACHE, **_RETRY)
def embed_references(
    provider: str,
    model_name: str,
    texts: Sequence[str],
    index_dir: str | None,
    provider_options: dict[str, Any] | None = None,
    concurrency_limit: str | None = None,
    probe_dimensions: bool = True,
    return_vectors: bool = True,
) -> tuple[VectorTable, EmbeddingCounts]:
    """Embed unique reference ``texts`` into the reference index at ``index_dir`` (or directly when None).

    Returns the vectors of all ``texts`` and the counts (``references_computed``, ``references_reused``).
    ``return_vectors=False`` (texts a reference set's search reads from the index): the table has no vectors
    (shape (n, 0)), only each text's cost and truncation, so a set of millions never travels back to the flow.
    ``concurrency_limit`` names a Prefect global concurrency limit that provider calls occupy one slot of
    (shared by every run against the same server). ``probe_dimensions=False``: every text of the run comes
    from the index, so a chunk with nothing to embed makes no provider call
    (:meth:`~evaltasks.index.ReferenceIndex.get_or_embed`). Raises ProviderError after retries when the
    provider keeps failing.
    """
    index = ReferenceIndex(index_dir) if index_dir else None
    with _limited(concurrency_limit):
        table, counts = _embed_references(
            get_provider(provider, model_name, **(provider_options or {})),
            texts,
            index,
            probe=probe_dimensions,
            vectors=return_vectors or index is None,
        )
    return (table if return_vectors else table.without_vectors()), counts


@task(name="embed-outputs", cache_policy=NO_CACHE, **_RETRY)
def embed_outputs(
    provider: str,
    model_name: str,
    namespace: str,
    texts: Sequence[str],
    provider_options: dict[str, Any] | None = None,
    cache_version: str = CACHE_VERSION,
    concurrency_limit: str | None = None,
    index_dir: str | None = None,
    probe_dimensions: bool = True,
) -> tuple[VectorTable, EmbeddingCounts]:
    """Embed unique non-empty outputs through the index at ``index_dir`` (stored beside the references,
    content-addressed: a later run, in any process, finds them), or directly when None.

    Returns the vectors of all ``texts`` and the counts (``outputs_computed``, ``outputs_reused``). Not cached by
    Prefect: the index is the cache (a cached table would bypass its dimension checks). ``namespace`` and
    ``cache_version`` are accepted for compatibility and unused. ``concurrency_limit`` and
    ``probe_dimensions``: as :func:`embed_references`. Raises ProviderError after retries when the provider
    keeps failing.
    """
    index = ReferenceIndex(index_dir) if index_dir else None
    with _limited(concurrency_limit):
        return _embed_outputs(
            get_provider(provider, model_name, **(provider_options or {})), texts, index, probe=probe_dimensions
        )


def _canonical(value: Any) -> Any:
    """A JSON-able stand-in for a task input that is the same in every process (for cache keys)."""
    if isinstance(value, VectorTable):
        digest = hashlib.sha256()
        for array in (value.vectors, value.costs, value.truncated):
            array = np.ascontiguousarray(array)
            digest.update(f"{array.dtype.str}{array.shape}".encode())
            digest.update(array.tobytes())
        return {"texts": value.texts, "arrays_sha256": digest.hexdigest()}
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def score_batch_inputs_key(task_ctx: Any, inputs: dict[str, Any]) -> str:
    """The ``score_batch`` inputs but ``metric`` (``metric_key`` stands for it), hashed from canonical JSON.

    Prefect's ``INPUTS`` policy hashes JSON when every input is JSON-able and cloudpickle otherwise. The
    vectors (numpy arrays) force the pickle path, where an :class:`EvalTestCase` pickles its pydantic
    ``__pydantic_fields_set__``, a set ordered by the process's string-hash seed: the key changed in every
    process, so a re-run never found the batches of embedding metrics an earlier process had scored.
    """
    canonical = {name: _canonical(value) for name, value in inputs.items() if name != "metric"}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, default=repr).encode()).hexdigest()


@task(name="score-batch", cache_policy=CacheKeyFnPolicy(cache_key_fn=score_batch_inputs_key) + TASK_SOURCE, **_RETRY)
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

    Raises:
        ProviderError: the metric embedded texts itself (``vectors`` None) and the provider failed.
    """
    # A provider failure fails the task run (retried when transient), so errored results are never cached.
    results = score_metric_batch(metric, cases, vectors, failed_namespaces, raise_provider_errors=True)
    return _uncached_if_errored(results)


def _uncached_if_errored(results: list[MetricResult]) -> list[MetricResult]:
    """``results``; when one is ``errored`` (a metric raised on that case), the running task's result is not
    written to the cache (its transaction's ``write_on_commit`` off), so a re-run scores the batch again
    instead of serving the errors, e.g. after the user fixed what their metric reads. The same for a judge
    metric's ``skipped`` results (the run's budget stopped them): a re-run with more budget judges them. Outside
    a task run, or with caching off, nothing changes."""
    if any(r.status == "errored" or (r.status == "skipped" and is_judged(r)) for r in results):
        from prefect.transactions import get_transaction

        transaction = get_transaction()
        if transaction is not None:
            transaction.write_on_commit = False
    return results


class ScoredBatch:
    """The results of one ``score-batch`` task run of the evaluate-suite flow, in a box Prefect does not open.

    Prefect links every object of a task's returned list to the task run (``link_state_to_result``: a dict
    entry and a weak reference per object, kept for the whole flow run) so that passing one on to another task
    records the dependency. The flow never passes results on, and for a list of results that link cost about
    4 µs per case and held a million entries in a 1,000,000-case run; a box is one object.

    Attributes:
        results: one :class:`~evaltasks.results.MetricResult` per case of the batch, in order.
    """

    __slots__ = ("results",)

    def __init__(self, results: list[MetricResult]) -> None:
        self.results = results

    def pop_results(self) -> list[MetricResult]:
        """The results, leaving the box empty.

        The finished task's state still references the box from inside Prefect's engine objects, which form
        reference cycles; those are freed only by a full garbage collection, which a large run seldom triggers
        (a 1,000,000-case run grew by ~0.9 GB of such batches). An emptied box holds nothing meanwhile.

        Emptying is safe because no one else holds the box: :func:`score_batch_streamed` keeps its result out of
        Prefect's in-memory result cache (``cache_result_in_memory=False``), so every cache hit, including one
        on a batch of identical content earlier in the same run, reads a box of its own from result storage.
        With that cache, later identical batches were handed the box an earlier batch had already emptied.
        """
        results, self.results = self.results, []
        return results


@task(
    name="score-batch",
    cache_policy=CacheKeyFnPolicy(cache_key_fn=score_batch_inputs_key) + TASK_SOURCE,
    cache_result_in_memory=False,
    **_RETRY,
)
def score_batch_streamed(
    metric: BaseMetric,
    cases: Sequence[EvalTestCase],
    vectors: dict[str, VectorTable] | None,
    metric_key: str,
    failed_namespaces: dict[str, str] | None = None,
    cache_version: str = CACHE_VERSION,
) -> ScoredBatch:
    """:func:`score_batch` as the evaluate-suite flow calls it: the same results, in a :class:`ScoredBatch`.

    Its result is persisted (when caching) but not kept in Prefect's in-memory result cache, so the flow may
    empty each box it receives (:meth:`ScoredBatch.pop_results`).
    """
    return ScoredBatch(
        _uncached_if_errored(score_metric_batch(metric, cases, vectors, failed_namespaces, raise_provider_errors=True))
    )


def task_cached_rows(
    metrics: Sequence[BaseMetric], cases: Sequence[EvalTestCase], batch_size: int | None
) -> dict[str, frozenset[int]]:
    """For ``--max-cost``: per judge metric of ``metrics`` (by name), the rows of ``cases`` whose results the
    evaluate-suite flow will take from Prefect's task cache (a ``score-batch`` of the same cases, metric and
    evaltasks scored before in this Prefect home, whatever the index directory), so they cost nothing.

    The batches are the flow's (``batch_size``, else :func:`~evaltasks.engine.stream.auto_batch_size`); each
    batch's cache key is computed by :func:`score_batch_streamed`'s own cache policy and looked up in the result
    store the task would use. A batch whose key or record cannot be read counts as not cached (the estimate
    stays an upper bound). Needs no API server (the default local result storage).
    """
    from types import SimpleNamespace

    from prefect.results import get_result_store

    from evaltasks.engine.stream import auto_batch_size, chunks
    from evaltasks.metrics.judge.base import JudgeMetric

    judged = [metric for metric in metrics if isinstance(metric, JudgeMetric)]
    if not judged or not cases:
        return {}
    batches = chunks(list(range(len(cases))), max(1, batch_size or auto_batch_size(len(cases))))
    policy, context = score_batch_streamed.cache_policy, SimpleNamespace(task=score_batch_streamed)
    try:
        store = get_result_store().update_for_task(score_batch_streamed)
    except Exception:  # noqa: BLE001 - no readable result store: nothing is known to be cached
        return {}
    found: dict[str, frozenset[int]] = {}
    for metric in judged:
        metric_key, rows = metric.cache_key(), set[int]()
        for batch in batches:
            inputs = {
                "metric": metric,
                "cases": [cases[i] for i in batch],
                "vectors": None,
                "metric_key": metric_key,
                "failed_namespaces": None,
                "cache_version": CACHE_VERSION,
            }
            try:
                key = policy.compute_key(task_ctx=context, inputs=inputs, flow_parameters={})  # type: ignore[arg-type]  # a stand-in task context: the key reads its task only
                if key and store.exists(key):  # type: ignore[union-attr]  # sync_compatible: called from sync code
                    rows.update(batch)
            except Exception:  # noqa: BLE001 - unreadable: priced as if it were not cached
                continue
        found[metric.name] = frozenset(rows)
    return found


# -- whole-dataset tasks for use in other pipelines ---------------------------------------------------------


@task(name="load-dataset", cache_policy=NO_CACHE)
def load_dataset(suite_path: str, skip_missing_credentials: bool = False) -> RunPlan:
    """Load and validate a suite and its dataset (:func:`evaltasks.engine.run.plan_run`): cases, ids, metrics.

    Raises ConfigError, DatasetError or CredentialsError for invalid input (never retried); with
    ``skip_missing_credentials`` a metric without credentials is skipped instead of raising.
    """
    return plan_run(suite_path, skip_missing_credentials=skip_missing_credentials)


@task(name="generate-outputs", cache_policy=NO_CACHE, persist_result=False)
def generate_outputs(
    target: Any,
    cases: Sequence[EvalTestCase],
    index_dir: str | None = None,
    refresh: bool = False,
    samples: int = 1,
) -> list[Any]:
    """Run ``target`` (a :class:`~evaltasks.targets.Target`) on ``cases`` in one task run, through the output
    store of ``index_dir`` (:func:`evaltasks.engine.generation.generate_outputs`): one
    :class:`~evaltasks.targets.generate.GeneratedCase` per case and sample (``case`` with its output, or
    ``error``). The flow runs one per batch of cases (docs/targets.md#the-generate-stage).

    Not retried by Prefect: the target retries its transient errors itself (bounded backoff, ``Retry-After``),
    and a case that still fails is returned with its ``error``, not raised. Not cached by Prefect: the output
    store is the cache (a stored output costs no call).

    Raises:
        CredentialsError: the target rejected the credentials (HTTP 401): the run stops.
    """
    return _generate_outputs(target, cases, index_dir=index_dir, refresh=refresh, samples=samples)


@task(name="evaluate-test-cases", cache_policy=NO_CACHE, **_RETRY)
def evaluate_test_cases(
    test_cases: Sequence[EvalTestCase],
    metrics: Sequence[BaseMetric],
    index_dir: str | None = None,
    batch_size: int = 1024,
    target: Any = None,
) -> EvaluationResult:
    """Evaluate many test cases with many metrics in one task run (:func:`evaltasks.evaluate_sync`).

    The step to drop into an existing pipeline: generate answers, then ``evaluate_test_cases(cases, metrics)``,
    then branch on ``result.summary.pass_rate``; or let ``target`` (a Target, or several) generate them in the same
    task run (docs/targets.md#the-generate-stage). Raises ValueError (InputError) for invalid cases or metrics.
    """
    return evaluate_sync(test_cases, metrics, index_dir=index_dir, batch_size=batch_size, target=target)


ARTIFACT_MAX_CHARS = 1_000_000  # a markdown artifact is one database row: keep it bounded like a job summary


def publish_artifacts(
    report: RunReport,
    cases: list[TestCaseResult] | Highlights,
    *,
    reports_url: str | None = None,
) -> list[str]:
    """Create the Prefect artifacts of an evaluation (call inside a flow or task run); returns their keys.

    The metrics table's and the summary's descriptions lead with the run's verdict line
    (:func:`evaltasks.reports.verdict.verdict_line`, e.g. ``FAILED: pass rate 50.00% (2 of 4 cases), gate
    90.00%``), then say what the artifact is. With a ``comparison`` the table gains, per metric, ``verdict`` (the
    comparison's: ``regressed``, ``improved``, ``inconclusive``, ``no significant change``), ``mean_delta`` and
    ``pass_rate_delta`` (fractions, current minus baseline; None where a side has no value). docs/prefect.md#prefect.

    ``report`` (:class:`~evaltasks.engine.lifecycle.RunReport`): the run's summary, its gate as results.json
    records it (``gate``: the rule and the pass rate it compared, so the summary's banner states the verdict as
    summary.md does), its comparison with a baseline (adds deltas, regressions and changes to the summary
    artifact) and its warnings (shown under the banner). The metrics table carries each pass rate's and mean's
    95 % interval (``*_ci_low`` / ``*_ci_high``; docs/statistics.md#uncertainty-and-regressions). ``cases``: the case
    results, or their :class:`~evaltasks.reports.markdown.Highlights` (worst cases, score histograms) when the
    run streamed its cases.

    Keys (``[a-z0-9-]``, per suite): ``<suite>-metrics`` (table of per-metric results), ``<suite>-summary``
    (markdown: banner, metric table, score distributions, worst cases; model text escaped), and
    ``<suite>-reports`` (a link) when ``reports_url`` is given.
    """
    from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

    from evaltasks.reports.markdown import render_summary
    from evaltasks.reports.verdict import verdict_line

    suite_name, comparison = report.suite, report.comparison
    verdict = verdict_line(report)
    compared = {entry.name: entry for entry in comparison.metrics} if comparison is not None else {}

    def deltas(name: str) -> dict[str, Any]:
        """The comparison columns of metric ``name`` (none without a baseline)."""
        if comparison is None:
            return {}
        entry = compared.get(name)
        return {
            "verdict": (entry.verdict or "") if entry else "",
            **{
                column: None if entry is None or getattr(entry, column) is None else round(getattr(entry, column), 6)
                for column in ("mean_delta", "pass_rate_delta")
            },
        }

    rows = [
        {
            "metric": name,
            **deltas(name),
            "mean_score": None if m.mean_score is None else round(m.mean_score, 6),
            "pass_rate": None if m.pass_rate is None else round(m.pass_rate, 6),
            "threshold": m.threshold,
            "passed": m.passed,
            "failed": m.failed,
            "errored": m.errored,
            "skipped": m.skipped,
            **{
                f"{stat}_ci_{end}": None if interval is None else round(getattr(interval, end), 6)
                for stat, interval in (("pass_rate", m.pass_rate_interval), ("mean_score", m.mean_score_interval))
                for end in ("low", "high")
            },
        }
        for name, m in report.summary.metrics.items()
    ]
    keys = [artifact_key(suite_name, "metrics"), artifact_key(suite_name, "summary")]
    create_table_artifact(key=keys[0], table=rows, description=f"{verdict}. Per-metric results of suite {suite_name}")
    markdown = render_summary(
        report,
        cases,
        max_size=ARTIFACT_MAX_CHARS,
        truncation_note="The full report is in results.json.",
        charts="text",  # Prefect's UI renders no Mermaid
    )
    create_markdown_artifact(
        key=keys[1], markdown=markdown, description=f"{verdict}. Evaluation summary of suite {suite_name}"
    )
    if reports_url:
        keys.append(artifact_key(suite_name, "reports"))
        create_link_artifact(
            key=keys[2],
            link=reports_url,
            link_text=f"{suite_name} reports",
            description="results.json, junit.xml and summary.md",
        )
    return keys


@task(name="publish-results", cache_policy=NO_CACHE)
def publish_results(
    result: EvaluationResult,
    suite_name: str,
    output_dir: str | None = None,
    min_pass_rate: float = 1.0,
    reports_url: str | None = None,
    allow_errors: bool = False,
) -> dict[str, Any]:
    """Publish an evaluation: Prefect artifacts, and results.json / junit.xml / summary.md when ``output_dir``.

    The gate (:func:`evaltasks.engine.lifecycle.gate_passed`) holds when passed / evaluated cases >= ``min_pass_rate``
    (skipped cases, and errored ones when ``allow_errors``, left out).

    Returns ``{"passed": gate verdict, "pass_rate", "artifacts": keys, "paths": {name: path}}``.
    """
    from pathlib import Path

    from evaltasks.engine.lifecycle import gate_passed
    from evaltasks.reports import SCHEMA_VERSION, write_reports

    passed = gate_passed(result, min_pass_rate, allow_errors)
    paths: dict[str, str] = {}
    if output_dir:
        header = {
            "schema_version": SCHEMA_VERSION,
            "evaltasks_version": __version__,
            "suite": suite_name,
            "passed": passed,
            "gate": {"min_pass_rate": min_pass_rate, "allow_errors": allow_errors},
            "embedding_models": [m.model_dump() for m in result.embedding_models],
        }
        written = write_reports(Path(output_dir), result, header, passed=passed, min_pass_rate=min_pass_rate)
        paths = {name: str(path) for name, path in written.items()}
    report = RunReport.of(result.summary, passed=passed, min_pass_rate=min_pass_rate, suite=suite_name)
    keys = publish_artifacts(report, result.test_results, reports_url=reports_url)
    return {"passed": passed, "pass_rate": result.summary.pass_rate, "artifacts": keys, "paths": paths}


def publish_history_artifact(suite_name: str, records: list[Any], drift: Any = None) -> str:
    """Create the ``<suite>-history`` markdown artifact (call inside a flow or task run): the runs of
    ``records`` (:class:`~evaltasks.engine.history.RunRecord`, oldest first) with an ASCII trend bar, and the
    latest run's drift tests (``drift``, a :class:`~evaltasks.engine.history.DriftReport`); returns its key."""
    from prefect.artifacts import create_markdown_artifact

    from evaltasks.engine.history import render_history_markdown

    key = artifact_key(suite_name, "history")
    create_markdown_artifact(
        key=key,
        markdown=render_history_markdown(suite_name, records, drift),
        description=f"Run history of suite {suite_name} (docs/history.md#run-history-and-drift)",
    )
    return key


def artifact_key(suite_name: str, suffix: str) -> str:
    """A Prefect artifact key (``[a-z0-9-]``) for ``suite_name``: e.g. ``truthfulqa-davinci-summary``."""
    slug = re.sub(r"[^a-z0-9]+", "-", suite_name.lower()).strip("-")
    if not slug or slug != suite_name.lower().strip():  # names that lose characters get a hash: no clashes
        digest = hashlib.sha256(suite_name.encode("utf-8")).hexdigest()[:8]
        slug = f"{slug}-{digest}" if slug else f"suite-{digest}"
    return f"{slug}-{suffix}"
