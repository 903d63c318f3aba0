"""Atomic file replacement: write beside the target under a temporary name, then rename over it.

Readers see the old file or the new one, never a half-written file (``os.replace`` is atomic on POSIX and
Windows within one filesystem).
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block completes it replaces ``path`` (mode 0644).

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def synced_writer(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Yield a stream on ``path`` (``"w"``: UTF-8 text with ``\\n`` newlines; ``"wb"``: bytes), flushed and
    fsynced when the block completes."""
    kwargs: dict[str, Any] = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
    with open(path, mode, **kwargs) as handle:
        yield handle
        handle.flush()
        os.fsync(handle.fileno())


@contextmanager
def atomic_writer(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Yield a stream (``"w"``: UTF-8 text with ``\\n`` newlines; ``"wb"``: bytes) that replaces ``path``
    when the block completes, flushed and fsynced first."""
    with atomic_path(path) as tmp, synced_writer(tmp, mode) as handle:
        yield handle


@contextmanager
def atomic_paths(paths: Sequence[Path]) -> Iterator[list[Path]]:
    """Yield a temporary path beside each of ``paths``; when the block completes they replace ``paths``
    together (mode 0644), with Ctrl+C and SIGTERM held back until the last one is in place, so an interrupted
    writer leaves the previous set of files or the new one, never a mix. On an exception the temporary files
    are removed and ``paths`` are left as they were.
    """
    temporaries: list[Path] = []
    try:
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(fd)
            temporaries.append(Path(tmp))
        yield list(temporaries)
        with _signals_held():
            for tmp in temporaries:
                os.chmod(tmp, 0o644)
            for tmp, path in zip(temporaries, paths):
                os.replace(tmp, path)
    finally:
        for tmp in temporaries:
            tmp.unlink(missing_ok=True)


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back during the block, then deliver them to the handlers that were installed.

    Python runs signal handlers in the main thread only, so in another thread the block cannot be interrupted
    and nothing is changed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {signum: signal.signal(signum, lambda s, _f: caught.append(s)) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)
