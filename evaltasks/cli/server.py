"""``evaltasks server [start|stop|status]``: a Prefect server and a warm runner that this user's runs use (Unix
only; docs/server.md#faster-repeated-runs-evaltasks-server). The server runs CLI commands without importing the
CLI: this module hands it the command's entry point (:class:`~evaltasks.server.client.ServedCommand`)."""

from __future__ import annotations

import argparse
import functools
from typing import TYPE_CHECKING, Any

from evaltasks.cli._checks import quiet_prefect_defaults
from evaltasks.cli._command import Invocation, add_command
from evaltasks.cli._exits import EXIT_SIGINT

if TYPE_CHECKING:
    from evaltasks.server.client import ServerPaths


def add_parser(sub: Any) -> None:
    """Add ``server`` and its action to the command parser ``sub``."""
    server = add_command(
        sub,
        "server",
        "keep a Prefect server and a warm runner that runs use (Unix only); "
        "without an action it runs in the foreground",
        "Keep a Prefect server and a warm runner (models loaded) in the background, so that each "
        "`evaltasks run` of this user starts in a fraction of the time (Unix only). Without an "
        "action it runs in the foreground until Ctrl+C.",
        "Faster repeated runs: `evaltasks server`",
    )
    server.add_argument(
        "action",
        nargs="?",
        choices=("start", "stop", "status"),
        default=None,
        help="start (in the background), stop, status",
    )


def command(args: argparse.Namespace, invocation: Invocation) -> int:
    """Start, stop or report the server, or run it in the foreground (:func:`~evaltasks.server.client.server_command`)."""
    from evaltasks.server import client  # startup: sockets and hashing, only for this command

    return client.server_command(args, functools.partial(_serve_in_foreground, invocation))


def _serve_in_foreground(invocation: Invocation, paths: ServerPaths) -> int:
    """Run the server in this process; its forked children run the command's entry point as served runs
    (no heartbeats: the runner supervises each run). Returns the exit code."""
    from evaltasks.server.client import ServedCommand  # startup: sockets and hashing, only for this command
    from evaltasks.server.daemon import serve

    if invocation.entry is None:
        raise RuntimeError("the server needs the command's entry point")
    served = functools.partial(invocation.entry, served_by_runner=True)
    return serve(paths, ServedCommand(prepare=quiet_prefect_defaults, main=served, interrupted=EXIT_SIGINT))
