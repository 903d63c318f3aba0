"""Alias of eval-ai-library 0.8's ``eval_lib.vector_metrics`` module path: :mod:`evaltasks.metrics.vector`."""

from evaltasks.metrics.vector import *  # noqa: F403
from evaltasks.metrics.vector import __all__  # noqa: F401
