"""The test suite's fork server for ``python -m evaltasks.cli`` runs (started by :mod:`tests.cli_forkserver`).

Run as ``python tests/forkserver_main.py SOCKET``: it imports the heavy third-party libraries a run imports
(sentence-transformers with torch, transformers, scikit-learn and numpy, and FAISS: about 5 s of CPU on 2 cores,
more than the rest of a small run; nothing a working directory could shadow that a test plants there), prints ``ready``, then for each request on the Unix socket
``SOCKET`` forks a child that becomes ``python -m evaltasks.cli ARGS`` with the request's working directory,
environment, and standard streams (``/dev/null`` in, files out), and reports ``pid N`` then ``exit CODE`` on the
request's connection (CODE as :attr:`subprocess.Popen.returncode` has it: ``-N`` for a signal).

Nothing of evaltasks is imported here: it reads the environment and ``sys.argv`` when imported (its start-up
drops the working directory from ``sys.path``), so the child imports it itself, as a new process does. Prefect's
modules are imported here (:data:`PREFECT_MODULES`: the CLI has Prefect read its settings again before it first
uses Prefect). The child runs the module with :mod:`runpy` and returns to this file's top level, so the
interpreter ends as a new one would (non-daemon threads joined, ``atexit`` handlers, streams flushed). The server ends when its standard input closes (the test process
ended).
"""

from __future__ import annotations

import gc
import importlib
import io
import json
import os
import select
import signal
import socket
import sys
from typing import Any

SERVER_PYTHONPATH = os.environ.get("PYTHONPATH", "")  # already on this process's sys.path
#: Prefect's modules a run imports (about 0.5 s of CPU). Prefect reads its settings from the environment when
#: imported, and would configure its logging when ``prefect.main`` is (:func:`_preload` keeps it from doing so
#: here); before it first uses Prefect, the CLI has Prefect read its settings again and configure its logging from
#: the child's environment and streams (``evaltasks.cli._checks.reread_prefect_settings``), and until then a run
#: touches nothing of Prefect's, as a new process would not.
PREFECT_MODULES = (
    "prefect.main",
    "prefect.flow_engine",
    "prefect.task_engine",
    "prefect.engine",
    "prefect.flow_runs",
    "prefect.artifacts",
    "prefect.cache_policies",
    "prefect.concurrency.sync",
    "prefect.runtime",
    "prefect.transactions",
    "prefect.variables",
    "prefect.input",
    "prefect.client.cloud",
    "prefect.telemetry.run_telemetry",
    "prefect.utilities.engine",
)


def _preload() -> dict[str, Any]:
    """Import what a run would (no thread is started: the children are forked from a single-threaded process).
    Returns ``{"env": ..., "modules": ...}``: the environment variables the imports set (torch sets ``KMP_*`` and
    ``TORCHINDUCTOR_CACHE_DIR``), with ``HF_HUB_DISABLE_PROGRESS_BARS``, which evaltasks sets before it loads a
    local model (so huggingface_hub, imported here, reads it as in a run that loads one); and the top-level names
    of every module now imported, which a run's ``PYTHONPATH`` must not shadow to be served."""
    before = dict(os.environ)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import faiss  # noqa: F401
    import numpy  # noqa: F401
    import prefect.logging.configuration as prefect_logging
    import sentence_transformers  # noqa: F401

    # Prefect configures its logging when `prefect.main` is imported (root and `prefect` handlers, on this
    # process's stderr, at the levels of this environment): not here. A child's logging then starts as a new
    # interpreter's does, unconfigured, and the CLI has Prefect configure it before it first uses Prefect.
    setup_logging = prefect_logging.setup_logging
    prefect_logging.setup_logging = lambda incremental=None: {}
    try:
        for name in PREFECT_MODULES:
            importlib.import_module(name)
    finally:
        prefect_logging.setup_logging = setup_logging

    return {
        "env": {name: value for name, value in os.environ.items() if before.get(name) != value},
        "modules": sorted({name.partition(".")[0] for name in sys.modules}),
    }


def _serve(path: str, preloaded: dict[str, Any]) -> dict[str, Any] | None:
    """Accept requests until standard input closes; in a forked child, return its request. ``preloaded``: what
    :func:`_preload` returned, told to the test process with ``ready``."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(16)
    print("ready " + json.dumps(preloaded), flush=True)
    waiting: dict[int, socket.socket] = {}  # child pid -> the connection that reports its exit
    while True:
        readable, _, _ = select.select([server, sys.stdin], [], [], 0.05)
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            for pid in waiting:
                _kill(pid)
            return None
        if server in readable:
            conn, _ = server.accept()
            with conn.makefile("rb") as reader:
                request = json.loads(reader.readline())
            pid = os.fork()
            if pid == 0:
                for other in (server, conn, *waiting.values()):
                    other.close()
                return dict(request)
            conn.sendall(f"pid {pid}\n".encode())
            waiting[pid] = conn
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                conn.close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _become_the_run(request: dict[str, Any]) -> None:
    """Make this forked child the process ``python -m evaltasks.cli ARGV`` would be, then run it."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_DFL if signum != signal.SIGPIPE else signal.SIG_IGN)  # as Python starts
    signal.signal(signal.SIGINT, signal.default_int_handler)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        out = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    os.close(null)
    unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=sys.stdin.encoding)
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False) if unbuffered else io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
        encoding=sys.stdout.encoding,
        errors=sys.stdout.errors,
        write_through=unbuffered,
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False) if unbuffered else io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding=sys.stderr.encoding,
        errors="backslashreplace",
        line_buffering=True,
        write_through=unbuffered,
    )
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    sys.path[0] = os.getcwd()  # `python -m` puts the working directory first (this script's folder was there)
    added = request["env"].get("PYTHONPATH", "")
    if added and added != SERVER_PYTHONPATH:  # served only where the server had none (tests/cli_forkserver.py)
        # where a new interpreter puts PYTHONPATH: after the entry, before the standard library (the test process
        # serves only normalised absolute folders, each named once, which a new interpreter takes as they are)
        sys.path[1:1] = added.split(os.pathsep)
    sys.argv = ["-m", *request["argv"]]  # as while Python locates the module (evaltasks/_startup.py reads both)
    sys.orig_argv = [sys.executable, "-m", "evaltasks.cli", *request["argv"]]
    import runpy

    runpy.run_module("evaltasks.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    preloaded = _preload()
    # What is imported now stays shared with the children and out of their collections (as `evaltasks server`'s
    # runner does): a child's first full collection would otherwise walk the whole preloaded heap (~0.3 s) and
    # copy every page it touches.
    gc.collect()
    gc.freeze()
    job = _serve(sys.argv[1], preloaded)
    if job is not None:
        _become_the_run(job)
