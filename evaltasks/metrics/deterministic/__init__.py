"""Deterministic metrics: rules over the text (and tool calls) of a test case, or over how a target generated it
(latency, cost); no model, no network.

One module per metric; eval-ai-library documents each, promptfoo's assertions the latency and cost ones
(docs/metrics/index.md#metrics-and-their-exact-rules)."""

from evaltasks.metrics.deterministic.answer_precision import AnswerPrecisionMetric
from evaltasks.metrics.deterministic.contains import ContainsMetric
from evaltasks.metrics.deterministic.cost import CostMetric
from evaltasks.metrics.deterministic.ends_with import EndsWithMetric
from evaltasks.metrics.deterministic.exact_match import ExactMatchMetric
from evaltasks.metrics.deterministic.format_check import FormatCheckMetric
from evaltasks.metrics.deterministic.json_schema import JsonSchemaMetric
from evaltasks.metrics.deterministic.language_detection import LanguageDetectionMetric
from evaltasks.metrics.deterministic.latency import LatencyMetric
from evaltasks.metrics.deterministic.length_check import LengthCheckMetric
from evaltasks.metrics.deterministic.non_empty import NonEmptyMetric
from evaltasks.metrics.deterministic.regex_match import RegexMatchMetric
from evaltasks.metrics.deterministic.restricted_refusal import RestrictedRefusalMetric
from evaltasks.metrics.deterministic.starts_with import StartsWithMetric
from evaltasks.metrics.deterministic.tool_correctness import ToolCorrectnessMetric

__all__ = [
    "AnswerPrecisionMetric",
    "ContainsMetric",
    "CostMetric",
    "EndsWithMetric",
    "ExactMatchMetric",
    "FormatCheckMetric",
    "JsonSchemaMetric",
    "LanguageDetectionMetric",
    "LatencyMetric",
    "LengthCheckMetric",
    "NonEmptyMetric",
    "RegexMatchMetric",
    "RestrictedRefusalMetric",
    "StartsWithMetric",
    "ToolCorrectnessMetric",
]
