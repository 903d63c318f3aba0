"""The embedding provider protocol and the vector table that carries embeddings to metrics."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns texts into L2-normalised float32 vectors.

    Attributes:
        provider: the provider's short name (``"local"``, ``"openai"``).
        model_name: the model as the user named it.
        fingerprint: identifies the exact weights (local: a hash of the model's config and weight files;
            API: model name and dimensions), so vectors of different weights never mix.
        namespace: the reference-index namespace of this provider, model and fingerprint.
    """

    provider: str
    model_name: str

    @property
    def fingerprint(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (no empty strings) into a float32 array of shape (len(texts), d), rows of norm 1.

        Raises:
            ProviderError: the provider failed (``transient`` says whether a retry may help).
        """
        ...


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """Return ``vectors`` as C-contiguous float32 with every row scaled to unit L2 norm (zero rows stay 0)."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.size == 0:
        return vectors
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    np.divide(vectors, norms, out=vectors, where=norms > 0)
    return vectors


class VectorTable:
    """Embeddings of unique texts: ``text -> row`` of a float32 matrix of shape (n, d).

    Built by the engine for one provider namespace and handed to metrics, so each unique text is embedded
    once per run however many cases or metrics use it.
    """

    def __init__(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        if len(texts) != len(vectors):
            raise ValueError(f"VectorTable: {len(texts)} texts but {len(vectors)} vectors")
        self._row = {text: i for i, text in enumerate(texts)}
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)

    def __contains__(self, text: object) -> bool:
        return text in self._row

    def __len__(self) -> int:
        return len(self._row)

    @property
    def texts(self) -> list[str]:
        """The texts, in row order."""
        return list(self._row)

    def rows(self, texts: Iterable[str]) -> np.ndarray:
        """The vectors of ``texts`` as an array of shape (len(texts), d). Raises KeyError for an unknown text."""
        return self.vectors[[self._row[t] for t in texts]]

    def subset(self, texts: Iterable[str]) -> VectorTable:
        """A table holding only ``texts`` (deduplicated, order kept): what one batch of cases needs."""
        unique = list(dict.fromkeys(texts))
        return VectorTable(unique, self.rows(unique) if unique else self.vectors[:0])

    @classmethod
    def concat(cls, tables: Iterable[VectorTable]) -> VectorTable:
        """Merge tables of the same namespace (a text present in several keeps its first vector)."""
        texts: list[str] = []
        blocks: list[np.ndarray] = []
        for table in tables:
            texts.extend(table._row)
            blocks.append(table.vectors)
        if not blocks:
            return cls([], np.zeros((0, 0), dtype=np.float32))
        merged = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
        first = {}
        for i, text in enumerate(texts):
            first.setdefault(text, i)
        return cls(list(first), merged[list(first.values())])
