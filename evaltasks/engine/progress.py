"""The run context: what one run reports to whoever shows it (progress, stages, a stop), and the run's process
records (the metrics running, the grace period of a stop).

The CLI (or any caller) opens a :class:`RunContext` with :func:`run_context`; the engine and the flow report
through :func:`advance`, :func:`stage` and :func:`stopping`, which reach the callbacks of the run they are part
of, and nothing without one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from evaltasks._env import RUN_STATE_VARIABLE

if TYPE_CHECKING:
    from evaltasks.targets.early import EarlyGeneration


@dataclasses.dataclass(frozen=True)
class RunContext:
    """What one run reports to, and what it knows of its host process.

    Attributes:
        on_progress: receives counts of completed units of the current stage (the scoring stage counts case ×
            metric results); None: nobody counts.
        on_stage: told when the run enters a stage: ``(description, total units or None)`` (see :func:`stage`).
        on_stop: told that the run stops on a signal: True for a termination request (SIGTERM), False for an
            interrupt (Ctrl+C).
        host_froze_objects: the program hosting the run called ``gc.freeze()`` itself (the runs ``evaltasks
            server`` forks), so :func:`evaltasks.engine.stream.gc_frozen` leaves its frozen objects alone.
        early_generation: the targets' calls the command started while Prefect started
            (:class:`~evaltasks.targets.early.EarlyGeneration`), for the generate stage's task runs in this
            process to take; None: the task runs call the targets themselves.

    The callbacks are called one at a time per context (a lock of its own), from the run's threads.

    Why a :class:`contextvars.ContextVar` holds it, and not module globals or a parameter of every function:
    two runs in one process (two threads of a host program, tests) each see their own callbacks, with no
    parameter threaded through the engine, the flow and every task. A context variable follows the run where
    Python carries contexts: the thread that opened the context, the flow run Prefect runs in that thread, and
    the task runs of Prefect's thread-pool task runner (it runs each task in a copy of the submitting thread's
    context, ``ThreadPoolTaskRunner.submit``). Threads started without a copied context, and task runs in other
    processes (the processes, Dask and Ray task runners), see the empty context: they report nothing, as they
    never did; what those processes need reaches them through the environment (``$EVALTASKS_RUN_STATE``,
    :func:`metric_running`).
    """

    on_progress: Callable[[int], None] | None = None
    on_stage: Callable[[str, int | None], None] | None = None
    on_stop: Callable[[bool], None] | None = None
    host_froze_objects: bool = False
    early_generation: EarlyGeneration | None = None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, compare=False, repr=False)


_NO_RUN = RunContext()
_current: ContextVar[RunContext] = ContextVar("evaltasks_run_context", default=_NO_RUN)


@contextlib.contextmanager
def run_context(context: RunContext) -> Iterator[RunContext]:
    """Run the block (and what it starts in this thread, and Prefect's thread task runs) in ``context``; the
    context before is back after the block."""
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


def current_run_context() -> RunContext:
    """The :class:`RunContext` of the caller (an empty one outside any :func:`run_context`)."""
    return _current.get()


def _replace(**changes: Any) -> None:
    """Replace fields of the caller's context for the rest of it (the setters below)."""
    current = _current.get()
    _current.set(dataclasses.replace(current, **changes, lock=current.lock))


def set_progress_callback(callback: Callable[[int], None] | None) -> None:
    """Set (or remove, with None) ``on_progress`` of the caller's run context, for the rest of that context (the
    caller's thread, and what it starts with a copy of its context). :func:`run_context` scopes it to a block."""
    _replace(on_progress=callback)


def set_stop_callback(callback: Callable[[bool], None] | None) -> None:
    """Set (or remove, with None) ``on_stop`` of the caller's run context (as :func:`set_progress_callback`)."""
    _replace(on_stop=callback)


def set_stage_callback(callback: Callable[[str, int | None], None] | None) -> None:
    """Set (or remove, with None) ``on_stage`` of the caller's run context (as :func:`set_progress_callback`)."""
    _replace(on_stage=callback)


def advance(count: int) -> None:
    """Report ``count`` completed units of the current stage (:func:`stage`; the scoring stage counts case ×
    metric results) to the caller's run context (no-op without an ``on_progress``)."""
    context = _current.get()
    if context.on_progress is not None:
        with context.lock:
            context.on_progress(count)


def stopping(terminated: bool) -> None:
    """Report that the run stops on a signal, before its work is cancelled (no-op without an ``on_stop``), so the
    caller can silence what the cancelled work reports."""
    callback = _current.get().on_stop
    if callback is not None:
        callback(terminated)


def stage(description: str, total: int | None = None) -> None:
    """Report that the run entered a stage: ``description`` in words a user reads on the terminal (``loading the
    model all-MiniLM-L6-v2``, ``embedding 1,634 texts``, ``scoring 817 cases × 2 metrics``), ``total`` its units
    of work (then :func:`advance` counts them; None: no count). A stage with ``total`` None is left for the next
    stage. No-op without an ``on_stage``; called from the flow's and its task runs' threads (this process only:
    task runs in other processes report nothing)."""
    context = _current.get()
    if context.on_stage is not None:
        with context.lock:
            context.on_stage(description, total)


def has_stage_callback() -> bool:
    """Whether the caller's run context has an ``on_stage`` (something shows the stages: work to name one can be
    skipped)."""
    return _current.get().on_stage is not None


PRINTED_BY_CLI = {"evaltasks_printed_by_cli": True}
"""``extra`` of a flow log record whose text ``evaltasks run`` prints itself, as ``evaltasks: warning: …``
(the suite's warnings, the regression summary): the CLI keeps such records off its terminal
(:func:`printed_by_cli`) while they still reach the flow run's logs on the Prefect server. A deployment's worker,
which prints no such line of its own, shows them as usual."""


def printed_by_cli(record: object) -> bool:
    """True for a log record marked with :data:`PRINTED_BY_CLI`."""
    return bool(getattr(record, "evaltasks_printed_by_cli", False))


STOP_GRACE_S = 10.0  # after the first SIGINT/SIGTERM, how long a run may take to stop before it is killed
RUN_STATE_ENV = RUN_STATE_VARIABLE  # the folder the supervisor of `evaltasks run` reads (evaltasks.supervisor)
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
    directory = _run_state_dir()
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
    (docs/cli.md#interrupted-runs): ``$EVALTASKS_STOP_GRACE_S`` (:attr:`evaltasks.settings.Settings.stop_grace_s`,
    default :data:`STOP_GRACE_S`). Used by runs of ``evaltasks server`` (:mod:`evaltasks.server.daemon`); the parent of
    ``evaltasks run`` (:mod:`evaltasks.supervisor`) reads the same variable with the standard library. Raises
    :class:`evaltasks.settings.SettingsError` for a value that is not a positive number."""
    from evaltasks.settings import get_settings  # here: this module is imported by the standard-library supervisor

    return get_settings(only=["stop_grace_s"]).stop_grace_s


def stop_grace_s_or_default() -> float:
    """:func:`stop_grace_s`, or :data:`STOP_GRACE_S` where the setting is refused (the run itself reports that,
    exit 2; its stop still needs a grace period)."""
    from evaltasks.settings import SettingsError

    try:
        return stop_grace_s()
    except SettingsError:
        return STOP_GRACE_S


def _run_state_dir() -> str | None:
    """``$EVALTASKS_RUN_STATE`` (:attr:`evaltasks.settings.Settings.run_state`), read at each call: the supervisor
    and the server's runner set it once the run's process is forked."""
    from evaltasks.settings import get_settings

    directory = get_settings(only=["run_state"]).run_state
    return None if directory is None else str(directory)


def recorded_metrics(
    directory: str | os.PathLike[str] | None, recorded_by: Callable[[int], bool] | None = None
) -> list[str]:
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


def process_state(pid: int | str) -> str | None:
    """Process ``pid``'s state letter from Linux ``/proc/PID/stat`` (``R``, ``S``, ``Z`` for a zombie...); None
    when it does not exist (or elsewhere than Linux)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return handle.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def child_processes(pid: int) -> list[int]:
    """The live (not zombie) children of process ``pid`` (Linux ``/proc/PID/task/*/children``; [] elsewhere)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.scandir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                with open(os.path.join(task.path, "children"), encoding="ascii") as handle:
                    children = handle.read().split()
                found.extend(int(child) for child in children if process_state(child) not in (None, "Z"))
    return found
