"""Alias of eval-ai-library 0.8's ``eval_lib.security_metrics`` module path."""

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
