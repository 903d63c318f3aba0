"""Alias of eval-ai-library 0.8's ``eval_lib.security_metrics`` module path."""

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
