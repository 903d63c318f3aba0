"""The embedding provider protocol, the batch it returns, and the vector table that carries embeddings."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass
class EmbeddingBatch:
    """What :meth:`EmbeddingProvider.embed_batch` returns for ``n`` texts.

    Attributes:
        vectors: float32 (n, d), rows of unit L2 norm.
        costs: float64 (n,), US dollars spent on each text (a request's cost split by token share); 0 locally.
        truncated: bool (n,), True where the text exceeded the model's input limit and was cut.
        tokens: tokens billed for the whole batch (0 when unknown or local).
    """

    vectors: np.ndarray
    costs: np.ndarray
    truncated: np.ndarray
    tokens: int = 0

    @classmethod
    def free(cls, vectors: np.ndarray, truncated: np.ndarray | None = None) -> EmbeddingBatch:
        """A batch computed at no cost (local models)."""
        n = len(vectors)
        return cls(vectors, np.zeros(n), truncated if truncated is not None else np.zeros(n, dtype=bool))


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns texts into L2-normalised float32 vectors.

    Attributes:
        provider: the provider's short name (``"local"``, ``"openai"``).
        model_name: the model as the user named it.
        fingerprint: identifies the exact weights (local: a hash of the model's config and weight files;
            API: model name and dimensions), so vectors of different weights never mix.
        namespace: the reference-index namespace: provider, model, fingerprint (which covers dimensions).
    """

    provider: str
    model_name: str

    @property
    def fingerprint(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (no empty strings) into float32 (len(texts), d), rows of norm 1.

        Raises:
            ProviderError: the provider failed (``transient`` says whether a retry may help).
        """
        ...

    def embed_batch(self, texts: Sequence[str]) -> EmbeddingBatch:
        """Like :meth:`embed`, with per-text costs and truncation flags."""
        ...

    def estimate_cost(self, texts: Sequence[str]) -> float:
        """Estimated US dollars to embed ``texts`` (0.0 for local models)."""
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
    """Embeddings of unique texts: ``text -> row`` of a float32 matrix (n, d), with per-row metadata.

    Built by the engine for one provider namespace and handed to metrics, so each unique text is embedded
    once per run however many cases or metrics use it.

    Attributes:
        vectors: float32 (n, d).
        costs: float64 (n,): US dollars charged to each *use* of the text in this run (its embedding cost
            divided by the number of case × metric uses), so per-case costs add up to the run's total.
        truncated: bool (n,): the text was cut to the model's input limit before embedding.
    """

    def __init__(
        self,
        texts: Sequence[str],
        vectors: np.ndarray,
        costs: np.ndarray | None = None,
        truncated: np.ndarray | None = None,
    ) -> None:
        if len(texts) != len(vectors):
            raise ValueError(f"VectorTable: {len(texts)} texts but {len(vectors)} vectors")
        self._row = {text: i for i, text in enumerate(texts)}
        if len(self._row) != len(texts):
            raise ValueError("VectorTable: texts must be unique")
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        n = len(texts)
        self.costs = np.zeros(n) if costs is None else np.asarray(costs, dtype=np.float64)
        self.truncated = np.zeros(n, dtype=bool) if truncated is None else np.asarray(truncated, dtype=bool)

    def without_vectors(self) -> VectorTable:
        """This table's texts, costs and truncation with vectors of shape (n, 0): what a caller that reads the
        vectors elsewhere (the reference index) keeps."""
        return VectorTable(self.texts, np.zeros((len(self), 0), dtype=np.float32), self.costs, self.truncated)

    @classmethod
    def from_batch(cls, texts: Sequence[str], batch: EmbeddingBatch) -> VectorTable:
        """A table of ``texts`` and the provider's ``batch`` for them."""
        return cls(texts, batch.vectors, batch.costs, batch.truncated)

    def __contains__(self, text: object) -> bool:
        return text in self._row

    def __len__(self) -> int:
        return len(self._row)

    @property
    def texts(self) -> list[str]:
        """The texts, in row order."""
        return list(self._row)

    def indices(self, texts: Iterable[str]) -> list[int]:
        """Row numbers of ``texts``. Raises KeyError for an unknown text."""
        return [self._row[t] for t in texts]

    def rows(self, texts: Iterable[str]) -> np.ndarray:
        """The vectors of ``texts`` as an array of shape (len(texts), d). Raises KeyError for an unknown text."""
        return self.vectors[self.indices(texts)]

    def subset(self, texts: Iterable[str]) -> VectorTable:
        """A table holding only ``texts`` (deduplicated, order kept): what one batch of cases needs."""
        unique = list(dict.fromkeys(texts))
        rows = self.indices(unique)
        return VectorTable(
            unique, self.vectors[rows] if unique else self.vectors[:0], self.costs[rows], self.truncated[rows]
        )

    def with_costs(self, costs: np.ndarray) -> VectorTable:
        """The same table with ``costs`` replaced."""
        return VectorTable(self.texts, self.vectors, costs, self.truncated)

    @classmethod
    def concat(cls, tables: Iterable[VectorTable]) -> VectorTable:
        """Merge tables of the same namespace (a text present in several keeps its first row)."""
        tables = [t for t in tables if len(t)]
        if not tables:
            return cls([], np.zeros((0, 0), dtype=np.float32))
        texts = [text for table in tables for text in table._row]
        vectors = np.concatenate([t.vectors for t in tables])
        costs = np.concatenate([t.costs for t in tables])
        truncated = np.concatenate([t.truncated for t in tables])
        first: dict[str, int] = {}
        for i, text in enumerate(texts):
            first.setdefault(text, i)
        keep = list(first.values())
        return cls(list(first), vectors[keep], costs[keep], truncated[keep])
