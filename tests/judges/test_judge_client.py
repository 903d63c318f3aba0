"""The judge client, the answer store and the budget against a real OpenAI-compatible server on 127.0.0.1.

Nothing is mocked: ``tests/chat_server.py`` is a real HTTP server answering from scripts, and the judge talks to
it through the real ``openai`` client. The server records every request (body, headers, arrival time, billed
tokens), so request mapping, retries, fallbacks, caching, costs, the budget and the concurrency limit are all
asserted from what crossed the wire. No assert bounds how long something took from above; the only time
asserts are lower bounds the protocol imposes (a ``Retry-After`` wait, a rate limit's spacing).
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evaltasks.errors import ConfigError, CredentialsError
from evaltasks.judges import FunctionJudge, JudgeRuntime, RunJudge, get_judge
from evaltasks.judges.base import BudgetExhausted, JudgeError, JudgeRequest
from evaltasks.judges.budget import Budget
from evaltasks.judges.openai import OpenAIJudge, strict_schema, worst_case_tokens
from evaltasks.judges.prices import PRICES
from evaltasks.judges.store import AnswerStore
from tests.chat_server import Answer, ChatServer, usage_tokens

REPO = Path(__file__).resolve().parents[2]
KEY = f"sk-judge-test-{uuid.uuid4().hex}"
MODEL = "gpt-4o-mini"
SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 0, "maximum": 10}, "reason": {"type": "string"}},
    "required": ["score", "reason"],
    "additionalProperties": False,
}
PRICES_OPTION = {"prices": {MODEL: {"input": 3.0, "output": 7.0}}}  # round numbers: costs checkable by hand


def good(score: int = 7, reason: str = "fine") -> str:
    return json.dumps({"score": score, "reason": reason})


def request(user: str = "Output: Paris.", *, system: str = "Grade the output. Answer JSON.", **fields) -> JudgeRequest:
    return JudgeRequest(
        messages=({"role": "system", "content": system}, {"role": "user", "content": user}),
        schema=fields.pop("schema", SCHEMA),
        **fields,
    )


@pytest.fixture
def server():
    with ChatServer(api_key=KEY) as srv:
        yield srv


def judge_for(server: ChatServer, model: str = MODEL, **options) -> OpenAIJudge:
    """A fresh client (not the process-shared one) for ``server``."""
    return OpenAIJudge(model, {"base_url": server.base_url, "api_key": KEY, "timeout": 30, "max_retries": 3, **options})


def run_judge(
    server: ChatServer, store_dir: Path | None, *, refresh: bool = False, budget: Budget | None = None, **options
) -> RunJudge:
    return RunJudge(judge_for(server, **options), JudgeRuntime(store_dir=store_dir, refresh=refresh, budget=budget))


# --- the request --------------------------------------------------------------------------------------------------
def test_request_body_maps_every_field(server: ChatServer) -> None:
    server.answers.extend(
        [Answer(good(7), alternatives={"7": [("7", -0.1), ("8", -2.5), ("6", -3.0)]}), good(6), good(5)]
    )
    judge = judge_for(server, seed=11)
    reply = judge.complete(request(temperature=0.7, max_tokens=77, top_logprobs=3, n=3))

    (sent,) = server.requests
    body = sent.body
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert body["model"] == MODEL
    assert body["messages"] == [
        {"role": "system", "content": "Grade the output. Answer JSON."},
        {"role": "user", "content": "Output: Paris."},
    ]
    assert body["temperature"] == 0.7 and body["max_tokens"] == 77 and body["n"] == 3 and body["seed"] == 11
    assert body["logprobs"] is True and body["top_logprobs"] == 3
    assert body["response_format"] == {"type": "json_object"}  # auto: JSON mode; the schema is checked here
    assert [c.parsed for c in reply.choices] == [
        {"score": 7, "reason": "fine"},
        {"score": 6, "reason": "fine"},
        {"score": 5, "reason": "fine"},
    ]
    seven = next(t for t in reply.logprobs if t.token == "7")
    assert seven.logprob == -0.1 and seven.top == (("7", -0.1), ("8", -2.5), ("6", -3.0))
    assert reply.requests == 1 and not reply.cached and reply.model == MODEL
    assert (reply.prompt_tokens, reply.completion_tokens) == server.billed


def test_defaults_send_no_n_logprobs_or_seed_and_free_text_has_no_response_format(server: ChatServer) -> None:
    server.answers.append("just text")
    reply = judge_for(server).complete(request(schema=None))
    body = server.requests[0].body
    assert not {"n", "logprobs", "top_logprobs", "seed", "response_format"} & set(body)
    assert reply.text == "just text" and reply.parsed is None and reply.logprobs is None


def test_strict_only_for_schemas_that_qualify(server: ChatServer) -> None:
    loose = {
        "type": "object",
        "properties": {"score": {"type": "integer"}, "note": {"type": "string"}},
        "required": ["score"],
    }
    nested = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]},
            }
        },
        "required": ["items"],
        "additionalProperties": False,
    }
    assert strict_schema(SCHEMA) and not strict_schema(loose) and not strict_schema(nested)
    server.answers.append('{"score": 1}')
    judge_for(server, structured_outputs="json_schema").complete(request(schema=loose, schema_name="grade"))
    assert server.requests[0].body["response_format"]["json_schema"] == {
        "name": "grade",
        "schema": loose,
        "strict": False,
    }


def test_azure_path_version_and_api_key_header(server: ChatServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    server.answers.append(good())
    judge = OpenAIJudge(
        "my-judge-deployment", {"azure_endpoint": server.url, "api_version": "2024-10-21", "max_retries": 0}
    )
    assert judge.complete(request()).parsed == {"score": 7, "reason": "fine"}
    (sent,) = server.requests
    assert sent.path == "/openai/deployments/my-judge-deployment/chat/completions?api-version=2024-10-21"
    assert sent.headers["api-key"] == KEY and "authorization" not in sent.headers


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT", "OPENAI_BASE_URL"):
        monkeypatch.setenv(name, "")  # empty counts as unset
    with pytest.raises(CredentialsError, match="OPENAI_API_KEY"):
        OpenAIJudge(MODEL, {})
    with pytest.raises(CredentialsError, match="AZURE_OPENAI_API_KEY"):
        OpenAIJudge(MODEL, {"azure_endpoint": "http://127.0.0.1:9", "api_version": "2024-10-21"})
    with pytest.raises(ConfigError, match="api_version"):
        monkeypatch.setenv("OPENAI_API_VERSION", "")
        OpenAIJudge(MODEL, {"azure_endpoint": "http://127.0.0.1:9", "api_key": "k"})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_retry": 3}, "unknown judge option"),
        ({"timeout": 0}, "timeout"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"content_retries": -1}, "content_retries"),
        ({"structured_outputs": "yes"}, "structured_outputs"),
        ({"logprobs": "maybe"}, "logprobs"),
        ({"temperature": 3}, "temperature"),
        ({"seed": 1.5}, "seed"),
        ({"prices": {MODEL: {"input": -1}}}, "prices"),
        ({"prices": {MODEL: 2.0}}, "prices"),
        ({"price_per_million_output_tokens": "1"}, "price_per_million_output_tokens"),
        ({"requests_per_minute": 0}, "requests_per_minute"),
    ],
)
def test_invalid_options_are_named(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OpenAIJudge(MODEL, {"api_key": "k", "base_url": "http://127.0.0.1:9/v1", **options})


# --- retries ------------------------------------------------------------------------------------------------------
def test_429_waits_out_retry_after(server: ChatServer) -> None:
    server.retry_after_s = 1
    server.script.extend(["429", "429_ms"])
    server.answers.append(good())
    reply = judge_for(server).complete(request())
    first, second, third = server.requests
    assert (first.status, second.status, third.status) == (429, 429, 200)
    assert second.arrived - first.arrived >= 1.0  # the header's wait, at least
    assert reply.requests == 3 and reply.parsed["score"] == 7


def test_retry_after_beyond_the_client_cap_is_not_retried(server: ChatServer) -> None:
    import openai._constants

    cap = getattr(openai._constants, "MAX_RETRY_AFTER_DELAY", None)
    if cap is None:
        pytest.skip("this openai version has no Retry-After cap (it backs off instead)")
    server.retry_after_s = int(cap) + 1  # the bound of docs/judges.md#judge-client: 120 s with openai 3.x
    server.script.append("429")
    with pytest.raises(JudgeError, match="429"):
        judge_for(server).complete(request())
    assert len(server.requests) == 1


@pytest.mark.parametrize("fault", ["500", "502", "503", "429_plain", "drop"])
def test_transient_failures_are_retried(server: ChatServer, fault: str) -> None:
    server.script.append(fault)
    server.answers.append(good(4))
    reply = judge_for(server).complete(request())
    assert [r.fault for r in server.requests] == [fault, None]
    assert reply.parsed["score"] == 4 and reply.requests == 2


def test_timeouts_are_retried(server: ChatServer) -> None:
    server.slow_s = 1.5
    server.script.append("slow")
    server.answers.append(good(3))
    reply = judge_for(server, timeout=0.5).complete(request())
    assert [r.fault for r in server.requests] == ["slow", None]
    assert reply.parsed["score"] == 3


def test_persistent_5xx_fail_after_max_retries(server: ChatServer) -> None:
    server.always = "500"
    with pytest.raises(JudgeError, match="still failing after 2 retries"):
        judge_for(server, max_retries=2).complete(request())
    assert len(server.requests) == 3


@pytest.mark.parametrize("fault", ["400", "404"])
def test_other_4xx_are_not_retried(server: ChatServer, fault: str) -> None:
    server.script.append(fault)
    with pytest.raises(JudgeError, match=f"HTTP {fault}"):
        judge_for(server).complete(request())
    assert len(server.requests) == 1


def test_rejected_key_is_a_credentials_error_at_once(server: ChatServer) -> None:
    judge = OpenAIJudge(MODEL, {"base_url": server.base_url, "api_key": "sk-wrong", "max_retries": 3})
    with pytest.raises(CredentialsError, match="rejected the key"):
        judge.complete(request())
    assert len(server.requests) == 1


def test_unusable_answers_are_re_requested_then_fail(server: ChatServer, tmp_path: Path) -> None:
    server.answers.extend(
        ["I think it is a 7.", '{"score": "seven", "reason": "x"}', '```json\n{"score": 11, "reason": "x"}```']
    )
    judge = run_judge(server, tmp_path, content_retries=2, **PRICES_OPTION)
    with pytest.raises(JudgeError, match="after 3 attempt") as raised:
        judge.complete(request())
    assert "at score: 11 is greater than the maximum of 10" in str(raised.value)  # the last answer's failure
    assert len(server.requests) == 3
    assert not list(tmp_path.rglob("*.json"))  # an unusable answer is never stored


def test_an_unusable_answer_then_a_good_one_is_billed_for_both(server: ChatServer) -> None:
    server.answers.extend(["no json here", "```json\n" + good(2) + "\n```"])
    server.script.append("malformed_body")
    reply = judge_for(server, content_retries=2, **PRICES_OPTION).complete(request())
    assert reply.parsed == {"score": 2, "reason": "fine"} and reply.requests == 3
    prompt, completion = server.billed
    assert (reply.prompt_tokens, reply.completion_tokens) == (prompt, completion)
    assert reply.cost == pytest.approx((prompt * 3.0 + completion * 7.0) / 1e6, rel=1e-12)


# --- capability fallbacks -----------------------------------------------------------------------------------------
def test_structured_outputs_fall_back_and_are_remembered() -> None:
    with ChatServer(api_key=KEY, structured_outputs=False, json_object=False) as server:
        server.answers.extend(["Sure: " + good(5), good(6)])
        assert judge_for(server).complete(request()).parsed["score"] == 5
        kinds = [(r.body.get("response_format") or {}).get("type") for r in server.requests]
        assert kinds == ["json_object", None]
        server.reset()
        assert judge_for(server).complete(request()).parsed["score"] == 6  # another client, same endpoint
        assert len(server.requests) == 1 and "response_format" not in server.requests[0].body


def test_auto_sends_json_mode_without_the_schema_and_still_checks_it() -> None:
    """``structured_outputs: auto`` sends ``json_object`` (no schema billed as prompt tokens on every request);
    an answer that does not match the schema is still asked again, then accepted once it matches."""
    with ChatServer(api_key=KEY, structured_outputs=False, bill_schema=True) as server:
        server.answers.extend(['{"score": "high"}', good()])
        reply = judge_for(server).complete(request())
        assert [r.body.get("response_format") for r in server.requests] == [{"type": "json_object"}] * 2
        assert reply.parsed["score"] == 7 and reply.requests == 2
        prompt = sum(len(m["content"].encode()) // 4 + 1 for m in server.requests[0].body["messages"])
        assert server.requests[0].prompt_tokens == prompt  # nothing for a schema
    with ChatServer(api_key=KEY, bill_schema=True) as server:
        server.answers.append(good())
        judge_for(server, structured_outputs="json_schema").complete(request())
        assert server.requests[0].body["response_format"]["type"] == "json_schema"
        assert server.requests[0].prompt_tokens > prompt  # the schema is billed


def test_forced_structured_outputs_do_not_fall_back() -> None:
    with ChatServer(api_key=KEY, structured_outputs=False) as server:
        with pytest.raises(JudgeError, match="HTTP 400"):
            judge_for(server, structured_outputs="json_schema").complete(request())
        assert len(server.requests) == 1
        server.answers.append(good())
        judge_for(server, structured_outputs="off").complete(request())
        assert "response_format" not in server.requests[-1].body


def test_logprobs_fall_back_when_refused() -> None:
    with ChatServer(api_key=KEY, logprobs="reject") as server:
        server.answers.append(good())
        judge = judge_for(server)
        assert judge.supports_logprobs
        reply = judge.complete(request(top_logprobs=5))
        assert [bool(r.body.get("logprobs")) for r in server.requests] == [True, False]
        assert reply.logprobs is None and reply.parsed["score"] == 7
        assert not judge.supports_logprobs and not judge_for(server).supports_logprobs


def test_ignored_logprobs_turn_support_off() -> None:
    with ChatServer(api_key=KEY, logprobs="ignore") as server:
        server.answers.append(good())
        judge = judge_for(server)
        assert judge.complete(request(top_logprobs=5)).logprobs is None
        assert not judge.supports_logprobs
    assert not OpenAIJudge(
        MODEL, {"api_key": "k", "base_url": "http://127.0.0.1:9/v1", "logprobs": False}
    ).supports_logprobs


# --- the answer store ---------------------------------------------------------------------------------------------
def test_second_identical_request_is_served_from_the_store(server: ChatServer, tmp_path: Path) -> None:
    server.answers.append(Answer(good(8), alternatives={"8": [("8", -0.2), ("9", -1.7)]}))
    first = run_judge(server, tmp_path, **PRICES_OPTION).complete(request(top_logprobs=2))
    again = run_judge(server, tmp_path, **PRICES_OPTION).complete(request(top_logprobs=2))
    assert len(server.requests) == 1
    assert again.cached and again.requests == 0 and again.cost == 0.0
    assert (again.prompt_tokens, again.completion_tokens) == (0, 0)
    assert again.choices == first.choices and again.model == first.model
    (entry,) = tmp_path.rglob("*.json")
    key = request(top_logprobs=2).key(MODEL, server.base_url + "/")
    assert entry == tmp_path / key[:2] / f"{key}.json"


@pytest.mark.slow
def test_store_is_read_by_a_fresh_process(server: ChatServer, tmp_path: Path) -> None:
    server.answers.append(good(9))
    run_judge(server, tmp_path).complete(request())
    script = (
        "import json, sys\n"
        "from evaltasks.judges import JudgeRuntime, JudgeRequest, get_judge\n"
        "base_url, key, store, schema = sys.argv[1:5]\n"
        "judge = get_judge('gpt-4o-mini', {'base_url': base_url, 'api_key': key},"
        " JudgeRuntime(store_dir=store))\n"
        "reply = judge.complete(JudgeRequest(messages=({'role': 'system', 'content': 'Grade the output. Answer JSON.'},"
        " {'role': 'user', 'content': 'Output: Paris.'}), schema=json.loads(schema)))\n"
        "print(json.dumps({'parsed': reply.parsed, 'cached': reply.cached, 'requests': reply.requests}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, server.base_url, KEY, str(tmp_path), json.dumps(SCHEMA)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {
        "parsed": {"score": 9, "reason": "fine"},
        "cached": True,
        "requests": 0,
    }
    assert len(server.requests) == 1


def test_refresh_sends_again_and_rewrites(server: ChatServer, tmp_path: Path) -> None:
    server.answers.extend([good(1), good(2)])
    run_judge(server, tmp_path).complete(request())
    fresh = run_judge(server, tmp_path, refresh=True).complete(request())
    assert not fresh.cached and fresh.parsed["score"] == 2 and len(server.requests) == 2
    assert run_judge(server, tmp_path).complete(request()).parsed["score"] == 2  # the refreshed answer was stored


@pytest.mark.parametrize("damage", ["truncate", "garbage", "invalid_answer", "other_key"])
def test_a_corrupt_entry_is_a_miss_and_replaced(server: ChatServer, tmp_path: Path, damage: str) -> None:
    server.answers.extend([good(1), good(2)])
    run_judge(server, tmp_path).complete(request())
    (entry,) = tmp_path.rglob("*.json")
    text = entry.read_text(encoding="utf-8")
    if damage == "truncate":
        entry.write_text(text[: len(text) // 2], encoding="utf-8")
    elif damage == "garbage":
        entry.write_bytes(b"\x00\xff not json")
    elif damage == "invalid_answer":
        entry.write_text(text.replace('\\"score\\": 1,', '\\"score\\": 99,'), encoding="utf-8")
        assert text != entry.read_text(encoding="utf-8")
    else:
        entry.write_text(text.replace(entry.stem, "0" * 64), encoding="utf-8")
    reply = run_judge(server, tmp_path).complete(request())
    assert not reply.cached and reply.parsed["score"] == 2 and len(server.requests) == 2
    assert run_judge(server, tmp_path).complete(request()).cached  # replaced by the new answer


def _edit_consistently(entry: Path, score: int) -> None:
    """Rewrite a stored answer's score everywhere it appears (text and parsed value), as someone changing a
    result by hand would: the entry still reads, parses and validates."""
    data = json.loads(entry.read_text(encoding="utf-8"))
    choice = data["reply"]["choices"][0]
    choice["parsed"]["score"] = score
    choice["text"] = json.dumps(choice["parsed"])
    entry.write_text(json.dumps(data), encoding="utf-8")


def test_a_consistently_edited_entry_is_a_miss_with_a_warning(
    server: ChatServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/judges.md#judge-client, Store: each entry carries an HMAC of its content under the store's own key."""
    server.answers.extend([good(1), good(2)])
    run_judge(server, tmp_path).complete(request())
    (entry,) = tmp_path.rglob("*.json")
    _edit_consistently(entry, 9)
    with caplog.at_level(logging.WARNING, logger="evaltasks.judges"):
        reply = run_judge(server, tmp_path).complete(request())
    assert not reply.cached and reply.parsed["score"] == 2 and len(server.requests) == 2
    assert [r.getMessage() for r in caplog.records] == [
        f"the stored judge answer {entry} does not match its digest (edited after it was written?): it is not "
        "used, and the request is sent again"
    ]
    assert run_judge(server, tmp_path).complete(request()).parsed["score"] == 2  # replaced, and valid again


def test_the_store_key_is_private_and_an_exposed_one_is_not_trusted(
    server: ChatServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.answers.extend([good(1), good(2)])
    run_judge(server, tmp_path).complete(request())
    key_file = tmp_path / "store.key"
    info = key_file.stat()
    assert (oct(info.st_mode & 0o777), info.st_uid, info.st_size) == ("0o600", os.getuid(), 32)
    key_file.chmod(0o644)  # others could read it, so could forge entries: none is trusted
    with caplog.at_level(logging.WARNING, logger="evaltasks.judges"):
        reply = run_judge(server, tmp_path).complete(request())
    assert not reply.cached and len(server.requests) == 2
    assert "is not a 32-byte file of this user with mode 0600" in caplog.text


def test_an_entry_without_a_digest_is_asked_again_once(server: ChatServer, tmp_path: Path) -> None:
    """The first store format had no digest: such an entry is a miss (an edit could have removed the digest),
    sent again, and replaced by an entry with one."""
    server.answers.extend([good(1), good(2)])
    run_judge(server, tmp_path).complete(request())
    (entry,) = tmp_path.rglob("*.json")
    data = json.loads(entry.read_text(encoding="utf-8"))
    del data["digest"]
    entry.write_text(json.dumps({**data, "format": 1}), encoding="utf-8")
    assert run_judge(server, tmp_path).complete(request()).parsed["score"] == 2
    again = run_judge(server, tmp_path).complete(request())
    assert again.cached and again.parsed["score"] == 2 and len(server.requests) == 2


def test_samples_models_and_parameters_are_distinct_entries(server: ChatServer, tmp_path: Path) -> None:
    server.answers.extend([good(i) for i in range(5)])
    judge = run_judge(server, tmp_path)
    scores = [
        judge.complete(r).parsed["score"]
        for r in (request(sample=0), request(sample=1), request(sample=0, temperature=1.0), request(max_tokens=10))
    ]
    other_model = RunJudge(judge_for(server, model="gpt-4.1-nano"), JudgeRuntime(store_dir=tmp_path))
    scores.append(other_model.complete(request()).parsed["score"])
    assert scores == [0, 1, 2, 3, 4] and len(server.requests) == 5
    assert len(list(tmp_path.rglob("*.json"))) == 5
    assert judge.complete(request(sample=1)).cached


def test_store_survives_concurrent_writers_and_readers(tmp_path: Path) -> None:
    from evaltasks.judges.base import Choice, JudgeReply

    store = AnswerStore(tmp_path)
    requests_ = [request(f"case {i}") for i in range(50)]

    def work(worker: int) -> int:
        hits = 0
        for i, req in enumerate(requests_):
            key = req.key(MODEL)
            store.put(
                key,
                JudgeReply((Choice(good(i % 10), {"score": i % 10, "reason": "fine"}),), MODEL),
                model=MODEL,
                endpoint="",
            )
            found = store.get(key, req)
            assert found is not None and found.parsed["score"] == i % 10
            hits += 1
        return hits

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(work, range(8))) == 400
    assert len(list(tmp_path.rglob("*.json"))) == 50 and not list(tmp_path.rglob("*.tmp"))


def test_function_judge_goes_through_the_store_but_not_the_budget(tmp_path: Path) -> None:
    calls: list[list[dict[str, str]]] = []

    def my_judge(messages: list[dict[str, str]]) -> str:
        calls.append(messages)
        return good(5)

    budget = Budget(0.0)
    runtime = JudgeRuntime(store_dir=tmp_path, budget=budget, judge=FunctionJudge(my_judge))
    first = get_judge(MODEL, {}, runtime).complete(request())
    second = get_judge(MODEL, {}, runtime).complete(request())
    assert first.parsed["score"] == 5 and not first.cached and second.cached and len(calls) == 1
    assert budget.spent == 0.0
    assert get_judge(MODEL, {}, JudgeRuntime(judge=runtime.judge)) is runtime.judge


def test_get_judge_shares_one_client_per_model_and_options(server: ChatServer) -> None:
    options = {"base_url": server.base_url, "api_key": KEY, "prices": {"x": {"input": 1, "output": 2}}}
    first = get_judge(MODEL, options)
    assert get_judge(MODEL, dict(options)) is first
    assert get_judge(MODEL, {**options, "timeout": 5}) is not first
    assert get_judge("gpt-4o", options) is not first


# --- costs --------------------------------------------------------------------------------------------------------
def test_costs_are_billed_tokens_times_prices(server: ChatServer) -> None:
    server.answers.extend([Answer(good(), prompt_tokens=1234, completion_tokens=56), good(), good()])
    reply = judge_for(server).complete(request())
    assert (reply.prompt_tokens, reply.completion_tokens) == (1234, 56)
    assert reply.cost == pytest.approx((1234 * PRICES[MODEL]["input"] + 56 * PRICES[MODEL]["output"]) / 1e6, rel=1e-12)
    custom = judge_for(server, price_per_million_input_tokens=2.0, price_per_million_output_tokens=5.0)
    reply = custom.complete(request("another case"))
    prompt, completion = server.requests[-1].prompt_tokens, server.requests[-1].completion_tokens
    assert prompt == usage_tokens("Grade the output. Answer JSON.") + usage_tokens("another case")
    assert reply.cost == pytest.approx((prompt * 2.0 + completion * 5.0) / 1e6, rel=1e-12)


def test_unknown_model_costs_zero_and_warns_once(server: ChatServer, caplog: pytest.LogCaptureFixture) -> None:
    model = f"my-local-model-{uuid.uuid4().hex[:8]}"
    server.answers.extend([good(), good()])
    with caplog.at_level(logging.WARNING, logger="evaltasks.judges"):
        judge = judge_for(server, model=model)
        judge_for(server, model=model, timeout=5)
    warnings = [r.getMessage() for r in caplog.records if model in r.getMessage()]
    assert len(warnings) == 1 and "undercount" in warnings[0] and "--max-cost" in warnings[0]
    assert judge.complete(request()).cost == 0.0


# --- the budget ---------------------------------------------------------------------------------------------------
def test_budget_is_never_overrun_by_concurrent_senders() -> None:
    with ChatServer(api_key=KEY, latency_s=0.05) as server:
        server.responder = lambda chat: good(3, "x" * 40)
        judge = judge_for(server, max_concurrency=16, **PRICES_OPTION)
        req = [request(f"case {i}: " + "words " * 30, max_tokens=60) for i in range(16)]
        worst = max(judge.estimate_cost(r) for r in req)
        per_request = [
            (usage_tokens("Grade the output. Answer JSON.") + usage_tokens(r.messages[1]["content"])) * 3.0
            + usage_tokens(good(3, "x" * 40)) * 7.0
            for r in req
        ]  # what the server bills, USD × 1e6
        budget = Budget(sum(per_request) * 0.6 / 1e6)  # sending all 16 would overrun it
        # a request is refused only once spent + its worst case passes the limit, so at least `least` are sent
        least = math.ceil((budget.limit_usd - worst) / (max(per_request) / 1e6))
        assert least >= 3

        def send(r: JudgeRequest) -> str:
            try:
                judge.send(r, budget)
                return "sent"
            except BudgetExhausted as exc:
                assert "budget of $" in str(exc)
                return "refused"

        with ThreadPoolExecutor(16) as pool:
            outcomes = list(pool.map(send, req))
        prompt, completion = server.billed
        billed = (prompt * 3.0 + completion * 7.0) / 1e6
        assert billed <= budget.limit_usd
        assert budget.spent == pytest.approx(billed, rel=1e-9) and budget.reserved == 0.0
        assert outcomes.count("sent") == len(server.requests) >= least and outcomes.count("refused") >= 1
        for r in req:  # the reservation is a true upper bound of what the server billed
            p, _c = worst_case_tokens(r)
            assert p >= usage_tokens("Grade the output. Answer JSON.") + usage_tokens(r.messages[1]["content"])


def test_stored_answers_need_no_budget(server: ChatServer, tmp_path: Path) -> None:
    server.answers.append(good())
    run_judge(server, tmp_path, **PRICES_OPTION).complete(request())
    empty = Budget(0.0)
    assert run_judge(server, tmp_path, budget=empty, **PRICES_OPTION).complete(request()).cached
    with pytest.raises(BudgetExhausted, match=r"budget of \$0\.0000 is spent"):
        run_judge(server, tmp_path, budget=empty, **PRICES_OPTION).complete(request("new case"))
    assert len(server.requests) == 1


def test_budget_counts_spend_added_before(server: ChatServer) -> None:
    server.answers.append(good())
    budget = Budget(1.0)
    budget.add_spent(0.99999)
    with pytest.raises(
        BudgetExhausted,
        match=r"the next request's worst case \$0\.00\d+ does not fit in the "
        r"\$0\.0000\d+ left of the run's --max-cost budget of \$1\.0000",
    ):
        judge_for(server, **PRICES_OPTION).send(request(max_tokens=1000), budget)
    assert not server.requests
    with pytest.raises(ValueError):
        budget.add_spent(-1)
    with pytest.raises(ValueError):
        Budget(float("nan"))


@pytest.mark.slow
def test_budget_ledger_is_shared_across_processes(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.json"
    here = Budget(1.0, ledger)
    here.add_spent(0.25)
    held = here.reserve(0.5)
    script = (
        "import sys\n"
        "from evaltasks.judges.budget import Budget\n"
        "from evaltasks.judges.base import BudgetExhausted\n"
        "b = Budget(1.0, sys.argv[1])\n"
        "try:\n    b.reserve(0.8)\n    print('reserved')\nexcept BudgetExhausted:\n    print('refused')\n"
        "r = b.reserve(0.2)\nb.settle(r, 0.1)\nprint(b.spent)\n"
        "b.reserve(0.05)\n"  # left behind by a process that exits: dropped by the next reader
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(ledger)], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["refused", "0.35"]
    assert here.reserved == pytest.approx(0.5)  # the dead child's 0.05 is gone
    here.settle(held, 0.4)
    assert here.spent == pytest.approx(0.75) and here.reserved == 0.0


# --- concurrency and rate limits ----------------------------------------------------------------------------------
def test_max_concurrency_bounds_requests_in_flight() -> None:
    with ChatServer(api_key=KEY, latency_s=0.2) as server:
        server.responder = lambda chat: good()
        judge = judge_for(server, max_concurrency=3)
        with ThreadPoolExecutor(20) as pool:
            replies = list(pool.map(lambda i: judge.complete(request(f"case {i}")), range(20)))
        assert len(replies) == 20 and len(server.answered) == 20
        assert server.peak_in_flight <= 3


def test_requests_per_minute_spaces_requests() -> None:
    with ChatServer(api_key=KEY) as server:
        server.responder = lambda chat: good()
        judge = judge_for(server, requests_per_minute=120)  # 2 a second; the bucket holds one second's worth
        began = time.monotonic()
        for i in range(6):
            judge.complete(request(f"case {i}"))
        # 2 may go at once, then one per 0.5 s: the 6th cannot arrive before 2 s after the first was allowed
        # (a lower bound only: a loaded machine can only make it later)
        assert len(server.requests) == 6
        assert server.requests[-1].arrived - began >= 2.0 - 0.01


def test_budget_pickles_for_worker_processes(tmp_path: Path) -> None:
    import pickle

    shared = Budget(2.0, tmp_path / "ledger.json")
    shared.add_spent(0.5)
    copy = pickle.loads(pickle.dumps(shared))
    copy.settle(copy.reserve(1.0), 1.0)
    assert shared.spent == pytest.approx(1.5)  # one ledger: the copy's spend is the original's
    local = Budget(1.0)
    local.add_spent(0.25)
    assert pickle.loads(pickle.dumps(local)).spent == pytest.approx(0.25)


def test_strict_schema_reads_nested_schemas_not_property_names() -> None:
    named = {
        "type": "object",
        "properties": {"properties": {"type": "string"}, "type": {"type": "string"}},
        "required": ["properties", "type"],
        "additionalProperties": False,
    }
    assert strict_schema(named)
    assert not strict_schema(
        {
            **named,
            "properties": {
                **named["properties"],
                "extra": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}},
                    "required": [],
                    "additionalProperties": False,
                },
            },
        }
    )
    assert strict_schema(
        {
            "type": "object",
            "properties": {"v": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
            "required": ["v"],
            "additionalProperties": False,
        }
    )


def test_a_changed_environment_gets_a_new_shared_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    first = get_judge(MODEL, {})
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:10/v1")
    second = get_judge(MODEL, {})
    assert first is not second and second.endpoint == "http://127.0.0.1:10/v1/"


def test_a_reservation_blocked_only_by_requests_in_flight_waits_for_them() -> None:
    budget = Budget(1.0)
    first = budget.reserve(0.8)
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append(budget.reserve(0.5)))
    waiter.start()
    waiter.join(0.3)
    assert not got  # 0.8 reserved + 0.5 > 1.0: it waits (it would be a bug had it returned)
    budget.settle(first, 0.1)  # the request in flight cost far less than its worst case
    waiter.join(60)
    assert len(got) == 1 and budget.reserved == pytest.approx(0.5) and budget.spent == pytest.approx(0.1)
    with pytest.raises(
        BudgetExhausted,
        match=r"worst case \$0\.9500 does not fit in the \$0\.9000 left of the "
        r"run's --max-cost budget of \$1\.0000 \(\$0\.1000 spent so far\)",
    ):
        budget.reserve(0.95)  # cannot fit even if the one in flight cost nothing: refused at once


def test_estimate_is_the_worst_case_and_zero_once_stored(server: ChatServer, tmp_path: Path) -> None:
    server.answers.extend([good(), good()])
    judge = run_judge(server, tmp_path, **PRICES_OPTION)
    req = request(max_tokens=100, n=2)
    prompt, completion = worst_case_tokens(req, schema_sent=False)  # structured_outputs auto: json_object, no schema
    assert completion == 200 and prompt >= usage_tokens("Grade the output. Answer JSON.") + usage_tokens(
        "Output: Paris."
    )
    assert judge.estimate_cost(req) == pytest.approx((prompt * 3.0 + completion * 7.0) / 1e6, rel=1e-12)
    with_schema, _ = worst_case_tokens(req)  # json_schema puts the schema in the prompt: priced only then
    assert with_schema > prompt
    schema_judge = run_judge(server, tmp_path / "other", structured_outputs="json_schema", **PRICES_OPTION)
    assert schema_judge.estimate_cost(req) == pytest.approx((with_schema * 3.0 + completion * 7.0) / 1e6, rel=1e-12)
    judge.complete(req)
    assert judge.estimate_cost(req) == 0.0
    assert run_judge(server, tmp_path, refresh=True, **PRICES_OPTION).estimate_cost(req) > 0
    hook = RunJudge(FunctionJudge(lambda messages: good()), JudgeRuntime(store_dir=tmp_path))
    assert hook.estimate_cost(req) == 0.0


@pytest.mark.parametrize(
    "base_url",
    [
        "https://api.openai.com/v1",
        "http://127.0.0.1:8080/v1/",
        "http://LOCALHOST:80/v1",
        "https://example.com",
        "https://example.com/a b/v1",
        "http://[::1]:9/v1?x=1",
        "https://h.example.com:443/openai/deployments/x",
        "http://h/v1//",
    ],
)
def test_the_endpoint_is_the_clients_base_url_without_building_the_client(base_url: str) -> None:
    """The judge keys stored answers by the endpoint the openai client would send to; it is computed without
    importing openai (the client is built on the first request), and equals the real client's ``base_url``."""
    import openai

    from evaltasks.judges.openai import OpenAIJudge, client_base_url

    assert client_base_url(base_url) == str(openai.OpenAI(base_url=base_url, api_key="k").base_url)
    judge = OpenAIJudge("gpt-4o-mini", {"base_url": base_url, "api_key": "k", "organization": "org"})
    assert judge._built is None and judge.endpoint == client_base_url(base_url)
    assert str(judge._client.base_url) == judge.endpoint and judge._client.organization == "org"
