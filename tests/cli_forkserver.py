"""``python -m evaltasks.cli ARGS`` for the tests, forked from a process that has imported the heavy libraries.

A CLI run in a new interpreter spends about 5 s of CPU importing sentence-transformers (torch, transformers,
scikit-learn) before it does anything, more than the rest of a small run; the test suite makes hundreds of runs.
:func:`run_cli` asks this test process's fork server (``tests/forkserver_main.py``, started on first use, ended
with the process) for a child that becomes ``python -m evaltasks.cli ARGS`` in ``cwd`` with ``env``: the child
imports evaltasks itself, from its own environment, runs the real command in a real process of its own and exits
as a new interpreter would; only the third-party modules' import is shared (Prefect's too: the CLI has Prefect
read its settings and configure its logging before it first uses it, as in any program that imported Prefect).
It returns what :func:`subprocess.run` with ``capture_output=True, text=True`` returns.

A run goes to a new interpreter instead (``fresh=True``, or an ``env`` that differs from the fork server's in a
variable the preloaded libraries read when imported: ``PYTHON*``, ``HF_*``, ``TORCH_*``, locale, ``TMPDIR``,
``HOME``, ``XDG_*``, ``SSL_*``, ``PREFECT_LOGGING_*``…) where the test's subject is the interpreter's start
itself: what a fresh process imports, what its working directory could shadow (a planted ``yaml.py``), its
start-up time. A ``PYTHONPATH`` of absolute folders is served (the child puts them on ``sys.path`` where a new
interpreter would) unless one of them holds a module named as one the server has imported, a ``sitecustomize``,
or a distribution's metadata this environment lacks (:meth:`ForkServer.differences`).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO

from tests.process_env import session_env

SERVER_SCRIPT = Path(__file__).resolve().parent / "forkserver_main.py"
#: Environment variables read when the preloaded libraries are imported (or by the interpreter's start): a run
#: whose values differ from the fork server's runs in a new interpreter.
IMPORT_TIME_PREFIXES = (
    "PYTHON",
    "HF_",
    "HUGGINGFACE",
    "TRANSFORMERS",
    "SENTENCE_TRANSFORMERS",
    "TORCH",
    "PYTORCH",
    "TOKENIZERS",
    "OMP_",
    "MKL_",
    "OPENBLAS",
    "KMP_",
    "CUDA",
    "NUMPY",
    "SCIPY",
    "SKLEARN",
    "FAISS",
    "LC_",
    "LANG",
    "TMP",  # TMPDIR, TMP: tempfile caches its folder when the preloaded libraries first ask for it
    "TEMP",
    "HOME",  # huggingface_hub reads HOME and XDG_CACHE_HOME when imported (its cache folder)
    "XDG_",
    "PREFECT_LOGGING",  # Prefect's logging: a new interpreter configures it when prefect.main is imported, a forked
    # run when the CLI first uses Prefect (tests/forkserver_main.py); at other levels than the CLI's, the moment shows
    "SSL_",  # SSL_CERT_FILE: Prefect's API settings and an HTTP transport built when Prefect is imported read it
    "WEBSOCKETS_",
)
HANDLED = frozenset({"PYTHONUNBUFFERED"})  # the child sets its standard streams from its own environment


class ForkServer:
    """One fork server process (see the module docstring); :meth:`run` is thread-safe."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="evaltasks-forkserver-"))
        self.socket = self.folder / "socket"
        self.env = session_env()  # not os.environ: the test that starts it may have changed it
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), str(self.socket)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self.env,
            cwd=self.folder,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # the imports: seconds
        if not line.startswith(b"ready "):
            raise RuntimeError(f"the tests' fork server did not start (it printed {line!r})")
        ready = json.loads(line[len(b"ready ") :])
        #: variables the preloaded imports set (torch's KMP_*, ...): a run whose value is the same, or unset, sees
        #: what a new interpreter importing them would see
        self.preloaded: dict[str, str] = ready["env"]
        #: the top-level names of the modules the server has imported: a run's PYTHONPATH must not hold one
        self.modules: frozenset[str] = frozenset(ready["modules"])
        self._counter = 0
        self._lock = threading.Lock()

    def serves(self, env: dict[str, str]) -> bool:
        """True when a run with ``env`` sees the same preloaded libraries as a new interpreter would."""
        return not self.differences(env)

    def differences(self, env: dict[str, str]) -> list[str]:
        """The import-time variables (:data:`IMPORT_TIME_PREFIXES`) whose values in ``env`` differ from the fork
        server's, sorted."""
        names = {n for n in (*env, *self.env) if n.startswith(IMPORT_TIME_PREFIXES) and n not in HANDLED}
        return sorted(
            name
            for name in names
            if env.get(name) != self.env.get(name)
            and not (name in self.preloaded and env.get(name) in (None, self.preloaded[name]))
            and not (name == "PYTHONPATH" and self._adds_path(env.get(name, "")))
        )

    def _adds_path(self, value: str) -> bool:
        """True when a run's ``PYTHONPATH`` ``value`` can be served: the server started without one (its child puts
        the entries where a new interpreter would), and each entry is a folder (not a zip) named by a normalised
        absolute path, named once, holding nothing a new interpreter would treat differently (:func:`_plain`)."""
        if self.env.get("PYTHONPATH") or not value:
            return False
        entries = value.split(os.pathsep)
        if len(set(entries)) != len(entries):
            return False  # a new interpreter drops the repeats from sys.path (site.removeduppaths)
        for entry in entries:
            if not os.path.isabs(entry) or os.path.normpath(entry) != entry:
                return False  # relative, empty or not normalised: made absolute by rules of its own
            if os.path.exists(entry) and not (os.path.isdir(entry) and self._plain(entry)):
                return False
        return True

    def _plain(self, folder: str) -> bool:
        """False when ``folder`` holds what the server's preloaded imports or a new interpreter's start would have
        found there: a module or package named as one the server has imported (a folder, or a file Python would
        import: ``prefect.py``, not ``prefect.yaml``), ``sitecustomize`` or ``usercustomize`` (run at start-up), or
        the metadata of a distribution this environment lacks (the preloaded libraries probe for optional packages
        once, when imported: transformers' ``is_*_available``)."""
        import importlib.machinery
        import importlib.metadata

        try:
            names = os.listdir(folder)
        except OSError:
            return False
        for name in names:
            stem, dot, suffix = name.partition(".")
            importable = not dot or "." + suffix in importlib.machinery.all_suffixes()  # a folder, a module file
            if importable and (stem in self.modules or stem in ("sitecustomize", "usercustomize")):
                return False
            if name.endswith((".dist-info", ".egg-info")):
                project = name.rsplit(".", 1)[0].partition("-")[0]
                try:
                    importlib.metadata.distribution(project)
                except importlib.metadata.PackageNotFoundError:
                    return False
        return True

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
        """The run of ``python -m evaltasks.cli *argv`` in a forked child (see the module docstring).

        Raises:
            subprocess.TimeoutExpired: it ran longer than ``timeout`` seconds (the child is killed first).
        """
        with self._lock:
            self._counter += 1
            number = self._counter
        out, err = self.folder / f"{number}.out", self.folder / f"{number}.err"
        request = {"argv": argv, "cwd": str(Path(cwd).resolve()), "env": env, "stdout": str(out), "stderr": str(err)}
        command = [sys.executable, "-m", "evaltasks.cli", *argv]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(self.socket))
            conn.settimeout(timeout)
            conn.sendall((json.dumps(request) + "\n").encode("utf-8", "surrogateescape"))
            reader = conn.makefile("rb")
            pid = int(_expect(reader, b"pid", command))
            try:
                code = int(_expect(reader, b"exit", command))
            except TimeoutError:
                _kill(pid)
                raise subprocess.TimeoutExpired(command, timeout, _read(out), _read(err)) from None
        stdout, stderr = _read(out), _read(err)
        out.unlink(missing_ok=True)
        err.unlink(missing_ok=True)
        return subprocess.CompletedProcess(command, code, stdout, stderr)

    def close(self) -> None:
        """End the server (its children still running are killed) and remove its folder."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


def _expect(reader: IO[bytes], word: bytes, command: list[str]) -> str:
    line = reader.readline()
    if not line.startswith(word + b" "):
        raise RuntimeError(f"the tests' fork server ended while running {command} (it said {line!r})")
    return line[len(word) + 1 :].decode().strip()


def _read(path: Path) -> str:
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as subprocess's text mode


def _kill(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


_server: ForkServer | None = None
_server_lock = threading.Lock()


def fork_server() -> ForkServer:
    """This process's fork server, started on first use and ended when the process exits."""
    global _server
    with _server_lock:
        if _server is None or _server.process.poll() is not None:
            _server = ForkServer()
            atexit.register(_server.close)
        return _server


def run_cli(
    *args: str, cwd: Path, env: dict[str, str], timeout: float = 600, fresh: bool = False
) -> subprocess.CompletedProcess[str]:
    """``python -m evaltasks.cli ARGS`` in ``cwd`` with ``env``, its output captured as text: a child of the fork
    server, or a new interpreter with ``fresh`` (or an ``env`` the fork server cannot serve; module docstring).

    Raises:
        subprocess.TimeoutExpired: the run took longer than ``timeout`` seconds (it is killed).
    """
    if not fresh and os.name == "posix":
        server = fork_server()
        if server.serves(env):
            return server.run(list(args), cwd, env, timeout)
    return subprocess.run(
        [sys.executable, "-m", "evaltasks.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
