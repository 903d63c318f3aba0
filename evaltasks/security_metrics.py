"""Alias of eval-ai-library 0.8's ``eval_lib.security_metrics`` module path."""

from evaltasks.metrics.security.harmful_content import HarmfulContentMetric
from evaltasks.metrics.security.jailbreak_detection import JailbreakDetectionMetric
from evaltasks.metrics.security.prompt_injection_detection import PromptInjectionDetectionMetric

__all__ = [
    "HarmfulContentMetric",
    "JailbreakDetectionMetric",
    "PromptInjectionDetectionMetric",
]
