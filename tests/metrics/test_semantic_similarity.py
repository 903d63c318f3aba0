"""SemanticSimilarityMetric (eval-ai-library's docs page library.eval-ai.com/metrics/vector/semantic-similarity and
the rules of docs/metrics/vector.md#semanticsimilaritymetric), on the real bundled all-MiniLM-L6-v2, the real FAISS index, the real Prefect engine and a real
OpenAI-compatible HTTP server on 127.0.0.1.

Every expected score is computed here, independently of evaltasks, with the ``cosine`` fixture
(sentence-transformers' own encode + numpy), then clamped to [0, 1].
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import numpy as np
import pytest

from evaltasks import (
    ConfigError,
    CredentialsError,
    DatasetError,
    EvalTestCase,
    ReferenceMatchMetric,
    SemanticSimilarityMetric,
    evaluate,
    evaluate_sync,
)
from evaltasks.embeddings.local import LocalEmbeddingProvider
from evaltasks.embeddings.openai import PRICES_PER_MILLION_TOKENS
from evaltasks.engine.evaluate import collect_embedding_needs
from evaltasks.index import ReferenceIndex
from tests.cli_forkserver import run_cli
from tests.openai_server import OpenAIServer, usage_tokens

EPS = 1e-6  # the project's equality rule for scores
KEY = "sk-evaltasks-semantic-similarity-test"
MODEL = "text-embedding-3-small"

PAIRS = [  # (actual_output, expected_output)
    ("Paris is the capital of France.", "The capital of France is Paris."),  # the docs page's usage example
    ("The cat sat on the mat.", "A cat was sitting on the mat."),  # its "High Score (0.95+)" example
    ("Python is a programming language.", "The snake slithered through the grass."),  # its "Low Score (< 0.5)"
    ("Water boils at 100 degrees Celsius at sea level.", "At sea level water boils at 100 °C."),
    ("Die Hauptstadt von Deutschland ist Berlin.", "Berlin is the capital of Germany."),
]


def expected_score(cosine, output: str, expected: str) -> float:
    return float(np.clip(cosine(output, [expected])[0], 0.0, 1.0))


def local(**kwargs) -> SemanticSimilarityMetric:
    return SemanticSimilarityMetric(embedding_provider="local", **kwargs)


def cases_of(pairs: list[tuple[str, str]]) -> list[EvalTestCase]:
    return [EvalTestCase(actual_output=o, expected_output=e) for o, e in pairs]


class RecordingProvider(LocalEmbeddingProvider):
    """The real local provider (same shared model), recording every text it is asked to embed."""

    def __init__(self) -> None:
        super().__init__("all-MiniLM-L6-v2")
        self.embedded: list[str] = []

    def embed(self, texts):
        self.embedded.extend(texts)
        return super().embed(texts)


class RecordingMetric(SemanticSimilarityMetric):
    """SemanticSimilarityMetric whose provider is a :class:`RecordingProvider` (everything else unchanged)."""

    def __init__(self, recorder: RecordingProvider, **kwargs) -> None:
        super().__init__(embedding_provider="local", **kwargs)
        self._recorder = recorder

    @property
    def provider(self):
        return self._recorder


# -- parameters ------------------------------------------------------------------------------------------
def test_defaults_match_the_docs_page(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    metric = SemanticSimilarityMetric()  # constructing needs no credentials
    assert metric.threshold == 0.7
    assert metric.embedding_provider == "openai"
    assert metric.model_name == "text-embedding-3-small"
    assert metric.name == "SemanticSimilarityMetric"
    assert metric.version == "1"
    assert local().model_name == "all-MiniLM-L6-v2"
    assert SemanticSimilarityMetric(0.8, "openai", "text-embedding-3-large").model_name == "text-embedding-3-large"
    assert metric.config() == {
        "threshold": 0.7,
        "name": "SemanticSimilarityMetric",
        "embedding_provider": "openai",
        "model_name": "text-embedding-3-small",
        "provider_options": {},
    }
    secret = SemanticSimilarityMetric(provider_options={"api_key": "sk-secret", "dimensions": 256})
    assert secret.config()["provider_options"] == {"dimensions": 256}  # the key never reaches cache keys/reports
    assert "sk-secret" not in repr(secret) and "sk-secret" not in secret.cache_key()


def test_import_paths_of_eval_lib_and_the_registry() -> None:
    import evaltasks.metrics.vector_metrics as seed_path
    import evaltasks.vector_metrics as lib_path
    from evaltasks.metrics import METRICS, get_metric_class

    assert seed_path.SemanticSimilarityMetric is lib_path.SemanticSimilarityMetric is SemanticSimilarityMetric
    assert (
        METRICS["SemanticSimilarityMetric"] is get_metric_class("SemanticSimilarityMetric") is SemanticSimilarityMetric
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"embedding_provider": "cohere"}, "embedding_provider"),
        ({"embedding_provider": "LOCAL"}, "embedding_provider"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": -0.1}, "threshold"),
        ({"threshold": "0.7"}, "threshold"),
        ({"model_name": ""}, "model_name"),
        ({"model_name": 3}, "model_name"),
        ({"provider_options": ["device", "cpu"]}, "provider_options"),
    ],
)
def test_invalid_parameters_raise_value_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SemanticSimilarityMetric(**kwargs)


@pytest.mark.parametrize(
    ("entry", "field", "message"),
    [
        ("{metric: SemanticSimilarityMetric, embedding_provider: cohere}", "embedding_provider", "must be one of"),
        (
            "{metric: SemanticSimilarityMetric, embedding_provider: local, references: [x]}",
            "references",
            "unknown argument 'references' for SemanticSimilarityMetric",
        ),
        ("{metric: SemanticSimilarityMetric, embedding_provider: local, threshold: 2}", "threshold", "[0, 1]"),
    ],
)
def test_bad_arguments_in_a_suite_are_located_config_errors(
    tmp_path: Path, entry: str, field: str, message: str
) -> None:
    from evaltasks.inputs.suite import load_suite

    (tmp_path / "d.jsonl").write_text('{"actual_output": "a", "expected_output": "b"}\n', encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        f"name: s\ndataset: {{path: d.jsonl}}\nmetrics:\n  - {{metric: LengthCheckMetric}}\n  - {entry}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as info:
        load_suite(tmp_path / "suite.yaml")
    [problem] = info.value.problems
    assert (problem.location, problem.field) == ("metrics[1]", field)
    assert message in problem.message


def test_suite_without_openai_key_is_a_credentials_error_or_skipped(tmp_path: Path, monkeypatch) -> None:
    from evaltasks.inputs.suite import load_suite

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (tmp_path / "d.jsonl").write_text('{"actual_output": "a", "expected_output": "b"}\n', encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: s\ndataset: {path: d.jsonl}\nmetrics:\n  - {metric: SemanticSimilarityMetric}\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError) as info:
        load_suite(tmp_path / "suite.yaml")
    [problem] = info.value.problems
    assert (problem.location, problem.field) == ("metrics[0]", "embedding_provider")
    assert "OPENAI_API_KEY" in problem.message
    skipped = load_suite(tmp_path / "suite.yaml", skip_missing_credentials=True)
    [result] = skipped.metrics[0].score_batch([EvalTestCase(actual_output="a", expected_output="b")])
    assert result.status == "skipped" and result.name == "SemanticSimilarityMetric"


# -- the score rule on the docs page's examples ------------------------------------------------------------
def test_docs_page_usage_example(cosine) -> None:
    case = EvalTestCase(
        actual_output="Paris is the capital of France.", expected_output="The capital of France is Paris."
    )
    results = asyncio.run(evaluate([case], [local(threshold=0.8)]))
    got = results.test_results[0].metrics[0]
    expected = expected_score(cosine, case.actual_output, case.expected_output)
    assert abs(got.score - expected) <= EPS
    assert abs(expected - 0.989357) < 1e-5  # all-MiniLM-L6-v2's figure
    assert got.success is True and got.threshold == 0.8
    assert got.evaluation_cost == 0.0


def test_docs_page_high_and_low_examples(cosine) -> None:
    high = EvalTestCase(actual_output="The cat sat on the mat.", expected_output="A cat was sitting on the mat.")
    low = EvalTestCase(
        actual_output="Python is a programming language.", expected_output="The snake slithered through the grass."
    )
    got_high, got_low = local().score_batch([high, low])
    assert abs(got_high.score - expected_score(cosine, high.actual_output, high.expected_output)) <= EPS
    assert abs(got_low.score - expected_score(cosine, low.actual_output, low.expected_output)) <= EPS
    # The page's bands come from OpenAI models; all-MiniLM-L6-v2 gives 0.9491 and 0.1855.
    assert abs(got_high.score - 0.949103) < 1e-5 and got_high.success is True
    assert abs(got_low.score - 0.185502) < 1e-5 and got_low.score < 0.5 and got_low.success is False


def test_scores_equal_an_independent_computation(cosine) -> None:
    results = local().score_batch(cases_of(PAIRS))
    for (output, expected), result in zip(PAIRS, results):
        want = expected_score(cosine, output, expected)
        assert abs(result.score - want) <= EPS
        assert result.success is (result.score >= 0.7)
        assert result.evaluation_log["cosine_similarity"] == round(result.score, 6)
        assert f"{result.score:.4f}" in result.reason


def test_identical_texts_score_one_and_are_embedded_once() -> None:
    recorder = RecordingProvider()
    text = "The mitochondria is the powerhouse of the cell."
    [result] = RecordingMetric(recorder).score_batch([EvalTestCase(actual_output=text, expected_output=text)])
    assert abs(result.score - 1.0) <= EPS and result.success is True
    assert recorder.embedded == [text]


def test_negative_cosine_is_clamped_to_zero(cosine) -> None:
    output, expected = "Paris is the capital of France.", "apple"
    raw = cosine(output, [expected])[0]
    assert raw < -0.01, f"the pair must have a negative cosine for this test to mean anything: {raw}"
    [result] = local(threshold=0.0).score_batch([EvalTestCase(actual_output=output, expected_output=expected)])
    assert result.score == 0.0
    assert result.evaluation_log["cosine_similarity"] == 0.0
    assert result.success is True  # 0.0 >= threshold 0.0


def test_same_clamped_cosine_as_reference_match_with_one_reference() -> None:
    """The shared rule: SemanticSimilarity(output, expected) == ReferenceMatch(output, [expected])."""
    cases = cases_of(PAIRS + [("Paris is the capital of France.", "apple")])
    semantic = local().score_batch(cases)
    for case, result in zip(cases, semantic):
        [match] = ReferenceMatchMetric(embedding_provider="local", references=[case.expected_output]).score_batch(
            [case]
        )
        assert abs(result.score - match.score) <= EPS
    assert local().provider is ReferenceMatchMetric(embedding_provider="local").provider  # one model for both


def test_batch_scores_equal_one_by_one_scores() -> None:
    metric = local()
    batch = metric.score_batch(cases_of(PAIRS))
    for case, result in zip(cases_of(PAIRS), batch):
        single = asyncio.run(metric.evaluate(case))
        assert abs(result.score - single.score) <= EPS and result.success is single.success


def test_result_shape() -> None:
    [result] = local(name="sim", threshold=0.9).score_batch(cases_of(PAIRS[:1]))
    assert result.name == "sim" and result.threshold == 0.9
    assert result.evaluation_log == {
        "cosine_similarity": round(result.score, 6),
        "provider": "local",
        "model": "all-MiniLM-L6-v2",
        "output_truncated": False,
        "expected_output_truncated": False,
    }
    assert result.status == ("passed" if result.score >= 0.9 else "failed")


def test_truncation_is_flagged(st_model) -> None:
    long_text = "word " * 600
    assert len(st_model.tokenizer(long_text)["input_ids"]) > st_model.max_seq_length
    short_long, long_short = local().score_batch(
        [
            EvalTestCase(actual_output="a short answer", expected_output=long_text),
            EvalTestCase(actual_output=long_text, expected_output="a short answer"),
        ]
    )
    assert (short_long.evaluation_log["output_truncated"], short_long.evaluation_log["expected_output_truncated"]) == (
        False,
        True,
    )
    assert (long_short.evaluation_log["output_truncated"], long_short.evaluation_log["expected_output_truncated"]) == (
        True,
        False,
    )


# -- required field and empty texts -------------------------------------------------------------------------
def test_case_without_expected_output_is_invalid() -> None:
    metric = local()
    case = EvalTestCase(actual_output="Something.")
    assert metric.validate_case(case) == [("expected_output", "is missing")]
    with pytest.raises(ValueError, match="expected_output"):
        asyncio.run(metric.evaluate(case))
    with pytest.raises(ValueError, match=r"item 1.*expected_output"):
        evaluate_sync([EvalTestCase(actual_output="a", expected_output="b"), case], [metric])


def test_dataset_row_without_expected_output_is_located(tmp_path: Path) -> None:
    """Before anything is embedded, each row lacking expected_output is named with its line and field."""
    from evaltasks.engine.run import plan_run

    (tmp_path / "d.jsonl").write_text(
        '{"actual_output": "a", "expected_output": "b"}\n{"actual_output": "c"}\n'
        '{"actual_output": "d", "expected_output": null}\n',
        encoding="utf-8",
    )
    (tmp_path / "suite.yaml").write_text(
        "name: s\ndataset: {path: d.jsonl}\nmetrics:\n  - {metric: SemanticSimilarityMetric, embedding_provider: local}\n",
        encoding="utf-8",
    )
    with pytest.raises(DatasetError) as info:
        plan_run(tmp_path / "suite.yaml")
    assert [(p.location, p.field) for p in info.value.problems] == [
        ("line 2", "expected_output"),
        ("line 3", "expected_output"),
    ]
    assert all("needed by SemanticSimilarityMetric" in p.message for p in info.value.problems)


@pytest.mark.slow
def test_cli_exits_2_naming_the_row_and_field(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("actual_output,answer\nfine,fine\nno expected,\n", encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: s\ndataset: {path: d.csv}\nmetrics:\n  - {metric: SemanticSimilarityMetric, embedding_provider: local}\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), HF_HUB_OFFLINE="1")
    proc = run_cli("run", "suite.yaml", cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "expected_output" in proc.stderr and "line 2" in proc.stderr and "line 3" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("output", "expected", "which"),
    [
        ("", "An expected answer.", "output"),
        ("   ", "An expected answer.", "output"),
        ("A real answer.", "", "expected output"),
        ("A real answer.", "\n\t ", "expected output"),
        ("", "", "output"),
    ],
)
def test_empty_output_or_expected_output_scores_zero_and_is_never_embedded(
    output: str, expected: str, which: str
) -> None:
    recorder = RecordingProvider()
    metric = RecordingMetric(recorder)
    empty, full = metric.score_batch(
        [
            EvalTestCase(actual_output=output, expected_output=expected),
            EvalTestCase(actual_output="Real text.", expected_output="Real text, expected."),
        ]
    )
    assert empty.score == 0.0 and empty.success is False and empty.evaluation_cost == 0.0
    assert f"The {which} is empty or whitespace only" in empty.reason
    assert empty.evaluation_log["cosine_similarity"] == 0.0
    assert full.score > 0.0
    assert sorted(recorder.embedded) == ["Real text, expected.", "Real text."]  # neither text of the empty case
    needs = collect_embedding_needs([EvalTestCase(actual_output=output, expected_output=expected)], [metric])
    assert [(list(n.references), list(n.outputs)) for n in needs.values()] == [([], [])]


# -- the index: expected outputs are stored and reused like references --------------------------------------
def test_expected_outputs_go_through_the_index(tmp_path: Path, cosine) -> None:
    pairs = PAIRS + [("Another answer.", PAIRS[0][1])]  # an expected output shared by two cases
    cases = cases_of(pairs)
    metric = local()
    first = evaluate_sync(cases, [metric], index_dir=tmp_path / "index")
    counts = first.summary.embeddings
    assert (counts.references_computed, counts.references_reused, counts.outputs_computed) == (5, 0, 6)
    assert ReferenceIndex(tmp_path / "index").missing_texts(metric.provider, [e for _, e in pairs]) == []
    second = evaluate_sync(cases, [metric], index_dir=tmp_path / "index")
    counts = second.summary.embeddings
    assert (counts.references_computed, counts.references_reused, counts.outputs_computed, counts.outputs_reused) == (
        0,
        5,
        0,
        6,
    )  # outputs are stored in the index too
    for (output, expected), a, b in zip(pairs, first.test_results, second.test_results):
        want = expected_score(cosine, output, expected)
        assert abs(a.metrics[0].score - want) <= EPS and abs(b.metrics[0].score - want) <= EPS


# -- the flow: the real Prefect engine ----------------------------------------------------------------------
def test_flow_scores_equal_evaluate_sync_and_a_warm_run_reuses_the_index(prefect_harness, tmp_path: Path) -> None:
    from evaltasks.flows.evaluate_suite import evaluate_suite

    rows = [{"id": f"case-{i}", "actual_output": o, "expected_output": e} for i, (o, e) in enumerate(PAIRS)]
    rows.append({"id": "empty", "actual_output": " ", "expected_output": "Nothing was said."})
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: semantic\ndataset: {path: d.jsonl}\ngate: {min_pass_rate: 0.5}\n"
        "metrics:\n  - {metric: SemanticSimilarityMetric, embedding_provider: local, threshold: 0.6}\n",
        encoding="utf-8",
    )
    cases = [EvalTestCase(actual_output=r["actual_output"], expected_output=r["expected_output"]) for r in rows]
    direct = evaluate_sync(cases, [local(threshold=0.6)])
    want = {r["id"]: t.metrics[0] for r, t in zip(rows, direct.test_results)}

    summaries = []
    for run in ("cold", "warm"):
        state = evaluate_suite(
            suite_path=str(tmp_path / "suite.yaml"),
            output_dir=str(tmp_path / run),
            index_dir=str(tmp_path / "index"),
            return_state=True,
        )
        assert state.is_completed(), state
        results = json.loads((tmp_path / run / "results.json").read_text(encoding="utf-8"))
        assert [c["id"] for c in results["cases"]] == list(want)
        for case in results["cases"]:
            [got] = case["metrics"]
            assert abs(got["score"] - want[case["id"]].score) <= EPS
            assert got["success"] is want[case["id"]].success
            assert got["evaluation_log"] == want[case["id"]].evaluation_log
        summaries.append(results["summary"])
    cold, warm = summaries
    assert cold["metrics"]["SemanticSimilarityMetric"]["mean_score"] == pytest.approx(
        direct.summary.metrics["SemanticSimilarityMetric"].mean_score, abs=EPS
    )
    assert (cold["embeddings"]["references_computed"], cold["embeddings"]["references_reused"]) == (len(PAIRS), 0)
    assert (warm["embeddings"]["references_computed"], warm["embeddings"]["references_reused"]) == (0, len(PAIRS))
    assert warm["embeddings"]["outputs_computed"] + warm["embeddings"]["outputs_reused"] == len(PAIRS)


# -- the openai provider against a real OpenAI-compatible server on 127.0.0.1 --------------------------------
def test_openai_provider_against_a_local_server(cosine, monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    pairs = PAIRS[:3] + [(PAIRS[0][0], PAIRS[1][1])]  # an output shared by two cases
    with OpenAIServer(api_key=KEY) as server:
        metric = SemanticSimilarityMetric(
            threshold=0.8,
            embedding_provider="openai",
            model_name=MODEL,
            provider_options={"base_url": server.url + "/v1", "api_key": KEY, "timeout": 60.0},
        )
        result = evaluate_sync(cases_of(pairs), [metric])
        sent = server.sent_inputs()
        billed = server.billed_tokens()
    unique = list(dict.fromkeys(t for pair in pairs for t in pair))
    assert sorted(sent) == sorted(unique)  # each unique text once
    price = PRICES_PER_MILLION_TOKENS[MODEL] / 1e6
    for (output, expected), case in zip(pairs, result.test_results):
        got = case.metrics[0]
        assert abs(got.score - expected_score(cosine, output, expected)) <= EPS  # the server embeds with MiniLM
        assert got.evaluation_log["provider"] == "openai" and got.evaluation_log["model"] == MODEL
        assert got.evaluation_cost > 0.0
    # What was billed is shared out over the cases exactly (a request's cost split by the provider's token counts).
    assert sum(c.metrics[0].evaluation_cost for c in result.test_results) == pytest.approx(billed * price, rel=1e-9)
    assert result.summary.evaluation_cost == pytest.approx(billed * price, rel=1e-9)
    assert billed == sum(usage_tokens(t) for t in unique)


def test_openai_without_key_is_a_clear_credentials_error(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(CredentialsError, match="OPENAI_API_KEY"):
        evaluate_sync(cases_of(PAIRS[:1]), [SemanticSimilarityMetric()])
