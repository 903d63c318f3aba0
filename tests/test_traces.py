"""evaltasks.traces: OpenTelemetry GenAI span exports and OpenAI Agents SDK traces to execution traces
(docs/agents.md#converting-exported-traces).

The OpenTelemetry spans are made by the real OpenTelemetry SDK, with the attribute names of the installed
``opentelemetry-semantic-conventions`` package (not strings copied from the converter), and written as OTLP
JSON through the real OTLP protobuf messages (``opentelemetry-proto``) and protobuf's JSON mapping; ids are then
hex, as the OTLP/JSON specification writes them (the plain protobuf mapping would write base64). The OpenAI
Agents SDK is not installed here: its export is written out by hand, field for field as its ``Span.export()``
and ``FunctionSpanData.export()`` produce it (agents/tracing/spans.py, span_data.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import error_attributes as err
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.trace import Status, StatusCode

from evaltasks import (
    EvalTestCase,
    LoopDetectionMetric,
    PlanningQualityMetric,
    ToolCall,
    ToolCorrectnessMetric,
    ToolsErrorMetric,
)
from evaltasks.traces import as_records, from_openai_agents, from_otel

SECOND = 1_000_000_000  # ns
T0 = 1_700_000_000 * SECOND


def _any_value(value: Any) -> common_pb2.AnyValue:
    if isinstance(value, bool):
        return common_pb2.AnyValue(bool_value=value)
    if isinstance(value, int):
        return common_pb2.AnyValue(int_value=value)
    if isinstance(value, float):
        return common_pb2.AnyValue(double_value=value)
    if isinstance(value, (list, tuple)):
        return common_pb2.AnyValue(array_value=common_pb2.ArrayValue(values=[_any_value(v) for v in value]))
    return common_pb2.AnyValue(string_value=str(value))


def _hex_ids(document: Any) -> Any:
    """The OTLP/JSON rule: traceId, spanId, parentSpanId as hex, where protobuf's JSON mapping writes base64."""
    if isinstance(document, dict):
        return {
            k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") and v else _hex_ids(v))
            for k, v in document.items()
        }
    if isinstance(document, list):
        return [_hex_ids(v) for v in document]
    return document


def otlp_json(spans: list[ReadableSpan]) -> dict[str, Any]:
    """``spans`` as one ExportTraceServiceRequest in OTLP JSON."""
    messages = []
    for span in spans:
        context, parent = span.get_span_context(), span.parent
        messages.append(
            trace_pb2.Span(
                trace_id=context.trace_id.to_bytes(16, "big"),
                span_id=context.span_id.to_bytes(8, "big"),
                parent_span_id=parent.span_id.to_bytes(8, "big") if parent else b"",
                name=span.name,
                kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=span.start_time,
                end_time_unix_nano=span.end_time,
                attributes=[common_pb2.KeyValue(key=k, value=_any_value(v)) for k, v in span.attributes.items()],
                events=[
                    trace_pb2.Span.Event(
                        name=event.name,
                        time_unix_nano=event.timestamp,
                        attributes=[
                            common_pb2.KeyValue(key=k, value=_any_value(v)) for k, v in event.attributes.items()
                        ],
                    )
                    for event in span.events
                ],
                status=trace_pb2.Status(
                    code={StatusCode.UNSET: 0, StatusCode.OK: 1, StatusCode.ERROR: 2}[span.status.status_code],
                    message=span.status.description or "",
                ),
            )
        )
    request = trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=messages)])]
    )
    return _hex_ids(MessageToDict(request))


def _agent_run_spans() -> list[ReadableSpan]:
    """An agent run: invoke_agent (0-10 s) > chat (0-1 s), execute_tool search (1-4 s) > a nested execute_tool
    search record (1.1-3.9 s), execute_tool book (5-6 s, failed with an exception), chat (6-7 s)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("agent")
    agent = tracer.start_span(
        "invoke_agent travel",
        start_time=T0,
        attributes={gen_ai.GEN_AI_OPERATION_NAME: "invoke_agent", gen_ai.GEN_AI_AGENT_NAME: "travel"},
    )
    with trace.use_span(agent, end_on_exit=False):
        chat = tracer.start_span(
            "chat gpt-4o",
            start_time=T0,
            attributes={gen_ai.GEN_AI_OPERATION_NAME: "chat", gen_ai.GEN_AI_REQUEST_MODEL: "gpt-4o"},
        )
        chat.end(end_time=T0 + SECOND)
        search = tracer.start_span(
            "execute_tool search",
            start_time=T0 + SECOND,
            attributes={
                gen_ai.GEN_AI_OPERATION_NAME: "execute_tool",
                gen_ai.GEN_AI_TOOL_NAME: "search",
                gen_ai.GEN_AI_TOOL_CALL_ID: "call_1",
                gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"city": "Paris"}),
                gen_ai.GEN_AI_TOOL_CALL_RESULT: json.dumps({"hotels": 3}),
            },
        )
        with trace.use_span(search, end_on_exit=False):
            inner = tracer.start_span(
                "execute_tool search",
                start_time=T0 + 11 * SECOND // 10,
                attributes={
                    gen_ai.GEN_AI_OPERATION_NAME: "execute_tool",
                    gen_ai.GEN_AI_TOOL_NAME: "search",
                    gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"city": "Paris"}),
                },
            )
            inner.end(end_time=T0 + 39 * SECOND // 10)
        search.end(end_time=T0 + 4 * SECOND)
        book = tracer.start_span(
            "execute_tool book",
            start_time=T0 + 5 * SECOND,
            attributes={
                gen_ai.GEN_AI_OPERATION_NAME: "execute_tool",
                gen_ai.GEN_AI_TOOL_NAME: "book",
                gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"hotel": "Le Marais", "nights": 2}),
                err.ERROR_TYPE: "PaymentDeclined",
            },
        )
        book.record_exception(RuntimeError("card declined"), timestamp=T0 + 55 * SECOND // 10)
        book.set_status(Status(StatusCode.ERROR, "card declined"))
        book.end(end_time=T0 + 6 * SECOND)
        answer = tracer.start_span(
            "chat gpt-4o",
            start_time=T0 + 6 * SECOND,
            attributes={gen_ai.GEN_AI_OPERATION_NAME: "chat", gen_ai.GEN_AI_REQUEST_MODEL: "gpt-4o"},
        )
        answer.end(end_time=T0 + 7 * SECOND)
    agent.end(end_time=T0 + 10 * SECOND)
    return list(exporter.get_finished_spans())  # in end order: children before their parents


def test_otel_genai_export_converts_to_steps_in_start_order() -> None:
    spans = _agent_run_spans()
    export = otlp_json(spans)
    steps = from_otel(json.dumps(export))  # JSON text or parsed, the same
    assert steps == from_otel(export)
    assert [(s.type, s.name) for s in steps] == [
        ("agent_step", "travel"),
        ("llm_call", "gpt-4o"),
        ("tool_call", "search"),
        ("tool_call", "search"),
        ("tool_call", "book"),
        ("llm_call", "gpt-4o"),
    ]
    agent, _, search, inner, book, _ = steps
    assert (agent.duration_ms, agent.timestamp, agent.parent_step_id) == (10_000, 1_700_000_000, None)
    assert (search.input, search.output, search.status, search.metadata["call_id"]) == (
        {"city": "Paris"},
        {"hotels": 3},
        "success",
        "call_1",
    )
    assert search.parent_step_id == agent.step_id == format(spans[-1].get_span_context().span_id, "016x")
    assert inner.parent_step_id == search.step_id
    assert (book.status, book.error, book.error_type, book.duration_ms) == (
        "error",
        "card declined",
        "PaymentDeclined",
        1000,
    )


def test_converted_otel_trace_scores_as_the_metrics_define() -> None:
    steps = from_otel(otlp_json(_agent_run_spans()))
    case = EvalTestCase(
        actual_output="Booked?",
        execution_trace=steps,
        expected_tools=["search", "book"],
        expected_tool_calls=[
            ToolCall(name="search", arguments={"city": "Paris"}),
            ToolCall(name="book", arguments={"nights": 2}),
        ],
    )
    errors = ToolsErrorMetric().score_batch([case])[0]
    assert (errors.score, errors.evaluation_log["failed"]) == (0.5, [{"name": "book", "error": "card declined"}])
    assert ToolCorrectnessMetric(exact_match=True).score_batch([case])[0].score == 1.0  # the nested search once
    assert ToolCorrectnessMetric(match_arguments=True).score_batch([case])[0].score == 1.0
    assert LoopDetectionMetric().score_batch([case])[0].evaluation_log["actions"] == 3  # agent, search, book
    planning = PlanningQualityMetric().score_batch([case])[0].evaluation_log
    # 10 s wall time; planning = the agent span's own time: 10 - 1 - 3 - 1 - 1 = 4 s
    assert (planning["total_ms"], planning["planning_ms"]) == (10_000, 4_000)


def test_an_otel_export_with_several_traces_needs_a_trace_id() -> None:
    first, second = otlp_json(_agent_run_spans()), otlp_json(_agent_run_spans())
    both = [first, second]  # two requests, as a file exporter's lines
    with pytest.raises(ValueError, match="the export holds 2 traces"):
        from_otel(both)
    wanted = first["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    assert len(from_otel(both, trace_id=wanted)) == 6
    with pytest.raises(ValueError, match="no span of trace 'ff'"):
        from_otel(both, trace_id="ff")
    with pytest.raises(ValueError, match="not an OTLP JSON trace export"):
        from_otel({"spans": []})


def _agents_span(span_id: str, parent: str | None, data: dict, start: str, end: str, error: dict | None = None) -> dict:
    return {
        "object": "trace.span",
        "id": span_id,
        "trace_id": "trace_0123456789abcdef0123456789abcdef",
        "parent_id": parent,
        "started_at": start,
        "ended_at": end,
        "span_data": data,
        "error": error,
    }


AGENTS_EXPORT = {
    "data": [
        {
            "object": "trace",
            "id": "trace_0123456789abcdef0123456789abcdef",
            "workflow_name": "Agent workflow",
            "group_id": None,
            "metadata": None,
        },
        _agents_span(
            "span_fn1",
            "span_agent",
            {"type": "function", "name": "get_weather", "input": '{"city":"Oslo"}', "output": "rain", "mcp_data": None},
            "2026-12-06T10:00:01.000000+00:00",
            "2026-12-06T10:00:01.250000+00:00",
        ),
        _agents_span(
            "span_fn2",
            "span_agent",
            {"type": "function", "name": "get_weather", "input": '{"city":"Oslo"}', "output": None, "mcp_data": None},
            "2026-12-06T10:00:02.000000+00:00",
            "2026-12-06T10:00:02.500000+00:00",
            error={"message": "Error running tool", "data": {"tool_name": "get_weather", "error": "timeout"}},
        ),
        _agents_span(
            "span_gen",
            "span_agent",
            {"type": "generation", "input": [], "output": [], "model": "gpt-4o", "model_config": {}, "usage": {}},
            "2026-12-06T10:00:00.100000+00:00",
            "2026-12-06T10:00:00.900000+00:00",
        ),
        _agents_span(
            "span_handoff",
            "span_agent",
            {"type": "handoff", "from_agent": "triage", "to_agent": "weather"},
            "2026-12-06T10:00:03.000000+00:00",
            "2026-12-06T10:00:03.000000+00:00",
        ),
        _agents_span(
            "span_agent",
            None,
            {
                "type": "agent",
                "name": "triage",
                "handoffs": ["weather"],
                "tools": ["get_weather"],
                "output_type": "str",
            },
            "2026-12-06T10:00:00.000000+00:00",
            "2026-12-06T10:00:04.000000+00:00",
        ),
    ]
}


def test_openai_agents_trace_converts_to_steps() -> None:
    steps = from_openai_agents(AGENTS_EXPORT)
    assert [(s.type, s.name, s.status) for s in steps] == [
        ("agent_step", "triage", "success"),
        ("llm_call", "gpt-4o", "success"),
        ("tool_call", "get_weather", "success"),
        ("tool_call", "get_weather", "error"),
        ("handoff", "triage -> weather", "success"),
    ]
    agent, _, first, second, _ = steps
    assert (agent.duration_ms, agent.step_id, first.parent_step_id) == (4000, "span_agent", "span_agent")
    assert (first.input, first.output, first.duration_ms) == ({"city": "Oslo"}, "rain", 250)
    assert (second.error, second.metadata["sdk_type"]) == ("Error running tool", "function")
    # the other accepted shapes: a list of items, a trace object holding its spans, JSON text
    assert from_openai_agents(AGENTS_EXPORT["data"]) == steps
    assert from_openai_agents({**AGENTS_EXPORT["data"][0], "spans": AGENTS_EXPORT["data"][1:]}) == steps
    assert from_openai_agents(json.dumps(AGENTS_EXPORT)) == steps
    errors = ToolsErrorMetric().score_batch([EvalTestCase(actual_output="x", execution_trace=steps)])[0]
    assert errors.score == 0.5


def test_as_records_names_the_item_and_key_of_a_bad_record() -> None:
    good = as_records("execution_trace", '[{"type": "tool_call", "name": "a", "duration_ms": 5}]')
    assert isinstance(good, list) and good[0].duration_ms == 5
    problem = as_records("execution_trace", [{"type": "tool_call"}, {"type": "tool_call", "duration_ms": -1}])
    assert not isinstance(problem, list)
    assert (problem.field, problem.message) == ("[1].duration_ms", "Input should be greater than or equal to 0")
    unknown = as_records("tool_calls", [{"name": "a", "args": {}}])
    assert not isinstance(unknown, list) and unknown.field == "[0].args"
    assert as_records("tool_calls", "{oops").message.startswith("must hold a JSON list of objects")  # type: ignore[union-attr]
    assert as_records("tool_calls", {"name": "a"}).message == "must be a list of objects, got object"  # type: ignore[union-attr]
