"""Alias of eval-ai-library 0.8's ``eval_lib.deterministic_metrics`` module path."""

from evaltasks.metrics.contains import ContainsMetric
from evaltasks.metrics.ends_with import EndsWithMetric
from evaltasks.metrics.exact_match import ExactMatchMetric
from evaltasks.metrics.format_check import FormatCheckMetric
from evaltasks.metrics.json_schema import JsonSchemaMetric
from evaltasks.metrics.language_detection import LanguageDetectionMetric
from evaltasks.metrics.length_check import LengthCheckMetric
from evaltasks.metrics.non_empty import NonEmptyMetric
from evaltasks.metrics.regex_match import RegexMatchMetric
from evaltasks.metrics.starts_with import StartsWithMetric

__all__ = [
    "ContainsMetric", "EndsWithMetric", "ExactMatchMetric", "FormatCheckMetric", "JsonSchemaMetric",
    "LanguageDetectionMetric", "LengthCheckMetric", "NonEmptyMetric", "RegexMatchMetric", "StartsWithMetric",
]
