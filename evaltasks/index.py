"""ReferenceIndex: embeddings of references and outputs in FAISS indexes on disk, reused across runs.

Layout under the index directory (default ``.evaltasks/index``; ``--index-dir`` / ``EVALTASKS_INDEX_DIR``)::

    <provider>--<model>--<fingerprint>/
        vectors.faiss   # faiss.IndexIDMap2(IndexFlatIP(d)); ids = content hashes of the texts
        meta.json       # provider, model, fingerprint, dimensions, count, sha256 of vectors.faiss, versions, times
        .lock           # filelock guarding writers

- Namespaces: one per (provider, model, fingerprint), so vectors of different weights never mix.
- Content-addressed ids: the first 63 bits of sha256(text), so an identical text is embedded once ever. A
  namespace holds every text a run embeds through it: references, expected outputs and outputs (a text is a
  text: an output equal to a reference shares its vector).
- Writes: embed outside the lock, then under the lock re-read, add what is still missing, and replace the
  files atomically (temporary file, ``os.replace``): ``meta.json`` first, recording the state it supersedes
  (``previous``: sha256, count, dimensions), then ``vectors.faiss``. A writer killed between the two (even
  with ``kill -9``) leaves the previous state, which verifies and is used; temporary files it left are
  removed by the next writer.
- Reads take no lock: the checksum and the vectors come from one open file; a state that does not verify
  (a writer replaced a file between our reads) is read again under the lock before it is called corrupt.
- Corruption: a file FAISS cannot read, or whose sha256, count or dimension disagree with ``meta.json``, is
  reported and rebuilt from scratch; it is never used for scores. Inside :func:`recording_warnings` (a run of
  the flow: results.json ``warnings``, summary.md, the CLI's ``evaltasks: warning:`` lines) the report is
  recorded; elsewhere it is an :class:`IndexWarning`. :meth:`ReferenceIndex.check` verifies every namespace's
  files without repairing them (``evaltasks index info``). No pickle anywhere.
- Dimensions: an API provider's namespace does not pin its vectors' dimensions (an endpoint may serve any
  model under a name), so they are compared with the stored ones before anything is stored or reused. A
  provider that reports ``output_dimensions`` and does not know them yet embeds one requested text to learn
  them, unless the caller says no text of the run comes from elsewhere (``probe=False``: vectors of one store
  agree among themselves, so a call with nothing to embed costs no request); a namespace of other dimensions is
  rebuilt from this run's vectors (and reported, as corruption is).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import faiss
import numpy as np
from filelock import FileLock

from evaltasks._atomic import atomic_writer
from evaltasks._env import env_value
from evaltasks._version import __version__
from evaltasks.embeddings.base import EmbeddingProvider, VectorTable

DEFAULT_INDEX_DIR = ".evaltasks/index"
INDEX_FILE = "vectors.faiss"
META_FILE = "meta.json"
LOCK_FILE = ".lock"
FORMAT_VERSION = 1


class IndexWarning(UserWarning):
    """A reference index namespace was found corrupt (or of other dimensions) and is being rebuilt."""


_recorded: ContextVar[list[str] | None] = ContextVar("evaltasks_index_warnings", default=None)


@contextmanager
def recording_warnings() -> Iterator[list[str]]:
    """Record the index's reports (corrupt or rebuilt namespaces) made in this context, instead of emitting
    :class:`IndexWarning`; yields the list they are appended to (each message once).

    The list is shared with the threads that copy this context (Prefect's thread task runner does); tasks in
    other processes emit their reports there as warnings.
    """
    token = _recorded.set([])
    try:
        yield _recorded.get()  # type: ignore[misc]
    finally:
        _recorded.reset(token)


def recorded_warnings() -> list[str]:
    """The reports recorded so far by the innermost :func:`recording_warnings` (empty outside one)."""
    return list(_recorded.get() or [])


def _report(message: str) -> None:
    """Record ``message`` (inside :func:`recording_warnings`) or emit it as an :class:`IndexWarning`."""
    recorded = _recorded.get()
    if recorded is None:
        warnings.warn(message, IndexWarning, stacklevel=4)
    elif message not in recorded:
        recorded.append(message)


def default_index_dir() -> Path:
    """``$EVALTASKS_INDEX_DIR`` when set and not empty, else ``.evaltasks/index`` (relative to the working
    directory)."""
    return Path(env_value("EVALTASKS_INDEX_DIR") or DEFAULT_INDEX_DIR)


def text_id(text: str) -> int:
    """The content-addressed id of ``text``: the first 63 bits of its UTF-8 sha256, as a non-negative int64."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class IndexLookup:
    """What :meth:`ReferenceIndex.get_or_embed` returns.

    Attributes:
        table: vectors of every requested unique text.
        computed: unique texts the provider embedded now.
        reused: unique texts found in the index.
        stored: bool (len(table),), in the table's row order: True where the vector came from the index (the
            ``reused`` texts), False where it was embedded now.
    """

    table: VectorTable
    computed: int
    reused: int
    stored: np.ndarray | None = None


class _Namespace:
    """One namespace folder: load, verify, add, save."""

    def __init__(self, root: Path, provider: EmbeddingProvider) -> None:
        self.provider = provider
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", provider.namespace.replace("/", "--"))
        self.dir = root / slug
        self.index_path = self.dir / INDEX_FILE
        self.meta_path = self.dir / META_FILE

    def lock(self) -> FileLock:
        """The namespace's writer lock (its folder must exist)."""
        return FileLock(str(self.dir / LOCK_FILE))

    def load(self, locked: bool = False) -> tuple[np.ndarray, np.ndarray, dict]:
        """(ids int64 (n,), vectors float32 (n, d), meta). Empty arrays when absent or corrupt (warns).

        ``locked``: the caller holds :meth:`lock`. Without it, a state that does not verify is read again
        under the lock before it is called corrupt: a writer may have replaced the files between our reads.
        """
        empty = (np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32), {})
        if not self.index_path.exists():
            return empty
        try:
            return self.read_verified()
        except Exception as exc:  # noqa: BLE001 - any unreadable state means: re-read under the lock, or rebuild
            error = exc
        if not locked:
            try:
                with self.lock():
                    return self.load(locked=True)
            except OSError:  # a read-only index folder: nobody can be writing it, so the state is final
                pass
        _report(f"reference index {self.dir} is corrupt ({error}); rebuilding it")
        return empty

    def read_verified(self) -> tuple[np.ndarray, np.ndarray, dict]:
        """Read and verify the namespace (checksum, index type, count, dimensions); raise when it fails.

        The checksum and the vectors come from one open file, so a concurrent ``os.replace`` cannot pair
        one file's checksum with another's content. ``meta.json`` may describe the previous state too
        (``previous``): a writer replaces it first and ``vectors.faiss`` second, so a writer killed between
        the two leaves the previous, complete state, which is used.
        """
        meta = json.loads(self.meta_path.read_text(encoding="utf-8"))
        with open(self.index_path, "rb") as handle:
            digest = hashlib.sha256()
            for chunk in iter(lambda: handle.read(1 << 22), b""):
                digest.update(chunk)
            sha = digest.hexdigest()
            state = meta
            if sha != meta.get("index_sha256"):
                previous = meta.get("previous") or {}
                if sha != previous.get("index_sha256"):
                    raise ValueError("checksum of vectors.faiss does not match meta.json")
                state = previous
            handle.seek(0)
            index = faiss.read_index(faiss.PyCallbackIOReader(handle.read))
        id_map = faiss.downcast_index(index)
        if not isinstance(id_map, faiss.IndexIDMap2):
            raise ValueError(f"unexpected index type {type(id_map).__name__}")
        ids = faiss.vector_to_array(id_map.id_map).astype(np.int64)
        flat = faiss.downcast_index(id_map.index)  # rows of the flat index are in id_map order
        vectors = flat.reconstruct_n(0, flat.ntotal) if flat.ntotal else np.zeros((0, index.d), np.float32)
        if len(ids) != state.get("count") or index.d != state.get("dimensions"):
            raise ValueError("count or dimension disagrees with meta.json")
        meta = {**meta, "count": state["count"], "dimensions": state["dimensions"], "index_sha256": sha}
        meta.pop("previous", None)
        return ids, np.ascontiguousarray(vectors, dtype=np.float32), meta

    def save(self, ids: np.ndarray, vectors: np.ndarray, meta: dict, dimensions: int | None = None) -> None:
        """Write the metadata then the vectors, each atomically (the caller holds the lock; ``meta`` is what
        :meth:`load` returned under it, so it describes the files on disk)."""
        dim = vectors.shape[1] if vectors.ndim == 2 and vectors.shape[1] else int(dimensions or meta["dimensions"])
        index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        if len(ids):
            index.add_with_ids(vectors, ids)
        data = faiss.serialize_index(index).tobytes()
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        identity = {
            "namespace": self.provider.namespace, "provider": self.provider.provider,
            "model": self.provider.model_name, "fingerprint": self.provider.fingerprint,
        } if self.provider is not None else {k: meta[k] for k in ("namespace", "provider", "model", "fingerprint")}
        # The state on disk now (as load() returned it to the caller, who holds the lock): if this writer dies
        # between the two replacements below, the next reader verifies vectors.faiss against it.
        previous = (
            {k: meta[k] for k in ("index_sha256", "count", "dimensions")}
            if self.index_path.exists() and "index_sha256" in meta else None
        )
        meta = {
            "format": FORMAT_VERSION,
            **identity,
            "dimensions": int(dim),
            "count": int(len(ids)),
            "index_sha256": hashlib.sha256(data).hexdigest(),
            "versions": _library_versions(),
            "created": meta.get("created", now),
            "updated": now,
            "truncated_ids": meta.get("truncated_ids", []),
            **({"previous": previous} if previous else {}),
        }
        self._remove_stale_temporaries()
        # meta.json first, vectors.faiss second: every moment in between is a verifiable state (above).
        for path, payload in ((self.meta_path, json.dumps(meta, indent=2).encode()), (self.index_path, data)):
            with atomic_writer(path, "wb") as handle:
                handle.write(payload)

    def _remove_stale_temporaries(self) -> None:
        """Delete temporary files a killed writer left (only the lock holder writes here, so all are stale)."""
        for name in (INDEX_FILE, META_FILE):
            for stale in self.dir.glob(f".{name}.*.tmp"):
                stale.unlink(missing_ok=True)


class ReferenceIndex:
    """Embeddings (references, expected outputs, outputs) persisted in FAISS indexes under ``root`` (see the
    module docstring).

    Args:
        root: the index directory; created on first write.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_index_dir()

    def get_or_embed(self, provider: EmbeddingProvider, texts: Sequence[str], *, probe: bool = True) -> IndexLookup:
        """Vectors of ``texts`` from the index, embedding (and storing) only the texts not in it yet.

        Args:
            provider: the embedding provider (its namespace selects the index).
            texts: texts to embed (non-empty strings: references, outputs); duplicates are looked up once.
            probe: when every text is stored and an API provider's dimensions are unknown, embed one text to
                check the stored vectors against the endpoint's (the caller compares them with vectors from
                elsewhere). False when every vector the caller compares comes from this index: then a call
                with nothing to embed makes no provider call at all.

        Raises:
            ProviderError: embedding the missing texts failed (nothing is written then).
            OSError: the index directory cannot be written.
        """
        unique = list(dict.fromkeys(texts))
        if not unique:
            return IndexLookup(VectorTable([], np.zeros((0, 0), np.float32)), 0, 0, np.zeros(0, dtype=bool))
        ns = _Namespace(self.root, provider)
        wanted = np.fromiter((text_id(t) for t in unique), dtype=np.int64, count=len(unique))
        ids, vectors, meta = ns.load()
        stored_dim = int(vectors.shape[1]) if len(ids) else None
        checks_dim = hasattr(provider, "output_dimensions")  # an API provider: its namespace does not pin them
        known = getattr(provider, "output_dimensions", None)
        if stored_dim is not None and known is not None and known != stored_dim:
            self._report_dimensions(ns, stored_dim, known)
            ids, vectors, meta, stored_dim = ids[:0], np.zeros((0, 0), np.float32), {}, None
        found = _lookup(ids, wanted)
        missing = np.flatnonzero(found < 0)
        costs = np.zeros(len(unique))
        truncated = np.zeros(len(unique), dtype=bool)
        fresh: np.ndarray | None = None  # float32 (len(unique), d): rows embedded now
        embedded = np.zeros(len(unique), dtype=bool)
        rows = missing
        if probe and not len(rows) and stored_dim is not None and checks_dim and known is None:
            rows = np.array([0])  # all stored, dimensions unknown: embed one text to learn them
        if len(rows):
            batch = provider.embed_batch([unique[i] for i in rows])
            fresh = np.empty((len(unique), batch.vectors.shape[1]), dtype=np.float32)
            fresh[rows], costs[rows], truncated[rows], embedded[rows] = (
                batch.vectors, batch.costs, batch.truncated, True)
            if stored_dim is not None and batch.vectors.shape[1] != stored_dim:
                self._report_dimensions(ns, stored_dim, int(batch.vectors.shape[1]))
                found[:] = -1  # nothing stored is usable: embed the rest too
                rest = np.flatnonzero(~embedded)
                if len(rest):
                    more = provider.embed_batch([unique[i] for i in rest])
                    fresh[rest], costs[rest], truncated[rest], embedded[rest] = (
                        more.vectors, more.costs, more.truncated, True)
        store = np.flatnonzero(embedded & (found < 0))
        if len(store):
            assert fresh is not None
            self._store(ns, wanted[store], fresh[store], wanted[store][truncated[store]])
        hit = np.flatnonzero(found >= 0)
        dim = fresh.shape[1] if fresh is not None else stored_dim or 0
        result = np.empty((len(unique), dim), dtype=np.float32)
        if fresh is not None:
            result[embedded] = fresh[embedded]
        if len(hit):
            result[hit] = vectors[found[hit]]  # a probed text keeps its stored vector (same dimensions)
            cut = set(meta.get("truncated_ids", ()))
            truncated[hit] = [int(i) in cut for i in wanted[hit]] if cut else False
        return IndexLookup(VectorTable(unique, result, costs, truncated), computed=len(store), reused=len(hit),
                           stored=found >= 0)

    @staticmethod
    def _report_dimensions(ns: _Namespace, stored: int, now: int) -> None:
        _report(f"reference index {ns.dir} holds {stored}-dimensional vectors but the provider now returns "
                f"{now}-dimensional ones; rebuilding it")

    def _store(self, ns: _Namespace, new_ids: np.ndarray, new_vectors: np.ndarray, truncated_ids: np.ndarray) -> None:
        ns.dir.mkdir(parents=True, exist_ok=True)
        with ns.lock():
            ids, vectors, meta = ns.load(locked=True)  # re-read: another writer may have added texts meanwhile
            if len(ids) and vectors.shape[1] != new_vectors.shape[1]:  # of other dimensions: replaced
                ids, vectors = ids[:0], np.zeros((0, new_vectors.shape[1]), np.float32)
                meta["truncated_ids"] = []
            keep = _lookup(ids, new_ids) < 0
            if not keep.any():
                return
            if len(ids):
                ids = np.concatenate([ids, new_ids[keep]])
                vectors = np.concatenate([vectors, new_vectors[keep]])
            else:
                ids, vectors = new_ids[keep], new_vectors[keep]
            meta["truncated_ids"] = sorted(set(meta.get("truncated_ids", [])) | {int(i) for i in truncated_ids})
            ns.save(ids, np.ascontiguousarray(vectors, dtype=np.float32), meta)

    def missing_texts(self, provider: EmbeddingProvider, texts: Sequence[str]) -> list[str]:
        """The unique ``texts`` not yet in the index (what a run would have to embed); reads the namespace
        once and embeds nothing (a local provider's namespace hashes its model files; a model on disk is not loaded)."""
        unique = list(dict.fromkeys(texts))
        ids, _, _ = _Namespace(self.root, provider).load()
        found = _lookup(ids, np.fromiter((text_id(t) for t in unique), dtype=np.int64, count=len(unique)))
        return [unique[i] for i in np.flatnonzero(found < 0)]

    def prune(self, keep: dict[str, Sequence[str]]) -> dict[str, int]:
        """Drop every vector whose text is not in ``keep`` (namespace string -> texts to keep); a namespace
        not named in ``keep`` loses all its vectors. Outputs stored by runs are dropped unless ``keep`` names
        the same text (the next run embeds them again).

        Returns namespace -> number of vectors dropped (namespaces with nothing dropped included, as 0).
        """
        dropped: dict[str, int] = {}
        for namespace in [m.get("namespace") for m in self.info() if m.get("namespace")]:
            texts = keep.get(namespace, ())
            ns = self._namespace_by_name(namespace)
            if ns is None or not ns.index_path.exists():
                continue
            wanted = np.fromiter((text_id(t) for t in dict.fromkeys(texts)), dtype=np.int64)
            with ns.lock():
                ids, vectors, meta = ns.load(locked=True)
                keep_rows = np.isin(ids, wanted)
                dropped[namespace] = int((~keep_rows).sum())
                if dropped[namespace]:
                    kept_ids = set(ids[keep_rows].tolist())
                    meta["truncated_ids"] = [i for i in meta.get("truncated_ids", []) if i in kept_ids]
                    ns.save(ids[keep_rows], np.ascontiguousarray(vectors[keep_rows]), meta,
                            dimensions=vectors.shape[1] if vectors.ndim == 2 else None)
        return dropped

    def _namespace_by_name(self, namespace: str) -> _Namespace | None:
        for meta in self.info():
            if meta.get("namespace") == namespace:
                ns = _Namespace.__new__(_Namespace)
                ns.dir = Path(meta["path"])
                ns.index_path, ns.meta_path = ns.dir / INDEX_FILE, ns.dir / META_FILE
                ns.provider = None  # type: ignore[assignment]
                return ns
        return None

    def check(self) -> list[dict]:
        """Verify every namespace's files without reading them into FAISS or repairing anything.

        Returns one dict per namespace folder (one holding ``meta.json`` or ``vectors.faiss``): its metadata,
        ``path``, and ``problems`` (empty when healthy): ``meta.json`` missing or unreadable, ``vectors.faiss``
        missing, a size other than the one ``count`` × ``dimensions`` make (bytes: the empty index's header
        plus 4 × dimensions + 8 per vector), or a sha256 other than ``meta.json`` records. The state a killed
        writer left (``previous`` in ``meta.json``) counts as healthy, as it does for runs.
        """
        if not self.root.exists():
            return []
        out = []
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir()):
            if not (folder / META_FILE).exists() and not (folder / INDEX_FILE).exists():
                continue  # e.g. sets/ (reference-set searches)
            entry: dict = {"path": str(folder)}
            problems: list[str] = []
            meta: dict | None = None
            try:
                meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
                if not isinstance(meta, dict):
                    raise ValueError("not a JSON object")
                entry.update(meta)
            except FileNotFoundError:
                problems.append(f"{META_FILE} is missing")
            except (OSError, ValueError) as exc:
                problems.append(f"{META_FILE} is unreadable ({exc})")
                meta = None
            index_path = folder / INDEX_FILE
            if not index_path.exists():
                problems.append(f"{INDEX_FILE} is missing")
            elif meta is not None:
                problems += _check_files(index_path, meta)
            entry["problems"] = problems
            out.append(entry)
        return out

    def info(self) -> list[dict]:
        """The metadata of every namespace under ``root`` (empty when there is none)."""
        if not self.root.exists():
            return []
        out = []
        for meta_path in sorted(self.root.glob(f"*/{META_FILE}")):
            try:
                out.append({"path": str(meta_path.parent), **json.loads(meta_path.read_text(encoding="utf-8"))})
            except (OSError, ValueError) as exc:
                out.append({"path": str(meta_path.parent), "error": str(exc)})
        return out


def flat_file_size(count: int, dimensions: int) -> int:
    """Bytes of a ``vectors.faiss`` holding ``count`` vectors of ``dimensions`` (FAISS's own format)."""
    header = len(faiss.serialize_index(faiss.IndexIDMap2(faiss.IndexFlatIP(dimensions))))
    return header + count * (4 * dimensions + 8)


def _check_files(index_path: Path, meta: dict) -> list[str]:
    """What is wrong with ``index_path`` against ``meta`` (its state or the ``previous`` one): size, sha256."""
    states = [meta, *([meta["previous"]] if isinstance(meta.get("previous"), dict) else [])]
    sizes = []
    for state in states:
        count, dims = state.get("count"), state.get("dimensions")
        if isinstance(count, int) and isinstance(dims, int) and count >= 0 and dims > 0:
            sizes.append(flat_file_size(count, dims))
    if not sizes:
        return [f"{META_FILE} records no valid count and dimensions"]
    size = index_path.stat().st_size
    if size not in sizes:
        return [f"{INDEX_FILE} is {size:,} bytes, expected {sizes[0]:,} for {meta.get('count')} vectors × "
                f"{meta.get('dimensions')} dimensions (truncated or overwritten)"]
    if _file_sha256(index_path) not in {state.get("index_sha256") for state in states}:
        return [f"the sha256 of {INDEX_FILE} differs from the one {META_FILE} records"]
    return []


def _library_versions() -> dict[str, str]:
    """Versions of the libraries that shaped the stored vectors and the file format."""
    from importlib import metadata

    versions = {"evaltasks": __version__, "faiss": faiss.__version__, "numpy": np.__version__}
    for dist in ("sentence-transformers", "torch", "transformers", "openai"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _lookup(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row of each ``wanted`` id in ``ids``, or -1 when absent (vectorised with a sort)."""
    if len(ids) == 0:
        return np.full(len(wanted), -1, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    pos = np.searchsorted(sorted_ids, wanted)
    pos_clipped = np.minimum(pos, len(ids) - 1)
    hit = sorted_ids[pos_clipped] == wanted
    return np.where(hit, order[pos_clipped], -1)
