"""The parent process of ``evaltasks run``: it only waits, relays signals and decides the exit code.

``evaltasks run`` forks once, early (before Prefect, torch or any thread starts): the child runs the suite as
before, in a process group of its own; the parent (:func:`supervise`) stays small and guarantees three things
that the run's own process cannot, since a user's metric runs inside it (docs/cli.md#exit-codes):

- **Exit 0 means reports that passed.** The child announces the exit code it chose (:func:`announce_exit`) and
  where its reports go (:func:`note_reports`). A child that ended otherwise (a metric's ``os._exit()``, a signal
  nobody sent, a crash) gives exit 3 with one line saying so; exit 0 also needs a results.json that this run wrote
  and that says ``passed: true``.
- **A signal ends the run within a grace period.** SIGINT and SIGTERM are relayed to the child's process group;
  if the run has not ended :data:`GRACE_S` seconds after the first one (a metric stuck in its own code), every
  process of the run is killed and the parent exits 130 / 143 naming the metric that did not stop (the child
  records the metrics running in each of its processes: :func:`evaltasks.engine.progress.metric_running`).
- **Nothing the run started outlives it.** When the child has ended, whatever is left of its process group
  (processes a metric forked, task-runner workers) and every process re-parented to this one (Linux: the parent
  is a child subreaper, ``man 2 prctl``, so the orphans of the run, Prefect servers in sessions of their own
  included, come to it) are stopped: SIGTERM, then SIGKILL after :data:`LEFTOVER_GRACE_S`.

The child dies with the parent (Linux's parent-death signal), as the temporary Prefect server dies with the child.
Standard library only: it runs before anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from evaltasks._env import STOP_GRACE_S_VARIABLE, env_value
from evaltasks.engine.progress import RUN_STATE_ENV, STOP_GRACE_S, child_processes, recorded_metrics

GRACE_S = STOP_GRACE_S  # after the first SIGINT/SIGTERM, how long the run may take to stop before it is killed
LEFTOVER_GRACE_S = 2.0  # after SIGTERM to what the run left behind, how long before SIGKILL
POLL_S = 0.05  # how often the parent looks at its children
REPEAT_WINDOW_S = 0.25  # the same signal again within this many seconds is the same signal (see _Parent.relay)
EXIT_ABORTED, EXIT_SIGINT, EXIT_SIGTERM = 3, 130, 143
REPORTS = ("results.json", "junit.xml", "summary.md")
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36

_state_dir: Path | None = None  # in the child: the folder the parent reads (None in the parent and unsupervised)


def available() -> bool:
    """Whether runs can be supervised here: POSIX ``fork`` and process groups (not on Windows)."""
    return hasattr(os, "fork") and hasattr(os, "setpgid") and hasattr(os, "killpg")


def supervise() -> int | None:
    """Fork the run. In the child: returns None at once (the caller runs the suite). In the parent: waits for the
    child, relays SIGINT/SIGTERM, cleans up (module docstring) and returns the command's exit code.

    Call it from the main thread before any other thread or heavy import exists. ``EVALTASKS_STOP_GRACE_S``
    (seconds, a positive number) replaces :data:`GRACE_S`. Without a writable temporary directory (for the small
    state folder the two processes share) it returns None without forking: the run goes on unsupervised.
    """
    global _state_dir
    try:
        state = Path(tempfile.mkdtemp(prefix="evaltasks-run-"))
        (state / "metrics").mkdir()
    except OSError:  # no writable temporary directory: the run goes on unsupervised, as on Windows
        return None
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != parent:  # the parent ended before the signal was armed
            os._exit(EXIT_ABORTED)
        _prctl(_PR_SET_CHILD_SUBREAPER, 0)
        _state_dir = state
        os.environ[RUN_STATE_ENV] = str(state)
        return None
    with contextlib.suppress(OSError):  # also here: whichever runs first, the group exists before a signal
        os.setpgid(pid, pid)
    try:
        return _Parent(pid, state).wait()
    finally:
        shutil.rmtree(state, ignore_errors=True)


def announce_exit(code: int) -> None:
    """In the supervised child: record the exit code the command chose (the parent checks that the process
    really ended through it). No-op elsewhere."""
    if _state_dir is not None:
        with contextlib.suppress(OSError):
            (_state_dir / "status").write_text(str(code), encoding="utf-8")


def note_reports(directory: Path) -> None:
    """In the supervised child: the run's reports directory and what it holds now (the parent tells this run's
    reports from earlier ones by their inode and modification time). No-op elsewhere."""
    if _state_dir is not None:
        with contextlib.suppress(OSError):
            (_state_dir / "reports.json").write_text(
                json.dumps(
                    {"dir": str(Path(directory).absolute()), "before": report_stamps(Path(directory).absolute())}
                ),
                encoding="utf-8",
            )


def report_stamps(directory: Path) -> list[list[int]] | None:
    """[inode, mtime in ns] of results.json, junit.xml and summary.md in ``directory``; None unless all exist."""
    try:
        return [[st.st_ino, st.st_mtime_ns] for st in (os.stat(directory / name) for name in REPORTS)]
    except OSError:
        return None


def _prctl(option: int, value: int) -> None:
    """Linux ``prctl(option, value)``; nothing elsewhere or when it fails (the rest still holds, less strictly)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _grace_s() -> float:
    """``$EVALTASKS_STOP_GRACE_S`` when it is a positive number, else :data:`GRACE_S`.

    Read with the standard library, not through :mod:`evaltasks.settings` (which costs this small process 0.1 s or more
    of pydantic-settings imports), with the rule of ``Settings.stop_grace_s``; a value it refuses is reported by
    the run itself (exit 2) before any signal is relayed, so the default is right here."""
    try:
        value = float(env_value(STOP_GRACE_S_VARIABLE) or "nan")
    except ValueError:
        return GRACE_S
    return value if 0 < value < float("inf") else GRACE_S


def _say(message: str) -> None:
    """One line on stderr, prefixed ``evaltasks:``."""
    with contextlib.suppress(OSError, ValueError):
        print(f"evaltasks: {message}", file=sys.stderr, flush=True)


class _Parent:
    """The parent's side of :func:`supervise` for the child ``pid`` and the state folder ``state``."""

    def __init__(self, pid: int, state: Path) -> None:
        self.pid, self.state = pid, state
        self.signum: int | None = None
        self.signalled_at = 0.0
        self.status: int | None = None  # os.waitpid's status of the child, once it ended
        self.last_relayed: int | None = None  # the last signal relayed, and when (time.monotonic())
        self.last_relayed_at = 0.0

    def relay(self, signum: int, frame: Any) -> None:
        """Signal handler: pass ``signum`` on to the run's process group (the first one starts the grace period).

        The same signal again within :data:`REPEAT_WINDOW_S` of its last relay is one signal sent twice, not a
        second one (which ends the run at once): ``timeout(1)`` sends its signal to the command and then to its
        whole process group, this process included, and the two often arrive apart."""
        now = time.monotonic()
        if signum == self.last_relayed and now - self.last_relayed_at < REPEAT_WINDOW_S:
            return
        self.last_relayed, self.last_relayed_at = signum, now
        if self.signum is None:
            self.signum, self.signalled_at = signum, now
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signum)

    def suspend(self, signum: int, frame: Any) -> None:
        """SIGTSTP handler (Ctrl+Z reaches only this process, the terminal's foreground group): stop the run's
        group and this process; once continued (``fg``, ``bg``), continue the run's group too."""
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGSTOP)
        os.kill(os.getpid(), signal.SIGSTOP)
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGCONT)

    def wait(self) -> int:
        """Wait for the child (relaying signals), clean up, and return the exit code."""
        previous = {s: signal.signal(s, self.relay) for s in (signal.SIGINT, signal.SIGTERM)}
        if hasattr(signal, "SIGTSTP"):
            previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, self.suspend)
        grace = _grace_s()
        try:
            pidfd = os.pidfd_open(self.pid) if hasattr(os, "pidfd_open") else None
        except OSError:
            pidfd = None
        try:
            while self.status is None:
                self._reap()
                if self.status is not None:
                    break
                if self.signum is not None and time.monotonic() - self.signalled_at > grace:
                    return self._stuck(grace)
                left = grace - (time.monotonic() - self.signalled_at) if self.signum is not None else 1.0
                self._sleep(pidfd, max(min(left, 1.0), 0.0) + 0.01)
            return self._verdict()
        finally:
            if pidfd is not None:
                os.close(pidfd)
            self._clean_up()
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    @staticmethod
    def _sleep(pidfd: int | None, timeout: float) -> None:
        """Up to ``timeout`` seconds, less when the child ends (its pidfd becomes readable: Linux 5.3+) or, without a
        pidfd, at most :data:`POLL_S`. A signal's handler runs meanwhile."""
        if pidfd is None:
            time.sleep(min(timeout, POLL_S))
            return
        import select

        select.select([pidfd], [], [], timeout)

    def _reap(self) -> None:
        """Collect ended children: the run's own status, and orphans re-parented here (no zombies left)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid:
                self.status = status

    def _announced(self) -> int | None:
        try:
            return int((self.state / "status").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def _running_metrics(self, ended_only: bool = False) -> list[str]:
        """The metrics recorded as running when the run was stopped or ended (names, sorted, once each);
        ``ended_only``: only those recorded by another process that no longer runs (a task-runner worker that ended
        in the middle of a metric; Linux ``/proc``)."""

        def ended(pid: int) -> bool:  # the run's own process announced its end itself
            return pid != self.pid and not Path(f"/proc/{pid}").exists()

        return recorded_metrics(self.state, ended if ended_only else None)

    def _reports(self) -> tuple[Path | None, list[list[int]] | None]:
        try:
            noted = json.loads((self.state / "reports.json").read_text(encoding="utf-8"))
            return Path(noted["dir"]), noted["before"]
        except (OSError, ValueError, KeyError, TypeError):
            return None, None

    def _stuck(self, grace: float) -> int:
        """The run did not stop within ``grace`` seconds of the first signal: kill it all, say which metric."""
        metrics = self._running_metrics()
        self._kill_group(signal.SIGKILL)
        name = signal.Signals(self.signum or signal.SIGINT).name
        what = f"metric {', '.join(metrics)} did not stop" if metrics else "the run did not stop"
        announced = self._announced()
        if announced is not None:  # it had said "interrupted" and chosen its code; only its threads hung
            _say(f"{what} within {grace:g} s of {name}: the run's processes were killed")
            return announced
        directory, before = self._reports()
        after = report_stamps(directory) if directory is not None else None
        if after is not None and after != before:
            reports = f"the reports in {directory} are complete (written before the interrupt)"
        elif after is not None:
            reports = f"no reports written ({directory} keeps the previous ones)"
        else:  # none there before either (a folder holding some of them is no previous set)
            reports = "no reports written"
        _say(f"interrupted by {name}: {what} within {grace:g} s, so the run's processes were killed; {reports}")
        return EXIT_SIGTERM if self.signum == signal.SIGTERM else EXIT_SIGINT

    def _verdict(self) -> int:
        """The exit code once the child ended (``self.status``): its announced code when it ended through it
        (exit 0 only with this run's passing results.json), else 3 (or 130/143 for a relayed signal)."""
        status = self.status or 0
        announced = self._announced()
        metrics = self._running_metrics()
        during = f" while metric {', '.join(metrics)} was running" if metrics else ""
        if os.WIFSIGNALED(status):
            signum = os.WTERMSIG(status)
            if signum == self.signum and signum in (signal.SIGINT, signal.SIGTERM):
                _say(f"interrupted by {signal.Signals(signum).name}: no reports written")
                return 128 + signum
            name = signal.Signals(signum).name if signum in signal.valid_signals() else str(signum)
            _say(f"error: the run ended without writing its reports: its process was killed by {name}{during}")
            return EXIT_ABORTED
        code = os.WEXITSTATUS(status)
        if announced is None or announced != code:
            _say(
                f"error: the run ended without writing its reports: its process exited with code {code}{during}, "
                "before the run finished (a metric that calls os._exit()?); evaltasks exits 3"
            )
            return EXIT_ABORTED
        if code == EXIT_ABORTED and sys.platform.startswith("linux"):
            ended = self._running_metrics(ended_only=True)  # a worker process that ended inside a metric
            if ended:
                _say(
                    f"note: a process of the run ended while metric {', '.join(ended)} was running in it "
                    "(a metric that calls os._exit()?)"
                )
        if code == 0:
            problem = self._results_problem()
            if problem:
                _say(f"error: the run exited 0 but {problem}; evaltasks exits 3")
                return EXIT_ABORTED
        return code

    def _results_problem(self) -> str | None:
        """Why this run's results.json does not back an exit 0 (None when it does)."""
        directory, before = self._reports()
        if directory is None:
            return "it never named its reports directory"
        path = directory / "results.json"
        stamps = report_stamps(directory)
        if stamps is None:
            return f"{path} (or junit.xml, summary.md) is missing"
        if stamps == before:
            return f"{path} was not written by this run"
        try:
            passed = json.loads(path.read_text(encoding="utf-8")).get("passed")
        except (OSError, ValueError, AttributeError) as exc:
            return f"{path} cannot be read ({exc})"
        return None if passed is True else f"{path} says passed: {json.dumps(passed)}"

    def _kill_group(self, signum: int) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signum)

    def _clean_up(self) -> None:
        """Stop what the run left: its process group and the orphans re-parented here; SIGTERM, then SIGKILL."""
        for signum in (signal.SIGTERM, signal.SIGKILL):
            left = child_processes(os.getpid())
            group = _group_alive(self.pid)
            if not left and not group:
                break
            self._kill_group(signum)
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signum)
            deadline = time.monotonic() + (LEFTOVER_GRACE_S if signum == signal.SIGTERM else 5.0)
            while time.monotonic() < deadline:
                self._reap()
                if not child_processes(os.getpid()) and not _group_alive(self.pid):
                    break
                time.sleep(POLL_S)
        self._reap()


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a member (zombies count until reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
