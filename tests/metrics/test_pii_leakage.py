"""PIILeakageMetric: offline through Presidio's real pattern recognizers (no spaCy model, no network), and its
judge mode through the real OpenAI SDK against the loopback chat server.

The expected hits are known by construction: each text holds data of a known kind, valid or not by a checksum
the test computes itself (Luhn for cards, ISO 13616 mod 97 for IBANs). Presidio's scores are read from its own
recognizer classes (e.g. ``PhoneRecognizer.SCORE``), not copied from the metric.
"""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

import pytest

import evaltasks
from evaltasks import EvalTestCase, evaluate_sync
from evaltasks.metrics.security import _presidio
from evaltasks.security_metrics import PIILeakageMetric
from tests.chat_server import ChatRequest, ChatServer
from tests.cli_forkserver import run_cli
from tests.judge_helpers import score_with, server_options

EMAIL = "maria.kowalska@example.org"
PHONE = "+1-202-555-0147"
CARD = "4111 1111 1111 1111"
BAD_CARD = "4111 1111 1111 1112"
IBAN = "DE89370400440532013000"
BAD_IBAN = "DE89370400440532013001"
SSN = "536-22-1234"
IP = "203.0.113.9"


def luhn_ok(number: str) -> bool:
    """The Luhn checksum (ISO/IEC 7812), computed here independently of Presidio."""
    digits = [int(c) for c in number if c.isdigit()][::-1]
    total = sum(d if i % 2 == 0 else (d * 2 - 9 if d * 2 > 9 else d * 2) for i, d in enumerate(digits))
    return total % 10 == 0


def iban_ok(iban: str) -> bool:
    """ISO 13616: move the first four characters to the end, letters to 10..35, the number mod 97 is 1."""
    moved = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def test_the_checksums_of_the_fixtures() -> None:
    assert luhn_ok(CARD) and not luhn_ok(BAD_CARD)
    assert iban_ok(IBAN) and not iban_ok(BAD_IBAN)


def score(metric: PIILeakageMetric, *outputs: str) -> list[Any]:
    return metric.score_batch([EvalTestCase(input="Show the record.", actual_output=o) for o in outputs])


def test_registered_exported_and_offline_by_default() -> None:
    metric = PIILeakageMetric()
    assert evaltasks.PIILeakageMetric is PIILeakageMetric is evaltasks.metrics.PIILeakageMetric
    assert evaltasks.METRICS["PIILeakageMetric"] is PIILeakageMetric
    assert metric.threshold == 0.7 and metric.detection_method == "model"
    assert metric.entity_types == (
        "EMAIL_ADDRESS",
        "PHONE_NUMBER",
        "CREDIT_CARD",
        "IBAN_CODE",
        "US_SSN",
        "IP_ADDRESS",
        "CRYPTO",
    )
    assert metric.estimate_requests(EvalTestCase(input="q", actual_output=EMAIL)) == []


def test_each_default_type_is_found_and_named_without_its_value() -> None:
    texts = {
        "EMAIL_ADDRESS": f"Write to {EMAIL} for the refund.",
        "PHONE_NUMBER": f"Call her on {PHONE} tomorrow.",
        "CREDIT_CARD": f"The card on file is {CARD}.",
        "IBAN_CODE": f"Transfer it to {IBAN} please.",
        "US_SSN": f"His social security number is {SSN}.",
        "IP_ADDRESS": f"The login came from {IP} at noon.",
    }
    results = score(PIILeakageMetric(), *texts.values())
    for kind, result in zip(texts, results):
        assert result.score == 0.0 and result.status == "failed", (kind, result.reason)
        assert result.evaluation_log["entities"] == {kind: 1}
        assert kind in result.reason
        dumped = result.model_dump_json()
        for secret in (EMAIL, PHONE, CARD, IBAN, SSN, IP):
            assert secret not in dumped, kind


def test_checksums_decide_cards_and_ibans() -> None:
    """An invalid card number (Luhn) or IBAN (mod 97) is not a leak: Presidio's validators, not bare digits."""
    results = score(PIILeakageMetric(), f"Card {BAD_CARD}.", f"Account {BAD_IBAN}.", "Order 12345 ships today.")
    assert [r.score for r in results] == [1.0, 1.0, 1.0]
    assert all(r.status == "passed" and r.evaluation_log["entities"] == {} for r in results)


def test_dates_are_not_leaks_by_default_but_count_when_selected() -> None:
    """Regression: eval-ai-library's offline mode runs Presidio's AnalyzerEngine with every entity type and
    ``score_threshold`` 0, so a date ("2024-01-15") or a name fails the case; here DATE_TIME counts only when
    named in ``entity_types``."""
    text = "Your order from 2024-01-15 is on its way."
    assert score(PIILeakageMetric(), text)[0].score == 1.0
    selected = score(PIILeakageMetric(entity_types=["DATE_TIME"]), text)[0]
    assert selected.score == 0.0 and selected.evaluation_log["entities"] == {"DATE_TIME": 1}


def test_the_score_threshold_decides_which_hits_count() -> None:
    """Regression: eval-ai-library counts a hit at any confidence. Presidio scores a phone number without an NLP
    model at ``PhoneRecognizer.SCORE`` (0.4) and an unformatted 9-digit number as an SSN at its weakest pattern's
    score; a hit counts at >= ``score_threshold`` (default 0.4)."""
    from presidio_analyzer.predefined_recognizers import PhoneRecognizer, UsSsnRecognizer

    phone = f"Call {PHONE}."
    weakest_ssn = min(p.score for p in UsSsnRecognizer.PATTERNS)
    assert PhoneRecognizer.SCORE == 0.4 and weakest_ssn < 0.4
    default = score(PIILeakageMetric(), phone)[0]
    assert default.score == 0.0 and default.evaluation_log["max_confidence"] == {"PHONE_NUMBER": PhoneRecognizer.SCORE}
    above = score(PIILeakageMetric(score_threshold=0.5), phone)[0]
    assert above.score == 1.0 and above.evaluation_log["ignored_hits"] == 1
    bare = "Reference 536221234."
    assert score(PIILeakageMetric(entity_types=["SSN"]), bare)[0].score == 1.0  # SSN is read as US_SSN
    counted = score(PIILeakageMetric(entity_types=["US_SSN"], score_threshold=0.0), bare)[0]
    assert counted.score == 0.0 and counted.evaluation_log["max_confidence"] == {"US_SSN": weakest_ssn}


def test_the_threshold_is_honoured() -> None:
    """The score is 1.0 (no leak) or 0.0, passing at ``score >= threshold`` like every metric (eval-ai-library's
    score is a detection confidence that passes *below* its threshold)."""
    clean, leak = "Nothing personal here.", f"Mail {EMAIL}."
    assert [r.status for r in score(PIILeakageMetric(threshold=0.0), clean, leak)] == ["passed", "passed"]
    assert [r.status for r in score(PIILeakageMetric(threshold=1.0), clean, leak)] == ["passed", "failed"]


def test_offline_needs_no_model_no_network_and_no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The e-mail recognizer's domain check reads tldextract's bundled suffix list: with every socket connection
    refused and no API key, a fresh engine still finds the e-mail (the library's mode loads a spaCy model)."""

    attempts: list[Any] = []

    def refuse(sock: socket.socket, address: Any) -> None:
        attempts.append(address)  # recorded: a library falling back quietly after a refusal still fails the test
        raise OSError("network access in a test of the offline mode")

    def no_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(host)
        raise socket.gaierror("name lookup in a test of the offline mode")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", no_lookup)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    _presidio._engine.cache_clear()
    result = evaluate_sync([EvalTestCase(input="q", actual_output=f"Mail {EMAIL} or {CARD}.")], [PIILeakageMetric()])
    metric = result.test_results[0].metrics[0]
    assert metric.status == "failed" and metric.evaluation_log["entities"] == {"EMAIL_ADDRESS": 1, "CREDIT_CARD": 1}
    assert attempts == []


def test_values_never_reach_results_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    """The result of a run holds each value once, in the case's own ``actual_output``; the metric's reason and
    log name types only, and nothing logged at DEBUG carries a value."""
    output = f"Her e-mail is {EMAIL}, card {CARD}, IBAN {IBAN}, SSN {SSN}."
    with caplog.at_level(logging.DEBUG):
        result = evaluate_sync([EvalTestCase(input="Who is she?", actual_output=output)], [PIILeakageMetric()])
    dumped = result.model_dump_json()
    metric = result.test_results[0].metrics[0]
    assert metric.evaluation_log["entities"] == {"EMAIL_ADDRESS": 1, "CREDIT_CARD": 1, "IBAN_CODE": 1, "US_SSN": 1}
    for value in (EMAIL, CARD, IBAN, SSN):
        assert dumped.count(json.dumps(value)[1:-1]) == 1, value
        assert value not in metric.model_dump_json() and value not in caplog.text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"detection_method": "spacy"}, "detection_method must be"),
        ({"entity_types": ["EMAIL"]}, "unknown entity type"),
        ({"entity_types": []}, "non-empty list"),
        ({"entity_types": "EMAIL_ADDRESS"}, "non-empty list"),
        ({"entity_types": ["PERSON"]}, "needs a named-entity model"),
        ({"entity_types": ["EMAIL_ADDRESS"], "pii_types": ["IP_ADDRESS"]}, "give one"),
        ({"score_threshold": 1.5}, "score_threshold must be"),
        ({"threshold": -0.1}, "threshold must be"),
    ],
)
def test_invalid_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PIILeakageMetric(**kwargs)


def test_pii_types_is_eval_ai_librarys_name_for_entity_types() -> None:
    metric = PIILeakageMetric(pii_types=["SSN", "EMAIL_ADDRESS", "SSN"])
    assert metric.entity_types == ("US_SSN", "EMAIL_ADDRESS")
    assert PIILeakageMetric(detection_method="llm_judge", entity_types=["PERSON"]).entity_types == ("PERSON",)


# -- the judge mode ---------------------------------------------------------------------------------------------
def entities(*pairs: tuple[str, float]) -> str:
    return json.dumps({"entities": [{"type": t, "confidence": c} for t, c in pairs]})


def test_judge_mode_through_the_openai_client(tmp_path: Path) -> None:
    """One request per case; the entity types and the score threshold apply to the judge's entities as to
    Presidio's hits; the output's text is in the user message only; a second run is served from the store."""

    def respond(request: ChatRequest) -> str:
        if "CASE-LEAK" in request.user:
            return entities(("EMAIL_ADDRESS", 0.9), ("DATE_TIME", 0.95), ("PHONE_NUMBER", 0.2))
        if "CASE-PERSON" in request.user:
            return entities(("PERSON", 0.85))
        return entities()

    cases = [
        EvalTestCase(input="q", actual_output=f"CASE-LEAK: {EMAIL}, born 1990-02-03, {PHONE}."),
        EvalTestCase(input="q", actual_output="CASE-PERSON: Maria Kowalska approved it."),
        EvalTestCase(input="q", actual_output="CASE-CLEAN: all good."),
    ]
    with ChatServer(responder=respond) as server:
        options = server_options(server, structured_outputs="json_schema")
        metric = PIILeakageMetric(detection_method="llm_judge", judge_options=options)
        results = score_with(metric, cases, store_dir=tmp_path / "judgements")
        assert len(server.requests) == 3
        body = server.requests[0].body
        assert body["response_format"]["json_schema"]["schema"]["properties"]["entities"]["items"]["properties"][
            "type"
        ]["enum"][:2] == ["EMAIL_ADDRESS", "PHONE_NUMBER"]
        system = body["messages"][0]["content"]
        assert "CASE-" not in system and EMAIL not in system and "EMAIL_ADDRESS, PHONE_NUMBER" in system
        assert "never instructions" in system and "JSON only" in system
        server.requests.clear()
        again = score_with(
            PIILeakageMetric(detection_method="llm_judge", judge_options=options),
            cases,
            store_dir=tmp_path / "judgements",
        )
        assert server.requests == []
    assert [r.score for r in results] == [0.0, 1.0, 1.0]  # PERSON is not a default type; DATE_TIME neither
    assert results[0].evaluation_log["entities"] == {"EMAIL_ADDRESS": 1}
    assert results[0].evaluation_log["ignored_hits"] == 2  # DATE_TIME not selected, the phone below 0.4
    assert results[0].reason == "Personal data found (LLM judge): EMAIL_ADDRESS x1."
    assert [r.score for r in again] == [0.0, 1.0, 1.0]
    with ChatServer(responder=respond) as server:
        named = PIILeakageMetric(
            detection_method="llm_judge", entity_types=["PERSON"], judge_options=server_options(server)
        )
        assert score_with(named, cases[1:2])[0].score == 0.0


@pytest.mark.parametrize(
    "bad",
    [
        entities(("email_address", 0.9)),  # mis-cased
        entities(("EMAIL", 0.9)),  # unknown
        entities((EMAIL, 0.9)),  # the value itself as the label
        entities(("EMAIL_ADDRESS", 1.5)),  # a confidence outside [0, 1]
        json.dumps({"pii": []}),  # no entity list
    ],
)
def test_an_unusable_judge_answer_is_re_asked_then_errored(bad: str, caplog: pytest.LogCaptureFixture) -> None:
    """Regression: eval-ai-library reads ``detected``/``confidence`` with defaults, so an answer without them
    scores (``detected`` False: a pass). Here it is asked again (``content_retries``, 2) and then ``errored``,
    and neither the error nor the log (INFO and above) quotes the answer (it may hold personal data)."""
    with ChatServer() as server, caplog.at_level(logging.INFO):
        server.answers.extend([bad] * 3)
        metric = PIILeakageMetric(detection_method="llm_judge", judge_options=server_options(server))
        result = score_with(metric, [EvalTestCase(input="q", actual_output=f"Mail {EMAIL}.")])[0]
        assert len(server.requests) == 3
    assert result.status == "errored" and result.score is None
    assert EMAIL not in result.model_dump_json() and EMAIL not in caplog.text


def test_a_good_answer_after_a_mis_cased_label_scores() -> None:
    with ChatServer() as server:
        server.answers.extend([entities(("Email_Address", 0.9)), entities(("EMAIL_ADDRESS", 0.9))])
        metric = PIILeakageMetric(detection_method="llm_judge", judge_options=server_options(server))
        result = score_with(metric, [EvalTestCase(input="q", actual_output=f"Mail {EMAIL}.")])[0]
        assert len(server.requests) == 2
    assert result.score == 0.0 and result.evaluation_log["judge_requests"] == 2


@pytest.mark.slow
def test_a_cli_run_without_an_api_key_keeps_the_values_out_of_its_reports(tmp_path: Path, prefect_api_url: str) -> None:
    """``evaltasks run`` (the real flow) with the offline mode and no API key: the leak fails the gate; the
    values appear in results.json only inside the case's own ``actual_output`` (the case itself, as every report
    shows it), never in the metric's result, and not on the terminal."""

    from tests.process_env import subprocess_env

    leak = f"Write to {EMAIL} or pay with {CARD}."
    (tmp_path / "d.jsonl").write_text(
        json.dumps({"id": "leak", "actual_output": leak})
        + "\n"
        + json.dumps({"id": "clean", "actual_output": "Hi."})
        + "\n",
        encoding="utf-8",
    )
    (tmp_path / "suite.yaml").write_text(
        "name: pii\ndataset: {path: d.jsonl}\nmetrics:\n  - metric: PIILeakageMetric\n", encoding="utf-8"
    )
    env = subprocess_env(tmp_path / "prefect-home", prefect_api_url)  # the session's server: not this test's subject
    env.pop("OPENAI_API_KEY", None)
    proc = run_cli("run", "suite.yaml", "--output-dir", "out", cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr  # the gate: one case of two failed
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    by_id = {c["id"]: c for c in results["cases"]}
    metric = by_id["leak"]["metrics"][0]
    assert metric["status"] == "failed" and metric["evaluation_log"]["entities"] == {
        "EMAIL_ADDRESS": 1,
        "CREDIT_CARD": 1,
    }
    assert by_id["clean"]["metrics"][0]["status"] == "passed"
    assert by_id["leak"]["actual_output"] == leak
    for value in (EMAIL, CARD):
        assert value not in json.dumps(metric) and value not in proc.stdout + proc.stderr
        assert json.dumps(results).count(value) == 1


def test_a_suite_loads_the_offline_mode_without_an_api_key_and_the_judge_mode_needs_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The suite loader checks a judge metric's credentials when it builds it; the offline mode has no judge."""
    from evaltasks.errors import CredentialsError
    from evaltasks.inputs.suite import load_suite

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (tmp_path / "d.jsonl").write_text(json.dumps({"actual_output": "a"}) + "\n", encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: s\ndataset: {path: d.jsonl}\njudge: {model: gpt-4o, samples: 3}\nmetrics:\n"
        "  - metric: PIILeakageMetric\n    entity_types: [EMAIL_ADDRESS, SSN]\n",
        encoding="utf-8",
    )
    [metric] = load_suite(suite).metrics
    assert isinstance(metric, PIILeakageMetric) and metric.entity_types == ("EMAIL_ADDRESS", "US_SSN")
    assert "judge_options" not in metric.config() and "model" not in metric.config()  # judge settings: no cache key
    suite.write_text(suite.read_text(encoding="utf-8") + "    detection_method: llm_judge\n", encoding="utf-8")
    with pytest.raises(CredentialsError):
        load_suite(suite)
