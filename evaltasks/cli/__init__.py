"""The ``evaltasks`` command line (entry point :func:`main`)."""

from evaltasks.cli.run import main

__all__ = ["main"]
