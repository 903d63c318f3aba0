"""The reference index's class, :class:`ReferenceIndex`, and the warnings it reports.

The layout on disk, the write and read protocols and what corruption costs are described on the package,
:mod:`evaltasks.index`; storage details are in :mod:`evaltasks.index._segments`, compaction, pruning and
verification in :mod:`evaltasks.index._maintenance`.
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
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np
from filelock import FileLock

from evaltasks._redact import redact
from evaltasks._version import __version__
from evaltasks.embeddings.base import EmbeddingProvider, VectorTable
from evaltasks.index import _maintenance, _segments
from evaltasks.index._blas import faiss
from evaltasks.index._rows import DamagedRows
from evaltasks.index._segments import text_id

DEFAULT_INDEX_DIR = ".evaltasks/index"
INDEX_FILE = "vectors.faiss"
META_FILE = "meta.json"
LOCK_FILE = ".lock"
FORMAT_VERSION = _segments.FORMAT_VERSION
GATHER_CHUNK = 16_384  # rows read from the segments per step of ReferenceIndex.write_vectors (24 MiB at d=384)


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


def report_warning(message: str) -> None:
    """Record ``message`` (inside :func:`recording_warnings`: it goes into the run's reports) or emit it as an
    :class:`IndexWarning`: corruption found, a rebuild, a search short of its target recall."""
    message = redact(message)  # e.g. a provider's error quoted in a warning (docs/reports.md#secrets-in-reports)
    recorded = _recorded.get()
    if recorded is None:
        warnings.warn(message, IndexWarning, stacklevel=4)
    elif message not in recorded:
        recorded.append(message)


def default_index_dir() -> Path:
    """``$EVALTASKS_INDEX_DIR`` when set and not empty, else ``.evaltasks/index`` (relative to the working
    directory)."""
    from evaltasks.settings import get_settings

    return get_settings(only=["index_dir"]).index_dir or Path(DEFAULT_INDEX_DIR)


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


class _NamespaceStore:
    """One namespace folder: open (memory-mapped segments), verify, add a segment, compact (see
    :mod:`evaltasks.index._segments` for the storage)."""

    def __init__(self, root: Path, provider: EmbeddingProvider) -> None:
        self.provider = provider
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", provider.namespace.replace("/", "--"))
        self.dir = root / slug
        self.index_path = self.dir / INDEX_FILE
        self.meta_path = self.dir / META_FILE

    def lock(self) -> FileLock:
        """The namespace's writer lock (its folder must exist)."""
        return FileLock(str(self.dir / LOCK_FILE))

    def open(self, locked: bool = False) -> _segments.Snapshot:
        """The committed state, its segments memory-mapped; an empty snapshot when absent or corrupt (reported).

        A segment that vanished between reading the manifest and mapping it (a compaction committed meanwhile)
        means: read the manifest again. ``locked``: the caller holds :meth:`lock`. Without it, a state that still
        does not verify is read again under the lock before it is called corrupt. Under the lock (or in a
        read-only folder) a segment whose files are missing or malformed is left out and reported: its texts
        are embedded again, the other segments are kept.
        """
        if not self.meta_path.exists() and not self.index_path.exists():
            return _segments.Snapshot()
        error: Exception | None = None
        for _ in range(1 if locked else 3):
            try:
                return self._reported(self.read_verified(tolerant=locked))
            except FileNotFoundError as exc:  # replaced by a compaction (or a format-1 conversion): read again
                error = exc
            except Exception as exc:  # noqa: BLE001
                error = exc
                break
        if not locked:
            try:
                with self.lock():
                    return self.open(locked=True)
            except OSError:  # a read-only index folder: nobody can be writing it, so the state is final
                try:
                    return self._reported(self.read_verified(tolerant=True))
                except Exception as exc:  # noqa: BLE001
                    error = exc
        report_warning(f"reference index {self.dir} is corrupt ({error}); rebuilding it")
        return _segments.Snapshot()

    def _reported(self, snapshot: _segments.Snapshot) -> _segments.Snapshot:
        """``snapshot``, after reporting the segments a tolerant open left out."""
        for entry, why in snapshot.broken:
            report_warning(
                f"reference index {self.dir} is corrupt ({why}): the {entry.get('count')} vectors of "
                f"that segment are embedded again when next used"
            )
        return snapshot

    def load(self, locked: bool = False) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """(ids int64 (n,), vectors float32 (n, d), meta) read into memory (segments in manifest order). Empty
        arrays when absent or corrupt (reported). For tools and tests: runs use :meth:`open`."""
        snapshot = self.open(locked)
        ids, vectors = snapshot.materialize()
        return ids, vectors, snapshot.meta

    def read_verified(self, tolerant: bool = False) -> _segments.Snapshot:
        """Read the manifest and open what it lists (format 2: map the segments, cheap checks; format 1: read
        ``vectors.faiss`` whole and verify its checksum); raise when it fails. ``tolerant``: a format-2 segment
        whose files are missing or malformed is left out (:attr:`~evaltasks.index._segments.Snapshot.broken`).

        Raises:
            FileNotFoundError: a file the manifest lists is gone.
            ValueError: anything inconsistent (and whatever FAISS raises on a bad format-1 file).
        """
        meta = _segments.read_manifest(self.dir)
        if meta.get("format") == FORMAT_VERSION:
            return _segments.open_segments(self.dir, meta, tolerant=tolerant)
        return self._read_format1(meta)

    def _read_format1(self, meta: dict[str, Any]) -> _segments.Snapshot:
        """A format-1 namespace (``vectors.faiss``), verified, as one in-memory segment sorted by id.

        The checksum and the vectors come from one open file, so a concurrent ``os.replace`` cannot pair one
        file's checksum with another's content; ``meta.json`` may describe the previous state too
        (``previous``: a format-1 writer killed between its two replacements).
        """
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
        order = np.argsort(ids, kind="stable")
        segment = _segments.Segment({}, ids[order], np.ascontiguousarray(vectors[order], dtype=np.float32))
        return _segments.Snapshot(meta, [segment], legacy=True)

    def commit(
        self,
        base: _segments.Snapshot,
        new_ids: np.ndarray | None = None,
        new_vectors: np.ndarray | None = None,
        *,
        truncated: set[int] | None = None,
        merge: str = "auto",
        keep: np.ndarray | None = None,
        dimensions: int | None = None,
    ) -> None:
        """Write a new state on top of ``base`` (the committed state, opened by the caller under the lock).

        Args:
            base: what :meth:`open` returned under the lock (empty to replace everything).
            new_ids, new_vectors: int64 (m,) ids not in ``base`` and float32 (m, d) vectors, stored as a new
                segment (sorted by id), or merged with others.
            truncated: the ids whose texts the provider truncated (replaces the manifest's list).
            merge: ``"auto"``: merge only past :func:`~evaltasks.index._segments.max_segments` segments (all but
                the largest segment when it holds most vectors, else all) or when ``base`` is format 1;
                ``"all"``: one segment (a compaction).
            keep: bool (base.count,): the stored rows to keep (a prune); implies ``merge="all"``.
            dimensions: the vectors' dimensions when nothing is stored or added.

        The manifest is replaced last (the commit point); files it no longer lists are deleted after it.
        """
        dims = (
            int(new_vectors.shape[1])
            if new_vectors is not None and len(new_vectors)
            else int(base.dimensions or dimensions or base.meta.get("dimensions") or 0)
        )
        try:
            committed: dict[str, Any] | None = _segments.read_manifest(self.dir)
        except (OSError, ValueError):
            committed = None
        _segments.remove_unlisted(
            self.dir, committed if committed and committed.get("format") == FORMAT_VERSION else None
        )
        segments = list(base.segments)
        fresh_order: np.ndarray | None = None  # the new rows sorted by id (written in blocks, not copied whole)
        if new_ids is not None and len(new_ids):
            fresh_order = np.argsort(new_ids, kind="stable")
            # in arrival order: a merge sorts every row by id anyway; written alone, it is sorted block by block
            segments.append(_segments.Segment({}, np.asarray(new_ids), np.asarray(new_vectors, dtype=np.float32)))
        combined = _segments.Snapshot({"dimensions": dims}, segments)
        sizes = [len(s.ids) for s in segments]
        if keep is not None or merge == "all" or base.legacy:
            merged = list(range(len(segments)))
        elif len(segments) > _segments.max_segments():
            largest = int(np.argmax(sizes))
            merged = [i for i in range(len(segments)) if i != largest or 2 * sizes[largest] <= sum(sizes)]
        else:
            merged = []
        # a segment with damaged rows is rewritten without them (only its rows: the others stay as they are)
        damaged = (i for i, s in enumerate(segments) if s.state is not None and s.state.generation > 0)
        merged = sorted({*merged, *damaged})
        number = _segments.next_number(self.dir, committed or {})
        entries = [s.entry for i, s in enumerate(segments) if i not in merged and s.entry]
        if fresh_order is not None and len(segments) - 1 not in merged:  # the new segment on its own
            vectors = segments[-1].vectors
            step = _segments.CHUNK_ROWS
            blocks = (vectors[fresh_order[i : i + step]] for i in range(0, len(fresh_order), step))
            entries.append(_segments.write_segment(self.dir, number, segments[-1].ids[fresh_order], blocks, dims))
            number += 1
        if merged:
            offsets = combined.offsets()
            rows = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in merged])
            if keep is not None:
                rows = rows[np.asarray(keep)[rows]] if len(rows) else rows
            known = [s.state.generation for s in segments if s.state is not None]
            bad = combined.verify(rows)  # every row merged is checked: damage is dropped, never copied
            if known != [s.state.generation for s in segments if s.state is not None]:  # not reported yet
                report_dropped(self.dir, int(bad.sum()), combined)
            rows = rows[~bad]
            ids = combined.ids_at(rows)
            order = np.argsort(ids, kind="stable")
            if len(rows):
                entries.append(
                    _segments.write_segment(
                        self.dir, number, ids[order], _segments.merged_chunks(combined, rows[order]), dims
                    )
                )
                number += 1
        now = _segments.now_iso()
        meta = base.meta
        identity = (
            {
                "namespace": self.provider.namespace,
                "provider": self.provider.provider,
                "model": self.provider.model_name,
                "fingerprint": self.provider.fingerprint,
            }
            if self.provider is not None
            else {k: meta[k] for k in ("namespace", "provider", "model", "fingerprint")}
        )
        cut = set(meta.get("truncated_ids", [])) if truncated is None else truncated
        if keep is not None:  # a prune: the dropped texts' marks go with them
            cut &= set(combined.ids_at(np.flatnonzero(np.asarray(keep))).tolist())
        new_meta = {
            "format": FORMAT_VERSION,
            **identity,
            "dimensions": dims,
            "count": int(sum(e["count"] for e in entries)),
            "segments": entries,
            "next_segment": number,
            "versions": dict(_library_versions()),
            "created": meta.get("created", now),
            "updated": now,
            "truncated_ids": sorted(int(i) for i in cut),
        }
        _segments.write_manifest(self.dir, new_meta)
        _segments.remove_unlisted(self.dir, new_meta)


class ReferenceIndex:
    """Embeddings (references, expected outputs, outputs) persisted in memory-mapped segment files under
    ``root`` (see the module docstring).

    Args:
        root: the index directory; created on first write.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_index_dir()

    def get_or_embed(
        self, provider: EmbeddingProvider, texts: Sequence[str], *, probe: bool = True, vectors: bool = True
    ) -> IndexLookup:
        """Vectors of ``texts`` from the index, embedding (and storing) only the texts not in it yet.

        Args:
            provider: the embedding provider (its namespace selects the index).
            texts: texts to embed (non-empty strings: references, outputs); duplicates are looked up once.
            probe: when every text is stored and an API provider's dimensions are unknown, embed one text to
                check the stored vectors against the endpoint's (the caller compares them with vectors from
                elsewhere). False when every vector the caller compares comes from this index: then a call
                with nothing to embed makes no provider call at all.
            vectors: False: the caller only needs the texts stored (a reference set's, read later with
                :meth:`write_vectors`): the table's vectors have shape (n, 0) and nothing stored is read.

        Raises:
            ProviderError: embedding the missing texts failed (nothing is written then).
            OSError: the index directory cannot be written.
        """
        unique = list(dict.fromkeys(texts))
        if not unique:
            return IndexLookup(VectorTable([], np.zeros((0, 0), np.float32)), 0, 0, np.zeros(0, dtype=bool))
        ns = _NamespaceStore(self.root, provider)
        wanted = np.fromiter((text_id(t) for t in unique), dtype=np.int64, count=len(unique))
        snapshot = ns.open()
        stored_dim = snapshot.dimensions
        checks_dim = hasattr(provider, "output_dimensions")  # an API provider: its namespace does not pin them
        known = getattr(provider, "output_dimensions", None)
        if stored_dim is not None and known is not None and known != stored_dim:
            self._report_dimensions(ns, stored_dim, known)
            snapshot, stored_dim = _segments.Snapshot(), None
        meta = snapshot.meta
        found = snapshot.find(wanted)
        # read (and check) the stored vectors first: a damaged one counts as missing and is embedded again; and
        # a write may compact (and delete) the files mapped here
        stored: np.ndarray | None = None  # float32 (found, d): the checked stored vectors, in found's order
        if vectors and (found >= 0).any():
            hit = np.flatnonzero(found >= 0)
            stored, bad = snapshot.read(found[hit])
            if bad.any():
                found[hit[bad]] = -1
                stored = stored[~bad]
        if snapshot.damaged():  # found now, or by an earlier search (a damaged id is left out of the search)
            report_warning(
                f"reference index {ns.dir} is corrupt ({'; '.join(snapshot.reasons())}): damaged vectors "
                "are never read; their texts are embedded again, the others are kept"
            )
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
            if len(rows) == len(unique):  # every text embedded now: the provider's array, not a copy of it
                fresh = np.ascontiguousarray(batch.vectors, dtype=np.float32)
                costs[:], truncated[:], embedded[:] = batch.costs, batch.truncated, True
            else:
                fresh = np.empty((len(unique), batch.vectors.shape[1]), dtype=np.float32)
                fresh[rows], costs[rows], truncated[rows], embedded[rows] = (
                    batch.vectors,
                    batch.costs,
                    batch.truncated,
                    True,
                )
            if stored_dim is not None and batch.vectors.shape[1] != stored_dim:
                self._report_dimensions(ns, stored_dim, int(batch.vectors.shape[1]))
                found[:] = -1  # nothing stored is usable: embed the rest too
                rest = np.flatnonzero(~embedded)
                if len(rest):
                    more = provider.embed_batch([unique[i] for i in rest])
                    fresh[rest], costs[rest], truncated[rest], embedded[rest] = (
                        more.vectors,
                        more.costs,
                        more.truncated,
                        True,
                    )
        hit = np.flatnonzero(found >= 0)
        dim = fresh.shape[1] if fresh is not None else stored_dim or 0
        if not vectors:
            result = np.zeros((len(unique), 0), dtype=np.float32)
        elif fresh is not None and not len(hit) and embedded.all():
            result = fresh
        elif fresh is None and stored is not None and len(hit) == len(unique):
            result = stored
        else:
            result = np.empty((len(unique), dim), dtype=np.float32)
            if fresh is not None:
                result[embedded] = fresh[embedded]
            if len(hit):
                result[hit] = stored  # a probed text keeps its stored vector (same dims)
        if len(hit):
            cut = set(meta.get("truncated_ids", ()))
            truncated[hit] = [int(i) in cut for i in wanted[hit]] if cut else False
        store = np.flatnonzero(embedded & (found < 0))
        if len(store):
            assert fresh is not None
            every = len(store) == len(unique)  # all embedded now: no copy of the vectors
            self._store(
                ns,
                wanted if every else wanted[store],
                fresh if every else fresh[store],
                wanted[store][truncated[store]],
            )
        return IndexLookup(
            VectorTable(unique, result, costs, truncated), computed=len(store), reused=len(hit), stored=found >= 0
        )

    def write_vectors(
        self,
        provider: EmbeddingProvider,
        texts: Sequence[str],
        destination: Path | None = None,
        chunk: int = GATHER_CHUNK,
    ) -> np.ndarray:
        """The stored vectors of ``texts`` (unique, every one in the index), float32 (len(texts), d) in their
        order, read from the mapped segments ``chunk`` rows at a time.

        With ``destination`` (a ``.npy`` path) they are written there (numpy's format, a temporary file fsynced
        and renamed: readers see it whole or not at all) and returned mapped read-only from it, so the caller's
        memory holds one chunk at a time, never the whole set: a reference set of 10^7 texts is 15.4 GB. Without,
        they are returned in memory.

        Raises:
            KeyError: some text is not in the index (names how many, and the first).
            ValueError: ``texts`` repeats a text.
            OSError: damaged vectors were still read after they were embedded again (a failing disk).

        A stored vector found damaged (its row checksum) is embedded again with ``provider`` and stored.
        """
        from evaltasks._atomic import atomic_path, synced_writer

        ids = np.fromiter((text_id(t) for t in texts), dtype=np.int64, count=len(texts))
        if len(np.unique(ids)) != len(ids):
            raise ValueError("write_vectors: texts must be unique")
        for _ in range(4):  # a damaged stored vector found while reading: embed it again, read again
            snapshot = _NamespaceStore(self.root, provider).open()
            rows = snapshot.find(ids)
            redo = np.flatnonzero((rows < 0) & np.isin(ids, snapshot.damaged_ids()))
            if len(redo):
                self.get_or_embed(provider, [texts[int(i)] for i in redo], probe=False, vectors=False)
                continue
            missing = np.flatnonzero(rows < 0)
            if len(missing):
                raise KeyError(
                    f"{len(missing)} of {len(texts)} texts are not in the reference index {self.root} "
                    f"(namespace {provider.namespace}), e.g. {texts[int(missing[0])][:80]!r}"
                )
            dims = snapshot.dimensions or 0
            try:
                if destination is None:
                    return snapshot.gather(rows) if len(rows) else np.zeros((0, dims), dtype=np.float32)
                destination.parent.mkdir(parents=True, exist_ok=True)
                with atomic_path(destination) as tmp, synced_writer(tmp, "wb") as handle:
                    _segments.write_rows(
                        cast(BinaryIO, handle),
                        (snapshot.gather(rows[start : start + chunk]) for start in range(0, len(rows), chunk)),
                        len(rows),
                        dims,
                    )
                break
            except DamagedRows as exc:
                report_warning(
                    f"reference index {self.root} (namespace {provider.namespace}) is corrupt ({exc}): "
                    "those vectors are embedded again"
                )
        else:
            raise OSError(
                f"the reference index {self.root} (namespace {provider.namespace}) keeps reading damaged "
                "vectors: run `evaltasks index verify`"
            )
        mapped: np.ndarray = np.load(destination, mmap_mode="r", allow_pickle=False)
        return mapped

    @staticmethod
    def _report_dimensions(ns: _NamespaceStore, stored: int, now: int) -> None:
        report_warning(
            f"reference index {ns.dir} holds {stored}-dimensional vectors but the provider now returns "
            f"{now}-dimensional ones; rebuilding it"
        )

    def _store(
        self, ns: _NamespaceStore, new_ids: np.ndarray, new_vectors: np.ndarray, truncated_ids: np.ndarray
    ) -> None:
        """Add the vectors of ``new_ids`` not stored yet as a new segment (under the lock; nothing stored is
        rewritten unless the namespace passes its segment limit or is of format 1)."""
        ns.dir.mkdir(parents=True, exist_ok=True)
        with ns.lock():
            base = ns.open(locked=True)  # re-read: another writer may have added texts meanwhile
            cut = set(base.meta.get("truncated_ids", []))
            if base.count and base.dimensions != new_vectors.shape[1]:  # of other dimensions: replaced
                base, cut = _segments.Snapshot({k: v for k, v in base.meta.items() if k == "created"}), set()
            keep = base.find(new_ids) < 0
            if not keep.any():
                return
            if not keep.all():  # another writer stored some meanwhile
                new_ids, new_vectors = new_ids[keep], new_vectors[keep]
            ns.commit(base, new_ids, new_vectors, truncated=cut | {int(i) for i in truncated_ids})

    def missing_texts(self, provider: EmbeddingProvider, texts: Sequence[str]) -> list[str]:
        """The unique ``texts`` not yet in the index (what a run would have to embed); reads the namespace
        once and embeds nothing (a local provider's namespace hashes its model files; a model on disk is not loaded)."""
        unique = list(dict.fromkeys(texts))
        snapshot = _NamespaceStore(self.root, provider).open()
        found = snapshot.find(np.fromiter((text_id(t) for t in unique), dtype=np.int64, count=len(unique)))
        return [unique[i] for i in np.flatnonzero(found < 0)]

    def prune(self, keep: dict[str, Sequence[str]], dry_run: bool = False) -> dict[str, int]:
        """Drop every vector whose text is not in ``keep`` (namespace string -> texts to keep); a namespace
        not named in ``keep`` loses all its vectors. Outputs stored by runs are dropped unless ``keep`` names
        the same text (the next run embeds them again). ``dry_run``: count only, change nothing.

        Returns namespace -> number of vectors dropped (namespaces with nothing dropped included, as 0), or
        with ``dry_run`` that would be.
        """
        return _maintenance.prune(self, keep, dry_run)

    @staticmethod
    def report_dropped(directory: Path, count: int, snapshot: _segments.Snapshot) -> None:
        """Report that a write drops ``count`` damaged stored vectors of the namespace in ``directory``
        (:func:`report_warning`; compaction, :mod:`evaltasks.index._maintenance`, reports through it)."""
        report_dropped(directory, count, snapshot)

    def compact(
        self, namespace: str | None = None, *, failed: dict[str, str] | None = None
    ) -> dict[str, tuple[int, int]]:
        """Merge each namespace's segments into one sorted segment (a format-1 namespace is converted), under
        its writer lock; the old files are deleted once the new manifest is committed. Readers keep working
        meanwhile (a reader that finds a segment gone reads the manifest again).

        Every row is checked (its row checksum, or its segment's sha256 for a segment written before row
        checksums): damaged rows, and segments whose files are missing or malformed, are dropped and reported
        (their texts are embedded again when next used), so a damaged namespace is rebuilt from what is intact.

        Args:
            namespace: only this namespace (its namespace string); None: all.
            failed: when given, filled with folder -> why for each namespace that cannot be read at all (its
                ``meta.json`` unreadable or inconsistent with the files); such a namespace is left as it is.

        Returns:
            namespace -> (segments before, segments after); before is 0 for a format-1 namespace (converted); a
            healthy namespace already in one segment is left as is.
        """
        return _maintenance.compact(self, namespace, failed=failed)

    def _namespace_by_name(self, namespace: str) -> _NamespaceStore | None:
        for meta in self.info():
            if meta.get("namespace") == namespace:
                ns = _NamespaceStore.__new__(_NamespaceStore)
                ns.dir = Path(meta["path"])
                ns.index_path, ns.meta_path = ns.dir / INDEX_FILE, ns.dir / META_FILE
                ns.provider = None  # type: ignore[assignment]
                return ns
        return None

    def check(self) -> list[dict[str, Any]]:
        """Verify every namespace's files, every byte, without repairing anything (``evaltasks index info`` and
        ``evaltasks index verify``).

        Returns one dict per namespace folder (one holding ``meta.json``, segments or ``vectors.faiss``): its metadata,
        ``path``, and ``problems`` (empty when healthy): ``meta.json`` missing or unreadable; for each segment
        file: missing, a size other than its ``.npy`` header plus count × dimensions make, a sha256 other than
        ``meta.json`` records, a header of another shape or dtype; segment counts not adding up. A format-1
        namespace: ``vectors.faiss`` missing, of another size (the empty index's header plus 4 × dimensions + 8
        per vector) or sha256; the state a killed format-1 writer left (``previous``) counts as healthy.
        """
        return _maintenance.check(self.root)

    def info(self) -> list[dict[str, Any]]:
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


def report_dropped(directory: Path, count: int, snapshot: _segments.Snapshot) -> None:
    """Report that a write drops ``count`` damaged stored vectors of the namespace in ``directory``."""
    report_warning(
        f"reference index {directory}: dropped {count} damaged vectors ({'; '.join(snapshot.reasons())}); "
        "their texts are embedded again when next used"
    )


@lru_cache(maxsize=1)
def _library_versions() -> dict[str, str]:
    """Versions of the libraries that shaped the stored vectors and the file format (read once per process:
    looking them up costs ~0.1 s, which a write of one text would otherwise pay)."""
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
