"""Vector metrics: cosine similarity of embeddings (an embedding model, local or remote; references searched
in the index). Their shared base is :class:`evaltasks.metrics.vector.embedding.EmbeddingMetric`."""

from evaltasks.metrics.vector.reference_match import ReferenceMatchMetric
from evaltasks.metrics.vector.semantic_similarity import SemanticSimilarityMetric

__all__ = ["ReferenceMatchMetric", "SemanticSimilarityMetric"]
