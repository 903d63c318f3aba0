"""LatencyMetric: did the target produce the output within ``max_ms`` milliseconds?

Source: promptfoo's ``latency`` assertion (promptfoo's docs, "Deterministic metrics", Latency: fails when the
call takes longer than the threshold, in milliseconds); where evaltasks differs, and why:
docs/metrics/deterministic.md#latencymetric-and-costmetric.
"""

from __future__ import annotations

from typing import Annotated

from annotated_types import Gt

from evaltasks.metrics.deterministic._generation import GenerationLimitMetric, check_limit
from evaltasks.metrics.registry import register_metric
from evaltasks.test_case import Generation


@register_metric("LatencyMetric")
class LatencyMetric(GenerationLimitMetric):
    """Score 1.0 when the target produced the case's output in at most ``max_ms`` milliseconds
    (``case.generation.latency_ms``, the wall time of the call), else 0.0.

    A case whose output came with the dataset (no ``generation``: no target, or ``--no-target``) is
    ``skipped``; a generation without a latency is ``errored``. An output from the output store is checked
    against the latency of the call that produced it (``evaluation_log["cached"]`` says so).

    Args:
        threshold: minimum passing score, default 1.0.
        max_ms: the longest allowed generation, in milliseconds (> 0; inclusive: exactly ``max_ms`` passes).
        name: the name in results (default ``"LatencyMetric"``).

    Raises:
        ValueError: ``max_ms`` missing, not a finite number, or <= 0; a threshold outside [0, 1].

    ``evaluation_log`` keys: ``latency_ms``, ``max_ms``, ``target``, ``cached``.
    """

    _field = "latency_ms"
    _limit_label = "max_ms"
    _what = "latency"

    def __init__(
        self,
        threshold: float = 1.0,
        *,
        max_ms: Annotated[float, Gt(0)],
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        self.limit = check_limit("max_ms", max_ms, allow_zero=False)

    @property
    def max_ms(self) -> float:
        """The longest allowed generation, in milliseconds."""
        return self.limit

    def _shown(self, value: float) -> str:
        return f"{value:.3f}".rstrip("0").rstrip(".") + " ms"

    def _unknown(self, generation: Generation) -> str:
        return f"target '{generation.target}' reported no latency for this output, so it cannot be checked"
