"""Security metrics: personal-data leaks, harmful content in the system's answers, attacks in the dataset's inputs
and on the system under test, policy compliance (docs/metrics/security.md). One module per metric; they are exported
here and at eval-ai-library's import path :mod:`evaltasks.security_metrics`."""

from evaltasks.metrics.security.harmful_content import HarmfulContentMetric
from evaltasks.metrics.security.jailbreak_detection import JailbreakDetectionMetric
from evaltasks.metrics.security.jailbreak_resistance import JailbreakResistanceMetric
from evaltasks.metrics.security.pii_leakage import PIILeakageMetric
from evaltasks.metrics.security.policy_compliance import PolicyComplianceMetric
from evaltasks.metrics.security.prompt_injection_detection import PromptInjectionDetectionMetric
from evaltasks.metrics.security.prompt_injection_resistance import PromptInjectionResistanceMetric

__all__ = [
    "HarmfulContentMetric",
    "JailbreakDetectionMetric",
    "JailbreakResistanceMetric",
    "PIILeakageMetric",
    "PolicyComplianceMetric",
    "PromptInjectionDetectionMetric",
    "PromptInjectionResistanceMetric",
]
