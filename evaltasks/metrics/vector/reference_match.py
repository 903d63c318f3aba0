"""ReferenceMatchMetric: cosine similarity of the output's embedding with reference embeddings.

Source: eval-ai-library's ``ReferenceMatchMetric`` documentation page (library.eval-ai.com, vector metrics) and the
docs/metrics/vector.md#referencematchmetric:
each similarity is clamped to [0, 1], then aggregated by ``max`` or ``mean``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import numpy as np
from annotated_types import MinLen

from evaltasks.embeddings import VectorTable
from evaltasks.errors import ConfigError, Problem, ProviderError, quote
from evaltasks.index.search import Recall, ReferenceSearch, build_search, get_search, search_key
from evaltasks.inputs.reference_sets import ReferenceSet
from evaltasks.metrics.base import EmbeddingNeed, NonEmptyStr
from evaltasks.metrics.registry import register_metric
from evaltasks.metrics.vector.embedding import EmbeddingMetric, clamp_similarities
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

if TYPE_CHECKING:
    from evaltasks.index import ReferenceIndex

AGGREGATIONS = ("max", "mean")
MAX_LOGGED_SIMILARITIES = 100  # above this many references the log keeps the top ones only
TOP_SIMILARITIES = 10


@register_metric("ReferenceMatchMetric")
class ReferenceMatchMetric(EmbeddingMetric):
    """Embedding similarity between ``actual_output`` and a list of references, aggregated by max or mean.

    score = aggregate_i( clamp(cos(e(output), e(reference_i)), 0, 1) ), with unit-norm embeddings ``e``
    so the cosine is a dot product. No LLM is involved.

    Args:
        threshold: minimum passing score, default 0.7.
        references: reference texts; None (default) means "use each test case's ``references``".
        aggregation: ``"max"`` (default) or ``"mean"``.
        embedding_provider: ``"openai"`` (default, as in eval-ai-library) or ``"local"``.
        model_name: embedding model; None means the provider default (``text-embedding-3-small`` for openai,
            ``all-MiniLM-L6-v2`` for local).
        provider_options: keyword arguments of the provider (local: ``device``, ``batch_size``; openai:
            ``base_url``, ``api_key``, ``organization``, ``dimensions``, ``timeout``, ``max_retries``,
            ``content_retries``, ``azure_endpoint``, ``api_version``, ``price_per_million_tokens``…).
        name: the name in results (default ``"ReferenceMatchMetric"``).

    Raises:
        ValueError: an empty ``references`` list or an empty reference, an unknown aggregation or provider,
            a threshold outside [0, 1].

    An empty or whitespace-only output scores 0.0 and is never sent to a provider. ``evaluation_log`` keys:
    ``similarities`` (per reference, clamped, in reference order; with more than 100 references
    ``top_similarities`` instead: the 10 best as ``{"reference": index, "similarity": s}``), ``aggregation``,
    ``provider``, ``model``, ``reference_count``, ``output_truncated`` (the output exceeded the model's input
    limit and was cut), ``references_truncated`` (how many references were cut).
    ``evaluation_cost``: the case's share of the US dollars spent embedding its texts in this run.
    """

    version: ClassVar[str] = "1"

    def __init__(
        self,
        threshold: float = 0.7,
        references: Annotated[list[NonEmptyStr], MinLen(1)] | None = None,
        aggregation: Literal["max", "mean"] = "max",
        embedding_provider: Literal["openai", "local"] = "openai",
        model_name: str | None = None,
        *,
        provider_options: dict[str, Any] | None = None,
        reference_set: ReferenceSet | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, embedding_provider, model_name, provider_options, name=name)
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {list(AGGREGATIONS)}, got {quote(aggregation)}")
        if references is not None:
            if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
                raise ValueError("references must be a list of strings")
            if not references:
                raise ValueError("references must not be an empty list (use None to take each case's references)")
            if any(not r.strip() for r in references):
                raise ValueError("references must not contain empty strings")
        if reference_set is not None:
            if not isinstance(reference_set, ReferenceSet):
                raise ValueError(f"reference_set must be a ReferenceSet, got {type(reference_set).__name__}")
            if references is not None:
                raise ValueError("give either references or reference_set, not both")
        self.references = list(references) if references is not None else None
        self.reference_set = reference_set
        self.aggregation = aggregation

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, references, aggregation, embedding_provider, model_name)."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "references": self.references,
            "aggregation": self.aggregation,
            **self.provider_config(),
            **(
                {
                    "reference_set": {
                        "name": self.reference_set.name,
                        "sha256": self.reference_set.sha256,
                        "count": len(self.reference_set),
                        "search": self.reference_set.search.label(),
                        **self._query_options_used(),
                    }
                }
                if self.reference_set is not None
                else {}
            ),
        }

    def _query_options_used(self) -> dict[str, int]:
        """The query-time options this metric searches its set with (``nprobe`` and, with PQ codes,
        ``ivf_rerank``, or ``ef_search``; none for flat): part of :meth:`config`, so cached scores are reused
        only at the breadth that produced them."""
        assert self.reference_set is not None
        config = getattr(self, "_search_config", None) or self.reference_set.search  # resolved by the set
        if config.kind == "ivf":
            return {"nprobe": config.nprobe, **({"ivf_rerank": config.ivf_rerank} if config.ivf_pq else {})}
        if config.kind == "hnsw":
            return {"ef_search": config.ef_search}
        return {}

    @property
    def search_key(self) -> str | None:
        """The identity of this metric's reference-set search (None without a reference set)."""
        if self.reference_set is None:
            return None
        return search_key(self.embedding_namespace, self.reference_set.sha256, self.reference_set.search)

    def references_for(self, case: EvalTestCase) -> list[str]:
        """The references ``case`` is compared with: the metric's own, else the case's (possibly empty)."""
        return self.references if self.references is not None else list(case.references or [])

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs references (its own when the metric has none), none of them empty."""
        if self.references is not None or self.reference_set is not None:
            return []
        if not case.references:
            return [("references", "is missing or empty, and the metric has no references of its own")]
        empty = [i for i, r in enumerate(case.references) if not r.strip()]
        if empty:
            return [("references", f"item(s) {empty} are empty strings")]
        return []

    def embedding_texts(self, case: EvalTestCase) -> tuple[list[str], list[str]]:
        """The case's references and its output (neither when the output is empty or whitespace only).

        A reference set is registered once for the run by :meth:`add_embedding_needs`, not per case.
        """
        if not case.actual_output.strip():
            return [], []  # scored 0.0 without embeddings: neither the output nor its references are sent
        references = [] if self.reference_set is not None else self.references_for(case)
        return references, [case.actual_output]

    def add_embedding_needs(self, cases: Sequence[EvalTestCase], needs: dict[str, EmbeddingNeed]) -> None:
        """Register outputs and per-case references; a reference set's texts once, for the whole run."""
        super().add_embedding_needs(cases, needs)
        if self.reference_set is not None:
            needs[self.embedding_namespace].add_index_only(self.reference_set.texts)

    def prepare_search(
        self,
        table: VectorTable,
        directory: Path | None,
        cases: int,
        index: ReferenceIndex | None = None,
        stored: VectorTable | None = None,
        queries: np.ndarray | None = None,
    ) -> tuple[ReferenceSearch, Recall] | None:
        """Build (or load) the FAISS search over the reference set, and measure its recall; None without a set.

        Args:
            table: the run's vectors (with the set's texts, unless they are index-only).
            directory: where built searches persist (None: in memory only).
            cases: cases in the run, to share the set's embedding cost between them.
            index: the reference index holding the set's texts; the set's vectors are read from it when
                ``table`` lacks them (:meth:`~evaltasks.index.ReferenceIndex.write_vectors`: straight into the
                search's ``<key>.npy``, a chunk at a time), and only when the search is not persisted yet.
            stored: costs and truncation of the set's index-only texts (a table without vectors), this run's.
            queries: the run's output vectors, float32 (m, d): the search's recall is measured on them
                (:meth:`~evaltasks.index.search.ReferenceSearch.measure_recall`, which widens the breadth to the
                set's ``target_recall``); this metric, wherever its batches are scored, then searches with the
                breadth measured (per call: a search other runs share is not changed). None or empty: nothing
                measured (recalls None; flat: 1.0).

        Returns:
            (the search, its measured :class:`~evaltasks.index.search.Recall`), or None without a set.

        Raises:
            ConfigError: the set's search options do not fit the vectors (``ivf_pq`` not dividing d).
            KeyError: the set's vectors are neither in ``table`` nor in ``index``.
            ProviderError: the set's vectors and the outputs' differ in dimensions.
        """
        if self.reference_set is None:
            return None
        texts = self.reference_set.texts
        vectors: Any
        if table.vectors.shape[1] and all(t in table for t in texts):
            vectors = table.vectors[table.indices(texts)]
        elif index is not None:
            provider = self.provider
            vectors = functools.partial(_write_set_vectors, index, provider, list(texts))
        else:
            raise KeyError(
                f"the vectors of reference set '{self.reference_set.name}' are neither in the run's "
                "table nor in a reference index"
            )
        try:
            search = build_search(str(self.search_key), vectors, self.reference_set.search, directory, count=len(texts))
        except ValueError as exc:  # ivf_pq that does not divide the model's dimensions: a suite mistake
            field, _, message = str(exc).partition(" ")
            raise ConfigError(
                [Problem(self.reference_set.source, f"reference set '{self.reference_set.name}'", field, message)]
            ) from None
        if table.vectors.shape[1] and len(search) and search.vectors.shape[1] != table.vectors.shape[1]:
            raise ProviderError(
                f"reference set '{self.reference_set.name}' is stored with "
                f"{search.vectors.shape[1]}-dimensional vectors but {self.embedding_namespace} now "
                f"returns {table.vectors.shape[1]}-dimensional ones (its reference index was rebuilt "
                "meanwhile): run again"
            )
        recall = search.measure_recall(
            queries if queries is not None else np.empty((0, 0), dtype=np.float32),
            query_config=self.reference_set.search,
        )
        self._search_config = recall.query_config  # the breadth measured: every batch, in any worker, searches with it
        self._search_dir = str(directory) if directory is not None else None  # workers load it from there
        self._search_cost_per_case = _set_cost(texts, table, stored) / max(cases, 1)  # the set's share, per case
        return search, recall

    def _embed_directly(self, cases: Sequence[EvalTestCase]) -> dict[str, VectorTable]:
        tables = super()._embed_directly(cases)
        table = tables[self.embedding_namespace]
        outputs = [t for t in dict.fromkeys(case.actual_output for case in cases) if t.strip() and t in table]
        self.prepare_search(table, None, len(cases), queries=table.rows(outputs) if outputs else None)
        return tables

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Score each case from the vectors of its output and references (embedded here when not given)."""
        if vectors is None:
            vectors = self._embed_directly(cases)
        table = vectors.get(self.embedding_namespace) if cases else None
        if self.reference_set is not None:
            return self._score_against_set(cases, table)
        reduce = np.max if self.aggregation == "max" else np.mean
        results = []
        for case in cases:
            refs = self.references_for(case)
            log: dict[str, Any] = {
                "aggregation": self.aggregation,
                "provider": self.embedding_provider,
                "model": self.model_name,
                "reference_count": len(refs),
            }
            if not case.actual_output.strip():
                results.append(self._empty_output(log))
                continue
            assert table is not None
            ref_rows = table.indices(refs)
            out_row = table.indices([case.actual_output])[0]
            sims = clamp_similarities(table.vectors[ref_rows] @ table.vectors[out_row])
            score = float(reduce(sims))
            best = int(np.argmax(sims))
            if len(refs) <= MAX_LOGGED_SIMILARITIES:
                log["similarities"] = [round(float(s), 6) for s in sims]
            else:
                top = np.argsort(-sims, kind="stable")[:TOP_SIMILARITIES]
                log["top_similarities"] = [{"reference": int(i), "similarity": round(float(sims[i]), 6)} for i in top]
            log["output_truncated"] = bool(table.truncated[out_row])
            log["references_truncated"] = int(table.truncated[ref_rows].sum())
            cost = float(table.costs[ref_rows].sum() + table.costs[out_row])
            reason = (
                f"{self.aggregation.capitalize()} cosine similarity {score:.4f} over {len(refs)} reference(s) "
                f"(best {float(sims[best]):.4f} with reference {best + 1}); threshold {self.threshold}."
            )
            results.append(MetricResult.scored(self.name, score, self.threshold, reason, log, evaluation_cost=cost))
        return results

    def _empty_output(self, log: dict[str, Any]) -> MetricResult:
        log["similarities"] = []
        return MetricResult.scored(
            self.name,
            0.0,
            self.threshold,
            "The output is empty or whitespace only, so it matches no reference (score 0.0).",
            log,
        )

    def _score_against_set(self, cases: Sequence[EvalTestCase], table: VectorTable | None) -> list[MetricResult]:
        """Score every case against the whole reference set: FAISS top-k for max, exact clamped mean."""
        assert self.reference_set is not None
        query_config = getattr(self, "_search_config", None) or self.reference_set.search
        search = get_search(str(self.search_key), getattr(self, "_search_dir", None), self.reference_set.search)
        cost_per_case = getattr(self, "_search_cost_per_case", 0.0)
        scored = [i for i, case in enumerate(cases) if case.actual_output.strip()]
        results: list[MetricResult | None] = [None] * len(cases)
        if scored:
            assert table is not None
            out_rows = table.indices(cases[i].actual_output for i in scored)
            queries = table.vectors[out_rows]
            top_sims, top_idx = search.top_k(queries, TOP_SIMILARITIES, query_config)
            clamp_similarities(top_sims)
            scores = top_sims[:, 0].astype(np.float64) if self.aggregation == "max" else search.clamped_mean(queries)
            for j, i in enumerate(scored):
                log = self._set_log(len(search))
                log["top_similarities"] = [
                    {"reference": int(r), "similarity": round(float(s), 6)}
                    for s, r in zip(top_sims[j], top_idx[j])
                    if r >= 0
                ]
                log["output_truncated"] = bool(table.truncated[out_rows[j]])
                score = float(scores[j])
                reason = (
                    f"{self.aggregation.capitalize()} cosine similarity {score:.4f} over the {len(search)} references "
                    f"of set '{self.reference_set.name}' (best {float(top_sims[j][0]):.4f} with reference "
                    f"{int(top_idx[j][0]) + 1}); threshold {self.threshold}."
                )
                cost = cost_per_case + float(table.costs[out_rows[j]])
                results[i] = MetricResult.scored(self.name, score, self.threshold, reason, log, evaluation_cost=cost)
        for i, case in enumerate(cases):  # noqa: B007
            if results[i] is None:
                results[i] = self._empty_output(self._set_log(len(search)))
        return results  # type: ignore[return-value]

    def _set_log(self, count: int) -> dict[str, Any]:
        assert self.reference_set is not None
        return {
            "aggregation": self.aggregation,
            "provider": self.embedding_provider,
            "model": self.model_name,
            "reference_set": self.reference_set.name,
            "reference_count": count,
            "search": self.reference_set.search.label(),
            **self._query_options_used(),
        }


def _write_set_vectors(index: ReferenceIndex, provider: Any, texts: list[str], destination: Path | None) -> np.ndarray:
    """A reference set's vectors read from ``index`` (written to ``destination`` and mapped from it, when given).

    Texts missing from the index although the run stored them (an ``evaltasks index prune`` by another process
    dropped them meanwhile) are embedded again here, in this process, and stored; then the vectors are read.

    Raises:
        ProviderError: embedding the missing texts failed.
    """
    try:
        return index.write_vectors(provider, texts, destination)
    except KeyError:
        index.get_or_embed(provider, texts, probe=False, vectors=False)
        return index.write_vectors(provider, texts, destination)


def _set_cost(texts: Sequence[str], table: VectorTable, stored: VectorTable | None) -> float:
    """US dollars this run spent embedding a set's ``texts``: each text's (shared) cost from the run's table,
    else from ``stored`` (the index-only texts' costs), else 0."""
    tables = [t for t in (table, stored) if t is not None and len(t) and t.costs.any()]
    total = 0.0
    for text in texts:
        for source in tables:
            if text in source:
                total += float(source.costs[source.indices((text,))[0]])
                break
    return total
