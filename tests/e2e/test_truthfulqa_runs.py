"""The TruthfulQA runs (docs/install.md#truthfulqa-data-not-in-the-repository): the published figures of the example suite through the
``evaluate-suite`` flow on the real Prefect engine, and of SemanticSimilarityMetric through ``evaluate_sync``,
each spot-checked against an independent computation with sentence-transformers. They read
``../shared/data/truthfulqa`` and skip when it is absent.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from evaltasks import EvalTestCase, SemanticSimilarityMetric, evaluate_sync

REPO = Path(__file__).resolve().parents[2]
TRUTHFULQA_SUITE = REPO / "examples" / "truthfulqa" / "suite.yaml"
TOL = 1e-6


def _rm_score(st_model, output: str, references: list[str]) -> float:
    vectors = st_model.encode([output, *references], convert_to_numpy=True, show_progress_bar=False)
    vectors = vectors.astype(np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return float(np.clip(vectors[1:] @ vectors[0], 0.0, 1.0).max())


def _run_flow(suite: Path, output_dir: Path, index_dir: Path):
    """Run the flow; return (its return value, its flow run id)."""
    from evaltasks.flows.evaluate_suite import evaluate_suite

    state = evaluate_suite(
        suite_path=str(suite), output_dir=str(output_dir), index_dir=str(index_dir), return_state=True
    )
    assert state.is_completed(), state
    return state.result(), state.state_details.flow_run_id


def test_truthfulqa_flow(prefect_harness, st_model, truthfulqa_dir: Path, tmp_path: Path) -> None:
    """The published figures: mean ReferenceMatch 0.63055 ± 0.00005, 50.4 % of the cases reach 0.7."""
    # the example as a user has it after examples/truthfulqa/fetch_data.py: the data in data/ beside the suite
    suite = tmp_path / "example" / "suite.yaml"
    (suite.parent / "data").mkdir(parents=True)
    suite.write_bytes(TRUTHFULQA_SUITE.read_bytes())
    (suite.parent / "data" / "davinci_answers.csv").write_bytes((truthfulqa_dir / "davinci_answers.csv").read_bytes())
    assert yaml.safe_load(suite.read_text("utf-8"))["dataset"]["path"] == "data/davinci_answers.csv"
    out, _ = _run_flow(suite, tmp_path / "out", tmp_path / "index")
    summary = out["summary"]
    assert summary["cases"] == 817
    rm = summary["metrics"]["ReferenceMatchMetric"]
    assert abs(rm["mean_score"] - 0.63055) <= 0.00005
    assert abs(rm["pass_rate"] - 0.504) < 0.0005
    assert rm["threshold"] == 0.7
    assert summary["pass_rate"] >= 0.5
    assert out["passed"] is True

    # Spot-check individual scores against an independent computation.
    with open(truthfulqa_dir / "davinci_answers.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert results["notices"] == []  # no data file outside the suite's directory
    assert len(results["cases"]) == 817
    for i in range(0, 817, 41):
        row, case = rows[i], results["cases"][i]
        refs = [r.strip() for r in row["correct_answers"].split(";") if r.strip()]
        assert case["actual_output"] == row["model_answer"]
        assert abs(case["metrics"][0]["score"] - _rm_score(st_model, row["model_answer"], refs)) <= TOL


# -- SemanticSimilarityMetric through evaluate_sync ------------------------------------------------------------

EPS = 1e-6  # the project's equality rule for scores


def expected_score(cosine, output: str, expected: str) -> float:
    return float(np.clip(cosine(output, [expected])[0], 0.0, 1.0))


def local(**kwargs) -> SemanticSimilarityMetric:
    return SemanticSimilarityMetric(embedding_provider="local", **kwargs)


# -- TruthfulQA: the figure the README quotes ------------------------------------------------------------------
@pytest.mark.truthfulqa
def test_truthfulqa_answers_against_best_answer(truthfulqa_dir: Path, cosine) -> None:
    """817 davinci answers (``model_answer``) against ``best_answer``: mean 0.55192, pass rate 42.1 % with
    all-MiniLM-L6-v2."""
    with open(truthfulqa_dir / "davinci_answers.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    cases = [EvalTestCase(actual_output=r["model_answer"], expected_output=r["best_answer"]) for r in rows]
    result = evaluate_sync(cases, [local()])
    scores = [c.metrics[0].score for c in result.test_results]
    assert len(scores) == 817
    for i in range(0, 817, 41):
        assert abs(scores[i] - expected_score(cosine, rows[i]["model_answer"], rows[i]["best_answer"])) <= EPS
    summary = result.summary.metrics["SemanticSimilarityMetric"]
    assert abs(summary.mean_score - 0.55192) <= 0.00005, summary.mean_score
    assert summary.pass_rate == pytest.approx(344 / 817, abs=1e-9)  # 42.1 % reach the default threshold 0.7
