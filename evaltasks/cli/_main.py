"""The ``evaltasks`` command's entry point: the parser built from the command modules, and :func:`main`, which
hands the parsed command line to its module (``COMMANDS``) with the state of the invocation
(:class:`~evaltasks.cli._command.Invocation`)."""

from __future__ import annotations

import argparse
import atexit
import gc
import logging
import os
import sys
import time

from evaltasks import supervisor
from evaltasks._env import drop_blank_env
from evaltasks._version import DOCS_URL, __version__
from evaltasks.cli import calibrate, history, index, init, run, schema, serve, server
from evaltasks.cli._checks import check_settings, reread_prefect_settings
from evaltasks.cli._command import Invocation
from evaltasks.cli._exits import EXIT_INVALID, error

COMMANDS = {
    "run": run,
    "server": server,
    "serve": serve,
    "schema": schema,
    "calibrate": calibrate,
    "history": history,
    "index": index,
    "init": init,
}
_NEED_A_DIRECTORY = ("run", "serve", "server", "index", "calibrate", "init")  # they read or write relative paths
_DOCS_EPILOG = (
    f"docs: {DOCS_URL}"
    if DOCS_URL
    else "docs: the docs/ folder of the evaltasks repository, https://github.com/evaltasks/evaltasks/tree/main/docs"
)


def parser() -> argparse.ArgumentParser:
    """The ``evaltasks`` parser: one subcommand per module of ``COMMANDS`` (its ``add_parser``)."""
    parser = argparse.ArgumentParser(
        prog="evaltasks", description="Evaluate LLM outputs with Prefect.", epilog=_DOCS_EPILOG
    )
    parser.add_argument("--version", action="version", version=f"evaltasks {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for module in COMMANDS.values():
        module.add_parser(sub)
    return parser


class _ExitAtOnce:
    """Exit handler of the ``evaltasks`` command: end the process now with the code :func:`main` returned.

    Registered before anything else, it runs after every other exit handler (Prefect's server stop, its event
    and log flush, logging's shutdown, which it calls again here for handlers registered earlier). What it skips
    is the interpreter's teardown of every loaded module (torch, Prefect, transformers: about two seconds of a
    quickstart run, measured in docs/performance.md), which writes nothing. Does nothing when main() did not
    return (an uncaught exception: the interpreter reports it as usual).
    """

    status: int | None = None  # the command's exit code, once main() has returned it

    def __call__(self) -> None:
        if self.status is None:
            return
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:  # None: the descriptor was closed when the interpreter started
                    stream.flush()
            except (OSError, ValueError):  # closed, or a closed pipe (`evaltasks schema | head`)
                pass
        os._exit(self.status)


def main(argv: list[str] | None = None, *, served_by_runner: bool = False) -> int:
    """Entry point of the ``evaltasks`` command; returns the exit code.

    Called without ``argv`` (the ``evaltasks`` command, ``python -m evaltasks``) the command owns its process:
    once its exit handlers have run, the process ends without tearing down its modules (:class:`_ExitAtOnce`).
    Called with ``argv`` (in-process callers, tests) it leaves the process as it was: its environment too (the
    command's Prefect defaults, ``PREFECT_LOGGING_LEVEL=WARNING``..., would otherwise reach every process the
    caller starts afterwards), Prefect then reading its settings from it again (:func:`_restore_environment`).
    ``served_by_runner``: a run that ``evaltasks server`` forked (:mod:`evaltasks.cli.server`), whose process
    ends with it.
    """
    environ_before = dict(os.environ) if argv is not None and not served_by_runner else None
    exit_at_once = _ExitAtOnce()
    if argv is None:
        atexit.register(exit_at_once)
    invocation = Invocation(
        started=time.time(), owns_process=argv is None, served_by_runner=served_by_runner, entry=main
    )
    # Prefect reads every PREFECT_* variable itself and refuses a blank one (an unset `${{ vars.X }}` in CI
    # expands to ""): blank counts as unset, as everywhere in evaltasks.
    drop_blank_env("PREFECT_")
    # Python's default thresholds (700, 10, 10) ran ~750 collections (0.5 s) while a run imported Prefect and
    # started; a command owns its process, so it collects less often (restored for in-process callers).
    thresholds = gc.get_threshold()
    gc.set_threshold(10_000, 10, 100)
    try:
        status = _dispatch(argv, invocation)
        if argv is None:
            exit_at_once.status = status
            supervisor.announce_exit(status)  # in a supervised run's child: the code it exits with (no-op elsewhere)
        return status
    finally:
        gc.set_threshold(*thresholds)
        if environ_before is not None:
            _restore_environment(environ_before)


def _restore_environment(before: dict[str, str]) -> None:
    """Put ``os.environ`` back to ``before`` (what an in-process caller of :func:`main` had) when the command changed
    it, then have Prefect, if imported, read its settings and set up its logging again from it, blank ``PREFECT_*``
    variables left out as the command left them out (:func:`evaltasks.cli._checks.reread_prefect_settings`).

    Every variable is put back, whoever changed it meanwhile: a caller's thread that changes ``os.environ`` while
    the command runs loses that change."""
    if os.environ == before:
        return
    for name in [name for name in os.environ if name not in before]:
        del os.environ[name]
    for name, value in before.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    # Prefect refuses a blank PREFECT_* (the command dropped them: drop_blank_env): it reads the rest without them
    blanks = {name: value for name, value in os.environ.items() if name.startswith("PREFECT_") and not value.strip()}
    for name in blanks:
        del os.environ[name]
    try:
        reread_prefect_settings()
    except Exception:  # noqa: BLE001 - the command is over and its exit code stands; Prefect keeps its settings
        pass
    finally:
        os.environ.update(blanks)


def _dispatch(argv: list[str] | None, invocation: Invocation) -> int:
    """Parse ``argv`` (None: ``sys.argv``) and run the command's module."""
    args = parser().parse_args(argv)
    if args.command in _NEED_A_DIRECTORY:
        try:
            os.getcwd()
        except FileNotFoundError:
            error("the current directory no longer exists (it was deleted): cd to an existing directory and run again")
            return EXIT_INVALID
    if invocation.owns_process:
        _open_standard_streams()
    if args.command != "run":  # a run checks after its stdlib-only hand-over to `evaltasks server`
        problem = check_settings()
        if problem:
            error(problem)
            return EXIT_INVALID
    code: int = COMMANDS[args.command].command(args, invocation)
    return code


def _open_standard_streams() -> None:
    """Point a closed standard file descriptor (``evaltasks run ... >&-``) at the null device, as daemons do, so
    that Prefect's server process, logging and the last flush find one; writes to it are discarded."""
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, mode)
            if null != fd:
                os.dup2(null, fd)  # inheritable, as a standard descriptor is
                os.close(null)
            else:  # the lowest free descriptor was this one: opened close-on-exec, which child processes lose
                os.set_inheritable(fd, True)
    for name, number, text_mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(number, text_mode, closefd=False))  # noqa: SIM115 - a standard stream, for good
