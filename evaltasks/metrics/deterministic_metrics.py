"""Alias module for ``eval_lib.metrics.deterministic_metrics``."""

from evaltasks.metrics.language_detection import LanguageDetectionMetric
from evaltasks.metrics.length_check import LengthCheckMetric

__all__ = ["LanguageDetectionMetric", "LengthCheckMetric"]
