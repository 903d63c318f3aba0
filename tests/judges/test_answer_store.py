"""The judge answer store (docs/judges.md#llm-judges): an answer the metric rejects is not served again, and the cache
key follows the endpoint.

The judge client is the real ``openai`` SDK talking to ``tests/chat_server.py`` on 127.0.0.1; nothing is mocked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaltasks import AnswerRelevancyMetric, BiasMetric, ContextualRecallMetric
from tests.chat_server import ChatServer
from tests.judge_helpers import as_json, case, score_with, server_options

BIAS_CASE = case(input="Describe the team.", actual_output="The team shipped on time.")


RAG_CASE = case(
    input="Where is Paris?",
    actual_output="Paris is in France.",
    expected_output="Paris is in France.",
    retrieval_context=["Paris is the capital of France."],
)


# -- an answer the metric rejects is not served again -------------------------------------------------------------
def test_a_score_the_metric_rejects_is_asked_again_in_the_next_run(tmp_path: Path) -> None:
    """Bias answers 1.5 (valid JSON, outside [0, 1]): errored; the next run with the same store asks again and
    scores; the run after that is served from the store (fails when the rejected answer stays stored)."""
    with ChatServer() as server:
        server.answers.append(as_json({"score": 1.5, "reason": "too high"}))
        [first] = score_with(BiasMetric(judge_options=server_options(server)), [BIAS_CASE], store_dir=tmp_path)
        assert first.status == "errored" and "1.5 is outside [0, 1]" in first.error
        server.answers.append(as_json({"score": 0.9, "reason": "no bias"}))
        [second] = score_with(BiasMetric(judge_options=server_options(server)), [BIAS_CASE], store_dir=tmp_path)
        assert len(server.requests) == 2
        assert second.status == "passed" and second.score == pytest.approx(0.9)
        assert second.evaluation_log["judge_requests"] == 1 and second.evaluation_log["judge_cached"] == 0
        [third] = score_with(BiasMetric(judge_options=server_options(server)), [BIAS_CASE], store_dir=tmp_path)
        assert len(server.requests) == 2 and third.score == pytest.approx(0.9)
        assert third.evaluation_log["judge_cached"] == 1


def test_only_the_rejected_answer_is_removed(tmp_path: Path) -> None:
    """AnswerRelevancy gets 2 verdicts for its 1 statement: errored, and asked again next run. ContextualRecall's
    claims answer is fine and its verdicts are rejected: the next run sends the verdicts request only."""

    def verdicts(n: int) -> str:
        return as_json({"intent": "where", "verdicts": [{"type": "claim", "verdict": "fully", "reason": "r"}] * n})

    with ChatServer() as server:
        server.answers.append(verdicts(2))
        [first] = score_with(
            AnswerRelevancyMetric(judge_options=server_options(server, content_retries=0)),
            [RAG_CASE],
            store_dir=tmp_path,
        )
        assert first.status == "errored" and "2 verdicts for 1 statement" in first.error
        server.answers.append(verdicts(1))
        [second] = score_with(
            AnswerRelevancyMetric(judge_options=server_options(server)), [RAG_CASE], store_dir=tmp_path
        )
        assert len(server.requests) == 2 and second.score == pytest.approx(1.0)

    recall = {"supported": "yes", "reason": "said"}
    with ChatServer() as server:
        server.answers.extend([as_json({"claims": ["Paris is in France."]}), as_json({"verdicts": [recall, recall]})])
        [first] = score_with(
            ContextualRecallMetric(judge_options=server_options(server, content_retries=0)),
            [RAG_CASE],
            store_dir=tmp_path / "recall",
        )
        assert first.status == "errored" and "2 verdicts for 1 claim" in first.error
        server.answers.append(as_json({"verdicts": [recall]}))
        [second] = score_with(
            ContextualRecallMetric(judge_options=server_options(server)), [RAG_CASE], store_dir=tmp_path / "recall"
        )
        assert len(server.requests) == 3 and "<claims>" in server.requests[-1].body["messages"][1]["content"]
        assert second.score == pytest.approx(1.0) and second.evaluation_log["judge_cached"] == 1


# -- the cache key follows the endpoint ---------------------------------------------------------------------------
def test_the_cache_key_follows_the_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-never-in-a-cache-key-0123456789"
    for name in ("OPENAI_BASE_URL", "AZURE_OPENAI_ENDPOINT"):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    public = BiasMetric().cache_key()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8001/v1")
    first = BiasMetric().cache_key()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8002/v1")
    second = BiasMetric().cache_key()
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://example.openai.azure.com")
    azure = BiasMetric().cache_key()
    assert len({public, first, second, azure}) == 4
    explicit = BiasMetric(judge_options={"base_url": "http://127.0.0.1:8001/v1", "api_key": secret})
    assert explicit.cache_key() == BiasMetric(judge_options={"base_url": "http://127.0.0.1:8001/v1"}).cache_key()
    assert explicit.judge_config()["endpoint"] == "http://127.0.0.1:8001/v1"
    assert secret not in json.dumps(explicit.config(), default=str) and secret not in explicit.cache_key()
