"""What the agent metrics read from an execution trace: its actions, each invocation counted once.

A step recorded twice (a decorated tool function inside a framework's own tool span; an OpenTelemetry
instrumentation under the SDK's) is one invocation, not a retry. The rules are structural, as eval-ai-library's
``eval_lib.tracing.spans.top_level_tool_calls``: a step is folded into another when it is nested (through
``parent_step_id``, at any depth) inside a call step (``tool_call``, ``retrieval``), or when its time window lies
inside the window of a same-named step of its type (two identical windows are one call only when they last longer
than zero: two instant records at the same moment may be two calls). Sibling repeats, one after another, are all
kept: genuine retries and loops are what the metrics must see
(docs/metrics/agent.md#execution-traces-as-the-metrics-read-them).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from evaltasks.test_case import ToolCall, TraceStep

CALL_TYPES = frozenset({"tool_call", "retrieval"})
"""Step types that are one call of something: what happens inside them belongs to the call."""

ACTION_TYPES = frozenset({"tool_call", "retrieval", "agent_step"})
"""Step types that are an agent's actions (eval-ai-library's LoopDetectionMetric's choice)."""

_EPS = 1e-9


def _window(step: TraceStep) -> tuple[float, float] | None:
    """(start, end) in seconds since the epoch, or None without a timestamp and a duration."""
    if step.timestamp is None or step.duration_ms is None:
        return None
    return step.timestamp, step.timestamp + step.duration_ms / 1000.0


def _inside(inner: tuple[float, float], outer: tuple[float, float]) -> bool:
    """Whether ``inner`` lies within ``outer`` (both closed intervals, with a float tolerance)."""
    return outer[0] - _EPS <= inner[0] and inner[1] <= outer[1] + _EPS


def _ancestors(step: TraceStep, by_id: dict[str, TraceStep]) -> list[TraceStep]:
    """The steps enclosing ``step`` through ``parent_step_id``, nearest first (a cycle of ids stops the walk)."""
    chain: list[TraceStep] = []
    seen = {step.step_id}
    parent = step.parent_step_id
    while parent is not None and parent in by_id and parent not in seen:
        seen.add(parent)
        chain.append(by_id[parent])
        parent = by_id[parent].parent_step_id
    return chain


def distinct_steps(trace: Sequence[TraceStep], types: frozenset[str]) -> list[tuple[TraceStep, list[TraceStep]]]:
    """The steps of ``trace`` whose type is in ``types``, each invocation once, in execution order.

    Returns (step, folded) pairs: ``folded`` holds the steps of ``types`` recorded for the same invocation (nested
    inside it, see the module docstring), so a caller can read an error a nested record carries. Order: by
    ``timestamp`` when every kept step has one (of two that start together the longer, enclosing one first;
    stable), else the trace's order.
    """
    by_id = {s.step_id: s for s in trace if s.step_id is not None}
    candidates = [s for s in trace if s.type in types]
    position = {id(s): i for i, s in enumerate(candidates)}  # a nested host is always a candidate itself
    same_kind: dict[tuple[str, str | None], list[int]] = {}
    for i, s in enumerate(candidates):
        same_kind.setdefault((s.type, s.name), []).append(i)
    host_of: dict[int, int] = {}  # candidate index -> the index of the candidate it is folded into
    for index, step in enumerate(candidates):
        host = next((a for a in _ancestors(step, by_id) if a.type in CALL_TYPES and a.type in types), None)
        if host is not None:
            host_of[index] = position[id(host)]
            continue
        window = _window(step)
        if window is None:
            continue
        for other_index in same_kind[(step.type, step.name)]:
            other_window = _window(candidates[other_index])
            if other_index == index or other_window is None or not _inside(window, other_window):
                continue
            if _inside(other_window, window) and (other_index > index or window[1] - window[0] <= _EPS):
                continue  # of two identical windows the first is kept; two zero-length ones may be two calls
            host_of[index] = other_index
            break
    folded: dict[int, list[TraceStep]] = {i: [] for i in range(len(candidates)) if i not in host_of}
    for index in host_of:
        root, seen = host_of[index], {index}
        while root in host_of and root not in seen:  # a chain of folds ends at a kept step (a cycle is dropped)
            seen.add(root)
            root = host_of[root]
        if root in folded:
            folded[root].append(candidates[index])
    kept = [(candidates[i], records) for i, records in folded.items()]
    if kept and all(step.timestamp is not None for step, _ in kept):
        kept.sort(key=lambda pair: (pair[0].timestamp or 0.0, -(pair[0].duration_ms or 0.0)))
    return kept


def arguments_of(step: TraceStep) -> dict[str, Any] | None:
    """A tool step's ``input`` as arguments: a mapping as it is, a string holding a JSON object parsed, else None."""
    value = step.input
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return dict(value) if isinstance(value, dict) else None


def input_key(step: TraceStep) -> str:
    """The step's input as compared (canonical JSON; JSON text holding an object or array is parsed first)."""
    value = step.input
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    return canonical(value)


def trace_calls(trace: Sequence[TraceStep]) -> list[ToolCall]:
    """The tool calls of ``trace`` (its ``tool_call`` steps, each invocation once), with their arguments."""
    return [
        ToolCall(name=step.name or "", arguments=arguments_of(step))
        for step, _ in distinct_steps(trace, frozenset({"tool_call"}))
    ]


def canonical(value: Any) -> str:
    """A JSON text identifying ``value`` (keys sorted; a whole float written as an integer, so 1 and 1.0 are one
    value while ``true`` and 1 stay two), for comparing arguments and inputs."""
    return json.dumps(_normalised(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _normalised(value: Any) -> Any:
    """``value`` with whole floats as ints, recursively (see :func:`canonical`)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {str(k): _normalised(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalised(v) for v in value]
    return value


def failed(step: TraceStep) -> bool:
    """Whether a step reports a failure: ``status`` ``error`` (any case) or a non-empty ``error``."""
    return (step.status or "").strip().lower() == "error" or bool(step.error)
