"""ChatTarget against the loopback chat server (tests/chat_server.py, the OpenAI chat API on 127.0.0.1): the
rendered prompt, parameters, usage and cost, tool calls, the store (a one-line prompt edit regenerates only the
cases it changes), faults (429/5xx retried by the shared client, garbage, 401), and the suite's `chat:` entry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evaltasks.errors import ConfigError, CredentialsError
from evaltasks.inputs.suite import load_suite
from evaltasks.judges.runtime import openai_client
from evaltasks.targets import OutputStore, TargetError, generate_batch, generate_case
from evaltasks.targets.chat import ChatTarget, PromptFileError
from evaltasks.test_case import EvalTestCase
from tests.chat_server import Answer, ChatRequest, ChatServer, usage_tokens

PROMPT = """### system
You are a support bot. Answer in {{ lang }}.

### user
Question: {{ input }}
{% if lang == "fr" %}Réponds poliment.{% endif %}
"""


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    with ChatServer(responder=lambda r: f"echo: {r.user.splitlines()[0]}", retry_after_s=0) as chat:
        monkeypatch.setenv("OPENAI_API_KEY", chat.api_key)
        yield chat


def write_prompt(tmp_path: Path, text: str = PROMPT) -> Path:
    path = tmp_path / "answer.md"
    path.write_text(text, encoding="utf-8")
    return path


def chat(server: ChatServer, prompt: Path, **kwargs: Any) -> ChatTarget:
    options = {"base_url": server.base_url, "prices": {"bot-model": {"input": 1.0, "output": 2.0}}}
    options.update(kwargs.pop("options", {}))
    return ChatTarget(model="bot-model", prompt=prompt, options=options, **kwargs)


def cases(*langs: str) -> list[EvalTestCase]:
    return [
        EvalTestCase(actual_output="", input=f"q{i}?", name=f"c{i}", vars={"lang": lang})
        for i, lang in enumerate(langs)
    ]


def test_the_rendered_prompt_parameters_usage_and_cost(server: ChatServer, tmp_path: Path) -> None:
    target = chat(server, write_prompt(tmp_path), temperature=0, seed=7, max_tokens=50)
    out = target.generate(cases("fr")[0])
    [request] = server.requests
    assert request.body["messages"] == [
        {"role": "system", "content": "You are a support bot. Answer in fr."},
        {"role": "user", "content": "Question: q0?\nRéponds poliment."},
    ]
    assert (request.body["model"], request.body["temperature"], request.body["seed"], request.body["max_tokens"]) == (
        "bot-model",
        0,
        7,
        50,
    )
    assert "tools" not in request.body
    assert out.output == "echo: Question: q0?"
    prompt_tokens = usage_tokens("You are a support bot. Answer in fr.") + usage_tokens(
        "Question: q0?\nRéponds poliment."
    )
    completion_tokens = usage_tokens("echo: Question: q0?")
    assert (out.input_tokens, out.output_tokens) == (prompt_tokens, completion_tokens)
    assert out.cost == pytest.approx((prompt_tokens * 1.0 + completion_tokens * 2.0) / 1e6)
    assert out.metadata["model"] == "bot-model" and out.metadata["finish_reason"] == "stop"
    assert out.tools_called is None
    assert target.estimate_cost(cases("fr")[0]) >= out.cost > 0


def test_an_unpriced_model_reports_no_cost(server: ChatServer, tmp_path: Path) -> None:
    out = ChatTarget(
        model="unpriced-model", prompt=write_prompt(tmp_path), options={"base_url": server.base_url}
    ).generate(cases("en")[0])
    assert out.cost is None and out.input_tokens is not None and out.input_tokens > 0


def test_an_empty_system_part_sends_only_the_user_message(server: ChatServer, tmp_path: Path) -> None:
    target = chat(server, write_prompt(tmp_path, "### system\n\n### user\n{{ input }}\n"))
    target.generate(cases("en")[0])
    assert server.requests[0].body["messages"] == [{"role": "user", "content": "q0?"}]


def test_tool_calls_fill_tools_called(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {}}}}]
    with ChatServer(responder=lambda r: Answer("", tool_calls=["search", "lookup"])) as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        out = chat(server, write_prompt(tmp_path), tools=tools).generate(cases("en")[0])
        assert server.requests[0].body["tools"] == tools
    assert (out.output, out.tools_called) == ("", ["search", "lookup"])
    assert out.metadata["tool_calls"] == [{"name": "search", "arguments": "{}"}, {"name": "lookup", "arguments": "{}"}]


def test_a_rerun_makes_no_request_and_a_prompt_edit_regenerates_only_the_cases_it_changes(
    server: ChatServer, tmp_path: Path
) -> None:
    store = OutputStore(tmp_path / "outputs")
    prompt = write_prompt(tmp_path)
    batch = cases("en", "fr", "en", "fr", "de")
    first = generate_batch(chat(server, prompt), batch, store=store, refresh=False)
    assert all(g.error is None and g.requested for g in first) and len(server.requests) == 5
    again = generate_batch(chat(server, prompt), batch, store=store, refresh=False)
    assert len(server.requests) == 5 and not any(g.requested for g in again)
    assert [g.case.actual_output for g in again] == [g.case.actual_output for g in first]

    before = {c.name: chat(server, prompt).case_key(c) for c in batch}
    prompt.write_text(PROMPT.replace("Réponds poliment.", "Réponds très poliment."), encoding="utf-8")
    edited = chat(server, prompt)
    changed = {c.name for c in batch if edited.case_key(c) != before[c.name]}
    assert changed == {"c1", "c3"}  # the French cases: the edited line renders only for them
    server.reset()
    out = generate_batch(edited, batch, store=store, refresh=False)
    assert [g.requested for g in out] == [False, True, False, True, False]
    assert sorted(r.body["messages"][1]["content"] for r in server.requests) == [
        "Question: q1?\nRéponds très poliment.",
        "Question: q3?\nRéponds très poliment.",
    ]


def test_model_and_parameters_are_part_of_the_fingerprint(server: ChatServer, tmp_path: Path) -> None:
    prompt = write_prompt(tmp_path)
    base = chat(server, prompt).fingerprint()
    assert chat(server, prompt, temperature=0.5).fingerprint() != base
    assert chat(server, prompt, max_tokens=10).fingerprint() != base
    assert ChatTarget(model="other", prompt=prompt, options={"base_url": server.base_url}).fingerprint() != base
    assert chat(server, prompt, name="renamed", max_attempts=2).fingerprint() == base


def test_transient_faults_are_retried_by_the_shared_client(server: ChatServer, tmp_path: Path) -> None:
    server.script.extend(["429", "drop"])
    result = generate_case(chat(server, write_prompt(tmp_path)), cases("en")[0], store=None, refresh=False)
    assert result.error is None and result.case.actual_output == "echo: Question: q0?"
    assert len(server.requests) == 3

    server.reset()
    server.always = "503"
    result = generate_case(
        chat(server, write_prompt(tmp_path), max_attempts=2), cases("de")[0], store=None, refresh=False
    )
    assert result.error is not None and "chat target endpoint" in result.error and "HTTP 503" in result.error
    assert len(server.requests) == 2  # max_attempts tries in all, not retried again on top


@pytest.mark.parametrize(
    ("fault", "needle"), [("malformed_body", "unreadable"), ("404", "HTTP 404"), ("400", "HTTP 400")]
)
def test_permanent_failures(server: ChatServer, tmp_path: Path, fault: str, needle: str) -> None:
    server.script.append(fault)
    result = generate_case(chat(server, write_prompt(tmp_path)), cases("en")[0], store=None, refresh=False)
    assert result.error is not None and needle in result.error, result.error


def test_a_rejected_or_missing_key_stops_the_run(
    server: ChatServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    with pytest.raises(CredentialsError, match="401"):
        generate_batch(chat(server, write_prompt(tmp_path)), cases("en"), store=None, refresh=False)
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(CredentialsError, match="chat target chat: .*OPENAI_API_KEY"):
        chat(server, write_prompt(tmp_path), options={"max_concurrency": 3}).client()


def test_undefined_variables_name_the_file_and_line(server: ChatServer, tmp_path: Path) -> None:
    prompt = write_prompt(tmp_path, "### system\nBe brief.\n\n### user\nQ: {{ input }}\nTone: {{ tone }}\n")
    target = chat(server, prompt)
    assert target.undefined_variables({"lang", "tone"}) == []
    [problem] = target.undefined_variables({"lang"})
    assert problem.startswith(f"{prompt}, line 6: 'tone' is undefined")
    result = generate_case(target, cases("en")[0], store=None, refresh=False)
    assert result.error is not None and f"{prompt}, line 6" in result.error and "'tone' is undefined" in result.error
    assert server.requests == []


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("no parts at all", "must have a '### system' line"),
        ("### system\n{% include 'x' %}\n### user\nhi\n", "'include' tag is not allowed"),
        ("### system\nok\n### user\n{{ input\n", "line 4"),
    ],
)
def test_bad_prompt_files_are_refused_at_load(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(PromptFileError, match=needle):
        ChatTarget(model="m", prompt=write_prompt(tmp_path, text))
    with pytest.raises(PromptFileError, match="cannot read the prompt file"):
        ChatTarget(model="m", prompt=tmp_path / "missing.md")


def test_the_target_and_the_judges_share_one_client(server: ChatServer, tmp_path: Path) -> None:
    target = chat(server, write_prompt(tmp_path), options={"max_concurrency": 2})
    assert target.client() is openai_client("bot-model", target.options)
    seen: list[ChatRequest] = []
    server.responder = lambda r: (seen.append(r), "ok")[1]
    server.latency_s = 0.05
    out = generate_batch(target, cases(*["en"] * 6), store=None, refresh=False)
    assert [g.case.actual_output for g in out] == ["ok"] * 6 and len(seen) == 6
    assert server.peak_in_flight <= 2  # the client's concurrency limit holds


def test_a_chat_suite_entry(server: ChatServer, tmp_path: Path) -> None:
    write_prompt(tmp_path)
    (tmp_path / "d.jsonl").write_text('{"id": "a", "question": "2+2?", "lang": "en"}\n', encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: t\ndataset: {path: d.jsonl, fields: {input: question}}\n"
        "metrics: [{metric: LengthCheckMetric, max_length: 5, unit: words}]\n"
        "targets:\n"
        f"  - {{name: current, chat: {{model: bot-model, prompt: answer.md, temperature: 0, base_url: '{server.base_url}'}}}}\n"
        f"  - {{name: candidate, repeat: 2, chat: {{model: bot-model, prompt: answer.md, max_concurrency: 3, base_url: '{server.base_url}'}}}}\n",
        encoding="utf-8",
    )
    current, candidate = load_suite(suite).targets
    assert isinstance(current, ChatTarget) and isinstance(candidate, ChatTarget)
    assert (current.params, candidate.repeat, candidate.max_concurrency) == ({"temperature": 0.0}, 2, 3)
    assert current.generate(cases("en")[0]).output == "echo: Question: q0?"

    suite.write_text(suite.read_text().replace("prompt: answer.md, temperature", "prompt: nope.md, temperature"))
    with pytest.raises(ConfigError) as caught:
        load_suite(suite)
    [problem] = caught.value.problems
    assert (problem.location, problem.field) == ("targets[0]", "chat.prompt") and "nope.md" in problem.message
    suite.write_text(suite.read_text().replace("temperature: 0,", "temprature: 0,"))
    with pytest.raises(ConfigError, match="did you mean 'temperature'"):
        load_suite(suite)
    suite.write_text(suite.read_text().replace("temprature: 0,", "api_key: sk-x,"))
    with pytest.raises(ConfigError, match="api_key"):
        load_suite(suite)


def test_render_errors_are_target_errors(server: ChatServer, tmp_path: Path) -> None:
    target = chat(server, write_prompt(tmp_path, "### system\n\n### user\n{{ input.nope() }}\n"))
    with pytest.raises(TargetError, match="answer.md"):
        target.render(cases("en")[0])
