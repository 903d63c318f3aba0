"""Agent metrics: what an agent did, read from its tool calls and execution trace; deterministic, no model.

One module per metric (docs/metrics/agent.md#agent-metrics); :class:`ToolCorrectnessMetric` lives with the
deterministic metrics, where it was first ported, and is re-exported here."""

from evaltasks.metrics.agent.loop_detection import LoopDetectionMetric
from evaltasks.metrics.agent.planning_quality import PlanningQualityMetric
from evaltasks.metrics.agent.tools_error import ToolsErrorMetric
from evaltasks.metrics.deterministic.tool_correctness import ToolCorrectnessMetric

__all__ = ["LoopDetectionMetric", "PlanningQualityMetric", "ToolCorrectnessMetric", "ToolsErrorMetric"]
