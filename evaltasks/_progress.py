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
