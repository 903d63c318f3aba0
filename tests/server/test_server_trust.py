"""``evaltasks server``: a run hands its environment and terminal only to its own user's server
(docs/server.md#faster-repeated-runs-evaltasks-server).

Each test builds what a running server leaves in ``$PREFECT_HOME/evaltasks-server/`` (the lock, held by this test
process; ``state.json`` with this Python's identity; the socket) and serves that socket from a real forked
process, of this user or, through ``os.setuid``, of another. No Prefect server is needed for the decision: the
listener records every byte a client sends and answers as the runner does (``started``, ``exit 0``), so a run
it took exits 0 having printed nothing. A first case, with everything private, shows that such a listener is
used; then each unsafe variant must be refused before anything is sent, with one line saying why, and the run
goes the normal way (an invalid suite: exit 2 and its own error; one valid suite runs to its reports).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.process_env import subprocess_env

pytestmark = [
    pytest.mark.slow,  # servers and runs in subprocesses
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_PEERCRED and fork: Linux"),
]

NOBODY = 65534  # another user's uid (nobody), for the files and processes a root test gives away
DEADLINE_S = 600  # generous: the machine may be shared and busy
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file or a process to another user needs root")


class FakeServer:
    """A server's files and a listener process on its socket; ``received()`` tells what a client sent it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "prefect-home"
        self.env = subprocess_env(self.home)
        self.dir = self.home / "evaltasks-server"
        self.dir.mkdir(parents=True, mode=0o700)
        self.state = self.dir / "state.json"
        self.lock_fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)  # "a server runs"
        paths = json.loads(
            self._python(
                "import json; from evaltasks.server.client import identity, server_paths; "
                "p = server_paths(); print(json.dumps([str(p.socket), identity()]))"
            )
        )
        self.socket, identity = Path(paths[0]), paths[1]
        state = {
            "status": "ready",
            "pid": os.getpid(),
            "url": "http://127.0.0.1:9/api",
            "socket": str(self.socket),
            "started": 0,
            "runs_served": 0,
            "log": str(self.dir / "server.log"),
            **identity,
        }
        fd = os.open(self.state, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(state, handle)
        self.socket.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # a long path's socket: in the temp folder
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        umask = os.umask(0o077)
        try:
            self.listener.bind(str(self.socket))
        finally:
            os.umask(umask)
        self.report_read, self.report_write = os.pipe()
        self.pid: int | None = None

    def _python(self, code: str) -> str:
        result = subprocess.run(
            [sys.executable, "-c", code],
            env=self.env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    def serve(self, uid: int | None = None) -> None:
        """Listen and answer one client in a forked process (of user ``uid`` when given: its listen() records
        that user as the socket's peer)."""
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.close(self.report_read)
                if uid is not None:
                    os.setgid(uid)
                    os.setuid(uid)
                self.listener.listen(1)
                conn, _ = self.listener.accept()
                header, fds, _, _ = socket.recv_fds(conn, 8, 3)  # the request's length, with the descriptors
                size, data = int.from_bytes(header, "big"), b""
                while len(data) < size:
                    chunk = conn.recv(size - len(data))
                    if not chunk:
                        break
                    data += chunk
                if header or fds:  # a client that connected and left without sending has sent nothing
                    os.write(self.report_write, f"{len(header) + len(data)} bytes, {len(fds)} descriptors\n".encode())
                conn.sendall(b"started\nexit 0\n")
                conn.close()
            finally:
                os._exit(0)
        self.listener.close()
        os.close(self.report_write)

    def received(self) -> str:
        """What the listener got ("" when no client connected and sent): the listener is ended first."""
        assert self.pid is not None
        try:
            os.kill(self.pid, 9)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        self.pid = None
        with os.fdopen(self.report_read, "rb") as report:
            return report.read().decode()

    def close(self) -> None:
        try:
            os.unlink(self.socket)
        except OSError:
            pass
        if self.pid is not None:
            try:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(self.lock_fd)


@pytest.fixture()
def fake(tmp_path: Path) -> Iterator[FakeServer]:
    server = FakeServer(tmp_path)
    try:
        yield server
    finally:
        server.close()


def _invalid_suite(folder: Path) -> Path:
    (folder / "invalid.yaml").write_text(
        "name: invalid\ndataset: {path: missing.jsonl}\nmetrics: [{metric: NonEmptyMetric}]\n", encoding="utf-8"
    )
    return folder / "invalid.yaml"


def _run(fake: FakeServer, suite: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evaltasks.cli", "run", suite, *extra],
        env=fake.env,
        cwd=fake.root,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


def test_a_private_server_of_this_user_is_used(fake: FakeServer) -> None:
    """The control: with every file private and the listener of this user, the run goes to it (it answered
    exit 0 for an invalid suite, and got the request with the three standard descriptors)."""
    _invalid_suite(fake.root)
    fake.serve()
    result = _run(fake, "invalid.yaml")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert ", 3 descriptors" in fake.received()


def _world_writable_folder(fake: FakeServer) -> None:
    os.chmod(fake.dir, 0o777)


def _readable_state(fake: FakeServer) -> None:
    os.chmod(fake.state, 0o644)


def _open_socket(fake: FakeServer) -> None:
    os.chmod(fake.socket, 0o777)


def _foreign_folder(fake: FakeServer) -> None:
    os.chown(fake.dir, NOBODY, NOBODY)


def _foreign_state(fake: FakeServer) -> None:
    os.chown(fake.state, NOBODY, NOBODY)


def _linked_state(fake: FakeServer) -> None:
    real = fake.dir / "real-state.json"
    os.rename(fake.state, real)
    os.symlink(real, fake.state)


UNSAFE: dict[str, tuple[Callable[[FakeServer], None], str]] = {
    "world-writable folder": (_world_writable_folder, "evaltasks-server has mode 0777"),
    "state readable by others": (_readable_state, "state.json has mode 0644"),
    "socket open to others": (_open_socket, ".sock has mode 0777"),
    "state file a link": (_linked_state, "state.json is a symbolic link"),
}
UNSAFE_AS_ROOT: dict[str, tuple[Callable[[FakeServer], None], str]] = {
    "folder of another user": (_foreign_folder, f"evaltasks-server is owned by uid {NOBODY}"),
    "state file of another user": (_foreign_state, f"state.json is owned by uid {NOBODY}"),
}


def _check_refused(fake: FakeServer, result: subprocess.CompletedProcess[str], why: str) -> None:
    """Nothing reached the listener; one line says the server is not used and why; the run went the normal way."""
    assert fake.received() == "", "the client sent its request to an untrusted server"
    lines = [line for line in result.stderr.splitlines() if "evaltasks server" in line]
    assert len(lines) == 1 and lines[0].startswith("evaltasks: not using the evaltasks server: "), result.stderr
    assert why in lines[0], lines
    assert result.returncode == 2 and "missing.jsonl" in result.stderr, result.stderr


@pytest.mark.parametrize("variant", sorted(UNSAFE))
def test_a_server_whose_files_others_may_use_is_refused(fake: FakeServer, variant: str) -> None:
    make_unsafe, why = UNSAFE[variant]
    _invalid_suite(fake.root)
    fake.serve()
    make_unsafe(fake)
    _check_refused(fake, _run(fake, "invalid.yaml"), why)


@root_only
@pytest.mark.parametrize("variant", sorted(UNSAFE_AS_ROOT))
def test_a_server_whose_files_another_user_owns_is_refused(fake: FakeServer, variant: str) -> None:
    make_unsafe, why = UNSAFE_AS_ROOT[variant]
    _invalid_suite(fake.root)
    fake.serve()
    make_unsafe(fake)
    _check_refused(fake, _run(fake, "invalid.yaml"), why)


@root_only
def test_a_socket_served_by_another_users_process_is_refused(fake: FakeServer) -> None:
    """Every file is this user's and private, but the process listening on the socket is another user's
    (SO_PEERCRED): the environment and the terminal are not handed to it."""
    _invalid_suite(fake.root)
    fake.serve(uid=NOBODY)
    _check_refused(fake, _run(fake, "invalid.yaml"), f"served by a process of uid {NOBODY}")


def test_a_refused_server_leaves_the_run_complete(fake: FakeServer) -> None:
    """A run that refuses the server runs in its own process to its reports (exit 0, results.json)."""
    (fake.root / "cases.jsonl").write_text(
        '{"id": "a", "input": "q", "actual_output": "an answer"}\n', encoding="utf-8"
    )
    (fake.root / "suite.yaml").write_text(
        "name: tiny\ndataset: {path: cases.jsonl}\nmetrics: [{metric: NonEmptyMetric}]\n", encoding="utf-8"
    )
    fake.serve()
    _world_writable_folder(fake)
    result = _run(fake, "suite.yaml", "--output-dir", "out")
    assert fake.received() == ""
    assert result.returncode == 0, result.stdout + result.stderr
    assert "not using the evaltasks server: " in result.stderr
    results = json.loads((fake.root / "out" / "results.json").read_text(encoding="utf-8"))
    assert results["passed"] is True and [case["id"] for case in results["cases"]] == ["a"]


@root_only
def test_the_server_refuses_a_folder_of_another_user(tmp_path: Path) -> None:
    """`evaltasks server` in a PREFECT_HOME whose evaltasks-server folder another user owns: exit 2, one line,
    and the folder is left as it was (nothing written in it)."""
    home = tmp_path / "prefect-home"
    folder = home / "evaltasks-server"
    folder.mkdir(parents=True)
    os.chown(folder, NOBODY, NOBODY)
    os.chmod(folder, 0o777)
    result = subprocess.run(
        [sys.executable, "-m", "evaltasks.cli", "server"],
        env=subprocess_env(home),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and f"is owned by uid {NOBODY}" in result.stderr, result.stderr
    assert list(folder.iterdir()) == []


def test_a_server_of_another_evaltasks_installation_is_named_as_such() -> None:
    """Same Python, evaltasks imported from elsewhere (a source checkout): the reason names both places instead
    of blaming "another Python" while naming the same one."""
    from evaltasks.server.client import identity, incompatibility

    mine = identity()
    reason = incompatibility({**mine, "package": ["/checkout/evaltasks"]})
    assert reason == f"it imports evaltasks from /checkout/evaltasks, this run from {', '.join(mine['package'])}"
    assert (
        incompatibility({**mine, "python": "/other/python"})
        == f"it runs another Python (/other/python in {mine['prefix']}; this run: {mine['python']} in {mine['prefix']})"
    )


def test_python_and_python3_of_one_virtualenv_are_one_python() -> None:
    """A server started by ``.venv/bin/python3`` serves ``.venv/bin/python -m evaltasks`` (links to one
    interpreter in one environment); another environment of the same interpreter is another Python."""
    from evaltasks.server.client import identity, incompatibility

    names = {Path(sys.executable).name, "python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}"}
    links = [Path(sys.executable).parent / name for name in sorted(names) if name != Path(sys.executable).name]
    link = next((path for path in links if path.exists()), None)
    if link is None:
        pytest.skip("this environment has a single name for its Python")
    probe = "import json, sys; from evaltasks.server.client import identity; print(json.dumps(identity()))"
    other = json.loads(
        subprocess.run(
            [str(link), "-c", probe],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONSAFEPATH": "1"},
        ).stdout
    )
    mine = identity()
    assert other["python"] == mine["python"] and other["prefix"] == mine["prefix"]
    assert incompatibility({**mine, "prefix": "/another/venv"}).startswith("it runs another Python (")
