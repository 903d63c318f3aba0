"""What the Prefect server shows of an ``evaluate-suite`` run (docs/prefect.md#prefect), read back through the Prefect
client from the session's real server (``prefect_harness``): the flow run's final state and message (the verdict
line), its tags, the task runs on its timeline, the artifacts' descriptions and the metrics table, and the
progress artifact as it advances through embedding and scoring; and the stages the flow reports for the terminal
(``evaltasks.engine.progress``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.suite_helpers import length_suite


def _read(call: Any) -> Any:
    """Run ``call(client)`` (a coroutine function) against the session's server."""
    from prefect.client.orchestration import get_client

    async def read() -> Any:
        async with get_client() as client:
            return await call(client)

    return asyncio.run(read())


def _artifacts(flow_run_id: Any) -> dict[str, Any]:
    """The flow run's artifacts by key."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    artifacts = _read(
        lambda client: client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    )
    return {artifact.key: artifact for artifact in artifacts}


def _task_runs(flow_run_id: Any) -> list[Any]:
    """The flow run's task runs, in the order they started."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    runs = _read(
        lambda client: client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    )
    return sorted(runs, key=lambda run: run.start_time)


def _table(artifact: Any) -> list[dict[str, Any]]:
    data = artifact.data
    return json.loads(data) if isinstance(data, str) else data


def test_a_failed_gate_is_a_failed_run_led_by_the_verdict_and_tagged(
    prefect_harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing gate in the Action's environment: the run ends Failed with the verdict line as its message (on
    the server too); tags suite, branch (GITHUB_HEAD_REF before GITHUB_REF_NAME) and verdict:failed; the suite's
    load is a load-dataset task run; both artifacts' descriptions start with the verdict line; without a baseline
    the metrics table has no comparison columns. results.json keeps the gate's own message."""
    from evaltasks.errors import GateFailed
    from evaltasks.flows.evaluate_suite import evaluate_suite

    monkeypatch.setenv("GITHUB_HEAD_REF", "fix/short answers")
    monkeypatch.setenv("GITHUB_REF_NAME", "42/merge")
    failing = length_suite(tmp_path / "f", [3, 3, 9, 9], name="surfaces-fail", gate="gate: {min_pass_rate: 0.9}")
    state = evaluate_suite(
        suite_path=str(failing), output_dir=str(tmp_path / "o1"), index_dir=str(tmp_path / "i"), return_state=True
    )
    verdict = "FAILED: pass rate 50.00% (2 of 4 cases), gate 90.00%"
    assert state.is_failed() and state.message == verdict
    with pytest.raises(GateFailed, match=r"^gate failed: pass rate 50\.00% below 90\.00%$"):
        state.result()
    results = json.loads((tmp_path / "o1" / "results.json").read_text(encoding="utf-8"))
    assert results["gate"]["message"] == "gate failed: pass rate 50.00% below 90.00%"

    flow_run_id = state.state_details.flow_run_id
    run = _read(lambda client: client.read_flow_run(flow_run_id))
    assert (run.state.type.value, run.state.message) == ("FAILED", verdict)
    assert sorted(run.tags) == ["branch:fix/short-answers", "suite:surfaces-fail", "verdict:failed"]
    names = [task_run.name.rsplit("-", 1)[0] for task_run in _task_runs(flow_run_id)]
    assert names == ["load-dataset", "score-batch"]  # no embedding metric: nothing to load or embed
    artifacts = _artifacts(flow_run_id)
    assert artifacts["surfaces-fail-summary"].description == f"{verdict}. Evaluation summary of suite surfaces-fail"
    assert artifacts["surfaces-fail-metrics"].description == f"{verdict}. Per-metric results of suite surfaces-fail"
    [row] = _table(artifacts["surfaces-fail-metrics"])
    assert (row["metric"], row["pass_rate"], row["passed"], row["failed"]) == ("LengthCheckMetric", 0.5, 2, 2)
    assert not {"verdict", "mean_delta", "pass_rate_delta"} & set(row)


def test_a_passing_run_against_a_baseline_states_the_change(
    prefect_harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a baseline where case c2 failed: the run ends Completed with the verdict line (the pass rate's
    change, the newly passing case, the comparison's verdict) as its message and in the artifacts' descriptions;
    tags verdict:passed and comparison:<verdict>; the metrics table has the metric's verdict and its deltas."""
    from evaltasks.flows.evaluate_suite import evaluate_suite

    monkeypatch.delenv("GITHUB_HEAD_REF", raising=False)
    monkeypatch.setenv("GITHUB_REF_NAME", "main")
    gate = "gate: {min_pass_rate: 0.5}"
    before = evaluate_suite(
        suite_path=str(length_suite(tmp_path / "b", [3, 3, 9, 9], name="surfaces-pass", gate=gate)),
        output_dir=str(tmp_path / "o1"),
        index_dir=str(tmp_path / "i"),
    )
    state = evaluate_suite(
        suite_path=str(length_suite(tmp_path / "p", [3, 3, 3, 9], name="surfaces-pass", gate=gate)),
        output_dir=str(tmp_path / "o2"),
        index_dir=str(tmp_path / "i"),
        baseline=before["results_path"],
        return_state=True,
    )
    verdict = (
        "PASSED: pass rate 75.00% (+25.00 points since the baseline), gate 50.00%; 0 cases newly failing, "
        "1 newly passing; inconclusive against the baseline"
    )
    assert state.is_completed() and state.message == verdict and state.result()["passed"] is True

    flow_run_id = state.state_details.flow_run_id
    run = _read(lambda client: client.read_flow_run(flow_run_id))
    assert (run.state.type.value, run.state.message) == ("COMPLETED", verdict)
    assert sorted(run.tags) == ["branch:main", "comparison:inconclusive", "suite:surfaces-pass", "verdict:passed"]
    artifacts = _artifacts(flow_run_id)
    assert artifacts["surfaces-pass-summary"].description == f"{verdict}. Evaluation summary of suite surfaces-pass"
    assert artifacts["surfaces-pass-metrics"].description.startswith(f"{verdict}. ")
    [row] = _table(artifacts["surfaces-pass-metrics"])
    assert list(row)[:4] == ["metric", "verdict", "mean_delta", "pass_rate_delta"]  # what changed comes first
    assert (row["verdict"], row["mean_delta"], row["pass_rate_delta"], row["pass_rate"]) == (
        "inconclusive",
        0.25,
        0.25,
        0.75,
    )


def test_the_timeline_stages_and_progress_of_an_embedding_run(prefect_harness, tmp_path: Path) -> None:
    """2,000 cases × (LengthCheck, ReferenceMatch) with the real local model and a fresh index: the stages reach
    the stage callback in order with their totals, and the counts advanced in each add up to its total; the
    progress artifact exists (0 %) when embedding starts and, read back from the server at each advance, takes
    intermediate values during embedding (one per chunk of texts) before it ends at 100 %; the model's load is a
    load-embedding-model task run between load-dataset and the embedding task runs."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    from evaltasks.engine import progress as _progress
    from evaltasks.flows.evaluate_suite import evaluate_suite

    n = 2000
    (tmp_path / "d.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "id": f"q{i}",
                    "input": f"What is item {i}?",
                    "actual_output": f"It is item number {i}.",
                    "references": [f"Item {i} is the answer."],
                }
            )
            + "\n"
            for i in range(n)
        ),
        encoding="utf-8",
    )
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: surfaces-progress\ndataset:\n  path: d.jsonl\nmetrics:\n"
        "  - metric: LengthCheckMetric\n    max_length: 30\n    unit: words\n"
        "  - metric: ReferenceMatchMetric\n    threshold: 0.5\n    embedding_provider: local\n",
        encoding="utf-8",
    )

    def progress_now() -> float | None:
        """The progress artifact's value on the server now (None: not created yet); called in the flow's thread."""
        with get_client(sync_client=True) as client:
            found = client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["surfaces-progress-progress"])),
                sort=ArtifactSort.CREATED_DESC,
                limit=1,
            )
        return float(found[0].data) if found else None

    stages: list[list[Any]] = []  # [description, total, units advanced]
    seen: list[tuple[str, float | None]] = []  # (stage, the artifact's value) at each stage start and advance

    def on_stage(description: str, total: int | None) -> None:
        stages.append([description, total, 0])
        seen.append((description, progress_now()))

    def on_advance(count: int) -> None:
        if not stages:  # counted before any stage was announced
            stages.append(["(no stage)", None, 0])
        stages[-1][2] += count
        seen.append((stages[-1][0], progress_now()))

    _progress.set_stage_callback(on_stage)
    _progress.set_progress_callback(on_advance)
    try:
        state = evaluate_suite(
            suite_path=str(suite),
            output_dir=str(tmp_path / "out"),
            index_dir=str(tmp_path / "index"),
            return_state=True,
        )
    finally:
        _progress.set_stage_callback(None)
        _progress.set_progress_callback(None)
    assert state.is_completed(), state

    assert stages == [
        ["loading the model all-MiniLM-L6-v2", None, 0],
        ["embedding 4,000 texts", 4000, 4000],
        ["scoring 2,000 cases × 2 metrics", 4000, 4000],
    ]
    embedding = [value for stage, value in seen if stage == "embedding 4,000 texts"]
    assert embedding[0] == 0.0  # created before anything was embedded
    # 2,000 references and 2,000 outputs in chunks of 512 texts: 8 updates, 4,000 of the run's 8,000 units
    assert embedding[1:] == pytest.approx([100 * t / 8000 for t in (512, 1024, 1536, 2000, 2512, 3024, 3536, 4000)])
    scoring = [value for stage, value in seen if stage.startswith("scoring")]
    assert scoring[-1] == 100.0 and all(50.0 <= value <= 100.0 for value in scoring)

    names = [task_run.name.rsplit("-", 1)[0] for task_run in _task_runs(state.state_details.flow_run_id)]
    assert names[:2] == ["load-dataset", "load-embedding-model"]
    assert sorted(names[2:10]) == ["embed-outputs"] * 4 + ["embed-references"] * 4
    assert set(names[10:]) == {"score-batch"}
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert results["summary"]["embeddings"]["references_computed"] == n
