"""The suite flow on a real Dask LocalCluster (2 worker processes), its outputs generated there by a python target:
scores equal the in-process engine's on the same outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli_forkserver import run_cli
from tests.suite_helpers import reference_suite

ROOT = Path(__file__).resolve().parents[2]


def test_suite_on_dask_localcluster_equals_single_process(tmp_path: Path, prefect_api_url: str) -> None:
    """`evaltasks run --task-runner dask:2`: a real distributed.LocalCluster with 2 worker processes.

    The suite mixes per-case references, a reference set (its FAISS search is loaded lazily from the index in
    each worker) and LengthCheck; its outputs come from a python target (a module of the suite's folder, which
    the workers can only run because the callable travels pickled by value) that answers with the dataset's
    answer column and names the process it ran in. Every output must have been generated on a worker, and
    the scores must equal the in-process engine's on the dataset's own outputs.
    """
    pytest.importorskip("prefect_dask")
    quickstart = ROOT / "examples/quickstart"
    suite = reference_suite(
        tmp_path,
        name="dask-check",
        dataset=quickstart / "answers.jsonl",
        facts=(
            "Paris is the capital of France.\nThe Solar System has eight planets.\nWater boils at 100 °C at sea level.\n"
        ),
    )
    (tmp_path / "dask_bot.py").write_text(
        "import multiprocessing\n\n"
        "def respond(case):\n"
        "    process = multiprocessing.current_process().name\n"
        "    return {'output': case.vars['answer'], 'metadata': {'process': process}}\n",
        encoding="utf-8",
    )
    with suite.open("a", encoding="utf-8") as file:
        file.write("target: {python: dask_bot:respond}\n")
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_API_URL": prefect_api_url}
    run = run_cli(
        "run",
        str(suite),
        "--task-runner",
        "dask:2",
        "--batch-size",
        "3",
        "--no-cache",
        "--quiet",
        "--output-dir",
        str(tmp_path / "out"),
        "--index-dir",
        str(tmp_path / "idx"),
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr, run.stderr[-5000:]  # which one, when it happens (under load, at shutdown)
    distributed = json.loads((tmp_path / "out/results.json").read_text())

    from evaltasks import evaluate_sync
    from evaltasks.engine.run import plan_run

    plan = plan_run(suite, use_targets=False)  # the dataset's own answers: the outputs the target gave
    local = evaluate_sync(plan.dataset.cases, plan.suite.metrics, ids=plan.dataset.ids)
    assert len(distributed["cases"]) == len(local.test_results) == 8
    assert [t["name"] for t in distributed["targets"]] == ["python"] and distributed["targets"][0]["requests"] == 8
    for remote_case, local_case in zip(distributed["cases"], local.test_results):
        assert remote_case["id"] == local_case.id
        assert remote_case["actual_output"] == local_case.actual_output
        assert remote_case["generation"]["metadata"]["process"] == "Dask Worker process (from Nanny)"
        for remote, mine in zip(remote_case["metrics"], local_case.metrics):
            assert remote["name"] == mine.name
            assert abs(remote["score"] - mine.score) <= 1e-6 and remote["success"] == mine.success
