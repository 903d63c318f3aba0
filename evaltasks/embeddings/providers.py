"""The embedding providers by name (``local``: sentence-transformers, ``openai``), and the shared instances.

:func:`get_provider` returns one shared provider instance per (provider, model, options) in the process,
so every metric naming the same model shares one loaded model.
"""

from __future__ import annotations

import threading
from typing import Any

from evaltasks.embeddings.base import EmbeddingProvider
from evaltasks.embeddings.local import DEFAULT_LOCAL_MODEL, LocalEmbeddingProvider
from evaltasks.embeddings.openai import DEFAULT_OPENAI_MODEL, OpenAIEmbeddingProvider

PROVIDERS: dict[str, type] = {"local": LocalEmbeddingProvider, "openai": OpenAIEmbeddingProvider}
DEFAULT_MODELS = {"local": DEFAULT_LOCAL_MODEL, "openai": DEFAULT_OPENAI_MODEL}

_instances: dict[tuple[str, str, tuple[tuple[str, Any], ...]], EmbeddingProvider] = {}
_lock = threading.Lock()


def get_provider(provider: str, model_name: str | None = None, **options: Any) -> EmbeddingProvider:
    """The shared provider for ``provider`` (``"local"`` or ``"openai"``) and ``model_name``.

    Raises:
        ValueError: unknown provider.
        CredentialsError: the provider needs credentials that are missing.
    """
    if provider not in PROVIDERS:
        raise ValueError(f"unknown embedding_provider '{provider}': expected one of {sorted(PROVIDERS)}")
    model = model_name or DEFAULT_MODELS[provider]
    key = (provider, model, tuple(sorted(options.items())))
    with _lock:
        if key not in _instances:
            _instances[key] = PROVIDERS[provider](model, **options)
        return _instances[key]


__all__ = ["DEFAULT_MODELS", "PROVIDERS", "get_provider"]
