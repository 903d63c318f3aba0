"""Alias module at the seed's import path ``eval_lib.metrics.vector_metrics``."""

from evaltasks.metrics.reference_match import ReferenceMatchMetric

__all__ = ["ReferenceMatchMetric"]
