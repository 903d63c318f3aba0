"""HttpTarget against a real app on 127.0.0.1: body templates, JSON paths, headers from the environment (kept
secret), same-origin redirects only, and the faults (429/5xx retried, dropped connections, timeouts, garbage
bodies, 4xx, 401)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from evaltasks.errors import ConfigError, CredentialsError
from evaltasks.inputs.suite import load_suite
from evaltasks.targets import (
    OutputStore,
    TargetError,
    TargetOutput,
    TransientTargetError,
    generate_batch,
    generate_case,
)
from evaltasks.targets.http import HttpTarget, json_path, render_body
from evaltasks.test_case import EvalTestCase
from tests.loopback_server import LoopbackHandler, LoopbackServer


class _AppHandler(LoopbackHandler):
    server_owner: AppServer

    def do_POST(self) -> None:
        owner: AppServer = self.server.owner  # type: ignore[assignment]
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        with owner._lock:
            owner.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
            seen = sum(1 for r in owner.requests if r["path"] == self.path and r["body"] == body)
        question = body.get("question") if isinstance(body, dict) else None
        answer = {"data": {"answer": f"A: {question}", "docs": ["doc 1", "doc 2"]}, "tools": [{"name": "search"}]}
        path = self.path
        if path == "/ask":
            self.send_json(200, answer)
        elif path == "/number":
            self.send_json(200, {"output": 42})
        elif path == "/flaky":
            self.send_json(503, {"error": "busy"}, headers={"Retry-After": "0"}) if seen <= 2 else self.send_json(
                200, answer
            )
        elif path == "/limited":
            self.send_json(429, {"error": "slow down"}, headers={"Retry-After": "0"}) if seen == 1 else self.send_json(
                200, answer
            )
        elif path == "/long-wait":
            self.send_json(429, {"error": "slow down"}, headers={"Retry-After": "7200"})
        elif path == "/drop":
            self.drop() if seen == 1 else self.send_json(200, answer)
        elif path == "/garbage":
            self.send_json(200, raw=b"<html>oops</html>", content_type="text/html")
        elif path == "/bad":
            self.send_json(422, {"error": "question too long"})
        elif path == "/auth":
            if self.headers.get("Authorization") == "Bearer s3cret-value":
                self.send_json(200, answer)
            else:
                self.send_json(401, {"error": "who are you"})
        elif path == "/echo-auth":  # a debug endpoint that quotes the request's Authorization back
            echoed = f"auth={self.headers.get('Authorization')}"
            self.send_json(200, {"data": {"answer": f"A: {question} ({echoed})", "docs": [echoed]}})
        elif path == "/same":
            self.send_json(307, {}, headers={"Location": "/ask"})
        elif path == "/other":
            port = self.server.server_address[1]
            self.send_json(307, {}, headers={"Location": f"http://localhost:{port}/ask"})
        elif path == "/slow":
            owner._stopping.wait(30)
            self.send_json(200, answer)
        else:
            self.send_json(404, {"error": "no route"})


class AppServer(LoopbackServer):
    handler: ClassVar[type[LoopbackHandler]] = _AppHandler
    thread_name: ClassVar[str] = "http-target-app"

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []


@pytest.fixture
def app() -> Any:
    with AppServer() as server:
        yield server


def case(question: str = "2+2?") -> EvalTestCase:
    return EvalTestCase(actual_output="", input=question, name="c", vars={"question": question, "lang": "en"})


def target(app: AppServer, path: str, **kwargs: Any) -> HttpTarget:
    kwargs.setdefault("body", {"question": "{{ question }}", "meta": {"lang": "{{ vars.lang }}", "n": 1}})
    kwargs.setdefault("output", "data.answer")
    return HttpTarget(app.url + path, **kwargs)


def test_body_template_and_json_paths(app: AppServer) -> None:
    out = target(app, "/ask", retrieval_context="data.docs", tools_called="tools").generate(case())
    assert (out.output, out.retrieval_context, out.tools_called) == ("A: 2+2?", ["doc 1", "doc 2"], ["search"])
    assert app.requests[0]["body"] == {"question": "2+2?", "meta": {"lang": "en", "n": 1}}
    assert app.requests[0]["headers"]["Content-Type"] == "application/json"
    assert target(app, "/number", output="output").generate(case()).output == "42"


def test_render_body_keeps_json_types_and_names_undefined_variables() -> None:
    variables = {"input": "q", "docs": ["a", "b"], "vars": {"k": 3}}
    assert render_body({"d": "{{ docs }}", "k": "{{ vars.k }}", "t": "Q: {{ input }}!", "n": [1, None]}, variables) == {
        "d": ["a", "b"],
        "k": 3,
        "t": "Q: q!",
        "n": [1, None],
    }
    with pytest.raises(TargetError, match=r"body\.x\.y: 'nope' is undefined"):
        render_body({"x": {"y": "{{ nope }}"}}, variables)
    with pytest.raises(TargetError, match=r"body\.t: 'nope' is undefined"):
        render_body({"t": "a {{ nope }}"}, variables)


def test_json_path_names_what_is_missing() -> None:
    doc = {"data": {"choices": [{"text": "hi"}]}}
    assert json_path(doc, "data.choices.0.text") == "hi"
    with pytest.raises(KeyError, match="no 'answer' in data \\(keys: choices\\)"):
        json_path(doc, "data.answer")
    with pytest.raises(KeyError, match="no '3' in data.choices \\(a list of 1\\)"):
        json_path(doc, "data.choices.3.text")


def test_transient_faults_are_retried(app: AppServer) -> None:
    for path in ("/flaky", "/limited", "/drop"):
        result = generate_case(target(app, path), case(), store=None, refresh=False)
        assert (path, result.error, result.case.actual_output) == (path, None, "A: 2+2?")
    assert [r["path"] for r in app.requests].count("/flaky") == 3
    assert [r["path"] for r in app.requests].count("/limited") == 2


def test_a_long_retry_after_and_persistent_5xx_fail_the_case(app: AppServer) -> None:
    result = generate_case(target(app, "/long-wait"), case(), store=None, refresh=False)
    assert result.error is not None and "asked to wait 7200 s" in result.error
    result = generate_case(target(app, "/flaky", max_attempts=2), case("other"), store=None, refresh=False)
    assert (
        result.error is not None
        and result.error.count("http target") == 1
        and "(still failing after 2 attempts)" in result.error
        and "HTTP 503" in result.error
    )


@pytest.mark.parametrize(
    ("path", "kwargs", "needle"),
    [
        ("/garbage", {}, "is not JSON: '<html>oops</html>'"),
        ("/bad", {}, "HTTP 422"),
        ("/ask", {"output": "data.missing"}, "no 'missing' in data"),
        ("/ask", {"output": "data.docs"}, "is a list, not a string"),
        ("/ask", {"retrieval_context": "data.answer"}, "retrieval_context 'data.answer' is not a list of strings"),
        ("/other", {}, "another host or scheme: not followed"),
        ("/nowhere", {}, "HTTP 404"),
    ],
)
def test_permanent_failures_are_not_retried(app: AppServer, path: str, kwargs: dict[str, Any], needle: str) -> None:
    result = generate_case(target(app, path, **kwargs), case(), store=None, refresh=False)
    assert result.error is not None and needle in result.error, result.error
    assert len(app.requests) == 1  # one request: no retry, and no redirect followed to the other host


def test_a_same_origin_redirect_is_followed(app: AppServer) -> None:
    assert target(app, "/same").generate(case()).output == "A: 2+2?"
    assert [r["path"] for r in app.requests] == ["/same", "/ask"]
    assert app.requests[1]["body"]["question"] == "2+2?"  # 307 keeps the POST and its body


def test_a_request_that_hangs_times_out(app: AppServer) -> None:
    result = generate_case(target(app, "/slow", timeout=0.3), case(), store=None, refresh=False)
    assert result.error is not None and "timed out" in result.error


def test_headers_come_from_the_environment_and_stay_secret(app: AppServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CredentialsError, match="APP_TOKEN_T1, which is not set"):
        target(app, "/auth", headers={"Authorization": "APP_TOKEN_T1"}).generate(case())
    monkeypatch.setenv("APP_TOKEN_T1", "Bearer wrong-value")
    with pytest.raises(CredentialsError, match="HTTP 401") as caught:
        target(app, "/auth", headers={"Authorization": "APP_TOKEN_T1"}).generate(case())
    assert "wrong-value" not in str(caught.value)
    monkeypatch.setenv("APP_TOKEN_T1", "Bearer s3cret-value")
    assert target(app, "/auth", headers={"Authorization": "APP_TOKEN_T1"}).generate(case()).output == "A: 2+2?"
    # the value is registered as a secret: an error that would quote it is redacted
    error = TargetError("echo Bearer s3cret-value")
    assert "s3cret-value" not in str(error)


def test_an_answer_that_echoes_the_key_is_redacted_as_it_enters_the_run(
    app: AppServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 200 answer quoting the header's secret (docs/reports.md#secrets-in-reports): the case, the store and all that
    reads them see ``***``, and the output is flagged ``secrets_redacted`` (the run's one warning about it:
    tests/targets/test_generate.py). An output stored unredacted (by an older evaltasks) is redacted when read
    back; an answer without a secret is left as it is."""
    monkeypatch.setenv("APP_TOKEN_T2", "Bearer apptok-SECRET-55555")
    monkeypatch.setenv("EVALTASKS_SECRET_VARIABLES", "APP_TOKEN_T2")
    leaky = target(app, "/echo-auth", headers={"Authorization": "APP_TOKEN_T2"}, retrieval_context="data.docs")
    store = OutputStore(tmp_path / "store")
    [generated] = generate_batch(leaky, [case("2+2?")], store=store, refresh=False)
    assert generated.case.actual_output == "A: 2+2? (auth=***)"
    assert generated.case.retrieval_context == ["auth=***"]
    assert generated.case.generation is not None and generated.case.generation.metadata["secrets_redacted"] is True
    stored = b"".join(f.read_bytes() for f in (tmp_path / "store").rglob("*") if f.is_file())
    assert b"A: 2+2? (auth=***)" in stored and b"apptok-SECRET" not in stored

    old_key = leaky.case_key(case("old"))
    old_output = TargetOutput(output="A: old (auth=Bearer apptok-SECRET-55555)")
    store.put(old_key, old_output, target="http", kind="http", latency_ms=1.0)
    [read_back] = generate_batch(leaky, [case("old")], store=store, refresh=False)
    assert not read_back.requested and read_back.case.actual_output == "A: old (auth=***)"

    [plain] = generate_batch(target(app, "/ask"), [case("2+2?")], store=None, refresh=False)
    assert plain.case.actual_output == "A: 2+2?"
    assert plain.case.generation is not None and "secrets_redacted" not in plain.case.generation.metadata


def test_urls_and_header_names_are_checked() -> None:
    for url in ("ftp://example.com/x", "file:///etc/passwd", "http:///nohost"):
        with pytest.raises(ValueError, match="http:// or https://"):
            HttpTarget(url)
    with pytest.raises(ValueError, match="environment variable"):
        HttpTarget("http://127.0.0.1:1/x", headers={"Authorization": "Bearer abc"})


def test_store_hits_and_keys_follow_the_body(app: AppServer, tmp_path: Path) -> None:
    store = OutputStore(tmp_path)
    cases = [case("a"), case("b")]
    first = generate_batch(target(app, "/ask"), cases, store=store, refresh=False)
    assert [g.requested for g in first] == [True, True]
    again = generate_batch(target(app, "/ask"), cases, store=store, refresh=False)
    assert [g.requested for g in again] == [False, False] and len(app.requests) == 2
    assert [g.case.actual_output for g in again] == ["A: a", "A: b"]
    generate_batch(target(app, "/ask", version="2"), cases, store=store, refresh=False)
    assert len(app.requests) == 4  # a new version regenerates
    t = target(app, "/ask")
    assert t.case_key(case("a")) != t.case_key(case("b"))


def test_concurrent_cases_share_one_client(app: AppServer) -> None:
    t = target(app, "/ask", max_concurrency=4)
    out = generate_batch(t, [case(str(i)) for i in range(12)], store=None, refresh=False)
    assert [g.case.actual_output for g in out] == [f"A: {i}" for i in range(12)]
    client = t._client
    generate_batch(t, [case("again")], store=None, refresh=False)
    assert client is not None and t._client is client


def test_an_http_suite_entry(app: AppServer, tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"id": "a", "question": "2+2?"}\n', encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: t\ndataset: {path: d.jsonl, fields: {input: question}}\n"
        "metrics: [{metric: LengthCheckMetric, max_length: 5, unit: words}]\n"
        f"target:\n  http:\n    url: {app.url}/ask\n    body: {{question: '{{{{ question }}}}'}}\n"
        "    output: data.answer\n    timeout: 5\n    version: v1\n  max_attempts: 2\n",
        encoding="utf-8",
    )
    [t] = load_suite(suite).targets
    assert isinstance(t, HttpTarget)
    assert (t.name, t.timeout, t.version, t.max_attempts, t.max_concurrency) == ("http", 5.0, "v1", 2, 8)
    assert t.generate(case()).output == "A: 2+2?"
    suite.write_text(suite.read_text().replace(app.url, "ftp://127.0.0.1"), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_suite(suite)
    [problem] = caught.value.problems
    assert (problem.location, problem.field) == ("target", "http") and "http:// or https://" in problem.message


def test_transient_error_class_for_5xx(app: AppServer) -> None:
    with pytest.raises(TransientTargetError) as caught:
        target(app, "/flaky").generate(case("x"))
    assert caught.value.retry_after == 0.0
