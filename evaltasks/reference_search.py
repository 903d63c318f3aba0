"""Similarity search over a large reference set (10^5–10^6 texts) with FAISS.

``flat`` (default) is exact: ``IndexFlatIP`` over unit vectors, so inner product = cosine similarity. FAISS runs
with numpy's CPU kernels (:mod:`evaltasks.index._blas`); where it still cannot, flat search scores through
numpy (chunked ``queries @ vectors.T`` and ``np.argpartition``), with the same results.
``hnsw`` is approximate (``IndexHNSWFlat`` with inner product): faster queries, recall below 1, measured by
:meth:`ReferenceSearch.measure_recall` against exact search and reported in ``results.json``.

Built indexes are persisted beside the reference index (``<index>/sets/<key>.faiss``, FAISS's own format,
no pickle) and loaded lazily once per process through :func:`get_search`.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaltasks._atomic import atomic_path
from evaltasks.errors import quote
from evaltasks.index._blas import faiss, flat_through_numpy

SEARCH_KINDS = ("flat", "hnsw")
_REGISTRY: dict[str, ReferenceSearch] = {}
_LOCK = threading.Lock()
_CHUNK = 65536  # reference rows per matrix product when every similarity is needed (mean aggregation)
_TOP_K_BLOCK = 16 * 1024 * 1024  # similarities per matrix product in numpy's top_k (64 MiB of float32)


@dataclass(frozen=True)
class SearchConfig:
    """How a reference set is searched.

    Attributes:
        kind: ``"flat"`` (exact) or ``"hnsw"`` (approximate).
        hnsw_m: HNSW graph degree.
        ef_construction: HNSW build-time breadth.
        ef_search: HNSW query-time breadth (higher = better recall, slower).
    """

    kind: str = "flat"
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128

    def __post_init__(self) -> None:
        if self.kind not in SEARCH_KINDS:
            raise ValueError(f"search must be one of {list(SEARCH_KINDS)}, got {quote(self.kind)}")
        for label in ("hnsw_m", "ef_construction", "ef_search"):
            value = getattr(self, label)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be a positive integer, got {quote(value)}")

    def label(self) -> str:
        """A short stable label, e.g. ``flat`` or ``hnsw-m32-efc200``."""
        return "flat" if self.kind == "flat" else f"hnsw-m{self.hnsw_m}-efc{self.ef_construction}"


class ReferenceSearch:
    """A FAISS index over the unit vectors of one reference set (rows in the set's order).

    Args:
        vectors: float32 (n, d), unit rows.
        config: the search configuration.
    """

    def __init__(self, vectors: np.ndarray, config: SearchConfig | None = None, index: faiss.Index | None = None):
        self.config = config or SearchConfig()
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        n, d = self.vectors.shape
        if index is None:
            if self.config.kind == "flat":
                index = faiss.IndexFlatIP(d)
            else:
                index = faiss.IndexHNSWFlat(d, self.config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
                index.hnsw.efConstruction = self.config.ef_construction
            index.add(self.vectors)
        if self.config.kind == "hnsw":
            faiss.downcast_index(index).hnsw.efSearch = self.config.ef_search
        self.index = index
        self.recall_at_1: float | None = 1.0 if self.config.kind == "flat" else None
        self.cost_per_case = 0.0

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    def top_k(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` most similar references of each query: (similarities (m, k), indices (m, k)), best first."""
        k = min(k, len(self))
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if self.config.kind == "flat" and flat_through_numpy():
            return numpy_top_k(self.vectors, queries, k)
        sims, idx = self.index.search(queries, k)
        return sims, idx

    def clamped_mean(self, queries: np.ndarray) -> np.ndarray:
        """Mean over all references of the clamped cosine similarity, per query (exact; chunked products)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        total = np.zeros(len(queries), dtype=np.float64)
        for start in range(0, len(self), _CHUNK):
            block = self.vectors[start : start + _CHUNK] @ queries.T
            np.clip(block, 0.0, 1.0, out=block)
            total += block.sum(axis=0, dtype=np.float64)
        return total / max(len(self), 1)

    def measure_recall(self, queries: np.ndarray, sample: int = 1000, seed: int = 0) -> float:
        """Recall@1 of this index against exact search on up to ``sample`` of ``queries``; stored and returned."""
        if self.config.kind == "flat" or len(queries) == 0:
            self.recall_at_1 = 1.0
            return 1.0
        rng = np.random.default_rng(seed)
        rows = rng.choice(len(queries), size=min(sample, len(queries)), replace=False)
        q = np.ascontiguousarray(queries[rows], dtype=np.float32)
        exact = faiss.IndexFlatIP(self.vectors.shape[1])
        exact.add(self.vectors)
        _, truth = exact.search(q, 1)
        _, found = self.top_k(q, 1)
        self.recall_at_1 = float(np.mean(truth[:, 0] == found[:, 0]))
        return self.recall_at_1

    def save(self, path: Path) -> None:
        """Write the FAISS index atomically (temporary file + rename)."""
        with atomic_path(path) as tmp:
            faiss.write_index(self.index, str(tmp))

    @classmethod
    def load(cls, path: Path, vectors: np.ndarray | None, config: SearchConfig) -> ReferenceSearch | None:
        """A persisted index, or None when absent, unreadable or not of ``vectors``' size.

        With ``vectors`` None (a worker process that only has the file) the vectors are read back from the
        index's own storage.
        """
        try:
            index = faiss.read_index(str(path))
        except Exception:  # noqa: BLE001 - rebuilt by the caller
            return None
        if vectors is None:
            storage = faiss.downcast_index(index.storage) if config.kind == "hnsw" else index
            vectors = storage.reconstruct_n(0, index.ntotal)
        if index.ntotal != len(vectors) or index.d != vectors.shape[1]:
            return None
        return cls(vectors, config, index)


def numpy_top_k(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top ``k`` with numpy's BLAS: (similarities float32 (m, k), rows int64 (m, k)), best
    first, equal ties in row order; what ``IndexFlatIP.search`` returns. Scores blocks of at most 16 Mi
    similarities (64 MiB), so memory does not grow with the number of queries or references.

    Args:
        vectors: float32 (n, d), n >= k >= 1.
        queries: float32 (m, d).
    """
    n, m = len(vectors), len(queries)
    sims = np.empty((m, k), dtype=np.float32)
    rows = np.empty((m, k), dtype=np.int64)
    batch = max(1, min(m, 1024))
    chunk = max(k, _TOP_K_BLOCK // batch)
    for q0 in range(0, m, batch):
        q = queries[q0 : q0 + batch]
        best_s = np.empty((len(q), 0), dtype=np.float32)
        best_i = np.empty((len(q), 0), dtype=np.int64)
        for r0 in range(0, n, chunk):
            block = q @ vectors[r0 : r0 + chunk].T  # (batch, chunk)
            cand_s = np.concatenate([best_s, block], axis=1)
            cand_i = np.concatenate([best_i, np.broadcast_to(np.arange(r0, r0 + block.shape[1]), block.shape)], axis=1)
            if cand_s.shape[1] > k:
                keep = np.argpartition(-cand_s, k - 1, axis=1)[:, :k]
                cand_s = np.take_along_axis(cand_s, keep, axis=1)
                cand_i = np.take_along_axis(cand_i, keep, axis=1)
            best_s, best_i = cand_s, cand_i
        order = np.lexsort((best_i, -best_s), axis=1) if best_s.size else np.zeros(best_s.shape, dtype=np.int64)
        sims[q0 : q0 + len(q)] = np.take_along_axis(best_s, order, axis=1)
        rows[q0 : q0 + len(q)] = np.take_along_axis(best_i, order, axis=1)
    return sims, rows


def search_key(namespace: str, set_sha256: str, config: SearchConfig) -> str:
    """The identity of a built search: provider namespace, reference-set content hash, search configuration."""
    digest = hashlib.sha256(f"{namespace}\0{set_sha256}\0{config.label()}".encode()).hexdigest()[:20]
    return f"{digest}-{config.label()}"


def build_search(
    key: str, vectors: np.ndarray, config: SearchConfig, directory: Path | None
) -> ReferenceSearch:
    """Load the persisted search ``key`` from ``directory`` or build it (and persist it); register it in-process."""
    with _LOCK:
        if key in _REGISTRY:
            return _REGISTRY[key]
    path = directory / f"{key}.faiss" if directory is not None else None
    search = ReferenceSearch.load(path, vectors, config) if path is not None and path.exists() else None
    if search is None:
        search = ReferenceSearch(vectors, config)
        if path is not None:
            search.save(path)
    with _LOCK:
        return _REGISTRY.setdefault(key, search)


def get_search(key: str, directory: str | Path | None = None, config: SearchConfig | None = None) -> ReferenceSearch:
    """The search ``key``: registered in this process, else loaded once from ``directory`` (a worker process).

    Raises:
        KeyError: neither registered here nor persisted in ``directory``.
    """
    with _LOCK:
        if key in _REGISTRY:
            return _REGISTRY[key]
    if directory is not None:
        search = ReferenceSearch.load(Path(directory) / f"{key}.faiss", None, config or SearchConfig())
        if search is not None:
            with _LOCK:
                return _REGISTRY.setdefault(key, search)
    raise KeyError(f"reference-set search {key} was not built (run the engine's prepare step first)")
