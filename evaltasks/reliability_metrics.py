"""Alias of eval-ai-library 0.8's ``eval_lib.reliability_metrics`` module path."""

from evaltasks.metrics.agent.loop_detection import LoopDetectionMetric
from evaltasks.metrics.agent.planning_quality import PlanningQualityMetric
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
    "LoopDetectionMetric",
    "OutcomeConsistencyMetric",
    "PerturbationGenerator",
    "PerturbationSpec",
    "PlanningQualityMetric",
    "PromptRobustnessMetric",
]
