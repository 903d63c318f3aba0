"""Row checksums of the reference index's segments, checked the first time a process reads each row.

Each segment written by this version has a third file, ``seg-NNNNNN.crc32.npy``: uint32 (n,), the CRC-32
(:func:`zlib.crc32`) of row i's id (8 bytes, little-endian) followed by its vector (4·d bytes). A reader checks a
row's checksum the first time the process reads it (the row's bytes are in memory then: the check reads nothing
more), and remembers the rows it checked (:class:`RowState`, one per segment file and process, 2 bits a row), so
damage anywhere in a segment of any size is found the moment its bytes would be used, and only the damaged rows
are dropped and embedded again. CRC-32 detects every error of up to 3 bits and every burst of up to 32 bits in a
row (1,544 bytes at 384 dimensions); other damage escapes it with a probability of 2^-32 a row.

The ids file is hashed whole (its sha256 in ``meta.json``) on a process's first search of the segment (8 bytes a
row: 8 MB at 10^6 rows, ~4 ms at 2 GB/s): a damaged id would misdirect the binary search for other ids. When it
differs, every row's checksum (which covers the id) is checked to find the damaged rows.

Segments written before row checksums (no ``crc32`` in their manifest entry) are hashed whole against their
sha256 on a process's first read of them, at any size; damage makes every row of such a segment count as
damaged. The next compaction (``evaltasks index compact``, or a write past the segment limit that merges the
segment) rewrites them with row checksums.

Nothing here imports Prefect.
"""

from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

CHECKS_DTYPE = "<u4"
_STATES: OrderedDict[tuple[Any, ...], RowState] = (
    OrderedDict()
)  # files' (path, inode, size, mtime_ns) -> state, newest last
_STATES_KEPT = 256  # segments whose states a process keeps (2 bytes a row); an evicted one is checked again
_STATES_LOCK = threading.Lock()


class DamagedRows(ValueError):
    """Stored rows whose bytes do not match their checksums (or whose whole-file hash differs).

    Attributes:
        rows: int64 (k,), the damaged rows (snapshot rows, as :meth:`Snapshot.find` numbers them).
    """

    def __init__(self, rows: np.ndarray, detail: str) -> None:
        super().__init__(f"{len(rows)} stored vectors are damaged ({detail})")
        self.rows = rows


def row_checksums(ids: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """uint32 (m,): the CRC-32 of each row's id (int64, 8 bytes little-endian) followed by its vector
    (float32 (m, d), little-endian). One :func:`zlib.crc32` pair per row: ~0.5 µs a row at 384 dimensions."""
    id_rows = np.ascontiguousarray(ids, dtype="<i8").view(np.uint8).reshape(-1, 8)
    vectors = np.ascontiguousarray(vectors, dtype="<f4")
    crc = zlib.crc32
    return np.fromiter(
        (crc(v, crc(i)) for i, v in zip(id_rows, vectors)),  # type: ignore[arg-type]  # rows are buffers
        dtype=np.uint32,
        count=len(id_rows),
    )


class RowState:
    """What this process has checked of one segment's files, shared by every snapshot that maps them.

    Attributes:
        ok: bool (n,): rows whose checksum matched.
        bad: bool (n,): rows found damaged (never read as data; a write drops them from the segment).
        ids_checked: the ids file was hashed (and, when it differed, the damaged rows found).
        whole_checked: a segment without row checksums: its vectors file was hashed.
        generation: incremented whenever rows are found damaged (invalidates search tables built before).
        key: the identity (path, inode, size, mtime_ns) of the segment's files.
        reasons: what was found, one line per finding (file names and counts).
    """

    def __init__(self, n: int, key: tuple[Any, ...] = ()) -> None:
        self.key = key  # the files' identity
        self.ok = np.zeros(n, dtype=bool)
        self.bad = np.zeros(n, dtype=bool)
        self.ids_checked = False
        self.whole_checked = False
        self.generation = 0
        self.reasons: list[str] = []
        self.lock = threading.Lock()

    def mark_bad(self, rows: np.ndarray, reason: str) -> None:
        """Record ``rows`` (segment rows) as damaged, with why."""
        if len(rows):
            self.bad[rows] = True
            self.ok[rows] = False
            self.generation += 1
            self.reasons.append(reason)


def state_for(paths: list[Path], count: int) -> RowState:
    """The process's :class:`RowState` of the segment made of ``paths`` (a rewritten file gets a new one)."""
    key = []
    for path in paths:
        stat = path.stat()
        key.append((str(path), stat.st_ino, stat.st_size, stat.st_mtime_ns))
    with _STATES_LOCK:
        state = _STATES.get(tuple(key))
        if state is None:
            state = _STATES[tuple(key)] = RowState(count, tuple(key))
            while len(_STATES) > _STATES_KEPT:
                _STATES.popitem(last=False)
        else:
            _STATES.move_to_end(tuple(key))
        return state


def check_rows(
    state: RowState,
    local: np.ndarray,
    data: np.ndarray,
    ids: np.ndarray,
    checks: np.ndarray | None,
    whole: Callable[[], str | None],
    name: str,
) -> np.ndarray:
    """bool (len(local),): which of the segment rows ``local`` are damaged, checking those not checked yet.

    Args:
        local: int64 segment rows; ``data``: their vectors, float32 (len(local), d), already read.
        ids: the segment's ids (mapped); ``checks``: its row checksums (mapped), None for a segment without.
        whole: for a segment without row checksums: hashes its vectors file, returns None when it matches the
            manifest or why not.
        name: the vectors file's name (for the reasons).
    """
    if checks is None:
        if not state.whole_checked:
            with state.lock:
                if not state.whole_checked:
                    why = whole()
                    if why:
                        state.mark_bad(np.arange(len(state.bad)), why)
                    else:
                        state.ok[:] = True
                    state.whole_checked = True
        return np.asarray(state.bad[local], dtype=bool)
    checked = state.ok[local]
    if checked.all():  # the common case once a process has read its rows: one pass over the flags
        return np.zeros(len(local), dtype=bool)
    todo = np.flatnonzero(~checked & ~state.bad[local])
    if len(todo):
        rows = local[todo]
        wrong = row_checksums(ids[rows], data[todo]) != checks[rows]
        state.ok[rows[~wrong]] = True
        if wrong.any():
            with state.lock:
                state.mark_bad(rows[wrong], f"{name}: {int(wrong.sum())} rows differ from their checksums")
    return np.asarray(state.bad[local], dtype=bool)
