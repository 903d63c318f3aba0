"""Alias of the module path ``eval_lib.metrics.deterministic_metrics``: :mod:`evaltasks.metrics.deterministic`."""

from evaltasks.metrics.deterministic import *  # noqa: F403
from evaltasks.metrics.deterministic import __all__  # noqa: F401
