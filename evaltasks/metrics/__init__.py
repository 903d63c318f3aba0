"""Metrics and the registry that maps a metric's class name to its class.

Adding a metric = one module in this package + one line in :data:`METRICS` + its tests.
"""

from __future__ import annotations

from evaltasks.metrics.base import BaseMetric, EmbeddingNeed
from evaltasks.metrics.language_detection import LanguageDetectionMetric
from evaltasks.metrics.length_check import LengthCheckMetric
from evaltasks.metrics.reference_match import ReferenceMatchMetric

METRICS: dict[str, type[BaseMetric]] = {
    "LengthCheckMetric": LengthCheckMetric,
    "LanguageDetectionMetric": LanguageDetectionMetric,
    "ReferenceMatchMetric": ReferenceMatchMetric,
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


__all__ = ["METRICS", "BaseMetric", "EmbeddingNeed", "LanguageDetectionMetric", "LengthCheckMetric", "ReferenceMatchMetric", "get_metric_class"]
