"""The Prefect artifacts of a two-target run (evaltasks.tasks.publish_artifacts in a real flow run on the session's
Prefect server), read back through the Prefect client: the ``<suite>-targets`` table (each target's metrics
against the first) and the summary artifact's "Targets side by side"."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from evaltasks.engine.run import plan_run
from evaltasks.engine.side_by_side import target_rows
from evaltasks.reports.outcome import finish_run
from tests.side_by_side_helpers import CASES, two_target_result
from tests.suite_helpers import length_suite


def _artifacts(flow_run_id: Any) -> dict[str, Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async def read() -> Any:
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
            )

    return {artifact.key: artifact for artifact in asyncio.run(read())}


@pytest.mark.slow
def test_the_targets_artifact_and_the_summary_show_each_target_against_the_first(
    prefect_harness: None, tmp_path: Path
) -> None:
    from prefect import flow
    from prefect.runtime import flow_run

    from evaltasks.tasks import publish_artifacts

    plan = plan_run(length_suite(tmp_path / "s", [2] * CASES, name="sbs-artifacts"))
    result = two_target_result(tmp_path / "index")
    outcome = finish_run(plan, result, tmp_path / "out", time.time())
    assert outcome.side_by_side is not None

    @flow(name="sbs-artifacts")
    def publish() -> tuple[str, list[str]]:
        return str(flow_run.id), publish_artifacts(outcome.report, result.test_results)

    run_id, keys = publish()
    assert keys == ["sbs-artifacts-metrics", "sbs-artifacts-summary", "sbs-artifacts-targets"]
    artifacts = _artifacts(run_id)
    table = artifacts["sbs-artifacts-targets"].data
    rows = json.loads(table) if isinstance(table, str) else table
    assert rows == json.loads(json.dumps(target_rows(outcome.side_by_side)))
    overall = {row["target"]: row for row in rows if row["metric"] == "all cases"}
    assert overall["current"]["verdict"] == "reference" and overall["candidate"]["verdict"] == "regressed"
    assert overall["candidate"]["pass_rate"] == 0.6 and overall["candidate"]["pass_rate_delta"] == pytest.approx(-0.3)
    assert overall["candidate"]["pass_rate_p"] == pytest.approx(24 / 2048, abs=1e-6)  # exact McNemar (10, 1)
    assert overall["candidate"]["latency_ms_median"] == 250.0
    assert artifacts["sbs-artifacts-targets"].description.startswith("PASSED: pass rate 90.00%")
    markdown = artifacts["sbs-artifacts-summary"].data
    assert "## Targets side by side" in markdown and "### Cases the targets split (11)" in markdown
    assert "<details>" not in markdown  # Prefect's flavour: its UI shows <details> open
