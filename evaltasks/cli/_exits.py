"""The command's exit codes and its two ways of ending badly: a one-line error (:func:`error`) and an aborted
run (:func:`aborted`, the traceback in a file). docs/cli.md#cli."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path

from evaltasks._redact import redact

EXIT_PASSED, EXIT_GATE_FAILED, EXIT_INVALID, EXIT_ABORTED = 0, 1, 2, 3
EXIT_SIGINT, EXIT_SIGTERM = 130, 143  # 128 + the signal's number, as shells report a process a signal ended


def exit_code(signum: int) -> int:
    """:data:`EXIT_SIGTERM` (143) for SIGTERM, else :data:`EXIT_SIGINT` (130): the only signals a run handles."""
    return EXIT_SIGTERM if signum == signal.SIGTERM else EXIT_SIGINT


class UsageProblem(Exception):
    """A user's mistake found once Prefect answers (a flag naming something the server lacks): the command prints
    ``evaltasks: error: MESSAGE`` (one line) and exits :data:`EXIT_INVALID`."""


def error(message: str) -> None:
    """Print ``evaltasks: error: MESSAGE`` on stderr (secrets in it redacted)."""
    print(f"evaltasks: error: {redact(message)}", file=sys.stderr)


def aborted(output_dir: str | None) -> int:
    """For the exception being handled: write its traceback (redacted) to ``evaltasks-error.log`` in
    ``output_dir`` (``eval-results`` when None: the run aborted before its suite was read; a temporary file when
    that cannot be written), print one line naming it, and return :data:`EXIT_ABORTED`."""
    from evaltasks._atomic import atomic_writer  # startup: imports socket and hashlib, needed only here

    exc = sys.exc_info()[1]
    text = redact(traceback.format_exc())  # a library's exception may quote an echoed API key
    try:
        out = Path(output_dir or "eval-results")
        out.mkdir(parents=True, exist_ok=True)
        log = out / "evaltasks-error.log"
        with atomic_writer(log) as handle:  # replaces a symlink placed there instead of writing through it
            handle.write(text)
    except OSError:
        fd, name = tempfile.mkstemp(prefix="evaltasks-error-", suffix=".log")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        log = Path(name)
    error(f"the run aborted: {type(exc).__name__}: {exc}\n  full traceback: {log}")
    return EXIT_ABORTED
