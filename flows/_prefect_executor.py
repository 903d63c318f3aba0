"""The pipeline's Prefect executor: the units of work of :mod:`evaltasks.engine.pipeline` as task runs.

Generating a batch's outputs is one ``generate-outputs`` task run (:func:`~evaltasks.tasks.generate_outputs`: the
target's own retries, the output store as its cache). Embedding a namespace is ``embed-references`` / ``embed-outputs`` task runs of
:func:`~evaltasks.engine.stream.embed_chunk` texts each (retried when a provider's failure is transient, limited by
a global concurrency limit when one is named); scoring a batch is one ``score-batch`` task run per metric
(:func:`~evaltasks.tasks.score_batch_streamed`: many cases per task run, cached on its inputs and the task's
source), submitted to the flow run's task runner (threads, processes, Dask, Ray). The stages, their order and
what they fold together stay the pipeline's; call it inside a flow run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.futures import PrefectFuture
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.utilities.annotations import quote

from evaltasks.embeddings import VectorTable
from evaltasks.engine import progress as _progress
from evaltasks.engine.pipeline import Collect, CollectGenerated, EmbeddedNamespace, Embeddings, Logger
from evaltasks.engine.stream import IN_FLIGHT, IN_FLIGHT_THREADS, chunks, embed_chunk
from evaltasks.errors import ProviderError
from evaltasks.index import ReferenceIndex
from evaltasks.judges.binding import as_reused
from evaltasks.metrics.base import BaseMetric, EmbeddingNeed
from evaltasks.metrics.judge.base import JudgeMetric
from evaltasks.results import EmbeddingCounts, MetricResult
from evaltasks.tasks import (
    ScoredBatch,
    embed_outputs,
    embed_references,
    generate_outputs,
    load_embedding_model,
    score_batch_streamed,
)
from evaltasks.test_case import EvalTestCase

if TYPE_CHECKING:
    from evaltasks.targets.base import Target
    from evaltasks.targets.generate import GeneratedCase


class PrefectExecutor:
    """Runs the pipeline's units of work as Prefect task runs of the current flow run.

    With the threads task runner (task runs in this process) a local model is loaded first in a
    ``load-embedding-model`` task run that the embedding task runs share, two batches are in flight
    (:data:`~evaltasks.engine.stream.IN_FLIGHT_THREADS`) and batches are handed over as they are (Prefect's
    ``quote``: it would otherwise walk every case looking for futures); other runners load the model in their
    workers and keep :data:`~evaltasks.engine.stream.IN_FLIGHT` batches in flight.

    Args:
        cache: reuse and store ``score-batch`` results in Prefect's task cache; False: neither read nor write
            it (no cache keys computed, no results persisted). Embeddings never use it: the index is their cache.
        concurrency_limit: a Prefect global concurrency limit every embedding task run occupies one slot of.
        on_chunk: called in this thread with the number of texts of each embedding task run done.
        logger: where each namespace's embedding is logged (None: nowhere).
    """

    def __init__(
        self,
        *,
        cache: bool = True,
        concurrency_limit: str | None = None,
        on_chunk: Callable[[int], None] | None = None,
        logger: Logger | None = None,
    ) -> None:
        context = FlowRunContext.get()
        self.in_process = context is not None and isinstance(context.task_runner, ThreadPoolTaskRunner)
        self.in_flight = IN_FLIGHT_THREADS if self.in_process else IN_FLIGHT
        self.concurrency_limit = concurrency_limit
        self.on_chunk = on_chunk
        self.logger = logger
        # cache=False: compute everything and neither read nor write the task cache (for a LengthCheck run that
        # is a fifth of the work)
        self.score_task = (
            score_batch_streamed
            if cache
            else score_batch_streamed.with_options(cache_policy=NO_CACHE, persist_result=False)
        )
        self._keys: dict[str, str] = {}

    def _wrap(self, value: Any) -> Any:
        """``value`` as a task argument: quoted for in-process threads (other runners, e.g. Dask, ship the
        wrapper as is)."""
        return quote(value) if self.in_process else value

    def embed_namespace(self, need: EmbeddingNeed, index: ReferenceIndex | None) -> EmbeddedNamespace:
        """Embed ``need``'s references and outputs (an output equal to a reference once) in task runs, through
        ``index`` (directly when None); logs the namespace's start and its time and counts.

        Raises:
            ProviderError: the provider still fails after the tasks' retries, or the chunks still disagree.
        """
        provider = need.provider
        outputs = [t for t in need.outputs if t not in need.references]
        started = time.monotonic()
        if self.logger is not None:
            self.logger.info(
                "Embedding %d references and %d outputs with %s", len(need.references), len(outputs), provider.namespace
            )
        parts, index_only, counts = self._embed_chunks(index, need, outputs)
        if self.logger is not None:
            self.logger.info(
                "Embedded with %s in %.1f s (model load included): %s",
                provider.namespace,
                time.monotonic() - started,
                counts.model_dump(),
            )
        spent = float(sum(part.costs.sum() for part in parts)) + float(index_only.costs.sum())
        return EmbeddedNamespace(VectorTable.concat(parts), index_only, counts, spent)

    def _embed_chunks(
        self, index: ReferenceIndex | None, need: EmbeddingNeed, outputs: list[str]
    ) -> tuple[list[VectorTable], VectorTable, EmbeddingCounts]:
        """The namespace's chunks as task runs; returns the reference and output tables, the index-only texts'
        table (a reference set's texts, embedded into the index with no vectors brought back: costs and
        truncation only) and the counts. ``on_chunk(n)`` is called as each task run's ``n`` texts are done.

        When every text is already stored, the chunks probe no dimensions (every vector comes from the one
        store: no provider request, no model load); otherwise chunks with nothing to embed check the stored
        vectors against the endpoint's as the index does. Vectors of different dimensions across chunks
        (another run rebuilt the namespace meanwhile) are fetched again once, with the probe.
        """
        provider, index_dir = need.provider, str(index.root) if index is not None else None
        references = [t for t in need.references if t not in need.index_only]
        only = [t for t in need.references if t in need.index_only]
        probe = bool(index.missing_texts(provider, references + only + outputs)) if index is not None else True
        if self.in_process and probe and callable(getattr(provider, "load", None)):
            _progress.stage(f"loading the model {provider.model_name}", None)
            load_embedding_model(provider.provider, provider.model_name, need.options)  # called: in this thread
        texts = len(references) + len(only) + len(outputs)
        _progress.stage(f"embedding {texts:,} text{'' if texts == 1 else 's'}", texts)
        ref_chunks, only_chunks = chunks(references, embed_chunk(len(references))), chunks(only, embed_chunk(len(only)))
        out_chunks = chunks(outputs, embed_chunk(len(outputs)))
        limit = self.concurrency_limit
        # submitted first, collected last: a reference set's chunks return costs and truncation only
        only_futures = [
            embed_references.submit(
                provider.provider,
                provider.model_name,
                chunk,
                index_dir,
                need.options,
                limit,
                probe_dimensions=probe,
                return_vectors=False,
            )
            for chunk in only_chunks
        ]
        for attempt in range(2):
            futures = [
                *(
                    embed_references.submit(
                        provider.provider,
                        provider.model_name,
                        chunk,
                        index_dir,
                        need.options,
                        limit,
                        probe_dimensions=probe,
                    )
                    for chunk in ref_chunks
                ),
                *(
                    embed_outputs.submit(
                        provider.provider,
                        provider.model_name,
                        provider.namespace,
                        chunk,
                        need.options,
                        concurrency_limit=limit,
                        index_dir=index_dir,
                        probe_dimensions=probe,
                    )
                    for chunk in out_chunks
                ),
            ]
            # a second attempt re-fetches texts already counted
            parts, counts = self._collect(futures, [*ref_chunks, *out_chunks], count=attempt == 0)
            if len({t.vectors.shape[1] for t in parts if len(t)}) <= 1:
                stored, only_counts = self._collect(only_futures, only_chunks, count=True)  # the search checks them
                return parts, VectorTable.concat(stored), counts.add(only_counts)
            probe = True
        raise ProviderError(
            f"embeddings of {provider.namespace} came back with different dimensions "
            f"({sorted({t.vectors.shape[1] for t in parts if len(t)})}) twice"
        )

    def _collect(
        self,
        futures: list[PrefectFuture[tuple[VectorTable, EmbeddingCounts]]],
        chunked: Sequence[Sequence[str]],
        *,
        count: bool,
    ) -> tuple[list[VectorTable], EmbeddingCounts]:
        """The tables and summed counts of embedding ``futures`` (one per chunk of ``chunked``), in order;
        ``on_chunk`` is called per chunk when ``count``."""
        tables, counts = [], EmbeddingCounts()
        for future, chunk in zip(futures, chunked, strict=True):
            table, chunk_counts = future.result()
            tables.append(table)
            counts = counts.add(chunk_counts)
            if self.on_chunk is not None and count:
                self.on_chunk(len(chunk))
        return tables, counts

    def submit_batch(
        self, batch: Sequence[EvalTestCase], metrics: Sequence[BaseMetric], embeddings: Embeddings
    ) -> Collect:
        """One ``score-batch`` task run per metric for ``batch``, each given only the vectors of its own texts;
        returns what collects their results (a judge metric's batch served by the task cache counts nothing
        sent: :func:`_this_run`)."""
        futures: list[PrefectFuture[ScoredBatch]] = []
        inputs: list[dict[str, VectorTable]] = []
        for metric in metrics:
            vectors = None
            namespace = metric.embedding_namespace
            if namespace is not None and namespace in embeddings.tables:
                texts = [t for case in batch for group in metric.embedding_texts(case) for t in group]
                vectors = {namespace: embeddings.tables[namespace].subset(texts)}
                inputs.append(vectors)
            key = self._keys.get(metric.name) or self._keys.setdefault(metric.name, metric.cache_key())
            futures.append(
                self.score_task.submit(metric, self._wrap(batch), self._wrap(vectors), key, embeddings.failed or None)
            )

        def collect() -> list[list[MetricResult]]:
            per_metric = [
                _this_run(future, isinstance(metric, JudgeMetric))
                for future, metric in zip(futures, metrics, strict=True)
            ]
            for vectors in inputs:  # Prefect's finished task runs keep their parameters until a full
                vectors.clear()  # garbage collection (see ScoredBatch.pop_results): drop the batch's vectors now
            futures.clear()
            return per_metric

        return collect

    def submit_generation(
        self, target: Target, batch: Sequence[EvalTestCase], *, index_dir: str | None, refresh: bool, samples: int
    ) -> CollectGenerated:
        """One ``generate-outputs`` task run for ``batch`` on the flow run's task runner; returns what collects
        its generated cases (a CredentialsError of the target is raised by the collect)."""
        future: PrefectFuture[list[GeneratedCase]] = generate_outputs.submit(
            self._wrap(target), self._wrap(list(batch)), index_dir, refresh, samples
        )

        def collect() -> list[GeneratedCase]:
            return future.result()

        return collect


def _this_run(future: PrefectFuture[ScoredBatch], judged: bool) -> list[MetricResult]:
    """A score-batch future's results; a judge metric's (``judged``) from Prefect's task cache count what this
    run sent (nothing: :func:`~evaltasks.judges.binding.as_reused`)."""
    results = future.result().pop_results()
    if judged and future.state.name == "Cached":
        return as_reused(results)
    return results
