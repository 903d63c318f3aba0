"""Alias of eval-ai-library 0.8's ``eval_lib.deterministic_metrics`` module path."""

from evaltasks.metrics.format_check import FormatCheckMetric
from evaltasks.metrics.json_schema import JsonSchemaMetric
from evaltasks.metrics.length_check import LengthCheckMetric
from evaltasks.metrics.regex_match import RegexMatchMetric

__all__ = ["FormatCheckMetric", "JsonSchemaMetric", "LengthCheckMetric", "RegexMatchMetric"]
