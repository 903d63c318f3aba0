"""Alias module for ``eval_lib.metrics.deterministic_metrics``."""

from evaltasks.metrics.format_check import FormatCheckMetric
from evaltasks.metrics.json_schema import JsonSchemaMetric
from evaltasks.metrics.length_check import LengthCheckMetric
from evaltasks.metrics.regex_match import RegexMatchMetric

__all__ = ["FormatCheckMetric", "JsonSchemaMetric", "LengthCheckMetric", "RegexMatchMetric"]
