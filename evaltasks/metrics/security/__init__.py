"""Security metrics: personal-data leaks, attacks on the system under test and policy compliance
(docs/metrics/security.md). One module per metric; they are exported here and at eval-ai-library's import path
:mod:`evaltasks.security_metrics`."""

from evaltasks.metrics.security.jailbreak_resistance import JailbreakResistanceMetric
from evaltasks.metrics.security.pii_leakage import PIILeakageMetric
from evaltasks.metrics.security.policy_compliance import PolicyComplianceMetric
from evaltasks.metrics.security.prompt_injection_resistance import PromptInjectionResistanceMetric

__all__ = [
    "JailbreakResistanceMetric",
    "PIILeakageMetric",
    "PolicyComplianceMetric",
    "PromptInjectionResistanceMetric",
]
