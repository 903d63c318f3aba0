"""Judge-level behaviour found by breaking things (README, "LLM judges"): rejected answers, cache keys, prompt
overrides, request counts, prices, messages and sample means.

The judge client is the real ``openai`` SDK talking to ``tests/chat_server.py`` on 127.0.0.1, or the product's
``judge=`` hook (:class:`~evaltasks.judges.FunctionJudge`) around a recording function; nothing is mocked.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evaltasks import AnswerRelevancyMetric, BiasMetric, ContextualRecallMetric, GEvalMetric
from evaltasks.errors import ConfigError, CredentialsError
from evaltasks.judges.budget import Budget
from evaltasks.judges.openai import OpenAIJudge
from evaltasks.judges.prices import PRICES, resolve_price
from evaltasks.inputs.suite import load_suite
from tests.chat_server import ChatServer
from tests.judge_helpers import Recorder, as_json, case, score_with, server_options

BIAS_CASE = case(input="Describe the team.", actual_output="The team shipped on time.")
RAG_CASE = case(input="Where is Paris?", actual_output="Paris is in France.", expected_output="Paris is in France.",
                retrieval_context=["Paris is the capital of France."])


# -- 1. an answer the metric rejects is not served again -----------------------------------------------------------
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
        [first] = score_with(AnswerRelevancyMetric(judge_options=server_options(server, content_retries=0)),
                             [RAG_CASE], store_dir=tmp_path)
        assert first.status == "errored" and "2 verdicts for 1 statement" in first.error
        server.answers.append(verdicts(1))
        [second] = score_with(AnswerRelevancyMetric(judge_options=server_options(server)), [RAG_CASE],
                              store_dir=tmp_path)
        assert len(server.requests) == 2 and second.score == pytest.approx(1.0)

    recall = {"supported": "yes", "reason": "said"}
    with ChatServer() as server:
        server.answers.extend([as_json({"claims": ["Paris is in France."]}),
                               as_json({"verdicts": [recall, recall]})])
        [first] = score_with(ContextualRecallMetric(judge_options=server_options(server, content_retries=0)),
                             [RAG_CASE], store_dir=tmp_path / "recall")
        assert first.status == "errored" and "2 verdicts for 1 claim" in first.error
        server.answers.append(as_json({"verdicts": [recall]}))
        [second] = score_with(ContextualRecallMetric(judge_options=server_options(server)), [RAG_CASE],
                              store_dir=tmp_path / "recall")
        assert len(server.requests) == 3 and "<claims>" in server.requests[-1].body["messages"][1]["content"]
        assert second.score == pytest.approx(1.0) and second.evaluation_log["judge_cached"] == 1


# -- 2. the cache key follows the endpoint ---------------------------------------------------------------------------
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


# -- 3. prompt overrides are checked when the metric is made ---------------------------------------------------------
def _template(tmp_path: Path, text: str, name: str = "score.md") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_an_undefined_variable_in_an_override_is_refused_at_load(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = _template(tmp_path, "### system\nRate it. JSON only.\n### user\n{{ inptu }}: {{ actual_output }}\n")
    with pytest.raises(ValueError, match=r"undefined variable\(s\) inptu; BiasMetric's 'score' prompt has: "
                                         r"actual_output, input"):
        BiasMetric(prompts={"score": path})
    (tmp_path / "cases.jsonl").write_text(json.dumps({"input": "q", "actual_output": "a"}) + "\n", encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(json.dumps({"name": "s", "dataset": {"path": "cases.jsonl"},
                                 "metrics": [{"metric": "BiasMetric", "prompts": {"score": "score.md"}}]}),
                     encoding="utf-8")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # only for this test: later ones check a missing key
    with pytest.raises(ConfigError) as caught:  # an InputError: exit 2 on the CLI
        load_suite(suite)
    [problem] = caught.value.problems
    assert problem.location == "metrics[0]" and "inptu" in problem.message


@pytest.mark.parametrize(("tag", "line"), [
    ('{% include "x.md" %}', "include"), ('{% extends "x.md" %}', "extends"),
    ('{% import "x.md" as x %}', "import"), ('{% from "x.md" import y %}', "from"),
])
def test_loading_tags_are_refused(tmp_path: Path, tag: str, line: str) -> None:
    path = _template(tmp_path, f"### system\nRate it.\n### user\n{{{{ input }}}}\n{tag}\n")
    with pytest.raises(ValueError, match=f"line 5: the '{line}' tag is not allowed"):
        BiasMetric(prompts={"score": path})


def test_templates_render_in_the_sandbox(tmp_path: Path) -> None:
    """A template reaching Python internals errors the case; the working directory is never sent (fails when
    templates render outside Jinja's sandbox)."""
    path = _template(tmp_path, "### system\nRate it.\n### user\n{{ cycler.__init__.__globals__.os.getcwd() }} "
                               "{{ input }} {{ actual_output }}\n")
    recorder = Recorder(as_json({"score": 1.0, "reason": "ok"}))
    [result] = score_with(BiasMetric(prompts={"score": path}), [BIAS_CASE], recorder.judge())
    assert result.status == "errored" and "PromptError" in result.error
    assert not any(os.getcwd() in m["content"] for call in recorder.calls for m in call)


def test_a_syntax_error_names_the_files_line(tmp_path: Path) -> None:
    path = _template(tmp_path, "### system\nRate it.\n\n### user\n\n<input>\n{{ input }\n</input>\n")
    with pytest.raises(ValueError, match=r"score\.md: line 7: "):
        BiasMetric(prompts={"score": path})
    path = _template(tmp_path, "### system\n\nRate {% if %} it.\n### user\n{{ input }}\n")
    with pytest.raises(ValueError, match=r"score\.md: line 3: "):
        BiasMetric(prompts={"score": path})


# -- 4. request counts match what the endpoint saw -------------------------------------------------------------------
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
    with ChatServer(responder=lambda r: as_json({"reason": "r", "score": 5}), logprobs="reject",
                    support_n=False) as server:
        metric = GEvalMetric(0.5, evaluation_steps=["Check the facts."], n_samples=5,
                             judge_options=server_options(server, max_concurrency=1))
        results = score_with(metric, [case(), case(input="Capital of Peru?", actual_output="Lima.")])
        assert [r.evaluation_log["judge_requests"] for r in results] == [7, 5]
        assert sum(r.evaluation_log["judge_requests"] for r in results) == len(server.requests)
        assert [r.status for r in server.requests].count(400) == 1


def test_a_judge_function_whose_answer_does_not_parse_counts_its_calls() -> None:
    recorder = Recorder("not JSON at all")
    [result] = score_with(BiasMetric(samples=2), [BIAS_CASE], recorder.judge())
    assert result.status == "errored"
    assert result.evaluation_log["judge_requests"] == len(recorder.calls) == 2


# -- 5. prices ---------------------------------------------------------------------------------------------------------
def test_a_dated_snapshot_costs_its_base_models_price() -> None:
    price = resolve_price("gpt-4o-mini-2024-07-18")
    assert (price.input, price.output, price.known) == (PRICES["gpt-4o-mini"]["input"],
                                                        PRICES["gpt-4o-mini"]["output"], True)
    own = resolve_price("my-model-2025-01-31", {"my-model": {"input": 1.0, "output": 2.0}})
    assert (own.input, own.output) == (1.0, 2.0)
    assert not resolve_price("gpt-4o-mini-preview").known


def test_a_price_entry_needs_input_and_output() -> None:
    with pytest.raises(ValueError, match=r"prices\['my-model'\] must be a mapping with both 'input' and 'output'"):
        resolve_price("my-model", {"my-model": {"input": 1.0}})
    with pytest.raises(ValueError, match=r"prices\['gpt-4o'\]"):
        OpenAIJudge("gpt-4o", {"api_key": "k", "base_url": "http://127.0.0.1:9/v1",
                               "prices": {"gpt-4o": {"output": 3.0}}})


# -- 6. messages -------------------------------------------------------------------------------------------------------
def test_the_missing_key_message_does_not_send_users_to_the_suite_file(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT", "OPENAI_BASE_URL"):
        monkeypatch.setenv(name, "")
    with pytest.raises(CredentialsError) as caught:
        OpenAIJudge("gpt-4o-mini", {})
    assert "set the OPENAI_API_KEY environment variable (or pass the judge option api_key in Python; a suite file " \
           "may not hold one)" in str(caught.value)


def test_a_budget_stop_says_the_next_worst_case_does_not_fit() -> None:
    with ChatServer() as server:
        server.answers.append(as_json({"score": 0.9, "reason": "ok"}))
        # worst case 832 + 400 tokens at $1,400 per million: $1.72, within the $2 limit, not in the $1.50 left
        options = server_options(server, prices={"gpt-4o-mini": {"input": 1400.0, "output": 1400.0}})
        budget = Budget(2.0)
        budget.add_spent(0.5)
        [result] = score_with(BiasMetric(judge_options=options), [BIAS_CASE], budget=budget)
    assert result.status == "skipped" and not server.requests
    assert result.reason.startswith("skipped: the next request's worst case $")
    assert "does not fit in the $1.5000 left of the run's --max-cost budget of $2.0000 ($0.5000 spent so far)" \
        in result.reason


# -- 7. sample means -----------------------------------------------------------------------------------------------
def test_the_mean_of_samples_is_rounded_so_it_meets_its_threshold() -> None:
    """0.15 and 0.95: their float mean is 0.5499999999999999, which fails 0.55 unless rounded."""
    answers = iter([0.15, 0.95])
    recorder = Recorder(lambda messages: as_json({"score": next(answers), "reason": "r"}))
    metric = BiasMetric(threshold=0.55, samples=2, judge_options={"max_concurrency": 1})
    [result] = score_with(metric, [BIAS_CASE], recorder.judge())
    assert result.score == 0.55 and result.status == "passed"


def test_geval_samples_reason_says_it_quotes_the_first_sample() -> None:
    scores = iter([2, 9, 2])
    recorder = Recorder(lambda messages: as_json({"reason": "because", "score": next(scores)}))
    metric = GEvalMetric(0.5, evaluation_steps=["Check the facts."], n_samples=1, samples=3,
                         judge_options={"max_concurrency": 1})
    [result] = score_with(metric, [case()], recorder.judge())
    assert result.score == pytest.approx(13 / 30)
    assert result.reason.startswith("Mean of 3 samples 0.4333 (sd ")
    assert "). First sample: G-Eval score 0.2000" in result.reason


def test_a_prompt_that_fails_to_render_keeps_the_answers_before_it(tmp_path: Path) -> None:
    """ContextualRecall's claims answer is fine; its verdicts override fails in the sandbox before anything is
    sent: the claims answer stays stored (fails when the asker's previous answer is taken for the rejected one)."""
    path = _template(tmp_path, "### system\nJudge the claims. JSON only.\n### user\n{{ claims }} "
                               "{{ retrieval_context.__class__ }}\n", name="verdicts.md")
    with ChatServer() as server:
        server.answers.append(as_json({"claims": ["Paris is in France."]}))
        [result] = score_with(ContextualRecallMetric(judge_options=server_options(server),
                                                     prompts={"verdicts": path}), [RAG_CASE], store_dir=tmp_path / "s")
        assert result.status == "errored" and "PromptError" in result.error and len(server.requests) == 1
    assert len(list((tmp_path / "s").glob("*/*.json"))) == 1
