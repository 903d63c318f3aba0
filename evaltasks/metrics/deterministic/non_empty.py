"""NonEmptyMetric: is the output more than whitespace?

Source: eval-ai-library's ``NonEmptyMetric`` documentation page
(https://library.eval-ai.com/metrics/deterministic/non-empty); "whitespace" is Unicode's White_Space property
(docs/metrics/deterministic.md#text-comparison).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from evaltasks.embeddings.base import VectorTable
from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.metrics.text import WHITE_SPACE
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase


@register_metric("NonEmptyMetric")
class NonEmptyMetric(BaseMetric):
    """Score 1.0 when the output holds a character that is not Unicode White_Space, else 0.0.

    White_Space is :data:`evaltasks.metrics.text.WHITE_SPACE` (tab, newlines, space, U+00A0, U+3000, U+2028…);
    zero-width characters such as U+200B and the separators U+001C..U+001F are not whitespace, so an output of
    only those is non-empty.

    Args:
        threshold: minimum passing score, default 1.0.
        name: the name in results (default ``"NonEmptyMetric"``).

    Raises:
        ValueError: a threshold outside [0, 1].

    ``evaluation_log`` keys: ``non_empty`` (one dict shared by the results of equal verdicts).
    """

    version: ClassVar[str] = "1"

    def __init__(self, threshold: float = 1.0, *, name: str | None = None) -> None:
        super().__init__(threshold, name=name)

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name)."""
        return {"threshold": self.threshold, "name": self.name}

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Check each case's output; no embeddings involved. The cases of one verdict share one (immutable)
        result object."""
        results: list[MetricResult] = []
        append, scored, name, threshold, white_space = (
            results.append,
            MetricResult.scored,
            self.name,
            self.threshold,
            WHITE_SPACE,
        )
        hit = scored(name, 1.0, threshold, "Output is non-empty.", {"non_empty": True})
        miss = scored(name, 0.0, threshold, "Output is empty or whitespace-only.", {"non_empty": False})
        for case in cases:
            append(hit if case.actual_output.strip(white_space) else miss)
        return results
