"""The pipeline's two executors (evaltasks.engine.pipeline) give the same results, bit for bit.

The same cases and metrics (a deterministic metric, a vector metric on the bundled all-MiniLM-L6-v2, and a judge
metric whose real OpenAI-SDK client talks to a loopback chat server) run through ``evaluate_sync`` (the
in-process executor) and through the pipeline's Prefect executor inside a real flow run (``score-batch`` task
runs on the threads runner, the task cache on, ``embed-references``/``embed-outputs`` task runs). Every case's
scores, reasons, statuses and logs, the summary, and the embedding counts and models must be equal; the chat
server must have been asked the same questions by both. Nothing is mocked.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from evaltasks.engine import pipeline
from evaltasks.engine.embedding import collect_embedding_needs
from evaltasks.engine.evaluate import evaluate_sync
from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.deterministic.exact_match import ExactMatchMetric
from evaltasks.metrics.vector.semantic_similarity import SemanticSimilarityMetric
from evaltasks.results import EvaluationResult
from evaltasks.test_case import EvalTestCase, assign_ids
from tests.chat_server import ChatRequest, ChatServer
from tests.judge_helpers import server_options
from tests.judge_metric import VerdictMetric

KEY = "sk-test-pipeline"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BATCH = 4  # 10 cases: batches of 4, 4 and 2, so the executors fold several batches in order


def _cases(run: str) -> list[EvalTestCase]:
    """10 cases whose outputs are right, wrong or reworded; ``run`` makes the inputs (and so Prefect's task
    cache keys) this test's own."""
    answers = [
        ("Paris", "Paris"),
        ("Paris is the capital of France", "The capital of France is Paris"),
        ("Berlin", "Paris"),
        ("a correct answer", "a correct answer"),
        ("4", "four"),
        ("The sky is blue", "The sky appears blue"),
        ("", "empty"),
        ("Water boils at 100 C", "100 C"),
        ("correct, I think", "correct"),
        ("Mount Everest", "K2"),
    ]
    return [
        EvalTestCase(input=f"question {i} of {run}", actual_output=output, expected_output=expected)
        for i, (output, expected) in enumerate(answers)
    ]


def _metrics(server: ChatServer) -> list[BaseMetric]:
    """Fresh metric objects (a run binds its judge metrics): exact match, semantic similarity, a judge."""
    return [
        ExactMatchMetric(),
        SemanticSimilarityMetric(embedding_provider="local", threshold=0.6),
        VerdictMetric(threshold=0.5, model="judge-model", judge_options=server_options(server)),
    ]


def _answer(request: ChatRequest) -> str:
    """The judge's answer: score 1 when the answer line says "correct", else 0, with a reason naming it."""
    answer = request.user.rsplit("Answer:", 1)[-1]
    score = 1 if "correct" in answer.lower() else 0
    return json.dumps({"score": score, "reason": f"judged {answer.strip()[:40]!r}"})


def _through_prefect(cases: Sequence[EvalTestCase], metrics: Sequence[BaseMetric]) -> EvaluationResult:
    """The same stages as ``evaluate_sync``, run by the Prefect executor inside a flow run."""
    from prefect import flow

    from evaltasks.flows._prefect_executor import PrefectExecutor

    @flow(name="pipeline-executors-test")
    def run_stages() -> EvaluationResult:
        pipeline.validate(cases, metrics)
        return pipeline.run(
            cases,
            assign_ids(cases),
            metrics,
            needs=collect_embedding_needs(cases, metrics),
            index=None,
            executor=PrefectExecutor(cache=True),
            batch_size=BATCH,
            wiring=pipeline.JudgeWiring(),
        )

    return run_stages()


def _asked(server: ChatServer, first: int, last: int) -> list[str]:
    """The user messages of the server's requests ``first`` to ``last`` (exclusive), sorted (threads send in
    any order)."""
    return sorted(request.body["messages"][-1]["content"] for request in server.requests[first:last])


def test_in_process_and_prefect_executors_give_the_same_results_bit_for_bit(prefect_harness, monkeypatch: Any) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    cases = _cases(uuid.uuid4().hex)
    with ChatServer(api_key=KEY, responder=_answer) as server:
        direct = evaluate_sync(cases, _metrics(server), batch_size=BATCH)
        sent = len(server.requests)
        prefect = _through_prefect(cases, _metrics(server))
        assert sent == len(cases) and len(server.requests) == 2 * len(cases)  # each executor judged every case
        assert _asked(server, 0, sent) == _asked(server, sent, 2 * sent)

    # real values, not only equal ones: the metrics scored what they should
    exact = [case.metrics[0].score for case in direct.test_results]
    assert exact == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    similarity = [case.metrics[1].score for case in direct.test_results]
    assert similarity[0] == pytest.approx(1.0, abs=1e-6) and 0.6 < similarity[1] < 1.0 and similarity[2] < 0.6
    assert [case.metrics[2].score for case in direct.test_results] == [0, 0, 0, 1, 0, 0, 0, 0, 1, 0]
    assert direct.summary.embeddings.outputs_computed > 0 and direct.embedding_models[0].dimensions == 384

    # bit for bit: every case result (scores as floats, reasons, statuses, logs), the summary, the embeddings
    assert [c.model_dump() for c in prefect.test_results] == [c.model_dump() for c in direct.test_results]
    assert prefect.summary.model_dump() == direct.summary.model_dump()
    assert [m.model_dump() for m in prefect.embedding_models] == [m.model_dump() for m in direct.embedding_models]
    assert [case.metrics[1].score for case in prefect.test_results] == similarity  # exact float equality


FACTS = "Paris is the capital of France.\nThe Solar System has eight planets.\nWater boils at 100 °C at sea level.\n"


def test_the_flow_and_evaluate_sync_run_the_same_stages_case_by_case(tmp_path: Path, prefect_harness) -> None:
    """The ``evaluate-suite`` flow (Prefect executor, results streamed into results.json) and ``evaluate_sync``
    (in-process executor) over the same suite: ReferenceMatch against each case's references, ReferenceMatch
    against a reference set (the search stage: a FAISS search built by the flow, loaded by the second run from the
    same index) and LengthCheck. Every case's scores, statuses and reasons in results.json equal the in-process
    ones, and so do the pass rate and the reference set's recall."""
    from evaltasks.engine.run import plan_run
    from evaltasks.flows.evaluate_suite import evaluate_suite
    from tests.suite_helpers import reference_suite

    suite = reference_suite(tmp_path, name="executors", dataset=EXAMPLES / "quickstart" / "answers.jsonl", facts=FACTS)
    index = tmp_path / "index"
    flowed = evaluate_suite(
        suite_path=str(suite), output_dir=str(tmp_path / "out"), index_dir=str(index), batch_size=3, cache=False
    )
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))

    plan = plan_run(str(suite))
    direct = evaluate_sync(plan.dataset.cases, plan.suite.metrics, index_dir=index, ids=plan.dataset.ids, batch_size=3)
    assert [case["id"] for case in results["cases"]] == plan.dataset.ids and len(plan.dataset.ids) == 8
    flowed_metrics = [
        [(m["name"], m["score"], m["status"], m["reason"]) for m in case["metrics"]] for case in results["cases"]
    ]
    direct_metrics = [[(m.name, m.score, m.status, m.reason) for m in case.metrics] for case in direct.test_results]
    assert flowed_metrics == direct_metrics
    assert {name for name, *_ in flowed_metrics[0]} == {"ReferenceMatchMetric", "facts", "LengthCheckMetric"}
    assert any(status == "passed" for case in flowed_metrics for _, _, status, _ in case)
    assert flowed["summary"]["pass_rate"] == direct.summary.pass_rate
    [reference_set] = results["reference_sets"]
    assert reference_set["recall_at_10"] == direct.reference_sets[0].recall_at_10 == 1.0  # flat: exact
    assert direct.summary.embeddings.outputs_computed == 0  # the second run read every vector from the index
