"""Prefect's temporary API server, started so that it never outlives the ``evaltasks`` process that needs it.

When no ``PREFECT_API_URL`` is set, Prefect 3.9 starts a temporary server (``SubprocessASGIServer`` in
``prefect/server/api/server.py``: ``python -m uvicorn ... prefect.server.api.server:create_app``) as a child
process in the caller's process group and stops it from an ``atexit`` handler. Two things went wrong with
that in a terminal or a CI job:

- Ctrl+C (SIGINT to the whole foreground process group) reached the server at the same moment as the run, so
  the run could no longer report to it (ConnectError noise, minutes of retries);
- SIGTERM or SIGKILL of the run skipped ``atexit``, so the server lived on (re-parented to PID 1, ~200 MB).

:func:`guard_temporary_server` makes Prefect start the same command, with the same environment, through this
file run as a script (``python .../_server_guard.py PARENT_PID -m uvicorn ...``), in a session of its own (so a
terminal's signals reach only the run, which stops the server itself), and the server dies with the run:
Linux's ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` (``man 2 prctl``), and on every platform a watchdog thread that
stops it when its parent process changes. It is still Prefect's server: the run is a real Prefect flow run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

WATCH_EVERY_S = 0.5  # how often the watchdog looks at the parent process id
GRACE_S = 10.0  # after asking the orphaned server to stop, how long before it is ended outright


class _GuardedSubprocess:
    """Stands in for the ``subprocess`` module inside ``prefect.server.api.server``: its ``Popen`` starts the
    server through this file in a new session; every other name is the real module's."""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:  # noqa: N802 - the name it replaces
        """``subprocess.Popen`` of Prefect's ``[python, -m, uvicorn, ...]`` as ``[python, THIS_FILE, PID, -m,
        uvicorn, ...]`` with ``start_new_session=True``; any other command is started unchanged."""
        if list(args[:2]) == [sys.executable, "-m"]:
            args = [sys.executable, os.path.abspath(__file__), str(os.getpid()), *args[1:]]
            kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(args, **kwargs)


def guard_temporary_server() -> bool:
    """Start Prefect's temporary server now, from this (main) thread, guarded as the module docstring says.

    Does nothing when ``PREFECT_API_URL`` names a server or Prefect's temporary server is disabled. Call it
    from the main thread: Linux's parent-death signal follows the thread that started the child. Returns
    True when a guarded temporary server runs.

    Raises:
        RuntimeError: Prefect could not start its server (as it would on the run's first API call).
    """
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return False
    import prefect.server.api.server as server_module

    server_module.subprocess = _GuardedSubprocess()  # type: ignore[assignment]
    server_module.SubprocessASGIServer().start()
    return True


def stop_temporary_server() -> None:
    """Stop Prefect's temporary server if this process started one (what Prefect's ``atexit`` handler does)."""
    server_module = sys.modules.get("prefect.server.api.server")
    if server_module is not None:
        for server in list(server_module.SubprocessASGIServer._instances.values()):
            server.stop()


def _die_with_parent(parent: int) -> None:
    """In the server process: end when process ``parent`` ends (parent-death signal and a watchdog)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # the watchdog below still covers it

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_EVERY_S)
        os.kill(os.getpid(), signal.SIGTERM)  # uvicorn shuts down on SIGTERM
        time.sleep(GRACE_S)
        os._exit(1)

    if os.getppid() != parent:  # the parent ended before the signal was armed
        os._exit(1)
    threading.Thread(target=watch, name="evaltasks-server-watchdog", daemon=True).start()


def _main(argv: list[str]) -> None:
    """``_server_guard.py PARENT_PID -m MODULE ARGS...``: guard, then run ``python -m MODULE ARGS...``."""
    import runpy

    parent, flag, module, *rest = argv
    if flag != "-m":
        raise SystemExit(f"usage: {os.path.basename(__file__)} PARENT_PID -m MODULE [ARGS...]")
    sys.path[0] = os.getcwd()  # as `python -m` has it, not this file's folder (whose modules would shadow others)
    _die_with_parent(int(parent))
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
