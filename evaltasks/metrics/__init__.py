"""Metrics and the registry that maps a metric's class name to its class.

Adding a metric = one module in this package + one line in :data:`METRICS` + its tests.
"""

from __future__ import annotations

from evaltasks.metrics.base import BaseMetric, EmbeddingNeed
from evaltasks.metrics.contains import ContainsMetric
from evaltasks.metrics.ends_with import EndsWithMetric
from evaltasks.metrics.exact_match import ExactMatchMetric
from evaltasks.metrics.length_check import LengthCheckMetric
from evaltasks.metrics.non_empty import NonEmptyMetric
from evaltasks.metrics.reference_match import ReferenceMatchMetric
from evaltasks.metrics.starts_with import StartsWithMetric

METRICS: dict[str, type[BaseMetric]] = {
    "LengthCheckMetric": LengthCheckMetric,
    "ReferenceMatchMetric": ReferenceMatchMetric,
    "ExactMatchMetric": ExactMatchMetric,
    "ContainsMetric": ContainsMetric,
    "StartsWithMetric": StartsWithMetric,
    "EndsWithMetric": EndsWithMetric,
    "NonEmptyMetric": NonEmptyMetric,
}


def get_metric_class(name: str) -> type[BaseMetric]:
    """The metric class registered as ``name``. Raises KeyError (with close matches) when unknown."""
    try:
        return METRICS[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, METRICS, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise KeyError(f"unknown metric '{name}'{hint}; known metrics: {', '.join(METRICS)}") from None


__all__ = [
    "METRICS", "BaseMetric", "ContainsMetric", "EmbeddingNeed", "EndsWithMetric", "ExactMatchMetric",
    "LengthCheckMetric", "NonEmptyMetric", "ReferenceMatchMetric", "StartsWithMetric", "get_metric_class",
]
