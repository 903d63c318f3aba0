"""Embedding providers: ``local`` (sentence-transformers) and ``openai``.

:func:`get_provider` (:mod:`evaltasks.embeddings.providers`) returns one shared provider instance per (provider,
model, options) in the process, so every metric naming the same model shares one loaded model.
"""

from evaltasks.embeddings.base import EmbeddingProvider, VectorTable, normalize_rows
from evaltasks.embeddings.local import DEFAULT_LOCAL_MODEL, LocalEmbeddingProvider
from evaltasks.embeddings.openai import DEFAULT_OPENAI_MODEL, OpenAIEmbeddingProvider
from evaltasks.embeddings.providers import DEFAULT_MODELS, PROVIDERS, get_provider

__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "DEFAULT_MODELS",
    "DEFAULT_OPENAI_MODEL",
    "PROVIDERS",
    "EmbeddingProvider",
    "LocalEmbeddingProvider",
    "OpenAIEmbeddingProvider",
    "VectorTable",
    "get_provider",
    "normalize_rows",
]
