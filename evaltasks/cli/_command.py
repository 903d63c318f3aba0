"""What every command shares: the state of one invocation (:class:`Invocation`, passed along instead of
module globals) and how a command is added to the parser (:func:`add_command`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evaltasks._version import docs_ref


@dataclass(frozen=True)
class Invocation:
    """One call of the ``evaltasks`` command.

    Attributes:
        started: when the command started (``time.time()``), for the run's ``total`` duration.
        owns_process: called as the ``evaltasks`` command (no ``argv``): it may hand the run to a server or a
            supervised child and end its process at once; False for in-process callers (tests, the server's runs).
        served_by_runner: a run that ``evaltasks server`` forked (:mod:`evaltasks.server.daemon`): its runner
            supervises the run's process, so the run needs no heartbeats, as on a temporary server.
        entry: the command's entry point (:func:`evaltasks.cli.main`), for the server's forked runs.
    """

    started: float
    owns_process: bool
    served_by_runner: bool = False
    entry: Callable[..., int] | None = None


def add_command(sub: Any, name: str, help_text: str, description: str | None, section: str) -> argparse.ArgumentParser:
    """Add command ``name`` to ``sub``: ``help_text`` in the command list, ``description`` (default
    ``help_text``) at the top of its own ``--help``, and where its docs are (:func:`~evaltasks._version.docs_ref`
    of ``section``) at the bottom."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help_text,
        description=description or help_text[:1].upper() + help_text[1:] + ".",
        epilog=f"More: {docs_ref(section)}.",
    )
    return parser
