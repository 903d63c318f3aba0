"""Storage of one reference index namespace: a manifest and immutable, memory-mapped segment files.

Layout of a namespace folder (format 2)::

    meta.json                  # the manifest: identity, dimensions, count, segments (files, count, sha256 of
                               # each file, created), next_segment, truncated_ids, versions, created/updated
    seg-000001.ids.npy         # int64 (n,), sorted ascending: a lookup is one np.searchsorted per segment
    seg-000001.vectors.npy     # float32 (n, d), row i belongs to ids[i]; opened with np.load(mmap_mode="r")
    seg-000002.ids.npy ...     # one segment per write that added texts
    .lock                      # filelock guarding writers

- The manifest is the commit point. A writer (holding the lock) writes a new segment under temporary names,
  fsyncs and renames it, then replaces ``meta.json`` atomically; nothing already stored is rewritten. A
  writer killed at any moment leaves the previous manifest or the new one, each complete; segment files no
  manifest lists (a killed writer's, or a compaction's superseded ones) are removed by the next writer.
- Readers take no lock: they read one manifest and map the segments it lists. Opening checks only what is
  cheap: each file's ``.npy`` header (dtype, shape = the manifest's count × dimensions) and size. A segment's
  sha256 is computed from the bytes as they are written; it is verified on open only for segments of at most
  :data:`VERIFY_ON_OPEN_BYTES` (once per process and file), larger ones on demand
  (``evaltasks index verify``, :func:`verify_namespace`).
- Compaction merges segments into one (sorted by id) and deletes the old files after the new manifest is
  committed; a reader that read the old manifest and finds a segment gone reads the manifest again.
- Format 1 (``vectors.faiss``: a FAISS ``IndexIDMap2(IndexFlatIP)``, ``meta.json`` with its sha256) is still
  read (loaded into memory and verified whole); the first write converts it to segments.

Nothing here imports Prefect; no pickle (``.npy`` files are read with ``allow_pickle=False``).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from evaltasks._atomic import atomic_paths, atomic_writer, synced_writer
from evaltasks._env import env_value

META_FILE = "meta.json"
LEGACY_FILE = "vectors.faiss"
FORMAT_VERSION = 2
MAX_SEGMENTS_DEFAULT = 32
VERIFY_ON_OPEN_BYTES = 64 * 1024 * 1024  # segments up to this size are hashed when first opened in a process
_SEGMENT_FILE = re.compile(r"^seg-(\d{6,})\.(ids|vectors)\.npy$")
CHUNK_ROWS = 16384  # rows per copy when a segment is written (24 MiB at 384 dimensions): bounds a write's memory
_VERIFIED: dict[tuple[str, int, int, int], str] = {}  # (path, inode, size, mtime_ns) -> sha256 seen in-process


def max_segments() -> int:
    """Segments a namespace may hold before a write compacts it: ``$EVALTASKS_INDEX_MAX_SEGMENTS`` (a positive
    integer; a blank or invalid value counts as unset), else 32."""
    value = env_value("EVALTASKS_INDEX_MAX_SEGMENTS")
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else MAX_SEGMENTS_DEFAULT


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def segment_names(number: int) -> tuple[str, str]:
    """File names (ids, vectors) of segment ``number``."""
    return f"seg-{number:06d}.ids.npy", f"seg-{number:06d}.vectors.npy"


def npy_size(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes of a ``.npy`` file (format 1.0, C order) holding an array of ``shape`` and ``dtype``."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": np.dtype(dtype).str, "fortran_order": False,
                                                  "shape": tuple(shape)})
    return header.tell() + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def file_sha256(path: Path) -> str:
    """The sha256 of the file at ``path`` (read in 4 MiB chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


class _HashingWriter:
    """A binary stream that hashes what it forwards (numpy writes ``.npy`` data through ``write``)."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.digest.update(view)
        return self.handle.write(view)


@dataclass
class Segment:
    """One segment as a reader sees it.

    Attributes:
        entry: its manifest entry (``ids``/``vectors`` file names, ``count``, ``sha256``, ``created``).
        ids: int64 (n,), sorted ascending (a memory map, or an array for a format-1 namespace).
        vectors: float32 (n, d) (a memory map, or an array).
    """

    entry: dict
    ids: np.ndarray
    vectors: np.ndarray


@dataclass
class Snapshot:
    """One committed state of a namespace: the manifest read and the segments it lists, mapped.

    Rows are numbered across segments in manifest order (segment 0's rows first). ``legacy`` marks a format-1
    namespace read into memory (converted by the next write).
    """

    meta: dict = field(default_factory=dict)
    segments: list[Segment] = field(default_factory=list)
    legacy: bool = False

    @property
    def count(self) -> int:
        """Vectors stored."""
        return sum(len(s.ids) for s in self.segments)

    @property
    def dimensions(self) -> int | None:
        """Dimensions of the stored vectors; None when nothing is stored."""
        return int(self.meta["dimensions"]) if self.count else None

    def offsets(self) -> np.ndarray:
        """int64 (segments + 1,): the first row of each segment, then the total."""
        return np.concatenate([[0], np.cumsum([len(s.ids) for s in self.segments], dtype=np.int64)])

    def find(self, wanted: np.ndarray) -> np.ndarray:
        """Row of each ``wanted`` id (int64 (m,)) in this snapshot, or -1 when absent: int64 (m,)."""
        rows = np.full(len(wanted), -1, dtype=np.int64)
        todo = np.arange(len(wanted))
        for start, segment in zip(self.offsets(), self.segments):
            ids = segment.ids.view(np.ndarray)  # a plain view of the map: no np.memmap overhead per operation
            if not len(ids) or not len(todo):
                continue
            pos = np.searchsorted(ids, wanted[todo])
            np.minimum(pos, len(ids) - 1, out=pos)
            hit = ids[pos] == wanted[todo]
            rows[todo[hit]] = start + pos[hit]
            todo = todo[~hit]
        return rows

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """float32 (m, d), in memory: the vectors of ``rows`` (valid rows of :meth:`find`), read from the
        mapped files (pages come from the page cache or the disk as they are touched)."""
        if len(self.segments) == 1:
            return self.segments[0].vectors.view(np.ndarray)[rows]
        out = np.empty((len(rows), int(self.meta.get("dimensions") or 0)), dtype=np.float32)
        offsets = self.offsets()
        which = np.searchsorted(offsets, rows, side="right") - 1
        for number, segment in enumerate(self.segments):
            take = np.flatnonzero(which == number)
            if len(take):
                out[take] = segment.vectors.view(np.ndarray)[rows[take] - offsets[number]]
        return out

    def ids_at(self, rows: np.ndarray) -> np.ndarray:
        """int64 (m,): the ids of ``rows`` (snapshot rows)."""
        out = np.empty(len(rows), dtype=np.int64)
        offsets = self.offsets()
        which = np.searchsorted(offsets, rows, side="right") - 1
        for number, segment in enumerate(self.segments):
            take = np.flatnonzero(which == number)
            if len(take):
                out[take] = segment.ids[rows[take] - offsets[number]]
        return out

    def materialize(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids int64 (n,), vectors float32 (n, d)) in memory, segments concatenated in manifest order."""
        dims = int(self.meta.get("dimensions") or 0)
        if not self.segments:
            return np.zeros(0, dtype=np.int64), np.zeros((0, dims), dtype=np.float32)
        ids = np.concatenate([np.asarray(s.ids) for s in self.segments])
        vectors = np.concatenate([np.asarray(s.vectors) for s in self.segments]) if self.count else \
            np.zeros((0, dims), dtype=np.float32)
        return ids.astype(np.int64, copy=False), np.ascontiguousarray(vectors, dtype=np.float32)


def read_manifest(directory: Path) -> dict:
    """The parsed ``meta.json`` of ``directory``.

    Raises:
        FileNotFoundError: there is none.
        ValueError: it is not a JSON object.
    """
    meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
    if not isinstance(meta, dict):
        raise ValueError(f"{META_FILE} is not a JSON object")
    return meta


def _open_npy(path: Path, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Map the ``.npy`` file ``path`` read-only after checking its header and size against ``shape``.

    Raises:
        FileNotFoundError: the file is gone.
        ValueError: another dtype, shape or size (truncated, overwritten, not a ``.npy`` file).
    """
    if shape[0] == 0:  # numpy cannot map an empty array: read the header only
        array = np.load(path, allow_pickle=False)
    else:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    if array.dtype != np.dtype(dtype) or array.shape != shape or (array.ndim > 1 and not array.flags.c_contiguous):
        raise ValueError(f"{path.name} holds {array.dtype} {array.shape}, expected {np.dtype(dtype)} {shape}")
    size, expected = path.stat().st_size, npy_size(shape, dtype)
    if size != expected:
        raise ValueError(f"{path.name} is {size:,} bytes, expected {expected:,}")
    return array


def _verify_small(path: Path, sha: str | None) -> None:
    """Check the sha256 of ``path`` against ``sha`` when the file is at most :data:`VERIFY_ON_OPEN_BYTES`
    (once per process for an unchanged file). Raises ValueError when it differs."""
    stat = path.stat()
    if stat.st_size > VERIFY_ON_OPEN_BYTES:
        return
    key = (str(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    seen = _VERIFIED.get(key)
    if seen is None:
        seen = file_sha256(path)
        _VERIFIED[key] = seen
    if seen != sha:
        raise ValueError(f"the sha256 of {path.name} differs from the one {META_FILE} records")


def open_segments(directory: Path, meta: dict) -> Snapshot:
    """Map the segments ``meta`` (format 2) lists, checking the cheap things (see the module docstring).

    Raises:
        FileNotFoundError: a segment file is gone (a compaction removed it: read the manifest again).
        ValueError: the manifest or a segment is inconsistent.
    """
    dims = meta.get("dimensions")
    segments_meta = meta.get("segments")
    if not isinstance(dims, int) or dims < 0 or not isinstance(segments_meta, list):
        raise ValueError(f"{META_FILE} records no valid dimensions and segments")
    segments = []
    for entry in segments_meta:
        count = entry["count"]
        sha = entry.get("sha256") or {}
        ids = _open_npy(directory / entry["ids"], "<i8", (count,))
        vectors = _open_npy(directory / entry["vectors"], "<f4", (count, dims))
        _verify_small(directory / entry["ids"], sha.get("ids"))
        _verify_small(directory / entry["vectors"], sha.get("vectors"))
        segments.append(Segment(entry, ids, vectors))
    snapshot = Snapshot(meta, segments)
    if snapshot.count != meta.get("count"):
        raise ValueError(f"count disagrees with {META_FILE}")
    return snapshot


def segment_numbers(directory: Path) -> set[int]:
    """Numbers of the segment files present in ``directory`` (committed or not)."""
    out = set()
    for path in directory.iterdir():
        match = _SEGMENT_FILE.match(path.name)
        if match:
            out.add(int(match.group(1)))
    return out


def next_number(directory: Path, meta: dict) -> int:
    """A segment number no manifest has used and no file in ``directory`` has (the caller holds the lock)."""
    present = segment_numbers(directory)
    return max([int(meta.get("next_segment") or 1), *(n + 1 for n in present)])


def write_segment(directory: Path, number: int, ids: np.ndarray, chunks: Iterable[np.ndarray], dims: int) -> dict:
    """Write segment ``number`` (temporary names, fsync, rename) and return its manifest entry.

    Args:
        ids: int64 (n,), sorted ascending, unique.
        chunks: float32 row blocks of (n, dims) in ``ids``' order, concatenated.

    Raises:
        OSError: a write failed (no file of the segment is left then).
        ValueError: the chunks do not hold n rows.
    """
    ids_name, vectors_name = segment_names(number)
    count = len(ids)
    sha: dict[str, str] = {}
    with atomic_paths([directory / ids_name, directory / vectors_name]) as (ids_tmp, vectors_tmp):
        with synced_writer(ids_tmp, "wb") as handle:
            writer = _HashingWriter(handle)
            np.lib.format.write_array(writer, np.ascontiguousarray(ids, dtype="<i8"), allow_pickle=False)
            sha["ids"] = writer.digest.hexdigest()
        with synced_writer(vectors_tmp, "wb") as handle:
            sha["vectors"] = write_rows(handle, chunks, count, dims)
    return {"ids": ids_name, "vectors": vectors_name, "count": int(count), "sha256": sha, "created": now_iso()}


def write_rows(handle: BinaryIO, chunks: Iterable[np.ndarray], count: int, dims: int) -> str:
    """Write a float32 (count, dims) ``.npy`` to ``handle`` from row blocks, one block in memory at a time;
    return the file's sha256.

    Raises:
        ValueError: a block is not of ``dims`` columns, or the blocks do not hold ``count`` rows.
    """
    writer = _HashingWriter(handle)
    np.lib.format.write_array_header_1_0(writer, {"descr": "<f4", "fortran_order": False, "shape": (count, dims)})
    written = 0
    for chunk in chunks:
        block = np.ascontiguousarray(chunk, dtype="<f4")
        if block.ndim != 2 or block.shape[1] != dims:
            raise ValueError(f"a block of shape {block.shape} for {dims} dimensions")
        writer.write(block)
        written += len(block)
        chunk = block = None  # type: ignore[assignment]  # freed before the next block is made
    if written != count:
        raise ValueError(f"{written} vector rows written for {count} rows")
    return writer.digest.hexdigest()


def write_manifest(directory: Path, meta: dict) -> None:
    """Replace ``meta.json`` atomically (the commit point of every write)."""
    with atomic_writer(directory / META_FILE, "wb") as handle:
        handle.write(json.dumps(meta, indent=2).encode())


def remove_unlisted(directory: Path, meta: dict | None) -> list[Path]:
    """Delete segment files ``meta`` does not list, the format-1 file of a format-2 namespace, and every
    temporary file (the caller holds the lock: only it writes here, so all are stale); return what was removed."""
    listed = {name for entry in (meta or {}).get("segments", []) for name in (entry["ids"], entry["vectors"])}
    removed = []
    for path in directory.iterdir():
        name = path.name
        stale = (_SEGMENT_FILE.match(name) and name not in listed) or (name.startswith(".") and name.endswith(".tmp"))
        if name == LEGACY_FILE and meta is not None and meta.get("format") == FORMAT_VERSION:
            stale = True
        if stale:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def merged_chunks(snapshot: Snapshot, rows: np.ndarray) -> Iterator[np.ndarray]:
    """The vectors of ``rows`` (snapshot rows) in that order, in blocks of at most :data:`CHUNK_ROWS` rows."""
    for start in range(0, len(rows), CHUNK_ROWS):
        yield snapshot.gather(rows[start : start + CHUNK_ROWS])


def verify_namespace(directory: Path, meta: dict) -> list[str]:
    """Problems of a format-2 namespace's files (empty when healthy): each listed file missing, of a size or
    header other than the manifest's count × dimensions make, or of a sha256 other than it records; the counts
    of the segments not adding up to the manifest's. Reads every byte (the on-demand check)."""
    dims = meta.get("dimensions")
    segments = meta.get("segments")
    if not isinstance(dims, int) or dims < 0 or not isinstance(segments, list):
        return [f"{META_FILE} records no valid dimensions and segments"]
    problems = []
    total = 0
    for entry in segments:
        try:
            count = int(entry["count"])
            files = ((entry["ids"], "<i8", (count,), "ids"), (entry["vectors"], "<f4", (count, dims), "vectors"))
        except (KeyError, TypeError, ValueError):
            problems.append(f"{META_FILE} lists a segment without files or count")
            continue
        total += count
        for name, dtype, shape, kind in files:
            path = directory / name
            if not path.exists():
                problems.append(f"{name} is missing")
                continue
            size, expected = path.stat().st_size, npy_size(shape, dtype)
            if size != expected:
                problems.append(f"{name} is {size:,} bytes, expected {expected:,} for {count} vectors × {dims} "
                                f"dimensions (truncated or overwritten)")
                continue
            if file_sha256(path) != (entry.get("sha256") or {}).get(kind):
                problems.append(f"the sha256 of {name} differs from the one {META_FILE} records")
                continue
            try:
                _open_npy(path, dtype, shape)
            except ValueError as exc:
                problems.append(str(exc))
    if total != meta.get("count"):
        problems.append(f"the segments hold {total} vectors, {META_FILE} records {meta.get('count')}")
    return problems
