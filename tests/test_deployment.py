"""Scheduled evaluation against a REAL Prefect server (issue #4, "Scheduled evaluation").

The test starts ``prefect server start`` as a subprocess (its own PREFECT_HOME and SQLite database, a free
port), serves the quickstart suite with the product's own command (``evaltasks serve SUITE --cron ...``) in a
second subprocess pointed at that server, then, through the Prefect client in this process:

- finds the deployment and its cron schedule (and the runs the server's scheduler puts at 06:00 UTC),
- triggers a run with ``run_deployment`` and waits for it to complete (the serve process executes it),
- reads the artifacts back (table, markdown summary, progress) and checks the table's ReferenceMatch mean
  against an independent sentence-transformers + numpy computation, and the run name ``quickstart@<sha8>``.

Nothing is mocked. Both subprocesses run in their own process groups (sessions) and the whole groups are
terminated in ``finally`` blocks, so neither the server nor the serve process (nor a flow run it spawned)
outlives the test, pass or fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timezone
from pathlib import Path

import numpy as np
import pytest

from conftest import subprocess_env

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "examples" / "quickstart" / "suite.yaml"
CRON = "0 6 * * *"
DEPLOYMENT = "quickstart-served"
SERVER_START_TIMEOUT = 120.0
SERVE_TIMEOUT = 120.0
RUN_TIMEOUT = 300
SCHEDULER_TIMEOUT = 300.0  # hang guards only: each wait polls for its condition and ends as soon as it holds
TOL = 1e-6


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _subprocess_env(prefect_home: Path, api_url: str | None) -> dict[str, str]:
    return subprocess_env(prefect_home, api_url)


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a reused id of someone else's group
        return False
    return True


def _terminate_group(proc: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM the process group of ``proc`` (it leads its own session), then SIGKILL what is left."""
    pgid = proc.pid  # start_new_session=True: the child is the leader of its own group
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        if not _group_alive(pgid) and proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.2)
            if proc.poll() is not None and not _group_alive(pgid):
                break
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@contextlib.contextmanager
def _process_group(args: list[str], log: Path, env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen]:
    """Start ``args`` in a new session (its own process group), output to ``log``; always end the group."""
    with open(log, "wb") as handle:
        proc = subprocess.Popen(args, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)
    try:
        yield proc
    finally:
        _terminate_group(proc)  # callers assert the group is gone (not here: it would mask a failure)


def _prefect_cli() -> list[str]:
    script = Path(sys.executable).with_name("prefect")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "prefect"]


def _wait_healthy(api_url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"prefect server exited with {proc.returncode} before answering:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(f"{api_url}/health", timeout=5) as response:
                if response.status == 200 and json.loads(response.read() or b"null") is True:
                    return
                last = f"HTTP {response.status}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last = repr(exc)
        time.sleep(0.5)
    pytest.fail(f"prefect server did not answer /api/health within {timeout:.0f} s ({last}):\n{_tail(log)}")


async def _wait_deployment(name: str, proc: subprocess.Popen, log: Path, timeout: float):
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"`evaltasks serve` exited with {proc.returncode}:\n{_tail(log)}")
            try:
                return await client.read_deployment_by_name(name)
            except ObjectNotFound:
                await asyncio.sleep(0.5)
    pytest.fail(f"deployment {name} did not appear within {timeout:.0f} s:\n{_tail(log)}")


async def _scheduled_runs(deployment_id, timeout: float) -> list:
    """The runs the server's scheduler created for the deployment (waits until there is at least one)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter, DeploymentFilterId, FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while True:
            runs = await client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))),
            )
            if runs or time.monotonic() > deadline:
                return runs
            await asyncio.sleep(1.0)


async def _read_artifacts(flow_run_id) -> dict:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {artifact.key: artifact for artifact in artifacts}


def _expected_reference_match_mean(cosine) -> float:
    rows = [json.loads(line) for line in (QUICKSTART.parent / "answers.jsonl").read_text("utf-8").splitlines()
            if line.strip()]
    assert len(rows) == 8
    scores = [float(np.clip(cosine(row["answer"], row["references"]), 0.0, 1.0).max()) for row in rows]
    return sum(scores) / len(scores)


def test_served_deployment_on_a_real_server(cosine, tmp_path: Path) -> None:
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    expected_rm = _expected_reference_match_mean(cosine)  # before the clock starts on the subprocesses
    suite_sha8 = hashlib.sha256(QUICKSTART.read_bytes()).hexdigest()[:8]

    home = tmp_path / "prefect-home"
    home.mkdir()
    work = tmp_path / "project"  # the serve process runs from a directory of its own, as a user's project
    work.mkdir()
    out_dir, index_dir = tmp_path / "eval-results", tmp_path / "index"
    port = _free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    server_log, serve_log = tmp_path / "server.log", tmp_path / "serve.log"

    server_args = [*_prefect_cli(), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with _process_group(server_args, server_log, _subprocess_env(home, None), work) as server:
        _wait_healthy(api_url, server, server_log, SERVER_START_TIMEOUT)

        serve_args = [sys.executable, "-m", "evaltasks.cli", "serve", str(QUICKSTART), "--cron", CRON,
                      "--name", DEPLOYMENT, "--output-dir", str(out_dir), "--index-dir", str(index_dir)]
        with _process_group(serve_args, serve_log, _subprocess_env(home, api_url), work) as serve, \
                temporary_settings(updates={PREFECT_API_URL: api_url}):
            full_name = f"evaluate-suite/{DEPLOYMENT}"
            deployment = asyncio.run(_wait_deployment(full_name, serve, serve_log, SERVE_TIMEOUT))

            # The deployment: the suite's parameters, one active cron schedule.
            assert deployment.name == DEPLOYMENT
            assert deployment.parameters["suite_path"] == str(QUICKSTART)
            assert deployment.parameters["output_dir"] == str(out_dir)
            assert deployment.parameters["index_dir"] == str(index_dir)
            assert len(deployment.schedules) == 1, deployment.schedules
            schedule = deployment.schedules[0]
            assert schedule.active
            assert isinstance(schedule.schedule, CronSchedule), schedule.schedule
            assert schedule.schedule.cron == CRON
            assert schedule.schedule.timezone in (None, "UTC", "Etc/UTC")  # documented as UTC

            # Trigger a run now; the serve process picks it up and executes it.
            flow_run = run_deployment(name=full_name, timeout=RUN_TIMEOUT, poll_interval=2)
            assert flow_run.state is not None and flow_run.state.is_completed(), (
                f"flow run {flow_run.name} ended as {flow_run.state!r}\n--- serve log ---\n{_tail(serve_log)}"
            )
            assert flow_run.deployment_id == deployment.id
            assert re.fullmatch(r"quickstart@[0-9a-f]{8}", flow_run.name), flow_run.name
            assert flow_run.name == f"quickstart@{suite_sha8}"

            # The reports went where the deployment's parameters said.
            results = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
            assert results["suite"] == "quickstart"

            # The artifacts, read back through the client.
            artifacts = asyncio.run(_read_artifacts(flow_run.id))
            assert {"quickstart-metrics", "quickstart-summary", "quickstart-progress"} <= set(artifacts), \
                sorted(artifacts)
            table = artifacts["quickstart-metrics"]
            assert table.type == "table"
            rows = json.loads(table.data) if isinstance(table.data, str) else table.data
            by_metric = {row["metric"]: row for row in rows}
            assert set(by_metric) == {"ReferenceMatchMetric", "LengthCheckMetric"}
            assert abs(by_metric["ReferenceMatchMetric"]["mean_score"] - expected_rm) <= TOL, (
                by_metric["ReferenceMatchMetric"]["mean_score"], expected_rm)
            assert by_metric["ReferenceMatchMetric"]["mean_score"] == pytest.approx(
                results["summary"]["metrics"]["ReferenceMatchMetric"]["mean_score"], abs=TOL)
            summary = artifacts["quickstart-summary"]
            assert summary.type == "markdown"
            assert summary.data == (out_dir / "summary.md").read_text(encoding="utf-8")
            progress = artifacts["quickstart-progress"]
            assert progress.type == "progress"
            assert float(progress.data) == pytest.approx(100.0)

            # The schedule is live: the server's scheduler queued the next runs at 06:00 UTC.
            scheduled = asyncio.run(_scheduled_runs(deployment.id, timeout=SCHEDULER_TIMEOUT))
            assert scheduled, f"the server scheduled no run of the deployment within {SCHEDULER_TIMEOUT:.0f} s"
            for run in scheduled:
                start = run.expected_start_time.astimezone(timezone.utc)
                assert (start.hour, start.minute, start.second) == (6, 0, 0), start
            serve_pgid = serve.pid
        assert not _group_alive(serve_pgid)
        server_pgid = server.pid
    assert not _group_alive(server_pgid)
