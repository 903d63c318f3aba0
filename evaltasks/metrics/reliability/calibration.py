"""CalibrationMetric: does the system's own confidence match how often it is right? A run-level metric.

Source: eval-ai-library 0.8.2's ``CalibrationMetric`` (no documentation page exists; ``evaluate_suite`` over
``(confidence, success)`` pairs): ECE over ``n_bins`` equal-width bins, AUROC as the Mann-Whitney statistic,
and a Brier score. Where evaltasks differs (docs/metrics/reliability.md#calibrationmetric): the score is the
Brier skill score ``1 - Brier / (p (1 - p))`` (p the run's success rate: the Brier score of always forecasting
it), where the library reports ``1 - Brier``, which rewards a system that is right often whatever it says;
``ece`` is the error itself (the library reports ``1 - ECE``); it scores the run once and never a case (the
library's ``evaluate`` gives every case 1.0, as it does a run of fewer than five cases); a run whose cases all
had the same outcome, or too few cases, is errored with the reason, not scored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.results import MetricResult, RunMetricResult
from evaltasks.test_case import EvalTestCase


def brier(confidences: Sequence[float], outcomes: Sequence[bool]) -> float:
    """Mean squared difference of each confidence and its outcome (1 right, 0 wrong)."""
    return sum((c - float(y)) ** 2 for c, y in zip(confidences, outcomes, strict=True)) / len(confidences)


def brier_skill(confidences: Sequence[float], outcomes: Sequence[bool]) -> float | None:
    """``1 - Brier / (p (1 - p))``, p the share of right outcomes; None when p is 0 or 1 (no reference)."""
    p = sum(outcomes) / len(outcomes)
    reference = p * (1 - p)
    return None if reference == 0 else 1 - brier(confidences, outcomes) / reference


def ece(confidences: Sequence[float], outcomes: Sequence[bool], n_bins: int) -> float:
    """Expected calibration error: ``sum_b n_b / N * |accuracy_b - mean confidence_b|`` over ``n_bins``
    equal-width bins ``[i/n, (i+1)/n)``, the last one closed (eval-ai-library's bins)."""
    total = 0.0
    n = len(confidences)
    for b in range(n_bins):
        low, high = b / n_bins, (b + 1) / n_bins
        members = [i for i, c in enumerate(confidences) if low <= c < high or (b == n_bins - 1 and c == high)]
        if members:
            accuracy = sum(float(outcomes[i]) for i in members) / len(members)
            mean = sum(confidences[i] for i in members) / len(members)
            total += len(members) / n * abs(accuracy - mean)
    return total


def auroc(confidences: Sequence[float], outcomes: Sequence[bool]) -> float | None:
    """Probability that a right case has a higher confidence than a wrong one (ties count half; the
    Mann-Whitney statistic); None without both right and wrong cases."""
    right = [c for c, y in zip(confidences, outcomes, strict=True) if y]
    wrong = [c for c, y in zip(confidences, outcomes, strict=True) if not y]
    if not right or not wrong:
        return None
    wins = sum(1.0 if r > w else 0.5 if r == w else 0.0 for r in right for w in wrong)
    return wins / (len(right) * len(wrong))


@register_metric("CalibrationMetric")
class CalibrationMetric(BaseMetric):
    """Calibration of the cases' ``agent_confidence`` against their outcomes, over the whole run.

    A case's outcome is whether it passed ``outcome_metric`` (another metric of the run), or, without one,
    whether it passed every other metric of the run; errored and skipped cases are left out. The run gets one
    :class:`~evaltasks.results.RunMetricResult`: score = Brier skill score, with ``ece`` and ``auroc`` beside it
    (summary, results.json, terminal); no case carries a score of it.

    Args:
        threshold: minimum passing Brier skill score, in [0, 1], default 0.0 (no worse than always forecasting
            the run's success rate).
        n_bins: equal-width confidence bins of the ECE, default 10 (the library's).
        outcome_metric: the name of the run's metric whose pass/fail is each case's outcome (None: all of them).
        min_cases: fewest cases with an outcome for a result, default 5 (the library's); fewer errors it.
        name: the name in results (default ``"CalibrationMetric"``).

    Raises:
        ValueError: a threshold outside [0, 1], ``n_bins`` or ``min_cases`` not an integer >= 1 (>= 2), an empty
            ``outcome_metric``.

    Every case needs ``agent_confidence`` in [0, 1] (the target returns it, or a dataset column).
    """

    required_fields: ClassVar[tuple[str, ...]] = ("agent_confidence",)
    version: ClassVar[str] = "1"
    run_level: ClassVar[bool] = True

    def __init__(
        self,
        threshold: float = 0.0,
        n_bins: int = 10,
        outcome_metric: str | None = None,
        min_cases: int = 5,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
            raise ValueError(f"n_bins must be an integer >= 1, got {quote(n_bins)}")
        if isinstance(min_cases, bool) or not isinstance(min_cases, int) or min_cases < 2:
            raise ValueError(f"min_cases must be an integer >= 2, got {quote(min_cases)}")
        if outcome_metric is not None and (not isinstance(outcome_metric, str) or not outcome_metric.strip()):
            raise ValueError(f"outcome_metric must be a metric's name, got {quote(outcome_metric)}")
        self.n_bins, self.outcome_metric, self.min_cases = n_bins, outcome_metric, min_cases

    def config(self) -> dict[str, Any]:
        """Constructor arguments."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "n_bins": self.n_bins,
            "outcome_metric": self.outcome_metric,
            "min_cases": self.min_cases,
        }

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs ``agent_confidence``."""
        if case.agent_confidence is None:
            return [("agent_confidence", "is missing (CalibrationMetric needs the system's confidence per case)")]
        return []

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Not available: a run-level metric scores no case. Raises TypeError (use :meth:`score_run`)."""
        raise TypeError(f"{self.name} is a run-level metric: it scores a run (score_run), not cases")

    async def evaluate(self, test_case: EvalTestCase) -> MetricResult:
        """Not available (eval-ai-library scores 1.0 here). Raises ValueError: use :meth:`evaluate_suite`."""
        raise ValueError(f"{self.name} is a run-level metric: use evaluate_suite([(confidence, success), ...])")

    async def evaluate_suite(self, results: Sequence[tuple[float, bool]]) -> RunMetricResult:
        """eval-ai-library's API: the run's result from ``(confidence, success)`` pairs (:meth:`score_run`)."""
        return self.score_run([c for c, _ in results], [bool(s) for _, s in results])

    def score_run(self, confidences: Sequence[float], outcomes: Sequence[bool], excluded: int = 0) -> RunMetricResult:
        """The run's result from each case's confidence and outcome (``excluded``: cases left out, reported).

        Errored (``score`` None) with fewer than ``min_cases`` cases, or when every outcome is the same (no
        Brier skill score). Raises ValueError for a confidence outside [0, 1] or lists of different lengths."""
        if len(confidences) != len(outcomes):
            raise ValueError("confidences and outcomes must have the same length")
        if any(not 0.0 <= c <= 1.0 for c in confidences):
            raise ValueError("every confidence must be in [0, 1]")
        n = len(confidences)
        what = f"the cases' outcome on {self.outcome_metric}" if self.outcome_metric else "the cases passing"
        details: dict[str, Any] = {"cases": n, "excluded": excluded, "outcome": what}
        if n < self.min_cases:
            return self._errored(
                f"{n} case(s) with a confidence and an outcome; calibration needs {self.min_cases}", details
            )
        p = sum(outcomes) / n
        details.update(
            brier=brier(confidences, outcomes),
            brier_skill=brier_skill(confidences, outcomes),
            ece=ece(confidences, outcomes, self.n_bins),
            auroc=auroc(confidences, outcomes),
            base_rate=p,
            mean_confidence=sum(confidences) / n,
        )
        skill = details["brier_skill"]
        if skill is None:
            return self._errored(
                f"all {n} cases were {'right' if p == 1 else 'wrong'}: calibration needs both outcomes", details
            )
        auc = "n/a" if details["auroc"] is None else f"{details['auroc']:.3f}"
        reason = (
            f"Brier skill score {skill:.3f} (Brier {details['brier']:.3f} against {p * (1 - p):.3f} for always "
            f"saying the success rate {p:.0%}), ECE {details['ece']:.3f}, AUROC {auc} over {n} cases; mean "
            f"confidence {details['mean_confidence']:.0%}."
        )
        success = skill >= self.threshold
        return RunMetricResult(
            name=self.name,
            score=skill,
            threshold=self.threshold,
            success=success,
            status="passed" if success else "failed",
            reason=reason,
            details=details,
        )

    def _errored(self, why: str, details: dict[str, Any]) -> RunMetricResult:
        return RunMetricResult(
            name=self.name,
            score=None,
            threshold=self.threshold,
            success=False,
            status="errored",
            reason=f"Errored: {why}",
            details=details,
            error=why,
        )
