"""Alias module at the seed's import path ``eval_lib.metrics.vector_metrics``."""

from evaltasks.metrics.reference_match import ReferenceMatchMetric
from evaltasks.metrics.semantic_similarity import SemanticSimilarityMetric

__all__ = ["ReferenceMatchMetric", "SemanticSimilarityMetric"]
