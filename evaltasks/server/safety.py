"""What keeps ``evaltasks server`` and evaltasks' own Python processes to their user and their installed code.

docs/server.md#faster-repeated-runs-evaltasks-server (a run talks only to its own user's server) and docs/metrics/custom.md#your-own-metrics (files beside a suite, or in the working directory, never replace evaltasks' modules). Standard library
only: the client imports this before Prefect, rich or numpy.

- Ownership: the server's folder must be a real folder (not a link) owned by this user with mode 0700 (no group or
  other bits), its state file and socket owned by this user with no group or other bits. The server creates the
  folder so and repairs the mode of a folder of its own (:func:`make_private_dir`); a client refuses a server
  whose files fail these checks (:func:`private_problem`) or whose socket is served by a process of another user
  (:func:`peer_uid`: ``SO_PEERCRED`` on Linux, ``LOCAL_PEERCRED`` on macOS).
- Import path: Python puts the working directory (``-m``, ``-c``) or the script's folder first on ``sys.path``.
  evaltasks starts its own Python processes without it (:func:`python_command`: ``-P`` on Python 3.11+; on 3.10,
  which has no ``-P``, a one-line ``-c`` start that removes the entry before importing anything), and
  :func:`entry_path` tells which entry a process has, so that a served run's process gets its client's.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import sys
from pathlib import Path

# `python -c` start of `python -m MODULE ARGS` without the working directory on sys.path, for Pythons without -P
# (3.10): '' (what -c puts first) goes before anything is imported; runpy is the standard library's.
BOOTSTRAP = (
    "import sys; sys.path[:1] = [] if sys.path[:1] == [''] else sys.path[:1]; import runpy; "
    "module = sys.argv.pop(1); runpy.run_module(module, run_name='__main__', alter_sys=True)"
)


def python_command(module: str, *args: str, python: str | None = None) -> list[str]:
    """The command line that runs ``python -m module args`` with neither the working directory nor any script's
    folder on ``sys.path``: ``[python, "-P", "-m", module, *args]`` on Python 3.11+ (Python docs, "Command line and
    environment": ``-P``), else ``[python, "-c", BOOTSTRAP, module, *args]``. ``python``: the
    interpreter, default this one (``sys.executable``; its version decides the form)."""
    if sys.version_info >= (3, 11):
        return [python or sys.executable, "-P", "-m", module, *args]
    return [python or sys.executable, "-c", BOOTSTRAP, module, *args]


def safe_flags() -> list[str]:
    """``["-P"]`` where this Python has it (3.11+), else ``[]``: for a script run by path, whose folder is then
    left off ``sys.path`` (the script itself must remove it on 3.10)."""
    return ["-P"] if sys.version_info >= (3, 11) else []


def entry_path() -> str | None:
    """``sys.path[0]`` when it is the entry Python put there for this process (the working directory of ``-m`` or
    ``-c``, the script's folder), None when the process has none (``-P``, ``-I``, :data:`BOOTSTRAP`, or the
    package removed it: ``python -m evaltasks``, see ``evaltasks/__init__.py``)."""
    if not sys.path or getattr(sys.flags, "safe_path", False) or sys.flags.isolated:
        return None
    first = sys.path[0]
    if first == "":
        return first
    candidates = []
    try:
        candidates.append(os.getcwd())
    except OSError:
        pass
    script = sys.argv[0] if sys.argv else ""
    if script and script not in ("-c", "-m"):
        candidates.append(os.path.dirname(os.path.realpath(script)))
    # compared with links resolved: Python resolves the script's own link, not those of the folders above it
    return first if os.path.realpath(first) in {os.path.realpath(c) for c in candidates} else None


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def private_problem(path: Path, kind: str) -> str | None:
    """Why ``path`` is not private to this user, or None when it is.

    ``kind``: ``"folder"`` (a real folder, not a symbolic link), ``"file"`` (a regular file) or ``"socket"``.
    Private: owned by this process's user (``os.getuid()``) and without any group or other permission bit
    (folders 0700, files 0600). The reason names the path and what is wrong (missing, link, owner uid, mode).
    """
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror or exc})"
    expected = {"folder": stat.S_ISDIR, "file": stat.S_ISREG, "socket": stat.S_ISSOCK}[kind]
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if not expected(st.st_mode):
        return f"{path} is not a {kind}"
    if st.st_uid != os.getuid():
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & 0o077:
        return f"{path} has mode {_mode(st)}: users other than its owner may use it"
    return None


def make_private_dir(path: Path) -> tuple[str | None, str | None]:
    """Create the folder ``path`` with mode 0700 (its parents as ``mkdir -p`` would), or make an existing one of
    this user private (mode 0700): returns ``(problem, repaired)``.

    ``problem``: why the folder cannot be used (a symbolic link, not a folder, owned by another user, cannot be
    created or changed), None when it can. ``repaired``: a sentence saying which mode was removed, None when
    nothing had to change.
    """
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(path)
    except OSError as exc:
        return f"{path} cannot be created ({exc.strerror or exc})", None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return private_problem(path, "folder"), None
    if not st.st_mode & 0o077:
        return None, None
    try:
        os.chmod(path, 0o700)
    except OSError as exc:
        return f"{path} has mode {_mode(st)} and cannot be made private ({exc.strerror or exc})", None
    return None, f"{path} had mode {_mode(st)}; set to 0700"


def peer_uid(conn: socket.socket) -> int | None:
    """The user id of the process at the other end of the connected Unix socket ``conn`` (the one that listens,
    for a client's socket): ``SO_PEERCRED`` on Linux (``man 7 unix``), ``LOCAL_PEERCRED`` on macOS
    (``getpeereid``'s source); None where the system tells neither."""
    if hasattr(socket, "SO_PEERCRED"):
        creds = struct.Struct("3i")  # struct ucred: pid, uid, gid
        _, uid, _ = creds.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, creds.size))
        return int(uid)
    if hasattr(socket, "LOCAL_PEERCRED"):
        xucred = struct.Struct("IIh")  # struct xucred: cr_version, cr_uid, cr_ngroups (then the groups)
        raw = conn.getsockopt(0, socket.LOCAL_PEERCRED, xucred.size + 16 * 4 + 2)  # 0: SOL_LOCAL
        return int(xucred.unpack_from(raw)[1])
    return None
