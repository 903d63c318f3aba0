"""Run-level metrics (CalibrationMetric): metrics that score a run as a whole from its cases' outcomes, never a
case (docs/metrics/reliability.md#calibrationmetric).

A run-level metric (``run_level = True`` on its class) is validated against each case like any metric (it may need
a field, e.g. ``agent_confidence``), but it is kept out of the score stage: :class:`RunMetricTally` folds the case
results of the other metrics as batches stream by, with each case's confidence, and its ``finish`` gives one
:class:`~evaltasks.results.RunMetricResult` per run-level metric, per target, for the summary
(``summary.run_metrics``: summary.md, results.json, the terminal). This module never imports Prefect.
"""

from __future__ import annotations

from collections.abc import Sequence

from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.run_level import is_run_level, run_metric_problems, split_run_level
from evaltasks.results import EvaluationSummary, RunMetricResult, TestCaseResult
from evaltasks.test_case import EvalTestCase

__all__ = ["RunMetricTally", "is_run_level", "run_metric_problems", "split_run_level"]


def _outcome(result: TestCaseResult, wanted: str | None) -> bool | None:
    """The case's outcome: passed/failed on metric ``wanted`` (None: the case's status); None when it was
    errored or skipped (not an outcome)."""
    status = result.status
    if wanted is not None:
        status = next((m.status for m in result.metrics if m.name == wanted), "skipped")
    return True if status == "passed" else False if status == "failed" else None


class RunMetricTally:
    """Each run-level metric's inputs folded from a run's case results as they stream by, per target.

    Args:
        run_metrics: the run-level metrics.
        cases: the run's cases (the generate stage's with targets), whose ``agent_confidence`` is read.
        bounds: each target's ``[start, end)`` positions in ``cases`` (one part for a run without targets).
    """

    def __init__(
        self,
        run_metrics: Sequence[BaseMetric],
        cases: Sequence[EvalTestCase],
        bounds: Sequence[tuple[int, int]] | None = None,
    ) -> None:
        self.metrics = list(run_metrics)
        self.cases = cases
        self.bounds = list(bounds) if bounds else [(0, len(cases))]
        # per target, per metric: confidences, outcomes, excluded count
        self.pairs: list[list[tuple[list[float], list[bool], list[int]]]] = [
            [([], [], [0]) for _ in self.metrics] for _ in self.bounds
        ]

    def add(self, rows: Sequence[int], results: Sequence[TestCaseResult]) -> None:
        """Fold in a batch's ``results`` (the cases at positions ``rows``)."""
        if not self.metrics:
            return
        for row, result in zip(rows, results, strict=True):
            part = next(t for t, (start, end) in enumerate(self.bounds) if start <= row < end)
            confidence = self.cases[row].agent_confidence
            for m, metric in enumerate(self.metrics):
                confidences, outcomes, excluded = self.pairs[part][m]
                outcome = _outcome(result, getattr(metric, "outcome_metric", None))
                if outcome is None or confidence is None:
                    excluded[0] += 1
                    continue
                confidences.append(confidence)
                outcomes.append(outcome)

    def finish(self, part: int = 0) -> dict[str, RunMetricResult]:
        """Target ``part``'s results, metric name -> result, in the metrics' order."""
        out = {}
        for m, metric in enumerate(self.metrics):
            confidences, outcomes, excluded = self.pairs[part][m]
            out[metric.name] = metric.score_run(confidences, outcomes, excluded[0])  # type: ignore[attr-defined]
        return out

    def attach(self, summary: EvaluationSummary, part: int = 0) -> EvaluationSummary:
        """``summary`` with target ``part``'s run-level results (unchanged without run-level metrics)."""
        if not self.metrics:
            return summary
        return summary.model_copy(update={"run_metrics": self.finish(part)})
