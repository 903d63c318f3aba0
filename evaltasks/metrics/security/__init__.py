"""Security metrics: harmful content in the system's answers, attacks in the dataset's inputs
(docs/metrics/security.md#security-metrics)."""

from evaltasks.metrics.security.harmful_content import HarmfulContentMetric
from evaltasks.metrics.security.jailbreak_detection import JailbreakDetectionMetric
from evaltasks.metrics.security.prompt_injection_detection import PromptInjectionDetectionMetric

__all__ = [
    "HarmfulContentMetric",
    "JailbreakDetectionMetric",
    "PromptInjectionDetectionMetric",
]
