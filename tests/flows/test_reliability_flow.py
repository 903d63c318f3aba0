"""The reliability metrics through the ``evaluate-suite`` flow on the real Prefect engine, with a python target
(docs/metrics/reliability.md#reliability-metrics): ``repeat: 3`` filling every sample's ``multi_outputs`` for
OutcomeConsistencyMetric, ``perturbations:`` variants run through the target for PromptRobustnessMetric and
written to results.json, and CalibrationMetric's one run-level result in results.json, summary.md and the
terminal, no case carrying it. Expected values are computed here: a plain Levenshtein and numpy.

Real components: the session's Prefect server (``prefect_api_url``), the target's module loaded from the suite's
folder as a user's would be."""

from __future__ import annotations

import io
import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from evaltasks.errors import ConfigError, DatasetError
from evaltasks.reports.console import print_summary
from evaltasks.results import EvaluationSummary
from tests.metrics.test_reliability_metrics import levenshtein

REPO = Path(__file__).resolve().parents[2]

SAMPLES = {  # each question's three answers, in call order
    "What is 2+2?": ["4", "4", "4"],
    "Capital of France?": ["Paris", "Paris, France", "paris"],
    "Colour of the sky?": ["blue", "green", "Blue."],
}
EXPECTED = {"What is 2+2?": "4", "Capital of France?": "Paris", "Colour of the sky?": "blue"}
CONFIDENCE = {"4": 0.95, "Paris": 0.9, "Paris, France": 0.6, "paris": 0.7, "blue": 0.8, "green": 0.4, "Blue.": 0.5}

BOT = """
import collections

SAMPLES = {samples!r}
CONFIDENCE = {confidence!r}
CALLS = collections.Counter()


def respond(case):
    k = CALLS[case.input]
    CALLS[case.input] += 1
    text = SAMPLES[case.input][k % 3]
    return {{"output": text, "agent_confidence": CONFIDENCE[text]}}


def steady(case):
    q = case.input
    return "Paris" if q == q.strip() and q[:1].isupper() and "  " not in q else "I am not sure."
"""


def steady(q: str) -> str:
    """The ``steady`` target's rule, replicated: sure only of an input that is cased and spaced as written."""
    return "Paris" if q == q.strip() and q[:1].isupper() and "  " not in q else "I am not sure."


def sim(a: str, b: str) -> float:
    a, b = a.strip().lower(), b.strip().lower()
    return 1.0 if a == b else 1 - levenshtein(a, b) / max(len(a), len(b))


def _suite(directory: Path, target: str, metrics: str, extra: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    module = f"relbot_{uuid.uuid4().hex[:8]}"  # a fresh module per suite: its call counter starts at 0
    (directory / f"{module}.py").write_text(BOT.format(samples=SAMPLES, confidence=CONFIDENCE), encoding="utf-8")
    rows = [{"id": f"q{i}", "input": q, "expected_output": a} for i, (q, a) in enumerate(EXPECTED.items())]
    (directory / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    suite = directory / "suite.yaml"
    suite.write_text(
        f"name: reliability\ndataset:\n  path: d.jsonl\ntarget:\n  python: {module}:{target}\n{extra}"
        f"metrics:\n{metrics}gate: {{min_pass_rate: 0}}\n",
        encoding="utf-8",
    )
    return suite


def _run(suite: Path, tmp_path: Path) -> tuple[dict[str, Any], str]:
    from evaltasks.flows.evaluate_suite import evaluate_suite

    state = evaluate_suite(
        suite_path=str(suite), output_dir=str(tmp_path / "out"), index_dir=str(tmp_path / "index"), return_state=True
    )
    assert state.is_completed(), state
    out = tmp_path / "out"
    return json.loads((out / "results.json").read_text(encoding="utf-8")), (out / "summary.md").read_text("utf-8")


@pytest.mark.slow
def test_repeats_fill_multi_outputs_and_calibration_is_one_run_level_result(
    tmp_path: Path, prefect_api_url: str
) -> None:
    metrics = (
        "  - metric: ExactMatchMetric\n  - metric: OutcomeConsistencyMetric\n"
        "  - metric: CalibrationMetric\n    outcome_metric: ExactMatchMetric\n"
    )
    suite = _suite(tmp_path / "s", "respond\n  repeat: 3\n  cache: false", metrics)
    results, summary_md = _run(suite, tmp_path)

    cases = results["cases"]
    assert len(cases) == 9  # 3 questions x 3 samples, each scored as a case
    for question, answers in SAMPLES.items():
        samples = [c for c in cases if c["input"] == question]
        assert [c["actual_output"] for c in samples] == answers
        pairs = list(itertools.combinations(answers, 2))
        expected = sum(sim(a, b) >= 0.85 for a, b in pairs) / len(pairs)
        for c in samples:  # every sample carries its case's consistency
            (consistency,) = [m for m in c["metrics"] if m["name"] == "OutcomeConsistencyMetric"]
            assert consistency["score"] == pytest.approx(expected)
            assert consistency["evaluation_log"]["outputs"] == 3
    assert [m["name"] for c in cases for m in c["metrics"]] == ["ExactMatchMetric", "OutcomeConsistencyMetric"] * 9

    # calibration over the 9 samples: right = equal to the expected answer (ExactMatch is case-sensitive)
    outputs = [a for answers in SAMPLES.values() for a in answers]
    right = np.array([a == EXPECTED[q] for q, answers in SAMPLES.items() for a in answers])
    conf = np.array([CONFIDENCE[a] for a in outputs])
    brier = float(np.mean((conf - right) ** 2))
    p = right.mean()
    wins = [1.0 if r > w else 0.5 if r == w else 0.0 for r in conf[right] for w in conf[~right]]
    run = results["summary"]["run_metrics"]["CalibrationMetric"]
    assert run["score"] == pytest.approx(1 - brier / (p * (1 - p)))
    assert run["details"]["auroc"] == pytest.approx(sum(wins) / len(wins))
    assert run["details"]["cases"] == 9 and run["status"] == ("passed" if run["score"] >= 0 else "failed")
    assert "CalibrationMetric" not in results["summary"]["metrics"]
    assert results["targets"][0]["summary"]["run_metrics"] == results["summary"]["run_metrics"]

    assert "| Run-level metric |" in summary_md and "| CalibrationMetric |" in summary_md
    assert f"{run['score']:.3f}" in summary_md
    console = Console(width=200, record=True, file=io.StringIO())
    print_summary(EvaluationSummary.model_validate(results["summary"]), console=console)
    assert f"run-level CalibrationMetric: {run['status']}, score {run['score']:.3f}" in console.export_text()

    import jsonschema

    schema = json.loads((REPO / "evaltasks" / "schema" / "results.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(results)

    import xml.etree.ElementTree as ET

    junit = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    (run_case,) = [t for t in junit.iter("testcase") if t.get("name") == "run :: CalibrationMetric"]
    assert run_case.get("classname") == "reliability.CalibrationMetric"
    assert (run_case.find("failure") is not None) == (run["status"] == "failed")
    assert junit.get("tests") == str(9 * 2 + 1)  # 9 cases x 2 per-case metrics + the run-level one


@pytest.mark.slow
def test_perturbed_variants_run_through_the_target_and_land_in_results_json(
    tmp_path: Path, prefect_api_url: str
) -> None:
    metrics = (
        "  - metric: PromptRobustnessMetric\n"
        "  - metric: PromptRobustnessMetric\n    name: verdicts\n    compare: verdict\n"
        "    verdict_metric: {metric: ExactMatchMetric}\n"
    )
    extra = "perturbations:\n  kinds: [casing, spacing, punctuation]\n  count: 4\n  seed: 3\n"
    suite = _suite(tmp_path / "s", "steady", metrics, extra)
    results, _ = _run(suite, tmp_path)

    for case in results["cases"]:
        original = steady(case["input"])
        assert case["actual_output"] == original
        variants = case["variants"]
        assert len(variants) == 4
        assert all(set(v["perturbation"].split("+")) <= {"casing", "spacing", "punctuation"} for v in variants)
        assert all(v["actual_output"] == steady(v["input"]) for v in variants)  # the target ran on each
        assert all(v["generation"]["target"] == "python" for v in variants)
        by_name = {m["name"]: m for m in case["metrics"]}
        agree = [sim(original, v["actual_output"]) >= 0.6 for v in variants]
        assert by_name["PromptRobustnessMetric"]["score"] == pytest.approx(sum(agree) / 4)
        passes = [v["actual_output"] == case["expected_output"] for v in variants]
        same = [x == (original == case["expected_output"]) for x in passes]
        assert by_name["verdicts"]["score"] == pytest.approx(sum(same) / 4)
    # some variant was answered differently: the metric measured something (casing makes "I am not sure.")
    assert any(v["actual_output"] != c["actual_output"] for c in results["cases"] for v in c["variants"])


def test_missing_repeats_variants_or_outcome_metric_are_refused_before_any_run(tmp_path: Path) -> None:
    from evaltasks.engine.run import plan_run

    once = _suite(tmp_path / "a", "respond", "  - metric: OutcomeConsistencyMetric\n")
    with pytest.raises(DatasetError, match="multi_outputs"):
        plan_run(once)
    unperturbed = _suite(tmp_path / "b", "steady", "  - metric: PromptRobustnessMetric\n")
    with pytest.raises(DatasetError, match="variants"):
        plan_run(unperturbed)
    wrong = _suite(
        tmp_path / "c",
        "respond",
        "  - metric: ExactMatchMetric\n  - metric: CalibrationMetric\n    outcome_metric: Nope\n",
    )
    with pytest.raises(ConfigError) as caught:
        plan_run(wrong)
    (problem,) = caught.value.problems
    assert (problem.location, problem.field) == ("metrics[1]", "outcome_metric")
    repeated = _suite(tmp_path / "d", "respond\n  repeat: 2", "  - metric: OutcomeConsistencyMetric\n")
    assert plan_run(repeated).suite.metrics[0].name == "OutcomeConsistencyMetric"
