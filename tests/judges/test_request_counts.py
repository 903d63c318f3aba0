"""Judge request counts (docs/judges.md#llm-judges): the requests a result reports match what the endpoint saw.

The judge client is the real ``openai`` SDK talking to ``tests/chat_server.py`` on 127.0.0.1, or the product's
``judge=`` hook (:class:`~evaltasks.judges.FunctionJudge`) around a recording function; nothing is mocked.
"""

from __future__ import annotations

from evaltasks import BiasMetric, GEvalMetric
from tests.chat_server import ChatServer
from tests.judge_helpers import Recorder, as_json, case, score_with, server_options

BIAS_CASE = case(input="Describe the team.", actual_output="The team shipped on time.")


def test_a_request_failing_after_http_retries_counts_every_attempt() -> None:
    with ChatServer() as server:
        server.always = "500"
        [result] = score_with(BiasMetric(judge_options=server_options(server, max_retries=1)), [BIAS_CASE])
        assert result.status == "errored" and "still failing after 1 retries" in result.error
        assert result.evaluation_log["judge_requests"] == len(server.requests) == 2


def test_a_retry_after_beyond_the_cap_says_so_and_counts_one_request() -> None:
    with ChatServer(retry_after_s=200) as server:
        server.script.append("429")
        [result] = score_with(BiasMetric(judge_options=server_options(server, max_retries=3)), [BIAS_CASE])
        assert result.status == "errored"
        assert "asked to wait 200 s before retrying (HTTP 429), more than the 120 s the client waits" in result.error
        assert result.evaluation_log["judge_requests"] == len(server.requests) == 1


def test_geval_counts_match_the_wire_with_logprobs_refused_and_n_ignored() -> None:
    """Per case: the 400 refusing logprobs, its resend, then 5 single-choice sampling requests (the first
    case); the second case knows and samples at once."""
    with ChatServer(
        responder=lambda r: as_json({"reason": "r", "score": 5}), logprobs="reject", support_n=False
    ) as server:
        metric = GEvalMetric(
            0.5,
            evaluation_steps=["Check the facts."],
            n_samples=5,
            judge_options=server_options(server, max_concurrency=1),
        )
        results = score_with(metric, [case(), case(input="Capital of Peru?", actual_output="Lima.")])
        assert [r.evaluation_log["judge_requests"] for r in results] == [7, 5]
        assert sum(r.evaluation_log["judge_requests"] for r in results) == len(server.requests)
        assert [r.status for r in server.requests].count(400) == 1


def test_a_judge_function_whose_answer_does_not_parse_counts_its_calls() -> None:
    recorder = Recorder("not JSON at all")
    [result] = score_with(BiasMetric(samples=2), [BIAS_CASE], recorder.judge())
    assert result.status == "errored"
    assert result.evaluation_log["judge_requests"] == len(recorder.calls) == 2
