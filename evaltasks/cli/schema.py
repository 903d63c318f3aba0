"""``evaltasks schema``: print the JSON Schema of suite files (docs/suite.md#suite-file)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from evaltasks.cli._command import Invocation, add_command
from evaltasks.cli._exits import EXIT_PASSED


def add_parser(sub: Any) -> None:
    """Add ``schema`` to the command parser ``sub``."""
    add_command(
        sub,
        "schema",
        "print the JSON Schema of suite files",
        "Print the JSON Schema of suite files (for an editor's validation and completion of suite YAML).",
        "Suite file",
    )


def command(args: argparse.Namespace, invocation: Invocation) -> int:
    """Print the schema (:func:`~evaltasks.inputs.suite.suite_json_schema`); exit 0, also when the reader of a
    pipe leaves early (``evaltasks schema | head``)."""
    from evaltasks.inputs.suite import suite_json_schema  # startup: the suite model loads pydantic

    try:
        print(json.dumps(suite_json_schema(), indent=2))
        sys.stdout.flush()
    except BrokenPipeError:  # `evaltasks schema | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_PASSED
