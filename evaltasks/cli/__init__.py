"""The ``evaltasks`` command line: one module per command (:mod:`~evaltasks.cli.run`,
:mod:`~evaltasks.cli.server`, :mod:`~evaltasks.cli.serve`, :mod:`~evaltasks.cli.index`,
:mod:`~evaltasks.cli.history`, :mod:`~evaltasks.cli.calibrate`, :mod:`~evaltasks.cli.schema`,
:mod:`~evaltasks.cli.init`), the checks made
before a run (``_checks``), signal handling (``_signals``), terminal output (``_terminal``), exit codes
(``_exits``) and the entry point (``_main``). docs/cli.md#cli."""

from evaltasks.cli._main import main

__all__ = ["main"]
