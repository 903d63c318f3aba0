"""The embed and search stages' building blocks: the texts each provider must embed, embedding them through the
:class:`~evaltasks.index.ReferenceIndex` (or directly, without one), and the reference sets' FAISS searches.

The pipeline (:mod:`evaltasks.engine.pipeline`) runs them per provider namespace; the Prefect tasks
(:mod:`evaltasks.tasks`) wrap :func:`embed_references` and :func:`embed_outputs` for the flow's chunks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from evaltasks.embeddings.base import EmbeddingProvider, VectorTable
from evaltasks.engine import progress as _progress
from evaltasks.index import ReferenceIndex, report_warning
from evaltasks.metrics.base import BaseMetric, EmbeddingNeed
from evaltasks.results import EmbeddingCounts, EmbeddingModelInfo, ReferenceSetInfo
from evaltasks.test_case import EvalTestCase


def collect_embedding_needs(cases: Sequence[EvalTestCase], metrics: Sequence[BaseMetric]) -> dict[str, EmbeddingNeed]:
    """The unique texts each provider namespace must embed for ``cases`` × ``metrics``.

    Raises:
        CredentialsError: a provider needs credentials that are missing.
    """
    needs: dict[str, EmbeddingNeed] = {}
    for metric in metrics:
        metric.add_embedding_needs(cases, needs)
    return needs


def embed_references(
    provider: EmbeddingProvider,
    texts: Sequence[str],
    index: ReferenceIndex | None,
    *,
    probe: bool = True,
    vectors: bool = True,
) -> tuple[VectorTable, EmbeddingCounts]:
    """Embed unique reference ``texts`` through ``index`` (or directly when None).

    ``probe``: see :meth:`~evaltasks.index.ReferenceIndex.get_or_embed` (False when every text of the run
    goes through the index). ``vectors=False`` (with an index): store them only; the table's vectors have
    shape (n, 0). Returns the vectors and the counts (``references_computed``, ``references_reused``). Raises
    ProviderError when the provider fails.
    """
    table, computed, reused = _embed_unique(provider, texts, index, probe, vectors)
    return table, EmbeddingCounts(references_computed=computed, references_reused=reused)


def embed_outputs(
    provider: EmbeddingProvider, texts: Sequence[str], index: ReferenceIndex | None = None, *, probe: bool = True
) -> tuple[VectorTable, EmbeddingCounts]:
    """Embed unique non-empty output ``texts`` through ``index`` (one encode call for those not in it), or
    directly when None.

    ``probe``: as for :func:`embed_references`. Returns the vectors and the counts (``outputs_computed``,
    ``outputs_reused``: found in the index). Raises ProviderError when the provider fails.
    """
    table, computed, reused = _embed_unique(provider, texts, index, probe)
    return table, EmbeddingCounts(outputs_computed=computed, outputs_reused=reused)


def _embed_unique(
    provider: EmbeddingProvider,
    texts: Sequence[str],
    index: ReferenceIndex | None,
    probe: bool,
    vectors: bool = True,
) -> tuple[VectorTable, int, int]:
    """The vectors of the unique ``texts`` through ``index`` (directly when None), and how many were computed
    and reused (what :func:`embed_references` and :func:`embed_outputs` count under their own names)."""
    unique = list(dict.fromkeys(texts))
    if index is None:
        table = VectorTable.from_batch(unique, provider.embed_batch(unique)) if unique else VectorTable([], _empty())
        return table, len(unique), 0
    lookup = index.get_or_embed(provider, unique, probe=probe, vectors=vectors)
    return lookup.table, lookup.computed, lookup.reused


def embed_texts(
    provider: EmbeddingProvider, references: Sequence[str], outputs: Sequence[str], index: ReferenceIndex | None
) -> tuple[VectorTable, EmbeddingCounts]:
    """Embed the unique ``references`` and ``outputs`` of one provider namespace; a text in both is embedded
    once and counted as a reference.

    With ``index``: one lookup for all of them (a text is a text: outputs are stored beside references), one
    encode call for the texts not stored yet, and no provider call at all when every text is stored (no
    dimension probe: every vector comes from the one store). Without: references then outputs embedded
    directly (two calls), nothing written.

    Returns the vectors (references first, then outputs) and the counts. Raises ProviderError when the
    provider fails.
    """
    refs = list(dict.fromkeys(references))
    ref_set = set(refs)
    outs = [t for t in dict.fromkeys(outputs) if t not in ref_set]
    if index is None:
        ref_table, ref_counts = embed_references(provider, refs, None)
        out_table, out_counts = embed_outputs(provider, outs)
        return VectorTable.concat([ref_table, out_table]), ref_counts.add(out_counts)
    lookup = index.get_or_embed(provider, refs + outs, probe=False)
    stored = lookup.stored if lookup.stored is not None else np.zeros(len(refs) + len(outs), dtype=bool)
    ref_reused, out_reused = int(stored[: len(refs)].sum()), int(stored[len(refs) :].sum())
    return lookup.table, EmbeddingCounts(
        references_computed=len(refs) - ref_reused,
        references_reused=ref_reused,
        outputs_computed=len(outs) - out_reused,
        outputs_reused=out_reused,
    )


def _report_embedding_stage(
    provider: EmbeddingProvider, references: Iterable[str], outputs: Iterable[str], index: ReferenceIndex | None
) -> None:
    """Name the stage ``embedding N texts (MODEL)`` (:mod:`evaltasks.engine.progress`, no count: the encode is one
    call) when texts of one namespace are not stored yet: what ``evaltasks calibrate`` shows while it embeds.
    Nothing without a stage callback, or when every text is stored."""
    if not _progress.has_stage_callback():
        return
    texts = list(dict.fromkeys([*references, *outputs]))
    missing = len(index.missing_texts(provider, texts)) if index is not None else len(texts)
    if missing:
        _progress.stage(f"embedding {missing:,} text{'' if missing == 1 else 's'} ({provider.model_name})", None)


def _empty() -> np.ndarray:
    return np.zeros((0, 0), dtype=np.float32)


def prepare_reference_searches(
    metrics: Sequence[BaseMetric],
    tables: dict[str, VectorTable],
    needs: dict[str, EmbeddingNeed],
    index: ReferenceIndex | None,
    cases: int,
    stored: dict[str, VectorTable] | None = None,
) -> list[ReferenceSetInfo]:
    """Build (or load) the FAISS search of every metric's reference set and measure approximate recall.

    Searches persist under ``<index>/sets/`` when an index is used. ``stored``: per namespace, the costs and
    truncation of the index-only texts (:attr:`~evaltasks.metrics.base.EmbeddingNeed.index_only`) embedded
    into ``index`` without their vectors; a set whose vectors ``tables`` lacks is read from ``index``.
    Returns one info per set searched.
    """
    infos = []
    for metric in metrics:
        reference_set = getattr(metric, "reference_set", None)
        namespace = metric.embedding_namespace
        if reference_set is None or namespace not in tables:
            continue
        directory = index.root / "sets" if index is not None else None
        outputs = [t for t in needs[namespace].outputs if t in tables[namespace]]
        _, recall = metric.prepare_search(  # type: ignore[attr-defined]  # the reference-set metrics have it
            tables[namespace],
            directory,
            cases,
            index=index,
            stored=(stored or {}).get(namespace),
            queries=tables[namespace].rows(outputs) if outputs else None,
        )
        config = recall.query_config
        infos.append(
            ReferenceSetInfo(
                name=reference_set.name,
                metric=metric.name,
                count=len(reference_set),
                sha256=reference_set.sha256,
                search=reference_set.search.label(),
                recall_at_1=recall.recall_at_1,
                recall_at_10=recall.recall_at_10,
                nprobe=config.nprobe if config.kind == "ivf" else None,
                ef_search=config.ef_search if config.kind == "hnsw" else None,
                target_recall=config.target_recall,
            )
        )
        if recall.short_of_target():
            widths = f"nprobe {config.nprobe}" if config.kind == "ivf" else f"ef_search {config.ef_search}"
            where = (
                f"wider searches found no more than {widths}"
                if recall.plateau
                else f"even at the widest search, {widths}"
            )
            report_warning(
                f"reference set '{reference_set.name}': recall@10 {recall.recall_at_10:.3f} on the run's "
                f"outputs is below its target_recall {config.target_recall} ({where}); "
                "search: flat is exact"
            )
    return infos


def model_infos(needs: dict[str, EmbeddingNeed], dimensions: dict[str, int] | None = None) -> list[EmbeddingModelInfo]:
    """One :class:`EmbeddingModelInfo` per provider namespace used."""
    return [
        EmbeddingModelInfo(
            provider=need.provider.provider,
            model=need.provider.model_name,
            fingerprint=need.provider.fingerprint,
            dimensions=(dimensions or {}).get(ns),
        )
        for ns, need in needs.items()
    ]
