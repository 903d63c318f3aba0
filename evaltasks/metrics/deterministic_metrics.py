"""Alias module for ``eval_lib.metrics.deterministic_metrics``."""

from evaltasks.metrics.length_check import LengthCheckMetric

__all__ = ["LengthCheckMetric"]
