"""The judge protocol: what a judge metric asks (:class:`JudgeRequest`) and what it gets back (:class:`JudgeReply`).

A *judge* is anything with a ``model`` string and a ``complete(request) -> JudgeReply`` method: the OpenAI-SDK
client (:class:`evaltasks.judges.openai.OpenAIJudge`: OpenAI, Azure OpenAI, any OpenAI-compatible ``base_url``)
or a user's own function from messages to text (:class:`~evaltasks.judges.function.FunctionJudge`, the ``judge=``
hook of the Python API).

Judge metrics (:class:`evaltasks.metrics.judge.base.JudgeMetric`) never talk HTTP themselves: they build requests
from prompt templates (:mod:`evaltasks.judges.prompts`) and read validated JSON out of replies. What sits
between them and the endpoint (the on-disk answer store, retries, rate limits, the budget) is a judge's job.

Messages follow the OpenAI chat format. The instructions (a prompt template's ``system`` part, with trusted
variables only: a metric's criteria or steps) go in the ``system`` message; the test case's text (untrusted:
model outputs, retrieved passages) only ever goes in the ``user`` message, so a case cannot rewrite the
instructions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from evaltasks.errors import EvalTasksError

Message = Mapping[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": str}``."""


class JudgeError(EvalTasksError):
    """A judge request failed for good: the endpoint refused it (a 4xx other than 429), it kept failing after
    the retries (429/5xx/timeouts), or its answer still did not parse or match the schema after the content
    retries. The case it was for is ``errored`` with this message as the reason; other cases go on.

    Attributes:
        requests: HTTP requests the failed request took (retries included).
        prompt_tokens, completion_tokens: tokens billed for its unusable answers.
        cost: US dollars billed for them: a case errored this way still reports what it spent.
    """

    def __init__(
        self, message: str, *, requests: int = 0, prompt_tokens: int = 0, completion_tokens: int = 0, cost: float = 0.0
    ) -> None:
        super().__init__(message)
        self.requests, self.prompt_tokens, self.completion_tokens, self.cost = (
            requests,
            prompt_tokens,
            completion_tokens,
            cost,
        )

    def __reduce__(self) -> Any:
        return (_judge_error, (str(self), self.requests, self.prompt_tokens, self.completion_tokens, self.cost))


def _judge_error(message: str, requests: int, prompt_tokens: int, completion_tokens: int, cost: float) -> JudgeError:
    """Rebuild a pickled :class:`JudgeError` with its spend (worker processes send errors back pickled)."""
    return JudgeError(
        message, requests=requests, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cost=cost
    )


class BudgetExhausted(EvalTasksError):
    """Sending a request would take the run's spend past its budget (``--max-cost``): it is not sent, and the
    case it was for is ``skipped`` with this message as the reason."""


@dataclass(frozen=True)
class JudgeRequest:
    """One chat completion a judge metric asks for.

    Attributes:
        messages: the chat messages, in order (see the module docstring for the roles).
        schema: the JSON Schema (an ``object`` schema) the answer must satisfy, or None for free text. The OpenAI
            client sends ``response_format`` ``json_object`` for it (``structured_outputs: auto``), or the schema
            itself as ``json_schema`` (strict where it qualifies) with ``structured_outputs: json_schema``; the
            answer is always parsed tolerantly and validated against it by the judge.
        schema_name: the schema's name in ``response_format`` (``[A-Za-z0-9_-]``, at most 64 characters).
        temperature: sampling temperature of the judge model.
        max_tokens: the most completion tokens the answer may use (also what the budget reserves for it).
        top_logprobs: > 0 asks for token log-probabilities with that many alternatives per token (at most 20,
            the OpenAI API's limit); 0 asks for none.
        n: completions to sample in this one request (``n`` of the chat API); the sampling fallback of GEval.
        sample: which repeat of the same request this is (``samples: K`` of a metric): part of the store key, so
            K samples of one case are K stored answers, not one answer served K times; never sent.
    """

    messages: tuple[Message, ...]
    schema: Mapping[str, Any] | None = None
    schema_name: str = "verdict"
    temperature: float = 0.0
    max_tokens: int = 1024
    top_logprobs: int = 0
    n: int = 1
    sample: int = 0

    def key(self, model: str, endpoint: str = "") -> str:
        """The content address of this request for ``model`` at ``endpoint``: sha256 (hex) of canonical JSON of
        every field and both names. Equal requests have equal keys in every process."""
        payload = {
            "endpoint": endpoint,
            "model": model,
            "messages": [dict(m) for m in self.messages],
            "schema": self.schema,
            "schema_name": self.schema_name,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "top_logprobs": self.top_logprobs,
            "n": self.n,
            "sample": self.sample,
        }
        canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its log-probability and the most likely alternatives at its position.

    Attributes:
        token: the token's text.
        logprob: natural log of its probability.
        top: ``(token, logprob)`` of the most likely tokens at this position, most likely first (includes
            ``token`` when it is among them).
    """

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Choice:
    """One completion of a reply.

    Attributes:
        text: the answer's text.
        parsed: the JSON value parsed from ``text`` and validated against the request's schema; None when the
            request had no schema.
        logprobs: per-token log-probabilities of ``text`` when they were asked for and the endpoint returned
            them, else None.
    """

    text: str
    parsed: Any = None
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True)
class JudgeReply:
    """What a judge answered to one :class:`JudgeRequest`.

    Attributes:
        choices: the completions (``request.n`` of them, or fewer when the endpoint ignores ``n``).
        model: the model that answered (as the endpoint names it).
        prompt_tokens: input tokens billed for the request (from the response's ``usage``; 0 when served from
            the store, since nothing was billed this time).
        completion_tokens: output tokens billed, likewise.
        cost: US dollars billed for this request in this run (0.0 when served from the store).
        cached: True when the answer came from the on-disk store instead of the endpoint.
        requests: HTTP requests this reply took in this run (retries included; 0 when cached).
    """

    choices: tuple[Choice, ...]
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    cached: bool = False
    requests: int = 1

    @property
    def text(self) -> str:
        """The first completion's text."""
        return self.choices[0].text

    @property
    def parsed(self) -> Any:
        """The first completion's validated JSON value (None without a schema)."""
        return self.choices[0].parsed

    @property
    def logprobs(self) -> tuple[TokenLogprob, ...] | None:
        """The first completion's token log-probabilities, or None."""
        return self.choices[0].logprobs


@runtime_checkable
class Judge(Protocol):
    """What judge metrics call. Implementations are thread-safe: a metric sends requests from many threads.

    Attributes:
        model: the judge model's name (part of every store key and of the metric's reports).
        supports_logprobs: False when the judge is known to return no token log-probabilities (a user's
            function, an endpoint configured with ``logprobs: false``): GEval then samples instead.
    """

    @property
    def model(self) -> str:
        """The judge model's name."""
        ...

    @property
    def supports_logprobs(self) -> bool:
        """False when the judge is known to return no token log-probabilities."""
        ...

    def complete(self, request: JudgeRequest) -> JudgeReply:
        """Answer ``request``.

        Raises:
            JudgeError: the request failed for good (see :class:`JudgeError`).
            BudgetExhausted: the run's budget does not allow sending it.
        """
        ...


def as_messages(messages: Sequence[Message]) -> tuple[Message, ...]:
    """``messages`` as an immutable tuple of plain dicts (what :class:`JudgeRequest` holds)."""
    return tuple({"role": str(m["role"]), "content": str(m["content"])} for m in messages)
