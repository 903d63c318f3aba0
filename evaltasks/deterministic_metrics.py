"""Alias of eval-ai-library 0.8's ``eval_lib.deterministic_metrics`` module path."""

from evaltasks.metrics.language_detection import LanguageDetectionMetric
from evaltasks.metrics.length_check import LengthCheckMetric

__all__ = ["LanguageDetectionMetric", "LengthCheckMetric"]
