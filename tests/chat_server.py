"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat completions API from scripts, for tests.

``POST <prefix>/chat/completions`` (any prefix: ``/v1``, or Azure's ``/openai/deployments/<name>/chat/completions``
with ``?api-version=``) takes the API's JSON body (``model``, ``messages``, ``temperature``, ``max_tokens`` or
``max_completion_tokens``, ``n``, ``logprobs``, ``top_logprobs``, ``response_format``, ``seed``) and answers
as the API does::

    {"id", "object": "chat.completion", "created", "model",
     "choices": [{"index", "message": {"role": "assistant", "content"}, "logprobs": {"content": [...]} | null,
                  "finish_reason": "stop"}],
     "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}

What it answers comes from ``responder(request) -> str | Answer``, called once per choice (``n`` times when
``n`` > 1 and ``support_n``), with a :class:`ChatRequest`; the default responder pops :attr:`ChatServer.answers`
(a deque of ``str`` / :class:`Answer`) and answers ``{}`` when it is empty.

Token usage (deterministic, documented so tests can recompute it, as :mod:`tests.openai_server`):
prompt tokens = sum over messages of ``len(content.encode("utf-8")) // 4 + 1``; completion tokens = the same
rule over each choice's text, summed over choices. With ``bill_schema=True`` the prompt tokens also count the
schema of a ``response_format`` ``json_schema`` by the same rule over its compact JSON (OpenAI's structured outputs
put the schema into the prompt, so a real endpoint bills it; the judge token benchmark uses this).

Log-probabilities: when the request has ``logprobs: true`` and the server has ``logprobs="yes"``, each choice
carries ``logprobs.content``: its text split by :func:`split_tokens` (digits one by one, words, spaces,
punctuation), each token with logprob 0.0 and ``top_logprobs`` = itself, unless the :class:`Answer` gives
``alternatives`` for a token (the first token equal to the key gets those ``(token, logprob)`` pairs as its
``top_logprobs``, its own logprob taken from them). ``logprobs="ignore"``: the field is null (an endpoint that
ignores the parameter); ``logprobs="reject"``: a request asking for them gets 400.

Structured outputs: ``structured_outputs=False`` answers 400 to ``response_format`` ``json_schema`` (an endpoint
without them; ``json_object`` is still accepted unless ``json_object=False``).

Faults (one per request, consumed from :attr:`ChatServer.script` first, else :attr:`ChatServer.always`):
``429`` (with ``Retry-After: {retry_after_s}``), ``429_ms`` (``retry-after-ms: {retry_after_ms}``), ``429_plain``
(no header), ``500``, ``502`` (an HTML body), ``503``, ``400`` (a bad request), ``400_echo`` (a bad request whose
message quotes the request's API key, as some proxies and gateways answer), ``404`` (unknown model),
``slow`` (answers after ``slow_s``), ``drop`` (closes the connection), ``malformed_body`` (200 with truncated
JSON), ``None`` (no fault). A missing or wrong key is 401 (``Authorization: Bearer`` or Azure's ``api-key``).

Every request is recorded in :attr:`ChatServer.requests` (:class:`RecordedChat`) with its arrival and answer
times, and :attr:`ChatServer.peak_in_flight` is the most requests it held at once.
"""

from __future__ import annotations

import collections
import itertools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loopback_server import LoopbackHandler, LoopbackServer, error_body
from loopback_server import usage_tokens as usage_tokens  # this server's token rule, the same as openai_server's

FAULTS = ("429", "429_ms", "429_plain", "500", "502", "503", "400", "400_echo", "404", "slow", "drop", "malformed_body")
_TOKEN = re.compile(r"\d|[^\W\d]+|\s+|[^\w\s]", re.UNICODE)


def schema_tokens(response_format: Any) -> int:
    """The tokens a ``response_format`` adds to the prompt with ``bill_schema``: :func:`usage_tokens` of the
    compact JSON of a ``json_schema``'s ``schema``; 0 for anything else (``json_object``, none)."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return 0
    schema = (response_format.get("json_schema") or {}).get("schema")
    return usage_tokens(json.dumps(schema, separators=(",", ":"))) if schema is not None else 0


def split_tokens(text: str) -> list[str]:
    """The server's tokens of an answer: each digit alone, runs of letters, runs of spaces, each other
    character alone (``'{"score": 7}'`` -> ``['{', '"', 'score', '"', ':', ' ', '7', '}']``)."""
    return _TOKEN.findall(text)


@dataclass
class Answer:
    """One scripted answer.

    Attributes:
        text: the answer's content.
        alternatives: token -> ``[(token, logprob), ...]``: the ``top_logprobs`` of the first token equal to the key.
        prompt_tokens: override of the billed prompt tokens (None: the documented rule).
        completion_tokens: override of the billed completion tokens (None: the documented rule).
        tool_calls: names of functions the answer calls (``message.tool_calls``, arguments ``"{}"``,
            ``finish_reason`` ``tool_calls``; ``content`` null when ``text`` is empty).
        tool_arguments: name -> the arguments' JSON text of that function's calls (default ``"{}"``).
    """

    text: str
    alternatives: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tool_calls: list[str] = field(default_factory=list)
    tool_arguments: dict[str, str] = field(default_factory=dict)


@dataclass
class ChatRequest:
    """What the responder sees: the request's body and where it is in its choices.

    Attributes:
        body: the JSON body.
        messages: ``body["messages"]``.
        system: the system message's content ("" without one).
        user: the last user message's content.
        choice: which choice is being answered (0 ... n-1).
        path: the request path.
    """

    body: dict[str, Any]
    messages: list[dict[str, Any]]
    system: str
    user: str
    choice: int
    path: str


@dataclass
class RecordedChat:
    """One request as the server saw it."""

    arrived: float
    path: str
    headers: dict[str, str]
    body: Any = None
    status: int | None = None
    fault: str | None = None
    answered: float | None = None
    texts: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def ok(self) -> bool:
        """Whether it was answered with 200 and a usable body."""
        return self.status == 200 and self.fault is None


class _Handler(LoopbackHandler):
    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        record = RecordedChat(time.monotonic(), self.path, {k.lower(): v for k, v in self.headers.items()})
        owner._enter(record)
        try:
            try:
                record.body = json.loads(raw) if raw else None
            except ValueError:
                record.body = None
            status, payload, headers = owner._respond(self.headers, self.path, record)
            if owner.latency_s > 0:
                owner._stopping.wait(owner.latency_s)
            if record.fault == "drop":
                self.drop()
                return
            if record.fault == "slow":
                owner._stopping.wait(owner.slow_s)
            record.status = status
            record.answered = time.monotonic()
            if isinstance(payload, bytes):
                self.send_json(
                    status,
                    raw=payload,
                    headers=headers,
                    content_type="text/html" if status == 502 else "application/json",
                )
            else:
                self.send_json(status, payload, headers=headers)
        finally:
            owner._leave()


class ChatServer(LoopbackServer):
    """The server; use it as a context manager (``with ChatServer() as server: server.base_url``).

    Args:
        api_key: the one key accepted.
        responder: ``responder(ChatRequest) -> str | Answer`` (default: pops :attr:`answers`, else ``"{}"``).
        latency_s: seconds every request waits before it is answered (a remote API's round trip).
        structured_outputs: False: ``response_format`` ``json_schema`` is a 400.
        json_object: False: ``response_format`` ``json_object`` is a 400 too.
        logprobs: ``"yes"``, ``"ignore"`` (null logprobs) or ``"reject"`` (400 when asked for).
        support_n: False: ``n`` > 1 is ignored (one choice), as some OpenAI-compatible servers do.
        retry_after_s, retry_after_ms: the headers of the ``429`` and ``429_ms`` faults.
        slow_s: how long a ``slow`` fault waits.
        models: model names served (None: any; others: 404).
        bill_schema: True: a ``json_schema`` response format's schema counts as prompt tokens (:func:`schema_tokens`).

    Attributes:
        url: ``http://127.0.0.1:PORT``; ``base_url`` is ``url + "/v1"``.
        requests: every request, in arrival order.
        answers: the default responder's queue.
        script: fault kinds consumed one per request (None = no fault) before ``always``.
        always: a fault kind for every request once the script is empty (None: off).
        peak_in_flight: the most requests held at once.
    """

    handler = _Handler
    thread_name = "chat-test-server"

    def __init__(
        self,
        api_key: str = "sk-test-chat-server",
        *,
        responder: Callable[[ChatRequest], str | Answer] | None = None,
        latency_s: float = 0.0,
        structured_outputs: bool = True,
        json_object: bool = True,
        logprobs: str = "yes",
        support_n: bool = True,
        retry_after_s: int = 1,
        retry_after_ms: int = 5,
        slow_s: float = 2.0,
        models: set[str] | None = None,
        bill_schema: bool = False,
    ) -> None:
        if logprobs not in ("yes", "ignore", "reject"):
            raise ValueError(f"logprobs must be 'yes', 'ignore' or 'reject', got {logprobs!r}")
        super().__init__()
        self.api_key = api_key
        self.responder = responder or self._pop_answer
        self.latency_s = latency_s
        self.structured_outputs = structured_outputs
        self.json_object = json_object
        self.logprobs = logprobs
        self.support_n = support_n
        self.retry_after_s = retry_after_s
        self.retry_after_ms = retry_after_ms
        self.slow_s = slow_s
        self.models = models
        self.bill_schema = bill_schema
        self.answers: collections.deque[str | Answer] = collections.deque()
        self.script: collections.deque[str | None] = collections.deque()
        self.always: str | None = None
        self.requests: list[RecordedChat] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self._ids = itertools.count(1)

    @property
    def base_url(self) -> str:
        """The client's ``base_url``: ``url + "/v1"``."""
        return self.url + "/v1"

    @property
    def answered(self) -> list[RecordedChat]:
        """The requests answered with 200 and no fault."""
        return [r for r in self.requests if r.ok]

    @property
    def billed(self) -> tuple[int, int]:
        """(prompt tokens, completion tokens) billed over the answered requests."""
        ok = self.answered
        return sum(r.prompt_tokens for r in ok), sum(r.completion_tokens for r in ok)

    def reset(self) -> None:
        """Forget recorded requests and the peak (scripts and answers are kept)."""
        with self._lock:
            self.requests.clear()
            self.peak_in_flight = self.in_flight

    # -- internals ---------------------------------------------------------------------------------------
    def _pop_answer(self, request: ChatRequest) -> str | Answer:
        with self._lock:
            return self.answers.popleft() if self.answers else "{}"

    def _enter(self, record: RecordedChat) -> None:
        with self._lock:
            self.requests.append(record)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _fault(self) -> str | None:
        with self._lock:
            if self.script:
                return self.script.popleft()
            return self.always

    def _respond(self, headers: Any, path: str, record: RecordedChat) -> tuple[int, Any, dict[str, str]]:
        key = headers.get("api-key") or (headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        if key != self.api_key:
            return 401, error_body("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"), {}
        if not path.split("?")[0].endswith("/chat/completions"):
            return 404, error_body(f"Invalid URL (POST {path})", "invalid_request_error"), {}
        body = record.body
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body.get("model"):
            return 400, error_body("'messages' and 'model' are required", "invalid_request_error"), {}
        fault = self._fault()
        record.fault = fault
        if fault == "400_echo":
            return (
                400,
                error_body(f"Invalid request for the key {key} (Authorization: Bearer {key})", "invalid_request_error"),
                {},
            )
        if fault is not None:
            return self._fault_response(fault)
        if self.models is not None and body["model"] not in self.models:
            record.fault = "404"
            return (
                404,
                error_body(f"The model `{body['model']}` does not exist", "invalid_request_error", "model_not_found"),
                {},
            )
        response_format = body.get("response_format") or {}
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if (kind == "json_schema" and not self.structured_outputs) or (kind == "json_object" and not self.json_object):
            record.fault = "unsupported_response_format"
            return (
                400,
                error_body(
                    f"response_format type {kind} is not supported by this model",
                    "invalid_request_error",
                    param="response_format",
                ),
                {},
            )
        wants_logprobs = bool(body.get("logprobs"))
        if wants_logprobs and self.logprobs == "reject":
            record.fault = "unsupported_logprobs"
            return (
                400,
                error_body("logprobs are not supported by this model", "invalid_request_error", param="logprobs"),
                {},
            )
        messages = body["messages"]
        system = next((str(m.get("content", "")) for m in messages if m.get("role") == "system"), "")
        user = next((str(m.get("content", "")) for m in reversed(messages) if m.get("role") == "user"), "")
        n = int(body.get("n") or 1) if self.support_n else 1
        prompt_tokens = sum(usage_tokens(str(m.get("content", ""))) for m in messages)
        if self.bill_schema:
            prompt_tokens += schema_tokens(body.get("response_format"))
        choices, completion_tokens = [], 0
        for index in range(n):
            answer = self.responder(ChatRequest(body, messages, system, user, index, path))
            if isinstance(answer, str):
                answer = Answer(answer)
            if answer.prompt_tokens is not None:
                prompt_tokens = answer.prompt_tokens
            completion_tokens += (
                answer.completion_tokens if answer.completion_tokens is not None else usage_tokens(answer.text)
            )
            record.texts.append(answer.text)
            logprobs = None
            if wants_logprobs and self.logprobs == "yes":
                logprobs = {"content": self._logprobs(answer, int(body.get("top_logprobs") or 0))}
            message: dict[str, Any] = {"role": "assistant", "content": answer.text}
            if answer.tool_calls:
                message["content"] = answer.text or None
                message["tool_calls"] = [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": name, "arguments": answer.tool_arguments.get(name, "{}")},
                    }
                    for i, name in enumerate(answer.tool_calls)
                ]
            choices.append(
                {
                    "index": index,
                    "message": message,
                    "logprobs": logprobs,
                    "finish_reason": "tool_calls" if answer.tool_calls else "stop",
                }
            )
        record.prompt_tokens, record.completion_tokens = prompt_tokens, completion_tokens
        payload = {
            "id": f"chatcmpl-test-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        return 200, payload, {}

    @staticmethod
    def _logprobs(answer: Answer, top: int) -> list[dict[str, Any]]:
        items, pending = [], dict(answer.alternatives)
        for token in split_tokens(answer.text):
            alternatives = pending.pop(token, None) or [(token, 0.0)]
            own = next((lp for t, lp in alternatives if t == token), 0.0)
            items.append(
                {
                    "token": token,
                    "logprob": own,
                    "bytes": list(token.encode("utf-8")),
                    "top_logprobs": [
                        {"token": t, "logprob": lp, "bytes": list(t.encode("utf-8"))}
                        for t, lp in alternatives[: max(top, 1)]
                    ],
                }
            )
        return items

    def _fault_response(self, fault: str) -> tuple[int, Any, dict[str, str]]:
        rate = error_body("Rate limit reached for requests", "requests", "rate_limit_exceeded")
        if fault == "429":
            return 429, rate, {"Retry-After": str(self.retry_after_s)}
        if fault == "429_ms":
            return 429, rate, {"retry-after-ms": str(self.retry_after_ms)}
        if fault == "429_plain":
            return 429, rate, {}
        if fault in ("500", "503"):
            return int(fault), error_body("The server had an error while processing your request.", "server_error"), {}
        if fault == "502":
            return 502, b"<html><body><h1>502 Bad Gateway</h1></body></html>", {}
        if fault == "400":
            return 400, error_body("Invalid request: scripted", "invalid_request_error"), {}
        if fault == "404":
            return 404, error_body("The model does not exist", "invalid_request_error", "model_not_found"), {}
        if fault == "malformed_body":
            return 200, b'{"id": "chatcmpl-x", "choices": [{"index": 0, "message": {"content": "{\\"sc', {}
        if fault in ("slow", "drop"):
            return 200, {"choices": [], "model": "x", "usage": {}}, {}  # never sent (drop) / sent late (slow)
        raise ValueError(f"unknown fault {fault!r}; known: {FAULTS}")
