"""Alias of eval-ai-library 0.8's ``eval_lib.reliability_metrics`` module path."""

from evaltasks.metrics.reliability import (
    CalibrationMetric,
    ContextDecayMetric,
    OutcomeConsistencyMetric,
    PerturbationGenerator,
    PerturbationSpec,
    PromptRobustnessMetric,
)

__all__ = [
    "CalibrationMetric",
    "ContextDecayMetric",
    "OutcomeConsistencyMetric",
    "PerturbationGenerator",
    "PerturbationSpec",
    "PromptRobustnessMetric",
]
