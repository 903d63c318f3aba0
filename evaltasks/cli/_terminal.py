"""What the command shows on the terminal while it works: the stage-aware progress display (:class:`Stages`),
where log records go during a run (:func:`terminal_logging`) and which ones are kept off it (tracebacks,
input errors, the judges' price warning). docs/cli.md#cli."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from evaltasks.engine import progress as _progress
from evaltasks.errors import InputError

T = TypeVar("T")


class Stages:
    """The terminal's stage-aware progress display (rich, on stderr): the stage the run is in, in words, with
    its own count, bar and elapsed time (docs/cli.md#cli).

    The CLI reports the stages it knows (``starting Prefect``; its own model load, :meth:`side`, a line of its
    own while it overlaps the server's start), the flow and its task runs report theirs through
    :mod:`evaltasks.engine.progress` (``loading the model NAME``, ``embedding N texts``, ``scoring N cases × M metrics``,
    with counts). A count reported while the current stage has none (a flow that names no scoring stage) starts
    the scoring stage the CLI knows from the plan (``scoring``: its words; ``work_items``: case × metric
    results). Thread-safe (rich's Progress is); a disabled Progress (``--quiet``) shows nothing.
    """

    def __init__(self, progress: Any, scoring: str, work_items: int) -> None:
        self.progress, self.scoring, self.work_items = progress, scoring, work_items
        self.task: Any = None
        self.sides: dict[str, Any] = {}

    def stage(self, description: str, total: int | None = None) -> None:
        """Show ``description`` as the current stage (its own line, count from 0 of ``total``; None: no count)."""
        if self.task is not None:
            self.progress.remove_task(self.task)
        side = self.sides.pop(description, None)
        if side is not None:  # the flow now waits for what the CLI's own line showed: one line for it
            self.progress.remove_task(side)
        self.task = self.progress.add_task(description, total=total)

    def advance(self, count: int) -> None:
        """Count ``count`` units of the current stage (the scoring stage when the current one has no count)."""
        if self.task is None or next(t for t in self.progress.tasks if t.id == self.task).total is None:
            self.stage(self.scoring, self.work_items)
        self.progress.advance(self.task, count)

    @contextlib.contextmanager
    def side(self, description: str) -> Iterator[None]:
        """A context manager: ``description`` on a line of its own (no count) while its block runs, beside the
        current stage (the CLI's model load while Prefect starts)."""
        self.sides[description] = self.progress.add_task(description, total=None)
        try:
            yield
        finally:
            task = self.sides.pop(description, None)
            if task is not None:
                self.progress.remove_task(task)


@contextlib.contextmanager
def reporting_to(
    stages: Stages, stop: Callable[[bool], None] | None = None, early_generation: Any = None
) -> Iterator[None]:
    """While the block runs, the stages and counts reported through :mod:`evaltasks.engine.progress` go to
    ``stages`` (and a flow that stops on a signal calls ``stop``): a :class:`~evaltasks.engine.progress.RunContext`
    for the block, keeping what the caller's context holds besides (a served run's ``host_froze_objects``), with
    ``early_generation`` (the target calls the command started, for the flow's task runs)."""
    context = dataclasses.replace(
        _progress.current_run_context(),
        on_progress=stages.advance,
        on_stage=stages.stage,
        on_stop=stop,
        early_generation=early_generation,
        lock=threading.Lock(),
    )
    with _progress.run_context(context):
        yield


def with_stage_progress(work: Callable[[], T]) -> T:
    """``work()``'s result, with the stages it reports through :mod:`evaltasks.engine.progress` (``embedding N
    texts (MODEL)``, ``scoring N cases × M metrics`` with its count) shown on a terminal's stderr while it runs;
    nothing on a pipe. Imports no Prefect (``evaltasks calibrate``)."""
    from rich.console import Console  # startup: rich only once a display is shown

    display = stage_progress(Console(stderr=True), quiet=False)
    stages = Stages(display, "scoring", 0)
    with display, reporting_to(stages):
        return work()


def stage_progress(console: Any, quiet: bool) -> Any:
    """The rich Progress of :class:`Stages` on ``console``: the stage in words, a bar (pulsing while the stage
    has no count), ``done/total`` (blank without a count), the stage's elapsed time; gone when the run ends.
    ``quiet``, or ``console`` not a terminal (a pipe, a CI log): a disabled Progress (shows nothing; rich's
    transient display would leave a lone blank line at the top of a piped log)."""
    from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn  # startup: rich
    from rich.text import Text

    class CountColumn(ProgressColumn):
        """``done/total`` with thousands separators; blank for a stage without a count."""

        def render(self, task: Any) -> Text:
            if task.total is None:
                return Text("")
            return Text(f"{int(task.completed):,}/{int(task.total):,}", style="progress.download")

    return Progress(
        TextColumn("{task.description}", markup=False, style="bold"),
        BarColumn(),
        CountColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=quiet or not console.is_terminal,
        transient=True,
    )


def _through_console(console: Any, file: Any) -> Any:
    """rich's file proxy of ``file`` on ``console``, which a rich Console writing to it cannot see through (rich
    unwraps its ``rich_proxied_file`` and would write to the terminal directly)."""
    from rich.file_proxy import FileProxy  # startup: rich only once a display is shown

    class ThroughConsole(FileProxy):
        @property
        def rich_proxied_file(self) -> Any:
            return self

    return ThroughConsole(console, file)


@contextlib.contextmanager
def terminal_logging(console: Any, live: bool) -> Iterator[None]:
    """A context manager for the flow's run: where log records go, restored when it ends (docs/cli.md#cli).

    - The terminal shows Prefect's level (``PREFECT_LOGGING_LEVEL``: WARNING unless the user set it), while
      the flow run's and task runs' loggers pass INFO (DEBUG when the terminal shows DEBUG) to Prefect's API
      handler on them: the run's own lines ("Pass rate … PASSED") reach the flow run's logs on the server
      whatever the terminal shows. Done on the logger and handler objects of this process, after Prefect
      configured them (setting ``PREFECT_LOGGING_*`` variables instead would reach the environment of every
      later run and child process).
    - ``live`` (the progress display is on the terminal): the console handlers print through ``console`` (rich's
      file proxy, as the display's own redirect of ``sys.stderr`` does), so a log line is printed above the
      progress display on a line of its own instead of into it.
    """
    undo: list[Any] = []
    terminal = logging.getLogger("prefect").getEffectiveLevel()
    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logger = logging.getLogger(name)
        undo.append((logger.setLevel, logger.level))
        logger.setLevel(min(terminal, logging.INFO))
    handlers = {id(h): h for lg in (logging.getLogger(), logging.getLogger("prefect")) for h in lg.handlers}
    for handler in handlers.values():
        own = getattr(handler, "console", None)  # Prefect's console handler prints through a rich Console
        if own is None and not (
            type(handler) is logging.StreamHandler and getattr(handler, "stream", None) in (sys.stderr, sys.__stderr__)
        ):
            continue  # not the terminal's (the API handler, a file, pytest's capture)
        if handler.level < terminal:
            undo.append((handler.setLevel, handler.level))
            handler.setLevel(terminal)
        if live and own is not None:
            undo.append((setattr, own, "file", own.file))
            own.file = _through_console(console, own.file)
        elif live and isinstance(handler, logging.StreamHandler):
            undo.append((handler.setStream, handler.stream))
            handler.setStream(_through_console(console, handler.stream))
    try:
        yield
    finally:
        for action, *values in reversed(undo):
            action(*values)


def without_traceback(record: logging.LogRecord) -> bool:
    """Logging filter: drop an input error's record; strip the traceback from any other record.

    For invalid input the CLI prints the message itself and exits 2; for an abort it prints a short message
    and writes the full traceback to a file (exit 3). Either way the terminal shows no traceback.
    """
    if record.exc_info and isinstance(record.exc_info[1], InputError):
        return False
    if _progress.printed_by_cli(record):  # printed as `evaltasks: warning: ...` instead
        return False
    if (
        isinstance(record.msg, str)
        and "encountered an exception " in record.msg
        and any(f"encountered an exception {name}:" in record.msg for name in _input_error_names())
    ):
        return False  # Prefect's "Task run ... Finished in state Failed(...)" line for an input error (a rejected key)
    if record.exc_info or record.exc_text:
        record.exc_info, record.exc_text = None, None
        if isinstance(record.msg, str) and "Traceback (most recent call last)" in record.msg:
            record.msg = (
                record.msg.split("Traceback (most recent call last)")[0].rstrip() or "error (traceback omitted)"
            )
    return True


def _input_error_names() -> set[str]:
    """The class names of :class:`~evaltasks.errors.InputError` and its subclasses (as Prefect's state messages
    name an exception)."""
    names, todo = set(), [InputError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names


def without_exit_flush_notice(record: logging.LogRecord) -> bool:
    """Logging filter: drop the "Still processing items: N items remaining..." record of Prefect's event and log
    workers (``prefect._internal.concurrency.services``), which they log as they flush at the process's exit once
    the command has printed its last line (a run that stopped early, a busy machine). They flush all the same."""
    return not (
        record.name.endswith("Worker")
        and isinstance(record.msg, str)
        and record.msg.startswith("Still processing items")
    )


def hide_tracebacks() -> None:
    """Install :func:`without_traceback` and :func:`without_exit_flush_notice` on the console handlers Prefect
    configured."""
    for logger in (logging.getLogger(), logging.getLogger("prefect")):
        for handler in logger.handlers:
            for terminal_filter in (without_traceback, without_exit_flush_notice):
                if terminal_filter not in handler.filters:
                    handler.addFilter(terminal_filter)


def _price_warning_filter(record: logging.LogRecord) -> bool:
    """Logging filter: False for the judges' "no price for judge model" record (:func:`leave_price_warnings_to_the_run`)."""
    return not (isinstance(record.msg, str) and record.msg.startswith("no price for judge model"))


def leave_price_warnings_to_the_run() -> None:
    """Keep the judges' log record about an unpriced judge model off the terminal: ``evaltasks run`` reports it
    itself, as an ``evaltasks: warning:`` line from the run's warnings (``judge_price_warnings``) or as the
    ``--max-cost`` error, and without a handler it printed as a bare, unprefixed line before anything else."""
    judges = logging.getLogger("evaltasks.judges")
    if _price_warning_filter not in judges.filters:
        judges.addFilter(_price_warning_filter)


def warn(message: str, kind: str = "warning") -> None:
    """Print ``evaltasks: warning: MESSAGE`` (or another ``kind``, e.g. ``note``) on stderr."""
    print(f"evaltasks: {kind}: {message}", file=sys.stderr)
