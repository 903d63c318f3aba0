"""What the Prefect server shows of an ``evaluate-suite`` run (README, "Prefect"), read back through the Prefect
client from the session's real server (``prefect_harness``): run tags, artifact descriptions and the metrics
table's verdict column, the flow run's logs from a CLI run, and the progress artifact's timeline."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "examples" / "quickstart" / "suite.yaml"


def _length_suite(directory: Path, words: list[int], *, name: str, gate: str) -> Path:
    """A LengthCheckMetric suite (max 5 words) over outputs of ``words`` words each; returns the suite file."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "d.jsonl").write_text(
        "".join(json.dumps({"id": f"c{i}", "actual_output": " ".join(["w"] * n)}) + "\n" for i, n in enumerate(words)),
        encoding="utf-8")
    suite = directory / "suite.yaml"
    suite.write_text(f"name: {name}\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: LengthCheckMetric\n"
                     f"    max_length: 5\n    unit: words\n{gate}\n", encoding="utf-8")
    return suite


def _read(call):
    """Run ``call(client)`` (a coroutine function) against the session's server."""
    from prefect.client.orchestration import get_client

    async def read():
        async with get_client() as client:
            return await call(client)

    return asyncio.run(read())


def _artifacts(flow_run_id) -> dict:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    artifacts = _read(lambda client: client.read_artifacts(
        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))))
    return {artifact.key: artifact for artifact in artifacts}


def _table(artifact) -> list[dict]:
    data = artifact.data
    return json.loads(data) if isinstance(data, str) else data


def test_tags_and_artifact_descriptions_lead_with_the_verdict(prefect_harness, tmp_path: Path, monkeypatch) -> None:
    """A failing gate in the Action's environment: tags suite, branch (GITHUB_HEAD_REF before GITHUB_REF_NAME) and
    verdict:failed; both artifacts' descriptions start with the gate's message; the table's verdict column is
    empty without a baseline. Against a baseline (itself): verdict:passed, comparison:inconclusive (4 paired cases), and
    the metric's verdict in the table."""
    from evaltasks.flows.evaluate_suite import evaluate_suite

    monkeypatch.setenv("GITHUB_HEAD_REF", "fix/short answers")
    monkeypatch.setenv("GITHUB_REF_NAME", "42/merge")
    failing = _length_suite(tmp_path / "f", [3, 3, 9, 9], name="tags-fail", gate="gate: {min_pass_rate: 0.9}")
    state = evaluate_suite(suite_path=str(failing), output_dir=str(tmp_path / "o1"), index_dir=str(tmp_path / "i"),
                           return_state=True)
    flow_run_id = state.state_details.flow_run_id
    run = _read(lambda client: client.read_flow_run(flow_run_id))
    assert sorted(run.tags) == ["branch:fix/short-answers", "suite:tags-fail", "verdict:failed"]
    artifacts = _artifacts(flow_run_id)
    verdict = "FAILED: gate failed: pass rate 50.00% below 90.00%. "
    assert artifacts["tags-fail-summary"].description == verdict + "Evaluation summary of suite tags-fail"
    assert artifacts["tags-fail-metrics"].description == verdict + "Per-metric results of suite tags-fail"
    [row] = _table(artifacts["tags-fail-metrics"])
    assert (row["metric"], row["passed"], row["failed"], row["verdict"]) == ("LengthCheckMetric", 2, 2, "")
    # the dataset's load is a task run on the run's timeline
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    task_runs = _read(lambda client: client.read_task_runs(
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))))
    [loaded] = [t for t in task_runs if t.name.startswith("load-dataset")]
    assert loaded.state.type.value == "COMPLETED"

    monkeypatch.delenv("GITHUB_HEAD_REF")
    passing = _length_suite(tmp_path / "p", [3, 3, 3, 9], name="tags-pass", gate="gate: {min_pass_rate: 0.5}")
    first = evaluate_suite(suite_path=str(passing), output_dir=str(tmp_path / "o2"), index_dir=str(tmp_path / "i"))
    state = evaluate_suite(suite_path=str(passing), output_dir=str(tmp_path / "o3"), index_dir=str(tmp_path / "i"),
                           baseline=first["results_path"], return_state=True)
    flow_run_id = state.state_details.flow_run_id
    run = _read(lambda client: client.read_flow_run(flow_run_id))
    assert sorted(run.tags) == ["branch:42/merge", "comparison:inconclusive", "suite:tags-pass",
                                "verdict:passed"]
    artifacts = _artifacts(flow_run_id)
    assert artifacts["tags-pass-summary"].description == (
        "PASSED: pass rate 75.00% (3/4), gate 50.00%. Evaluation summary of suite tags-pass")
    [row] = _table(artifacts["tags-pass-metrics"])
    assert row["verdict"] == "inconclusive"  # 4 paired cases cannot detect the gate's min_effect


def test_cli_run_sends_its_info_lines_to_the_server_and_progress_starts_before_embedding(
    prefect_api_url, tmp_path: Path
) -> None:
    """`evaltasks run --quiet` against the session's server: the terminal shows no INFO line, while the flow run's
    logs on the server hold the suite size, the embedding stage and its counts, and the pass-rate verdict; the
    progress artifact exists before the embedding stage starts and ends at 100 %."""
    from conftest import subprocess_env
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags, LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort

    branch = f"surfaces-{uuid.uuid4().hex[:8]}"
    env = subprocess_env(tmp_path / "home", prefect_api_url)
    env.pop("PREFECT_LOGGING_LEVEL", None)
    env["GITHUB_REF_NAME"] = branch
    done = subprocess.run(
        [sys.executable, "-m", "evaltasks.cli", "run", str(QUICKSTART), "--output-dir", str(tmp_path / "out"),
         "--index-dir", str(tmp_path / "index"), "--no-server", "--quiet"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert "Pass rate" not in done.stderr and "INFO" not in done.stderr

    [run] = _read(lambda client: client.read_flow_runs(
        flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[f"branch:{branch}"]))))
    assert {"suite:quickstart", "verdict:passed"} <= set(run.tags)
    logs = _read(lambda client: client.read_logs(
        log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id])), sort=LogSort.TIMESTAMP_ASC))
    messages = [log.message for log in logs]
    assert "Suite 'quickstart': 8 cases × 2 metrics" in messages
    assert "Pass rate 75.00% (gate 70.00%): PASSED" in messages
    embedding = next(log for log in logs if log.message.startswith("Embedding 10 references and 8 outputs with "))
    assert any(m.startswith("Embedded with ") and "'outputs_computed': 8" in m for m in messages)
    assert any(m.startswith("Loaded suite 'quickstart' and its dataset (8 cases) in ") for m in messages)

    progress = _artifacts(run.id)["quickstart-progress"]
    assert progress.created <= embedding.timestamp
    assert float(progress.data) == 100.0
