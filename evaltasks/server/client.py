"""The light side of ``evaltasks server``: find a running server, decide whether a run may use it, hand it the run.

``evaltasks server`` (docs/server.md#faster-repeated-runs-evaltasks-server) keeps a Prefect server and a warm runner
process (:mod:`evaltasks.server.daemon`) alive between runs. ``evaltasks run`` asks :func:`run_served` first: when a
compatible server runs for this ``PREFECT_HOME`` the run is forwarded to it (the runner forks a child that runs
the command with this process's argv, working directory, environment and terminal) and this process only relays
signals and the exit code. Everything here uses the standard library only and is imported before Prefect, rich,
numpy or torch, so deciding costs milliseconds and a served run starts at once.

State lives in ``$PREFECT_HOME/evaltasks-server/`` (default ``~/.prefect``): ``state.json`` (socket path, pids,
Prefect API URL, evaltasks version, Python executable, code stamp, runs served), ``server.log`` and ``lock``,
which the runner holds locked for its lifetime (one server per ``PREFECT_HOME``; a lock nobody holds means no
server, whatever ``state.json`` says).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import stat
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaltasks._env import NO_SERVER_VARIABLE, env_value, flag_value
from evaltasks._version import __version__
from evaltasks.server.safety import entry_path, make_private_dir, peer_uid, private_problem, python_command

STATE_DIR_NAME = "evaltasks-server"
HEADER = struct.Struct("!Q")  # the request's length, sent with the three file descriptors
SOCKET_PATH_MAX = 100  # bytes: sun_path holds 104 (macOS) or 108 (Linux), with its NUL
PATH_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE", "PYTHONSAFEPATH")
# variables the runner's libraries read once, when imported (Hugging Face's offline mode and caches, torch's
# options): a run whose values differ from the server's would not see its own, so it goes the normal way
IMPORT_ENV_PREFIXES = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "SENTENCE_TRANSFORMERS_", "TORCH_", "PYTORCH_")
START_DEADLINE_S = 600.0  # `server start` waits this long for the server to be ready (a busy machine, migrations)
STOP_POLL_S = 0.1
SERVER_CHECK_S = 1.0  # while a served run goes on, how often its client checks that the server still runs


def supported() -> bool:
    """True where the server can run: Unix sockets that pass file descriptors (Linux, macOS; not Windows)."""
    return sys.platform != "win32" and hasattr(socket, "AF_UNIX") and hasattr(socket, "send_fds")


@dataclass(frozen=True)
class ServedCommand:
    """The command a served run runs, as the CLI hands it to :func:`server_command` (the server runs CLI commands
    but never imports the CLI: docs/architecture.md#architecture).

    Attributes:
        prepare: called in the forked child, where Prefect is already imported, with the client's environment and
            streams in place: sets the command's environment defaults (marks the run as supervised by the runner)
            and has Prefect read its settings and set up its logging again from them (the CLI's
            ``quiet_prefect_defaults``).
        main: the command's entry point: argv (without the program name) -> exit code.
        interrupted: the exit code of a run that ``KeyboardInterrupt`` ended (130, as a shell reports SIGINT).
    """

    prepare: Callable[[], None]
    main: Callable[[list[str]], int]
    interrupted: int


@dataclass(frozen=True)
class ServerPaths:
    """Where the server of one ``PREFECT_HOME`` keeps its files."""

    home: Path  # PREFECT_HOME, resolved
    dir: Path  # its evaltasks-server folder
    state: Path  # state.json
    lock: Path  # held locked (flock) by the running server
    log: Path  # the server's output
    socket: Path  # the runner's Unix socket


def server_paths() -> ServerPaths:
    """The paths of this ``PREFECT_HOME``'s server (``$PREFECT_HOME``, default ``~/.prefect``).

    The socket sits next to the state when its path fits a Unix socket address, else in a private per-user
    folder of the temporary directory, named by a hash of the home.
    """
    home = Path(env_value("PREFECT_HOME") or "~/.prefect").expanduser().resolve()
    folder = home / STATE_DIR_NAME
    sock = folder / "runner.sock"
    if len(os.fsencode(str(sock))) > SOCKET_PATH_MAX:
        import tempfile

        digest = hashlib.sha256(os.fsencode(str(home))).hexdigest()[:16]
        sock = Path(tempfile.gettempdir()) / f"evaltasks-{os.getuid()}" / f"{digest}.sock"
    return ServerPaths(home, folder, folder / "state.json", folder / "lock", folder / "server.log", sock)


def code_stamp() -> str:
    """A hash of the path, modification time (ns) and size of every ``.py`` and ``.json`` file of the evaltasks
    package (and of a source checkout's ``flows/``): any edit, even one that keeps the size, changes it."""
    import evaltasks

    package = os.path.dirname(os.path.abspath(evaltasks.__file__))
    roots = [package] + [
        os.path.join(entry, "flows") for entry in evaltasks.__path__ if os.path.abspath(entry) != package
    ]
    lines = []
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".json")):
                    path = os.path.join(folder, name)
                    try:
                        stat = os.stat(path)
                    except OSError:
                        continue
                    lines.append(f"{path}\0{stat.st_mtime_ns}\0{stat.st_size}")
    return hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def identity() -> dict[str, Any]:
    """What a run must share with the server to use it: Python, evaltasks version and code, import path (without
    the entry Python put first for the process: :func:`~evaltasks.server.safety.entry_path`; a served run gets
    its client's)."""
    import evaltasks

    path = sys.path[1:] if entry_path() is not None else list(sys.path)

    return {
        "version": __version__,
        "python": os.path.realpath(sys.executable),  # a venv's python and python3 are one interpreter
        "prefix": sys.prefix,  # ... and two venvs of one interpreter are not
        "package": [os.path.abspath(entry) for entry in evaltasks.__path__],
        "stamp": code_stamp(),
        "sys_path": path,
        "path_env": {name: os.environ.get(name) for name in PATH_ENV},
        "import_env": {
            name: value for name, value in sorted(os.environ.items()) if name.startswith(IMPORT_ENV_PREFIXES)
        },
    }


_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)  # never a link, never blocked by a FIFO


def _lock_held(paths: ServerPaths) -> bool:
    """True while a server holds the lock of ``paths`` (a lock nobody holds means no server runs)."""
    import fcntl

    try:
        fd = os.open(paths.lock, _OPEN_FLAGS)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True  # held: a server runs
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def server_state(paths: ServerPaths) -> tuple[dict[str, Any] | None, str | None]:
    """The state of the server running for ``paths``, checked before it is read: ``(state, None)`` when one runs
    and its folder and state file are this user's and private (module :mod:`evaltasks.server.safety`);
    ``(None, problem)`` when one runs but may not be trusted (the problem names the path and what is wrong);
    ``(None, None)`` when none runs (or its state cannot be read yet)."""
    if not _lock_held(paths):
        return None, None
    folders = [paths.dir] + ([paths.socket.parent] if paths.socket.parent != paths.dir else [])
    for path, kind in [*((folder, "folder") for folder in folders), (paths.state, "file")]:
        problem = private_problem(path, kind)
        if problem is not None:
            return None, problem
    try:
        fd = os.open(paths.state, _OPEN_FLAGS)
        with os.fdopen(fd, "rb") as handle:
            state = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError):
        return None, None
    if not isinstance(state, dict):
        return None, None
    if str(state.get("socket")) != str(paths.socket):
        return None, f"its state file {paths.state} names the socket {state.get('socket')}, not {paths.socket}"
    return state, None


def read_state(paths: ServerPaths) -> dict[str, Any] | None:
    """The running server's state, or None when no server holds the lock of ``paths`` (none runs) or its files
    are not private to this user (:func:`server_state` says why)."""
    return server_state(paths)[0]


def incompatibility(state: dict[str, Any]) -> str | None:
    """Why a run in this process must not use the server of ``state`` (None: it may)."""
    mine = identity()
    if state.get("version") != mine["version"]:
        return f"it runs evaltasks {state.get('version')}, this is {mine['version']}"
    if state.get("python") != mine["python"] or state.get("prefix") != mine["prefix"]:
        return (
            f"it runs another Python ({state.get('python')} in {state.get('prefix')}; this run: "
            f"{mine['python']} in {mine['prefix']})"
        )
    if state.get("package") != mine["package"]:
        return (
            f"it imports evaltasks from {', '.join(state.get('package') or ['?'])}, this run from "
            f"{', '.join(mine['package'])}"
        )
    if state.get("sys_path") != mine["sys_path"] or state.get("path_env") != mine["path_env"]:
        return "its import path differs (PYTHONPATH or another environment)"
    if state.get("import_env") != mine["import_env"]:
        differ = sorted(
            set(state.get("import_env") or {}).symmetric_difference(mine["import_env"])
            | {name for name, value in mine["import_env"].items() if (state.get("import_env") or {}).get(name) != value}
        )
        return f"it was started with other values of {', '.join(differ)}"
    if state.get("stamp") != mine["stamp"]:
        return "the evaltasks code changed since it started"
    return None


def _profile_api_url(home: Path) -> str | None:
    """``PREFECT_API_URL`` of the active Prefect profile in ``home/profiles.toml`` (None when unset or unread)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: a profiles file then keeps runs on the normal path when it names a URL
        text = (home / "profiles.toml").read_text(encoding="utf-8") if (home / "profiles.toml").is_file() else ""
        return "unknown" if "PREFECT_API_URL" in text else None
    try:
        profiles = tomllib.loads((home / "profiles.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    active = env_value("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    value = profiles.get("profiles", {}).get(active, {}).get("PREFECT_API_URL")
    return str(value) if value else None


def usable_state() -> tuple[dict[str, Any] | None, str | None]:
    """``(state, None)`` of a ready server that a run in this process may use; else ``(None, reason)``, where
    ``reason`` says why a server that runs is not used (None when none runs or the user chose the normal way)."""
    if not supported():
        return None, None
    # Settings.no_server, read with the standard library: this module decides before anything heavy is imported
    # (importing pydantic-settings costs 0.1 s or more; evaltasks.settings says why)
    if flag_value(env_value(NO_SERVER_VARIABLE) or "0"):
        return None, None
    paths = server_paths()
    state, problem = server_state(paths)
    if state is None:
        return None, problem
    if state.get("status") != "ready":
        return None, f"it is {state.get('status')}"
    reason = incompatibility(state)
    if reason is not None:
        return None, f"{reason} (restart it: evaltasks server stop; evaltasks server start)"
    url = str(state.get("url", "")).rstrip("/")
    wanted = env_value("PREFECT_API_URL")
    if wanted and wanted.rstrip("/") != url:  # the user chose another Prefect server
        return None, f"PREFECT_API_URL names another Prefect server ({wanted})"
    if not wanted and (_profile_api_url(paths.home) or url).rstrip("/") != url:
        return None, "the active Prefect profile's PREFECT_API_URL names another Prefect server"
    return state, None


def _stream_spec(stream: Any) -> dict[str, Any]:
    """How the child re-creates one of this process's standard streams on the same file descriptor."""
    return {
        "encoding": getattr(stream, "encoding", None) or "utf-8",
        "errors": getattr(stream, "errors", None) or "strict",
        "line_buffering": bool(getattr(stream, "line_buffering", False)),
        "write_through": bool(getattr(stream, "write_through", False)),
    }


def _standard_fds() -> list[int]:
    """File descriptors 0, 1, 2 (one of ``/dev/null`` in place of any that is closed)."""
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR))
    return fds


def _count(n: object, noun: str) -> str:
    """``"1 run"``, ``"2 runs"``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _not_used(reason: str) -> None:
    """The one line a run prints when it goes the normal way although a server runs
    (docs/server.md#faster-repeated-runs-evaltasks-server: when a run uses the server)."""
    print(f"evaltasks: not using the evaltasks server: {reason}; running without it", file=sys.stderr, flush=True)


def _connect(paths: ServerPaths, state: dict[str, Any]) -> socket.socket | None:
    """A connection to the server's socket once the socket file and the process serving it are this user's;
    None (after the one line of :func:`_not_used`) otherwise, before anything is sent."""
    problem = private_problem(paths.socket, "socket")
    if problem is not None:
        _not_used(problem)
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(paths.socket))
        uid = peer_uid(conn)
    except OSError as exc:
        conn.close()
        _not_used(f"its socket {paths.socket} does not answer ({exc.strerror or exc})")
        return None
    if uid is not None and uid != os.getuid():
        conn.close()
        _not_used(
            f"its socket {paths.socket} is served by a process of uid {uid}, not by this user (uid {os.getuid()})"
        )
        return None
    return conn


class _Lines:
    """The server's reply lines on ``conn``; while none arrives, checks every :data:`SERVER_CHECK_S` seconds that
    the server still runs (its lock is held and its process exists)."""

    def __init__(self, conn: socket.socket, paths: ServerPaths, pid: int) -> None:
        self.conn, self.paths, self.pid, self.buffer = conn, paths, pid, b""
        self.server_gone = False

    def _server_runs(self) -> bool:
        return _lock_held(self.paths) and _pid_alive(self.pid)

    def next(self) -> bytes:
        """The next line (without its newline); b"" when the connection closed or the server ended."""
        import select

        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.conn], [], [], SERVER_CHECK_S)
            if not ready:
                if self._server_runs():
                    continue
                # gone: anything its runs sent before they ended is already here
                ready, _, _ = select.select([self.conn], [], [], 0)
                if not ready:
                    self.server_gone = True
                    return b""
            try:
                chunk = self.conn.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                self.server_gone = not self._server_runs()
                return b""
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.strip()


def run_served(argv: list[str], command_started: float) -> int | None:
    """Run ``evaltasks`` with ``argv`` (a ``run`` command) on this ``PREFECT_HOME``'s server, if one may be used.

    Returns the run's exit code, or None when no compatible server is ready (or it did not take the run: it was
    stopping), and the caller runs the command itself; a server that runs but is not used gets one line on
    stderr saying why (:func:`usable_state`; a folder, state file or socket not private to this user, or a
    socket served by another user's process, :mod:`evaltasks.server.safety`, are refused before anything is
    sent). While the run goes on, SIGINT and SIGTERM received here are passed to it (it handles them as a run in
    this process would: docs/cli.md#interrupted-runs). A server that ends during the run ends the run with it
    (:mod:`evaltasks.server.daemon`): exit 3 with one line.
    """
    state, reason = usable_state()
    if state is None:
        if reason:
            _not_used(reason)
        return None
    paths = server_paths()
    conn = _connect(paths, state)
    if conn is None:
        return None
    request = {
        "argv": list(argv),
        "argv0": sys.argv[0] if sys.argv else "evaltasks",
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "sys_path0": entry_path(),
        "started": command_started,
        "streams": [_stream_spec(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
    }
    payload = json.dumps(request).encode("utf-8", "surrogateescape")
    lines = _Lines(conn, paths, int(state.get("pid") or 0))
    try:
        socket.send_fds(conn, [HEADER.pack(len(payload))], _standard_fds())
        conn.sendall(payload)
        if lines.next() != b"started":
            conn.close()
            return None
    except OSError:
        conn.close()
        return None

    def forward(signum: int, frame: Any) -> None:
        try:
            conn.sendall(f"signal {signum}\n".encode())
        except OSError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while True:
            line = lines.next()
            if not line:
                if lines.server_gone:
                    print(
                        f"evaltasks: error: the evaltasks server (pid {state.get('pid')}) ended during the run, "
                        f"which ended with it (its log: {paths.log})",
                        file=sys.stderr,
                    )
                else:
                    print(
                        f"evaltasks: error: the run ended without an exit code on the evaltasks server (its log: "
                        f"{paths.log})",
                        file=sys.stderr,
                    )
                return 3
            word, _, value = line.decode().partition(" ")
            if word == "exit":
                return int(value)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        conn.close()


def ensure_private_dir(paths: ServerPaths, say: Callable[[str], None]) -> bool:
    """Make the server's folder of ``paths`` private to this user (:func:`~evaltasks.server.safety.make_private_dir`):
    ``say`` gets one line for a folder it repaired; a folder that cannot be used (another user's, a link) prints
    one error line and returns False."""
    problem, repaired = make_private_dir(paths.dir)
    if problem is not None:
        print(
            f"evaltasks: error: PREFECT_HOME {paths.home}: the server's folder cannot be used: {problem}",
            file=sys.stderr,
        )
        return False
    if repaired:
        say(f"{repaired} (only its owner may use it)")
    return True


def open_private_log(paths: ServerPaths) -> Any:
    """The server's log, opened for appending (binary), created with mode 0600, never through a link; an
    existing log of this user is made 0600.

    Raises:
        OSError: it cannot be opened, or it is not a regular file of this user.
    """
    fd = os.open(paths.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    st = os.fstat(fd)
    if st.st_uid != os.getuid() or not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(f"{paths.log} is not a regular file of this user")
    if st.st_mode & 0o077:
        os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


def _uptime(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h {rest // 60}m {rest % 60}s" if hours else f"{rest // 60}m {rest % 60}s"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def server_command(args: argparse.Namespace, foreground: Callable[[ServerPaths], int]) -> int:
    """``evaltasks server [start|stop|status]``; returns the exit code.

    ``server`` runs it in the foreground (Ctrl+C stops it), ``start`` in the background (returns once it is
    ready: exit 0; 3 when it failed to start, with its log's path), ``stop`` stops it (0; waits for running
    runs to finish, a second ``stop`` interrupts them), ``status`` prints it (0 running, 1 none). Exit 2 on
    Windows (not supported) and when ``PREFECT_HOME`` cannot be used. ``foreground``: runs the server in this
    process (:func:`evaltasks.server.daemon.serve` with the CLI's :class:`ServedCommand`; the CLI hands it over, so
    that this module never imports the runner); ``start`` runs ``python -m evaltasks server`` in the background.
    """
    if not supported():
        print(
            "evaltasks: error: `evaltasks server` needs Unix sockets (Linux, macOS); runs go the normal way",
            file=sys.stderr,
        )
        return 2
    paths = server_paths()
    if args.action is None:
        return foreground(paths)
    try:
        if args.action == "status":
            return _status(paths)
        if args.action == "stop":
            return _stop(paths)
        return _start(paths)
    except BrokenPipeError:  # `evaltasks server status | head -1`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _status(paths: ServerPaths) -> int:
    state, problem = server_state(paths)
    if problem is not None:
        print(f"evaltasks server: one runs for PREFECT_HOME={paths.home}, but runs here do not use it: {problem}")
        return 0
    if state is None:
        print(f"evaltasks server: not running for PREFECT_HOME={paths.home}")
        return 1
    url = str(state.get("url", ""))
    print(
        f"evaltasks server: {state.get('status')}, pid {state.get('pid')}, up "
        f"{_uptime(time.time() - float(state.get('started', time.time())))}, {_count(state.get('runs_served', 0), 'run')} "
        f"served, {state.get('running', 0)} running"
    )
    print(f"Prefect API: {url} (UI: {url.removesuffix('/api')})")
    print(f"PREFECT_HOME: {paths.home}; log: {paths.log}")
    reason = incompatibility(state)
    if reason:
        print(f"runs here do not use it: {reason} (restart it: evaltasks server stop; evaltasks server start)")
    return 0


def _stop(paths: ServerPaths) -> int:
    state = read_state(paths)
    if state is None:
        print(f"evaltasks server: not running for PREFECT_HOME={paths.home}")
        return 0
    pid, running = int(state["pid"]), int(state.get("running", 0))
    runs = f"{running} running run{'' if running == 1 else 's'}"
    os.kill(pid, signal.SIGTERM)
    if state.get("status") == "stopping" and running:
        print(f"evaltasks server: interrupting {runs} (SIGTERM)", flush=True)
    elif running:
        waiting_for = "its running run finishes" if running == 1 else f"its {runs} finish"
        print(
            f"evaltasks server: stopping once {waiting_for} (`evaltasks server stop` again interrupts them)", flush=True
        )
    while read_state(paths) is not None and _pid_alive(pid):
        time.sleep(STOP_POLL_S)
    print(f"evaltasks server: stopped (pid {pid})")
    return 0


def _start(paths: ServerPaths) -> int:
    import subprocess

    state = read_state(paths)
    if state is not None:
        reason = incompatibility(state)
        if reason:
            print(
                f"evaltasks: error: a server for PREFECT_HOME={paths.home} already runs (pid {state.get('pid')}) "
                f"but runs here cannot use it: {reason}; stop it first: evaltasks server stop",
                file=sys.stderr,
            )
            return 2
        print(f"evaltasks server: already running, pid {state.get('pid')}, Prefect API {state.get('url')}")
        return 0
    if not ensure_private_dir(paths, lambda repaired: print(f"evaltasks server: {repaired}", file=sys.stderr)):
        return 2
    try:
        log = open_private_log(paths)
    except OSError as exc:
        print(
            f"evaltasks: error: PREFECT_HOME {paths.home}: cannot write {paths.log} ({exc.strerror or exc})",
            file=sys.stderr,
        )
        return 2
    with log:
        started = time.time()
        # without the working directory on sys.path: the server imports the installed evaltasks, not a source tree
        # or a `yaml.py` where `server start` ran (evaltasks.server.safety)
        proc = subprocess.Popen(
            python_command("evaltasks", "server"),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        state = read_state(paths)
        if state is not None and state.get("status") == "ready" and state.get("pid") == proc.pid:
            print(
                f"evaltasks server: ready in {time.time() - started:.1f} s, pid {proc.pid}, Prefect API "
                f"{state.get('url')}; `evaltasks run` in PREFECT_HOME={paths.home} uses it"
            )
            return 0
        if proc.poll() is not None:
            break
        time.sleep(STOP_POLL_S)
    if proc.poll() is None:
        proc.terminate()
    print(f"evaltasks: error: the server did not start (exit {proc.poll()}); its log: {paths.log}", file=sys.stderr)
    return 3
