"""The OpenAI embedding provider against a real OpenAI-compatible server (docs/embeddings.md#embedding-providers: requests and faults).

Nothing is mocked: ``tests/openai_server.py`` is a real HTTP server on 127.0.0.1 backed by the bundled
all-MiniLM-L6-v2, and the provider talks to it through the real ``openai`` client. The server records every
request, so batching, deduplication, retries and costs are asserted from what actually crossed the wire.
Where faults are injected the client timeout is short (``TIMEOUT_S``), so that ``slow`` faults cost about a second.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import openai
import pytest

from evaltasks import EvalTestCase, ReferenceMatchMetric, evaluate_sync
from evaltasks.embeddings import _tokens
from evaltasks.embeddings.openai import PRICES_PER_MILLION_TOKENS, OpenAIEmbeddingProvider
from evaltasks.errors import ConfigError, CredentialsError, ProviderError
from tests.cli_forkserver import run_cli
from tests.openai_server import CONTENT_FAULTS, FAULT_KINDS, OpenAIServer, usage_tokens

KEY = f"sk-evaltasks-test-{uuid.uuid4().hex}"  # unique, so a search for it in outputs means something
MODEL = "text-embedding-3-small"
TIMEOUT_S = 1.5  # client timeout where faults are injected (on memoised texts, answered in milliseconds)
SLOW_S = 2.5  # a `slow` fault answers after this long: past TIMEOUT_S
PATIENT_S = 30.0  # client timeout elsewhere: the server's model may be encoding new texts
REPO = Path(__file__).resolve().parents[2]
SHARED_DIR = REPO.parent / "shared"

TEXTS = [
    "Paris is the capital of France.",
    "The capital city of France is Paris.",
    "Bananas are rich in potassium.",
    "Ünïcödé, 漢字 and emoji 🎉 are fine.",
    "x",
    "   leading and trailing spaces   ",
    "A longer sentence about the weather in spring, when the rain falls softly on the green hills. " * 4,
]


@pytest.fixture(scope="module")
def server_model() -> None:
    """Load the server's model once and memoise TEXTS, so no request of a test waits for the model."""
    from tests.openai_server import encode

    encode(TEXTS)


@pytest.fixture
def server(server_model) -> OpenAIServer:
    with OpenAIServer(api_key=KEY, forbidden_keys={"sk-forbidden"}, slow_s=SLOW_S) as srv:
        yield srv


def make_provider(server: OpenAIServer, **options) -> OpenAIEmbeddingProvider:
    kwargs = {
        "base_url": server.url + "/v1",
        "api_key": KEY,
        "timeout": PATIENT_S,
        "max_retries": 3,
        "content_retries": 2,
    }
    kwargs.update(options)
    return OpenAIEmbeddingProvider(MODEL, **kwargs)


def metric_for(
    server: OpenAIServer, name: str | None = None, aggregation: str = "max", **options
) -> ReferenceMatchMetric:
    provider_options = {
        "base_url": server.url + "/v1",
        "api_key": KEY,
        "timeout": PATIENT_S,
        "max_retries": 3,
        "content_retries": 2,
        **options,
    }
    return ReferenceMatchMetric(
        threshold=0.5,
        aggregation=aggregation,
        embedding_provider="openai",
        model_name=MODEL,
        provider_options=provider_options,
        name=name,
    )


def expected_vectors(st_model, texts: list[str], dimensions: int | None = None) -> np.ndarray:
    vectors = st_model.encode(texts, convert_to_numpy=True, show_progress_bar=False).astype(np.float64)
    if dimensions:
        vectors = vectors[:, :dimensions]
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def assert_same_vectors(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    np.testing.assert_allclose(np.linalg.norm(actual.astype(np.float64), axis=1), 1.0, atol=1e-6)
    cosines = np.sum(actual.astype(np.float64) * expected, axis=1)
    assert cosines.min() >= 0.999999, cosines
    assert np.abs(actual - expected).max() <= 1e-6


# --- numbers ---------------------------------------------------------------------------------------------------


def test_vectors_equal_sentence_transformers(server: OpenAIServer, st_model) -> None:
    provider = make_provider(server)
    assert_same_vectors(provider.embed(TEXTS), expected_vectors(st_model, TEXTS))
    assert [r.inputs for r in server.embedding_requests()] == [TEXTS]
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert server.requests[0].path == "/v1/embeddings"


def test_dimensions_are_requested_and_shorten_the_vectors(server: OpenAIServer, st_model) -> None:
    provider = make_provider(server, dimensions=128)
    assert_same_vectors(provider.embed(TEXTS[:3]), expected_vectors(st_model, TEXTS[:3], dimensions=128))
    assert [r.body["dimensions"] for r in server.embedding_requests()] == [128]


def test_azure_openai_through_the_azure_client(server: OpenAIServer, st_model) -> None:
    provider = OpenAIEmbeddingProvider(
        MODEL, azure_endpoint=server.url, api_key=KEY, api_version="2024-02-01", timeout=PATIENT_S
    )
    assert_same_vectors(provider.embed(TEXTS[:2]), expected_vectors(st_model, TEXTS[:2]))
    (request,) = server.requests
    assert request.path == f"/openai/deployments/{MODEL}/embeddings?api-version=2024-02-01"
    assert request.headers["api-key"] == KEY and "authorization" not in request.headers
    wrong = OpenAIEmbeddingProvider(
        MODEL, azure_endpoint=server.url, api_key="wrong-azure-key", api_version="2024-02-01", timeout=PATIENT_S
    )
    with pytest.raises(CredentialsError, match="AZURE_OPENAI_API_KEY"):
        wrong.embed(TEXTS[:1])


def test_settings_from_the_standard_environment_variables(server: OpenAIServer, st_model, monkeypatch) -> None:
    for name in ("AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-evaltasks-test")
    assert_same_vectors(OpenAIEmbeddingProvider().embed(TEXTS[:2]), expected_vectors(st_model, TEXTS[:2]))
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["openai-organization"] == "org-evaltasks-test"
    assert request.body["model"] == MODEL  # the default model
    # An explicit base_url wins over an Azure endpoint left in the environment.
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "http://127.0.0.1:9")
    make_provider(server).embed(TEXTS[:1])
    assert server.requests[-1].path == "/v1/embeddings" and server.requests[-1].ok


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_inputs_per_request", 0),
        ("max_inputs_per_request", "16"),
        ("max_input_tokens", "50"),
        ("max_input_tokens", 0),
        ("max_tokens_per_request", 1.5),
        ("timeout", 0),
        ("timeout", "30"),
        ("price_per_million_tokens", -1.0),
        ("max_retries", -1),
        ("dimensions", True),
    ],
)
def test_invalid_options_are_rejected_at_construction(option: str, value) -> None:
    with pytest.raises(ValueError, match=option):
        OpenAIEmbeddingProvider(MODEL, api_key=KEY, base_url="http://127.0.0.1:9/v1", **{option: value})


def test_an_invalid_option_in_a_suite_is_a_config_error(tmp_path: Path, monkeypatch) -> None:
    from evaltasks.inputs.suite import load_suite

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    (tmp_path / "d.jsonl").write_text('{"actual_output": "a", "references": ["b"]}\n', encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: s\ndataset: {path: d.jsonl}\nembeddings: {openai: {max_input_tokens: 'fifty'}}\n"
        "metrics:\n  - metric: ReferenceMatchMetric\n    embedding_provider: openai\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="max_input_tokens must be a positive integer"):
        load_suite(tmp_path / "suite.yaml")


def test_empty_environment_variables_count_as_unset(server: OpenAIServer, monkeypatch) -> None:
    """An empty CI variable (``${{ vars.X }}`` unset) must not become a blank endpoint, organization, etc."""
    for name in (
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "AZURE_OPENAI_ENDPOINT",
        "AZURE_OPENAI_API_KEY",
        "OPENAI_API_VERSION",
    ):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert OpenAIEmbeddingProvider().endpoint == "https://api.openai.com/v1/"  # not "" (no request made)
    make_provider(server, api_key=None).embed(TEXTS[:1])  # the key from the environment
    (request,) = server.requests
    assert request.ok and request.headers["authorization"] == f"Bearer {KEY}"
    assert "openai-organization" not in request.headers and "openai-project" not in request.headers
    monkeypatch.setenv("OPENAI_API_KEY", "  ")
    with pytest.raises(CredentialsError, match="OPENAI_API_KEY"):
        OpenAIEmbeddingProvider(base_url=server.url + "/v1")
    # Azure: an empty OPENAI_API_VERSION is no version (the client would send api-version= empty)
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", server.url)
    with pytest.raises(ConfigError, match="OPENAI_API_VERSION"):
        OpenAIEmbeddingProvider(MODEL, api_key=KEY)
    monkeypatch.setenv("OPENAI_API_VERSION", "2024-02-01")
    OpenAIEmbeddingProvider(MODEL, api_key=KEY, timeout=PATIENT_S).embed(TEXTS[:1])
    assert server.requests[-1].ok
    assert server.requests[-1].path == f"/openai/deployments/{MODEL}/embeddings?api-version=2024-02-01"


# --- response shapes ---------------------------------------------------------------------------------------------


def test_items_without_index_are_read_in_list_order(server: OpenAIServer, st_model) -> None:
    """Gemini-style OpenAI-compatible endpoints leave ``index`` out of every item."""
    server.omit_index = True
    vectors = make_provider(server, content_retries=0).embed(TEXTS[:4])
    assert_same_vectors(vectors, expected_vectors(st_model, TEXTS[:4]))
    assert [r.ok for r in server.requests] == [True]


@pytest.mark.parametrize("shape", ["gemini", "gemini_reversed"])
def test_a_response_without_the_index_of_0_is_read_by_its_other_indexes(
    server: OpenAIServer, st_model, shape: str
) -> None:
    """Gemini's OpenAI-compatible endpoint leaves out an ``index`` of 0 (and only that one): the one index left
    is complete and unambiguous, in list order or not, so every case gets its own vector at the first try."""
    server.index_shape = shape
    vectors = make_provider(server, content_retries=0).embed(TEXTS[:4])
    assert_same_vectors(vectors, expected_vectors(st_model, TEXTS[:4]))
    assert [r.ok for r in server.requests] == [True]
    assert server.requests[0].inputs == TEXTS[:4]


def test_a_partly_indexed_response_in_list_order_is_read_and_an_ambiguous_one_is_not(
    server: OpenAIServer, st_model
) -> None:
    """Two items without ``index``: readable only when the others agree with list order."""
    server.index_shape = "ambiguous"  # items 0 and 1 without index, then 3 and 2: no order follows
    with pytest.raises(ProviderError, match="2 of 4 items have no 'index' and the others are not in list order"):
        make_provider(server, max_retries=0, content_retries=0).embed(TEXTS[:4])
    vectors = make_provider(server, content_retries=0).embed(TEXTS[:3])  # 3 items: the indexed one is in place
    assert_same_vectors(vectors, expected_vectors(st_model, TEXTS[:3]))


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("data_not_list", "no 'data' list (got str)"),
        ("no_data", "no 'data' list (got NoneType)"),
        ("no_embedding", "item 0 has no 'embedding'"),
        ("non_numeric", "item 0: 'embedding' holds non-numeric"),
        ("ragged", "vectors of different dimensions"),
        ("partial_index", "contradict each other: not distinct indices in 0..2"),
        ("wrong_count", "2 vectors for 3 inputs"),
    ],
)
def test_an_unusable_response_says_what_was_wrong(server: OpenAIServer, kind: str, reason: str) -> None:
    server.always = kind
    with pytest.raises(ProviderError, match="unusable embeddings response") as info:
        make_provider(server, max_retries=0, content_retries=1).embed(TEXTS[:3])
    assert reason in str(info.value)
    assert info.value.transient is True and len(server.requests) == 2  # retried as content, then given up


def test_vectors_of_other_dimensions_are_refused(server: OpenAIServer) -> None:
    server.vector_dimensions = 8  # a misconfigured endpoint: 8 components whatever is asked
    with pytest.raises(ProviderError, match="8-dimensional vectors, 128 dimensions requested"):
        make_provider(server, dimensions=128, max_retries=0, content_retries=0).embed(TEXTS[:2])
    provider = make_provider(server, max_retries=0, content_retries=0)
    assert provider.output_dimensions is None
    assert provider.embed(TEXTS[:2]).shape == (2, 8)
    assert provider.output_dimensions == 8
    server.vector_dimensions = 16  # the endpoint changed under the same provider: never mixed
    with pytest.raises(ProviderError, match="16-dimensional vectors, but earlier responses of this endpoint had 8"):
        provider.embed(TEXTS[2:4])


# --- batching ---------------------------------------------------------------------------------------------------


def test_max_inputs_per_request_caps_every_request(server: OpenAIServer, st_model) -> None:
    """Azure OpenAI deployments take at most 16 inputs per request; more is HTTP 400 for the whole batch."""
    server.max_inputs = 16
    texts = [f"Short text number {i}." for i in range(40)]
    vectors = make_provider(server, max_inputs_per_request=16).embed(texts)
    assert [len(r.inputs) for r in server.embedding_requests()] == [16, 16, 8]
    assert server.sent_inputs() == texts
    assert_same_vectors(vectors, expected_vectors(st_model, texts))
    result = evaluate_sync(
        [EvalTestCase(input="q", actual_output=texts[0], references=texts[1:20])],
        [metric_for(server, max_inputs_per_request=16)],
    )  # per-metric provider_options
    assert result.test_results[0].status != "errored"
    assert max(len(r.inputs) for r in server.embedding_requests()) <= 16


def test_azure_defaults_to_16_inputs_per_request(server: OpenAIServer, st_model) -> None:
    """docs/embeddings.md#embedding-providers: Azure OpenAI's embeddings deployments take 16 inputs; without
    max_inputs_per_request an Azure provider sends 16 at most, so no request is refused."""
    server.max_inputs = 16
    texts = [f"Short text number {i}." for i in range(40)]
    provider = OpenAIEmbeddingProvider(
        MODEL, azure_endpoint=server.url, api_key=KEY, api_version="2024-02-01", timeout=PATIENT_S
    )
    assert provider.max_inputs_per_request == 16 and make_provider(server).max_inputs_per_request == 2048
    assert_same_vectors(provider.embed(texts), expected_vectors(st_model, texts))
    assert [(r.status, len(r.inputs)) for r in server.embedding_requests()] == [(200, 16), (200, 16), (200, 8)]


def test_too_many_inputs_splits_once_to_the_stated_limit(server: OpenAIServer, st_model) -> None:
    """A server answering Azure's "Too many inputs. The max number of inputs is 16" to a request of 40: the
    provider adopts 16 for that request and every later one (one refused request in all); a server that then
    refuses 16 too is an error, not a second guess."""
    server.max_inputs = 16
    texts = [f"Short text number {i}." for i in range(40)]
    provider = make_provider(server)
    assert_same_vectors(provider.embed(texts), expected_vectors(st_model, texts))
    assert [(r.status, len(r.inputs)) for r in server.embedding_requests()] == [
        (400, 40),
        (200, 16),
        (200, 16),
        (200, 8),
    ]
    assert server.sent_inputs() == texts  # in order, nothing lost or repeated after the refusal
    provider.embed([f"Another text {i}." for i in range(20)])
    assert [len(r.inputs) for r in server.embedding_requests()[4:]] == [16, 4]
    server.max_inputs = 8
    with pytest.raises(ProviderError, match="Too many inputs. The max number of inputs is 8"):
        provider.embed([f"Third text {i}." for i in range(20)])


# --- batching ---------------------------------------------------------------------------------------------------


def test_more_than_2048_inputs_are_split_into_requests_of_at_most_2048(server: OpenAIServer, st_model) -> None:
    unique = [f"Short text number {i}." for i in range(40)]
    texts = [unique[i % len(unique)] for i in range(2100)]  # the server memoises: only 40 texts are encoded
    vectors = make_provider(server).embed(texts)
    sizes = [len(r.inputs) for r in server.embedding_requests()]
    assert sizes == [2048, 52]
    assert server.sent_inputs() == texts  # in order, nothing lost or repeated
    expected = expected_vectors(st_model, unique)
    assert_same_vectors(vectors, expected[[i % len(unique) for i in range(2100)]])


def test_token_budget_splits_requests(server: OpenAIServer, st_model) -> None:
    texts = [f"Sentence number {i} says something about topic {i % 7}." for i in range(30)]
    budget = 150
    vectors = make_provider(server, max_tokens_per_request=budget).embed(texts)
    requests = server.embedding_requests()
    assert len(requests) > 5
    for request in requests:
        assert sum(_tokens.upper_bound_tokens(t) for t in request.inputs) <= budget
    assert server.sent_inputs() == texts
    assert_same_vectors(vectors, expected_vectors(st_model, texts))


# --- what is sent -------------------------------------------------------------------------------------------------


def test_empty_strings_are_never_sent(server: OpenAIServer) -> None:
    provider = make_provider(server)
    with pytest.raises(ValueError, match="empty"):
        provider.embed(["fine", ""])
    assert server.requests == []
    # The server answers an empty input as the API does (400), so sending one would fail the whole batch.
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=MODEL, input=["fine", ""])
    server.reset()

    refs = [TEXTS[0]]
    cases = [
        EvalTestCase(actual_output="", references=refs),
        EvalTestCase(actual_output="   ", references=refs),
        EvalTestCase(actual_output=TEXTS[1], references=refs),
        EvalTestCase(actual_output="\n", references=refs),
    ]
    result = evaluate_sync(cases, [metric_for(server)], ids=["a", "b", "c", "d"])
    sent = [t for r in server.embedding_requests() for t in r.inputs]
    assert sent and all(t.strip() for t in sent)
    scores = [c.metrics[0].score for c in result.test_results]
    assert scores[0] == scores[1] == scores[3] == 0.0 and scores[2] > 0.9
    assert sorted(sent) == sorted(TEXTS[:2])


def test_each_unique_text_is_sent_once_per_run(server: OpenAIServer) -> None:
    refs_a, refs_b = [TEXTS[0], TEXTS[1]], [TEXTS[1], TEXTS[2]]  # TEXTS[1] shared by both reference lists
    cases = [
        EvalTestCase(input="q1", actual_output="Paris.", references=refs_a),
        EvalTestCase(input="q2", actual_output="Paris.", references=refs_a),  # duplicate output and references
        EvalTestCase(input="q3", actual_output="Bananas have potassium.", references=refs_b),
        EvalTestCase(input="q4", actual_output="Paris.", references=refs_b),
    ]
    metrics = [metric_for(server, "max"), metric_for(server, "mean", aggregation="mean")]  # one provider, two uses
    result = evaluate_sync(cases, metrics)
    sent = server.sent_inputs()
    assert sorted(sent) == sorted({*TEXTS[:3], "Paris.", "Bananas have potassium."})
    assert result.summary.embeddings.outputs_computed == 2
    assert result.summary.embeddings.references_computed == 3


def test_an_output_equal_to_a_reference_is_sent_once(server: OpenAIServer) -> None:
    cases = [EvalTestCase(input="q", actual_output=TEXTS[0], references=[TEXTS[0], TEXTS[2]])]
    result = evaluate_sync(cases, [metric_for(server)])
    assert server.sent_inputs().count(TEXTS[0]) == 1, server.sent_inputs()
    assert sorted(server.sent_inputs()) == sorted([TEXTS[0], TEXTS[2]])
    billed = server.billed_tokens() * PRICES_PER_MILLION_TOKENS[MODEL] / 1e6
    assert result.summary.evaluation_cost == pytest.approx(billed, rel=1e-9)


# --- errors that must not be retried ------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "status"), [("sk-wrong-key-123456", 401), ("sk-forbidden", 403)])
def test_rejected_key_is_a_credentials_error_at_once(server: OpenAIServer, key: str, status: int) -> None:
    provider = make_provider(server, api_key=key, max_retries=5, content_retries=3)
    with pytest.raises(CredentialsError) as info:
        provider.embed(TEXTS[:2])
    assert len(server.requests) == 1
    message = str(info.value)
    assert "OPENAI_API_KEY" in message and f"HTTP {status}" in message and key not in message


def test_unknown_model_is_a_config_error_at_once(server: OpenAIServer) -> None:
    provider = OpenAIEmbeddingProvider(
        "text-embedding-4-imaginary",
        base_url=server.url + "/v1",
        api_key=KEY,
        timeout=TIMEOUT_S,
        max_retries=5,
        content_retries=3,
    )
    with pytest.raises(ConfigError, match="text-embedding-4-imaginary.*404"):
        provider.embed(TEXTS[:2])
    assert len(server.requests) == 1


def test_bad_request_fails_at_once_and_is_not_transient(server: OpenAIServer) -> None:
    provider = make_provider(server, dimensions=4096, max_retries=5, content_retries=3)  # the server has 384
    with pytest.raises(ProviderError, match="HTTP 400") as info:
        provider.embed(TEXTS[:2])
    assert info.value.transient is False
    assert len(server.requests) == 1


# --- transient faults ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_each_transient_fault_is_retried_to_correct_vectors(server: OpenAIServer, st_model, kind: str) -> None:
    server.script.append(kind)
    vectors = make_provider(server, timeout=TIMEOUT_S).embed(TEXTS[:3])  # TEXTS are memoised: fast answers
    assert_same_vectors(vectors, expected_vectors(st_model, TEXTS[:3]))
    assert [r.fault for r in server.requests] == [kind, None]


@pytest.mark.parametrize(("kind", "max_retries"), [("429_retry_after_ms", 3), ("408", 1), ("503", 1), ("drop", 1)])
def test_a_persistent_http_fault_ends_after_the_bounded_attempts(
    server: OpenAIServer, kind: str, max_retries: int
) -> None:
    server.always = kind
    provider = make_provider(server, max_retries=max_retries, content_retries=2)
    with pytest.raises(ProviderError) as info:
        provider.embed(TEXTS[:2])
    assert info.value.transient is True
    assert len(server.requests) == max_retries + 1  # the client's retries; content retries do not multiply them


@pytest.mark.parametrize("kind", CONTENT_FAULTS)
def test_a_persistent_content_fault_ends_after_the_bounded_attempts(server: OpenAIServer, kind: str) -> None:
    server.always = kind
    with pytest.raises(ProviderError, match="unusable embeddings response.*2 attempts") as info:
        make_provider(server, max_retries=3, content_retries=1).embed(TEXTS[:2])
    assert info.value.transient is True
    assert len(server.requests) == 2  # content_retries + 1: a response that arrived is not retried by the client


def test_the_attempt_bound_is_the_product_of_both_layers(server: OpenAIServer) -> None:
    """Each content attempt first exhausts the client's HTTP retries: (max_retries+1) × (content_retries+1)."""
    max_retries, content_retries = 2, 2
    server.script.extend((["429_retry_after_ms"] * max_retries + ["malformed_json"]) * (content_retries + 1))
    with pytest.raises(ProviderError) as info:
        make_provider(server, max_retries=max_retries, content_retries=content_retries).embed(TEXTS[:2])
    assert info.value.transient is True
    assert len(server.requests) == (max_retries + 1) * (content_retries + 1) == 9
    assert not server.script  # every scripted fault was consumed, none left over


def test_retry_after_is_honoured(server: OpenAIServer) -> None:
    """The client's own first backoff is at most 0.5 s, so waits of 0.7 s and 1 s come from the headers."""
    server.retry_after_ms, server.retry_after_s = 700, 1
    provider = make_provider(server)
    for kind, delay in (("429_retry_after_ms", 0.7), ("429_retry_after_s", 1.0)):
        server.reset()
        server.script.append(kind)
        provider.embed(TEXTS[:1])
        first, second = server.requests
        assert (first.fault, second.fault) == (kind, None)
        assert second.t - first.t >= delay


def test_nan_never_becomes_a_score(server: OpenAIServer) -> None:
    server.always = "nan"
    cases = [EvalTestCase(input="q", actual_output=TEXTS[0], references=[TEXTS[1]])]
    result = evaluate_sync(cases, [metric_for(server, max_retries=0, content_retries=1)])
    case = result.test_results[0]
    assert case.status == "errored" and case.metrics[0].score is None
    assert "NaN" in case.metrics[0].error
    assert result.summary.errored_cases == 1
    assert result.summary.metrics["ReferenceMatchMetric"].mean_score is None  # nothing scored, no NaN mean


# --- the key test: faults do not change scores --------------------------------------------------------------------


def _cases(n: int = 60) -> list[EvalTestCase]:
    """The first ``n`` TruthfulQA davinci answers (up to 3 correct answers as references), else synthetic ones."""
    path = SHARED_DIR / "data" / "truthfulqa" / "davinci_answers.csv"
    cases: list[EvalTestCase] = []
    if path.is_file():
        with path.open(encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                refs = [r.strip() for r in row["correct_answers"].split(";") if r.strip()][:3]
                if row["model_answer"].strip() and refs:
                    cases.append(
                        EvalTestCase(input=row["question"], actual_output=row["model_answer"].strip(), references=refs)
                    )
                if len(cases) == n:
                    return cases
    topics = ["the moon", "coffee", "the Roman empire", "volcanoes", "jazz", "tax law", "penguins", "chess"]
    return [
        EvalTestCase(
            input=f"Question {i} about {topics[i % 8]}?",
            # long enough that 60 cases need as many requests as the TruthfulQA answers do (>= 20)
            actual_output=f"Answer {i}: {topics[i % 8]} is interesting because of reason {i % 5}. "
            + "It has a long history and many details that are worth explaining at some length. " * 6,
            references=[f"{topics[(i + k) % 8].capitalize()} matters for reason {k}." for k in range(3)],
        )
        for i in range(n)
    ]


def _scores(result) -> list[tuple]:
    return [
        (c.status, c.metrics[0].success, c.metrics[0].score, c.metrics[0].evaluation_cost) for c in result.test_results
    ]


@pytest.mark.slow
def test_a_run_under_30_percent_faults_scores_exactly_like_a_fault_free_run(server: OpenAIServer) -> None:
    cases = _cases()
    budget = 350  # small requests (about 40): many of them, so that many faults hit the run
    clean = evaluate_sync(cases, [metric_for(server, max_tokens_per_request=budget)])  # memoises every text
    clean_requests = server.embedding_requests()
    clean_tokens = server.billed_tokens()
    assert len(clean_requests) >= 20 and all(r.ok for r in clean_requests)
    price = PRICES_PER_MILLION_TOKENS[MODEL]
    clean_costs = [c.metrics[0].evaluation_cost for c in clean.test_results]
    assert min(clean_costs) > 0  # every case paid its share...
    assert sum(clean_costs) == pytest.approx(clean_tokens * price / 1e6, rel=1e-9)  # ...of what was billed
    assert clean.summary.evaluation_cost == pytest.approx(sum(clean_costs), rel=1e-9)

    server.reset()
    server.fault_rate = 0.3  # seeded: the same faults on every run of this test
    faulty = evaluate_sync(
        cases, [metric_for(server, timeout=TIMEOUT_S, max_retries=6, content_retries=4, max_tokens_per_request=budget)]
    )
    requests = server.embedding_requests()
    faults = [r.fault for r in requests if r.fault]
    print(f"{len(requests)} requests, faults: {faults}")
    assert len(faults) >= 8 and len(set(faults)) >= 6, faults
    assert 0.15 <= len(faults) / len(requests) <= 0.45
    assert {t for r in requests if r.ok for t in r.inputs} == {t for r in clean_requests for t in r.inputs}

    assert all(c.status != "errored" for c in faulty.test_results)
    for (status_a, success_a, score_a, cost_a), (status_b, success_b, score_b, cost_b) in zip(
        _scores(clean), _scores(faulty), strict=True
    ):
        assert (status_a, success_a) == (status_b, success_b)
        assert abs(score_a - score_b) <= 1e-6
        assert cost_b == pytest.approx(cost_a, rel=1e-9)  # failed attempts carry no usage, so cost nothing
    assert faulty.summary.evaluation_cost == pytest.approx(clean_tokens * price / 1e6, rel=1e-9)


def test_cost_uses_the_price_override_and_the_usage(server: OpenAIServer) -> None:
    cases = [
        EvalTestCase(input=f"q{i}", actual_output=TEXTS[i], references=[TEXTS[4 + i % 2], TEXTS[6]]) for i in range(4)
    ]
    result = evaluate_sync(cases, [metric_for(server, price_per_million_tokens=1.5)])
    expected_tokens = sum(usage_tokens(t) for t in TEXTS)  # each text once: 4 outputs, 3 references
    assert server.billed_tokens() == expected_tokens
    costs = [c.metrics[0].evaluation_cost for c in result.test_results]
    assert min(costs) > 0
    assert sum(costs) == pytest.approx(expected_tokens * 1.5 / 1e6, rel=1e-9)


# --- truncation ---------------------------------------------------------------------------------------------------


def test_a_text_over_the_input_limit_is_cut_before_sending(server: OpenAIServer, cosine) -> None:
    long_output = "The quick brown fox jumps over the lazy dog near the river bank. " * 8
    long_reference = "A reference that is also far too long for a fifty token limit, repeated. " * 3
    case = EvalTestCase(input="q", actual_output=long_output, references=[TEXTS[0], long_reference])
    result = evaluate_sync([case], [metric_for(server, max_input_tokens=50)])
    sent = server.sent_inputs()
    cut = [t for t in sent if long_output.startswith(t)]
    assert len(cut) == 1 and len(cut[0]) < len(long_output)
    assert long_output not in sent and long_reference not in sent
    assert all(_tokens.upper_bound_tokens(t) <= 50 for t in sent)
    metric = result.test_results[0].metrics[0]
    assert metric.status != "errored"
    assert metric.evaluation_log["output_truncated"] is True
    assert metric.evaluation_log["references_truncated"] == 1
    cut_reference = next(t for t in sent if long_reference.startswith(t))
    assert metric.score == pytest.approx(max(0.0, cosine(cut[0], [TEXTS[0], cut_reference]).max()), abs=1e-5)


# --- secrets ------------------------------------------------------------------------------------------------------


def test_the_api_key_never_appears_in_results_or_metric(server: OpenAIServer) -> None:
    cases = [EvalTestCase(input="q", actual_output=TEXTS[0], references=[TEXTS[1]])]
    metric = metric_for(server)
    ok = evaluate_sync(cases, [metric])
    server.always = "500"
    failing = metric_for(server, max_retries=0, content_retries=0, name="failing")
    errored = evaluate_sync(cases, [failing])
    assert errored.test_results[0].status == "errored"
    assert any(r.headers.get("authorization") == f"Bearer {KEY}" for r in server.requests)  # it was really used
    with pytest.raises(CredentialsError) as info:
        make_provider(server, api_key=KEY + "-wrong").embed(TEXTS[:1])
    texts = [
        ok.model_dump_json(),
        errored.model_dump_json(),
        repr(metric),
        json.dumps(metric.config()),
        metric.cache_key(),
        repr(failing),
        str(info.value),
    ]
    for text in texts:
        assert KEY not in text


# --- the CLI, as a subprocess, against the server -----------------------------------------------------------------

DATASET = [
    {
        "id": "paris",
        "question": "Capital of France?",
        "answer": "Paris is the capital of France.",
        "references": [TEXTS[1], "France's capital is Paris."],
    },
    {
        "id": "banana",
        "question": "What is in bananas?",
        "answer": "Bananas contain a lot of potassium.",
        "references": [TEXTS[2]],
    },
    {
        "id": "moon",
        "question": "What is the moon made of?",
        "answer": "Green cheese.",
        "references": ["The moon is made of rock."],
    },
    {"id": "empty", "question": "Say nothing.", "answer": "", "references": ["Silence."]},
]


def _cli_env(home: Path, key: str, base_url: str, api_url: str | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "AZURE_OPENAI_")) and k not in ("PREFECT_API_URL", "EVALTASKS_INDEX_DIR")
    }
    env.update(
        PREFECT_HOME=str(home / "prefect-home"),
        HF_HUB_OFFLINE="1",
        DO_NOT_TRACK="1",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        OPENAI_API_KEY=key,
        OPENAI_BASE_URL=base_url,
    )
    if api_url:  # the session's Prefect server instead of a temporary one per run
        env["PREFECT_API_URL"] = api_url
    return env


def _start_cli_runs(
    server: OpenAIServer, root: Path, api_url: str, pool: ThreadPoolExecutor
) -> dict[str, tuple[Future[subprocess.CompletedProcess[str]], Path]]:
    """Start the two CLI runs (forked CLI processes, :func:`tests.cli_forkserver.run_cli`) on ``pool``."""
    procs = {}
    for name, key in (("good", KEY), ("rejected", "sk-rejected-0123456789")):
        home = root / name
        home.mkdir()
        (home / "answers.jsonl").write_text("\n".join(json.dumps(row) for row in DATASET) + "\n", encoding="utf-8")
        (home / "suite.yaml").write_text(
            f"name: openai-{name}\n"
            "dataset:\n  path: answers.jsonl\n"
            "  fields: {id: id, input: question, actual_output: answer, references: references}\n"
            "embeddings:\n"
            f"  openai: {{base_url: '{server.url}/v1', max_retries: 1, dimensions: 128}}\n"
            "metrics:\n  - metric: ReferenceMatchMetric\n    embedding_provider: openai\n    threshold: 0.5\n"
            "gate:\n  min_pass_rate: 0.0\n",
            encoding="utf-8",
        )
        argv = ["run", "suite.yaml", "--output-dir", "out", "--index-dir", "idx", "--quiet"]
        env = _cli_env(home, key, f"{server.url}/env/v1", api_url)
        procs[name] = (pool.submit(run_cli, *argv, cwd=home, env=env, timeout=600), home)
    from tests.openai_server import encode

    encode([t for row in DATASET for t in (row["answer"], *row["references"]) if t])  # ready before they ask
    return procs


@pytest.fixture(scope="module", autouse=True)
def _cli_background(request):
    """Start the two CLI runs when the module starts, if any CLI test is selected: they run (mostly starting up,
    against the session's Prefect server) while the other tests of this module run (mostly waiting out retry
    delays).

    The suite sets ``embeddings: {openai: {base_url: <server>/v1, max_retries: 1, dimensions: 128}}``; the
    environment's OPENAI_BASE_URL points at ``<server>/env/v1`` (also served), so the request paths show which
    setting reached the requests. ``good`` has the right OPENAI_API_KEY, ``rejected`` a wrong one.
    """
    if not any(item.name.startswith("test_cli_") and item.module is request.module for item in request.session.items):
        yield None
        return
    api_url = request.getfixturevalue("prefect_api_url")
    root = Path(tempfile.mkdtemp(prefix="evaltasks-openai-cli-"))
    with OpenAIServer(api_key=KEY, warm=False) as server, ThreadPoolExecutor(2) as pool:
        procs = _start_cli_runs(server, root, api_url, pool)
        state = {"server": server, "procs": procs, "outputs": None}
        try:
            yield state
        finally:
            for future, _home in procs.values():  # a run past its timeout is killed by run_cli
                with contextlib.suppress(Exception):
                    future.result()
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def cli_runs(_cli_background):
    """``({name: (exit code, stdout, stderr, home)}, recorded requests)`` of the two runs, once they ended."""
    state = _cli_background
    if state["outputs"] is None:
        outputs = {}
        for name, (future, home) in state["procs"].items():
            proc = future.result()
            outputs[name] = (proc.returncode, proc.stdout, proc.stderr, home)
        state["outputs"], state["requests"] = outputs, list(state["server"].requests)
    return state["outputs"], state["requests"]


@pytest.mark.slow
def test_cli_run_against_the_server_exits_0(cli_runs, _cli_background) -> None:
    outputs, _requests = cli_runs
    code, stdout, stderr, home = outputs["good"]
    assert code == 0, stderr
    assert "Traceback" not in stdout + stderr
    results = json.loads((home / "out" / "results.json").read_text(encoding="utf-8"))
    cases = {c["id"]: c["metrics"][0] for c in results["cases"]}
    assert results["summary"]["cases"] == 4 and results["summary"]["errored_cases"] == 0
    assert cases["empty"]["score"] == 0.0 and cases["empty"]["evaluation_cost"] == 0
    for case_id in ("paris", "banana", "moon"):
        assert cases[case_id]["evaluation_cost"] > 0
    assert results["summary"]["evaluation_cost"] == pytest.approx(sum(c["evaluation_cost"] for c in cases.values()))
    assert results["embedding_models"][0]["dimensions"] == 128
    # The same cases evaluated in this process with the suite's options score the same.
    server = _cli_background["server"]
    metric = ReferenceMatchMetric(
        threshold=0.5,
        embedding_provider="openai",
        provider_options={"base_url": server.url + "/v1", "api_key": KEY, "dimensions": 128, "timeout": PATIENT_S},
    )
    local = evaluate_sync(
        [EvalTestCase(input=r["question"], actual_output=r["answer"], references=r["references"]) for r in DATASET],
        [metric],
        ids=[r["id"] for r in DATASET],
    )
    for case in local.test_results:
        assert abs(case.metrics[0].score - cases[case.id]["score"]) <= 1e-6
        assert case.metrics[0].success == cases[case.id]["success"]


@pytest.mark.slow
def test_cli_run_writes_the_api_key_nowhere(cli_runs) -> None:
    outputs, _ = cli_runs
    code, stdout, stderr, home = outputs["good"]
    assert code == 0, stderr
    assert KEY not in stdout + stderr
    files = [p for p in home.rglob("*") if p.is_file()]
    assert any(p.name == "results.json" for p in files) and any("prefect-home" in p.parts for p in files)
    leaked = [str(p) for p in files if KEY.encode() in p.read_bytes()]
    assert leaked == []


@pytest.mark.slow
def test_cli_suite_embeddings_options_reach_every_request(cli_runs) -> None:
    outputs, requests = cli_runs
    assert outputs["good"][0] == 0
    mine = [r for r in requests if r.headers.get("authorization") == f"Bearer {KEY}"]
    assert mine and all(r.path == "/v1/embeddings" and r.body.get("dimensions") == 128 for r in mine)
    assert len(mine) == 2  # references and outputs: one request each, no retries


@pytest.mark.slow
def test_cli_rejected_key_exits_2_without_traceback(cli_runs) -> None:
    outputs, _ = cli_runs
    code, stdout, stderr, _home = outputs["rejected"]
    assert code == 2, stderr
    assert "Traceback" not in stdout + stderr
    assert "OPENAI_API_KEY" in stderr and "401" in stderr
    assert "sk-rejected-0123456789" not in stdout + stderr


# --- in-process rate limiting ---------------------------------------------------------------------------------


def test_requests_per_minute_spaces_requests(server: OpenAIServer) -> None:
    """120 requests/min = 2 per second: a bucket of 2 passes at once, then one request every 0.5 s."""
    provider = make_provider(server, requests_per_minute=120, max_tokens_per_request=1)
    limiter, granted = provider._limiter, []
    real_acquire = limiter.acquire

    def recording_acquire(tokens: int = 0) -> float:  # the real limiter; records when it let each request go
        waited = real_acquire(tokens)
        granted.append(limiter._stamp)  # its own clock reading of that moment (one thread here)
        return waited

    limiter.acquire = recording_acquire
    server.reset()
    provider.embed(TEXTS[:5])  # a 1-token budget forces one request per text
    arrivals = [r.t for r in server.embedding_requests()]
    assert len(arrivals) == len(granted) == 5
    # The bucket's bound, whatever the machine's load: any n requests in a row span at least (n - 2) × 0.5 s.
    # Arrival times add the client's and server's delays, so they are bounded through the grants: request i
    # arrives after its grant and before the next grant (one request at a time).
    for i in range(5):
        for j in range(i + 2, 5):
            assert granted[j] - granted[i] >= (j - i - 1) * 0.5 - 1e-6, np.diff(granted)
    assert granted[-1] - granted[0] >= 1.5 - 1e-6  # 3 requests beyond the burst, 0.5 s apart
    assert arrivals[-1] - arrivals[0] >= granted[-1] - granted[1] >= 1.0 - 1e-6, np.diff(arrivals)


def test_tokens_per_minute_limits_token_throughput(server: OpenAIServer) -> None:
    from evaltasks.embeddings._rate_limit import RateLimiter

    limiter = RateLimiter(tokens_per_minute=6000)  # 100 tokens per second
    import time

    start = limiter._stamp  # the limiter's clock when it was made (full)
    waits = [limiter.acquire(50) for _ in range(5)]  # 250 tokens: the first 100 pass at once, then 100 per s
    elapsed = time.monotonic() - start
    assert waits[0] == 0.0 and waits[1] == 0.0
    assert elapsed >= 1.5 - 1e-6, elapsed  # 250 tokens through a 100-token bucket refilled at 100 per s
    # It waits no longer than the bucket needs (the waits it computed; the wall time includes the load's delays).
    assert sum(waits) <= 1.5 + 1e-6, waits
    with pytest.raises(ValueError, match="tokens_per_minute"):
        RateLimiter(tokens_per_minute=0)


# --- pre-run cost estimate ---------------------------------------------------------------------------------------


def _write_suite(
    home: Path, name: str, server: OpenAIServer, rows: list[dict], openai_options: str, min_pass_rate: float = 0.0
) -> None:
    """Write ``home/answers.jsonl`` (``rows``, DATASET's fields) and ``home/suite.yaml``: one ReferenceMatch
    metric on the openai provider at ``server``, ``embeddings: {openai: {...}}`` set to ``openai_options``."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "answers.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    (home / "suite.yaml").write_text(
        f"name: {name}\ndataset:\n  path: answers.jsonl\n"
        "  fields: {id: id, input: question, actual_output: answer, references: references}\n"
        f"embeddings:\n  openai: {{base_url: '{server.url}/v1', {openai_options}}}\n"
        "metrics:\n  - {metric: ReferenceMatchMetric, embedding_provider: openai, threshold: 0.5}\n"
        f"gate: {{min_pass_rate: {min_pass_rate}}}\n",
        encoding="utf-8",
    )


def test_max_cost_refuses_a_run_estimated_above_it(server: OpenAIServer, tmp_path: Path, prefect_api_url: str) -> None:
    """`--max-cost`: the estimate (ceil(bytes/4) tokens per unique text × $0.02 per million) is compared
    before Prefect starts; above the limit: exit 2, no request sent; at or above the estimate: the run goes."""
    _write_suite(tmp_path, "cost", server, DATASET, "max_retries: 1")
    # An empty output is scored 0.0 without embeddings: neither it nor its references are sent or estimated.
    texts = {t for row in DATASET if row["answer"].strip() for t in (row["answer"], *row["references"])}
    expected = sum(max(1, (len(t.encode()) + 3) // 4) for t in texts) * 0.02 / 1e6
    env = _cli_env(tmp_path, KEY, f"{server.url}/v1", prefect_api_url)
    server.reset()
    cli = ["run", "suite.yaml", "--quiet", "--index-dir", "idx"]
    refused = run_cli(*cli, "--max-cost", f"{expected * 0.99:.12f}", cwd=tmp_path, env=env, timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert f"${expected:.4f}" in refused.stderr and "--max-cost" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert server.embedding_requests() == []
    allowed = run_cli(*cli, "--max-cost", f"{expected * 1.01:.12f}", cwd=tmp_path, env=env, timeout=600)
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    results = json.loads((tmp_path / "eval-results" / "cost" / "results.json").read_text())  # per suite
    billed = server.billed_tokens() * 0.02 / 1e6
    assert results["summary"]["evaluation_cost"] == pytest.approx(billed, rel=1e-9)


# --- the CLI against endpoints that misbehave ----------------------------------------------------------------------


def _run_cli(
    home: Path,
    server: OpenAIServer,
    rows: list[dict],
    openai_options: str,
    min_pass_rate: float = 0.0,
    index_dir: str = "idx",
    api_url: str | None = None,
) -> tuple[subprocess.CompletedProcess, dict | None]:
    """``evaltasks run`` of ``rows`` (DATASET's fields) in ``home`` with ``embeddings: {openai: {...}}`` set to
    ``openai_options`` (YAML flow mapping body) against ``server`` (and the Prefect server at ``api_url``, when
    given); returns the process and results.json."""
    _write_suite(home, "misbehaving-endpoint", server, rows, openai_options, min_pass_rate)
    proc = run_cli(
        *["run", "suite.yaml", "--output-dir", "out", "--index-dir", index_dir, "--quiet"],
        cwd=home,
        env=_cli_env(home, KEY, f"{server.url}/v1", api_url),
        timeout=600,
    )
    path = home / "out" / "results.json"
    return proc, json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def test_cli_malformed_200_bodies_error_the_cases_not_the_run(
    server: OpenAIServer, tmp_path: Path, prefect_api_url: str
) -> None:
    """A 200 whose body is ``{"data": "nope"}`` once escaped the provider as an AttributeError (exit 3)."""
    server.always = "data_not_list"
    proc, results = _run_cli(
        tmp_path, server, DATASET, "max_retries: 0, content_retries: 1", min_pass_rate=0.5, api_url=prefect_api_url
    )
    assert proc.returncode == 1, proc.stderr[-3000:]  # a failed gate, not a crash
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "out" / "evaltasks-error.log").exists()
    cases = {c["id"]: c for c in results["cases"]}
    assert results["summary"]["errored_cases"] == len(cases) == 4  # the metric's provider failed: all its cases
    for case in cases.values():
        metric = case["metrics"][0]
        assert case["status"] == "errored" and metric["score"] is None
        assert "unusable embeddings response" in metric["error"] and "no 'data' list (got str)" in metric["error"]
    assert all(r.fault == "data_not_list" for r in server.requests)


def test_cli_max_inputs_per_request_from_the_suite(tmp_path: Path, server: OpenAIServer, prefect_api_url: str) -> None:
    """An Azure deployment answers more than 16 inputs with HTTP 400; the suite option caps the requests."""
    server.max_inputs = 16
    rows = [
        {
            "id": f"r{i}",
            "question": f"q{i}",
            "answer": f"Answer number {i} about topic {i % 5}.",
            "references": [f"Reference {i}a on topic {i % 5}.", f"Reference {i}b on topic {i % 3}."],
        }
        for i in range(12)
    ]  # 36 unique texts
    proc, results = _run_cli(
        tmp_path, server, rows, "max_retries: 0, max_inputs_per_request: 16", api_url=prefect_api_url
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert results["summary"]["errored_cases"] == 0 and results["summary"]["cases"] == 12
    sizes = [len(r.inputs) for r in server.embedding_requests()]
    assert sizes and max(sizes) <= 16 and all(r.ok for r in server.embedding_requests())
    assert sum(sizes) == 36  # each unique text once
    assert not [r for r in server.requests if r.status == 400]


def test_cli_a_namespace_of_other_dimensions_is_rebuilt(
    tmp_path: Path, server: OpenAIServer, prefect_api_url: str
) -> None:
    """Run 1's endpoint answers 8-d vectors (stored in the index); run 2's answers 16-d and has a new answer to
    embed: run 2 must neither abort on a numpy concatenate error nor mix 8-d vectors in, and scores as 16-d.
    (A run with nothing to embed asks the endpoint nothing: every vector comes from the index.)"""
    server.vector_dimensions = 8
    first, results = _run_cli(tmp_path, server, DATASET, "max_retries: 0", api_url=prefect_api_url)
    assert first.returncode == 0, first.stderr[-3000:]
    assert results["embedding_models"][0]["dimensions"] == 8
    server.vector_dimensions = 16
    rows = [*DATASET, {"id": "new", "question": "Capital of Italy?", "answer": "Rome.", "references": [TEXTS[1]]}]
    second, results = _run_cli(tmp_path, server, rows, "max_retries: 0", api_url=prefect_api_url)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Traceback" not in second.stdout + second.stderr
    assert results["embedding_models"][0]["dimensions"] == 16
    assert results["summary"]["errored_cases"] == 0
    assert any(
        "holds 8-dimensional vectors but the provider now returns 16-dimensional" in w for w in results["warnings"]
    ), results["warnings"]
    (meta_path,) = (tmp_path / "idx").glob("*/meta.json")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    texts = {t for row in rows if row["answer"] for t in (row["answer"], *row["references"])}
    assert (meta["dimensions"], meta["count"]) == (16, len(texts))  # references and outputs, all 16-d
    # the same cases evaluated in this process, without index or cache, against the 16-d endpoint
    local = evaluate_sync(
        [EvalTestCase(input=r["question"], actual_output=r["answer"], references=r["references"]) for r in rows],
        [metric_for(server)],
        ids=[r["id"] for r in rows],
    )
    cases = {c["id"]: c["metrics"][0] for c in results["cases"]}
    for case in local.test_results:
        assert abs(case.metrics[0].score - cases[case.id]["score"]) <= 1e-6
    assert min(c.metrics[0].score for c in local.test_results if c.id != "empty") > 0


# --- warm runs: outputs come from the index like references -----------------------------------------------------


@pytest.mark.slow
def test_warm_api_call_in_a_fresh_process_sends_no_request(server: OpenAIServer, tmp_path: Path) -> None:
    """evaluate_sync with index_dir: the cold call sends each unique text once (an output equal to a reference
    once); the same call in a new process (no provider that knows the endpoint's dimensions) sends nothing,
    bills nothing and scores bitwise the same."""
    from tests.fresh_process import evaluate_in_fresh_process

    rows = [{"input": r["question"], "actual_output": r["answer"], "references": r["references"]} for r in DATASET]
    rows.append(
        {"input": "echo", "actual_output": TEXTS[2], "references": [TEXTS[2], TEXTS[0]]}
    )  # output = a reference
    options = {"base_url": server.url + "/v1", "api_key": KEY, "timeout": PATIENT_S, "max_retries": 0}
    kwargs = {"threshold": 0.5, "embedding_provider": "openai", "model_name": MODEL, "provider_options": options}
    cases = [EvalTestCase(**row) for row in rows]
    server.reset()
    cold = evaluate_sync(cases, [ReferenceMatchMetric(**kwargs)], index_dir=tmp_path / "idx")
    references = {t for row in rows if row["actual_output"] for t in row["references"]}
    outputs = {row["actual_output"] for row in rows if row["actual_output"]} - references
    assert sorted(server.sent_inputs()) == sorted(references | outputs)  # each unique text once
    assert len(server.embedding_requests()) == 1 and server.billed_tokens() > 0
    counts = cold.summary.embeddings
    assert (counts.references_computed, counts.references_reused, counts.outputs_computed, counts.outputs_reused) == (
        len(references),
        0,
        len(outputs),
        0,
    )

    server.reset()
    warm = evaluate_in_fresh_process(
        rows,
        kwargs,
        tmp_path / "idx",
        env={k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AZURE_OPENAI_"))},
    )
    assert server.requests == [] and server.billed_tokens() == 0
    assert warm["embeddings"] == {
        "references_computed": 0,
        "references_reused": len(references),
        "outputs_computed": 0,
        "outputs_reused": len(outputs),
    }
    assert warm["cost"] == 0.0
    assert warm["scores"] == [c.metrics[0].score for c in cold.test_results]  # bitwise: the same stored vectors


def test_cli_warm_run_without_task_cache_sends_no_request(
    server: OpenAIServer, tmp_path: Path, prefect_api_url: str
) -> None:
    """`evaltasks run --no-cache` over an index a first run filled: no request (no dimension probe either),
    every output counted as reused, the same scores."""
    first, cold = _run_cli(tmp_path, server, DATASET, "max_retries: 0", api_url=prefect_api_url)
    assert first.returncode == 0, first.stderr[-3000:]
    assert cold["summary"]["embeddings"]["outputs_computed"] == 3  # the empty answer is never embedded
    server.reset()
    warm = run_cli(
        *["run", "suite.yaml", "--output-dir", "warm", "--index-dir", "idx", "--quiet", "--no-cache"],
        cwd=tmp_path,
        env=_cli_env(tmp_path, KEY, f"{server.url}/v1", prefect_api_url),
        timeout=600,
    )
    assert warm.returncode == 0, warm.stderr[-3000:]
    assert server.requests == []
    results = json.loads((tmp_path / "warm" / "results.json").read_text(encoding="utf-8"))
    references = {t for row in DATASET if row["answer"] for t in row["references"]}
    assert results["summary"]["embeddings"] == {
        "references_computed": 0,
        "references_reused": len(references),
        "outputs_computed": 0,
        "outputs_reused": 3,
    }
    assert results["summary"]["evaluation_cost"] == 0.0
    assert [m["score"] for c in results["cases"] for m in c["metrics"]] == [
        m["score"] for c in cold["cases"] for m in c["metrics"]
    ]
