"""What importing evaltasks does before anything else (run by ``evaltasks/__init__.py``, first thing).

1. ``python -m evaltasks`` (and ``-m evaltasks.cli``): Python put the working directory first on ``sys.path``, so
   a ``yaml.py`` there would replace the module evaltasks imports. It is dropped first thing, while Python is still
   locating the module (``sys.argv[0]`` is ``"-m"`` then), before anything but the interpreter's own start-up
   modules is imported (docs/metrics/custom.md#your-own-metrics). Under ``-P`` (Python 3.11+) or ``-I`` it is not there.
   Importing evaltasks from a program never does this.
2. In a source checkout the flows live in ``./flows`` (a build installs them as ``evaltasks.flows``): the
   checkout's root is added to the package's ``__path__``, so ``evaltasks.flows`` imports there too (e.g.
   ``python -m evaltasks.cli`` run in the repository's root).
3. Every log record of a process that imports evaltasks (a worker process too) is redacted when it is made: an
   API key an endpoint echoed never reaches a console, a log file or Prefect's database
   (docs/reports.md#secrets-in-reports; :func:`evaltasks._redact.install_log_redaction`).
"""

import os
import sys


def _drop_working_directory() -> None:
    """Remove the working directory from the front of ``sys.path`` when this process is ``python -m evaltasks``
    or ``python -m evaltasks.cli`` (step 1 of the module's docstring)."""
    if sys.argv[:1] != ["-m"] or getattr(sys.flags, "safe_path", False) or sys.flags.isolated or not sys.path:
        return
    argv = list(getattr(sys, "orig_argv", ()))
    if any(flag == "-m" and argv[i + 1 : i + 2] in (["evaltasks"], ["evaltasks.cli"]) for i, flag in enumerate(argv)):
        try:
            cwd: str | None = os.getcwd()
        except OSError:
            cwd = None
        if sys.path[0] in ("", cwd):
            del sys.path[0]


def _add_checkout_flows() -> None:
    """Add the checkout's root to the ``evaltasks`` package's ``__path__`` when ``flows/`` lives there and not
    inside the package (step 2 of the module's docstring)."""
    package = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(package)
    if not os.path.isdir(os.path.join(package, "flows")) and os.path.isfile(
        os.path.join(root, "flows", "evaluate_suite.py")
    ):
        sys.modules["evaltasks"].__path__.append(root)


_drop_working_directory()
_add_checkout_flows()

from evaltasks._redact import install_log_redaction  # noqa: E402 - after the path is made safe

install_log_redaction()
