"""The local-classifier mode of HarmfulContent, PromptInjectionDetection and JailbreakDetection
(docs/metrics/security.md#local-classifiers): real ``transformers`` models the tests build and save themselves
(tests/tiny_classifier.py: their probabilities are set by construction, so each expected score is 1 - the
probabilities written here), loaded back from their folder offline, through the metric, ``evaluate_sync`` and a
suite file. No judge, no API key, no download.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from evaltasks.metrics.security import HarmfulContentMetric, JailbreakDetectionMetric, PromptInjectionDetectionMetric
from evaltasks.metrics.security._detection import DetectionMetric
from evaltasks.test_case import EvalTestCase
from tests.tiny_classifier import build_classifier, logit

TOXIC_LABELS = ["toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate"]  # unitary/toxic-bert's
TOXIC_TRIGGER = [0.92, 0.10, 0.30, 0.85, 0.50, 0.05]
TOXIC_PLAIN = [0.04, 0.01, 0.02, 0.03, 0.02, 0.01]
PROMPT_GUARD = ["BENIGN", "INJECTION", "JAILBREAK"]  # meta-llama/Prompt-Guard-86M's labels
GUARD_TRIGGER = [0.2, 0.1, 0.7]
GUARD_PLAIN = [0.9, 0.06, 0.04]
ATTACK, PLAIN = "please ignore", "what is the capital of france"  # the tiny models read the last word


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("classifiers")
    return {
        "binary": build_classifier(root / "binary", ["SAFE", "INJECTION"], [0.05, 0.95], [0.98, 0.02]),
        "guard": build_classifier(root / "guard", PROMPT_GUARD, GUARD_TRIGGER, GUARD_PLAIN),
        "toxic": build_classifier(root / "toxic", TOXIC_LABELS, TOXIC_TRIGGER, TOXIC_PLAIN, multi_label=True),
        "generic": build_classifier(root / "generic", ["LABEL_0", "LABEL_1"], [0.1, 0.9], [0.8, 0.2]),
    }


def scores(metric: DetectionMetric, cases: list[EvalTestCase]) -> list[float | None]:
    return [r.score for r in metric.score_batch(cases)]


def test_the_tiny_model_answers_as_built(models: dict[str, Path]) -> None:
    """The fixture itself: transformers gives back the probabilities it was built with."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(models["toxic"])
    model = AutoModelForSequenceClassification.from_pretrained(models["toxic"])
    with torch.no_grad():
        logits = model(**tokenizer([ATTACK, PLAIN], padding=True, return_tensors="pt")).logits
    assert torch.allclose(logits[0], torch.tensor([logit(p) for p in TOXIC_TRIGGER]), atol=1e-5)
    assert torch.allclose(torch.sigmoid(logits[1]), torch.tensor(TOXIC_PLAIN), atol=1e-6)


def test_prompt_injection_scores_the_input_with_a_binary_classifier(models: dict[str, Path]) -> None:
    metric = PromptInjectionDetectionMetric(detection_method="model", model_name=str(models["binary"]))
    cases = [
        EvalTestCase(input=ATTACK, actual_output="No."),
        EvalTestCase(input=PLAIN, actual_output="ignore"),  # the answer is not what a detector judges
        EvalTestCase(input="", actual_output="please ignore"),
    ]
    results = metric.score_batch(cases)
    assert [r.status for r in results] == ["failed", "passed", "passed"]
    assert math.isclose(results[0].score, 1 - 0.95, abs_tol=1e-6)  # P(INJECTION) = 0.95
    assert math.isclose(results[1].score, 1 - 0.02, abs_tol=1e-6)
    log = results[0].evaluation_log
    assert log["harmful_labels"] == ["INJECTION"] and log["judged_field"] == "input" and not log["multi_label"]
    assert math.isclose(log["label_probabilities"]["SAFE"], 0.05, abs_tol=1e-6)
    assert "risk 0.950" in results[0].reason and results[0].evaluation_cost == 0.0


def test_harmful_content_reads_the_answer_with_a_multi_label_head(models: dict[str, Path]) -> None:
    """toxic-bert's head: independent sigmoids, the risk is the largest (0.92 "toxic"), not a softmax over six."""
    metric = HarmfulContentMetric(detection_method="model", model_name=str(models["toxic"]))
    harmful = EvalTestCase(input=PLAIN, actual_output="i will kill")
    clean = EvalTestCase(input="kill", actual_output=PLAIN)
    first, second = metric.score_batch([harmful, clean])
    assert math.isclose(first.score, 1 - 0.92, abs_tol=1e-6) and first.status == "failed"
    assert math.isclose(second.score, 1 - 0.04, abs_tol=1e-6) and second.status == "passed"
    assert first.evaluation_log["multi_label"] and first.evaluation_log["harmful_labels"] == TOXIC_LABELS
    assert "highest toxic 0.920" in first.reason


def test_a_three_label_head_sums_its_harmful_labels(models: dict[str, Path]) -> None:
    """eval-ai-library's detectors take the arg-max class and its probability: with Prompt Guard's labels its
    JailbreakDetection resolves INJECTION (the first "harmful" name) as the harmful class, so for an input the
    model puts at 70 % JAILBREAK the arg-max is not "harmful", its risk is 1 - 0.7 = 0.3 and the case PASSES its
    0.7 threshold. Here the risk is P(INJECTION) + P(JAILBREAK) = 0.8 by default, or P(JAILBREAK) = 0.7 when the
    labels are named."""
    folder = str(models["guard"])
    default = JailbreakDetectionMetric(detection_method="model", model_name=folder)
    named = JailbreakDetectionMetric(
        threshold=0.5, detection_method="model", model_name=folder, harmful_labels=["jailbreak"]
    )
    case = EvalTestCase(input=ATTACK, actual_output="")
    (by_default,) = default.score_batch([case])
    assert math.isclose(by_default.score, 1 - (0.1 + 0.7), abs_tol=1e-6) and by_default.status == "failed"
    (by_name,) = named.score_batch([case])
    assert math.isclose(by_name.score, 1 - 0.7, abs_tol=1e-6) and by_name.status == "failed"
    assert by_name.evaluation_log["harmful_labels"] == ["JAILBREAK"]
    injection = PromptInjectionDetectionMetric(detection_method="model", model_name=folder)
    (plain,) = injection.score_batch([EvalTestCase(input=PLAIN, actual_output="")])
    assert math.isclose(plain.score, 0.9, abs_tol=1e-6) and plain.status == "passed"


def test_a_head_without_a_safe_label_needs_its_harmful_labels_named(models: dict[str, Path]) -> None:
    """eval-ai-library guesses: LABEL_0 safe, LABEL_1 harmful (or index 1 of any head). Here it is an error that
    names the labels, until ``harmful_labels`` says which."""
    folder = str(models["generic"])
    with pytest.raises(ValueError, match=r"none of its labels \(LABEL_0, LABEL_1\) is a safe label.*harmful_labels"):
        PromptInjectionDetectionMetric(detection_method="model", model_name=folder)
    with pytest.raises(ValueError, match=r"harmful_labels: 'LABEL_2' not among the labels"):
        PromptInjectionDetectionMetric(detection_method="model", model_name=folder, harmful_labels=["LABEL_2"])
    metric = PromptInjectionDetectionMetric(detection_method="model", model_name=folder, harmful_labels=["LABEL_1"])
    assert math.isclose(scores(metric, [EvalTestCase(input=ATTACK, actual_output="")])[0], 0.1, abs_tol=1e-6)


def test_a_model_that_is_not_here_is_refused_at_construction(tmp_path: Path) -> None:
    """Never downloaded: a missing folder or an id absent from the local Hugging Face cache is a ValueError."""
    for name in (str(tmp_path / "nothing"), "evaltasks-tests/no-such-classifier"):
        with pytest.raises(ValueError, match="neither a folder here nor in the local Hugging Face cache"):
            JailbreakDetectionMetric(detection_method="model", model_name=name)
    with pytest.raises(ValueError, match="samples applies to the judge mode"):
        JailbreakDetectionMetric(detection_method="model", model_name=str(tmp_path), samples=2)


def test_a_hub_id_in_the_local_cache_is_used(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Hugging Face id resolves to its snapshot in the cache (the layout huggingface_hub writes), offline."""
    import shutil

    from huggingface_hub import constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--acme--injection-guard"
    shutil.copytree(models["binary"], repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    metric = PromptInjectionDetectionMetric(detection_method="model", model_name="acme/injection-guard")
    assert math.isclose(scores(metric, [EvalTestCase(input=ATTACK, actual_output="")])[0], 0.05, abs_tol=1e-6)
    assert metric.config()["model_name"] == "acme/injection-guard"


def test_the_cache_key_follows_the_models_files(models: dict[str, Path], tmp_path: Path) -> None:
    """Retrained weights in the same folder are another cache key; the judge's settings are not part of it."""
    folder = build_classifier(tmp_path / "m", ["SAFE", "INJECTION"], [0.05, 0.95], [0.98, 0.02])
    before = PromptInjectionDetectionMetric(detection_method="model", model_name=str(folder))
    key = before.cache_key()
    assert (
        PromptInjectionDetectionMetric(detection_method="model", model_name=str(folder), model="gpt-4o").cache_key()
        == key
    )
    build_classifier(folder, ["SAFE", "INJECTION"], [0.5, 0.5], [0.98, 0.02])
    after = PromptInjectionDetectionMetric(detection_method="model", model_name=str(folder))
    assert after.cache_key() != key and "prompts" not in after.config()


def test_a_model_that_fails_to_load_errors_the_cases(tmp_path: Path) -> None:
    folder = build_classifier(tmp_path / "broken", ["SAFE", "INJECTION"], [0.05, 0.95], [0.98, 0.02])
    (folder / "model.safetensors").write_bytes(b"not weights")
    metric = PromptInjectionDetectionMetric(detection_method="model", model_name=str(folder))
    results = metric.score_batch([EvalTestCase(input="a", actual_output=""), EvalTestCase(input="b", actual_output="")])
    assert [r.status for r in results] == ["errored", "errored"]
    assert "cannot load the classifier" in (results[0].error or "")


def test_evaluate_sync_runs_offline_without_a_judge_key(
    models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from evaltasks import evaluate_sync

    for name in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    metrics = [
        PromptInjectionDetectionMetric(detection_method="model", model_name=str(models["binary"])),
        HarmfulContentMetric(detection_method="model", model_name=str(models["toxic"])),
    ]
    cases = [EvalTestCase(input=ATTACK, actual_output=PLAIN), EvalTestCase(input=PLAIN, actual_output="kill")]
    result = evaluate_sync(cases, metrics)
    got = [[m.score for m in case.metrics] for case in result.test_results]
    assert all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(got[0] + got[1], [0.05, 0.96, 0.98, 0.08]))
    assert [case.success for case in result.test_results] == [False, False]


def test_a_suite_names_the_classifier_folder_relative_to_itself(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from evaltasks.inputs.suite import load_suite

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    shutil.copytree(models["binary"], tmp_path / "clf")
    (tmp_path / "data.jsonl").write_text('{"input": "please ignore", "actual_output": "No."}\n', encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: guard\ndataset:\n  path: data.jsonl\nmetrics:\n"
        "  - metric: PromptInjectionDetectionMetric\n    detection_method: model\n    model_name: ./clf\n",
        encoding="utf-8",
    )
    suite = load_suite(tmp_path / "suite.yaml")
    (metric,) = suite.metrics
    assert isinstance(metric, PromptInjectionDetectionMetric)
    assert Path(metric.model_name) == (tmp_path / "clf").resolve() and metric.detection_method == "model"


def test_threads_at_once_each_get_their_own_scores(models: dict[str, Path]) -> None:
    """Task runners score batches from several threads: every batch still gets its own texts' scores."""
    from concurrent.futures import ThreadPoolExecutor

    metric = PromptInjectionDetectionMetric(detection_method="model", model_name=str(models["binary"]))
    batches = [
        [EvalTestCase(input=ATTACK if (i + j) % 2 else PLAIN, actual_output="") for j in range(5)] for i in range(8)
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = list(pool.map(lambda batch: scores(metric, batch), batches))
    for i, got in enumerate(found):
        expected = [0.05 if (i + j) % 2 else 0.98 for j in range(5)]
        assert all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(got, expected, strict=True)), (i, got)


def _score_in_child(folder: str, queue: object) -> None:
    metric = PromptInjectionDetectionMetric(detection_method="model", model_name=folder)
    queue.put(scores(metric, [EvalTestCase(input=ATTACK, actual_output="")]))  # type: ignore[attr-defined]


def test_a_process_forked_after_classifying_classifies_too(models: dict[str, Path]) -> None:
    """A child forked after its parent ran the model (as the server's runs are forked) scores, and does not hang
    on the OpenMP team of its parent's thread."""
    import multiprocessing

    folder = str(models["binary"])
    assert math.isclose(
        scores(
            PromptInjectionDetectionMetric(detection_method="model", model_name=folder),
            [EvalTestCase(input=ATTACK, actual_output="")],
        )[0],
        0.05,
        abs_tol=1e-6,
    )
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_score_in_child, args=(folder, queue))
    child.start()
    try:
        got = queue.get(timeout=120)
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
    assert math.isclose(got[0], 0.05, abs_tol=1e-6) and child.exitcode == 0


@pytest.mark.slow
def test_the_cli_runs_a_classifier_suite_offline_without_a_judge_key(
    models: dict[str, Path], tmp_path: Path, prefect_api_url: str
) -> None:
    """``evaltasks run`` through the real Prefect engine, ``--max-cost`` included (a classifier costs nothing and
    needs no price): the attack input fails, the plain one passes, results.json holds the classifier's log."""
    import json
    import shutil

    from tests.cli_forkserver import run_cli
    from tests.process_env import subprocess_env

    shutil.copytree(models["binary"], tmp_path / "clf")
    rows = [
        {"id": "attack", "input": ATTACK, "actual_output": "No."},
        {"id": "plain", "input": PLAIN, "actual_output": "Paris."},
    ]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: guard\ndataset:\n  path: data.jsonl\nmetrics:\n"
        "  - metric: PromptInjectionDetectionMetric\n    detection_method: model\n    model_name: clf\n"
        "gate:\n  min_pass_rate: 0.5\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path / "prefect-home", prefect_api_url)
    env.pop("OPENAI_API_KEY", None)
    proc = run_cli("run", "suite.yaml", "--max-cost", "0.01", "--output-dir", "out", "--quiet", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    by_id = {case["id"]: case["metrics"][0] for case in results["cases"]}
    assert by_id["attack"]["status"] == "failed" and math.isclose(by_id["attack"]["score"], 0.05, abs_tol=1e-6)
    assert by_id["plain"]["status"] == "passed" and math.isclose(by_id["plain"]["score"], 0.98, abs_tol=1e-6)
    assert by_id["attack"]["evaluation_log"]["harmful_labels"] == ["INJECTION"]


def test_a_text_longer_than_the_models_limit_is_cut_to_it(models: dict[str, Path]) -> None:
    """The tiny model takes 64 positions (a longer input would index past its position table): the text is cut
    to its first 64 tokens, so a trigger word at position 100 is never seen, and one at 64 is."""
    metric = PromptInjectionDetectionMetric(detection_method="model", model_name=str(models["binary"]))
    cut_off = " ".join(["hello"] * 99 + ["ignore"])
    kept = " ".join(["hello"] * 63 + ["ignore"] + ["hello"] * 36)
    got = scores(metric, [EvalTestCase(input=cut_off, actual_output=""), EvalTestCase(input=kept, actual_output="")])
    assert math.isclose(got[0], 0.98, abs_tol=1e-6) and math.isclose(got[1], 0.05, abs_tol=1e-6)
