"""ToolsErrorMetric: did the agent's tool calls run without error?

Source: eval-ai-library's Tool Error Detection page (https://library.eval-ai.com/agent-metrics/tool-errors) names
the metric and its threshold; its 0.8.2 code scores a judge's *confidence that errors were detected*, so a
confident "no error" scores high and fails, and a confident "error" passes: the score has no direction. Here
passing means no tool error, read from the trace's own ``status`` / ``error`` fields, with no judge
(docs/metrics/agent.md#toolserrormetric).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from evaltasks.embeddings.base import VectorTable
from evaltasks.metrics._traces import distinct_steps, failed
from evaltasks.metrics.base import BaseMetric, check_flag
from evaltasks.metrics.registry import register_metric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase, TraceStep

_TOOL = frozenset({"tool_call"})


@register_metric("ToolsErrorMetric")
class ToolsErrorMetric(BaseMetric):
    """The share of an agent's tool calls that ran without error, from its ``execution_trace``.

    Each ``tool_call`` step is one call, an invocation recorded twice (nested) counted once
    (docs/metrics/agent.md#execution-traces-as-the-metrics-read-them). A call failed when it, or a record
    nested in it, has ``status`` ``error`` (any case) or a non-empty ``error``. Score: calls without error /
    calls; 1.0 when the trace has no tool call. With the default ``threshold=1.0`` a case passes only when no
    tool call failed. ``ignore_recovered=True`` does not count a failed call that a later call of the same tool
    (same name) completed without error: the agent recovered (eval-ai-library's judge is told the same of its
    example of a corrected call). No judge: 0 requests per case.

    Args:
        threshold: minimum passing score, default 1.0 (no tool error).
        ignore_recovered: leave out failed calls a later call of the same tool recovered; default False.
        model: accepted for eval-ai-library compatibility (its judge model) and ignored: nothing is asked.
        error_types: accepted for eval-ai-library compatibility and ignored (its judge's error categories).
        name: the name in results (default ``"ToolsErrorMetric"``).

    Raises:
        ValueError: a threshold outside [0, 1], or ``ignore_recovered`` not a boolean.

    ``evaluation_log`` keys: ``tool_calls`` (calls counted), ``failed`` (list of ``{name, error}`` of the
    failed calls, in order), ``recovered`` (names of failed calls left out by ``ignore_recovered``),
    ``unreported`` (calls with neither a status nor an error).
    """

    version: ClassVar[str] = "1"
    required_fields: ClassVar[tuple[str, ...]] = ("actual_output", "execution_trace")

    def __init__(
        self,
        threshold: float = 1.0,
        ignore_recovered: bool = False,
        model: str | None = None,
        error_types: list[str] | None = None,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        self.ignore_recovered = check_flag("ignore_recovered", ignore_recovered)
        del model, error_types  # eval-ai-library's judge settings: nothing is asked here

    def config(self) -> dict[str, Any]:
        """Constructor arguments that change the score (threshold, name, ignore_recovered)."""
        return {"threshold": self.threshold, "name": self.name, "ignore_recovered": self.ignore_recovered}

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A problem on ``execution_trace`` when the case has none (None; ``[]`` is a trace without calls)."""
        if case.execution_trace is None:
            return [
                (
                    "execution_trace",
                    "is missing (ToolsErrorMetric reads the tool calls' status and error from the execution trace)",
                )
            ]
        return []

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Score each case from its trace (no request)."""
        return [self._score(case.execution_trace or []) for case in cases]

    def _score(self, trace: Sequence[TraceStep]) -> MetricResult:
        """The result of one trace."""
        calls = distinct_steps(trace, _TOOL)
        failures: list[tuple[int, TraceStep, list[TraceStep]]] = [
            (i, step, folded) for i, (step, folded) in enumerate(calls) if failed(step) or any(map(failed, folded))
        ]
        recovered: list[str] = []
        if self.ignore_recovered:
            kept = []
            for index, step, folded in failures:
                later = [
                    s
                    for s, f in calls[index + 1 :]
                    if s.name == step.name and not failed(s) and not any(map(failed, f))
                ]
                if later:
                    recovered.append(step.name or "")
                else:
                    kept.append((index, step, folded))
            failures = kept
        unreported = sum(1 for step, _ in calls if step.status is None and not step.error)
        total = len(calls)
        score = (total - len(failures)) / total if total else 1.0
        failed_log = [{"name": step.name, "error": _error_of(step, folded)} for _, step, folded in failures]
        if not total:
            reason = "No tool call in the execution trace: no tool error."
        elif not failures:
            reason = f"All {total} tool call(s) ran without error" + (
                f" ({len(recovered)} failed call(s) recovered by a later call of the same tool)." if recovered else "."
            )
        else:
            listed = "; ".join(f"{item['name']}: {item['error']}" for item in failed_log[:5])
            more = f" (and {len(failed_log) - 5} more)" if len(failed_log) > 5 else ""
            reason = f"{len(failures)} of {total} tool call(s) failed: {listed}{more}."
        log = {"tool_calls": total, "failed": failed_log, "recovered": recovered, "unreported": unreported}
        return MetricResult.scored(self.name, score, self.threshold, reason, log)


def _error_of(step: TraceStep, folded: Sequence[TraceStep]) -> str:
    """The error message of a failed call (its own, else a nested record's), or its error type, or ``error``."""
    for record in (step, *folded):
        if failed(record):
            return record.error or record.error_type or "error"
    return "error"
