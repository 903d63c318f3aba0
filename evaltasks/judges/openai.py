"""The OpenAI-SDK judge client: OpenAI, Azure OpenAI, or any OpenAI-compatible ``base_url`` (vLLM, Ollama, LiteLLM).

One :class:`OpenAIJudge` per (model, options) per process (:func:`evaltasks.judges.get_judge`). Every request
goes: answer store (:mod:`evaltasks.judges.store`) -> budget (:mod:`evaltasks.judges.budget`) -> rate limits
-> the concurrency limit -> the endpoint. This module is the last two steps and what is around a request:

Request: ``model``, ``messages``, ``temperature``, ``max_tokens`` (accepted by OpenAI and every compatible
server; ``max_completion_tokens`` is not), ``n`` when > 1, ``logprobs``/``top_logprobs`` when asked for,
``seed`` when set, and with a schema ``response_format`` ``{"type": "json_object"}`` (``structured_outputs:
auto``, see :data:`AUTO_FORMAT`), or with ``structured_outputs: json_schema`` ``{"type": "json_schema",
"json_schema": {"name", "schema", "strict"}}`` (``strict`` only when the schema qualifies for OpenAI's strict
mode: every object lists all its properties as required and sets ``additionalProperties: false``).

Capability fallback (``structured_outputs: auto``, ``logprobs: auto``), remembered per (endpoint, model) for the
process: a 400 that names ``response_format`` resends the request without
``response_format`` (the prompt asks for JSON and parsing is tolerant); a 400 that names ``logprobs`` resends
it without them, and the judge then reports ``supports_logprobs`` False (as it does once an endpoint returned no
logprobs it was asked for), so GEval samples instead. Until an endpoint's logprobs are known (``logprobs: auto``,
no answer with them or refusal of them yet), :meth:`OpenAIJudge.probing_logprobs` lets one caller at a time
ask for them: GEval probes through it, so an endpoint without logprobs wastes one request in all, not one per
case in flight.

Retries, each bounded:

1. HTTP level, by the ``openai`` client: 408, 409, 429, 5xx, timeouts and dropped connections are retried
   ``max_retries`` times (default 5). A ``Retry-After`` / ``retry-after-ms`` header up to the client's cap
   (120 s in openai 3.x) is waited out exactly; a longer one is not retried (the request fails at once).
   Without one, the wait is 0.5 s doubling per retry up to 8 s, less up to 25 % jitter.
2. Content level, here: an answer that is not JSON or does not match the schema (or a body the client cannot
   read) is re-requested ``content_retries`` times (default 2); then the request fails with the reason. Such
   answers are never stored.

Other 4xx (400, 404, 422...) are never retried: :class:`~evaltasks.judges.base.JudgeError` with the endpoint's
message. 401 and 403 raise :class:`~evaltasks.errors.CredentialsError` at once (exit 2 in the CLI).

Costs: the response's ``usage`` × the model's price (:mod:`evaltasks.judges.prices`), in US dollars, every
attempt counted (a content retry is billed too).
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evaltasks._env import env_value
from evaltasks._redact import register as register_secret
from evaltasks.embeddings import _tokens
from evaltasks.embeddings._rate_limit import shared_limiter
from evaltasks.errors import ConfigError, CredentialsError, bounded, quote
from evaltasks.judges.base import Choice, JudgeError, JudgeReply, JudgeRequest, TokenLogprob
from evaltasks.judges.parsing import parse_answer
from evaltasks.judges.prices import Price, resolve_price

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MAX_CONCURRENCY = 8
FORMATS = ("json_schema", "json_object", "off")  # response_format modes, most structured first
AUTO_FORMAT = "json_object"
"""The mode ``structured_outputs: auto`` starts with: JSON mode, without the schema. The schema would be billed
as prompt tokens on every request (structured outputs put it into the prompt), the prompt already shows the
answer's shape in one line, and every answer is validated against the schema here anyway (an answer that does
not match is asked again, ``content_retries``). ``structured_outputs: json_schema`` sends the schema."""
OPTIONS = frozenset(
    {
        "api_key",
        "base_url",
        "organization",
        "project",
        "azure_endpoint",
        "api_version",
        "timeout",
        "max_retries",
        "content_retries",
        "temperature",
        "max_concurrency",
        "requests_per_minute",
        "tokens_per_minute",
        "prices",
        "price_per_million_input_tokens",
        "price_per_million_output_tokens",
        "structured_outputs",
        "logprobs",
        "seed",
    }
)
"""The judge client's options (a metric's ``judge_options``, a suite's ``judge:`` block without ``model``)."""

_capabilities: dict[tuple[str, str], dict[str, Any]] = {}  # (endpoint, model) -> {"format": ..., "logprobs": bool}
_semaphores: dict[tuple[str, str, int], threading.BoundedSemaphore] = {}
_shared_lock = threading.Lock()


def strict_schema(schema: Any) -> bool:
    """Whether ``schema`` qualifies for OpenAI's strict structured outputs: every object schema in it (nested
    ones included) sets ``additionalProperties: false`` and requires all of its properties."""
    if not isinstance(schema, Mapping):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False or not isinstance(properties, Mapping):
            return False
        if sorted(schema.get("required", [])) != sorted(properties):
            return False
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas"):
            subschemas = list(value.values()) if isinstance(value, Mapping) else []
        elif key in ("anyOf", "allOf", "oneOf", "prefixItems"):
            subschemas = list(value) if isinstance(value, list) else []
        elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
            subschemas = [value]
        else:
            continue
        if not all(strict_schema(sub) for sub in subschemas):
            return False
    return True


def worst_case_tokens(request: JudgeRequest, schema_sent: bool = True) -> tuple[int, int]:
    """(prompt tokens, completion tokens) ``request`` can be billed at most: each message's token upper bound
    (:func:`evaltasks.embeddings._tokens.upper_bound_tokens`) + 4 for its framing, + 3 for the reply's priming,
    + the schema's JSON when ``schema_sent`` (``response_format`` ``json_schema``: structured outputs put it in the
    prompt; ``json_object`` sends no schema); ``max_tokens`` × ``n``."""
    prompt = sum(_tokens.upper_bound_tokens(str(m["content"])) + 4 for m in request.messages) + 3
    if request.schema is not None and schema_sent:
        prompt += _tokens.upper_bound_tokens(json.dumps(request.schema, separators=(",", ":")))
    return prompt, request.max_tokens * max(1, request.n)


def resolve_endpoint(options: Mapping[str, Any] | None) -> str:
    """The endpoint a client with ``options`` would send to, as :class:`OpenAIJudge` resolves it (without building a
    client or needing a key): ``azure_endpoint``, else ``base_url``, else ``AZURE_OPENAI_ENDPOINT``, else
    ``OPENAI_BASE_URL``, else the public API. Part of a judge metric's cache key."""
    options = options or {}
    base_url = options.get("base_url") or None
    azure = options.get("azure_endpoint") or (None if base_url else env_value("AZURE_OPENAI_ENDPOINT"))
    if azure:
        return f"azure:{azure}"
    return str(base_url or env_value("OPENAI_BASE_URL") or DEFAULT_BASE_URL)


def _int_option(options: Mapping[str, Any], name: str, default: int, minimum: int) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"judge option {name} must be an integer >= {minimum}, got {quote(value)}")
    return value


class OpenAIJudge:
    """A judge model behind the OpenAI chat completions API (see the module docstring for what it does).

    Every environment variable read here counts as unset when empty (:mod:`evaltasks._env`), and resolved
    values are passed to the client explicitly.

    Args:
        model: the model (Azure: the deployment name).
        options: the judge options (docs/judges.md#judge-client): ``api_key`` (default
            ``OPENAI_API_KEY``; Azure: ``AZURE_OPENAI_API_KEY``), ``base_url`` (``OPENAI_BASE_URL``, else the
            public API), ``organization`` (``OPENAI_ORG_ID``), ``project`` (``OPENAI_PROJECT_ID``),
            ``azure_endpoint`` (``AZURE_OPENAI_ENDPOINT`` unless ``base_url`` is given), ``api_version``
            (``OPENAI_API_VERSION``), ``timeout`` (seconds per HTTP request, default 60), ``max_retries`` (5),
            ``content_retries`` (2), ``temperature`` (the judge model's default sampling temperature, read by
            the metrics; 0-2), ``max_concurrency`` (requests in flight at once per endpoint and model in the
            process, default 8), ``requests_per_minute`` / ``tokens_per_minute`` (None: unlimited), ``prices``
            (``{model: {input, output}}``, USD per million tokens, over the built-in table),
            ``price_per_million_input_tokens`` / ``price_per_million_output_tokens`` (this model's),
            ``structured_outputs`` (``auto`` | ``json_schema`` | ``json_object`` | ``off``), ``logprobs``
            (``auto`` | true | false), ``seed`` (an integer sent with every request).

    Raises:
        CredentialsError: no API key given or set.
        ValueError: an unknown option, or an option of the wrong type or out of range.
        ConfigError: Azure without an API version.
    """

    def __init__(self, model: str, options: Mapping[str, Any] | None = None) -> None:
        options = dict(options or {})
        unknown = sorted(set(options) - OPTIONS)
        if unknown:
            raise ValueError(
                f"unknown judge option(s) {', '.join(map(quote, unknown))}; known: {', '.join(sorted(OPTIONS))}"
            )
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"the judge model must be a non-empty string, got {quote(model)}")
        for name in ("api_key", "base_url", "organization", "project", "azure_endpoint", "api_version"):
            if options.get(name) is not None and not isinstance(options[name], str):
                raise ValueError(f"judge option {name} must be a string, got {quote(options[name])}")
        self.model = model
        self.max_retries = _int_option(options, "max_retries", 5, 0)
        self.content_retries = _int_option(options, "content_retries", 2, 0)
        self.max_concurrency = _int_option(options, "max_concurrency", DEFAULT_MAX_CONCURRENCY, 1)
        timeout = options.get("timeout", 60.0)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not timeout > 0
            or not math.isfinite(timeout)
        ):
            raise ValueError(f"judge option timeout must be a positive number of seconds, got {quote(timeout)}")
        temperature = options.get("temperature", 0.0)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
            raise ValueError(f"judge option temperature must be a number from 0 to 2, got {quote(temperature)}")
        self.temperature = float(temperature)
        seed = options.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"judge option seed must be an integer, got {quote(seed)}")
        self.seed = seed
        structured = options.get("structured_outputs", "auto")
        if structured not in ("auto", *FORMATS):
            raise ValueError(
                f"judge option structured_outputs must be one of auto, json_schema, json_object, off; "
                f"got {quote(structured)}"
            )
        self.structured_outputs: str = structured
        logprobs = options.get("logprobs", "auto")
        if logprobs not in ("auto", True, False):
            raise ValueError(f"judge option logprobs must be auto, true or false, got {quote(logprobs)}")
        self.logprobs_mode: str | bool = logprobs
        self.price: Price = resolve_price(
            model,
            options.get("prices"),
            options.get("price_per_million_input_tokens"),
            options.get("price_per_million_output_tokens"),
        )

        base_url = options.get("base_url") or None
        azure_endpoint = options.get("azure_endpoint") or None
        if not azure_endpoint and not base_url:  # an explicit base_url wins over AZURE_OPENAI_ENDPOINT
            azure_endpoint = env_value("AZURE_OPENAI_ENDPOINT")
        if azure_endpoint:
            key = options.get("api_key") or env_value("AZURE_OPENAI_API_KEY", "OPENAI_API_KEY")
            variable = "AZURE_OPENAI_API_KEY"
        else:
            key = options.get("api_key") or env_value("OPENAI_API_KEY")
            variable = "OPENAI_API_KEY"
        if not key:
            raise CredentialsError(
                f"the judge model {model} needs an API key: set the {variable} environment variable (or pass the "
                "judge option api_key in Python; a suite file may not hold one); a local OpenAI-compatible server "
                "accepts any non-empty key"
            )
        register_secret(
            key
        )  # never in a reason, a log line or a report, in this process (docs/reports.md#secrets-in-reports)
        self._key_variable = variable
        common: dict[str, Any] = {"api_key": key, "timeout": float(timeout), "max_retries": self.max_retries}
        if azure_endpoint:
            version = options.get("api_version") or env_value("OPENAI_API_VERSION")
            if not version:
                raise ConfigError(
                    "Azure OpenAI needs an API version: set the judge option api_version or the "
                    "OPENAI_API_VERSION environment variable"
                )
            common.update(azure_endpoint=azure_endpoint, api_version=version)
            self.endpoint = azure_endpoint
        else:
            common["base_url"] = base_url or env_value("OPENAI_BASE_URL") or DEFAULT_BASE_URL
            self.endpoint = client_base_url(common["base_url"])
        # The client is built on the first request (openai takes about a second to import; a run whose answers
        # are all stored sends none). Organization and project are set after construction: the client re-reads
        # OPENAI_ORG_ID / OPENAI_PROJECT_ID when given None.
        self._client_options = (
            bool(azure_endpoint),
            common,
            options.get("organization") or env_value("OPENAI_ORG_ID"),
            options.get("project") or env_value("OPENAI_PROJECT_ID"),
        )
        self._built: Any = None
        self._limiter = shared_limiter(
            self.endpoint, model, options.get("requests_per_minute"), options.get("tokens_per_minute")
        )
        with _shared_lock:
            self._semaphore = _semaphores.setdefault(
                (self.endpoint, model, self.max_concurrency), threading.BoundedSemaphore(self.max_concurrency)
            )
            self._capability = _capabilities.setdefault(
                (self.endpoint, model),
                {"format": AUTO_FORMAT, "logprobs": True, "logprobs_seen": False, "probe": threading.Lock()},
            )

    @property
    def _client(self) -> Any:
        """The ``openai`` client (``AzureOpenAI`` for an Azure endpoint), built on first use, once."""
        if self._built is None:
            import openai

            azure, common, organization, project = self._client_options
            with _shared_lock:
                if self._built is None:
                    client = openai.AzureOpenAI(**common) if azure else openai.OpenAI(**common)
                    client.organization, client.project = organization, project
                    self._built = client
        return self._built

    # -- capabilities --------------------------------------------------------------------------------------
    @property
    def supports_logprobs(self) -> bool:
        """False when ``logprobs: false``, or once the endpoint refused or ignored them (``auto``)."""
        if self.logprobs_mode is False:
            return False
        return self.logprobs_mode is True or bool(self._capability["logprobs"])

    @contextlib.contextmanager
    def probing_logprobs(self) -> Iterator[None]:
        """Hold this around deciding on and sending a request with logprobs: while the endpoint's support is not
        known yet (``logprobs: auto``, neither an answer with them nor a refusal of them so far in this process)
        only one caller at a time is inside, so the others read :attr:`supports_logprobs` once the first
        answer settled it. Thread-safe; shared by every client of the same endpoint and model."""
        if self.logprobs_mode != "auto" or self._logprobs_known():
            yield
            return
        probe: threading.Lock = self._capability["probe"]
        probe.acquire()
        if self._logprobs_known():  # settled while this caller waited: the others need not wait for it
            probe.release()
            yield
            return
        try:
            yield
        finally:
            probe.release()

    def note_logprobs(self) -> None:
        """Record that this endpoint returned logprobs (a stored answer of it carries them), so
        :meth:`probing_logprobs` lets callers through at once: a cached run is not read one case at a time."""
        if self.logprobs_mode == "auto" and self._capability["logprobs"]:
            self._capability["logprobs_seen"] = True

    def _logprobs_known(self) -> bool:
        return not self._capability["logprobs"] or bool(self._capability["logprobs_seen"])

    def _format(self) -> str:
        """The ``response_format`` mode a request with a schema is sent with now."""
        return self.structured_outputs if self.structured_outputs != "auto" else self._capability["format"]

    def _wants_logprobs(self, request: JudgeRequest) -> bool:
        return request.top_logprobs > 0 and self.supports_logprobs

    # -- sending -------------------------------------------------------------------------------------------
    def estimate_cost(self, request: JudgeRequest) -> float:
        """US dollars ``request`` can cost at most (:func:`worst_case_tokens` × the model's prices)."""
        prompt, completion = worst_case_tokens(request, schema_sent=self._format() == "json_schema")
        return self.price.cost(prompt, completion)

    def chat_completion(
        self, messages: Sequence[Mapping[str, Any]], *, max_tokens: int, params: Mapping[str, Any] | None = None
    ) -> ChatCompletion:
        """One chat completion as a chat target sends it (:mod:`evaltasks.targets.chat`): ``messages``,
        ``max_tokens`` and ``params`` (``temperature``, ``seed``, ``response_format``, ``tools``...) sent as given,
        through the same rate limits, concurrency limit, client retries and error rules as judge requests (one
        chat client for judges and targets); no schema, no content retries, no capability fallback, nothing
        stored. The cost is the response's usage × the model's price.

        Raises:
            CredentialsError: the key was rejected (401/403).
            JudgeError: refused (4xx), still failing after the client's retries, a ``Retry-After`` over the
                client's cap, or a body the client cannot read; ``requests`` says how many were sent.
        """
        import openai

        if self._limiter is not None:
            prompt_bound = sum(_tokens.estimate_tokens(str(m.get("content") or "")) for m in messages)
            self._limiter.acquire(prompt_bound + max_tokens)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in messages],
            "max_tokens": max_tokens,
            **(params or {}),
        }
        with self._semaphore:
            try:
                raw, taken = self._post(kwargs, 0, "chat target")
            except openai.BadRequestError as exc:
                raise JudgeError(
                    f"the chat target endpoint {self.endpoint} refused the request (HTTP 400): "
                    f"{bounded(exc.message, 300)}",
                    requests=1,
                ) from None
            except _Unusable as exc:
                raise JudgeError(str(exc), requests=exc.taken) from None
            try:
                response = raw.parse()
            except (openai.APIResponseValidationError, ValueError, TypeError) as exc:
                raise JudgeError(f"unreadable response body: {bounded(str(exc), 200)}", requests=taken) from None
        usage = getattr(response, "usage", None)
        prompt_tokens = _count(getattr(usage, "prompt_tokens", 0))
        completion_tokens = _count(getattr(usage, "completion_tokens", 0))
        return ChatCompletion(
            response=response,
            requests=taken,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost=self.price.cost(prompt_tokens, completion_tokens),
        )

    def complete(self, request: JudgeRequest) -> JudgeReply:
        """Send ``request`` (no budget; :meth:`send`)."""
        return self.send(request, None)

    def send(self, request: JudgeRequest, budget: Any = None) -> JudgeReply:
        """Send ``request``, re-requesting unusable answers; every attempt reserves its worst case on ``budget``
        (a :class:`~evaltasks.judges.budget.Budget`, or None) first and settles its billed cost after.

        Raises:
            JudgeError: refused (4xx), still failing after the client's retries, or no usable answer after the
                content retries.
            BudgetExhausted: ``budget`` does not allow the attempt (it is not sent).
            CredentialsError: the key was rejected (401/403).
        """
        requests = prompt_tokens = completion_tokens = 0
        cost = 0.0
        attempt = 0
        while True:
            reservation = budget.reserve(self.estimate_cost(request)) if budget is not None else None
            billed = 0.0
            try:
                if self._limiter is not None:
                    prompt_bound = sum(_tokens.estimate_tokens(str(m["content"])) for m in request.messages)
                    self._limiter.acquire(prompt_bound + request.max_tokens * max(1, request.n))
                with self._semaphore:
                    try:
                        response, taken = self._create(request)
                    except JudgeError as exc:  # what earlier attempts of this request spent goes with it
                        raise JudgeError(
                            str(exc),
                            requests=requests + max(exc.requests, 1),
                            prompt_tokens=prompt_tokens,
                            completion_tokens=completion_tokens,
                            cost=cost,
                        ) from exc.__cause__
                requests += taken
                usage = getattr(response, "usage", None)
                p_tokens = _count(getattr(usage, "prompt_tokens", 0))
                c_tokens = _count(getattr(usage, "completion_tokens", 0))
                billed = self.price.cost(p_tokens, c_tokens)
                prompt_tokens += p_tokens
                completion_tokens += c_tokens
                cost += billed
                try:
                    choices = self._choices(response, request)
                except (JudgeError, ValueError, TypeError, AttributeError, KeyError) as exc:
                    if attempt >= self.content_retries:
                        reason = str(exc) if isinstance(exc, JudgeError) else f"{type(exc).__name__}: {exc}"
                        raise JudgeError(
                            f"no usable answer from the judge {self.model} at {self.endpoint} after "
                            f"{attempt + 1} attempt(s): {reason}",
                            requests=requests,
                            prompt_tokens=prompt_tokens,
                            completion_tokens=completion_tokens,
                            cost=cost,
                        ) from exc
                    attempt += 1
                    continue
                model = getattr(response, "model", None)
                return JudgeReply(
                    choices=choices,
                    model=model if isinstance(model, str) and model else self.model,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    cost=cost,
                    cached=False,
                    requests=requests,
                )
            except _Unusable as exc:
                requests += exc.taken
                if attempt >= self.content_retries:
                    raise JudgeError(
                        f"no usable answer from the judge {self.model} at {self.endpoint} after "
                        f"{attempt + 1} attempt(s): {exc}",
                        requests=requests,
                        prompt_tokens=prompt_tokens,
                        completion_tokens=completion_tokens,
                        cost=cost,
                    ) from None
                attempt += 1
            finally:
                if budget is not None and reservation is not None:
                    budget.settle(reservation, billed)

    def _create(self, request: JudgeRequest) -> tuple[Any, int]:
        """One request through the client (its HTTP retries included), falling back on capability 400s;
        returns (the parsed response, HTTP requests it took)."""
        import openai

        taken = 0
        while True:
            fmt = self._format() if request.schema is not None else "off"
            logprobs = self._wants_logprobs(request)
            kwargs: dict[str, Any] = {
                "model": self.model,
                "messages": [dict(m) for m in request.messages],
                "temperature": request.temperature,
                "max_tokens": request.max_tokens,
            }
            if request.n > 1:
                kwargs["n"] = request.n
            if logprobs:
                kwargs["logprobs"] = True
                kwargs["top_logprobs"] = min(request.top_logprobs, 20)
            if self.seed is not None:
                kwargs["seed"] = self.seed
            if fmt == "json_schema":
                assert request.schema is not None
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {
                        "name": request.schema_name,
                        "schema": dict(request.schema),
                        "strict": strict_schema(request.schema),
                    },
                }
            elif fmt == "json_object":
                kwargs["response_format"] = {"type": "json_object"}
            try:
                raw, taken = self._post(kwargs, taken)
            except openai.BadRequestError as exc:
                taken += 1
                said = f"{getattr(exc, 'param', '') or ''} {exc.message} {json.dumps(exc.body, default=str)}".lower()
                if (
                    fmt != "off"
                    and self.structured_outputs == "auto"
                    and ("response_format" in said or "json_schema" in said or "json_object" in said)
                ):
                    self._downgrade_format(fmt)
                    continue
                if logprobs and self.logprobs_mode == "auto" and "logprobs" in said:
                    self._capability["logprobs"] = False
                    continue
                raise JudgeError(
                    f"the judge endpoint {self.endpoint} refused the request (HTTP 400): {bounded(exc.message, 300)}",
                    requests=taken,
                ) from None
            try:
                return raw.parse(), taken
            except (openai.APIResponseValidationError, ValueError, TypeError) as exc:
                raise _Unusable(f"unreadable response body: {bounded(str(exc), 200)}", taken) from None

    def _post(self, kwargs: dict[str, Any], taken: int, who: str = "judge") -> tuple[Any, int]:
        """One ``chat.completions.create(**kwargs)`` through the client (its HTTP retries included); returns the
        raw response and ``taken`` + the HTTP requests it took. A 400 is raised as ``openai.BadRequestError``
        (the caller decides: a capability fallback, or a refusal). ``who``: whose endpoint it is in messages
        (``judge``, ``chat target``).

        Raises:
            CredentialsError: 401 or 403.
            JudgeError: a retry-class failure after the client's retries, a ``Retry-After`` over the client's
                cap, another refusal (404, 422...).
            _Unusable: a response body the client cannot read.
        """
        import openai

        rejected = None
        try:
            raw = self._client.chat.completions.with_raw_response.create(**kwargs)
            return raw, taken + int(getattr(raw, "retries_taken", 0) or 0) + 1
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            rejected = exc.status_code  # raised below, outside this block: see there
        except openai.BadRequestError:
            raise
        except (
            openai.RateLimitError,
            openai.InternalServerError,
            openai.APITimeoutError,
            openai.APIConnectionError,
        ) as exc:
            status = getattr(exc, "status_code", None)
            what = f"HTTP {status}" if status else type(exc).__name__
            retries = self._retries_taken(exc)
            wait = self._retry_after(exc)
            if wait is not None and wait > _max_retry_after():
                raise JudgeError(
                    f"the {who} endpoint {self.endpoint} asked to wait {wait:g} s before retrying ({what}), "
                    f"more than the {_max_retry_after():g} s the client waits: {bounded(str(exc), 300)}",
                    requests=taken + retries + 1,
                ) from None
            raise JudgeError(
                f"the {who} endpoint {self.endpoint} still failing after {retries} "
                f"retries: {what}: {bounded(str(exc), 300)}",
                requests=taken + retries + 1,
            ) from None
        except openai.APIStatusError as exc:
            raise JudgeError(
                f"the {who} endpoint {self.endpoint} refused the request (HTTP {exc.status_code}): "
                f"{bounded(exc.message, 300)}",
                requests=taken + 1,
            ) from None
        except (openai.APIResponseValidationError, ValueError) as exc:
            raise _Unusable(f"unreadable response body: {bounded(str(exc), 200)}", taken + 1) from None
        # Not raised in the except block: the error would keep the openai exception as its context, and a process
        # worker's failed task run (Prefect pickles its state) would then not unpickle in the run's process (an
        # openai status error needs its response to be built), a traceback instead of exit 2.
        raise CredentialsError(
            f"the {who} endpoint {self.endpoint} rejected the key ({self._key_variable}): HTTP {rejected}"
        )

    def _retries_taken(self, exc: Exception) -> int:
        """How many times the client retried before ``exc`` (a retry-class error): the ``x-stainless-retry-count``
        header of its last attempt where the client sent one, else ``max_retries`` (it retries all of them)."""
        try:
            return int(exc.request.headers["x-stainless-retry-count"])  # type: ignore[attr-defined]
        except (AttributeError, KeyError, TypeError, ValueError, RuntimeError):
            return self.max_retries

    def _retry_after(self, exc: Exception) -> float | None:
        """Seconds the endpoint's ``Retry-After`` / ``retry-after-ms`` header on ``exc``'s response asked to wait
        (as the client reads it), or None without one."""
        response = getattr(exc, "response", None)
        parse = getattr(self._client, "_parse_retry_after_header", None)
        if response is None or parse is None:
            return None
        try:
            wait = parse(response.headers)
        except Exception:  # noqa: BLE001 - a header the client cannot read is no header
            return None
        return float(wait) if isinstance(wait, (int, float)) and math.isfinite(wait) else None

    def _downgrade_format(self, refused: str) -> None:
        """Remember that the endpoint refused ``refused``: the next less structured mode is used from now on."""
        following = FORMATS[min(FORMATS.index(refused) + 1, len(FORMATS) - 1)]
        with _shared_lock:
            if FORMATS.index(self._capability["format"]) < FORMATS.index(following):
                self._capability["format"] = following

    def _choices(self, response: Any, request: JudgeRequest) -> tuple[Choice, ...]:
        """The reply's choices, each parsed and validated. Raises JudgeError (or ValueError, TypeError...) when
        one is unusable."""
        items = list(getattr(response, "choices", None) or [])
        if not items:
            raise JudgeError("the response has no choices")
        asked = self._wants_logprobs(request)
        choices = []
        for item in sorted(items, key=lambda c: getattr(c, "index", 0) or 0):
            text = item.message.content
            if not isinstance(text, str):
                raise JudgeError(f"a choice has no text (finish_reason {getattr(item, 'finish_reason', None)!r})")
            parsed = parse_answer(text, request.schema) if request.schema is not None else None
            choices.append(Choice(text=text, parsed=parsed, logprobs=_token_logprobs(item) if asked else None))
        if asked and self.logprobs_mode == "auto" and all(c.logprobs is None for c in choices):
            self._capability["logprobs"] = False  # asked for and ignored: this endpoint has none
        elif asked and any(c.logprobs is not None for c in choices):
            self._capability["logprobs_seen"] = True
        return tuple(choices)


def client_base_url(base_url: str) -> str:
    """``base_url`` as the ``openai`` client holds it (``str(openai.OpenAI(base_url=...).base_url)``: httpx's
    normalised URL with a trailing ``/``), without importing openai: the endpoint that keys stored answers."""
    import httpx

    url = httpx.URL(base_url)
    path, separator, query = url.raw_path.partition(b"?")  # openai's BaseClient._enforce_trailing_slash
    return str(url if path.endswith(b"/") else url.copy_with(raw_path=path + b"/" + separator + query))


def _max_retry_after() -> float:
    """The longest ``Retry-After`` the ``openai`` client waits out (120 s in openai 3.x)."""
    import openai._constants

    return float(getattr(openai._constants, "MAX_RETRY_AFTER_DELAY", 120))


@dataclass(frozen=True)
class ChatCompletion:
    """What :meth:`OpenAIJudge.chat_completion` returns.

    Attributes:
        response: the parsed ``ChatCompletion`` object of the ``openai`` client.
        requests: HTTP requests it took (the client's retries included).
        prompt_tokens: prompt tokens billed (the response's usage).
        completion_tokens: completion tokens billed.
        cost: US dollars (the tokens × the model's price).
    """

    response: Any
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost: float


class _Unusable(Exception):
    """A response arrived but its body cannot be read (retried at the content level)."""

    def __init__(self, message: str, taken: int) -> None:
        super().__init__(message)
        self.taken = taken


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _token_logprobs(choice: Any) -> tuple[TokenLogprob, ...] | None:
    """The choice's ``logprobs.content`` as :class:`TokenLogprob` s, or None when it has none."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return None
    return tuple(
        TokenLogprob(
            str(item.token),
            float(item.logprob),
            tuple((str(alt.token), float(alt.logprob)) for alt in (item.top_logprobs or [])),
        )
        for item in content
    )
