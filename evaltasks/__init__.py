"""evaltasks: LLM-output evaluation metrics as Prefect tasks, flows and a GitHub Action.

The public API (compatible with eval-ai-library's ``eval_lib``)::

    from evaltasks import EvalTestCase, evaluate, evaluate_sync, LengthCheckMetric, ReferenceMatchMetric
"""

from evaltasks import _startup  # noqa: F401 - first: makes sys.path safe, finds the checkout's flows, redacts logs
from evaltasks._version import __version__
from evaltasks.errors import (
    ConfigError,
    CredentialsError,
    DatasetError,
    EvalTasksError,
    GateFailed,
    InputError,
    ProviderError,
)

# The rest of the public API is imported when first used (PEP 562), so that `import evaltasks` and the commands
# that need none of it (`evaltasks --version`, `schema`, `index info`) do not pay for numpy, pydantic models or
# the metrics: `from evaltasks import evaluate_sync` works as before.
_LAZY: dict[str, str] = {
    "evaluate": "evaltasks.engine.evaluate",
    "evaluate_sync": "evaltasks.engine.evaluate",
    "evaluate_conversations": "evaltasks.engine.evaluate",
    "evaluate_conversations_sync": "evaltasks.engine.evaluate",
    "ReferenceIndex": "evaltasks.index",
    "EvaluationResult": "evaltasks.results",
    "MetricResult": "evaltasks.results",
    "TestCaseResult": "evaltasks.results",
    "EvalTestCase": "evaltasks.test_case",
    "ConversationalEvalTestCase": "evaltasks.test_case",
    "TraceStep": "evaltasks.test_case",
    "ToolCall": "evaltasks.test_case",
    "SemanticSimilarityMetric": "evaltasks.metrics.vector.semantic_similarity",
    "GEvalMetric": "evaltasks.metrics.judge.geval",
    "CustomEvalMetric": "evaltasks.metrics.judge.custom_eval",
    "HarmfulContentMetric": "evaltasks.metrics.security.harmful_content",
    "JailbreakDetectionMetric": "evaltasks.metrics.security.jailbreak_detection",
    "PromptInjectionDetectionMetric": "evaltasks.metrics.security.prompt_injection_detection",
    **{
        name: "evaltasks.metrics"
        for name in (
            "METRICS",
            "AnswerPrecisionMetric",
            "BaseMetric",
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
            "ReferenceMatchMetric",
            "RegexMatchMetric",
            "RestrictedRefusalMetric",
            "StartsWithMetric",
            "ToolCorrectnessMetric",
        )
    },
    **{
        name: "evaltasks.metrics"
        for name in (
            "AnswerRelevancyMetric",
            "BiasMetric",
            "ContextualPrecisionMetric",
            "ContextualRecallMetric",
            "ContextualRelevancyMetric",
            "FaithfulnessMetric",
            "ToxicityMetric",
        )
    },
    **{
        name: "evaltasks.metrics.conversation"
        for name in (
            "ConversationalFlowRateMetric",
            "FailureRateMetric",
            "GoalAchievementRateMetric",
            "KnowledgeRetentionMetric",
            "RepetitivePatternDetectionMetric",
            "RoleAdherenceMetric",
            "TaskSuccessRateMetric",
            "UncertaintyHandlingMetric",
        )
    },
    **{name: "evaltasks.metrics" for name in ("LoopDetectionMetric", "PlanningQualityMetric", "ToolsErrorMetric")},
    **{
        name: "evaltasks.security_metrics"
        for name in (
            "JailbreakResistanceMetric",
            "PIILeakageMetric",
            "PolicyComplianceMetric",
            "PromptInjectionResistanceMetric",
        )
    },
    **{
        name: "evaltasks.metrics"
        for name in (
            "CalibrationMetric",
            "ContextDecayMetric",
            "OutcomeConsistencyMetric",
            "PromptRobustnessMetric",
        )
    },
}


def __getattr__(name: str) -> object:
    """The public name ``name`` from the module that defines it, imported on first use (PEP 562).

    Raises:
        AttributeError: ``name`` is not part of the public API.
    """
    module = _LAZY.get(name)
    import importlib

    if module is None:
        # a submodule (`evaltasks.metrics.LengthCheckMetric` after a bare `import evaltasks`), as the eager
        # imports used to bind them
        import importlib.util

        if not name.startswith("_") and importlib.util.find_spec(f"evaltasks.{name}") is not None:
            return importlib.import_module(f"evaltasks.{name}")
        raise AttributeError(f"module 'evaltasks' has no attribute {name!r}")

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:
    """The module's names, the public API's lazily imported ones included."""
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "METRICS",
    "AnswerPrecisionMetric",
    "AnswerRelevancyMetric",
    "BaseMetric",
    "BiasMetric",
    "CalibrationMetric",
    "ConfigError",
    "ContainsMetric",
    "ContextDecayMetric",
    "ContextualPrecisionMetric",
    "ContextualRecallMetric",
    "ContextualRelevancyMetric",
    "ConversationalEvalTestCase",
    "ConversationalFlowRateMetric",
    "CostMetric",
    "CredentialsError",
    "CustomEvalMetric",
    "DatasetError",
    "EndsWithMetric",
    "EvalTasksError",
    "EvalTestCase",
    "EvaluationResult",
    "ExactMatchMetric",
    "FailureRateMetric",
    "FaithfulnessMetric",
    "FormatCheckMetric",
    "GEvalMetric",
    "GateFailed",
    "GoalAchievementRateMetric",
    "HarmfulContentMetric",
    "InputError",
    "JailbreakDetectionMetric",
    "JailbreakResistanceMetric",
    "JsonSchemaMetric",
    "KnowledgeRetentionMetric",
    "LanguageDetectionMetric",
    "LatencyMetric",
    "LengthCheckMetric",
    "LoopDetectionMetric",
    "MetricResult",
    "NonEmptyMetric",
    "OutcomeConsistencyMetric",
    "PIILeakageMetric",
    "PlanningQualityMetric",
    "PolicyComplianceMetric",
    "PromptInjectionDetectionMetric",
    "PromptInjectionResistanceMetric",
    "PromptRobustnessMetric",
    "ProviderError",
    "ReferenceIndex",
    "ReferenceMatchMetric",
    "RegexMatchMetric",
    "RepetitivePatternDetectionMetric",
    "RestrictedRefusalMetric",
    "RoleAdherenceMetric",
    "SemanticSimilarityMetric",
    "StartsWithMetric",
    "TaskSuccessRateMetric",
    "TestCaseResult",
    "ToolCall",
    "ToolCorrectnessMetric",
    "ToolsErrorMetric",
    "ToxicityMetric",
    "TraceStep",
    "UncertaintyHandlingMetric",
    "__version__",
    "evaluate",
    "evaluate_conversations",
    "evaluate_conversations_sync",
    "evaluate_sync",
]
