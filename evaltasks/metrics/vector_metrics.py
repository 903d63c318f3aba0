"""Alias of eval-ai-library's import path ``eval_lib.metrics.vector_metrics``: :mod:`evaltasks.metrics.vector`."""

from evaltasks.metrics.vector import *  # noqa: F403
from evaltasks.metrics.vector import __all__  # noqa: F401
