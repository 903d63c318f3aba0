"""Reliability metrics: consistency across repeated runs, robustness to perturbed inputs, calibration of the
system's own confidence (a run-level metric), and context decay in conversations (docs/metrics/reliability.md).

Deterministic, on what the target produced: no model, no network. One module per metric."""

from evaltasks.metrics.reliability._perturbations import PerturbationGenerator, PerturbationSpec
from evaltasks.metrics.reliability.calibration import CalibrationMetric
from evaltasks.metrics.reliability.context_decay import ContextDecayMetric
from evaltasks.metrics.reliability.outcome_consistency import OutcomeConsistencyMetric
from evaltasks.metrics.reliability.prompt_robustness import PromptRobustnessMetric

__all__ = [
    "CalibrationMetric",
    "ContextDecayMetric",
    "OutcomeConsistencyMetric",
    "PerturbationGenerator",
    "PerturbationSpec",
    "PromptRobustnessMetric",
]
