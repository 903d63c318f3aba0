"""Security metrics: personal-data leaks, harmful content and policy compliance in the system's answers, its
resistance to attacks, and attacks in the dataset's inputs (docs/metrics/security.md#security-metrics). One module
per metric; they are exported here and at eval-ai-library's import path :mod:`evaltasks.security_metrics`."""

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
