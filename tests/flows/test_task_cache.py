"""Prefect's task cache and retries on the real engine (docs/prefect.md#retries-and-caching).

(a) A second PROCESS hits the task cache: ``python -m evaltasks.cli run`` twice with one PREFECT_HOME (each
    process starts its own temporary Prefect server on the shared SQLite database; cached results live in
    ``$PREFECT_HOME/storage``); ``--no-cache`` rescores (embeddings come from the index either way).
(b) Two metrics that differ only in configuration never share a cached ``score-batch`` result; the identical
    metric on the same inputs does hit the cache. Expected scores are computed independently
    (sentence-transformers + numpy for ReferenceMatch, words counted by hand for LengthCheck).
(c) ``retry_if_transient`` on ``embed-outputs``: the real OpenAI provider (the official ``openai`` client) talks
    over real HTTP to ``tests/openai_server.py``, a local server that speaks the embeddings API and injects
    scripted faults and counts requests. No external API is used: it would need a key, cost money, and could
    not be made to fail on demand. The client's own HTTP retries are off (``max_retries: 0``) so each task
    attempt is exactly one request; attempts are also counted by the task run's own ``run_count`` (read in an
    ``on_completion`` / ``on_failure`` hook).

Nothing is mocked: real Prefect engine and server, real FAISS index, the bundled all-MiniLM-L6-v2.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.cli_forkserver import run_cli
from tests.process_env import subprocess_env

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart" / "suite.yaml"
TOL = 1e-6
CLI_TIMEOUT = 600  # one quickstart run takes ~30 s on 2 cores; a loaded CI machine gets a wide margin


# -- (a) a second process hits the task cache ------------------------------------------------------------------


def _cli_env(prefect_home: Path, api_url: str | None = None) -> dict[str, str]:
    return subprocess_env(prefect_home, api_url)


def _cli_run(tmp_path: Path, env: dict[str, str], out: str, index: str, *extra: str) -> dict[str, Any]:
    """``python -m evaltasks.cli run`` in a process of its own; returns its results.json."""
    args = ["run", str(QUICKSTART), "--output-dir", str(tmp_path / out), "--index-dir", str(tmp_path / index)]
    proc = run_cli(*args, "--quiet", *extra, cwd=tmp_path, env=env, timeout=CLI_TIMEOUT)
    assert proc.returncode == 0, f"{' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads((tmp_path / out / "results.json").read_text(encoding="utf-8"))


def _scores(results: dict[str, Any]) -> list[tuple[str, str, float | None, bool]]:
    return [(case["id"], m["name"], m["score"], m["success"]) for case in results["cases"] for m in case["metrics"]]


def test_second_process_reuses_cached_outputs(tmp_path: Path, prefect_api_url: str) -> None:
    home = tmp_path / "prefect-home"
    env = _cli_env(home, prefect_api_url)  # the session's server; the task cache is PREFECT_HOME's storage

    first = _cli_run(tmp_path, env, "out1", "index1")
    emb1 = first["summary"]["embeddings"]
    assert (emb1["references_computed"], emb1["references_reused"]) == (10, 0)
    assert (emb1["outputs_computed"], emb1["outputs_reused"]) == (8, 0)
    storage = home / "storage"
    assert storage.is_dir() and any(storage.iterdir()), f"no cached result under {storage}"

    # A new process, a fresh index: references and outputs are embedded again (the index, not Prefect's task
    # cache, keeps embeddings); the score batches of identical inputs come from the task cache.
    second = _cli_run(tmp_path, env, "out2", "index2")
    emb2 = second["summary"]["embeddings"]
    assert (emb2["references_computed"], emb2["references_reused"]) == (10, 0)
    assert (emb2["outputs_computed"], emb2["outputs_reused"]) == (8, 0)
    assert second["passed"] == first["passed"]
    for a, b in zip(_scores(first), _scores(second), strict=True):
        assert a[:2] == b[:2] and a[3] == b[3], (a, b)
        assert abs(a[2] - b[2]) <= TOL, (a, b)
    assert second["summary"]["pass_rate"] == first["summary"]["pass_rate"]

    # --no-cache scores everything again; references and outputs still come from the index (not the task cache).
    third = _cli_run(tmp_path, env, "out3", "index1", "--no-cache")
    emb3 = third["summary"]["embeddings"]
    assert (emb3["outputs_computed"], emb3["outputs_reused"]) == (0, 8)
    assert (emb3["references_computed"], emb3["references_reused"]) == (0, 10)
    for a, c in zip(_scores(first), _scores(third), strict=True):
        assert a[:2] == c[:2] and a[3] == c[3] and abs(a[2] - c[2]) <= TOL, (a, c)


def test_identical_batches_share_a_cached_result_without_losing_it(tmp_path: Path, prefect_api_url: str) -> None:
    """Three batches of identical content have one cache key: the second and third are cache hits on the first.
    Each must get the results, in a cold and in a warm task cache (Prefect's in-memory result cache once handed
    them the very box the flow had already emptied: IndexError, exit 3, no reports)."""
    row = {
        "input": "What is the capital of France?",
        "actual_output": "Paris is the capital of France.",
        "references": ["Paris is the capital of France.", "The capital is Paris."],
    }
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for _ in range(3)), encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: repeated-rows\ndataset: {path: data.jsonl}\nmetrics:\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local}\n"
        "  - {metric: LengthCheckMetric, max_length: 10, unit: words}\n",
        encoding="utf-8",
    )
    env = _cli_env(tmp_path / "prefect-home", prefect_api_url)
    for run in ("cold", "warm"):
        out = tmp_path / f"out-{run}"
        args = ["run", str(suite), "--output-dir", str(out), "--index-dir", str(tmp_path / "index")]
        proc = run_cli(*args, "--batch-size", "1", "--quiet", env=env, cwd=tmp_path, timeout=CLI_TIMEOUT)
        assert proc.returncode == 0, f"{run} run exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        results = json.loads((out / "results.json").read_text(encoding="utf-8"))
        assert [case["id"] for case in results["cases"]] == [results["cases"][0]["id"] + s for s in ("", "#2", "#3")]
        for case in results["cases"]:
            scores = {m["name"]: (m["score"], m["status"]) for m in case["metrics"]}
            assert scores["LengthCheckMetric"] == (1.0, "passed"), (run, case)
            assert abs(scores["ReferenceMatchMetric"][0] - 1.0) <= 1e-5, (run, case)  # an output equal to a reference
        assert results["summary"]["cases"] == 3 and results["summary"]["passed_cases"] == 3, run
        assert (out / "junit.xml").read_text(encoding="utf-8").count("<testcase ") == 6, run


# -- (b) different metrics on the same inputs never share a cached result -----------------------------------------


def _score_in_flow(calls: list[tuple[Any, list, Any]]) -> list[tuple[str, list]]:
    """Call the ``score-batch`` task for each (metric, cases, vectors), in order, in one flow run.

    Returns each call's (state name, results).
    """
    from prefect import flow

    from evaltasks.tasks import score_batch

    @flow(name="score-batch-cache-test")
    def scoring() -> list[tuple[str, list]]:
        out = []
        for metric, cases, vectors in calls:
            state = score_batch(metric, cases, vectors, metric.cache_key(), return_state=True)
            assert state.is_completed(), state
            out.append((state.name, state.result()))
        return out

    return scoring()


def test_metrics_differing_only_in_configuration_never_share_a_cached_result(prefect_harness, st_model, cosine) -> None:
    from evaltasks import EvalTestCase
    from evaltasks.embeddings import VectorTable
    from evaltasks.metrics import LengthCheckMetric, ReferenceMatchMetric

    nonce = uuid.uuid4().hex  # part of the inputs: nothing cached by an earlier run can answer the first call
    rows = [
        ("The capital of France is Paris.", ["Paris is the capital of France.", "Bananas are yellow."]),
        (
            "Water boils at 100 degrees Celsius at sea level in normal conditions today.",
            ["At sea level water boils at 100 °C.", "The stock market closed higher."],
        ),
    ]
    words = [6, 13]  # words of each output, counted by hand
    cases = [
        EvalTestCase(input=f"question {i} {nonce}", actual_output=out, references=refs)
        for i, (out, refs) in enumerate(rows)
    ]

    rm_max = ReferenceMatchMetric(0.5, aggregation="max", embedding_provider="local")
    rm_mean = ReferenceMatchMetric(0.5, aggregation="mean", embedding_provider="local")
    lc_5 = LengthCheckMetric(max_length=5, unit="words")
    lc_50 = LengthCheckMetric(max_length=50, unit="words")
    assert rm_max.cache_key() != rm_mean.cache_key() and lc_5.cache_key() != lc_50.cache_key()

    # The same vectors for both ReferenceMatch configurations, embedded independently of evaltasks.
    texts = list(dict.fromkeys(t for out, refs in rows for t in (out, *refs)))
    vectors = st_model.encode(texts, convert_to_numpy=True, show_progress_bar=False).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    assert rm_max.embedding_namespace == rm_mean.embedding_namespace
    table = {rm_max.embedding_namespace: VectorTable(texts, vectors)}

    sims = [np.clip(cosine(out, refs), 0.0, 1.0) for out, refs in rows]
    expected = {
        "max": [float(s.max()) for s in sims],
        "mean": [float(s.mean()) for s in sims],
        "lc5": [1.0 if w <= 5 else 0.0 for w in words],
        "lc50": [1.0 if w <= 50 else 0.0 for w in words],
    }
    assert all(abs(a - b) > 1e-3 for a, b in zip(expected["max"], expected["mean"]))
    assert expected["lc5"] != expected["lc50"]

    (s_max, r_max), (s_mean, r_mean), (s_max2, r_max2), (s_lc5, r_lc5), (s_lc50, r_lc50), (s_lc5b, r_lc5b) = (
        _score_in_flow(
            [
                (rm_max, cases, table),
                (rm_mean, cases, table),
                (rm_max, cases, table),
                (lc_5, cases, None),
                (lc_50, cases, None),
                (lc_5, cases, None),
            ]
        )
    )

    # A different configuration on the same inputs is computed, never taken from the other's cache entry.
    assert s_max != "Cached" and s_mean != "Cached", (s_max, s_mean)
    assert s_lc5 != "Cached" and s_lc50 != "Cached", (s_lc5, s_lc50)
    for got, want in ((r_max, expected["max"]), (r_mean, expected["mean"])):
        assert [r.status for r in got] == ["passed" if w >= 0.5 else "failed" for w in want]
        assert all(abs(r.score - w) <= TOL for r, w in zip(got, want, strict=True)), ([r.score for r in got], want)
    assert [r.score for r in r_lc5] == expected["lc5"]
    assert [r.score for r in r_lc50] == expected["lc50"]
    assert [r.evaluation_log["length"] for r in r_lc5] == words
    assert [r.evaluation_log["max_length"] for r in r_lc5] == [5, 5]
    assert [r.evaluation_log["max_length"] for r in r_lc50] == [50, 50]
    assert [r.evaluation_log["aggregation"] for r in r_mean] == ["mean", "mean"]

    # The identical metric on the identical inputs is served from the cache, with identical results.
    assert s_max2 == "Cached" and s_lc5b == "Cached", (s_max2, s_lc5b)
    assert [r.model_dump() for r in r_max2] == [r.model_dump() for r in r_max]
    assert [r.model_dump() for r in r_lc5b] == [r.model_dump() for r in r_lc5]


# -- (c) retries: transient errors only ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def openai_server():
    from tests.openai_server import OpenAIServer

    with OpenAIServer() as server:
        yield server


def _embed_in_flow(server, texts: list[str], **options: Any) -> tuple[Any, list[int]]:
    """Run ``embed-outputs`` once (no retry delay, cache refreshed) against ``server`` in a flow.

    Returns (the task's final state, the task run's ``run_count`` seen by each completion/failure hook).
    """
    from prefect import flow

    from evaltasks.embeddings import get_provider
    from evaltasks.tasks import embed_outputs

    provider_options = {
        "base_url": f"{server.url}/v1",
        "api_key": server.api_key,
        "max_retries": 0,
        "content_retries": 0,
        "timeout": 30.0,
        **options,
    }
    namespace = get_provider("openai", "text-embedding-3-small", **provider_options).namespace
    attempts: list[int] = []

    def record(task, task_run, state) -> None:  # noqa: ANN001 - Prefect's hook signature
        attempts.append(task_run.run_count)

    task = embed_outputs.with_options(
        retry_delay_seconds=0, refresh_cache=True, on_completion=[record], on_failure=[record]
    )

    states: list[Any] = []

    @flow(name="embed-retry-test")
    def embedding() -> None:  # the state is kept aside: a flow returning a failed state would fail itself
        states.append(task("openai", "text-embedding-3-small", namespace, texts, provider_options, return_state=True))

    embedding()
    return states[0], attempts


def _request_count(server) -> int:
    return len(server.embedding_requests())


def test_transient_provider_errors_are_retried_until_success(prefect_harness, openai_server) -> None:
    from tests.openai_server import encode

    server = openai_server
    server.reset()
    server.script.extend(["500", "503"])  # two transient failures, then a good answer
    texts = [f"retried text {uuid.uuid4().hex}", "another text"]
    state, attempts = _embed_in_flow(server, texts)
    assert state.is_completed(), state
    assert attempts == [3]  # two retries, as configured on the task
    assert _request_count(server) == 3
    assert [r.status for r in server.embedding_requests()] == [500, 503, 200]
    table, _counts = state.result()
    assert table.texts == texts
    assert np.allclose(table.vectors, encode(texts), atol=1e-6)


def test_transient_errors_fail_after_the_configured_retries(prefect_harness, openai_server) -> None:
    from evaltasks.errors import ProviderError

    server = openai_server
    server.reset()
    server.always = "502"
    state, attempts = _embed_in_flow(server, [f"never embedded {uuid.uuid4().hex}"])
    assert state.is_failed(), state
    with pytest.raises(ProviderError) as info:
        state.result()
    assert info.value.transient is True
    assert attempts == [3] and _request_count(server) == 3


def test_deterministic_provider_error_fails_after_one_attempt(prefect_harness, openai_server) -> None:
    from evaltasks.errors import ProviderError

    server = openai_server
    server.reset()
    # 10,001 tokens by the server's count (bytes // 4 + 1): over the model's 8192-token input limit, so the
    # server answers 400 (the provider is told it may send up to 50,000, so it does not truncate first).
    too_long = "abcd" * 10_000
    state, attempts = _embed_in_flow(server, [too_long], max_input_tokens=50_000)
    assert state.is_failed(), state
    with pytest.raises(ProviderError) as info:
        state.result()
    assert info.value.transient is False
    assert "400" in str(info.value)
    assert attempts == [1]
    assert [r.status for r in server.embedding_requests()] == [400]


def test_value_error_fails_after_one_attempt(prefect_harness, openai_server) -> None:
    server = openai_server
    server.reset()
    state, attempts = _embed_in_flow(server, ["a real text", ""])  # the API rejects empty strings
    assert state.is_failed(), state
    with pytest.raises(ValueError, match="empty"):
        state.result()
    assert attempts == [1]
    assert _request_count(server) == 0  # refused before any request


def test_retry_if_transient_is_the_embedding_tasks_retry_condition() -> None:
    from evaltasks.tasks import embed_outputs, embed_references, retry_if_transient

    for task in (embed_outputs, embed_references):
        assert task.retry_condition_fn is retry_if_transient
        assert task.retries == 2


def test_score_batch_never_caches_errored_results(prefect_harness, openai_server) -> None:
    """A metric embedding its own texts (vectors=None) while the provider is down: the task fails (retried,
    not cached); once the provider is back the same call computes real scores."""
    from prefect import flow

    from evaltasks import EvalTestCase, ReferenceMatchMetric
    from evaltasks.tasks import score_batch

    metric = ReferenceMatchMetric(
        0.5,
        embedding_provider="openai",
        name="rm-outage",
        provider_options={
            "base_url": f"{openai_server.url}/v1",
            "api_key": openai_server.api_key,
            "max_retries": 0,
            "content_retries": 0,
        },
    )
    cases = [EvalTestCase(actual_output="Paris is the capital.", references=["The capital is Paris."])]
    task = score_batch.with_options(retry_delay_seconds=0)
    states: list[Any] = []

    @flow(name="score-outage")
    def scoring() -> None:
        states.append(task(metric, cases, None, metric.cache_key(), return_state=True))

    openai_server.always = "500"
    try:
        scoring()
    finally:
        openai_server.always = None
    assert states[0].is_failed()
    scoring()
    assert states[1].is_completed() and states[1].name != "Cached"
    [result] = states[1].result()
    assert result.status in ("passed", "failed") and result.score is not None


def test_user_metric_without_config_override_gets_distinct_cache_keys(prefect_harness) -> None:
    from prefect import flow

    from evaltasks import EvalTestCase
    from evaltasks.metrics import BaseMetric
    from evaltasks.results import MetricResult
    from evaltasks.tasks import score_batch

    class ContainsWord(BaseMetric):  # written the natural way: parameters as attributes, no config()
        def __init__(self, word: str, threshold: float = 1.0) -> None:
            super().__init__(threshold)
            self.word = word

        def score_batch(self, cases, vectors=None):  # noqa: ANN001
            return [
                MetricResult.scored(self.name, float(self.word in c.actual_output), self.threshold, "", {})
                for c in cases
            ]

    cases = [EvalTestCase(actual_output="Paris is the capital.")]

    @flow(name="custom-metric-cache")
    def scoring(word: str) -> tuple[str, float]:
        metric = ContainsWord(word)
        state = score_batch(metric, cases, None, metric.cache_key(), return_state=True)
        return state.name, state.result()[0].score

    assert ContainsWord("Paris").cache_key() != ContainsWord("Berlin").cache_key()
    assert scoring("Paris")[1] == 1.0
    name, score = scoring("Berlin")
    assert name != "Cached" and score == 0.0
    assert scoring("Paris") == ("Cached", 1.0)


def test_embedding_tasks_occupy_a_global_concurrency_limit(prefect_harness, minilm_path) -> None:
    """With a named Prefect global concurrency limit the embedding task takes a slot (strict: a limit that does
    not exist on the server fails the task instead of silently running unlimited)."""
    import asyncio

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    from evaltasks.embeddings import get_provider
    from evaltasks.tasks import embed_outputs

    namespace = get_provider("local").namespace
    name = f"embeddings-{uuid.uuid4().hex[:8]}"

    async def create() -> None:
        async with get_client() as client:
            await client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))

    asyncio.run(create())
    task = embed_outputs.with_options(refresh_cache=True, retries=0)
    states: list[Any] = []

    @flow(name="gcl-embed")
    def embedding(limit: str) -> None:
        states.append(
            task("local", "all-MiniLM-L6-v2", namespace, ["a text"], None, concurrency_limit=limit, return_state=True)
        )

    embedding(name)
    assert states[0].is_completed()
    table, counts = states[0].result()
    assert len(table) == 1 and counts.outputs_computed == 1
    embedding(f"missing-{uuid.uuid4().hex[:8]}")
    assert states[1].is_failed()
