"""Atomic file replacement: write beside the target under a temporary name, then rename over it.

Readers see the old file or the new one, never a half-written file (``os.replace`` is atomic on POSIX and
Windows within one filesystem). :func:`atomic_paths` replaces several files as a set.

A temporary file is named ``.<target name>.<pid>@<host>.<random>.tmp``: the writing process and a digest of
its host name, so :func:`remove_stale_temporaries` can tell the leftovers of a killed writer (a process of
this host that no longer runs) from the files of a writer still at work.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

LEGACY_STALE_AFTER_S = 3600.0  # temporaries named without their writer: removed once this old


def _host_tag() -> str:
    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


def _temporary(path: Path) -> Path:
    """Create an empty temporary file beside ``path`` named after this process (see the module docstring)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}@{_host_tag()}.", suffix=".tmp")
    os.close(fd)
    return Path(tmp)


@contextmanager
def atomic_path(path: Path, permissions: int = 0o644, *, durable: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block completes it replaces ``path`` (mode
    ``permissions``; the temporary itself is 0600 until then).

    On an exception the temporary file is removed and ``path`` is left as it was. ``durable=False`` skips the
    directory's fsync (see :func:`atomic_paths`).
    """
    with atomic_paths([path], permissions, durable=durable) as (tmp,):
        yield tmp


@contextmanager
def atomic_paths(paths: Sequence[Path], permissions: int = 0o644, *, durable: bool = True) -> Iterator[list[Path]]:
    """Replace several files as a set: yield a temporary path beside each (created with mode 0600); when the block
    completes, each replaces its file (mode ``permissions``, 0644 by default) in the order given, then the
    directories are fsynced (``durable=False``: not, for caches whose lost entry after a power loss is only a
    miss; the renames stay atomic).

    If the block raises (a write failed: disk full, I/O error), every temporary is removed and no file is
    touched. Each rename is atomic, so a reader sees each file whole, old or new; Ctrl+C and SIGTERM are held
    back until the last rename is done (in the main thread). Put the file readers take as
    the set's commit point last: a crash in the moment between the renames leaves its temporary behind (named
    after the dead writer), the mark of an unfinished set, until :func:`remove_stale_temporaries` runs. Write
    the temporaries completely, and fsync them (:func:`synced_writer`), inside the block.
    """
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    temporaries: list[Path] = []
    try:
        for path in paths:
            temporaries.append(_temporary(path))
        yield list(temporaries)
        with _signals_held():  # an interrupt leaves the previous set or the new one, never a mix
            for tmp in temporaries:
                os.chmod(tmp, permissions)
            for tmp, path in zip(temporaries, paths, strict=True):
                os.replace(tmp, path)
        for directory in {path.parent for path in paths} if durable else ():
            _fsync_directory(directory)
    except BaseException:
        for tmp in temporaries:
            tmp.unlink(missing_ok=True)
        raise


def _fsync_directory(directory: Path) -> None:
    """Make the renames in ``directory`` durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def synced_writer(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Open ``path`` for writing (``"w"``: UTF-8 text with ``\\n`` newlines; ``"wb"``: bytes); when the block
    completes, flush and fsync it. Raises OSError when a write fails (ENOSPC surfaces at the latest here)."""
    kwargs: dict[str, Any] = {} if "b" in mode else {"encoding": "utf-8", "newline": "\n"}
    with open(path, mode, **kwargs) as handle:
        yield handle
        handle.flush()
        os.fsync(handle.fileno())


def remove_stale_temporaries(directory: Path, names: Iterable[str]) -> list[Path]:
    """Remove the temporaries of the files ``names`` in ``directory`` that killed writers left; return them.

    A temporary is stale when its writer (pid and host in its name) is a process of this host that no longer
    runs; one named without its writer (older evaltasks) when it is over an hour old. Temporaries of this
    process, of running processes, and of other hosts sharing the directory are kept.
    """
    host, removed = _host_tag(), []
    for name in names:
        for path in directory.glob(f".{name}.*.tmp"):
            owner = path.name[len(name) + 2 :].split(".", 1)[0]
            pid, _, tag = owner.partition("@")
            if tag:
                if tag != host or not pid.isdigit() or int(pid) == os.getpid() or pid_alive(int(pid)):
                    continue
            elif not _older_than(path, LEGACY_STALE_AFTER_S):
                continue
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (one we may not signal counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime >= seconds
    except OSError:
        return False


@contextmanager
def atomic_writer(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Yield a stream (``"w"``: UTF-8 text with ``\\n`` newlines; ``"wb"``: bytes) that replaces ``path``
    when the block completes, flushed and fsynced first."""
    with atomic_path(path) as tmp, synced_writer(tmp, mode) as handle:
        yield handle


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
    previous = {
        signum: signal.signal(signum, lambda s, _f: caught.append(s)) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        for caught_signal in dict.fromkeys(caught):
            signal.raise_signal(caught_signal)
