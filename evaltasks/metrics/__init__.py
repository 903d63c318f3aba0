"""Metrics and the registry that maps a metric's name to its class.

Families, one module per metric: :mod:`~evaltasks.metrics.deterministic` (rules over text),
:mod:`~evaltasks.metrics.vector` (embeddings), :mod:`~evaltasks.metrics.judge` (an LLM judge) and
:mod:`~evaltasks.metrics.security` (attacks and harm: a judge or a local classifier). Each metric
registers itself beside its class (``@register_metric("Name")``); the registry, :data:`METRICS`, checks itself and
generates the suite file's schema (:mod:`evaltasks.metrics.registry`). Adding a metric = one module in its family
+ its tests (and its name re-exported here, in its family's ``__init__`` and in ``evaltasks``, to be public API).
"""

from evaltasks.metrics.base import BaseMetric, EmbeddingNeed
from evaltasks.metrics.deterministic import (
    AnswerPrecisionMetric,
    ContainsMetric,
    CostMetric,
    EndsWithMetric,
    ExactMatchMetric,
    FormatCheckMetric,
    JsonSchemaMetric,
    LanguageDetectionMetric,
    LatencyMetric,
    LengthCheckMetric,
    NonEmptyMetric,
    RegexMatchMetric,
    RestrictedRefusalMetric,
    StartsWithMetric,
    ToolCorrectnessMetric,
)
from evaltasks.metrics.judge import (
    AnswerRelevancyMetric,
    BiasMetric,
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    CustomEvalMetric,
    FaithfulnessMetric,
    GEvalMetric,
    ToxicityMetric,
)
from evaltasks.metrics.registry import (
    ENTRY_POINT_GROUP,
    METRICS,
    USER_METRIC_PATTERN,
    MetricRegistryError,
    add_import_dir,
    get_metric_class,
    is_builtin,
    metric_entry_points,
    register_metric,
)
from evaltasks.metrics.security import (
    HarmfulContentMetric,
    JailbreakDetectionMetric,
    JailbreakResistanceMetric,
    PIILeakageMetric,
    PolicyComplianceMetric,
    PromptInjectionDetectionMetric,
    PromptInjectionResistanceMetric,
)
from evaltasks.metrics.vector import ReferenceMatchMetric, SemanticSimilarityMetric

__all__ = [
    "ENTRY_POINT_GROUP",
    "METRICS",
    "USER_METRIC_PATTERN",
    "AnswerPrecisionMetric",
    "AnswerRelevancyMetric",
    "BaseMetric",
    "BiasMetric",
    "ContainsMetric",
    "ContextualPrecisionMetric",
    "ContextualRecallMetric",
    "ContextualRelevancyMetric",
    "CostMetric",
    "CustomEvalMetric",
    "EmbeddingNeed",
    "EndsWithMetric",
    "ExactMatchMetric",
    "FaithfulnessMetric",
    "FormatCheckMetric",
    "GEvalMetric",
    "HarmfulContentMetric",
    "JailbreakDetectionMetric",
    "JailbreakResistanceMetric",
    "JsonSchemaMetric",
    "LanguageDetectionMetric",
    "LatencyMetric",
    "LengthCheckMetric",
    "MetricRegistryError",
    "NonEmptyMetric",
    "PIILeakageMetric",
    "PolicyComplianceMetric",
    "PromptInjectionDetectionMetric",
    "PromptInjectionResistanceMetric",
    "ReferenceMatchMetric",
    "RegexMatchMetric",
    "RestrictedRefusalMetric",
    "SemanticSimilarityMetric",
    "StartsWithMetric",
    "ToolCorrectnessMetric",
    "ToxicityMetric",
    "add_import_dir",
    "get_metric_class",
    "is_builtin",
    "metric_entry_points",
    "register_metric",
]
