"""Targets that return an execution trace and tool calls: the python and http targets, the output store and the
generate stage filling the case (docs/agents.md#targets-that-return-a-trace). The http app is a real server on
127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from evaltasks import EvalTestCase, ToolCall, ToolCorrectnessMetric, ToolsErrorMetric, TraceStep
from evaltasks.engine.generation import check_generated
from evaltasks.targets import OutputStore, PythonTarget, TargetError, generate_batch
from evaltasks.targets.http import HttpTarget
from tests.loopback_server import LoopbackHandler, LoopbackServer

TRACE = [
    {"type": "tool_call", "name": "search", "input": {"q": "paris"}, "status": "success", "duration_ms": 12.5},
    {"type": "tool_call", "name": "book", "input": {"id": 3}, "status": "error", "error": "sold out"},
]


class _AgentHandler(LoopbackHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        if self.path == "/agent":
            calls = [{"name": s["name"], "arguments": s["input"]} for s in TRACE]
            self.send_json(200, {"answer": f"done: {body['input']}", "run": {"steps": TRACE, "calls": calls}})
        elif self.path == "/bad-trace":
            self.send_json(200, {"answer": "x", "run": {"steps": [{"type": "tool_call", "duration_ms": "slow"}]}})
        else:
            self.send_json(404, {"error": "no route"})


class AgentApp(LoopbackServer):
    handler: ClassVar[type[LoopbackHandler]] = _AgentHandler
    thread_name: ClassVar[str] = "agent-app"


@pytest.fixture
def app() -> Any:
    with AgentApp() as server:
        yield server


def _cases() -> list[EvalTestCase]:
    return [EvalTestCase(actual_output="", input="book a hotel", name="c", expected_tools=["search", "book"])]


def test_http_target_reads_the_trace_and_calls_and_the_store_keeps_them(app: AgentApp, tmp_path: Path) -> None:
    target = HttpTarget(app.url + "/agent", output="answer", execution_trace="run.steps", tool_calls="run.calls")
    [generated] = generate_batch(target, _cases(), store=OutputStore(tmp_path), refresh=False)
    assert generated.error is None
    filled = generated.case
    assert filled.execution_trace == [TraceStep.model_validate(step) for step in TRACE]
    assert filled.tool_calls == [
        ToolCall(name="search", arguments={"q": "paris"}),
        ToolCall(name="book", arguments={"id": 3}),
    ]
    [again] = generate_batch(target, _cases(), store=OutputStore(tmp_path), refresh=False)  # read from the store
    assert not again.requested and again.case.execution_trace == filled.execution_trace
    assert again.case.tool_calls == filled.tool_calls
    errors = ToolsErrorMetric().score_batch([filled])[0]
    assert (errors.score, errors.evaluation_log["failed"]) == (0.5, [{"name": "book", "error": "sold out"}])
    assert ToolCorrectnessMetric(exact_match=True).score_batch([filled])[0].score == 1.0


def test_http_target_names_the_bad_step(app: AgentApp) -> None:
    target = HttpTarget(app.url + "/bad-trace", output="answer", execution_trace="run.steps")
    with pytest.raises(
        TargetError, match=r"execution_trace 'run.steps'\[0\].duration_ms Input should be a valid number"
    ):
        target.generate(_cases()[0])
    missing = HttpTarget(app.url + "/agent", output="answer", execution_trace="run.trace")
    [generated] = generate_batch(missing, _cases(), store=None, refresh=True)
    assert generated.error == "the http target http: no 'trace' in run (keys: steps, calls)"


def test_python_target_mapping_fills_the_case() -> None:
    def agent(case: EvalTestCase) -> dict[str, Any]:
        return {
            "output": "ok",
            "execution_trace": TRACE[:1],
            "tool_calls": [{"name": "search"}],
            "agent_confidence": 0.75,
        }

    [generated] = generate_batch(PythonTarget(agent, name="agent"), _cases(), store=None, refresh=True)
    filled = generated.case
    assert filled.execution_trace == [TraceStep.model_validate(TRACE[0])]
    assert (filled.tool_calls, filled.agent_confidence) == ([ToolCall(name="search")], 0.75)
    # a target that returns no trace: the trace metric names the field after generation
    [plain] = generate_batch(PythonTarget(lambda case: "ok", name="plain"), _cases(), store=None, refresh=True)
    assert check_generated(plain.case, [ToolsErrorMetric()]) == (
        "the target's output cannot be scored: field 'execution_trace' is missing (ToolsErrorMetric reads the "
        "tool calls' status and error from the execution trace) (needed by ToolsErrorMetric)"
    )


def test_chat_target_tool_calls_carry_their_arguments(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A chat model's function calls fill ``tool_calls`` with their arguments (JSON text parsed), so
    ToolCorrectnessMetric can compare them (the loopback server speaks the OpenAI chat API)."""
    from evaltasks.targets.chat import ChatTarget
    from tests.chat_server import Answer, ChatServer

    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}}]
    answer = Answer("", tool_calls=["search", "book"], tool_arguments={"search": '{"city": "Paris"}', "book": "{oops"})
    (tmp_path / "p.txt").write_text("### system\nYou book hotels.\n### user\n{{ input }}\n", encoding="utf-8")
    with ChatServer(responder=lambda request: answer) as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        target = ChatTarget(
            model="bot-model", prompt=tmp_path / "p.txt", options={"base_url": server.base_url}, tools=tools
        )
        out = target.generate(_cases()[0])
    assert out.tool_calls == [ToolCall(name="search", arguments={"city": "Paris"}), ToolCall(name="book")]
    case = _cases()[0].model_copy(
        update={
            "tool_calls": out.tool_calls,
            "expected_tool_calls": [ToolCall(name="search", arguments={"city": "Paris"})],
        }
    )
    assert ToolCorrectnessMetric(match_arguments=True).score_batch([case])[0].score == 1.0
