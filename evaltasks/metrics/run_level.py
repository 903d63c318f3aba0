"""Which metrics score a run as a whole (run-level metrics such as CalibrationMetric) rather than each case, and
whether they can work with a run's other metrics (docs/metrics/reliability.md#calibrationmetric). The engine
folds their inputs (:mod:`evaltasks.engine.run_metrics`); a suite keeps them apart from its per-case metrics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evaltasks.metrics.base import BaseMetric


def is_run_level(metric: Any) -> bool:
    """Whether ``metric`` scores the run as a whole (its class sets ``run_level = True``)."""
    return getattr(metric, "run_level", False) is True


def split_run_level(metrics: Sequence[BaseMetric]) -> tuple[list[BaseMetric], list[BaseMetric]]:
    """``(per-case metrics, run-level metrics)`` of ``metrics``, each in their order."""
    return [m for m in metrics if not is_run_level(m)], [m for m in metrics if is_run_level(m)]


def run_metric_problems(run_metrics: Sequence[BaseMetric], per_case: Sequence[BaseMetric]) -> list[tuple[int, str]]:
    """``(position in run_metrics, message)`` for each run-level metric that cannot work with ``per_case``: none
    of them to give the cases an outcome, or an ``outcome_metric`` that names none of them."""
    names = [m.name for m in per_case]
    problems = []
    for i, metric in enumerate(run_metrics):
        wanted = getattr(metric, "outcome_metric", None)
        if not names:
            problems.append((i, f"{metric.name} needs another metric in the run: its verdicts are the cases' outcomes"))
        elif wanted is not None and wanted not in names:
            problems.append((i, f"outcome_metric '{wanted}' is not a metric of the run (they are: {', '.join(names)})"))
    return problems
