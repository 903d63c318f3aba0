"""Alias of eval-ai-library 0.8's ``eval_lib.deterministic_metrics`` module path: :mod:`evaltasks.metrics.deterministic`."""

from evaltasks.metrics.deterministic import *  # noqa: F403
from evaltasks.metrics.deterministic import __all__  # noqa: F401
