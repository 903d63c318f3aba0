"""Prefect's temporary API server, started so that it never outlives the ``evaltasks`` process that needs it.

When no ``PREFECT_API_URL`` is set, Prefect 3.9 starts a temporary server (``SubprocessASGIServer`` in
``prefect/server/api/server.py``: ``python -m uvicorn ... prefect.server.api.server:create_app``) as a child
process in the caller's process group and stops it from an ``atexit`` handler. Two things went wrong with
that in a terminal or a CI job:

- Ctrl+C (SIGINT to the whole foreground process group) reached the server at the same moment as the run, so
  the run could no longer report to it (ConnectError noise, minutes of retries);
- SIGTERM or SIGKILL of the run skipped ``atexit``, so the server lived on (re-parented to PID 1, ~200 MB).

:func:`guard_temporary_server` makes Prefect start the same command, with the same environment, through this
file run as a script (``python -P .../temporary.py PARENT_PID -m uvicorn ...``), in a session of its own (so a
terminal's signals reach only the run, which stops the server itself), and the server dies with the run:
Linux's ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` (``man 2 prctl``), and on every platform a watchdog thread that
stops it when its parent process changes. It is still Prefect's server: the run is a real Prefect flow run.
Unlike ``python -m uvicorn``, it runs without the working directory on ``sys.path`` (``-P`` on Python 3.11+, and
:func:`_main` removes this file's folder), so no module where the run started replaces one the server imports.

``evaltasks run`` starts that process early (:func:`spawn_temporary_server`, right after its input is
validated) and lets Prefect take it over while the command imports and loads its model. In the server process, a
missing SQLite database starts as a copy of this Prefect's migrated empty database, kept in the user's cache
directory by the first run that migrated one (:func:`seed_database`, :func:`save_database_template`), and no
block types are registered on start unless the environment asks (:func:`without_block_registration`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

WATCH_EVERY_S = 0.5  # how often the watchdog looks at the parent process id
GRACE_S = 10.0  # after asking the orphaned server to stop, how long before it is ended outright
CLAIM_FD_VARIABLE = "EVALTASKS_SERVER_CLAIM_FD"  # Settings.server_claim_fd: where the server says it holds its port
PORT_BOUND, PORT_TAKEN = b"b", b"t"
PORT_TAKEN_EXIT = 3  # uvicorn's exit code when it cannot bind, which Prefect's start loop answers with a new port


#: Prefect's names for "register every imported block type on start" and for memoising that registration
#: (``prefect/settings/models/server/root.py``, Prefect 3.9)
REGISTER_BLOCKS_VARIABLES = ("PREFECT_SERVER_REGISTER_BLOCKS_ON_START", "PREFECT_API_BLOCKS_REGISTER_ON_START")
MEMOIZE_REGISTRATION_VARIABLES = (
    "PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION",
    "PREFECT_MEMOIZE_BLOCK_AUTO_REGISTRATION",
)


def without_block_registration(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for the temporary server, which registers no block types when it starts unless ``env`` names
    either setting (:data:`REGISTER_BLOCKS_VARIABLES`, :data:`MEMOIZE_REGISTRATION_VARIABLES`).

    Prefect's server registers every block type it can import on each start: it imports every installed Prefect
    integration (``load_prefect_collections``: prefect-dask brings in dask.distributed) and, the first time for
    a database, writes their schemas. A run's temporary server needs none of it: a block document is saved with
    its type by the client that saves it (``Block.save``), and ``prefect server start`` registers them on its own
    start. Measured here with prefect-dask installed: the server answered after 3.3 s of CPU instead of 4.0 s.
    """
    env = dict(env)
    if not any(name in env for name in (*REGISTER_BLOCKS_VARIABLES, *MEMOIZE_REGISTRATION_VARIABLES)):
        # both: with memoisation on, Prefect imports the integrations to hash them even when it registers nothing
        env[REGISTER_BLOCKS_VARIABLES[0]] = "false"
        env[MEMOIZE_REGISTRATION_VARIABLES[0]] = "false"
    return env


class _GuardedSubprocess:
    """Stands in for the ``subprocess`` module inside ``prefect.server.api.server``: its ``Popen`` starts the
    server through this file in a new session; every other name is the real module's."""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:  # noqa: N802 - the name it replaces
        """``subprocess.Popen`` of Prefect's ``[python, -m, uvicorn, ...]`` as ``[python, THIS_FILE, PID, -m,
        uvicorn, ...]`` with ``start_new_session=True``; any other command is started unchanged.

        Returns once the server process holds its port (:func:`_claim_port`: bound in its first milliseconds,
        before its imports) or has exited with code 3 because the port was taken. Prefect's start loop polls
        ``/health`` on the port as soon as the process starts; without the claim, a port another process's
        server took meanwhile answered that poll, and the run reported to the wrong server (404s, then
        connection errors when that server stopped).
        """
        if list(args[:2]) != [sys.executable, "-m"]:
            return subprocess.Popen(args, **kwargs)
        from evaltasks.server.safety import safe_flags

        args = [sys.executable, *safe_flags(), os.path.abspath(__file__), str(os.getpid()), *args[1:]]
        kwargs.setdefault("start_new_session", True)
        read_end, write_end = os.pipe()
        kwargs["env"] = {
            **without_block_registration(kwargs.get("env") or os.environ),
            CLAIM_FD_VARIABLE: str(write_end),
        }
        kwargs["pass_fds"] = (*kwargs.get("pass_fds", ()), write_end)
        try:
            process = subprocess.Popen(args, **kwargs)
        finally:
            os.close(write_end)
        with os.fdopen(read_end, "rb") as claim:
            answer = claim.read(1)  # b"b": bound; b"t": taken; b"": the process ended before it said
        if answer != PORT_BOUND:
            # Prefect's start loop sees exit code 3 and starts again on another port; waiting here keeps it from
            # polling the port meanwhile, where another process's server would answer its /health.
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=GRACE_S)
        return process


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

    server_module.subprocess = _GuardedSubprocess()  # type: ignore[attr-defined,assignment]
    server_module.SubprocessASGIServer().start()
    return True


class StartingServer:
    """Prefect's temporary server, its process started early by :func:`spawn_temporary_server`, made Prefect's own
    (``SubprocessASGIServer``) by a background thread that waits for it to answer, as Prefect's ``start`` does.

    The process starts before the command's heavy imports, model load and report set-up, so its own start-up
    (interpreter, imports, database migrations: seconds) overlaps them instead of following them.
    """

    def __init__(self, port: int, process: subprocess.Popen[Any]) -> None:
        self.port, self.process = port, process
        self.error: BaseException | None = None
        self.ready = threading.Event()  # set when the server answers /health, or when starting it failed
        self.thread: threading.Thread | None = None

    def adopt(self) -> None:
        """Hand the process to Prefect and wait for it in a background thread (call after the process started).

        Prefect's ``SubprocessASGIServer.start`` runs unchanged: it launches this process instead of a new one
        (and a guarded new one if this one exits with code 3, its port taken), polls ``/health`` within
        ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``, raises its own errors, and stops the server at
        exit. Any other caller of ``start`` (another thread's first Prefect API call) waits for that answer.
        Importing Prefect's server module happens here, in the calling thread, so that no two threads import
        Prefect's modules at the same time.
        """
        import prefect.server.api.server as server_module

        server_module.subprocess = _GuardedSubprocess()  # type: ignore[attr-defined,assignment]  # a restart too
        server = server_module.SubprocessASGIServer()
        if server.running:  # already started in this process: keep that one
            self.process.terminate()
            self.ready.set()
            return
        server.port = self.port
        launch = server._run_uvicorn_command
        pending = [self.process]
        server._run_uvicorn_command = lambda: pending.pop() if pending else launch()  # type: ignore[method-assign]
        prefect_start = server.start

        # Prefect's `start` marks the server running before it answers, so a second caller (a target calling
        # Prefect's API while its outputs are generated early: docs/targets.md#generation-starts-while-prefect-starts)
        # got its URL at once and "connection refused"; every other caller now waits for the answer, as the first does
        def start(timeout: int | None = None) -> None:
            self.wait()
            if not server.running:  # stopped since (Prefect's `stop`): started again as Prefect would
                prefect_start(timeout)

        server.start = start  # type: ignore[method-assign]

        def wait() -> None:
            try:
                prefect_start()
            except BaseException as exc:  # noqa: BLE001 - raised again by wait()
                self.error = exc
            finally:
                self.ready.set()
            # Linux's parent-death signal follows the thread that started a process: a server Prefect started
            # again from here (port taken) must not be stopped when this thread ends, so it lives with the process.
            threading.Event().wait()

        self.thread = threading.Thread(target=wait, name="evaltasks-server-start", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        """Block until the server answers (or failed to start).

        Raises:
            RuntimeError: Prefect could not start its server (Prefect's own message: timeout, exit code, output).
        """
        while not self.ready.wait(0.1):  # short waits: a signal's KeyboardInterrupt is raised promptly
            pass
        if self.error is not None:
            raise self.error


PREFECT_PORTS = range(8000, 9000)
"""Where Prefect's own temporary server picks its port (``SubprocessASGIServer.find_available_port``)."""


def free_port(ports: range | None = None) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now.

    ``ports`` None: the system's choice (a bind to port 0). A range, e.g. :data:`PREFECT_PORTS`: chosen as Prefect's
    ``SubprocessASGIServer.find_available_port`` does, at random in the range and checked by binding it, up to 10
    tries 0.1-0.5 s apart; RuntimeError when all 10 are taken.
    """
    import random
    import socket

    if ports is None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            return int(probe.getsockname()[1])
    for _ in range(10):
        port = random.choice(ports)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
                return port
            except OSError:
                time.sleep(random.uniform(0.1, 0.5))
    raise RuntimeError("Unable to find an available port after multiple attempts")


def server_command(port: int) -> tuple[list[str], dict[str, str]]:
    """The command line and environment with which Prefect 3.9 starts its temporary server on ``port``
    (``SubprocessASGIServer._run_uvicorn_command``), built without importing Prefect's server module."""
    import prefect
    from prefect.settings import get_current_settings

    args = [
        sys.executable,
        "-m",
        "uvicorn",
        "--app-dir",
        str(prefect.__module_path__.parent),
        "--factory",
        "prefect.server.api.server:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "error",
        "--lifespan",
        "on",
    ]
    env = {
        **os.environ,
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
        **get_current_settings().to_environment_variables(exclude_unset=True),
    }
    return args, env


def spawn_temporary_server() -> StartingServer | None:
    """Start Prefect's temporary server process now, from this (main) thread, guarded as the module docstring
    says, and hand it to Prefect (:meth:`StartingServer.adopt`); the caller goes on with its work and calls
    :meth:`StartingServer.wait` before its first API call.

    Does nothing (returns None) when ``PREFECT_API_URL`` names a server, Prefect's temporary server is disabled,
    or this process already runs one. The process is stopped at exit even if Prefect never took it over (an
    interrupt during the imports).
    """
    import atexit

    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return None
    running = sys.modules.get("prefect.server.api.server")
    if running is not None and running.SubprocessASGIServer._instances:
        return None
    port = free_port(PREFECT_PORTS)
    args, env = server_command(port)
    process = _GuardedSubprocess.Popen(args, env=env)

    def stop_unadopted() -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    atexit.register(stop_unadopted)  # registered before Prefect's stop: runs after it, a no-op by then
    starting = StartingServer(port, process)
    starting.adopt()
    return starting


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


def database_template_dir() -> Path:
    """Where migrated empty Prefect databases are kept: ``$EVALTASKS_CACHE_DIR/prefect-db``, by default the user's
    cache directory (``$XDG_CACHE_HOME/evaltasks`` or ``~/.cache/evaltasks``; ``%LOCALAPPDATA%`` on Windows)."""
    from evaltasks._env import env_value
    from evaltasks.settings import get_settings

    cache_dir = get_settings(only=["cache_dir"]).cache_dir
    root = None if cache_dir is None else str(cache_dir)
    if root is None:
        base = env_value("XDG_CACHE_HOME", "LOCALAPPDATA") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "evaltasks")
    return Path(root) / "prefect-db"


def database_template_key() -> str:
    """What a migrated empty database depends on: Prefect's version, its SQLite migration files (names and
    contents, hashed) and the SQLite library's version. A template is only ever used for the same key."""
    import hashlib
    import sqlite3

    import prefect

    versions = Path(prefect.__module_path__) / "server" / "database" / "_migrations" / "versions" / "sqlite"
    digest = hashlib.sha256()
    for path in sorted(versions.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"prefect-{prefect.__version__}-sqlite-{sqlite3.sqlite_version}-{digest.hexdigest()[:16]}"


def seed_database(database: Path, template_dir: Path | None = None) -> bool:
    """Copy the migrated empty database of this Prefect (:func:`database_template_key`) to ``database`` when
    ``database`` does not exist and such a template does; True when it did.

    Prefect still runs its migrations on the copy at start (a no-op at the same revision), so a copy can only
    save their time, never skip one. The copy appears whole or not at all (a hard link of a finished temporary
    file) and never replaces a database another process created meanwhile.
    """
    template = (template_dir or database_template_dir()) / f"{database_template_key()}.db"
    if database.exists() or not template.is_file():
        return False
    if not _sound_template(template):  # damaged (a cut copy, a full disk): removed, Prefect migrates from nothing
        with contextlib.suppress(OSError):
            os.unlink(template)
        return False
    import shutil
    import tempfile

    database.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".prefect-db-", dir=database.parent)
    os.close(fd)
    try:
        shutil.copyfile(template, temporary)
        os.link(temporary, database)  # fails if the database appeared meanwhile: that one is kept
        return True
    except OSError:
        return False
    finally:
        os.unlink(temporary)


def _sound_template(template: Path) -> bool:
    """Whether ``template`` is a readable SQLite database that passes ``PRAGMA quick_check`` and records a
    migration revision (Alembic's ``alembic_version`` table); any error counts as damaged."""
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{template}?mode=ro", uri=True)) as db:
            if db.execute("PRAGMA quick_check").fetchone() != ("ok",):
                return False
            return bool(db.execute("SELECT count(*) FROM alembic_version").fetchone()[0] >= 1)
    except sqlite3.Error:
        return False


def save_database_template(database: Path, template_dir: Path | None = None) -> bool:
    """Keep a copy of ``database``, just migrated from nothing by Prefect, as this Prefect's template
    (:func:`seed_database`); True when a template was written. SQLite's backup API copies a consistent state;
    the template is renamed into place whole (mode 0600), and an existing one is left alone."""
    import sqlite3

    from evaltasks._atomic import atomic_path  # here only: this file also runs as a script before any import

    directory = template_dir or database_template_dir()
    template = directory / f"{database_template_key()}.db"
    if template.exists():
        return False
    try:
        with atomic_path(template, permissions=0o600, durable=False) as temporary:
            with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as source, sqlite3.connect(temporary) as copy:
                source.backup(copy)
            source.close()
            copy.close()
        return True
    except (OSError, sqlite3.Error):
        return False


def _reuse_migrated_databases() -> None:
    """In the server process: a missing SQLite database starts as a copy of this Prefect's migrated empty
    database (:func:`seed_database`), and one migrated from nothing here becomes that template
    (:func:`save_database_template`), right after Prefect's migrations and before anything else writes to it.
    Any failure leaves Prefect's own behaviour: migrating from nothing."""
    try:
        from prefect.server.database.interface import PrefectDBInterface
    except ImportError:
        return
    migrate = PrefectDBInterface.create_db

    async def create_db(self: Any) -> None:
        database: Path | None = None
        try:
            from sqlalchemy.engine import make_url

            url = make_url(self.database_config.connection_url)
            if (
                url.get_backend_name() == "sqlite"
                and url.database
                and url.database != ":memory:"
                and "mode=memory" not in str(url)
            ):
                database = Path(url.database)
        except Exception:  # noqa: BLE001 - not a file database evaltasks understands: Prefect as is
            database = None
        fresh = database is not None and not database.exists()
        seeded = False
        if fresh:
            assert database is not None  # fresh: a database path that does not exist yet
            try:
                seeded = seed_database(database)
            except Exception:  # noqa: BLE001
                seeded = False
        await migrate(self)
        if fresh and not seeded:
            assert database is not None
            try:
                save_database_template(database)
            except Exception:  # noqa: BLE001
                pass

    PrefectDBInterface.create_db = create_db  # type: ignore[method-assign]


def _answer(fd: int, answer: bytes) -> None:
    """Write the port claim's ``answer`` to the starting run on ``fd``; a run that is gone already (interrupted
    while the server started: the pipe is broken) ends this server at once, quietly."""
    try:
        with os.fdopen(fd, "wb") as pipe:
            pipe.write(answer)
    except BrokenPipeError:
        os._exit(1)


def _claim_port(args: list[str]) -> None:
    """In the server process, first thing: bind uvicorn's ``--host``/``--port`` now and serve on that socket.

    The socket is bound without ``SO_REUSEADDR`` and not listened on until uvicorn serves (so a connection before
    then is refused, as before): no other process can bind the port meanwhile (Linux lets two sockets share a port
    only when both set ``SO_REUSEADDR``; ``man 7 socket``). The result goes to the parent on the pipe named by
    ``EVALTASKS_SERVER_CLAIM_FD`` (:meth:`_GuardedSubprocess.Popen` waits for it); a taken port exits with code 3,
    as uvicorn would, so that Prefect starts again on another port. Without the variable, nothing is done.
    """
    fd = os.environ.pop(CLAIM_FD_VARIABLE, None)
    if fd is None or "--port" not in args:
        return
    import socket

    host = args[args.index("--host") + 1] if "--host" in args else "127.0.0.1"
    port = int(args[args.index("--port") + 1])
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        _answer(int(fd), PORT_TAKEN)
        os._exit(PORT_TAKEN_EXIT)
    _answer(int(fd), PORT_BOUND)
    import uvicorn.server

    serve = uvicorn.server.Server.serve

    async def serve_on_claimed_port(self: Any, sockets: list[socket.socket] | None = None) -> None:
        await serve(self, sockets=sockets if sockets is not None else [sock])

    uvicorn.server.Server.serve = serve_on_claimed_port  # type: ignore[method-assign]


SHUTDOWN_NOISE_LOGGERS = ("sqlalchemy.pool.impl.AsyncAdaptedQueuePool", "sqlalchemy.pool.impl.QueuePool")
"""The loggers of the server's database connection pools: when the server is stopped while a request's
connection is being given back, the pool logs the cancelled rollback as an ERROR with a traceback."""


def _cancelled(record: logging.LogRecord) -> bool:
    """False (drop it) for a record whose exception is a cancellation: the server shutting down, not a fault."""
    import asyncio

    return not (record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError))


def _quiet_shutdown() -> None:
    """In the server process: a cancelled connection rollback at shutdown (SQLAlchemy's "Exception during reset or
    similar" with a CancelledError) is not printed into the run's terminal, where it read as the run's failure.
    Other pool errors still are."""
    for name in SHUTDOWN_NOISE_LOGGERS:
        logging.getLogger(name).addFilter(_cancelled)


def _main(argv: list[str]) -> None:
    """``temporary.py PARENT_PID -m MODULE ARGS...``: guard, then run ``python -m MODULE ARGS...``."""
    import runpy

    parent, flag, module, *rest = argv
    if flag != "-m":
        raise SystemExit(f"usage: {os.path.basename(__file__)} PARENT_PID -m MODULE [ARGS...]")
    # Neither this file's folder (Python 3.10; -P keeps it off on 3.11+) nor the working directory, which `python -m`
    # would have put first: a `yaml.py` where the run started must not replace Prefect's (docs/metrics/custom.md#your-own-metrics)
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    _claim_port(rest)
    _quiet_shutdown()
    _die_with_parent(int(parent))
    _reuse_migrated_databases()
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
