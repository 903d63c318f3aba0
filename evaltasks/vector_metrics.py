"""Alias of eval-ai-library 0.8's ``eval_lib.vector_metrics`` module path."""

from evaltasks.metrics.reference_match import ReferenceMatchMetric
from evaltasks.metrics.semantic_similarity import SemanticSimilarityMetric

__all__ = ["ReferenceMatchMetric", "SemanticSimilarityMetric"]
