"""SemanticSimilarityMetric: cosine similarity of the output's embedding with the expected output's.

Source: eval-ai-library's ``SemanticSimilarityMetric`` documentation page
(https://library.eval-ai.com/metrics/vector/semantic-similarity) and
docs/metrics/vector.md#semanticsimilaritymetric: the cosine of the two embeddings, clamped to [0, 1], with the same providers, options, index and
empty-text rule as :class:`~evaltasks.ReferenceMatchMetric`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from evaltasks.embeddings import VectorTable
from evaltasks.metrics.registry import register_metric
from evaltasks.metrics.vector.embedding import EmbeddingMetric, clamp_similarities
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase


@register_metric("SemanticSimilarityMetric")
class SemanticSimilarityMetric(EmbeddingMetric):
    """Embedding similarity between ``actual_output`` and ``expected_output``. No LLM is involved.

    score = clamp(cos(e(actual_output), e(expected_output)), 0, 1), with unit-norm embeddings ``e`` (so the
    cosine is a dot product); a negative cosine scores 0.0. The expected outputs are embedded through the
    reference index like references (content-addressed: a warm run embeds only the outputs), outputs directly;
    each unique text of a run is embedded once.

    Args:
        threshold: minimum passing score, default 0.7.
        embedding_provider: ``"openai"`` (default, as eval-ai-library's docs) or ``"local"``.
        model_name: embedding model; None means the provider default (``text-embedding-3-small`` for openai,
            ``all-MiniLM-L6-v2`` for local).
        provider_options: keyword arguments of the provider, as for ReferenceMatchMetric
            (docs/embeddings.md#embedding-providers); a suite's top-level ``embeddings:`` gives defaults.
        name: the name in results (default ``"SemanticSimilarityMetric"``).

    Raises:
        ValueError: an unknown provider, an empty ``model_name``, ``provider_options`` that is not a mapping, a
            threshold outside [0, 1].

    A case needs ``expected_output`` (None is invalid input, reported before scoring). When the output or the
    expected output is empty or whitespace only, the case scores 0.0 and neither text is sent to a provider
    (as ReferenceMatchMetric does for an empty output). ``evaluation_log`` keys: ``cosine_similarity`` (the
    clamped cosine, i.e. the score, as eval-ai-library logs it), ``provider``, ``model``, ``output_truncated``
    and ``expected_output_truncated`` (the text exceeded the model's input limit and was cut).
    ``evaluation_cost``: the case's share of the US dollars spent embedding its two texts in this run.
    """

    version: ClassVar[str] = "1"
    required_fields: ClassVar[tuple[str, ...]] = ("actual_output", "expected_output")

    def __init__(
        self,
        threshold: float = 0.7,
        embedding_provider: Literal["openai", "local"] = "openai",
        model_name: str | None = None,
        *,
        provider_options: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, embedding_provider, model_name, provider_options, name=name)

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, embedding_provider, model_name, provider_options without
        ``api_key``)."""
        return {"threshold": self.threshold, "name": self.name, **self.provider_config()}

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs an ``expected_output`` (an empty one is allowed and scores 0.0)."""
        if case.expected_output is None:
            return [("expected_output", "is missing")]
        return []

    def embedding_texts(self, case: EvalTestCase) -> tuple[list[str], list[str]]:
        """([expected_output], [actual_output]); neither when either is empty or whitespace only (scored 0.0)."""
        expected = case.expected_output
        if not expected or not expected.strip() or not case.actual_output.strip():
            return [], []
        return [expected], [case.actual_output]

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Score each case from the vectors of its output and expected output (embedded here when not given).

        Raises:
            ProviderError: ``vectors`` is None and the provider failed.
        """
        if vectors is None:
            vectors = self._embed_directly(cases)
        scored = [i for i, case in enumerate(cases) if self.embedding_texts(case)[1]]
        results: list[MetricResult | None] = [None] * len(cases)
        name, threshold, provider, model = self.name, self.threshold, self.embedding_provider, self.model_name
        if scored:
            table = vectors[self.embedding_namespace]
            out_rows = table.indices(cases[i].actual_output for i in scored)
            exp_rows = table.indices(cases[i].expected_output for i in scored)  # type: ignore[misc]
            sims = clamp_similarities(np.einsum("ij,ij->i", table.vectors[out_rows], table.vectors[exp_rows]))
            costs = (table.costs[out_rows] + table.costs[exp_rows]).tolist()
            out_cut, exp_cut = table.truncated[out_rows].tolist(), table.truncated[exp_rows].tolist()
            scored_result = MetricResult.scored
            for i, score, cost, out_flag, exp_flag in zip(
                scored, sims.astype(np.float64).tolist(), costs, out_cut, exp_cut
            ):
                log = {
                    "cosine_similarity": round(score, 6),
                    "provider": provider,
                    "model": model,
                    "output_truncated": out_flag,
                    "expected_output_truncated": exp_flag,
                }
                reason = f"Cosine similarity {score:.4f} of the output with the expected output; threshold {threshold}."
                results[i] = scored_result(name, score, threshold, reason, log, cost)
        for i, case in enumerate(cases):
            if results[i] is None:
                results[i] = self._empty(case, provider, model)
        return results  # type: ignore[return-value]

    def _empty(self, case: EvalTestCase, provider: str, model: str) -> MetricResult:
        """The 0.0 result of a case whose output or expected output is empty or whitespace only."""
        which = "output" if not case.actual_output.strip() else "expected output"
        log = {
            "cosine_similarity": 0.0,
            "provider": provider,
            "model": model,
            "output_truncated": False,
            "expected_output_truncated": False,
        }
        return MetricResult.scored(
            self.name,
            0.0,
            self.threshold,
            f"The {which} is empty or whitespace only, so nothing is compared (score 0.0).",
            log,
        )
