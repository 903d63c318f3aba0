"""ReferenceMatchMetric: cosine similarity of the output's embedding with reference embeddings.

Source: the eval-ai-library ``ReferenceMatchMetric`` documentation (``shared/seeds/002_*.txt``) and issue #2:
each similarity is clamped to [0, 1], then aggregated by ``max`` or ``mean``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from evaltasks.embeddings import DEFAULT_MODELS, PROVIDERS, EmbeddingProvider, VectorTable, get_provider
from evaltasks.metrics.base import BaseMetric, EmbeddingNeed
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

AGGREGATIONS = ("max", "mean")
MAX_LOGGED_SIMILARITIES = 100  # above this many references the log keeps the top ones only
TOP_SIMILARITIES = 10


class ReferenceMatchMetric(BaseMetric):
    """Embedding similarity between ``actual_output`` and a list of references, aggregated by max or mean.

    score = aggregate_i( clamp(cos(e(output), e(reference_i)), 0, 1) ), with unit-norm embeddings ``e``
    so the cosine is a dot product. No LLM is involved.

    Args:
        threshold: minimum passing score, default 0.7.
        references: reference texts; None (default) means "use each test case's ``references``".
        aggregation: ``"max"`` (default) or ``"mean"``.
        embedding_provider: ``"openai"`` (default, as the seed) or ``"local"``.
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
        references: list[str] | None = None,
        aggregation: Literal["max", "mean"] = "max",
        embedding_provider: Literal["openai", "local"] = "openai",
        model_name: str | None = None,
        *,
        provider_options: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        if aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {list(AGGREGATIONS)}, got {aggregation!r}")
        if embedding_provider not in PROVIDERS:
            raise ValueError(f"embedding_provider must be one of {sorted(PROVIDERS)}, got {embedding_provider!r}")
        if references is not None:
            if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
                raise ValueError("references must be a list of strings")
            if not references:
                raise ValueError("references must not be an empty list (use None to take each case's references)")
            if any(not r.strip() for r in references):
                raise ValueError("references must not contain empty strings")
        if model_name is not None and (not isinstance(model_name, str) or not model_name.strip()):
            raise ValueError(f"model_name must be a non-empty string, got {model_name!r}")
        self.references = list(references) if references is not None else None
        self.aggregation = aggregation
        self.embedding_provider = embedding_provider
        self.model_name = model_name or DEFAULT_MODELS[embedding_provider]
        if provider_options is not None and not isinstance(provider_options, dict):
            raise ValueError(f"provider_options must be a mapping, got {type(provider_options).__name__}")
        self.provider_options: dict[str, Any] = dict(provider_options or {})

    @property
    def provider(self) -> EmbeddingProvider:
        """The shared embedding provider. Raises CredentialsError when credentials are missing, ValueError
        (TypeError for unknown names) when ``provider_options`` are invalid."""
        return get_provider(self.embedding_provider, self.model_name, **self.provider_options)

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, references, aggregation, embedding_provider, model_name)."""
        return {
            **super().config(), "references": self.references, "aggregation": self.aggregation,
            "embedding_provider": self.embedding_provider, "model_name": self.model_name,
            "provider_options": {k: v for k, v in sorted(self.provider_options.items()) if k != "api_key"},
        }

    def references_for(self, case: EvalTestCase) -> list[str]:
        """The references ``case`` is compared with: the metric's own, else the case's (possibly empty)."""
        return self.references if self.references is not None else list(case.references or [])

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs references (its own when the metric has none), none of them empty."""
        if self.references is not None:
            return []
        if not case.references:
            return [("references", "is missing or empty, and the metric has no references of its own")]
        empty = [i for i, r in enumerate(case.references) if not r.strip()]
        if empty:
            return [("references", f"item(s) {empty} are empty strings")]
        return []

    @property
    def embedding_namespace(self) -> str:
        """The namespace of this metric's provider and model."""
        return self.provider.namespace

    def embedding_texts(self, case: EvalTestCase) -> tuple[list[str], list[str]]:
        """The case's references and its output (none when the output is empty or whitespace only)."""
        return self.references_for(case), ([case.actual_output] if case.actual_output.strip() else [])

    def _embed_directly(self, cases: Sequence[EvalTestCase]) -> dict[str, VectorTable]:
        needs: dict[str, EmbeddingNeed] = {}
        self.add_embedding_needs(cases, needs)
        tables = {}
        for namespace, need in needs.items():
            texts = list(dict.fromkeys([*need.references, *need.outputs]))
            tables[namespace] = need.share_costs(VectorTable.from_batch(texts, need.provider.embed_batch(texts)))
        return tables

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Score each case from the vectors of its output and references (embedded here when not given)."""
        if vectors is None:
            vectors = self._embed_directly(cases)
        table = vectors.get(self.embedding_namespace) if cases else None
        reduce = np.max if self.aggregation == "max" else np.mean
        results = []
        for case in cases:
            refs = self.references_for(case)
            log: dict[str, Any] = {
                "aggregation": self.aggregation, "provider": self.embedding_provider, "model": self.model_name,
                "reference_count": len(refs),
            }
            if not case.actual_output.strip():
                log["similarities"] = []
                results.append(MetricResult.scored(
                    self.name, 0.0, self.threshold,
                    "The output is empty or whitespace only, so it matches no reference (score 0.0).", log,
                ))
                continue
            assert table is not None
            ref_rows = table.indices(refs)
            out_row = table.indices([case.actual_output])[0]
            sims = table.vectors[ref_rows] @ table.vectors[out_row]
            np.clip(sims, 0.0, 1.0, out=sims)
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
