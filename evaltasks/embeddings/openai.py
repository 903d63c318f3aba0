"""OpenAI embeddings through the official ``openai`` client (OpenAI, Azure OpenAI, any compatible server).

Retries, in layers, each bounded:

1. HTTP level — the ``openai`` client retries 408/409/429/5xx, timeouts and connection errors
   ``max_retries`` times (default 5) with exponential backoff and jitter, honouring ``Retry-After`` /
   ``retry-after-ms``.
2. Content level — this provider retries a response that arrived but is unusable (malformed JSON, a wrong
   number of vectors, NaN or infinite values) ``content_retries`` times (default 3), with exponential
   backoff (0.5 s doubling, up to 8 s) and full jitter.
   Unusable includes: no ``data`` list, items without an ``embedding`` or with non-numeric values, vectors
   whose dimensions disagree (within the response, with ``dimensions`` when requested, or with what this
   provider received before), and ``index`` fields that contradict each other (:func:`_input_order`: all
   absent is list order; a partly indexed response, such as Gemini's without an ``index`` of 0, is read by
   its indexes when one is missing, or in list order when the present ones agree with it).
3. Task level — Prefect's ``embed-*`` tasks retry twice more, only for errors still transient.

So one request is attempted at most (max_retries + 1) × (content_retries + 1) × 3 times (6 × 4 × 3 = 72 with
the defaults). 400 and 404 fail at once (a bad request, an unknown model); 401 and 403 raise
:class:`~evaltasks.errors.CredentialsError` at once (exit 2 in the CLI).

Requests hold at most ``max_inputs_per_request`` inputs (default 2048, the API's limit; on Azure OpenAI 16,
what its embeddings deployments take) and ``max_tokens_per_request`` tokens (default 300,000, the API's
limit); texts over the model's input limit (8191 tokens) are truncated and flagged. Empty strings are never
sent. A 400 that says "Too many inputs" (Azure's answer above its limit) is split once: the provider adopts the
limit the message states (``The max number of inputs is N``; half the request where it states none) for the
rest of its requests and sends the texts again in requests of that size; a second such answer fails.
Costs come from each response's ``usage`` and :data:`PRICES_PER_MILLION_TOKENS` (overridable), split over the
texts of a request by their share of its tokens.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import random
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from evaltasks._env import env_value
from evaltasks._redact import register as register_secret
from evaltasks.embeddings import _tokens
from evaltasks.embeddings._rate_limit import shared_limiter
from evaltasks.embeddings.base import EmbeddingBatch, normalize_rows
from evaltasks.errors import ConfigError, CredentialsError, EvalTasksError, ProviderError, quote

DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_INPUTS_PER_REQUEST = 2048  # the embeddings endpoint's per-request input limit
AZURE_MAX_INPUTS_PER_REQUEST = 16  # Azure OpenAI embeddings deployments: "The max number of inputs is 16"
MAX_TOKENS_PER_REQUEST = 300_000  # the embeddings endpoint's per-request token limit
MAX_INPUT_TOKENS = 8191  # input limit of text-embedding-3-small/-large and ada-002
PRICES_PER_MILLION_TOKENS: dict[str, float] = {  # US dollars, list prices of the embeddings API
    "text-embedding-3-small": 0.02,
    "text-embedding-3-large": 0.13,
    "text-embedding-ada-002": 0.10,
}


class _ContentError(Exception):
    """A response arrived but cannot be used (retried at the content level)."""


class _TooManyInputs(Exception):
    """A 400 saying the request held too many inputs (Azure OpenAI: "Too many inputs. The max number of inputs
    is 16. ..."); ``limit``: the number it states, or None."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        found = re.search(r"max(?:imum)? number of inputs is (\d+)", message, re.IGNORECASE)
        self.limit = int(found.group(1)) if found else None


class OpenAIEmbeddingProvider:
    """Embeddings from the OpenAI API, Azure OpenAI, or an OpenAI-compatible server.

    Every environment variable read here counts as unset when empty (:mod:`evaltasks._env`), and the resolved
    values are passed to the client explicitly, so an empty variable never reaches a request.

    Args:
        model_name: the model (Azure: the deployment name); default ``text-embedding-3-small``.
        api_key: default ``OPENAI_API_KEY`` (Azure: ``AZURE_OPENAI_API_KEY``).
        base_url: default ``OPENAI_BASE_URL``, else the public API.
        organization: default ``OPENAI_ORG_ID``.
        project: default ``OPENAI_PROJECT_ID``.
        dimensions: output dimensions for models that support shortening (text-embedding-3-*).
        timeout: seconds per HTTP request.
        max_retries: HTTP-level retries by the client.
        content_retries: retries of unusable responses (see the module docstring).
        azure_endpoint: use ``openai.AzureOpenAI`` with this endpoint (or set ``AZURE_OPENAI_ENDPOINT``, which an
            explicit ``base_url`` overrides).
        api_version: Azure API version (default ``OPENAI_API_VERSION``).
        price_per_million_tokens: override of the price table for this model, US dollars.
        max_input_tokens: the model's per-input limit; longer texts are truncated.
        max_tokens_per_request: token budget of one request (default 300,000).
        max_inputs_per_request: inputs in one request (default 2048; on Azure OpenAI 16). A server that answers
            "Too many inputs" gets requests of the size it states, once (see the module docstring).
        requests_per_minute, tokens_per_minute: in-process rate limits shared by every provider of the same
            endpoint and model (a token bucket holding one second's budget); None (default): no limit.

    Raises:
        CredentialsError: no API key given or set.
        ValueError: an option of the wrong type or out of range (e.g. ``max_input_tokens: "50"``).
        ConfigError: Azure without an API version (``api_version`` or ``OPENAI_API_VERSION``).
    """

    provider = "openai"

    def __init__(
        self,
        model_name: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        project: str | None = None,
        dimensions: int | None = None,
        timeout: float = 60.0,
        max_retries: int = 5,
        content_retries: int = 3,
        azure_endpoint: str | None = None,
        api_version: str | None = None,
        price_per_million_tokens: float | None = None,
        max_input_tokens: int = MAX_INPUT_TOKENS,
        max_tokens_per_request: int = MAX_TOKENS_PER_REQUEST,
        max_inputs_per_request: int | None = None,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
    ) -> None:
        import openai

        self.model_name = model_name or DEFAULT_OPENAI_MODEL
        if dimensions is not None and (
            isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
        ):
            raise ValueError(f"dimensions must be a positive integer, got {quote(dimensions)}")
        for label, value in (("max_retries", max_retries), ("content_retries", content_retries)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{label} must be a non-negative integer, got {quote(value)}")
        for label, value in (
            ("max_input_tokens", max_input_tokens),
            ("max_tokens_per_request", max_tokens_per_request),
            (
                "max_inputs_per_request",
                MAX_INPUTS_PER_REQUEST if max_inputs_per_request is None else max_inputs_per_request,
            ),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be a positive integer, got {quote(value)}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {quote(timeout)}")
        price = price_per_million_tokens
        if price is not None and (isinstance(price, bool) or not isinstance(price, (int, float)) or not price >= 0):
            raise ValueError(f"price_per_million_tokens must be a non-negative number, got {quote(price)}")
        self.dimensions = dimensions
        self.content_retries = content_retries
        self.max_input_tokens = max_input_tokens
        self.max_tokens_per_request = max_tokens_per_request
        self.max_inputs_per_request = max_inputs_per_request or MAX_INPUTS_PER_REQUEST  # None: Azure's 16 below
        self._split = False  # whether a "Too many inputs" answer has set max_inputs_per_request (once)
        self._split_lock = threading.Lock()
        self._observed_dimensions: int | None = None  # of the first usable response (see output_dimensions)
        self._observed_lock = threading.Lock()
        self.price_per_million_tokens = (
            price_per_million_tokens
            if price_per_million_tokens is not None
            else PRICES_PER_MILLION_TOKENS.get(self.model_name, 0.0)
        )
        self._openai = openai
        if not azure_endpoint and not base_url:  # an explicit base_url wins over AZURE_OPENAI_ENDPOINT
            azure_endpoint = env_value("AZURE_OPENAI_ENDPOINT")
        if azure_endpoint:
            key = api_key or env_value("AZURE_OPENAI_API_KEY", "OPENAI_API_KEY")
            variable = "AZURE_OPENAI_API_KEY"
        else:
            key = api_key or env_value("OPENAI_API_KEY")
            variable = "OPENAI_API_KEY"
        if not key:
            raise CredentialsError(
                f"the openai embedding provider needs an API key: set the {variable} environment variable, "
                "or use embedding_provider: local (sentence-transformers, offline)"
            )
        register_secret(
            key
        )  # never in a reason, a log line or a report, in this process (docs/reports.md#secrets-in-reports)
        self._key_variable = variable
        common: dict[str, Any] = {"api_key": key, "timeout": timeout, "max_retries": max_retries}
        # Every value is resolved here and passed explicitly: given None, the client reads the variable
        # itself, and would take an empty one literally (e.g. OPENAI_BASE_URL="" -> a blank endpoint).
        self._client: openai.OpenAI
        if azure_endpoint:
            version = api_version or env_value("OPENAI_API_VERSION")
            if not version:
                raise ConfigError(
                    "Azure OpenAI needs an API version: set the provider option api_version or the "
                    "OPENAI_API_VERSION environment variable"
                )
            self._client = openai.AzureOpenAI(azure_endpoint=azure_endpoint, api_version=version, **common)
            self.endpoint = azure_endpoint
            if max_inputs_per_request is None:
                self.max_inputs_per_request = AZURE_MAX_INPUTS_PER_REQUEST
        else:
            self._client = openai.OpenAI(
                base_url=base_url or env_value("OPENAI_BASE_URL") or DEFAULT_BASE_URL, **common
            )
            self.endpoint = str(self._client.base_url)
        # Set after construction: the client re-reads OPENAI_ORG_ID / OPENAI_PROJECT_ID when given None.
        self._client.organization = organization or env_value("OPENAI_ORG_ID")
        self._client.project = project or env_value("OPENAI_PROJECT_ID")
        self._limiter = shared_limiter(self.endpoint, self.model_name, requests_per_minute, tokens_per_minute)

    @property
    def output_dimensions(self) -> int | None:
        """Dimensions of this provider's vectors: ``dimensions`` when requested, else those of the first usable
        response this provider received; None before any.

        The namespace does not pin them (an endpoint may serve any model under a name), so the reference
        index compares them with the dimensions it stored (:class:`~evaltasks.index.ReferenceIndex`).
        """
        return self.dimensions or self._observed_dimensions

    @property
    def fingerprint(self) -> str:
        """Hash of the model name and dimensions (an API model is identified by its name)."""
        return hashlib.sha256(f"{self.model_name}:{self.dimensions}".encode()).hexdigest()[:16]

    @property
    def namespace(self) -> str:
        """``openai/<model>/<fingerprint>``."""
        return f"openai/{self.model_name}/{self.fingerprint}"

    def estimate_cost(self, texts: Sequence[str]) -> float:
        """Estimated US dollars to embed ``texts`` (tokens per :func:`_tokens.estimate_tokens`)."""
        tokens = sum(min(_tokens.estimate_tokens(t), self.max_input_tokens) for t in texts)
        return tokens * self.price_per_million_tokens / 1e6

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into float32 (n, d), rows L2-normalised (see :meth:`embed_batch`)."""
        return self.embed_batch(texts).vectors

    def embed_batch(self, texts: Sequence[str]) -> EmbeddingBatch:
        """Embed non-empty ``texts`` in requests of at most ``max_inputs_per_request`` inputs and the token budget.

        Raises:
            ValueError: an empty string was passed (it would make the whole request fail).
            CredentialsError: the key was rejected (401/403).
            ConfigError: the model does not exist (404).
            ProviderError: other failures; ``transient`` when retrying later may help.
        """
        if any(not t for t in texts):
            raise ValueError("empty strings cannot be embedded by the OpenAI API")
        prepared: list[str] = []
        truncated = np.zeros(len(texts), dtype=bool)
        bounds = np.zeros(len(texts), dtype=np.int64)
        for i, text in enumerate(texts):
            cut, was_cut = _tokens.truncate(text, self.max_input_tokens)
            prepared.append(cut)
            truncated[i] = was_cut
            bounds[i] = max(1, _tokens.upper_bound_tokens(cut))
        vectors: list[np.ndarray] = []
        costs = np.zeros(len(texts))
        total_tokens = 0
        pending = self._requests(bounds)
        while pending:
            start, stop = pending.pop(0)
            if self._limiter is not None:
                self._limiter.acquire(int(bounds[start:stop].sum()))
            try:
                block, tokens = self._request(prepared[start:stop])
            except _TooManyInputs as exc:
                self._adopt_limit(exc, stop - start)
                pending = [(start + a, start + b) for a, b in self._requests(bounds[start:])]
                continue
            except EvalTasksError as exc:  # without the SDK's error behind it (see _request)
                exc.__cause__ = exc.__context__ = None
                raise
            vectors.append(block)
            share = bounds[start:stop] / bounds[start:stop].sum()
            costs[start:stop] = share * tokens * self.price_per_million_tokens / 1e6
            total_tokens += tokens
        if not vectors:
            return EmbeddingBatch(np.zeros((0, self.dimensions or 0), np.float32), costs, truncated, 0)
        return EmbeddingBatch(normalize_rows(np.concatenate(vectors)), costs, truncated, total_tokens)

    def _requests(self, bounds: np.ndarray) -> list[tuple[int, int]]:
        """Split texts into [start, stop) ranges of ≤ ``max_inputs_per_request`` inputs and ≤ the token budget."""
        ranges, start, budget = [], 0, 0
        for i, tokens in enumerate(bounds):
            full = i - start >= self.max_inputs_per_request or budget + tokens > self.max_tokens_per_request
            if i > start and full:
                ranges.append((start, i))
                start, budget = i, 0
            budget += int(tokens)
        if start < len(bounds):
            ranges.append((start, len(bounds)))
        return ranges

    def _adopt_limit(self, exc: _TooManyInputs, sent: int) -> None:
        """Take the input limit of a "Too many inputs" answer to a request of ``sent`` inputs (the number it
        states, else half of ``sent``) as ``max_inputs_per_request`` from now on: once per provider.

        Raises:
            ProviderError: a limit was adopted before (the server still refuses), or none below ``sent`` follows.
        """
        with self._split_lock:
            if sent > self.max_inputs_per_request:
                return  # another thread adopted a lower limit after this request was cut: cut it again
            limit = exc.limit if exc.limit is not None else sent // 2
            if self._split or not 1 <= limit < sent:
                raise ProviderError(
                    f"embeddings request rejected: HTTP 400: {exc} (with {sent} inputs per request; "
                    "set max_inputs_per_request)",
                    transient=False,
                )
            self._split = True
            self.max_inputs_per_request = min(self.max_inputs_per_request, limit)

    def _request(self, chunk: list[str]) -> tuple[np.ndarray, int]:
        """One embeddings request with content-level retries; returns (vectors, billed tokens)."""
        openai = self._openai
        # base64 asked explicitly: the client then leaves the body to _parse (its own decoding of an implicit
        # base64 raised AttributeError on malformed bodies such as {"data": "nope"}).
        kwargs: dict[str, Any] = {"encoding_format": "base64"}
        if self.dimensions:
            kwargs["dimensions"] = self.dimensions
        attempt = 0
        # Each error below is raised without its cause: the SDK's exception holds the request (its key) and the
        # body (which may echo it), and does not survive the pickling that brings an error from a worker process.
        while True:
            try:
                response = self._client.embeddings.create(model=self.model_name, input=chunk, **kwargs)
                return self._parse(response, len(chunk))
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                raise CredentialsError(
                    f"the embeddings API at {self.endpoint} rejected the key ({self._key_variable}): "
                    f"HTTP {exc.status_code}"
                ) from None
            except openai.NotFoundError:
                raise ConfigError(
                    f"embedding model '{self.model_name}' was not found at {self.endpoint} (HTTP 404)"
                ) from None
            except (
                openai.RateLimitError,
                openai.APITimeoutError,
                openai.APIConnectionError,
                openai.InternalServerError,
            ) as exc:
                raise ProviderError(
                    f"embeddings request to {self.endpoint} still failing after the client's retries: "
                    f"{type(exc).__name__}: {exc}",
                    transient=True,
                ) from None
            except openai.APIStatusError as exc:  # 408/409 are retried by the client: still transient after that
                if exc.status_code == 400 and "too many inputs" in str(exc.message).lower():
                    raise _TooManyInputs(str(exc.message)) from None
                raise ProviderError(
                    f"embeddings request rejected: HTTP {exc.status_code}: {exc.message}",
                    transient=exc.status_code in (408, 409),
                ) from None
            except (
                _ContentError,
                openai.APIResponseValidationError,
                ValueError,
                TypeError,
                AttributeError,
                KeyError,
            ) as exc:  # a body the client could not even shape: also an unusable response
                if attempt >= self.content_retries:
                    raise ProviderError(
                        f"unusable embeddings response from {self.endpoint} after {attempt + 1} attempts: {exc}",
                        transient=True,
                    ) from None
                time.sleep(random.uniform(0, min(8.0, 0.5 * 2**attempt)))
                attempt += 1

    def _parse(self, response: Any, expected: int) -> tuple[np.ndarray, int]:
        """(vectors float32 (expected, d) in input order, billed tokens) of one response; raises
        :class:`_ContentError` saying what is wrong when the response is unusable (see the module docstring)."""
        data = getattr(response, "data", None)
        if not isinstance(data, list):
            raise _ContentError(f"the response has no 'data' list (got {type(data).__name__})")
        if len(data) != expected:
            raise _ContentError(f"{len(data)} vectors for {expected} inputs")
        rows = [_decode_embedding(_field(item, "embedding"), n) for n, item in enumerate(data)]
        lengths = sorted({len(row) for row in rows})
        if len(lengths) > 1:
            raise _ContentError(f"vectors of different dimensions {lengths} in one response")
        order = _input_order([_field(item, "index") for item in data])
        block = np.stack([rows[k] for k in order]) if rows else np.zeros((0, 0), np.float32)
        if block.ndim != 2 or block.shape[0] != expected or block.shape[1] == 0:
            raise _ContentError(f"vectors of unexpected shape {block.shape}")
        if self.dimensions and block.shape[1] != self.dimensions:
            raise _ContentError(f"{block.shape[1]}-dimensional vectors, {self.dimensions} dimensions requested")
        if not np.all(np.isfinite(block)):
            raise _ContentError("a vector holds NaN or infinite values")
        if not np.all(np.linalg.norm(block, axis=1) > 0):
            raise _ContentError("a vector is all zeros")
        with self._observed_lock:
            if self._observed_dimensions is None:
                self._observed_dimensions = int(block.shape[1])
            elif self._observed_dimensions != block.shape[1]:
                raise _ContentError(
                    f"{block.shape[1]}-dimensional vectors, but earlier responses of this endpoint "
                    f"had {self._observed_dimensions}"
                )
        usage = getattr(response, "usage", None)
        tokens = 0
        for name in ("total_tokens", "prompt_tokens"):
            value = _field(usage, name) if usage is not None else None
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                tokens = value
                break
        return block, tokens


def _input_order(indices: list[Any]) -> list[int]:
    """The response items in input order (positions in the response list), from their ``index`` fields
    (None where an item has none).

    - All present: they must be a permutation of 0..n-1, read as given.
    - None present: list order is input order (some OpenAI-compatible endpoints send no ``index``).
    - Some missing (Gemini's endpoint omits an ``index`` of 0): read by the indexes when exactly one is
      missing (it takes the one index left: complete and unambiguous), else in list order when every present
      index equals its item's position.

    Raises:
        _ContentError: the indexes contradict each other (not integers, out of 0..n-1, repeated) or, with two or
            more missing, disagree with list order so that no input order follows.
    """
    n = len(indices)
    present = {position: i for position, i in enumerate(indices) if i is not None}
    values = list(present.values())
    if any(type(i) is not int or not 0 <= i < n for i in values) or len(set(values)) != len(values):
        raise _ContentError(f"response indices {indices[:8]} contradict each other: not distinct indices in 0..{n - 1}")
    missing = [position for position in range(n) if position not in present]
    if len(missing) == 1:
        (left,) = set(range(n)) - set(values)
        present[missing[0]] = left
    elif missing and any(i != position for position, i in present.items()):
        raise _ContentError(
            f"{len(missing)} of {n} items have no 'index' and the others are not in list order "
            f"(indices {indices[:8]}): the input order is ambiguous"
        )
    if len(present) < n:
        return list(range(n))
    return sorted(range(n), key=lambda position: present[position])


def _field(item: Any, name: str) -> Any:
    """``item.name`` of a response object or ``item[name]`` of a dict; None when absent."""
    if isinstance(item, dict):
        return item.get(name)
    value = getattr(item, name, None)
    if value is None:
        extra = getattr(item, "model_extra", None)
        value = extra.get(name) if isinstance(extra, dict) else None
    return value


def _decode_embedding(value: Any, n: int) -> np.ndarray:
    """One item's vector: a base64 string of little-endian float32, or a list of numbers."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise _ContentError(f"item {n}: 'embedding' is neither numbers nor base64 float32") from exc
        if len(raw) % 4:
            raise _ContentError(f"item {n}: base64 'embedding' of {len(raw)} bytes is not float32")
        return np.frombuffer(raw, dtype="<f4")
    if not isinstance(value, list):
        raise _ContentError(f"item {n} has no 'embedding' list (got {type(value).__name__})")
    try:
        vector = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise _ContentError(f"item {n}: 'embedding' holds non-numeric values") from exc
    if vector.ndim != 1:
        raise _ContentError(f"item {n}: 'embedding' is not a flat list of numbers")
    return vector
