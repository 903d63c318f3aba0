"""Alias of :mod:`evaltasks.test_case` at eval-ai-library 0.8's module path (``eval_lib.testcases_schema``)."""

from evaltasks.test_case import ConversationalEvalTestCase, EvalTestCase, ToolCall, TraceStep

__all__ = ["ConversationalEvalTestCase", "EvalTestCase", "ToolCall", "TraceStep"]
