"""Alias of eval-ai-library 0.8's ``eval_lib.agent_metrics`` module path."""

from evaltasks.metrics.agent.tools_error import ToolsErrorMetric
from evaltasks.metrics.deterministic.tool_correctness import ToolCorrectnessMetric

__all__ = ["ToolCorrectnessMetric", "ToolsErrorMetric"]
