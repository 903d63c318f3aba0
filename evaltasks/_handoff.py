"""Parsed inputs handed from the CLI to the flow it runs in the same process, so nothing is parsed twice.

``evaltasks run`` validates the suite, the dataset and the baseline before Prefect starts (bad input exits 2
fast), then calls the flow, whose parameters are paths (Prefect caps parameters at 512 KiB). Without a hand-over
the flow parsed everything again: for 100,000 cases, a second or more of its run. The CLI :func:`keep`\\ s what it
parsed; the flow :func:`take`\\ s it, once, and only while the files it came from are unchanged (same size,
modification time and inode), else it parses them itself as before.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any

_KEPT: dict[Hashable, tuple[Any, tuple[Path, ...], tuple[Any, ...]]] = {}
_LOCK = threading.Lock()


def file_state(paths: Iterable[Path]) -> tuple[Any, ...]:
    """``(path, size, mtime_ns, inode)`` of each file; ``None`` in place of a file that cannot be read."""
    state: list[Any] = []
    for path in paths:
        try:
            st = os.stat(path)
            state.append((str(path), st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            state.append(None)
    return tuple(state)


def keep(key: Hashable, value: Any, sources: Iterable[Path], state: tuple[Any, ...]) -> None:
    """Keep ``value``, parsed from the files ``sources``, for one later :func:`take` of ``key``.

    ``state``: :func:`file_state` of ``sources`` taken *before* they were read, so a file changed while it was
    being parsed counts as changed. Nothing is kept when the files already differ from it.
    """
    sources = tuple(sources)
    if file_state(sources) != state:
        return
    with _LOCK:
        _KEPT[key] = (value, sources, state)


def take(key: Hashable) -> Any | None:
    """The value kept under ``key`` (forgotten once taken), or None when there is none or a source file changed."""
    with _LOCK:
        entry = _KEPT.pop(key, None)
    if entry is None:
        return None
    value, sources, state = entry
    return value if file_state(sources) == state else None


def forget() -> None:
    """Drop everything kept (e.g. when the run that would take it does not start)."""
    with _LOCK:
        _KEPT.clear()
