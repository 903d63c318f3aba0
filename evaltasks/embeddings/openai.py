"""OpenAI embeddings through the official ``openai`` client (also any OpenAI-compatible server)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

import numpy as np

from evaltasks.embeddings.base import normalize_rows
from evaltasks.errors import CredentialsError, ProviderError

DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
MAX_INPUTS_PER_REQUEST = 2048  # the embeddings endpoint's documented per-request input limit


class OpenAIEmbeddingProvider:
    """Embeddings from the OpenAI API (or a compatible server at ``base_url``).

    Credentials: ``api_key`` or ``OPENAI_API_KEY``; server: ``base_url`` or ``OPENAI_BASE_URL``. Texts are
    sent in requests of at most 2048 inputs; the client retries 429/5xx/timeouts ``max_retries`` times,
    honouring ``Retry-After``.

    Raises:
        CredentialsError: at construction, when no API key is given or set in ``OPENAI_API_KEY``.
    """

    provider = "openai"

    def __init__(
        self,
        model_name: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        dimensions: int | None = None,
        timeout: float = 60.0,
        max_retries: int = 5,
    ) -> None:
        self.model_name = model_name or DEFAULT_OPENAI_MODEL
        self.dimensions = dimensions
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            raise CredentialsError(
                "the openai embedding provider needs an API key: set the OPENAI_API_KEY environment variable, "
                "or use embedding_provider: local (sentence-transformers, offline)"
            )
        import openai

        self._openai = openai
        self._client = openai.OpenAI(
            api_key=key, base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
            timeout=timeout, max_retries=max_retries,
        )

    @property
    def fingerprint(self) -> str:
        """Hash of the model name and requested dimensions (API weights are identified by name)."""
        return hashlib.sha256(f"{self.model_name}:{self.dimensions}".encode()).hexdigest()[:16]

    @property
    def namespace(self) -> str:
        """``openai/<model>/<fingerprint>``."""
        return f"openai/{self.model_name}/{self.fingerprint}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (non-empty strings) into float32 (n, d), rows L2-normalised.

        Raises:
            CredentialsError: the key was rejected (401/403).
            ProviderError: any other failure; ``transient`` is True for rate limits, timeouts, connection
                errors and 5xx that persisted through the client's retries.
        """
        openai = self._openai
        blocks: list[np.ndarray] = []
        for start in range(0, len(texts), MAX_INPUTS_PER_REQUEST):
            chunk = list(texts[start : start + MAX_INPUTS_PER_REQUEST])
            kwargs = {"dimensions": self.dimensions} if self.dimensions else {}
            try:
                response = self._client.embeddings.create(model=self.model_name, input=chunk, **kwargs)
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                raise CredentialsError(f"the OpenAI API rejected the key (OPENAI_API_KEY): {exc}") from exc
            except (openai.RateLimitError, openai.APITimeoutError, openai.APIConnectionError,
                    openai.InternalServerError) as exc:
                raise ProviderError(f"OpenAI embeddings request failed after retries: {exc}", transient=True) from exc
            except openai.OpenAIError as exc:
                raise ProviderError(f"OpenAI embeddings request failed: {exc}") from exc
            data = sorted(response.data, key=lambda item: item.index)
            if len(data) != len(chunk):
                raise ProviderError(
                    f"OpenAI returned {len(data)} vectors for {len(chunk)} inputs", transient=True
                )
            block = np.asarray([item.embedding for item in data], dtype=np.float32)
            if not np.all(np.isfinite(block)):
                raise ProviderError("OpenAI returned a vector with NaN or infinite values", transient=True)
            blocks.append(block)
        if not blocks:
            return np.zeros((0, self.dimensions or 0), dtype=np.float32)
        return normalize_rows(np.concatenate(blocks))
