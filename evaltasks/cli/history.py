"""``evaltasks history SUITE``: print the run history of a suite (docs/history.md#run-history-and-drift)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from evaltasks.cli._command import Invocation, add_command
from evaltasks.cli._exits import EXIT_INVALID, EXIT_PASSED, error
from evaltasks.cli._terminal import warn
from evaltasks.errors import ConfigError, InputError, Problem


def add_parser(sub: Any) -> None:
    """Add ``history`` and its flags to the command parser ``sub``."""
    history = add_command(
        sub,
        "history",
        "print the run history of a suite",
        "Print the recorded runs of a suite, "
        "oldest first: pass rate with its interval, each metric's mean, the gate, the verdict and "
        "what drifted.",
        "Run history and drift",
    )
    history.add_argument("suite", help="the suite YAML file")
    history.add_argument(
        "--history-dir",
        default=None,
        metavar="DIR",
        help="the history directory (default: the suite's history.dir, else "
        "$EVALTASKS_HISTORY_DIR, else .evaltasks/history)",
    )
    history.add_argument("--last", type=int, default=20, metavar="N", help="the last N runs (default 20)")
    history.add_argument("--json", action="store_true", help="print the records as JSON Lines instead")


def _suite_header(suite: str) -> tuple[str, Any]:
    """The suite's name and its ``history:`` block (a :class:`~evaltasks.inputs.suite.HistorySpec` or None),
    read from the suite file alone (its metrics and data are not needed).

    Raises:
        OSError: the file cannot be read.
        pydantic.ValidationError: the history block is invalid.
        InputError: the file is not a YAML mapping with a name.
    """
    from evaltasks.inputs.files import decode_text, load_yaml  # startup: the suite model loads pydantic
    from evaltasks.inputs.suite import HistorySpec

    data = load_yaml(decode_text(Path(suite).read_bytes(), suite, ConfigError), suite, ConfigError)
    name = data.get("name") if isinstance(data, dict) else None
    if not isinstance(name, str) or not name:
        raise ConfigError([Problem(suite, "name", "", "a suite needs a name")])
    spec = HistorySpec.model_validate(data["history"]) if data.get("history") is not None else None
    return name, spec


def command(args: argparse.Namespace, invocation: Invocation) -> int:
    """The suite's run records as a table (or JSON Lines), oldest first; exit 2 when the suite cannot be read
    or has no history. Reads the suite file only (no dataset, no Prefect)."""
    from pydantic import ValidationError  # startup: pydantic only for the commands that need it

    from evaltasks.engine.history import DEFAULT_HISTORY_DIR, HistoryStore, resolve_history_dir

    if args.last < 1:
        error("--last must be at least 1")
        return EXIT_INVALID
    try:
        name, spec = _suite_header(args.suite)
    except OSError as exc:
        error(f"cannot read the suite file {args.suite}: {exc.strerror or exc}")
        return EXIT_INVALID
    except ValidationError as exc:
        error(f"{args.suite}: invalid history block: {exc.errors()[0]['msg']}")
        return EXIT_INVALID
    except InputError as exc:
        error(str(exc))
        return EXIT_INVALID
    directory = resolve_history_dir(args.suite, spec, args.history_dir) or Path(DEFAULT_HISTORY_DIR)
    # the store also logs what it skips (for a flow run's logs); here the lines below print it once, prefixed
    logging.getLogger("evaltasks.history").addHandler(logging.NullHandler())
    store = HistoryStore(directory)
    records = store.read(name, last=args.last)
    for warning in store.warnings:
        warn(warning)
    if not records:
        error(
            f"no run history of suite {name!r} in {store.path(name)} (runs record it with "
            "--history-dir DIR, $EVALTASKS_HISTORY_DIR or a history: block in the suite)"
        )
        return EXIT_INVALID
    if args.json:
        for record in records:
            print(record.model_dump_json())
        return EXIT_PASSED
    from rich.console import Console  # startup: rich only once a table is printed

    from evaltasks.reports.history_table import print_history

    print_history(Console(), f"Run history of {name} ({store.path(name)})", records)
    return EXIT_PASSED
