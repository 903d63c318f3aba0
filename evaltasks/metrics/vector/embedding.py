"""What the embedding metrics share: provider options, the shared provider, direct embedding, the clamped cosine.

:class:`~evaltasks.ReferenceMatchMetric` and :class:`~evaltasks.SemanticSimilarityMetric` both compare unit-norm
embeddings of texts by cosine similarity clamped to [0, 1]
(docs/metrics/vector.md#embedding-metrics and docs/embeddings.md#embedding-providers); this module holds that common part once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from evaltasks.embeddings import DEFAULT_MODELS, PROVIDERS, EmbeddingProvider, VectorTable, get_provider
from evaltasks.errors import quote
from evaltasks.metrics.base import BaseMetric, EmbeddingNeed
from evaltasks.test_case import EvalTestCase


def clamp_similarities(similarities: np.ndarray) -> np.ndarray:
    """Clamp cosine similarities to [0, 1] in place and return them (a negative cosine scores 0.0).

    Args:
        similarities: float array of any shape (cosines of unit-norm vectors, in [-1, 1] up to rounding).
    """
    np.clip(similarities, 0.0, 1.0, out=similarities)
    return similarities


class EmbeddingMetric(BaseMetric):
    """Base of the metrics that embed texts with a provider (``local`` or ``openai``).

    Args:
        threshold: minimum passing score, in [0, 1].
        embedding_provider: ``"openai"`` or ``"local"``.
        model_name: embedding model; None means the provider default (``text-embedding-3-small`` for openai,
            ``all-MiniLM-L6-v2`` for local).
        provider_options: keyword arguments of the provider (docs/embeddings.md#embedding-providers).
        name: the name in results (default: the class name).

    Raises:
        ValueError: an unknown provider, an empty or non-string ``model_name``, ``provider_options`` that is not
            a mapping, a threshold outside [0, 1].
    """

    def __init__(
        self,
        threshold: float,
        embedding_provider: str,
        model_name: str | None,
        provider_options: dict[str, Any] | None,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        if embedding_provider not in PROVIDERS:
            raise ValueError(f"embedding_provider must be one of {sorted(PROVIDERS)}, got {quote(embedding_provider)}")
        if model_name is not None and (not isinstance(model_name, str) or not model_name.strip()):
            raise ValueError(f"model_name must be a non-empty string, got {quote(model_name)}")
        if provider_options is not None and not isinstance(provider_options, dict):
            raise ValueError(f"provider_options must be a mapping, got {type(provider_options).__name__}")
        self.embedding_provider = embedding_provider
        self.model_name = model_name or DEFAULT_MODELS[embedding_provider]
        self.provider_options: dict[str, Any] = dict(provider_options or {})

    @property
    def provider(self) -> EmbeddingProvider:
        """The shared embedding provider. Raises CredentialsError when credentials are missing, ValueError
        (TypeError for unknown names) when ``provider_options`` are invalid."""
        return get_provider(self.embedding_provider, self.model_name, **self.provider_options)

    @property
    def embedding_namespace(self) -> str:
        """The namespace of this metric's provider and model."""
        return self.provider.namespace

    def provider_config(self) -> dict[str, Any]:
        """``embedding_provider``, ``model_name`` and ``provider_options`` (without ``api_key``) for :meth:`config`."""
        return {
            "embedding_provider": self.embedding_provider,
            "model_name": self.model_name,
            "provider_options": {k: v for k, v in sorted(self.provider_options.items()) if k != "api_key"},
        }

    def _embed_directly(self, cases: Sequence[EvalTestCase]) -> dict[str, VectorTable]:
        """Embed what :meth:`add_embedding_needs` registers for ``cases``, without an index (``score_batch``
        called with no vectors). Raises ProviderError when the provider fails."""
        needs: dict[str, EmbeddingNeed] = {}
        self.add_embedding_needs(cases, needs)
        tables = {}
        for namespace, need in needs.items():
            texts = list(dict.fromkeys([*need.references, *need.outputs]))
            tables[namespace] = need.share_costs(VectorTable.from_batch(texts, need.provider.embed_batch(texts)))
        return tables
