"""A process-wide progress hook: the CLI installs a callback, the engine and tasks report completed work."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Callable, Iterator

_callback: Callable[[int], None] | None = None
_lock = threading.Lock()


def set_progress_callback(callback: Callable[[int], None] | None) -> None:
    """Install (or remove, with None) the callback receiving counts of completed case × metric results."""
    global _callback
    _callback = callback


def advance(count: int) -> None:
    """Report ``count`` completed units of the current stage (:func:`stage`; the scoring stage counts case ×
    metric results) (no-op without a callback)."""
    callback = _callback
    if callback is not None:
        with _lock:
            callback(count)


_stop_callback: Callable[[bool], None] | None = None


def set_stop_callback(callback: Callable[[bool], None] | None) -> None:
    """Install (or remove, with None) the callback told that the run is stopping on a signal: it receives True
    for a termination request (SIGTERM), False for an interrupt (Ctrl+C)."""
    global _stop_callback
    _stop_callback = callback


def stopping(terminated: bool) -> None:
    """Report that the run stops on a signal, before its work is cancelled (no-op without a callback), so the
    caller can silence what the cancelled work reports."""
    callback = _stop_callback
    if callback is not None:
        callback(terminated)


_stage_callback: Callable[[str, int | None], None] | None = None


def set_stage_callback(callback: Callable[[str, int | None], None] | None) -> None:
    """Install (or remove, with None) the callback told when the run enters a stage (see :func:`stage`)."""
    global _stage_callback
    _stage_callback = callback


def stage(description: str, total: int | None = None) -> None:
    """Report that the run entered a stage: ``description`` in words a user reads on the terminal (``loading the
    model all-MiniLM-L6-v2``, ``embedding 1,634 texts``, ``scoring 817 cases × 2 metrics``), ``total`` its units
    of work (then :func:`advance` counts them; None: no count). A stage with ``total`` None is left for the next
    stage. No-op without a callback; called from the flow's and its task runs' threads (this process only: task
    runs in other processes report nothing)."""
    callback = _stage_callback
    if callback is not None:
        with _lock:
            callback(description, total)


def has_stage_callback() -> bool:
    """Whether a stage callback is installed (something shows the stages: work to name one can be skipped)."""
    return _stage_callback is not None


PRINTED_BY_CLI = {"evaltasks_printed_by_cli": True}
"""``extra`` of a flow log record whose text ``evaltasks run`` prints itself, as ``evaltasks: warning: …``
(the suite's warnings, the regression summary): the CLI keeps such records off its terminal
(:func:`printed_by_cli`) while they still reach the flow run's logs on the Prefect server. A deployment's worker,
which prints no such line of its own, shows them as usual."""


def printed_by_cli(record: object) -> bool:
    """True for a log record marked with :data:`PRINTED_BY_CLI`."""
    return bool(getattr(record, "evaltasks_printed_by_cli", False))


STOP_GRACE_S = 10.0  # after the first SIGINT/SIGTERM, how long a run may take to stop before it is killed
RUN_STATE_ENV = "EVALTASKS_RUN_STATE"  # the folder the supervisor of `evaltasks run` reads (evaltasks.supervisor)
_running_ids = itertools.count()


@contextlib.contextmanager
def metric_running(name: str) -> Iterator[None]:
    """While the block runs, ``name`` (a metric's name) is recorded as running in this process and thread, so
    that the parent process of ``evaltasks run`` (:mod:`evaltasks.supervisor`) can name the metric that did not
    stop after a signal, or that ended the process (docs/cli.md#interrupted-runs).

    The record is one small file in ``$EVALTASKS_RUN_STATE/metrics/`` (the environment reaches task-runner
    worker processes too), removed when the block ends; nothing happens without the variable (the Python API,
    tests) or when the file cannot be written.
    """
    directory = os.environ.get(RUN_STATE_ENV)
    path = None
    if directory:
        path = os.path.join(directory, "metrics", f"{os.getpid()}-{threading.get_ident()}-{next(_running_ids)}")
        try:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(name)
        except OSError:
            path = None
    try:
        yield
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)


def stop_grace_s() -> float:
    """Seconds a run may take to stop after its first SIGINT/SIGTERM before every process of it is killed
    (docs/cli.md#interrupted-runs): :data:`STOP_GRACE_S`, or ``$EVALTASKS_STOP_GRACE_S`` when it is a positive
    number. Used by the parent of ``evaltasks run`` (:mod:`evaltasks.supervisor`) and by runs of ``evaltasks
    server`` (:mod:`evaltasks.server.daemon`)."""
    try:
        value = float(os.environ.get("EVALTASKS_STOP_GRACE_S", ""))
    except ValueError:
        return STOP_GRACE_S
    return value if value > 0 else STOP_GRACE_S


def recorded_metrics(directory: str | os.PathLike[str] | None,
                     recorded_by: Callable[[int], bool] | None = None) -> list[str]:
    """The metric names :func:`metric_running` recorded under ``directory`` (``$EVALTASKS_RUN_STATE``): sorted,
    once each; [] without a directory or records. ``recorded_by``: keep only the records of the process ids it
    accepts."""
    names = set()
    if directory:
        with contextlib.suppress(OSError):
            for entry in os.scandir(os.path.join(directory, "metrics")):
                with contextlib.suppress(OSError, ValueError):
                    if recorded_by is not None and not recorded_by(int(entry.name.split("-")[0])):
                        continue
                    with open(entry.path, encoding="utf-8") as handle:
                        names.add(handle.read().strip())
    return sorted(name for name in names if name)


def child_processes(pid: int) -> list[int]:
    """The live (not zombie) children of process ``pid`` (Linux ``/proc/PID/task/*/children``; [] elsewhere)."""
    found = []
    with contextlib.suppress(OSError):
        for task in os.scandir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                with open(os.path.join(task.path, "children"), encoding="ascii") as handle:
                    children = handle.read().split()
                for child in children:
                    with contextlib.suppress(OSError, IndexError, ValueError):
                        with open(f"/proc/{child}/stat", encoding="utf-8", errors="replace") as handle:
                            state = handle.read().rpartition(")")[2].split()[0]
                        if state != "Z":
                            found.append(int(child))
    return found
