"""Scheduled evaluation against a REAL Prefect server (docs/prefect.md#deploy-with-prefectyaml).

The test starts ``prefect server start`` as a subprocess (its own PREFECT_HOME and SQLite database, a free
port), serves the quickstart suite with the product's own command (``evaltasks serve SUITE --cron ...``) in a
second subprocess pointed at that server, then, through the Prefect client in this process:

- finds the deployment and its cron schedule (and the runs the server's scheduler puts at 06:00 UTC),
- triggers a run with ``run_deployment`` and waits for it to complete (the serve process executes it),
- reads the artifacts back (table, markdown summary, progress) and checks the table's ReferenceMatch mean
  against an independent sentence-transformers + numpy computation, and the run name ``quickstart@<sha8>``.

The same server (one per session) takes the ``prefect.yaml`` path of docs/prefect.md#deploy-with-prefectyaml: ``prefect work-pool create``, ``prefect
deploy`` of the quickstart deployment from a copy of the project, ``prefect worker start``, ``prefect deployment
run``; the reports land in the project directory with the quickstart's numbers.

The other tests run ``evaltasks serve`` where it must refuse: invalid flags, no configured server, an
unreachable one (exit 2, one line), and a failure while serving (exit 3, the traceback in a file; the one
stand-in there is a local HTTP server that answers /health and fails everything else).

Nothing is mocked. Every subprocess runs in its own process group (session) and the whole group is terminated in
a ``finally`` block, so neither the server, the serve process nor the worker (nor a flow run they spawned)
outlives the test session, pass or fail.
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
from typing import NamedTuple

import numpy as np
import pytest
import yaml

from tests.process_env import subprocess_env

REPO = Path(__file__).resolve().parents[2]
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
        proc = subprocess.Popen(
            args,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        _terminate_group(proc)  # callers assert the group is gone (not here: it would mask a failure)


def _prefect_cli() -> list[str]:
    """Prefect's CLI on this interpreter (a ``prefect`` script's shebang may name another environment's Python,
    and a worker starts its flow runs with its own interpreter)."""
    return [sys.executable, "-m", "prefect"]


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
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    deadline = time.monotonic() + timeout
    async with get_client() as client:
        while True:
            runs = await client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))
                ),
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
    rows = [
        json.loads(line)
        for line in (QUICKSTART.parent / "answers.jsonl").read_text("utf-8").splitlines()
        if line.strip()
    ]
    assert len(rows) == 8
    scores = [float(np.clip(cosine(row["answer"], row["references"]), 0.0, 1.0).max()) for row in rows]
    return sum(scores) / len(scores)


def _serve_exit(
    args: list[str], env: dict[str, str], cwd: Path, log: Path, timeout: float = SERVE_TIMEOUT
) -> tuple[int | None, str]:
    """Run ``evaltasks serve ARGS`` in its own process group until it exits (or ``timeout``: then the group is
    ended and the code is None); returns the exit code and the output (stdout and stderr together)."""
    with _process_group([sys.executable, "-m", "evaltasks.cli", "serve", *args], log, env, cwd) as proc:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
        code = proc.poll()
    return code, _tail(log, 20000)


def _one_error_line(code: int | None, output: str, expected_code: int = 2) -> str:
    assert code == expected_code, f"exit {code} (expected {expected_code}):\n{output}"
    assert "Traceback" not in output, output
    assert "serving deployment" not in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("evaltasks: error: "), output
    return lines[0]


SERVE_INVALID = {  # case -> (extra arguments, needles in the one error line)
    "cron": (["--cron", "not a cron"], ["--cron 'not a cron'", "Invalid cron string", "five fields"]),
    "cron-minute-61": (["--cron", "61 6 * * *"], ["--cron '61 6 * * *'", "Invalid cron string"]),
    "name-slash": (["--name", "bad/name"], ["--name 'bad/name'", "cannot contain / % & > <", "(found /)"]),
    "name-ampersand": (["--name", "a&b<c"], ["--name 'a&b<c'", "(found & <)"]),
    "long-suite-name": ([], ["the suite name (the default --name)", "at most 255 bytes (UTF-8), got 315"]),
    "output-dir": (["--output-dir", "{file}/reports"], ["--output-dir", "is a file, not a directory"]),
}


@pytest.mark.parametrize("case", list(SERVE_INVALID))
def test_serve_rejects_invalid_flags_with_exit_2(tmp_path: Path, case: str) -> None:
    """Invalid --cron, deployment name (--name or the suite's name) or --output-dir: one line naming the flag
    and the rule, exit 2, nothing served (they printed Prefect's traceback and exited 1, the failed-gate code,
    or served reports into a file). PREFECT_API_URL points at a port nobody listens on: the flags are checked
    before the server."""
    args, needles = SERVE_INVALID[case]
    suite = QUICKSTART
    if case == "long-suite-name":
        suite = tmp_path / "long.yaml"
        suite.write_text(
            QUICKSTART.read_text(encoding="utf-8")
            .replace("name: quickstart", "name: " + "a" * 315)
            .replace("path: answers.jsonl", f"path: {QUICKSTART.parent / 'answers.jsonl'}"),
            encoding="utf-8",
        )
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    args = [arg.replace("{file}", str(tmp_path / "a-file")) for arg in args]
    env = _subprocess_env(tmp_path / "prefect-home", f"http://127.0.0.1:{_free_port()}/api")
    code, output = _serve_exit([str(suite), *args], env, tmp_path, tmp_path / "serve.log")
    line = _one_error_line(code, output)
    for needle in needles:
        assert needle in line, (needle, line)


def test_serve_without_a_configured_server_exits_2(tmp_path: Path) -> None:
    """No PREFECT_API_URL: serve refuses (it used to start a temporary server that never schedules a run, say
    "serving" and print websocket tracebacks) and says what to start."""
    env = _subprocess_env(tmp_path / "prefect-home", None)
    code, output = _serve_exit([str(QUICKSTART)], env, tmp_path, tmp_path / "serve.log")
    line = _one_error_line(code, output)
    for needle in (
        "PREFECT_API_URL is not set",
        "`prefect server start` in another terminal",
        "`prefect config set PREFECT_API_URL=http://127.0.0.1:4200/api`",
        "Prefect Cloud",
    ):
        assert needle in line, (needle, line)


def test_serve_with_an_unreachable_server_exits_2(tmp_path: Path) -> None:
    """PREFECT_API_URL set, nothing listening there: one line saying the server cannot be reached, exit 2."""
    api_url = f"http://127.0.0.1:{_free_port()}/api"
    env = _subprocess_env(tmp_path / "prefect-home", api_url)
    code, output = _serve_exit([str(QUICKSTART)], env, tmp_path, tmp_path / "serve.log")
    line = _one_error_line(code, output)
    assert f"the Prefect server at {api_url} (PREFECT_API_URL) cannot be reached" in line, line
    assert "Connection refused" in line, line


def test_serve_failure_after_validation_exits_3_with_a_traceback_file(tmp_path: Path) -> None:
    """A failure while serving (here the server answers /health, then 500 to everything) is an abort: exit 3,
    a short message and the traceback in <output-dir>/evaltasks-error.log, none on the terminal (it was a bare
    traceback and exit 1). The server is a stand-in on 127.0.0.1 (a real Prefect server cannot be made to
    fail on demand); the Prefect client in the serve process is real."""
    import http.server
    import threading

    class Failing(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0) or 0))
            healthy = self.path.rstrip("/").endswith("/health")
            body = b"true" if healthy else json.dumps({"detail": "deliberate failure"}).encode()
            self.send_response(200 if healthy else 500)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out_dir = tmp_path / "eval-results"
    try:
        env = _subprocess_env(tmp_path / "prefect-home", f"http://127.0.0.1:{server.server_address[1]}/api")
        code, output = _serve_exit(
            [str(QUICKSTART), "--output-dir", str(out_dir)], env, tmp_path, tmp_path / "serve.log"
        )
    finally:
        server.shutdown()
        server.server_close()
    assert code == 3, f"exit {code}:\n{output}"
    assert "Traceback" not in output, output
    assert "evaltasks: error: the run aborted: PrefectHTTPStatusError: Server error '500" in output, output
    log = out_dir / "evaltasks-error.log"
    assert f"full traceback: {log}" in output, output
    assert log.read_text(encoding="utf-8").startswith("Traceback (most recent call last)")


class PrefectServer(NamedTuple):
    """A running ``prefect server start`` subprocess: its API URL, its PREFECT_HOME and its log file."""

    api_url: str
    home: Path
    log: Path


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    """One real ``prefect server start`` on 127.0.0.1 (free port, own PREFECT_HOME and SQLite) for the session;
    its process group is gone afterwards."""
    root = tmp_path_factory.mktemp("prefect-server")
    home = root / "prefect-home"
    home.mkdir()
    port = _free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    log = root / "server.log"
    server_args = [*_prefect_cli(), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with _process_group(server_args, log, _subprocess_env(home, None), root) as server:
        _wait_healthy(api_url, server, log, SERVER_START_TIMEOUT)
        yield PrefectServer(api_url, home, log)
        server_pgid = server.pid
    assert not _group_alive(server_pgid)


def test_served_deployment_on_a_real_server(cosine, prefect_server: PrefectServer, tmp_path: Path) -> None:
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    expected_rm = _expected_reference_match_mean(cosine)  # before the clock starts on the subprocesses
    suite_sha8 = hashlib.sha256(QUICKSTART.read_bytes()).hexdigest()[:8]

    home, api_url = prefect_server.home, prefect_server.api_url
    work = tmp_path / "project"  # the serve process runs from a directory of its own, as a user's project
    work.mkdir()
    out_dir, index_dir = tmp_path / "eval-results", tmp_path / "index"
    serve_log = tmp_path / "serve.log"

    # An invalid schedule is refused before anything is registered (the valid serve below then finds no
    # deployment of that name but its own, with its own cron).
    code, output = _serve_exit(
        [str(QUICKSTART), "--cron", "not a cron", "--name", DEPLOYMENT],
        _subprocess_env(home, api_url),
        work,
        tmp_path / "invalid-serve.log",
    )
    assert "--cron 'not a cron'" in _one_error_line(code, output)

    serve_args = [
        sys.executable,
        "-m",
        "evaltasks.cli",
        "serve",
        str(QUICKSTART),
        "--cron",
        CRON,
        "--name",
        DEPLOYMENT,
        "--output-dir",
        str(out_dir),
        "--index-dir",
        str(index_dir),
    ]
    with (
        _process_group(serve_args, serve_log, _subprocess_env(home, api_url), work) as serve,
        temporary_settings(updates={PREFECT_API_URL: api_url}),
    ):
        full_name = f"evaluate-suite/{DEPLOYMENT}"
        deployment = asyncio.run(_wait_deployment(full_name, serve, serve_log, SERVE_TIMEOUT))

        # The deployment: the suite's parameters, one active cron schedule.
        assert deployment.name == DEPLOYMENT
        assert f"serving deployment '{full_name}' on cron '{CRON}' (Ctrl+C to stop)" in _tail(serve_log)
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

        # The serve process printed the run's verdict line (the flow run's output streams to its terminal).
        verdict = f"quickstart@{suite_sha8}: PASSED: pass rate 75.00% (6 of 8 cases), gate "
        deadline = time.monotonic() + 60  # the runner relays the subprocess's output as it comes
        while verdict not in _tail(serve_log) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert f"(reports: {out_dir / 'results.json'})" in next(
            (line for line in _tail(serve_log).splitlines() if line.startswith(verdict)), ""
        ), _tail(serve_log)

        # The reports went where the deployment's parameters said.
        results = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
        assert results["suite"] == "quickstart"

        # The artifacts, read back through the client.
        artifacts = asyncio.run(_read_artifacts(flow_run.id))
        assert {"quickstart-metrics", "quickstart-summary", "quickstart-progress"} <= set(artifacts), sorted(artifacts)
        table = artifacts["quickstart-metrics"]
        assert table.type == "table"
        rows = json.loads(table.data) if isinstance(table.data, str) else table.data
        by_metric = {row["metric"]: row for row in rows}
        assert set(by_metric) == {"ReferenceMatchMetric", "LengthCheckMetric"}
        assert abs(by_metric["ReferenceMatchMetric"]["mean_score"] - expected_rm) <= TOL, (
            by_metric["ReferenceMatchMetric"]["mean_score"],
            expected_rm,
        )
        assert by_metric["ReferenceMatchMetric"]["mean_score"] == pytest.approx(
            results["summary"]["metrics"]["ReferenceMatchMetric"]["mean_score"], abs=TOL
        )
        summary = artifacts["quickstart-summary"]
        assert summary.type == "markdown"
        # summary.md with text charts instead of Mermaid (Prefect's UI renders none): the same up to the folded
        # parts, which follow under "## More" (Prefect shows <details> open)
        summary_md = (out_dir / "summary.md").read_text(encoding="utf-8")
        assert summary.data.startswith(summary_md.split("<details>")[0]) and "<details>" not in summary.data
        assert "```mermaid" in summary_md and "```mermaid" not in summary.data and "```text" in summary.data
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


PREFECT_YAML = REPO / "prefect.yaml"
ON_DEMAND = "quickstart-on-demand"
DEPLOY_TIMEOUT = 300
WORKER_RUN_TIMEOUT = 600


def _prefect_yaml_deployments() -> dict[str, dict]:
    config = yaml.safe_load(PREFECT_YAML.read_text(encoding="utf-8"))
    return {deployment["name"]: deployment for deployment in config["deployments"]}


def test_prefect_yaml_names_never_collide_with_serves_default() -> None:
    """``evaltasks serve SUITE`` names its deployment after the suite; ``prefect deploy`` must not replace it (a
    deploy once overwrote the served deployment and kept its schedule)."""
    names = set()
    for name, deployment in _prefect_yaml_deployments().items():
        suite = yaml.safe_load((REPO / deployment["parameters"]["suite_path"]).read_text(encoding="utf-8"))
        assert name != suite["name"], f"deployment {name} has the name `evaltasks serve` gives suite {suite['name']}"
        assert deployment["work_pool"]["name"] == "evaltasks", (
            deployment
        )  # the pool docs/prefect.md#deploy-with-prefectyaml creates
        names.add(name)
    assert names == {"truthfulqa-nightly", ON_DEMAND}


def _run_cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float) -> str:
    """Run a Prefect CLI command to completion; its output, or a test failure with it."""
    done = subprocess.run(
        [*_prefect_cli(), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"prefect {' '.join(args)} exited with {done.returncode}:\n{output[-4000:]}"
    return output


async def _wait_flow_run_final(deployment_id, worker: subprocess.Popen, log: Path, timeout: float):
    """The deployment's one flow run, once it reached a final state (polls; fails when the worker exits)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    deadline = time.monotonic() + timeout
    runs: list = []
    async with get_client() as client:
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                pytest.fail(f"`prefect worker start` exited with {worker.returncode}:\n{_tail(log)}")
            runs = await client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
            )
            if len(runs) == 1 and runs[0].state is not None and runs[0].state.is_final():
                return runs[0]
            assert len(runs) <= 1, [run.name for run in runs]  # the deployment has no schedule: only our run
            await asyncio.sleep(1.0)
    pytest.fail(f"the flow run did not finish within {timeout:.0f} s ({[r.state for r in runs]}):\n{_tail(log)}")


def test_prefect_yaml_deployment_runs_on_a_worker(cosine, prefect_server: PrefectServer, tmp_path: Path) -> None:
    """The deployment path of docs/prefect.md#deploy-with-prefectyaml, step by step, against a real server: create the work pool, ``prefect
    deploy`` the quickstart deployment of ``prefect.yaml``, start a worker, ``prefect deployment run``; the
    reports are written under the directory ``prefect deploy`` ran in, with the quickstart's numbers."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import PREFECT_API_URL, temporary_settings

    expected_rm = _expected_reference_match_mean(cosine)
    deployment_config = _prefect_yaml_deployments()[ON_DEMAND]
    pool = deployment_config["work_pool"]["name"]

    # A copy of the project (prefect.yaml, flows/, the quickstart suite): reports and the index land in it.
    project = tmp_path / "project"
    for relative in (
        "prefect.yaml",
        "flows/__init__.py",
        "flows/evaluate_suite.py",
        "examples/quickstart/suite.yaml",
        "examples/quickstart/answers.jsonl",
    ):
        (project / relative).parent.mkdir(parents=True, exist_ok=True)
        (project / relative).write_bytes((REPO / relative).read_bytes())
    elsewhere = tmp_path / "worker-cwd"  # the worker runs elsewhere: the pull step sets the directory
    elsewhere.mkdir()
    env = _subprocess_env(prefect_server.home, prefect_server.api_url)
    env.pop("EVALTASKS_INDEX_DIR", None)
    deploy_env = {**env, "PWD": str(project)}  # as a shell in the project sets it: prefect.yaml reads {{ $PWD }}

    _run_cli(["work-pool", "create", pool, "--type", "process"], env, project, DEPLOY_TIMEOUT)
    deployed = _run_cli(["--no-prompt", "deploy", "--name", ON_DEMAND], deploy_env, project, DEPLOY_TIMEOUT)
    assert f"evaluate-suite/{ON_DEMAND}" in deployed, deployed[-4000:]

    with temporary_settings(updates={PREFECT_API_URL: prefect_server.api_url}):

        async def _read(name: str):
            async with get_client() as client:
                return await client.read_deployment_by_name(name)

        deployment = asyncio.run(_read(f"evaluate-suite/{ON_DEMAND}"))
        assert deployment.work_pool_name == pool
        assert deployment.schedules == []  # on demand only
        assert deployment.parameters == deployment_config["parameters"]
        assert deployment.pull_steps == [
            {"prefect.deployments.steps.set_working_directory": {"directory": str(project)}}
        ]
        with pytest.raises(ObjectNotFound):  # the name `evaltasks serve` gives the quickstart suite stays free
            asyncio.run(_read("evaluate-suite/quickstart"))

        worker_log = tmp_path / "worker.log"
        worker_args = [*_prefect_cli(), "worker", "start", "--pool", pool]
        with _process_group(worker_args, worker_log, env, elsewhere) as worker:
            _run_cli(["deployment", "run", f"evaluate-suite/{ON_DEMAND}"], env, project, DEPLOY_TIMEOUT)
            flow_run = asyncio.run(_wait_flow_run_final(deployment.id, worker, worker_log, WORKER_RUN_TIMEOUT))
            assert flow_run.state.is_completed(), f"{flow_run.state!r}\n--- worker log ---\n{_tail(worker_log)}"
            worker_pgid = worker.pid
        assert not _group_alive(worker_pgid)

    # Relative paths in prefect.yaml are relative to the directory `prefect deploy` ran in.
    out_dir = project / deployment_config["parameters"]["output_dir"]
    assert sorted(p.name for p in out_dir.iterdir()) == ["junit.xml", "results.json", "summary.md"]
    assert (project / ".evaltasks" / "index").is_dir()  # the default index directory, relative to it too
    assert not (elsewhere / "eval-results").exists()
    results = json.loads((out_dir / "results.json").read_text(encoding="utf-8"))
    assert results["suite"] == "quickstart" and results["passed"] is True
    summary = results["summary"]
    assert (summary["cases"], summary["passed_cases"], summary["failed_cases"]) == (8, 6, 2)
    rm = summary["metrics"]["ReferenceMatchMetric"]["mean_score"]
    assert round(rm, 4) == 0.7453
    assert abs(rm - expected_rm) <= TOL, (rm, expected_rm)
