"""Execution traces: an agent's steps as :class:`~evaltasks.test_case.TraceStep` lists, from what tracers export.

- :func:`from_otel` reads an OpenTelemetry span export in OTLP JSON (``{"resourceSpans": [...]}``, what the
  OTLP/HTTP JSON exporter and the collector's file exporter write) whose spans follow the GenAI semantic
  conventions (``gen_ai.operation.name``, ``gen_ai.tool.name``, ``gen_ai.tool.call.arguments``...).
- :func:`from_openai_agents` reads the OpenAI Agents SDK's trace JSON: the items its tracing exporter sends
  (``{"data": [...]}``: a ``trace`` object and its ``trace.span`` objects, each from ``Span.export()``).
- :func:`as_records` reads the ``execution_trace``, ``tool_calls`` and ``expected_tool_calls`` values of a
  dataset row or a target's response.

The mapping of each format to a step is docs/agents.md#converting-exported-traces. Nothing here imports the SDKs:
the converters read their JSON.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from evaltasks.errors import Problem, json_type_name
from evaltasks.test_case import ToolCall, TraceStep

# gen_ai.operation.name -> TraceStep.type (OpenTelemetry GenAI semantic conventions' well-known values)
OTEL_OPERATION_TYPES = {
    "execute_tool": "tool_call",
    "chat": "llm_call",
    "text_completion": "llm_call",
    "generate_content": "llm_call",
    "embeddings": "llm_call",
    "invoke_agent": "agent_step",
    "create_agent": "agent_step",
    "invoke_workflow": "agent_step",
    "retrieval": "retrieval",
}

# OpenAI Agents SDK span_data.type -> TraceStep.type (other types are kept as they are)
OPENAI_AGENTS_TYPES = {"function": "tool_call", "generation": "llm_call", "response": "llm_call", "agent": "agent_step"}


def as_records(name: str, value: Any) -> list[Any] | Problem:
    """A record field's value (``execution_trace``: :class:`TraceStep` items; ``tool_calls``,
    ``expected_tool_calls``: :class:`ToolCall` items) from a list of objects or a string holding one as JSON.

    Returns the records, or a :class:`~evaltasks.errors.Problem` whose ``field`` is the path below the field
    (``[2].duration_ms``; ``""`` for the whole value) and whose ``message`` says what is wrong (its ``source``
    and ``location`` are empty: the caller names the file and row).
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            return Problem("", "", "", f"must hold a JSON list of objects: invalid JSON ({exc.msg})")
    if not isinstance(value, list):
        return Problem("", "", "", f"must be a list of objects, got {json_type_name(value)}")
    model: type[TraceStep] | type[ToolCall] = TraceStep if name == "execution_trace" else ToolCall
    records: list[Any] = []
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            return Problem("", "", f"[{index}]", f"must be an object, got {json_type_name(item)}")
        try:
            records.append(model.model_validate(item))
        except ValidationError as exc:
            error = exc.errors()[0]
            path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"])
            return Problem("", "", f"[{index}]{path}", error["msg"])
    if model is TraceStep:
        return _trace_problem(records) or records
    return records


STEP_TYPES = ("tool_call", "llm_call", "reasoning", "retrieval", "agent_step")
"""The step types the agent metrics read (docs/agents.md#execution-traces); other types are kept as they are."""
STEP_STATUSES = ("success", "error")
"""A step's ``status``: one of these, or absent (not reported)."""


def _trace_problem(steps: list[TraceStep]) -> Problem | None:
    """What makes a trace unusable, as a :class:`~evaltasks.errors.Problem` (field: the path below the field), or
    None: a ``status`` other than success/error (a tracer's own word would read as success), a ``type`` one typo
    away from a known one (``tool_cal``: its failed call would go unseen), a repeated ``step_id``, or a
    ``parent_step_id`` naming no step of the trace."""
    ids: dict[str, int] = {}
    for index, step in enumerate(steps):
        if step.status is not None and step.status not in STEP_STATUSES:
            return Problem(
                "", "", f"[{index}].status", f"must be 'success' or 'error' (or left out), got '{step.status}'"
            )
        if step.type not in STEP_TYPES:
            close = difflib.get_close_matches(step.type, STEP_TYPES, n=1, cutoff=0.8)
            if close:
                return Problem(
                    "", "", f"[{index}].type", f"'{step.type}' is not a step type: did you mean '{close[0]}'?"
                )
        if step.step_id is not None:
            if step.step_id in ids:
                return Problem(
                    "", "", f"[{index}].step_id", f"'{step.step_id}' is the id of step {ids[step.step_id]} too"
                )
            ids[step.step_id] = index
    for index, step in enumerate(steps):
        if step.parent_step_id is not None and step.parent_step_id not in ids:
            return Problem("", "", f"[{index}].parent_step_id", f"'{step.parent_step_id}' is no step_id of the trace")
    return None


def _loaded(export: Any) -> Any:
    """``export`` parsed when it is JSON text (str or bytes), else as it is."""
    if isinstance(export, (str, bytes)):
        return json.loads(export)
    return export


def _maybe_json(value: Any) -> Any:
    """A string holding a JSON object or array parsed; anything else as it is."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _one_trace(items: list[tuple[str | None, TraceStep]], trace_id: str | None) -> list[TraceStep]:
    """The steps of one trace: those of ``trace_id``, or all when the export holds one trace; in start order.

    Raises:
        ValueError: several traces and no ``trace_id``, or no step of ``trace_id`` (naming the ids present).
    """
    ids = sorted({tid for tid, _ in items if tid is not None})
    if trace_id is not None:
        items = [pair for pair in items if pair[0] == trace_id]
        if not items:
            raise ValueError(f"no span of trace {trace_id!r} in the export (traces: {', '.join(ids) or 'none'})")
    elif len(ids) > 1:
        raise ValueError(f"the export holds {len(ids)} traces ({', '.join(ids)}): pass trace_id to pick one")
    steps = [step for _, step in items]
    if all(step.timestamp is not None for step in steps):  # an enclosing step (longer) before what it holds
        steps.sort(key=lambda step: (step.timestamp or 0.0, -(step.duration_ms or 0.0)))
    return steps


# -- OpenTelemetry -----------------------------------------------------------------------------------------


def _otel_value(value: Mapping[str, Any]) -> Any:
    """An OTLP JSON ``AnyValue`` as a Python value (``intValue`` is a string in OTLP JSON)."""
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [_otel_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return _otel_attributes(value["kvlistValue"].get("values", []))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def _otel_attributes(attributes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """OTLP JSON ``attributes`` (a list of ``{key, value}``) as a dict."""
    return {a["key"]: _otel_value(a.get("value") or {}) for a in attributes if "key" in a}


def _otel_spans(export: Any) -> list[Mapping[str, Any]]:
    """Every span of an OTLP JSON export (one ``ExportTraceServiceRequest``, or a list of them, e.g. the lines
    of a collector's file exporter)."""
    requests = export if isinstance(export, list) else [export]
    spans: list[Mapping[str, Any]] = []
    for request in requests:
        if not isinstance(request, Mapping) or "resourceSpans" not in request:
            raise ValueError("not an OTLP JSON trace export: expected an object with 'resourceSpans'")
        for resource in request["resourceSpans"] or []:
            for scope in resource.get("scopeSpans") or resource.get("instrumentationLibrarySpans") or []:
                spans.extend(scope.get("spans") or [])
    return spans


def _otel_step(span: Mapping[str, Any]) -> TraceStep:
    """One OTLP span as a step (docs/agents.md#converting-exported-traces)."""
    attrs = _otel_attributes(span.get("attributes") or [])
    operation = attrs.get("gen_ai.operation.name")
    kind = OTEL_OPERATION_TYPES.get(str(operation), "tool_call" if "gen_ai.tool.name" in attrs else "span")
    name: Any = {
        "tool_call": attrs.get("gen_ai.tool.name"),
        "agent_step": attrs.get("gen_ai.agent.name"),
        "llm_call": attrs.get("gen_ai.request.model") or attrs.get("gen_ai.response.model"),
        "retrieval": attrs.get("gen_ai.data_source.id"),
    }.get(kind)
    inputs = {
        "tool_call": "gen_ai.tool.call.arguments",
        "llm_call": "gen_ai.input.messages",
        "retrieval": "gen_ai.retrieval.query.text",
    }
    outputs = {
        "tool_call": "gen_ai.tool.call.result",
        "llm_call": "gen_ai.output.messages",
        "retrieval": "gen_ai.retrieval.documents",
    }
    status = span.get("status") or {}
    exception = next(
        (_otel_attributes(e.get("attributes") or []) for e in span.get("events") or [] if e.get("name") == "exception"),
        {},
    )
    code = status.get("code")
    error_type = attrs.get("error.type") or exception.get("exception.type")
    is_error = code in (2, "STATUS_CODE_ERROR", "ERROR") or error_type is not None
    start, end = span.get("startTimeUnixNano"), span.get("endTimeUnixNano")
    metadata = {
        "span_name": span.get("name"),
        "operation": operation,
        "call_id": attrs.get("gen_ai.tool.call.id"),
        "agent_id": attrs.get("gen_ai.agent.id"),
    }
    return TraceStep(
        type=kind,
        step_id=span.get("spanId") or None,
        name=str(name or span.get("name") or kind),
        input=_maybe_json(attrs.get(inputs.get(kind, ""))),
        output=_maybe_json(attrs.get(outputs.get(kind, ""))),
        status="error" if is_error else "success",
        error=(status.get("message") or exception.get("exception.message") or None) if is_error else None,
        error_type=str(error_type) if error_type is not None else None,
        duration_ms=(int(end) - int(start)) / 1e6 if start and end and int(end) >= int(start) else None,
        timestamp=int(start) / 1e9 if start else None,
        parent_step_id=span.get("parentSpanId") or None,
        metadata={k: v for k, v in metadata.items() if v is not None} or None,
    )


def from_otel(export: Any, trace_id: str | None = None) -> list[TraceStep]:
    """Convert an OpenTelemetry span export (OTLP JSON, GenAI semantic conventions) to an execution trace.

    Args:
        export: the export as parsed JSON (a dict with ``resourceSpans``, or a list of them) or as JSON text.
        trace_id: the trace to take (hex, as in the export) when it holds several.

    Returns:
        one step per span, in start-time order (of two that start together, the longer first): ``execute_tool`` spans are ``tool_call`` steps named by
        ``gen_ai.tool.name`` with ``gen_ai.tool.call.arguments`` / ``.result`` as input / output (JSON text
        parsed); ``chat`` / ``text_completion`` / ``generate_content`` / ``embeddings`` are ``llm_call``;
        ``invoke_agent`` / ``create_agent`` / ``invoke_workflow`` are ``agent_step`` (named by
        ``gen_ai.agent.name``); ``retrieval`` is ``retrieval``; other spans are ``span`` steps (they still count
        in a trace's wall time). Status ``ERROR`` or an ``error.type`` attribute make a step ``error``, its
        message from the status or the ``exception`` event.

    Raises:
        ValueError: not an OTLP JSON trace export, invalid JSON text, or several traces and no ``trace_id``.
    """
    spans = _otel_spans(_loaded(export))
    return _one_trace([(span.get("traceId") or None, _otel_step(span)) for span in spans], trace_id)


# -- OpenAI Agents SDK -------------------------------------------------------------------------------------


def _seconds(iso: Any) -> float | None:
    """An ISO 8601 timestamp (the SDK's ``started_at`` / ``ended_at``) as seconds since the epoch."""
    if not isinstance(iso, str) or not iso:
        return None
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _agents_items(export: Any) -> list[Mapping[str, Any]]:
    """The exported items: ``{"data": [...]}`` (the exporter's payload), a list of items, or a trace object with
    its spans under ``spans``."""
    if isinstance(export, Mapping) and isinstance(export.get("data"), list):
        return list(export["data"])
    if isinstance(export, Mapping) and isinstance(export.get("spans"), list):
        return [export, *export["spans"]]
    if isinstance(export, list):
        return list(export)
    raise ValueError("not an OpenAI Agents SDK trace export: expected {'data': [...]}, a list, or a trace with 'spans'")


def _agents_step(span: Mapping[str, Any]) -> TraceStep:
    """One exported ``trace.span`` as a step (docs/agents.md#converting-exported-traces)."""
    data = span.get("span_data") or {}
    sdk_type = str(data.get("type") or "custom")
    kind = OPENAI_AGENTS_TYPES.get(sdk_type, sdk_type)
    if sdk_type == "handoff":
        name = f"{data.get('from_agent')} -> {data.get('to_agent')}"
    elif sdk_type == "generation":
        name = data.get("model") or "generation"
    elif sdk_type == "mcp_tools":
        name = data.get("server") or "mcp_tools"
    else:
        name = data.get("name") or sdk_type
    error = span.get("error") or None
    start, end = _seconds(span.get("started_at")), _seconds(span.get("ended_at"))
    extra = {k: v for k, v in data.items() if k not in ("type", "name", "input", "output") and v is not None}
    return TraceStep(
        type=kind,
        step_id=span.get("id") or None,
        name=str(name),
        input=_maybe_json(data.get("input")),
        output=_maybe_json(data.get("output")),
        status="error" if error else ("success" if end is not None else None),
        error=str(error.get("message") or "error") if isinstance(error, Mapping) else (str(error) if error else None),
        duration_ms=(end - start) * 1000.0 if start is not None and end is not None and end >= start else None,
        timestamp=start,
        parent_step_id=span.get("parent_id") or None,
        metadata={"sdk_type": sdk_type, **extra},
    )


def from_openai_agents(export: Any, trace_id: str | None = None) -> list[TraceStep]:
    """Convert an OpenAI Agents SDK trace export to an execution trace.

    Args:
        export: parsed JSON or JSON text: the tracing exporter's payload ``{"data": [items]}``, a list of items,
            or a ``trace`` object holding its spans under ``spans``; items are ``Trace.export()`` /
            ``Span.export()`` objects (``object``: ``trace`` / ``trace.span``).
        trace_id: the trace to take (``trace_...``) when it holds several.

    Returns:
        one step per span, in start order: ``function`` spans are ``tool_call`` steps (name, ``input`` — the
        arguments' JSON text parsed — and ``output``); ``generation`` and ``response`` are ``llm_call``
        (``generation`` named by its model); ``agent`` is ``agent_step``; ``handoff``, ``guardrail``,
        ``custom``, ``mcp_tools``... keep their type. A span's ``error`` (``{message, data}``) makes it an
        ``error`` step; a finished span without one is ``success``.

    Raises:
        ValueError: not such an export, invalid JSON text, a bad timestamp, or several traces and no
            ``trace_id``.
    """
    items = _agents_items(_loaded(export))
    spans = [item for item in items if isinstance(item, Mapping) and item.get("object", "trace.span") == "trace.span"]
    spans = [span for span in spans if "span_data" in span]
    return _one_trace([(span.get("trace_id") or None, _agents_step(span)) for span in spans], trace_id)
