"""Similarity search over a large reference set (10^5–10^6 texts) with FAISS.

``flat`` is exact: brute-force inner product over unit vectors (inner product = cosine similarity), read in
place from the set's vectors (FAISS's ``knn``, what ``IndexFlatIP.search`` runs, without the copy an
``IndexFlatIP`` keeps). FAISS runs with numpy's CPU kernels (:mod:`evaltasks.index._blas`); where it still
cannot, flat search scores through numpy (chunked ``queries @ vectors.T`` and ``np.argpartition``), with the
same results.
``hnsw`` is approximate (``IndexHNSWFlat`` with inner product): faster queries, recall below 1, measured by
:meth:`ReferenceSearch.measure_recall` against exact search and reported in ``results.json``.
``ivf`` is approximate too, for sets of millions: an inverted file (``IVF{nlist},Flat``, ``IVF{nlist},SQ8``
8-bit scalar codes, or ``IVF{nlist},PQ{M}`` codes re-ranked by exact inner product from the stored vectors)
trained on a seeded sample, filled in chunks, and queried with ``nprobe`` lists. ``auto`` (the default) is
``flat`` up to ``search_auto_above`` references (1,000,000) and ``ivf`` with SQ8 codes above
(docs/embeddings.md#reference-sets, docs/performance.md "IVF search"). An approximate search with a ``target_recall`` (``auto``'s default:
0.95) widens its query breadth (``nprobe``, ``ef_search``) until its recall@10 on the run's own outputs reaches
it (:meth:`ReferenceSearch.measure_recall`): real text embeddings need a wider search than clustered data.

Built indexes are persisted beside the reference index (``<index>/sets/<key>.faiss``, FAISS's own format,
no pickle; a flat search is only its vectors, ``<key>.npy``) and loaded lazily once per process through
:func:`get_search`. A worker maps a flat search's ``.npy`` read-only (``mmap_mode="r"``): its pages are the
page cache every process on the machine shares, so a worker's private memory does not grow with the set.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from evaltasks._atomic import atomic_path
from evaltasks.errors import quote
from evaltasks.index._blas import faiss, flat_through_numpy

SEARCH_KINDS = ("auto", "flat", "hnsw", "ivf")
IVF_QUANTIZERS = ("flat", "hnsw")
AUTO_ABOVE = 1_000_000  # references above which ``auto`` searches with IVF
AUTO_TARGET_RECALL = 0.95  # recall@10 that ``auto``'s approximate search widens its breadth to reach
RECALL_TIE_TOLERANCE = 1e-5  # cosine similarity: float32 rounding of equal vectors' scores
MAX_EF_SEARCH = 4096  # HNSW query breadth at most when widening to a target recall
MAX_NLIST = 4096  # default lists at most: k-means and assigning every vector cost n × nlist (docs/performance.md)
_ADD_CHUNK = 65536  # vectors added to an IVF index per call: one chunk's copy and assignment at a time
_REGISTRY: dict[str, ReferenceSearch] = {}
_LOCK = threading.Lock()
_CHUNK = 65536  # reference rows per matrix product when every similarity is needed (mean aggregation)
_HNSW_QUANTIZER_EF = 128  # HNSW coarse quantizer's breadth (adding and querying): FAISS's 16 misassigns vectors
_TOP_K_BLOCK = 16 * 1024 * 1024  # similarities per matrix product in numpy's top_k (64 MiB of float32)


@dataclass(frozen=True)
class SearchConfig:
    """How a reference set is searched.

    Attributes:
        kind: ``"auto"`` (``flat`` up to ``search_auto_above`` references, ``ivf`` above), ``"flat"`` (exact),
            ``"hnsw"`` or ``"ivf"`` (approximate). :meth:`resolve` turns ``auto`` into the kind a set of a given
            size gets.
        hnsw_m: HNSW graph degree (default 16).
        ef_construction: HNSW build-time breadth (default 100: with ``hnsw_m`` 16 it built 10^6 real text
            embeddings in 195 s on 2 cores, recall@10 0.976 at the default ``ef_search`` 128, 17 × exact
            search's speed; 32 and 200 took over 22 minutes at 10^6, docs/performance.md).
        ef_search: HNSW query-time breadth (higher = better recall, slower).
        search_auto_above: the size (references) above which ``auto`` is ``ivf``.
        nlist: IVF lists (None: about 4·√n, at most n / 39 so each list's centroid trains on 39 vectors, and at
            most ``MAX_NLIST`` (4,096) so that 10^7 vectors build in minutes on 2 cores).
        nprobe: IVF lists visited per query (higher = better recall, slower; at most ``nlist``).
        ivf_pq: None (``IVF{nlist},Flat``: 4·d bytes a vector) or M, the bytes of a PQ code
            (``IVF{nlist},PQ{M}``: M bytes a vector; d must be a multiple of M), its candidates re-ranked by
            exact inner product from the stored vectors.
        ivf_sq8: True: ``IVF{nlist},SQ8`` (8-bit scalar codes, d bytes a vector; the top k found by code, no
            wider re-rank; their k scores recomputed exactly from the stored vectors); False: as ``ivf_pq`` says; None (default): True when ``auto`` picks ``ivf`` and ``ivf_pq``
            is not set, else False (:meth:`resolve`).
        ivf_rerank: with ``ivf_pq``, candidates re-ranked per result (``ivf_rerank`` × k).
        ivf_quantizer: ``"flat"`` (exact centroid search) or ``"hnsw"`` (an HNSW graph over the centroids:
            faster assignment for very large ``nlist``).
        target_recall: the recall@10 (0 < r <= 1) an approximate search must reach on the run's own outputs:
            measured against exact search on up to 1,000 of them, the query breadth (``nprobe`` up to ``nlist``,
            ``ef_search`` up to ``MAX_EF_SEARCH``) is doubled until it does, never narrowed below what is set
            (:meth:`ReferenceSearch.measure_recall`). None (default): ``AUTO_TARGET_RECALL`` (0.95) when ``auto``
            picks ``ivf``, else the breadth as given. ``flat`` is exact: :meth:`resolve` drops the target.

    Raises:
        ValueError: an unknown kind or quantizer, a count that is not a positive integer, ``ivf_sq8`` not a
            boolean, ``ivf_sq8`` true with ``ivf_pq``, or ``target_recall`` not in (0, 1].
    """

    kind: str = "auto"
    hnsw_m: int = 16
    ef_construction: int = 100
    ef_search: int = 128
    search_auto_above: int = AUTO_ABOVE
    nlist: int | None = None
    nprobe: int = 32
    ivf_pq: int | None = None
    ivf_rerank: int = 10
    ivf_quantizer: str = "flat"
    ivf_sq8: bool | None = None
    target_recall: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in SEARCH_KINDS:
            raise ValueError(f"search must be one of {list(SEARCH_KINDS)}, got {quote(self.kind)}")
        if self.ivf_quantizer not in IVF_QUANTIZERS:
            raise ValueError(f"ivf_quantizer must be one of {list(IVF_QUANTIZERS)}, got {quote(self.ivf_quantizer)}")
        for label in (
            "hnsw_m",
            "ef_construction",
            "ef_search",
            "search_auto_above",
            "nlist",
            "nprobe",
            "ivf_pq",
            "ivf_rerank",
        ):
            value = getattr(self, label)
            if value is None and label in ("nlist", "ivf_pq"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be a positive integer, got {quote(value)}")
        if self.ivf_sq8 is not None and not isinstance(self.ivf_sq8, bool):
            raise ValueError(f"ivf_sq8 must be true or false, got {quote(self.ivf_sq8)}")
        if self.ivf_sq8 and self.ivf_pq:
            raise ValueError(f"ivf_sq8 cannot be combined with ivf_pq ({self.ivf_pq}): choose one code")
        if self.target_recall is not None and (
            isinstance(self.target_recall, bool)
            or not isinstance(self.target_recall, (int, float))
            or not 0 < self.target_recall <= 1
        ):
            raise ValueError(f"target_recall must be a number in (0, 1], got {quote(self.target_recall)}")

    def resolve(self, n: int) -> SearchConfig:
        """The configuration a set of ``n`` references is searched with: ``auto`` becomes ``flat`` or ``ivf``;
        an IVF's ``nlist`` is fixed (about 4·√n, at most n / 39 and ``MAX_NLIST``, at least 1), ``nprobe`` capped
        at it, ``ivf_sq8`` decided (``auto`` picking ``ivf`` uses SQ8 codes unless ``ivf_pq`` or
        ``ivf_sq8: false`` says otherwise: a quarter of IVF-Flat's memory, faster scans, docs/performance.md), and
        ``target_recall`` (``auto`` picking ``ivf``: ``AUTO_TARGET_RECALL`` unless given)."""
        kind = self.kind
        if kind == "auto":
            kind = "ivf" if n > self.search_auto_above else "flat"
        if kind != "ivf":  # flat is exact: no target to reach
            return replace(self, kind=kind, target_recall=None if kind == "flat" else self.target_recall)
        sq8 = self.ivf_sq8 if self.ivf_sq8 is not None else (self.kind == "auto" and not self.ivf_pq)
        target = self.target_recall
        if target is None and self.kind == "auto":
            target = AUTO_TARGET_RECALL
        nlist = self.nlist or max(1, min(round(4 * np.sqrt(n)), n // 39, MAX_NLIST))
        return replace(
            self,
            kind=kind,
            nlist=min(nlist, max(n, 1)),
            nprobe=min(self.nprobe, min(nlist, max(n, 1))),
            ivf_sq8=sq8,
            target_recall=target,
        )

    def label(self) -> str:
        """A short stable label of what is built, e.g. ``flat``, ``hnsw-m16-efc100``, ``ivf4000-sq8`` or
        ``ivf4000-pq48`` (of a
        resolved configuration; an unresolved ``auto`` is ``auto``; query-time breadths are not part of it)."""
        if self.kind in ("flat", "auto"):
            return self.kind
        if self.kind == "hnsw":
            return f"hnsw-m{self.hnsw_m}-efc{self.ef_construction}"
        codes = f"-pq{self.ivf_pq}" if self.ivf_pq else "-sq8" if self.ivf_sq8 else ""
        quantizer = "-hnsw" if self.ivf_quantizer == "hnsw" else ""
        return f"ivf{self.nlist or 'auto'}{quantizer}{codes}"

    def factory(self) -> str:
        """The FAISS ``index_factory`` string of a resolved IVF configuration, e.g. ``IVF4000_HNSW32,PQ48``."""
        quantizer = "_HNSW32" if self.ivf_quantizer == "hnsw" else ""
        return f"IVF{self.nlist}{quantizer},{f'PQ{self.ivf_pq}' if self.ivf_pq else 'SQ8' if self.ivf_sq8 else 'Flat'}"


@dataclass(frozen=True)
class Recall:
    """A search's recall against exact search, measured on a run's outputs (:meth:`ReferenceSearch.measure_recall`).

    Attributes:
        recall_at_1: the share of queries whose top 1 is the exact top 1 (None: nothing measured).
        recall_at_10: the share of the exact top 10 found in the search's top 10 (None: nothing measured).
        query_config: the configuration measured, its query breadth widened to ``target_recall`` where one is set.
        plateau: short of the target, the wider searches measured found no more than ``query_config`` (the
            narrowest breadth of the best recall, returned instead of the widest).
    """

    recall_at_1: float | None
    recall_at_10: float | None
    query_config: SearchConfig
    plateau: bool = False

    def short_of_target(self) -> bool:
        """True when a target was set, recall was measured, and recall@10 stayed below it."""
        target = self.query_config.target_recall
        return target is not None and self.recall_at_10 is not None and self.recall_at_10 < target


class ReferenceSearch:
    """A FAISS index over the unit vectors of one reference set (rows in the set's order); ``flat`` has none
    (``index`` None): it searches ``vectors`` in place, which may be a read-only memory map.

    One search is registered per process and shared by every run and metric that uses the set: its query
    breadth (``nprobe``, ``ef_search``) is given per call (:meth:`top_k`'s ``query_config``), never changed on the
    shared index; ``config``'s breadth is only the default.

    Args:
        vectors: float32 (n, d), unit rows (a C-contiguous float32 array or map is used as is, not copied).
        config: the search configuration (``auto`` is resolved against n).
        index: an index already built over ``vectors`` (loaded from disk), else one is built here.

    Raises:
        ValueError: ``ivf_pq`` does not divide the vectors' dimensions.
    """

    def __init__(self, vectors: np.ndarray, config: SearchConfig | None = None, index: faiss.Index | None = None):
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        n, d = self.vectors.shape
        self.config = (config or SearchConfig()).resolve(n)
        if index is None and self.config.kind != "flat":
            if self.config.kind == "hnsw":
                index = faiss.IndexHNSWFlat(d, self.config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
                index.hnsw.efConstruction = self.config.ef_construction
            else:
                index = _train_ivf(self.vectors, self.config)
            for start in range(0, n, _ADD_CHUNK):  # a slice of mapped vectors: one chunk in memory at a time
                index.add(np.ascontiguousarray(self.vectors[start : start + _ADD_CHUNK]))
        self.index: faiss.Index | None = index if self.config.kind != "flat" else None
        if self.index is not None:  # the index's own default breadth, for whoever queries it directly
            if self.config.kind == "hnsw":
                faiss.downcast_index(self.index).hnsw.efSearch = self.config.ef_search
            else:
                ivf = faiss.extract_index_ivf(self.index)
                ivf.nprobe = self.config.nprobe
                if self.config.ivf_quantizer == "hnsw":
                    faiss.downcast_index(ivf.quantizer).hnsw.efSearch = max(2 * self.config.nprobe, _HNSW_QUANTIZER_EF)

    def __len__(self) -> int:
        return int(self.vectors.shape[0])

    def query_config(self, config: SearchConfig | None = None) -> SearchConfig:
        """This search's configuration with the query-time options of ``config`` (``nprobe`` capped at ``nlist``,
        ``ef_search``, ``ivf_rerank``, ``target_recall``): what :meth:`top_k` searches with. ``config`` may be
        unresolved (``auto``); None: this search's own. The structure (kind, lists, codes, graph) is always this
        search's: a breadth is per call, so runs sharing one registered search never change each other's."""
        if config is None:
            return self.config
        config = config.resolve(len(self))
        if self.config.kind == "flat":
            return self.config
        return replace(
            self.config,
            nprobe=min(config.nprobe, self.config.nlist or config.nprobe),
            ef_search=config.ef_search,
            ivf_rerank=config.ivf_rerank,
            target_recall=config.target_recall,
        )

    def _search_params(self, config: SearchConfig) -> Any:
        """FAISS per-call search parameters for ``config``'s breadth (``SearchParametersIVF``/``…HNSW``)."""
        if config.kind == "hnsw":
            return faiss.SearchParametersHNSW(efSearch=config.ef_search)
        params = faiss.SearchParametersIVF(nprobe=config.nprobe)
        if config.ivf_quantizer == "hnsw":
            quantizer = faiss.SearchParametersHNSW(efSearch=max(2 * config.nprobe, _HNSW_QUANTIZER_EF))
            params.quantizer_params = quantizer
            params._quantizer = quantizer  # kept alive with params (SWIG holds a bare pointer)
        return params

    def top_k(
        self, queries: np.ndarray, k: int, query_config: SearchConfig | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` most similar references of each query: (similarities (m, k), indices (m, k)), best first.

        ``query_config``: the query breadth to search with (:meth:`query_config`; None: this search's own), passed to
        FAISS per call: nothing shared is changed.
        """
        k = min(k, len(self))
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        config = self.query_config(query_config)
        if config.kind == "flat" or self.index is None:
            return exact_top_k(self.vectors, queries, k)
        params = self._search_params(config)
        if config.kind == "ivf" and (config.ivf_pq or config.ivf_sq8):
            return self._reranked(queries, k, params, config.ivf_rerank)
        sims, idx = self.index.search(queries, k, params=params)
        return sims, idx

    def _reranked(self, queries: np.ndarray, k: int, params: Any, rerank: int) -> tuple[np.ndarray, np.ndarray]:
        """IVF-PQ's top ``rerank`` × k candidates by code (IVF-SQ8's top k), re-scored by exact inner product,
        so a score is the exact similarity of the reference found; top ``k`` kept (missing candidates, rows -1,
        score -inf and come last)."""
        candidates = min(len(self), (rerank if self.config.ivf_pq else 1) * k)
        assert self.index is not None  # _reranked runs for IVF searches only, which always hold an index
        _, idx = self.index.search(queries, candidates, params=params)
        sims = np.einsum("mkd,md->mk", self.vectors[np.maximum(idx, 0)], queries)
        sims[idx < 0] = -np.inf
        order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(sims, order, axis=1).astype(np.float32), np.take_along_axis(idx, order, axis=1)

    def clamped_mean(self, queries: np.ndarray) -> np.ndarray:
        """Mean over all references of the clamped cosine similarity, per query (exact; chunked products)."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        total = np.zeros(len(queries), dtype=np.float64)
        for start in range(0, len(self), _CHUNK):
            block = self.vectors[start : start + _CHUNK] @ queries.T
            np.clip(block, 0.0, 1.0, out=block)
            total += block.sum(axis=0, dtype=np.float64)
        return total / max(len(self), 1)

    def measure_recall(
        self, queries: np.ndarray, sample: int = 1000, seed: int = 0, query_config: SearchConfig | None = None
    ) -> Recall:
        """Recall@1 and recall@10 of this search at ``query_config`` (:meth:`query_config`) against exact search, on a
        seeded sample of up to ``sample`` ``queries`` (float32 (m, d)); with the breadth's ``target_recall``,
        widened to reach it. Nothing about the search itself changes (the breadth found is returned).

        Recall@10 is the share of the exact top 10 (top n below 10 references) that the search returns in its
        own top 10, counted by similarity so that ties are not misses: a reference found counts when its exact
        similarity is at least the exact 10th best's (less ``RECALL_TIE_TOLERANCE``), recall@1 when the top one
        found is as similar as the exact best (identical vectors, e.g. texts an uncased model embeds alike, are
        interchangeable). Exact search runs over the vectors in place (:func:`exact_top_k`: no copy).

        While recall@10 is below the target, the breadth is doubled and the same sample measured again:
        ``nprobe`` up to ``nlist``, ``ef_search`` up to ``MAX_EF_SEARCH``; lossy codes (IVF-SQ8, IVF-PQ) stop
        earlier when two doublings in a row gain nothing (their codes, not the lists, limit recall), keeping the
        narrowest breadth of the best recall. Flat search is exact: 1.0, nothing measured. ``queries`` empty:
        the recalls are None (nothing to measure on).
        """
        config = self.query_config(query_config)
        if config.kind == "flat":
            return Recall(1.0, 1.0, config)
        if len(queries) == 0:
            return Recall(None, None, config)
        rng = np.random.default_rng(seed)
        rows = rng.choice(len(queries), size=min(sample, len(queries)), replace=False)
        q = np.ascontiguousarray(queries[rows], dtype=np.float32)
        k = min(10, len(self))
        truth, _ = exact_top_k(self.vectors, q, k)
        best: Recall | None = None
        flat_steps = 0
        while True:
            _, found = self.top_k(q, k, config)
            at_1, at_10 = _tie_aware_recall(self.vectors, q, truth, found)
            measured = Recall(at_1, at_10, config)
            if best is None or measured.recall_at_10 > best.recall_at_10:  # type: ignore[operator]
                best, flat_steps = measured, 0
            else:
                flat_steps += 1
            target = config.target_recall
            if target is None or measured.recall_at_10 >= target:  # type: ignore[operator]
                return measured
            wider = _widened(config)
            if wider is None or (flat_steps >= 2 and _codes_are_lossy(config)):
                return replace(best, plateau=best.query_config != config)
            config = wider

    def save(self, path: Path, vectors_written: bool = False) -> None:
        """Write the FAISS index atomically (temporary file + rename), and the set's vectors beside it
        (``<key>.npy``, numpy's format, first; unless ``vectors_written``: they are already there), which a
        worker maps read-only (page cache shared by the machine's processes) for exact search, recall, mean
        aggregation and re-ranking, whatever the kind; ``flat`` writes only them (``path`` itself is not written,
        and removed if an older version wrote it). Then the files' sha256 (:func:`write_checksums`), which
        ``evaltasks index verify`` checks (a run does not: it reads no vector it does not need)."""
        if not vectors_written:
            with atomic_path(path.with_suffix(".npy")) as tmp, open(tmp, "wb") as handle:
                np.save(handle, self.vectors, allow_pickle=False)
        if self.index is None:
            path.unlink(missing_ok=True)
        else:
            with atomic_path(path) as tmp:
                faiss.write_index(self.index, str(tmp))
        write_checksums(path)

    @classmethod
    def load(cls, path: Path, vectors: np.ndarray | None, config: SearchConfig) -> ReferenceSearch | None:
        """A persisted index, or None when absent, unreadable or not of ``vectors``' size.

        With ``vectors`` None (a worker process that only has the file) the vectors are mapped read-only from
        ``<key>.npy``, not read into memory; a search persisted by an older version without that file gives
        them back from its own storage (HNSW, IVF-Flat: a private copy; IVF-PQ and IVF-SQ8 cannot: None). IVF-Flat
        and IVF-SQ8 lists are mapped too (:func:`_read_flags`). ``path`` is the ``.faiss`` name in every case.
        """
        if config.kind == "flat" or (config.kind == "auto" and not path.exists()):
            config = replace(config, kind="flat")
            try:
                stored = np.load(path.with_suffix(".npy"), mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError):
                return None
            if stored.dtype != np.float32 or stored.ndim != 2:
                return None
            if vectors is None:
                vectors = stored
            elif stored.shape != vectors.shape:
                return None
            return cls(vectors, config)
        try:
            index = faiss.read_index(str(path), _read_flags(config))
        except Exception:  # noqa: BLE001 - rebuilt by the caller
            return None
        config = config.resolve(index.ntotal)
        if vectors is None:
            try:
                vectors = np.load(path.with_suffix(".npy"), mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError):  # written by an older version, without <key>.npy
                if _codes_are_lossy(config):
                    return None
                vectors = _reconstructed(index, config)
        if index.ntotal != len(vectors) or index.d != vectors.shape[1]:
            return None
        return cls(vectors, config, index)


CHECKSUMS_SUFFIX = ".sha256.json"  # beside a persisted search: {"files": {name: sha256}} of its .npy and .faiss


def write_checksums(path: Path) -> None:
    """Record the sha256 of the persisted search ``path`` (its ``.faiss`` name): of ``<key>.npy`` and, when it
    exists, ``<key>.faiss``, in ``<key>.sha256.json`` (written atomically after them). Reads both files once."""
    from evaltasks.index._segments import file_sha256

    files = {p.name: file_sha256(p) for p in (path.with_suffix(".npy"), path) if p.exists()}
    sidecar = path.with_name(path.stem + CHECKSUMS_SUFFIX)
    with atomic_path(sidecar) as tmp:
        tmp.write_text(json.dumps({"files": files}, indent=1) + "\n", encoding="utf-8")


def check_searches(directory: Path, remove_broken: bool = False, verify: bool = True) -> list[dict[str, Any]]:
    """Verify every persisted search in ``directory`` (``<index>/sets``) against its recorded sha256, every byte
    (``evaltasks index info`` and ``verify``). Returns one dict per search: ``key``, ``files`` (names), ``checked``
    (False: written by an older version, no checksums recorded) and ``problems`` (a file missing, or of another
    sha256: damaged on disk, which a run would read as wrong scores). ``remove_broken``: delete a broken
    search's files (derived data: the next run that uses the set rebuilds it from the reference index).
    ``verify=False``: only list the searches (no file read)."""
    if not directory.is_dir():
        return []
    from evaltasks.index._segments import file_sha256

    keys = sorted(
        {
            p.name[: -len(suffix)]
            for suffix in (".npy", ".faiss", CHECKSUMS_SUFFIX)
            for p in directory.glob(f"*{suffix}")
            if not p.name.startswith(".")
        }
    )
    out = []
    for key in keys:
        files = [p for p in (directory / f"{key}.npy", directory / f"{key}.faiss") if p.exists()]
        entry: dict[str, Any] = {"key": key, "files": [p.name for p in files], "checked": False, "problems": []}
        sidecar = directory / f"{key}{CHECKSUMS_SUFFIX}"
        if not verify:
            out.append(entry)
            continue
        try:
            recorded = json.loads(sidecar.read_text(encoding="utf-8"))["files"]
        except FileNotFoundError:
            out.append(entry)
            continue
        except (OSError, ValueError, KeyError, TypeError) as exc:
            recorded = {}
            entry["problems"].append(f"{sidecar.name} is unreadable ({exc})")
        entry["checked"] = True
        for name, sha in recorded.items():
            file = directory / name
            if not file.exists():
                entry["problems"].append(f"{name} is missing")
            elif file_sha256(file) != sha:
                entry["problems"].append(f"{name} does not match its recorded sha256 (damaged)")
        if entry["problems"] and remove_broken:
            for file in (*files, sidecar):
                file.unlink(missing_ok=True)
            entry["removed"] = True
        out.append(entry)
    return out


def _reconstructed(index: faiss.Index, config: SearchConfig) -> np.ndarray:
    """float32 (ntotal, d): the vectors an HNSW or IVF-Flat index holds, copied out of it (process memory)."""
    if config.kind == "ivf":
        faiss.extract_index_ivf(index).make_direct_map()
        return np.asarray(index.reconstruct_n(0, index.ntotal))
    storage = faiss.downcast_index(index.storage) if config.kind == "hnsw" else index
    return np.asarray(storage.reconstruct_n(0, index.ntotal))


def _tie_aware_recall(
    vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray, found: np.ndarray
) -> tuple[float, float]:
    """(recall@1, recall@k) of the rows ``found`` (m, k; -1 for none) against the exact similarities ``truth``
    (m, k, best first) of ``queries`` (m, d) over ``vectors``: a row found is a hit when its exact similarity
    is at least the exact k-th best's, less ``RECALL_TIE_TOLERANCE`` (at most k hits per query)."""
    sims = np.einsum("mkd,md->mk", vectors[np.maximum(found, 0)], queries)
    sims[found < 0] = -np.inf
    floor = truth[:, -1:] - RECALL_TIE_TOLERANCE
    hits = np.minimum((sims >= floor).sum(axis=1), found.shape[1])
    at_1 = sims[:, 0] >= truth[:, 0] - RECALL_TIE_TOLERANCE
    return float(np.mean(at_1)), float(np.mean(hits / found.shape[1]))


def _widened(config: SearchConfig) -> SearchConfig | None:
    """``config`` with its query breadth doubled (``nprobe`` up to ``nlist``, ``ef_search`` up to
    ``MAX_EF_SEARCH``); None at the limit."""
    if config.kind == "ivf" and config.nprobe < (config.nlist or 0):
        return replace(config, nprobe=min(2 * config.nprobe, config.nlist or 0))
    if config.kind == "hnsw" and config.ef_search < MAX_EF_SEARCH:
        return replace(config, ef_search=min(2 * config.ef_search, MAX_EF_SEARCH))
    return None


def _read_flags(config: SearchConfig) -> int:
    """``faiss.read_index`` flags for a persisted search of ``config``: IVF-Flat's and IVF-SQ8's inverted lists
    (4·d and d bytes a vector) are mapped read-only from the file (``IO_FLAG_MMAP_IFC``: page cache shared by the
    machine's processes, as the vectors' ``<key>.npy``); everything else is read into memory (IVF-PQ's codes are
    M bytes a vector; HNSW has no mapped form)."""
    ivf_mapped = config.kind in ("ivf", "auto") and not config.ivf_pq
    return int(faiss.IO_FLAG_MMAP_IFC) if ivf_mapped and hasattr(faiss, "IO_FLAG_MMAP_IFC") else 0


def _codes_are_lossy(config: SearchConfig) -> bool:
    """Whether a search of ``config`` (resolved) stores codes that cannot give the set's vectors back (IVF-PQ,
    IVF-SQ8), so that without ``<key>.npy`` it cannot be loaded."""
    return config.kind == "ivf" and bool(config.ivf_pq or config.ivf_sq8)


def ivf_training_rows(n: int, config: SearchConfig) -> np.ndarray:
    """The rows (sorted int64) an IVF of ``config`` (resolved) over ``n`` vectors trains on: a seeded sample of
    max(39·nlist, 50,000), every row below that; so a caller streaming its vectors can gather the same sample."""
    assert config.nlist is not None
    size = min(n, max(39 * config.nlist, 50_000))
    return np.sort(np.random.default_rng(0).choice(n, size=size, replace=False)) if size < n else np.arange(n)


def _train_ivf(vectors: np.ndarray, config: SearchConfig) -> faiss.Index:
    """An empty IVF index of ``config`` (resolved) trained on the rows of :func:`ivf_training_rows`."""
    return train_ivf(np.ascontiguousarray(vectors[ivf_training_rows(len(vectors), config)]), len(vectors), config)


def train_ivf(sample: np.ndarray, n: int, config: SearchConfig) -> faiss.Index:
    """An empty IVF index of ``config`` (resolved) for ``n`` vectors, trained on ``sample`` (float32 (s, d): the
    rows of :func:`ivf_training_rows`; k-means, FAISS's 10 iterations), ready for ``add`` in chunks.

    PQ codes keep 8 bits per sub-vector when the set holds 39 × 256 rows, fewer below (small sets).

    Raises:
        ValueError: ``ivf_pq`` does not divide the dimensions.
    """
    d = sample.shape[1]
    assert config.nlist is not None
    factory = config.factory()
    if config.ivf_pq:
        if d % config.ivf_pq:
            raise ValueError(f"ivf_pq must divide the embedding dimensions ({d}), got {config.ivf_pq}")
        bits = max(1, min(8, int(np.log2(max(n // 39, 2)))))
        factory += (f"x{bits}" if bits != 8 else "") + "np"  # np: no polysemous training (minutes, unused here)
    index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
    if config.ivf_quantizer == "hnsw":  # the breadth used when adding assigns each vector to its list
        faiss.downcast_index(faiss.extract_index_ivf(index).quantizer).hnsw.efSearch = _HNSW_QUANTIZER_EF
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    return index


def exact_top_k(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top ``k`` over ``vectors`` in place (no index, no copy): FAISS's brute-force
    ``knn``, or :func:`numpy_top_k` where FAISS runs other kernels than numpy. Shapes as ``numpy_top_k``."""
    if flat_through_numpy():
        return numpy_top_k(vectors, queries, k)
    sims, idx = faiss.knn(queries, np.ascontiguousarray(vectors), k, metric=faiss.METRIC_INNER_PRODUCT)
    return np.asarray(sims), np.asarray(idx)


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
    key: str,
    vectors: np.ndarray | Callable[[Path | None], np.ndarray],
    config: SearchConfig,
    directory: Path | None,
    count: int | None = None,
) -> ReferenceSearch:
    """Load the persisted search ``key`` from ``directory`` or build it (and persist it); register it in-process.

    Args:
        key: :func:`search_key` of the set.
        vectors: the set's vectors, float32 (n, d); or a function that produces them given where to write
            them (``<directory>/<key>.npy``, or None without a directory) and returns them (mapped from that
            file): :meth:`~evaltasks.index.ReferenceIndex.write_vectors`. A function is called only when the
            search has to be built, so a persisted search is loaded without reading a single vector.
        config: the set's search configuration.
        directory: where searches persist (None: in memory only).
        count: n, when ``vectors`` is a function (a persisted search of another size is rebuilt).
    """
    path = directory / f"{key}.faiss" if directory is not None else None
    with _LOCK:
        registered = _REGISTRY.get(key)
    if registered is not None:
        if path is not None and not path.with_suffix(".npy").exists():  # built in memory, now asked to persist
            registered.save(path)
        return registered
    given = None if callable(vectors) else vectors
    search = None
    if path is not None and (path.exists() or path.with_suffix(".npy").exists()):
        search = ReferenceSearch.load(path, given, config)
        if search is not None and count is not None and len(search) != count:
            search = None
        if search is not None and not path.with_suffix(".npy").exists():
            # an index file without the vectors beside it (an older version, or the file was removed): write
            # them, so that workers map them instead of each copying them out of the index
            search.save(path)
    if search is None:
        written = callable(vectors) and path is not None
        data = vectors(path.with_suffix(".npy") if path is not None else None) if callable(vectors) else vectors
        search = ReferenceSearch(data, config)
        if path is not None:
            search.save(path, vectors_written=written)
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
