"""A process-wide progress hook: the CLI installs a callback, the engine and tasks report completed work."""

from __future__ import annotations

import threading
from collections.abc import Callable

_callback: Callable[[int], None] | None = None
_lock = threading.Lock()


def set_progress_callback(callback: Callable[[int], None] | None) -> None:
    """Install (or remove, with None) the callback receiving counts of completed case × metric results."""
    global _callback
    _callback = callback


def advance(count: int) -> None:
    """Report ``count`` completed case × metric results (no-op without a callback)."""
    callback = _callback
    if callback is not None:
        with _lock:
            callback(count)


_stop_callback: Callable[[bool], None] | None = None


def set_stop_callback(callback: Callable[[bool], None] | None) -> None:
    """Install (or remove, with None) the callback told that the run is stopping on a signal: it receives True
    for a termination request (SIGTERM), False for an interrupt (Ctrl+C)."""
    global _stop_callback
    _stop_callback = callback


def stopping(terminated: bool) -> None:
    """Report that the run stops on a signal, before its work is cancelled (no-op without a callback), so the
    caller can silence what the cancelled work reports."""
    callback = _stop_callback
    if callback is not None:
        callback(terminated)
