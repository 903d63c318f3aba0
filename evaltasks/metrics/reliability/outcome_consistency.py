"""OutcomeConsistencyMetric: do repeated runs of the same input agree?

Source: eval-ai-library 0.8.2's ``OutcomeConsistencyMetric`` (no documentation page exists): the share of the
pairs of outputs whose normalised edit similarity reaches ``similarity_threshold``. Where evaltasks differs
(docs/metrics/reliability.md#outcomeconsistencymetric): the outputs are the case's ``multi_outputs`` (a target's
``repeat: K`` samples, or a dataset column), which the library never reads; a case without two outputs is an
input error, where the library scores it 1.0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from evaltasks.embeddings.base import VectorTable
from evaltasks.metrics.base import BaseMetric, UnitFloat, check_threshold
from evaltasks.metrics.registry import register_metric
from evaltasks.metrics.reliability._similarity import pairwise
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase


@register_metric("OutcomeConsistencyMetric")
class OutcomeConsistencyMetric(BaseMetric):
    """Score = agreeing pairs / pairs over the case's ``multi_outputs``, compared two by two.

    A pair agrees when its normalised edit similarity (whitespace-stripped, lower-cased, ``1 - Levenshtein
    distance / longer length``, computed by rapidfuzz) is at least ``similarity_threshold``. K outputs make
    K(K-1)/2 pairs.

    Args:
        threshold: minimum passing score, default 0.7 (eval-ai-library's).
        similarity_threshold: similarity from which two outputs agree, in [0, 1], default 0.85 (the library's).
        name: the name in results (default ``"OutcomeConsistencyMetric"``).

    Raises:
        ValueError: a threshold outside [0, 1].

    A case needs ``multi_outputs`` with at least two outputs (:meth:`validate_case`): a suite fills it from its
    target's ``repeat: K`` (K >= 2), every sample of a case carrying all K outputs. ``evaluation_log`` keys:
    ``outputs``, ``pairs``, ``agreeing_pairs``, ``min_similarity``, ``mean_similarity``.
    """

    required_fields: ClassVar[tuple[str, ...]] = ("multi_outputs",)
    version: ClassVar[str] = "1"

    def __init__(
        self, threshold: float = 0.7, similarity_threshold: UnitFloat = 0.85, *, name: str | None = None
    ) -> None:
        super().__init__(threshold, name=name)
        try:
            self.similarity_threshold = check_threshold(similarity_threshold)
        except ValueError:
            raise ValueError(f"similarity_threshold must be a number in [0, 1], got {similarity_threshold!r}") from None

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, similarity_threshold)."""
        return {"threshold": self.threshold, "name": self.name, "similarity_threshold": self.similarity_threshold}

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs at least two ``multi_outputs``: one output measures no consistency."""
        count = len(case.multi_outputs or [])
        if count < 2:
            return [
                (
                    "multi_outputs",
                    f"needs at least 2 outputs of the same input to compare, got {count} (give the target "
                    "`repeat: K` with K >= 2, or a dataset column multi_outputs)",
                )
            ]
        return []

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Compare each case's outputs pairwise. Raises ValueError for a case with fewer than two outputs."""
        results = []
        for case in cases:
            outputs = list(case.multi_outputs or [])
            if len(outputs) < 2:
                raise ValueError(self.validate_case(case)[0][1])
            agreeing, pairs, sims = pairwise(outputs, self.similarity_threshold)
            reason = (
                f"{agreeing} of {pairs} pairs of the {len(outputs)} outputs agree (edit similarity >= "
                f"{self.similarity_threshold:g}); lowest similarity {min(sims):.3f}."
            )
            log = {
                "outputs": len(outputs),
                "pairs": pairs,
                "agreeing_pairs": agreeing,
                "min_similarity": min(sims),
                "mean_similarity": sum(sims) / pairs,
            }
            results.append(MetricResult.scored(self.name, agreeing / pairs, self.threshold, reason, log))
        return results
