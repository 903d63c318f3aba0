"""PlanningQualityMetric: was the agent's decomposition of the task proportionate?

Source: eval-ai-library 0.8.2's ``reliability_metrics/planning_quality_metric`` (no documentation page): its three
parts (granularity, efficiency, planning overhead), their weights 0.4 / 0.4 / 0.2 and its defaults. Where it is
wrong evaltasks differs (docs/metrics/agent.md#planningqualitymetric): the total time is not the sum of every
step's duration (a parent's duration already holds its children's, so nested steps were counted twice or more),
an invocation recorded twice is one step (the library counted the second record as a redundant call), and a case
without a trace is an input error (the library scores it 1.0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.metrics._traces import distinct_steps, input_key
from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase, TraceStep

_COUNTED = frozenset({"tool_call", "agent_step", "reasoning", "retrieval"})
_PLANNING = frozenset({"reasoning", "agent_step"})


def _count_or_none(label: str, value: Any) -> int | None:
    """``value`` when it is None or an integer >= 0. Raises ValueError otherwise (booleans included)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{label} must be an integer >= 0 or null, got {quote(value)}")
    return value


def wall_time_ms(trace: Sequence[TraceStep]) -> float:
    """The trace's duration in ms: the sum of its top-level steps' durations (a step whose parent is not in the
    trace is top-level). A child's time is inside its parent's, so it is not added again."""
    ids = {s.step_id for s in trace if s.step_id is not None}
    return sum(s.duration_ms or 0.0 for s in trace if s.parent_step_id is None or s.parent_step_id not in ids)


def children_ms(trace: Sequence[TraceStep]) -> dict[str, float]:
    """``step_id`` -> the sum of the durations of the steps whose ``parent_step_id`` it is."""
    sums: dict[str, float] = {}
    for s in trace:
        if s.parent_step_id is not None:
            sums[s.parent_step_id] = sums.get(s.parent_step_id, 0.0) + (s.duration_ms or 0.0)
    return sums


def self_time_ms(step: TraceStep, children: Mapping[str, float]) -> float:
    """A step's own time in ms: its duration less its direct children's (``children``: :func:`children_ms`), at
    least 0; 0 without a duration."""
    if step.duration_ms is None:
        return 0.0
    return max(step.duration_ms - (children.get(step.step_id, 0.0) if step.step_id is not None else 0.0), 0.0)


@register_metric("PlanningQualityMetric")
class PlanningQualityMetric(BaseMetric):
    """Score an agent's planning from its ``execution_trace``: 0.4 × granularity + 0.4 × efficiency + 0.2 × (1 -
    planning overhead), clamped to [0, 1] and rounded to 4 decimals (eval-ai-library's weights).

    Steps: the ``tool_call``, ``agent_step``, ``reasoning`` and ``retrieval`` steps, each invocation once
    (docs/metrics/agent.md#execution-traces-as-the-metrics-read-them).

    - granularity: 1 - |steps - reference| / max(steps, reference, 1); the reference is ``expected_steps``, else
      the number of the case's ``planning_steps`` (the plan the agent stated), else none: 1.0.
    - efficiency: distinct tool calls (same name and input, canonical JSON) / tool calls; 1.0 without calls.
    - planning overhead: the own time of the ``reasoning`` and ``agent_step`` steps (duration less their
      children's) / the trace's wall time (the sum of the top-level steps' durations), at most 1; when the
      trace records no duration, planning steps / steps.

    No judge: 0 requests per case.

    Args:
        threshold: minimum passing score, default 0.6.
        expected_steps: the reference number of steps for the task (an integer >= 0), default None.
        expected_tool_count: accepted for eval-ai-library compatibility and recorded in the log; like the
            library's code, not part of the score.
        name: the name in results (default ``"PlanningQualityMetric"``).

    Raises:
        ValueError: a threshold outside [0, 1], or a count that is not an integer >= 0.

    ``evaluation_log`` keys: ``actual_steps``, ``actual_tool_calls``, ``reasoning_steps``, ``reference_steps``
    (None without one), ``granularity_score``, ``efficiency_ratio``, ``planning_overhead``, ``planning_ms``,
    ``total_ms``, ``expected_tool_count``.
    """

    version: ClassVar[str] = "1"

    def __init__(
        self,
        threshold: float = 0.6,
        expected_steps: int | None = None,
        expected_tool_count: int | None = None,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        self.expected_steps = _count_or_none("expected_steps", expected_steps)
        self.expected_tool_count = _count_or_none("expected_tool_count", expected_tool_count)

    def config(self) -> dict[str, Any]:
        """Constructor arguments."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "expected_steps": self.expected_steps,
            "expected_tool_count": self.expected_tool_count,
        }

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A problem on ``execution_trace`` when the case has none (None; ``[]`` is an empty trace)."""
        if case.execution_trace is None:
            return [("execution_trace", "is missing (PlanningQualityMetric scores the steps the agent took)")]
        return []

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Score each case from its trace and ``planning_steps`` (no request)."""
        return [self._score(case.execution_trace or [], case.planning_steps) for case in cases]

    def _score(self, trace: Sequence[TraceStep], plan: Sequence[str] | None) -> MetricResult:
        """The result of one trace (and stated plan)."""
        steps = [step for step, _ in distinct_steps(trace, _COUNTED)]
        tools = [s for s in steps if s.type == "tool_call"]
        planning = [s for s in steps if s.type in _PLANNING]
        reference = self.expected_steps if self.expected_steps is not None else (len(plan) if plan else None)
        granularity = (
            1.0 - abs(len(steps) - reference) / max(len(steps), reference, 1) if reference is not None else 1.0
        )
        distinct = {(s.name, input_key(s)) for s in tools}
        efficiency = len(distinct) / len(tools) if tools else 1.0
        total_ms = wall_time_ms(trace)
        children = children_ms(trace)
        planning_ms = sum(self_time_ms(s, children) for s in planning)
        if total_ms > 0:
            overhead = min(planning_ms / total_ms, 1.0)
        else:
            overhead = len(planning) / len(steps) if steps else 0.0
        score = round(max(0.0, min(1.0, 0.4 * granularity + 0.4 * efficiency + 0.2 * (1.0 - overhead))), 4)
        log = {
            "actual_steps": len(steps),
            "actual_tool_calls": len(tools),
            "reasoning_steps": len(planning),
            "reference_steps": reference,
            "granularity_score": round(granularity, 4),
            "efficiency_ratio": round(efficiency, 4),
            "planning_overhead": round(overhead, 4),
            "planning_ms": planning_ms,
            "total_ms": total_ms,
            "expected_tool_count": self.expected_tool_count,
        }
        return MetricResult.scored(self.name, score, self.threshold, _reason(log, score), log)


def _reason(log: dict[str, Any], score: float) -> str:
    """The reason: each part that lowered the score, with its value, or that none did."""
    parts = []
    reference, steps = log["reference_steps"], log["actual_steps"]
    if reference is not None and steps != reference:
        what = "extra" if steps > reference else "missing"
        parts.append(
            f"{abs(steps - reference)} {what} step(s) against {reference} (granularity {log['granularity_score']:.2f})"
        )
    if log["efficiency_ratio"] < 1.0:
        redundant = log["actual_tool_calls"] - round(log["efficiency_ratio"] * log["actual_tool_calls"])
        parts.append(f"{redundant} redundant tool call(s) (efficiency {log['efficiency_ratio']:.2f})")
    if log["planning_overhead"] > 0:
        parts.append(f"planning took {log['planning_overhead']:.0%} of the time")
    detail = "; ".join(parts) if parts else "no extra or missing steps, no redundant call, no planning overhead"
    return f"Planning quality {score:.2f} over {steps} step(s): {detail}."
