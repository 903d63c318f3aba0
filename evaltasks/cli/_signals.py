"""What ``evaltasks run`` does on SIGINT (Ctrl+C) or SIGTERM: :func:`run_interruptible` runs the work with an
:class:`Interrupt` installed, which stops it cleanly and says in one line what the reports directory holds
(docs/cli.md#interrupted-runs)."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evaltasks.cli._exits import exit_code
from evaltasks.supervisor import announce_exit, note_reports


class Interrupt:
    """The state of one run's interrupt: the signal received (None until one is), what the reports directory
    held before the run, whether the one line was printed.

    ``output_dir``: the run's reports directory when known (``--output-dir``; else :meth:`use_output_dir` once the
    suite is read); ``index_dir`` and ``cache``: where finished work is kept (the line names them); ``supervised``:
    the run's process has a parent that ends it at the grace period (the command's own process, or a run of
    ``evaltasks server``), so its line may wait for running metrics (:meth:`await_running_metrics`).
    """

    def __init__(self, output_dir: str | None, index_dir: str | None, cache: bool, supervised: bool = False) -> None:
        self.index_dir, self.cache, self.supervised = index_dir, cache, supervised
        self.output_dir: Path | None = None  # known once the suite is read (default: one directory per suite)
        self.reports_before: tuple[tuple[int, int], ...] | None = None
        self.reported = False
        self.signum: int | None = None
        self.signalled_at = 0.0  # time.monotonic() of the first signal
        self.delivered = False  # the handler has run (a second signal ends the process)
        self.previous_unraisablehook = sys.unraisablehook
        if output_dir is not None:
            self.use_output_dir(Path(output_dir))

    def use_output_dir(self, path: Path) -> None:
        """The run's reports directory: what it holds now is "the previous reports" of :meth:`message` (and, in a
        supervised run, of its parent: :func:`evaltasks.supervisor.note_reports`)."""
        self.output_dir, self.reports_before = path, report_stamps(path)
        note_reports(path)

    def handler(self, signum: int, frame: Any) -> None:
        """Signal handler: the first signal stops the run (KeyboardInterrupt in the main thread); a second one,
        while it stops, ends the process at once (the temporary server dies with it), with the first one's exit
        code announced to the run's parent (:func:`evaltasks.supervisor.announce_exit`), which otherwise would
        take the exit for a metric's ``os._exit()`` and exit 3."""
        if self.delivered and self.signum is not None:
            self.report()
            code = exit_code(self.signum)
            announce_exit(code)
            os._exit(code)
        self.delivered = True
        if self.signum is None:  # else Prefect's handler saw this signal first and passed it on
            self.begin(signum)
        raise KeyboardInterrupt

    def unraisable(self, unraisable: Any) -> None:
        """``sys.unraisablehook`` while the run goes on: deliver again a signal whose handler ran inside a
        finalizer.

        Python runs signal handlers between bytecodes, also inside a finalizer (an object's ``__del__``, a
        weakref callback, run by the garbage collector at any allocation), and drops what a finalizer raises
        (the "Exception ignored in" message). A KeyboardInterrupt from :meth:`handler`, or Prefect's
        TerminationSignal (its SIGTERM handler during a flow run), raised there would be lost and the run would
        go on to the end. The signal is sent again, once per loss, from a thread once this hook has returned
        (an ``os.kill`` here would run the handler inside the hook, where a raise is lost too): its handler runs
        at the main thread's next bytecode boundary, outside that finalizer, or is lost and sent again until it
        lands outside one. Anything else goes to the hook that was installed before.
        """
        kind = unraisable.exc_type
        if kind is None or not (issubclass(kind, KeyboardInterrupt) or kind.__name__ == "TerminationSignal"):
            self.previous_unraisablehook(unraisable)
            return
        signum = getattr(unraisable.exc_value, "signal", None) or self.signum or signal.SIGINT
        self.delivered = False  # the same signal again, not a second one (which would end the process)
        returned = threading.Event()
        threading.Thread(
            target=self._redeliver, args=(signum, returned), name="evaltasks-redeliver-signal", daemon=True
        ).start()
        returned.set()  # the last bytecodes of this hook (no handler runs between them and the return)

    @staticmethod
    def _redeliver(signum: int, hook_returned: threading.Event) -> None:
        """Thread body of :meth:`unraisable`: once the hook has returned, send ``signum`` to this process."""
        hook_returned.wait()
        time.sleep(0.001)
        os.kill(os.getpid(), signum)

    def begin(self, signum: int) -> None:
        """Record ``signum`` (log records stop reaching the terminal: :meth:`console_filter`), stop the encodes."""
        self.signum, self.signalled_at = signum, time.monotonic()
        local = sys.modules.get("evaltasks.embeddings.local")
        if local is not None:
            local.cancel_queued_encodes()

    def stopping(self, terminated: bool) -> None:
        """The flow stops on a signal (Prefect's SIGTERM handler ran before this one's): begin the interrupt
        now, so the failures of the tasks it cancels never reach the terminal."""
        if self.signum is None:
            self.begin(signal.SIGTERM if terminated else signal.SIGINT)

    def console_filter(self, record: logging.LogRecord) -> bool:
        """Logging filter on the terminal's handlers: nothing passes once the run is interrupted.

        During a flow run Prefect's own SIGTERM handler comes first (it marks the run crashed, then delivers
        the signal to this one); its first record about it starts the interrupt here.
        """
        if self.signum is None and "aborted by a termination signal" in str(record.msg):
            self.begin(signal.SIGTERM)
        return self.signum is None

    def watch_logs(self, remove: bool = False) -> None:
        """Install :meth:`console_filter` on the console handlers Prefect configured (``remove``: take it off)."""
        for logger in (logging.getLogger(), logging.getLogger("prefect")):
            for handler in logger.handlers:
                handler.removeFilter(self.console_filter)
                if not remove:
                    handler.addFilter(self.console_filter)

    def await_running_metrics(self) -> None:
        """Before the one line: wait while a metric recorded as running (``metric_running``) still runs in a live
        process of the run, up to the grace period after the first signal plus 1 s.

        The run's main thread may stop before a metric busy in its own code in another thread does. Reporting then
        would leave the process to hang at exit on that thread and make the parent of a supervised run (or the
        ``evaltasks server`` child) say a second time why it killed it; waiting leaves it to that parent, which
        ends the run at the grace period with the one line that names the metric (docs/cli.md#interrupted-runs).
        Nothing waits in a run without such a parent (in-process callers of ``evaltasks.cli.main``, even where
        ``$EVALTASKS_RUN_STATE`` names an outer run's folder) or without that folder.
        """
        from evaltasks.engine.progress import recorded_metrics, stop_grace_s_or_default
        from evaltasks.settings import get_settings

        directory = get_settings(only=["run_state"]).run_state
        if directory is None or self.signum is None or not self.supervised:
            return
        deadline = self.signalled_at + stop_grace_s_or_default() + 1.0  # the parent's comes first: it names the metric
        try:
            while recorded_metrics(directory, _process_lives) and time.monotonic() < deadline:
                time.sleep(0.05)
        except KeyboardInterrupt:  # the same signal delivered again (see :meth:`unraisable`): stop waiting
            pass

    def report(self) -> None:
        """Print :meth:`message` to stderr, once."""
        if not self.reported:
            self.reported = True
            print(self.message(), file=sys.stderr, flush=True)

    def message(self) -> str:
        """The one line printed: which signal, what the reports directory holds, where finished work is kept."""
        from evaltasks.index import default_index_dir  # startup: the index package loads numpy

        out = self.output_dir
        after = report_stamps(out) if out is not None else None
        if after is not None and after != self.reports_before:
            reports = f"the reports in {out} are complete (written before the interrupt)"
        elif after is not None:
            reports = f"no reports written ({out} keeps the previous ones)"
        else:
            reports = "no reports written"
        index = self.index_dir or str(default_index_dir())
        kept = [f"references embedded so far are kept in {index}"] if Path(index).is_dir() else []
        kept += ["finished tasks in Prefect's task cache (a re-run reuses them)"] if self.cache else []
        return f"evaltasks: interrupted by {signal.Signals(self.signum or 2).name}: " + "; ".join([reports, *kept])


def _process_lives(pid: int) -> bool:
    """Whether process ``pid`` still runs: a task-runner worker ended by the signal leaves its records behind
    (Linux: ``/proc/PID/stat`` exists and its state is not Z, zombie; elsewhere ``os.kill(pid, 0)`` succeeds)."""
    if sys.platform.startswith("linux"):
        from evaltasks.engine.progress import process_state

        return process_state(pid) not in (None, "Z")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def report_stamps(directory: Path) -> tuple[tuple[int, int], ...] | None:
    """(inode, mtime in ns) of results.json, junit.xml and summary.md in ``directory``; None unless all exist."""
    try:
        return tuple(
            (stat.st_ino, stat.st_mtime_ns)
            for stat in (os.stat(directory / name) for name in ("results.json", "junit.xml", "summary.md"))
        )
    except OSError:
        return None


def run_interruptible(work: Callable[[Interrupt], int], interrupt: Interrupt) -> int:
    """``work(interrupt)``, stopped cleanly by SIGINT (Ctrl+C; exit 130) or SIGTERM (exit 143).

    GitHub Actions cancels a job with SIGINT, then SIGTERM 7.5 s later, then SIGKILL. The first signal stops
    the run: queued and running encodes stop (within one chunk, see ``evaltasks.embeddings.local``), Prefect
    marks the flow run crashed on its temporary server (which the terminal's Ctrl+C no longer reaches: see
    ``evaltasks.server.temporary``), log records stop reaching the terminal, and one line says what the reports
    directory holds: reports are replaced as a set or not at all, so it keeps the previous set unless the new
    one was complete before the signal. The temporary server stops when the process exits; a second signal
    ends the process at once. A run that has not ended 10 s after the first signal is ended by its parent process
    (:mod:`evaltasks.supervisor`, which relays the signals here). Returns the exit code.
    """
    previous = {signum: signal.signal(signum, interrupt.handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    sys.unraisablehook = interrupt.unraisable
    try:
        return work(interrupt)
    except BaseException as exc:
        if interrupt.signum is None:  # Prefect's SIGTERM handler raised its own exception, or a stray Ctrl+C
            if isinstance(exc, KeyboardInterrupt):
                interrupt.begin(signal.SIGINT)
            elif type(exc).__name__ == "TerminationSignal":
                interrupt.begin(signal.SIGTERM)
            else:
                raise
        interrupt.await_running_metrics()
        interrupt.report()
        return exit_code(interrupt.signum or signal.SIGINT)  # our handler stays: a second signal exits at once
    finally:
        if interrupt.signum is None:  # not interrupted: leave the process as it was (in-process callers)
            interrupt.watch_logs(remove=True)
            sys.unraisablehook = interrupt.previous_unraisablehook
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
