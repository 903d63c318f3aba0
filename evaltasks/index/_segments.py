"""Storage of one reference index namespace: a manifest and immutable, memory-mapped segment files.

Layout of a namespace folder (format 2)::

    meta.json                  # the manifest: identity, dimensions, count, segments (files, count, sha256 of
                               # each file, created), next_segment, truncated_ids, versions, created/updated
    seg-000001.ids.npy         # int64 (n,), sorted ascending: a lookup is one np.searchsorted per segment
    seg-000001.vectors.npy     # float32 (n, d), row i belongs to ids[i]; opened with np.load(mmap_mode="r")
    seg-000001.crc32.npy       # uint32 (n,), the CRC-32 of row i's id and vector (:mod:`evaltasks.index._rows`)
    seg-000002.ids.npy ...     # one segment per write that added texts
    .lock                      # filelock guarding writers

- The manifest is the commit point. A writer (holding the lock) writes a new segment under temporary names,
  fsyncs and renames it, then replaces ``meta.json`` atomically; nothing already stored is rewritten. A
  writer killed at any moment leaves the previous manifest or the new one, each complete; segment files no
  manifest lists (a killed writer's, or a compaction's superseded ones) are removed by the next writer.
- Readers take no lock: they read one manifest and map the segments it lists. Opening checks only what is
  cheap: each file's ``.npy`` header (dtype, shape = the manifest's count × dimensions) and size. Every byte is
  checked before it is used, at any size (:mod:`evaltasks.index._rows`): a row's checksum the first time a
  process reads the row, the ids file's sha256 on a process's first search; a damaged row counts as absent (its
  text is embedded again) and the next write drops it. A segment's sha256 is computed from the bytes as they are
  written; every file is verified whole on demand (``evaltasks index verify``, :func:`verify_namespace`).
- Under the writer lock (``tolerant``), a segment whose files are missing, truncated or of another header is
  left out of the snapshot (:attr:`Snapshot.broken`): its texts are embedded again and the next manifest no
  longer lists it; the other segments are kept.
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
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np

from evaltasks._atomic import atomic_paths, atomic_writer, synced_writer
from evaltasks.index._rows import CHECKS_DTYPE, DamagedRows, RowState, check_rows, row_checksums, state_for

META_FILE = "meta.json"
LEGACY_FILE = "vectors.faiss"
FORMAT_VERSION = 2
MAX_SEGMENTS_DEFAULT = 32
_SEGMENT_FILE = re.compile(r"^seg-(\d{6,})\.(ids|vectors|crc32)\.npy$")
CHUNK_ROWS = 16384  # rows per copy when a segment is written (24 MiB at 384 dimensions): bounds a write's memory
TABLE_ABOVE = 256  # ids looked up at once above which several segments are searched through one merged table
_TABLES: OrderedDict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = (
    OrderedDict()
)  # merged search tables, newest last
_TABLES_KEPT = 2
SORT_ABOVE = 64  # ids looked up at once above which they are sorted before the binary search (cache locality)
GATHER_BYTES = 1 << 20  # a multi-segment gather copies each segment's rows through a buffer this size (stays in cache)
_TABLES_LOCK = threading.Lock()


def text_id(text: str) -> int:
    """The content-addressed id of ``text``: the first 63 bits of its UTF-8 sha256, as a non-negative int64 (the
    id a segment stores for it)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


def max_segments() -> int:
    """Segments a namespace may hold before a write compacts it: ``$EVALTASKS_INDEX_MAX_SEGMENTS``
    (:attr:`evaltasks.settings.Settings.index_max_segments`: a positive integer, default
    :data:`MAX_SEGMENTS_DEFAULT`). Raises :class:`evaltasks.settings.SettingsError` for any other value."""
    from evaltasks.settings import get_settings

    return get_settings(only=["index_max_segments"]).index_max_segments


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def segment_names(number: int) -> tuple[str, str]:
    """File names (ids, vectors) of segment ``number``."""
    return f"seg-{number:06d}.ids.npy", f"seg-{number:06d}.vectors.npy"


def checks_name(number: int) -> str:
    """File name of segment ``number``'s row checksums."""
    return f"seg-{number:06d}.crc32.npy"


def entry_files(entry: dict[str, Any]) -> list[str]:
    """The file names a manifest entry lists (ids, vectors, and row checksums when it has them)."""
    return [entry["ids"], entry["vectors"], *([entry["crc32"]] if entry.get("crc32") else [])]


def npy_size(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes of a ``.npy`` file (format 1.0, C order) holding an array of ``shape`` and ``dtype``."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": tuple(shape)}
    )
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
        entry: its manifest entry (``ids``/``vectors``/``crc32`` file names, ``count``, ``sha256``, ``created``).
        ids: int64 (n,), sorted ascending (a memory map, or an array for a format-1 namespace).
        vectors: float32 (n, d) (a memory map, or an array).
        checks: uint32 (n,), the rows' checksums (a memory map); None for an in-memory segment or one written
            before row checksums.
        state: what this process has checked of the files (:class:`~evaltasks.index._rows.RowState`); None for
            an in-memory segment (vectors being written, or a format-1 namespace verified whole): trusted.
        directory: the namespace folder (to hash the files).
    """

    entry: dict[str, Any]
    ids: np.ndarray
    vectors: np.ndarray
    checks: np.ndarray | None = None
    state: RowState | None = None
    directory: Path | None = None
    headers: dict[str, bytes] = field(default_factory=dict)

    def file_sha256(self, kind: str) -> str:
        """The sha256 of the ``kind`` (``ids``/``vectors``) file as mapped: its ``.npy`` header, read when it was
        opened, then the mapped data (never the path: a compaction may have deleted the file since)."""
        digest = hashlib.sha256(self.headers[kind])
        data = (self.ids if kind == "ids" else self.vectors).view(np.ndarray).reshape(-1).view(np.uint8)
        for start in range(0, len(data), 1 << 24):
            digest.update(data[start : start + (1 << 24)])  # type: ignore[arg-type]  # numpy's stubs lack __buffer__
        return digest.hexdigest()

    def check_ids(self) -> None:
        """Hash the ids file once per process; when it differs from the manifest's sha256, find the damaged rows
        through the row checksums (which cover the ids), or count every row damaged without them."""
        state = self.state
        if state is None or state.ids_checked:
            return
        with state.lock:
            if state.ids_checked:
                return
            name = self.entry["ids"]
            if self.file_sha256("ids") != (self.entry.get("sha256") or {}).get("ids"):
                if self.checks is None:
                    state.mark_bad(np.arange(len(self.ids)), f"the sha256 of {name} differs")
                else:
                    bad = [
                        start
                        + np.flatnonzero(
                            row_checksums(
                                self.ids[start : start + CHUNK_ROWS], self.vectors[start : start + CHUNK_ROWS]
                            )
                            != self.checks[start : start + CHUNK_ROWS]
                        )
                        for start in range(0, len(self.ids), CHUNK_ROWS)
                    ]
                    rows = np.concatenate(bad) if bad else np.zeros(0, dtype=np.int64)
                    state.mark_bad(rows, f"{name}: {len(rows)} rows differ from their checksums")
            state.ids_checked = True

    def read(self, local: np.ndarray, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(float32 (m, d) the vectors of segment rows ``local``, bool (m,) which are damaged): each row checked
        the first time this process reads it (a damaged row's values are garbage: never use them).

        ``local`` must lie in [0, n) (:meth:`Snapshot.read` checks it); ``out``: float32 (m, d) to copy into
        (one copy: ``np.take`` with ``mode="clip"`` writes straight into it; ``"raise"`` would buffer it)."""
        data = np.take(self.vectors.view(np.ndarray), local, axis=0, out=out, mode="clip")
        if self.state is None:
            return data, np.zeros(len(local), dtype=bool)
        entry = self.entry

        def whole() -> str | None:
            same = self.file_sha256("vectors") == (entry.get("sha256") or {}).get("vectors")
            return None if same else f"the sha256 of {entry['vectors']} differs"

        return data, check_rows(self.state, local, data, self.ids, self.checks, whole, entry["vectors"])


@dataclass
class Snapshot:
    """One committed state of a namespace: the manifest read and the segments it lists, mapped.

    Rows are numbered across segments in manifest order (segment 0's rows first). ``legacy`` marks a format-1
    namespace read into memory (converted by the next write). ``broken``: (manifest entry, why) of the segments
    left out because their files are missing or malformed (a tolerant open, under the writer lock).
    """

    meta: dict[str, Any] = field(default_factory=dict)
    segments: list[Segment] = field(default_factory=list)
    legacy: bool = False
    broken: list[tuple[dict[str, Any], str]] = field(default_factory=list)

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

    def damaged(self) -> bool:
        """Whether this process found damaged rows in any segment (a write drops them)."""
        return any(s.state is not None and s.state.generation > 0 for s in self.segments)

    def find(self, wanted: np.ndarray) -> np.ndarray:
        """Row of each ``wanted`` id (int64 (m,)) in this snapshot, or -1 when absent or damaged: int64 (m,).

        One segment: one ``searchsorted`` on its mapped ids. Several: a few ids are searched segment by
        segment; more (over :data:`TABLE_ABOVE`) through one table of every segment's ids merged (built once per
        process and set of segments, 16 bytes a row, kept for the last two sets), so a lookup costs one search
        whatever the segment count. A segment's ids file is hashed on its first search in the process.
        """
        for segment in self.segments:
            segment.check_ids()
        rows = np.full(len(wanted), -1, dtype=np.int64)
        if not len(wanted) or not self.segments:
            return rows
        damaged = self.damaged()
        if len(self.segments) == 1 and not damaged:
            ids = self.segments[0].ids.view(np.ndarray)  # a plain view of the map: no np.memmap overhead
            return _search(ids, wanted) if len(ids) else rows
        if len(wanted) <= TABLE_ABOVE and not damaged:
            return self._find_each(wanted, rows)
        ids, where = self._table()
        return _search(ids, wanted, where) if len(ids) else rows

    def _find_each(self, wanted: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """:meth:`find` segment by segment (a few ids, no damaged rows)."""
        todo = np.arange(len(wanted))
        for start, segment in zip(self.offsets(), self.segments):
            ids = segment.ids.view(np.ndarray)
            if not len(ids) or not len(todo):
                continue
            pos = np.searchsorted(ids, wanted[todo])
            np.minimum(pos, len(ids) - 1, out=pos)
            hit = ids[pos] == wanted[todo]
            rows[todo[hit]] = start + pos[hit]
            todo = todo[~hit]
        return rows

    def _table(self) -> tuple[np.ndarray, np.ndarray]:
        """(int64 ids sorted, int64 their snapshot rows) over every segment, damaged rows left out; an id in
        several segments keeps its first segment's row (a stable sort). Cached per process by the segments'
        files and the damage found in them."""
        key = (
            tuple((s.state.key, s.state.generation) for s in self.segments if s.state is not None)
            if all(s.state is not None for s in self.segments)
            else None
        )
        if key is not None:
            with _TABLES_LOCK:
                if key in _TABLES:
                    _TABLES.move_to_end(key)
                    return _TABLES[key]
        parts, where = [], []
        for start, segment in zip(self.offsets(), self.segments):
            ids = segment.ids.view(np.ndarray)
            if segment.state is not None and segment.state.bad.any():
                keep = np.flatnonzero(~segment.state.bad)
                parts.append(ids[keep])
                where.append(start + keep)
            else:
                parts.append(ids)
                where.append(np.arange(start, start + len(ids), dtype=np.int64))
        ids = np.concatenate(parts)
        order = np.argsort(ids, kind="stable")  # the segments are sorted runs: a merge
        table = (ids[order], np.concatenate(where)[order])
        if key is not None:
            with _TABLES_LOCK:
                _TABLES[key] = table
                while len(_TABLES) > _TABLES_KEPT:
                    _TABLES.popitem(last=False)
        return table

    def read(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(float32 (m, d) in memory: the vectors of ``rows`` (rows of :meth:`find`), bool (m,): which are
        damaged). Pages come from the page cache or the disk as they are touched; each row's checksum is checked
        the first time this process reads it. A damaged row's vector holds garbage: callers must drop it."""
        rows = np.asarray(rows, dtype=np.int64)
        low, high = (int(rows.min()), int(rows.max())) if len(rows) else (0, 0)
        if low < 0 or (len(rows) and high >= self.count):
            raise IndexError(f"rows outside [0, {self.count}) of the snapshot")
        offsets = self.offsets()
        number = int(np.searchsorted(offsets, low, side="right")) - 1
        if len(self.segments) == 1 or (len(rows) and high < offsets[number + 1]):  # one segment holds them all
            return self.segments[max(number, 0)].read(rows - offsets[max(number, 0)])  # one copy
        dims = int(self.meta.get("dimensions") or 0)
        out = np.empty((len(rows), dims), dtype=np.float32)
        bad = np.zeros(len(rows), dtype=bool)
        # numpy gathers from one array per call, so each segment's rows are copied into a small buffer (it stays
        # in cache), then to their places in ``out`` (the requested order). Rows are read in ascending order
        # (sorted once): each segment's file is walked forward, its pages and cache lines in order.
        order = np.argsort(rows)
        ordered = rows[order]
        bounds = np.searchsorted(ordered, offsets)
        step = max(1, GATHER_BYTES // max(1, 4 * dims))
        buffer = np.empty((min(step, len(rows)), dims), dtype=np.float32)
        for number, segment in enumerate(self.segments):
            for first in range(int(bounds[number]), int(bounds[number + 1]), step):
                last = min(int(bounds[number + 1]), first + step)
                take = order[first:last]
                data, damaged = segment.read(ordered[first:last] - offsets[number], out=buffer[: last - first])
                out[take] = data
                if damaged.any():
                    bad[take] = damaged
        return out, bad

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """float32 (m, d), in memory: the vectors of ``rows`` (valid rows of :meth:`find`), each checked.

        Raises:
            DamagedRows: some rows' bytes are damaged (their rows in ``.rows``; this process's later
                :meth:`find` calls no longer return them).
        """
        out, bad = self.read(rows)
        if bad.any():
            raise DamagedRows(rows[bad], "; ".join(self.reasons()))
        return out

    def verify(self, rows: np.ndarray) -> np.ndarray:
        """bool (m,): which of ``rows`` are damaged, checking them :data:`CHUNK_ROWS` at a time (reads them)."""
        bad = np.zeros(len(rows), dtype=bool)
        for start in range(0, len(rows), CHUNK_ROWS):
            bad[start : start + CHUNK_ROWS] = self.read(rows[start : start + CHUNK_ROWS])[1]
        return bad

    def damaged_ids(self) -> np.ndarray:
        """int64: the ids of the rows this process found damaged (as stored: a damaged id may be garbage)."""
        parts = [np.asarray(s.ids)[s.state.bad] for s in self.segments if s.state is not None and s.state.bad.any()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def reasons(self) -> list[str]:
        """What this process found damaged in the segments (one line per finding) and the broken segments."""
        found = [reason for s in self.segments if s.state is not None for reason in s.state.reasons]
        return found + [why for _, why in self.broken]

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
        """(ids int64 (n,), vectors float32 (n, d)) in memory, segments concatenated in manifest order, every
        row checked; damaged rows are left out."""
        dims = int(self.meta.get("dimensions") or 0)
        if not self.count:
            return np.zeros(0, dtype=np.int64), np.zeros((0, dims), dtype=np.float32)
        rows = np.arange(self.count, dtype=np.int64)
        vectors, bad = self.read(rows)
        for segment in self.segments:
            segment.check_ids()
        bad |= np.concatenate(
            [s.state.bad if s.state is not None else np.zeros(len(s.ids), dtype=bool) for s in self.segments]
        )
        ids = self.ids_at(rows[~bad])
        return ids.astype(np.int64, copy=False), np.ascontiguousarray(vectors[~bad], dtype=np.float32)


def _search(ids: np.ndarray, wanted: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
    """int64 (m,): the position of each ``wanted`` id in ``ids`` (sorted, not empty), mapped through ``where``
    (int64, same length as ``ids``) when given; -1 when absent.

    Over :data:`SORT_ABOVE` ids, the ids are sorted first: consecutive binary searches then walk the same
    cache lines (numpy's ``searchsorted`` narrows its range from the previous key when keys ascend), about 3
    times faster at 10,000 ids in 10^6 than the searches in request order; the result is in request order."""
    order = np.argsort(wanted) if len(wanted) > SORT_ABOVE else None
    keys = wanted if order is None else wanted[order]
    pos = np.searchsorted(ids, keys)
    np.minimum(pos, len(ids) - 1, out=pos)
    found = np.where(ids[pos] == keys, pos if where is None else where[pos], -1)
    if order is None:
        return found
    rows = np.empty_like(found)
    rows[order] = found
    return rows


def read_manifest(directory: Path) -> dict[str, Any]:
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
    size, expected = path.stat().st_size, npy_size(shape, dtype)
    if size != expected:  # first: mapping a truncated file fails with numpy's own message
        raise ValueError(f"{path.name} is {size:,} bytes, expected {expected:,}")
    array: np.ndarray
    if shape[0] == 0:  # numpy cannot map an empty array: read the header only
        array = np.load(path, allow_pickle=False)
    else:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    if array.dtype != np.dtype(dtype) or array.shape != shape or (array.ndim > 1 and not array.flags.c_contiguous):
        raise ValueError(f"{path.name} holds {array.dtype} {array.shape}, expected {np.dtype(dtype)} {shape}")
    return array


def _header(path: Path, array: np.ndarray) -> bytes:
    """The ``.npy`` header bytes of ``path`` (what precedes ``array``'s data in it)."""
    with open(path, "rb") as handle:
        return handle.read(path.stat().st_size - array.nbytes)


def open_segments(directory: Path, meta: dict[str, Any], tolerant: bool = False) -> Snapshot:
    """Map the segments ``meta`` (format 2) lists, checking the cheap things (see the module docstring).

    Args:
        tolerant: a segment whose files are missing or malformed is left out (:attr:`Snapshot.broken`) instead
            of raising (the caller holds the writer lock: no compaction can be removing them).

    Raises:
        FileNotFoundError: a segment file is gone (a compaction removed it: read the manifest again).
        ValueError: the manifest or a segment is inconsistent.
    """
    dims = meta.get("dimensions")
    segments_meta = meta.get("segments")
    if not isinstance(dims, int) or dims < 0 or not isinstance(segments_meta, list):
        raise ValueError(f"{META_FILE} records no valid dimensions and segments")
    segments, broken, total = [], [], 0
    for entry in segments_meta:
        count = entry["count"]
        total += count
        try:
            ids = _open_npy(directory / entry["ids"], "<i8", (count,))
            vectors = _open_npy(directory / entry["vectors"], "<f4", (count, dims))
            checks = _open_npy(directory / entry["crc32"], CHECKS_DTYPE, (count,)) if entry.get("crc32") else None
            state = state_for([directory / name for name in entry_files(entry)], count)
            headers = {
                kind: _header(directory / entry[kind], array) for kind, array in (("ids", ids), ("vectors", vectors))
            }
        except (OSError, ValueError) as exc:
            if not tolerant:
                raise
            missing = isinstance(exc, FileNotFoundError)
            broken.append(
                (entry, f"{Path(str(getattr(exc, 'filename', ''))).name} is missing" if missing else str(exc))
            )
            continue
        segments.append(Segment(entry, ids, vectors, checks, state, directory, headers))
    if total != meta.get("count"):
        raise ValueError(f"count disagrees with {META_FILE}")
    return Snapshot(meta, segments, broken=broken)


def segment_numbers(directory: Path) -> set[int]:
    """Numbers of the segment files present in ``directory`` (committed or not)."""
    out = set()
    for path in directory.iterdir():
        match = _SEGMENT_FILE.match(path.name)
        if match:
            out.add(int(match.group(1)))
    return out


def next_number(directory: Path, meta: dict[str, Any]) -> int:
    """A segment number no manifest has used and no file in ``directory`` has (the caller holds the lock)."""
    present = segment_numbers(directory)
    return max([int(meta.get("next_segment") or 1), *(n + 1 for n in present)])


def write_segment(
    directory: Path, number: int, ids: np.ndarray, chunks: Iterable[np.ndarray], dims: int
) -> dict[str, Any]:
    """Write segment ``number`` (temporary names, fsync, rename) and return its manifest entry: ids, vectors and
    the rows' checksums (computed from the bytes as they are written, ~0.5 µs a row).

    Args:
        ids: int64 (n,), sorted ascending, unique.
        chunks: float32 row blocks of (n, dims) in ``ids``' order, concatenated.

    Raises:
        OSError: a write failed (no file of the segment is left then).
        ValueError: the chunks do not hold n rows.
    """
    ids_name, vectors_name = segment_names(number)
    crc_name = checks_name(number)
    ids = np.ascontiguousarray(ids, dtype="<i8")
    count = len(ids)
    sha: dict[str, str] = {}
    checks: list[np.ndarray] = []

    def check_block(block: np.ndarray) -> None:
        done = sum(len(c) for c in checks)
        checks.append(row_checksums(ids[done : done + len(block)], block))

    paths = [directory / ids_name, directory / vectors_name, directory / crc_name]
    with atomic_paths(paths) as (ids_tmp, vectors_tmp, crc_tmp):
        with synced_writer(ids_tmp, "wb") as handle:
            writer = _HashingWriter(cast(BinaryIO, handle))
            np.lib.format.write_array(writer, ids, allow_pickle=False)
            sha["ids"] = writer.digest.hexdigest()
        with synced_writer(vectors_tmp, "wb") as handle:
            sha["vectors"] = write_rows(cast(BinaryIO, handle), chunks, count, dims, check_block)
        with synced_writer(crc_tmp, "wb") as handle:
            writer = _HashingWriter(cast(BinaryIO, handle))
            crc = np.concatenate(checks) if checks else np.zeros(0, dtype=np.uint32)
            np.lib.format.write_array(writer, crc.astype(CHECKS_DTYPE, copy=False), allow_pickle=False)
            sha["crc32"] = writer.digest.hexdigest()
    return {
        "ids": ids_name,
        "vectors": vectors_name,
        "crc32": crc_name,
        "count": int(count),
        "sha256": sha,
        "created": now_iso(),
    }


def write_rows(
    handle: BinaryIO,
    chunks: Iterable[np.ndarray],
    count: int,
    dims: int,
    on_block: Callable[[np.ndarray], None] | None = None,
) -> str:
    """Write a float32 (count, dims) ``.npy`` to ``handle`` from row blocks, one block in memory at a time;
    return the file's sha256. ``on_block`` is called with each block (float32, C order) before it is written.

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
        if on_block is not None:
            on_block(block)
        writer.write(block)
        written += len(block)
        chunk = block = None  # type: ignore[assignment]  # freed before the next block is made
    if written != count:
        raise ValueError(f"{written} vector rows written for {count} rows")
    return writer.digest.hexdigest()


def write_manifest(directory: Path, meta: dict[str, Any]) -> None:
    """Replace ``meta.json`` atomically (the commit point of every write)."""
    with atomic_writer(directory / META_FILE, "wb") as handle:
        handle.write(json.dumps(meta, indent=2).encode())


def remove_unlisted(directory: Path, meta: dict[str, Any] | None) -> list[Path]:
    """Delete segment files ``meta`` does not list, the format-1 file of a format-2 namespace, and every
    temporary file (the caller holds the lock: only it writes here, so all are stale); return what was removed."""
    listed = {name for entry in (meta or {}).get("segments", []) for name in entry_files(entry)}
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


def verify_namespace(directory: Path, meta: dict[str, Any]) -> list[str]:
    """Problems of a format-2 namespace's files (empty when healthy): each listed file missing, of a size or
    header other than the manifest's count × dimensions make, or of a sha256 other than it records (for a
    segment with row checksums, with the number of damaged rows: the next run embeds them again); the counts
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
            files = [(entry["ids"], "<i8", (count,), "ids"), (entry["vectors"], "<f4", (count, dims), "vectors")]
            if entry.get("crc32"):
                files.append((entry["crc32"], CHECKS_DTYPE, (count,), "crc32"))
        except (KeyError, TypeError, ValueError):
            problems.append(f"{META_FILE} lists a segment without files or count")
            continue
        total += count
        found = [
            _verify_file(directory, name, dtype, shape, (entry.get("sha256") or {}).get(kind), dims)
            for name, dtype, shape, kind in files
        ]
        problems += [problem for problem in found if problem]
        if entry.get("crc32") and any(found) and all(not p or "sha256" in p for p in found):
            damaged = _damaged_rows(directory, entry, dims)
            problems.append(
                f"{entry['vectors']}: {damaged} of {count} vectors differ from their row checksums"
                if damaged
                else f"every row of {entry['vectors']} matches its row checksum"
            )
    if total != meta.get("count"):
        problems.append(f"the segments hold {total} vectors, {META_FILE} records {meta.get('count')}")
    return problems


def _verify_file(
    directory: Path, name: str, dtype: str, shape: tuple[int, ...], sha: str | None, dims: int
) -> str | None:
    """What is wrong with one segment file (missing, size, sha256, header), or None."""
    path = directory / name
    if not path.exists():
        return f"{name} is missing"
    size, expected = path.stat().st_size, npy_size(shape, dtype)
    if size != expected:
        return (
            f"{name} is {size:,} bytes, expected {expected:,} for {shape[0]} vectors × {dims} dimensions "
            f"(truncated or overwritten)"
        )
    if file_sha256(path) != sha:
        return f"the sha256 of {name} differs from the one {META_FILE} records"
    try:
        _open_npy(path, dtype, shape)
    except ValueError as exc:
        return str(exc)
    return None


def _damaged_rows(directory: Path, entry: dict[str, Any], dims: int) -> int:
    """How many rows of a segment (whose files have the right sizes) differ from their row checksums."""
    count = int(entry["count"])
    ids = _open_npy(directory / entry["ids"], "<i8", (count,))
    vectors = _open_npy(directory / entry["vectors"], "<f4", (count, dims))
    checks = _open_npy(directory / entry["crc32"], CHECKS_DTYPE, (count,))
    return sum(
        int((row_checksums(ids[i : i + CHUNK_ROWS], vectors[i : i + CHUNK_ROWS]) != checks[i : i + CHUNK_ROWS]).sum())
        for i in range(0, count, CHUNK_ROWS)
    )
