"""CostMetric: did generating the output cost at most ``max_cost`` US dollars?

Source: promptfoo's ``cost`` assertion (promptfoo's docs, "Deterministic metrics", Cost: passes when the cost
the provider reports is at or below the threshold; an unknown cost cannot be checked); where evaltasks
differs, and why: docs/metrics/deterministic.md#latencymetric-and-costmetric.
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import Ge

from evaltasks.metrics.deterministic._generation import GenerationLimitMetric, check_limit
from evaltasks.metrics.registry import register_metric
from evaltasks.test_case import Generation


@register_metric("CostMetric")
class CostMetric(GenerationLimitMetric):
    """Score 1.0 when generating the case's output cost at most ``max_cost`` US dollars
    (``case.generation.cost``), else 0.0.

    A case whose output came with the dataset (no ``generation``: no target, or ``--no-target``) is
    ``skipped``; a generation without a cost (a ``python`` or ``http`` target that does not report one, a
    ``chat`` model without a price) is ``errored``. An output from the output store is checked against what its
    generation cost when it was made (``evaluation_log["cached"]`` says so; the run itself spent nothing on it).

    Args:
        threshold: minimum passing score, default 1.0.
        max_cost: the most one generation may cost, in US dollars (>= 0; inclusive: exactly ``max_cost``
            passes; 0 allows free generations only).
        name: the name in results (default ``"CostMetric"``).

    Raises:
        ValueError: ``max_cost`` missing, not a finite number, or < 0; a threshold outside [0, 1].

    ``evaluation_log`` keys: ``cost``, ``max_cost``, ``target``, ``cached``.
    """

    _field = "cost"
    _limit_label = "max_cost"
    _what = "cost"

    def __init__(
        self,
        threshold: float = 1.0,
        *,
        max_cost: Annotated[float, Ge(0)],
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        self.limit = check_limit("max_cost", max_cost, allow_zero=True)

    @property
    def max_cost(self) -> float:
        """The most one generation may cost, in US dollars."""
        return self.limit

    def _shown(self, value: float) -> str:
        return "$" + f"{value:.10f}".rstrip("0").rstrip(".")

    def _unknown(self, generation: Generation) -> str:
        return (
            f"target '{generation.target}' reported no cost for this output, so it cannot be checked (a python or "
            "http target reports `cost` with its output; a chat target needs the model's price)"
        )
