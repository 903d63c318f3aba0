"""The generate stage in the ``evaluate-suite`` flow: ``generate-outputs`` task runs (one per batch) on the flow
run's task runner, before the embed stage; results.json's per-case ``generation`` and top-level ``targets``; the
output store making a rerun free; the flow and ``evaluate_sync`` giving equal results (docs/targets.md#the-generate-stage).

Real components: the session's Prefect server (``prefect_api_url``), a real callable as the target (PythonTarget).
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from evaltasks import EvalTestCase, ExactMatchMetric, LengthCheckMetric, evaluate_sync
from evaltasks.targets import PythonTarget

REPO = Path(__file__).resolve().parents[2]
ANSWERS = {"What is 2+2?": "4", "Capital of France?": "Paris", "Colour of the sky?": "green", "Say hi": "hi there"}
EXPECTED = {"What is 2+2?": "4", "Capital of France?": "Paris", "Colour of the sky?": "blue", "Say hi": "hi there"}


class Bot:
    """The system under test: answers from :data:`ANSWERS`, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, case: EvalTestCase) -> dict[str, Any]:
        with self.lock:
            self.calls += 1
        if case.input == "Say hi" and case.vars and case.vars.get("broken"):
            raise ValueError("cannot answer")
        return {"output": ANSWERS[case.input or ""], "cost": 0.25}


def _suite(directory: Path, cluster: str = "") -> Path:
    """A suite over 4 questions whose dataset still holds stale answers (the target's replace them); with
    ``cluster``, a ``topic`` column (two topics) is the dataset's ``cluster``."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [
        {"id": f"q{i}", "input": q, "expected_output": a, "actual_output": "stale", "topic": "ab"[i % 2]}
        for i, (q, a) in enumerate(EXPECTED.items())
    ]
    (directory / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    suite = directory / "suite.yaml"
    suite.write_text(
        f"name: generated\ndataset:\n  path: d.jsonl\n{cluster}metrics:\n  - metric: ExactMatchMetric\n"
        "  - metric: LengthCheckMetric\n    max_length: 1\n    unit: words\ngate: {min_pass_rate: 0}\n",
        encoding="utf-8",
    )
    return suite


def _run(suite: Path, bot: Any, tmp_path: Path, **options: Any) -> tuple[dict[str, Any], Any]:
    """Run the flow on ``suite`` with ``bot`` as its target (a callable, or a list of targets); (results.json, flow
    run id)."""
    from evaltasks.engine.run import PlannedRun, plan_run
    from evaltasks.flows.evaluate_suite import evaluate_suite

    plan = plan_run(suite)
    targets = bot if isinstance(bot, list) else [PythonTarget(bot, name="bot")]
    plan.suite.targets = targets
    state = evaluate_suite(
        suite_path=str(suite),
        output_dir=str(tmp_path / "out"),
        index_dir=str(tmp_path / "index"),
        plan=PlannedRun.of(plan),
        return_state=True,
        **options,
    )
    assert state.is_completed(), state
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    return results, state.state_details.flow_run_id


def _task_run_names(flow_run_id: Any) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    async def read() -> list[Any]:
        async with get_client() as client:
            return await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))

    return [run.name for run in asyncio.run(read())]


@pytest.mark.slow
def test_the_flows_task_runs_take_what_early_generation_made(tmp_path: Path, prefect_api_url: str) -> None:
    """`evaltasks run` starts the target's calls while Prefect starts (docs/targets.md#generation-starts-while-prefect-starts):
    the flow's generate-outputs task runs (Prefect's thread-pool task runner, in a copy of the run context) take
    them, and the results are those of a run without it."""
    from evaltasks.engine.generation import start_early_generation
    from evaltasks.engine.progress import RunContext, run_context
    from evaltasks.engine.run import PlannedRun, plan_run
    from evaltasks.flows.evaluate_suite import evaluate_suite

    suite = _suite(tmp_path / "suite")
    bot = Bot()
    plan = plan_run(suite)
    plan.suite.targets = [PythonTarget(bot, name="bot")]
    early = start_early_generation(plan, str(tmp_path / "index"), refresh=False)
    assert early is not None
    with run_context(RunContext(early_generation=early)):
        state = evaluate_suite(
            suite_path=str(suite),
            output_dir=str(tmp_path / "out"),
            index_dir=str(tmp_path / "index"),
            plan=PlannedRun.of(plan),
            return_state=True,
        )
    early.close()
    assert state.is_completed(), state
    assert (bot.calls, early.taken) == (4, 4)  # each case called once, by early generation, and taken by the flow
    names = _task_run_names(state.state_details.flow_run_id)
    assert sum(name.startswith("generate-outputs") for name in names) == 1
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    plain, _ = _run(suite, Bot(), tmp_path / "plain")
    strip = ("id", "actual_output", "status")
    assert [{k: c[k] for k in strip} for c in results["cases"]] == [{k: c[k] for k in strip} for c in plain["cases"]]
    assert [c["generation"]["cost"] for c in results["cases"]] == [0.25] * 4
    (target,) = results["targets"]
    assert (target["requests"], target["cached"], target["summary"]) == (4, 0, plain["targets"][0]["summary"])


@pytest.mark.slow
def test_the_flow_generates_in_task_runs_then_scores_and_a_rerun_makes_no_call(
    tmp_path: Path, prefect_api_url: str
) -> None:
    suite = _suite(tmp_path / "suite")
    bot = Bot()
    results, flow_run_id = _run(suite, bot, tmp_path)

    assert bot.calls == 4
    names = _task_run_names(flow_run_id)
    assert sum(name.startswith("generate-outputs") for name in names) == 1  # 4 cases: one batch
    assert results["schema_version"] == 4
    cases = results["cases"]
    assert [c["actual_output"] for c in cases] == list(ANSWERS.values())
    assert [c["status"] for c in cases] == ["passed", "passed", "failed", "failed"]  # green != blue; 2 words > 1
    assert all(c["generation"]["target"] == "bot" and c["generation"]["cached"] is False for c in cases)
    (target,) = results["targets"]
    assert (target["name"], target["kind"], target["requests"], target["cached"]) == ("bot", "python", 4, 0)
    assert target["cost"] == pytest.approx(1.0) and target["summary"]["passed_cases"] == 2
    assert results["summary"] == target["summary"]

    import jsonschema

    schema = json.loads((REPO / "evaltasks" / "schema" / "results.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(results)

    again = Bot()
    rerun, _ = _run(suite, again, tmp_path)
    assert again.calls == 0
    assert (rerun["targets"][0]["requests"], rerun["targets"][0]["cached"]) == (0, 4)
    assert [c["actual_output"] for c in rerun["cases"]] == list(ANSWERS.values())
    assert all(c["generation"]["cached"] for c in rerun["cases"])

    fresh = Bot()  # --no-cache: every output generated again
    _run(suite, fresh, tmp_path, cache=False)
    assert fresh.calls == 4


@pytest.mark.slow
def test_the_flow_and_evaluate_sync_give_equal_results(tmp_path: Path, prefect_api_url: str) -> None:
    suite = _suite(tmp_path / "suite")
    flow_results, _ = _run(suite, Bot(), tmp_path)
    cases = [
        EvalTestCase(actual_output="", input=q, expected_output=a, name=f"q{i}")
        for i, (q, a) in enumerate(EXPECTED.items())
    ]
    metrics = [ExactMatchMetric(), LengthCheckMetric(max_length=1, unit="words")]
    api = evaluate_sync(cases, metrics, target=PythonTarget(Bot(), name="bot"))

    def shape(case: dict[str, Any]) -> tuple[Any, ...]:
        generation = {k: v for k, v in case["generation"].items() if k not in ("latency_ms", "cached")}
        metrics = [(m["name"], m["status"], m["score"]) for m in case["metrics"]]
        return case["id"], case["actual_output"], case["status"], json.dumps(generation, sort_keys=True), metrics

    assert [shape(c) for c in flow_results["cases"]] == [shape(r.model_dump(mode="json")) for r in api.test_results]
    flow_summary, api_summary = flow_results["targets"][0]["summary"], api.targets[0].summary.model_dump(mode="json")
    for key in ("cases", "passed_cases", "failed_cases", "errored_cases", "pass_rate"):
        assert flow_summary[key] == api_summary[key], key


class Flip:
    """A candidate whose samples disagree on "What is 2+2?" (right, then wrong) and agree elsewhere."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, case: EvalTestCase) -> str:
        with self.lock:
            n = self.seen[case.input or ""] = self.seen.get(case.input or "", 0) + 1
        if case.input == "What is 2+2?" and n % 2 == 0:
            return "five"
        return ANSWERS[case.input or ""]


@pytest.mark.slow
def test_side_by_side_targets_with_samples_and_a_baseline(tmp_path: Path, prefect_api_url: str) -> None:
    suite = _suite(tmp_path / "suite")
    base, _ = _run(suite, Bot(), tmp_path / "base")
    baseline = str(tmp_path / "base" / "out" / "results.json")

    targets = [PythonTarget(Bot(), name="current"), PythonTarget(Flip(), name="candidate", repeat=2)]
    results, flow_run_id = _run(suite, targets, tmp_path / "both", baseline=baseline, batch_size=3)

    assert [t["name"] for t in results["targets"]] == ["current", "candidate"]
    ids = [c["id"] for c in results["cases"]]
    assert ids == ["q0", "q1", "q2", "q3", "q0", "q0~2", "q1", "q1~2", "q2", "q2~2", "q3", "q3~2"]
    assert [c["generation"]["target"] for c in results["cases"]] == ["current"] * 4 + ["candidate"] * 8
    current, candidate = results["targets"]
    assert current["summary"] == base["summary"] == results["summary"]
    assert candidate["summary"]["cases"] == 8 and candidate["samples"] == 2 and candidate["flaky_cases"] == ["q0"]
    assert (candidate["requests"], candidate["cached"]) == (8, 0)
    flaky = {c["id"] for c in results["cases"] if any(m["evaluation_log"].get("unstable") for m in c["metrics"])}
    assert flaky == {"q0", "q0~2"} and results["cases"][5]["actual_output"] == "five"
    # the baseline is compared with the reference target's cases only: 4 pairs, nothing changed
    assert results["comparison"]["paired_cases"] == 4 and results["comparison"]["changes"] == []
    assert results["comparison"]["flaky_cases"] == []
    assert sum(name.startswith("generate-outputs") for name in _task_run_names(flow_run_id)) == 2  # one per target

    # a results.json of several targets is a baseline too: its reference target's cases
    again, _ = _run(suite, Bot(), tmp_path / "again", baseline=str(tmp_path / "both" / "out" / "results.json"))
    assert again["comparison"]["paired_cases"] == 4 and again["comparison"]["new_cases"] == []


@pytest.mark.slow
def test_one_generation_batch_in_flight_keeps_a_target_to_its_max_concurrency(
    tmp_path: Path, prefect_api_url: str
) -> None:
    from tests.engine.test_generate_stage import Exclusive

    directory = tmp_path / "suite"
    directory.mkdir()
    (directory / "d.jsonl").write_text(
        "".join(json.dumps({"id": f"c{i}", "input": f"question {i}"}) + "\n" for i in range(200)), encoding="utf-8"
    )
    suite = directory / "suite.yaml"
    suite.write_text(
        "name: many\ndataset: {path: d.jsonl}\ntarget: {python: nowhere:nothing}\n"
        "metrics:\n  - {metric: LengthCheckMetric, max_length: 5}\ngate: {min_pass_rate: 0}\n",
        encoding="utf-8",
    )
    (directory / "nowhere.py").write_text("def nothing(case):\n    return ''\n", encoding="utf-8")
    bot = Exclusive()
    results, flow_run_id = _run(suite, [PythonTarget(bot, name="exclusive")], tmp_path)

    assert not bot.overlapped  # max_concurrency 1: the threads task runner never ran two batches at once
    assert sum(name.startswith("generate-outputs") for name in _task_run_names(flow_run_id)) == 4  # 200 / 64
    assert [c["actual_output"] for c in results["cases"]] == [f"question {i}" for i in range(200)]


@pytest.mark.slow
def test_the_generate_outputs_task_in_a_users_own_flow(tmp_path: Path, prefect_api_url: str) -> None:
    from prefect import flow

    from evaltasks.tasks import evaluate_test_cases, generate_outputs

    cases = [
        EvalTestCase(actual_output="", input=q, expected_output=a, name=f"q{i}")
        for i, (q, a) in enumerate(EXPECTED.items())
    ]
    bot = Bot()

    @flow(name="my-pipeline")
    def my_pipeline() -> Any:
        generated = generate_outputs(PythonTarget(bot, name="bot"), cases, index_dir=str(tmp_path / "index"))
        scored = evaluate_test_cases([g.case for g in generated], [ExactMatchMetric()])
        return generated, scored

    generated, scored = my_pipeline()
    assert [g.case.actual_output for g in generated] == list(ANSWERS.values()) and bot.calls == 4
    assert all(g.error is None and g.requested for g in generated)
    assert [r.status for r in scored.test_results] == ["passed", "passed", "failed", "passed"]
    assert [r.generation.target for r in scored.test_results if r.generation] == ["bot"] * 4

    generated, _ = my_pipeline()  # the output store answers: no call
    assert bot.calls == 4 and all(g.case.generation.cached and not g.requested for g in generated)

    @flow(name="my-evaluation")
    def my_evaluation() -> Any:  # generation and scoring in one task run, through the same store
        target = PythonTarget(bot, name="bot")
        return evaluate_test_cases(cases, [ExactMatchMetric()], index_dir=str(tmp_path / "index"), target=target)

    result = my_evaluation()
    assert bot.calls == 4 and result.targets[0].cached == 4 and result.summary.passed_cases == 3


@pytest.mark.slow
def test_cluster_intervals_hold_for_each_targets_samples(tmp_path: Path, prefect_api_url: str) -> None:
    suite = _suite(tmp_path / "suite", cluster="  cluster: topic\n")
    targets = [PythonTarget(Bot(), name="current"), PythonTarget(Flip(), name="candidate", repeat=2)]
    results, _ = _run(suite, targets, tmp_path)

    for target in results["targets"]:
        statistics = target["summary"]["statistics"]
        assert (statistics["cluster"], statistics["clusters"]) == ("topic", 2), target["name"]
    assert results["summary"]["statistics"]["clusters"] == 2
