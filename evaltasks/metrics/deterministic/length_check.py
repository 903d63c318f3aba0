"""LengthCheckMetric: is the output's length within [min_length, max_length]?

Source: eval-ai-library's ``LengthCheckMetric`` documentation page (library.eval-ai.com, deterministic metrics);
the exact counting rules are docs/metrics/deterministic.md#lengthcheckmetric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.metrics.base import BaseMetric, NonNegativeInt
from evaltasks.metrics.registry import register_metric
from evaltasks.metrics.text import count_chars, count_words
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

UNITS = ("chars", "words")


@register_metric("LengthCheckMetric")
class LengthCheckMetric(BaseMetric):
    """Score 1.0 when the output's length is within ``[min_length, max_length]`` (inclusive), else 0.0.

    Units: ``"chars"`` counts extended grapheme clusters; ``"words"`` counts UAX #29 word segments holding a
    letter or digit (see :mod:`evaltasks.metrics.text`).

    Args:
        threshold: minimum passing score, default 1.0.
        min_length: inclusive lower bound, default 0.
        max_length: inclusive upper bound; None (default) means no upper bound.
        unit: ``"chars"`` (default) or ``"words"``.
        name: the name in results (default ``"LengthCheckMetric"``).

    Raises:
        ValueError: unknown unit, a negative or non-integer bound, ``min_length > max_length``, or a threshold
            outside [0, 1].

    ``evaluation_log`` keys: ``length``, ``unit``, ``min_length``, ``max_length``.
    """

    version: ClassVar[str] = "1"

    def __init__(
        self,
        threshold: float = 1.0,
        min_length: NonNegativeInt = 0,
        max_length: NonNegativeInt | None = None,
        unit: Literal["chars", "words"] = "chars",
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {list(UNITS)}, got {quote(unit)}")
        for label, bound in (("min_length", min_length), ("max_length", max_length)):
            if bound is None and label == "max_length":
                continue
            if isinstance(bound, bool) or not isinstance(bound, int):
                raise ValueError(f"{label} must be an integer, got {quote(bound)}")
            if bound < 0:
                raise ValueError(f"{label} must be >= 0, got {bound}")
        if max_length is not None and min_length > max_length:
            raise ValueError(f"min_length ({min_length}) must be <= max_length ({max_length})")
        self.min_length = min_length
        self.max_length = max_length
        self.unit = unit
        self._count = count_words if unit == "words" else count_chars

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, min_length, max_length, unit)."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "min_length": self.min_length,
            "max_length": self.max_length,
            "unit": self.unit,
        }

    def _range_text(self) -> str:
        upper = "no maximum" if self.max_length is None else f"max {self.max_length}"
        return f"min {self.min_length}, {upper}"

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Measure and score each case; no embeddings involved. The cases of one length share one (immutable)
        result object."""
        results: list[MetricResult] = []
        append = results.append
        lo, hi, unit, count, name, threshold = (
            self.min_length,
            self.max_length,
            self.unit,
            self._count,
            self.name,
            self.threshold,
        )
        shared: dict[int, MetricResult] = {}  # length -> result: many outputs share a length
        for case in cases:
            length = count(case.actual_output)
            result = shared.get(length)
            if result is None:
                score, reason = self._verdict(length)
                result = shared[length] = MetricResult.scored(
                    name, score, threshold, reason, {"length": length, "unit": unit, "min_length": lo, "max_length": hi}
                )
            append(result)
        return results

    def _verdict(self, length: int) -> tuple[float, str]:
        """(score, reason) of an output of ``length`` units."""
        lo, hi, unit = self.min_length, self.max_length, self.unit
        if length >= lo and (hi is None or length <= hi):
            return 1.0, f"Length {length} {unit} is within the allowed range ({self._range_text()})."
        if length < lo:
            return 0.0, f"Length {length} {unit} is below the minimum of {lo}."
        return 0.0, f"Length {length} {unit} is above the maximum of {hi}."
