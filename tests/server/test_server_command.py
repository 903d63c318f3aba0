"""``evaltasks server`` (docs/server.md#faster-repeated-runs-evaltasks-server): runs reuse a long-lived server.

A real server (Prefect's API server and the warm runner) is started in a temporary PREFECT_HOME for the module
and always stopped (then killed, should stopping fail) at its end. Every run is a real ``evaltasks run``
subprocess; whether the server ran it is read from the server's own count of runs served (``state.json``, as
``evaltasks server status`` prints it) and from the flow runs on its Prefect API. Waits poll for a condition
under generous deadlines; nothing asserts a duration.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.process_env import REPO_ROOT, subprocess_env

pytestmark = [
    pytest.mark.slow,  # every test runs evaltasks server and served runs
    pytest.mark.skipif(sys.platform == "win32", reason="Unix sockets: Linux and macOS"),
]

DEADLINE_S = 600  # generous: the machine may be shared and busy
QUICKSTART = REPO_ROOT / "examples" / "quickstart"
PREVIOUS = {"results.json": '{"previous": true}\n', "junit.xml": "<testsuites/>\n", "summary.md": "# previous\n"}


def _cli(*args: str, env: dict[str, str], cwd: Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evaltasks.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        **kwargs,
    )


def _write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically, mode 0600 (as the server writes its state file)."""
    temporary = path.with_name(path.name + ".test")
    temporary.write_text(text, encoding="utf-8")
    temporary.chmod(0o600)
    os.replace(temporary, path)


class Server:
    """The module's server: its PREFECT_HOME, environment for clients, state file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "prefect-home"
        self.env = subprocess_env(self.home)
        self.state_path = self.home / "evaltasks-server" / "state.json"
        self.started: subprocess.CompletedProcess[str] | None = None

    def state(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_text(encoding="utf-8"))

    def served(self) -> int:
        return int(self.state()["runs_served"])

    def api(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            f"{self.state()['url']}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def wait_idle(self) -> None:
        """Until no run is running on the server (its children have been reaped)."""
        deadline = time.monotonic() + DEADLINE_S
        while self.state().get("running"):
            assert time.monotonic() < deadline, self.state()
            time.sleep(0.05)


def _kill(pid: int | None) -> None:
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A started server; stopped at the end of the module whatever happened (killed if stopping fails)."""
    srv = Server(tmp_path_factory.mktemp("server"))
    # a folder left world-writable (by hand, by an old version): the server must make it private
    srv.state_path.parent.mkdir(parents=True)
    os.chmod(srv.state_path.parent, 0o777)
    pids: list[int | None] = []
    try:
        started = srv.started = _cli("server", "start", env=srv.env, cwd=srv.root)
        if srv.state_path.exists():
            pids = [srv.state().get("pid"), srv.state().get("prefect_pid")]
        assert started.returncode == 0, started.stdout + started.stderr
        assert "ready" in started.stdout
        yield srv
    finally:
        stopped = _cli("server", "stop", env=srv.env, cwd=srv.root)
        for pid in pids:
            _kill(pid)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    """A working directory with suites over the quickstart's answers: passing, failing gate, invalid."""
    dataset = QUICKSTART / "answers.jsonl"
    base = (QUICKSTART / "suite.yaml").read_text(encoding="utf-8").replace("path: answers.jsonl", f"path: {dataset}")
    (tmp_path / "suite.yaml").write_text(base, encoding="utf-8")
    (tmp_path / "strict.yaml").write_text(base.replace("min_pass_rate: 0.7", "min_pass_rate: 0.9"), encoding="utf-8")
    (tmp_path / "invalid.yaml").write_text(base.replace(str(dataset), "missing.jsonl"), encoding="utf-8")
    return tmp_path


def _scores(results_json: Path) -> dict[tuple[str, str], float]:
    results = json.loads(results_json.read_text(encoding="utf-8"))
    return {(case["id"], metric["name"]): metric["score"] for case in results["cases"] for metric in case["metrics"]}


def test_a_served_run_is_a_real_flow_run_with_the_reports_of_a_normal_run(server: Server, workdir: Path) -> None:
    """Relative --output-dir and an index directory from the client's environment resolve in the client's
    working directory; scores equal a normal run's; the flow run, its task runs and artifacts are on the
    server's Prefect API."""
    before = server.served()
    env = {**server.env, "EVALTASKS_INDEX_DIR": "client-index"}
    served = _cli("run", "suite.yaml", "--output-dir", "served-out", "--no-cache", env=env, cwd=workdir)
    assert served.returncode == 0, served.stdout + served.stderr
    assert server.served() == before + 1
    assert "GATE PASSED" in served.stdout and "reports: served-out/results.json" in served.stdout
    assert (workdir / "client-index").is_dir(), "EVALTASKS_INDEX_DIR of the client, relative to its cwd"
    for name in ("results.json", "junit.xml", "summary.md"):
        assert (workdir / "served-out" / name).is_file()

    normal_env = {**server.env, "PREFECT_API_URL": server.state()["url"]}  # the same Prefect server, in-process
    normal = _cli(
        "run", "suite.yaml", "--output-dir", "normal-out", "--no-cache", "--no-server", env=normal_env, cwd=workdir
    )
    assert normal.returncode == 0, normal.stdout + normal.stderr
    assert server.served() == before + 1, "--no-server ran on the server"
    served_scores, normal_scores = (
        _scores(workdir / "served-out/results.json"),
        _scores(workdir / "normal-out/results.json"),
    )
    assert served_scores == normal_scores and len(served_scores) == 16
    assert served_scores[("capital-fr", "ReferenceMatchMetric")] == pytest.approx(0.98936, abs=1e-4)

    runs = [run for run in server.api("/flow_runs/filter", {}) if run["parameters"].get("output_dir") == "served-out"]
    assert len(runs) == 1 and runs[0]["state_type"] == "COMPLETED", runs
    flow_run_id = runs[0]["id"]
    tasks = server.api("/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}})
    assert tasks and all(task["state_type"] == "COMPLETED" for task in tasks), tasks
    assert any(task["task_key"].startswith("score") or "score" in task["name"] for task in tasks)
    artifacts = server.api("/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}})
    assert artifacts, "the run's artifacts"
    # its events reach the server (sent after the client was let go), and no heartbeat among them: the runner
    # supervises the run's process, and stopping the heartbeat thread cost each run up to a second
    deadline = time.monotonic() + DEADLINE_S
    while True:
        found = server.api(
            "/events/filter", {"filter": {"any_resource": {"id": [f"prefect.flow-run.{flow_run_id}"]}}, "limit": 50}
        )
        names = [event["event"] for event in found["events"]]
        if "prefect.flow-run.Completed" in names:
            break
        assert time.monotonic() < deadline, names
        time.sleep(0.1)
    assert "prefect.flow-run.heartbeat" not in names, names


def test_the_servers_folder_and_files_are_private(server: Server) -> None:
    """The world-writable folder the server found was made 0700 (one line says so); the state, lock and log
    files are 0600 and the socket has no group or other permission: no other user may read the state or
    reach the runner."""
    import stat

    assert server.started is not None and "had mode 0777; set to 0700" in server.started.stderr, server.started
    folder = server.state_path.parent
    modes = {
        path.name: stat.S_IMODE(os.lstat(path).st_mode)
        for path in (folder, server.state_path, folder / "lock", folder / "server.log")
    }
    assert modes == {folder.name: 0o700, "state.json": 0o600, "lock": 0o600, "server.log": 0o600}, modes
    assert stat.S_IMODE(os.lstat(server.state()["socket"]).st_mode) & 0o077 == 0


def test_the_client_of_a_served_run_imports_neither_prefect_nor_rich_nor_torch(server: Server, workdir: Path) -> None:
    """The decision and the hand-over use the standard library: the client process never loads the heavy parts."""
    before = server.served()
    script = (
        "import sys; sys.argv = ['evaltasks', 'run', 'suite.yaml', '--output-dir', 'light-out', '--quiet']\n"
        "from evaltasks.cli import main\ncode = main()\n"
        "print('loaded:', sorted(m for m in ('prefect', 'rich', 'torch', 'sentence_transformers') "
        "if m in sys.modules))\nsys.exit(code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], env=server.env, cwd=workdir, capture_output=True, text=True, timeout=DEADLINE_S
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert server.served() == before + 1
    assert "loaded: []" in result.stdout, result.stdout


def test_exit_codes_of_a_failing_gate_and_an_input_error(server: Server, workdir: Path) -> None:
    before = server.served()
    failed = _cli(
        "run", "strict.yaml", "--output-dir", "strict-out", "--no-cache", "--quiet", env=server.env, cwd=workdir
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    invalid = _cli("run", "invalid.yaml", env=server.env, cwd=workdir)
    assert invalid.returncode == 2, invalid.stdout + invalid.stderr
    assert invalid.stderr.startswith("evaltasks: error:") and "missing.jsonl" in invalid.stderr
    assert "Traceback" not in invalid.stderr
    assert server.served() == before + 2


def test_prefect_settings_come_from_the_clients_environment(server: Server, workdir: Path) -> None:
    """PREFECT_LOGGING_LEVEL=INFO of the client: the served run logs Prefect's INFO lines on the client's stderr
    (the server itself was started without it)."""
    before = server.served()
    env = {**server.env, "PREFECT_LOGGING_LEVEL": "INFO"}
    result = _cli("run", "suite.yaml", "--output-dir", "info-out", "--quiet", env=env, cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert server.served() == before + 1
    assert "Beginning flow run" in result.stderr and "Finished in state Completed" in result.stderr
    quiet = _cli("run", "suite.yaml", "--output-dir", "info-out", "--quiet", env=server.env, cwd=workdir)
    assert quiet.returncode == 0 and "Beginning flow run" not in quiet.stderr, quiet.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pty: Linux")
def test_a_served_run_writes_to_the_clients_terminal(server: Server, workdir: Path) -> None:
    """The client's terminal (a pseudo-terminal here) is the run's: rich sees a TTY and colours the summary."""
    import pty

    before = server.served()
    primary, secondary = pty.openpty()
    env = {**server.env, "TERM": "xterm-256color", "COLUMNS": "100"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "evaltasks.cli", "run", "suite.yaml", "--output-dir", "tty-out"],
        cwd=workdir,
        env=env,
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: every writer has closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    output = b"".join(chunks).decode("utf-8", "replace")
    assert proc.wait(timeout=DEADLINE_S) == 0, output
    assert server.served() == before + 1
    assert "GATE PASSED" in output and "\x1b[" in output, output


def test_two_clients_at_once_each_get_a_run(server: Server, workdir: Path) -> None:
    before = server.served()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "evaltasks.cli",
                "run",
                "suite.yaml",
                "--output-dir",
                f"parallel-{i}",
                "--quiet",
                "--no-cache",
            ],
            env=server.env,
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 0, out + err
    assert server.served() == before + 2
    assert _scores(workdir / "parallel-0/results.json") == _scores(workdir / "parallel-1/results.json")


def test_users_metric_code_is_imported_fresh_by_each_run(server: Server, tmp_path: Path) -> None:
    """The runner never keeps a user's module: an edit to it is seen by the next run."""
    import shutil

    shutil.copytree(REPO_ROOT / "examples" / "custom_metric", tmp_path / "custom")
    before = server.served()
    first = _cli("run", "custom/suite.yaml", "--output-dir", "out", "--quiet", env=server.env, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    with open(tmp_path / "custom" / "brand_checks.py", "a", encoding="utf-8") as handle:
        handle.write('\nraise RuntimeError("edited after the first run")\n')
    second = _cli("run", "custom/suite.yaml", "--output-dir", "out", "--quiet", env=server.env, cwd=tmp_path)
    assert second.returncode == 2 and "edited after the first run" in second.stderr, second.stdout + second.stderr
    assert server.served() == before + 2


def test_edited_evaltasks_code_and_no_server_take_the_normal_path(server: Server, workdir: Path) -> None:
    """A changed file of the package (mtime) makes the server stale: runs go the normal way and status says why;
    EVALTASKS_NO_SERVER=1, --no-server, a Hugging Face variable the server's libraries read at import with
    another value, and PREFECT_API_URL naming another server do the same. Invalid-suite runs: exit 2 before
    Prefect either way."""
    before = server.served()
    for extra_env, flags, said in (
        ({"EVALTASKS_NO_SERVER": "1"}, (), None),
        ({}, ("--no-server",), None),
        # a variable the server was not started with
        ({"HF_EVALTASKS_TEST_ONLY": "client"}, (), "other values of HF_EVALTASKS_TEST_ONLY"),
        (
            {"PREFECT_API_URL": "http://127.0.0.1:9/api"},
            (),
            "PREFECT_API_URL names another Prefect server (http://127.0.0.1:9/api)",
        ),
    ):
        result = _cli("run", "invalid.yaml", *flags, env={**server.env, **extra_env}, cwd=workdir)
        assert result.returncode == 2, result.stderr
        # a server the user did not turn off, but that the run does not use: one line says why
        lines = [line for line in result.stderr.splitlines() if "evaltasks server" in line]
        assert lines == ([] if said is None else [lines[0]]), result.stderr
        assert said is None or (lines[0].startswith("evaltasks: not using the evaltasks server: ") and said in lines[0])
    assert server.served() == before
    # the server's record of the code it runs, as if the package had changed since (the package's own files stay
    # as they are: tests in other workers run servers on the same package)
    original = server.state_path.read_text(encoding="utf-8")
    _write_private(server.state_path, json.dumps({**json.loads(original), "stamp": "code of another day"}))
    try:
        stale = _cli("run", "invalid.yaml", env=server.env, cwd=workdir)
        status = _cli("server", "status", env=server.env, cwd=workdir)
    finally:
        _write_private(server.state_path, original)
    assert stale.returncode == 2, stale.stderr
    assert server.served() == before, "a stale server ran the run"
    assert [line for line in stale.stderr.splitlines() if "evaltasks server" in line] == [
        "evaltasks: not using the evaltasks server: the evaltasks code changed since it started (restart it: "
        "evaltasks server stop; evaltasks server start); running without it"
    ], stale.stderr
    assert status.returncode == 0 and "the evaltasks code changed since it started" in status.stdout, status.stdout
    served = _cli("run", "invalid.yaml", env=server.env, cwd=workdir)  # the code as the server has it again
    assert served.returncode == 2 and server.served() == before + 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups: Linux")
def test_sigint_to_the_client_interrupts_the_served_run(server: Server, tmp_path: Path) -> None:
    """Ctrl+C (SIGINT to the client's process group) reaches the run on the server: exit 130, one line that says
    the previous reports are kept, nothing else written, and the server's child ends."""
    before = server.served()
    run = LongRun(server, tmp_path)
    try:
        run.wait_scoring()
        os.killpg(run.proc.pid, signal.SIGINT)
        rc = run.proc.wait(timeout=DEADLINE_S)
    finally:
        run.kill()
    assert server.served() == before + 1
    run.check_interrupted(rc, signal.SIGINT)
    server.wait_idle()


SLOW_METRIC = '''
import time

from evaltasks import BaseMetric, MetricResult


class SlowMetric(BaseMetric):
    """Score 1.0 after 50 ms per case: a run that lasts however fast the machine is."""

    version = "1"

    def __init__(self, threshold=0.0, *, name=None):
        super().__init__(threshold, name=name)

    def config(self):
        return {"threshold": self.threshold, "name": self.name}

    def score_batch(self, cases, vectors=None):
        results = []
        for case in cases:
            time.sleep(0.05)
            results.append(MetricResult.scored(self.name, 1.0, self.threshold, "slept", {}))
        return results
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups: Linux")
def test_a_killed_client_stops_its_run(server: Server, tmp_path: Path) -> None:
    """SIGKILL of the client runs no handler: its socket closes and the run stops as on SIGTERM (the flow run is
    not completed, the previous reports stay) instead of running on unseen."""
    before = server.served()
    run = LongRun(server, tmp_path)
    try:
        run.wait_scoring()
        run.proc.kill()
        run.proc.wait(timeout=DEADLINE_S)
    finally:
        run.kill()
    assert server.served() == before + 1
    server.wait_idle()
    runs = [
        r
        for r in server.api("/flow_runs/filter", {})
        if r["parameters"].get("suite_path") == "long.yaml"
        and r["parameters"].get("output_dir") == "out"
        and r["start_time"]
    ]
    assert runs and all(r["state_type"] in ("CRASHED", "CANCELLED", "FAILED") for r in runs), runs
    assert {name: (run.out / name).read_text(encoding="utf-8") for name in PREVIOUS} == PREVIOUS


def test_a_killed_clients_run_stuck_in_a_metric_is_killed(server: Server, tmp_path: Path) -> None:
    """A user's metric stuck in its own code (a 1,000 s sleep) ignores the stop; with its client gone the run
    is killed a few seconds later (CLIENT_GONE_GRACE_S) instead of running on unseen for the rest of the sleep."""
    (tmp_path / "stuck_metric.py").write_text(
        SLOW_METRIC.replace("time.sleep(0.05)", "time.sleep(1000)"), encoding="utf-8"
    )
    (tmp_path / "cases.jsonl").write_text('{"input": "q", "actual_output": "a"}\n', encoding="utf-8")
    (tmp_path / "stuck.yaml").write_text(
        "name: stuck\ndataset: {path: cases.jsonl}\nmetrics:\n  - {metric: 'stuck_metric:SlowMetric'}\n",
        encoding="utf-8",
    )
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "evaltasks.cli", "run", "stuck.yaml", "--no-cache"],
            cwd=tmp_path,
            env={**server.env, "PREFECT_LOGGING_LEVEL": "INFO"},
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while "Embeddings:" not in err_path.read_text(errors="replace") and "score-batch" not in err_path.read_text(
            errors="replace"
        ):
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text(errors="replace")
            time.sleep(0.05)
        time.sleep(0.5)  # inside the metric's sleep
        assert server.state().get("running"), "the run is not running on the server"
        proc.kill()
        proc.wait(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    server.wait_idle()  # within DEADLINE_S (600 s), well before the metric's 1,000 s sleep ends


class LongRun:
    """``evaltasks run`` of 4,000 cases of a metric that sleeps 50 ms per case, in batches of 20 on two threads
    (100 s of sleeping: it runs until a signal stops it), in a session of its own, over a previous report set,
    Prefect's INFO lines on its stderr (they mark its stages)."""

    def __init__(self, server: Server, folder: Path) -> None:
        (folder / "slow_metric.py").write_text(SLOW_METRIC, encoding="utf-8")
        with open(folder / "long.jsonl", "w", encoding="utf-8") as handle:
            for i in range(4000):
                handle.write(json.dumps({"input": f"q{i}", "actual_output": f"answer {i}"}) + "\n")
        (folder / "long.yaml").write_text(
            "name: long\ndataset: {path: long.jsonl}\nmetrics:\n"
            "  - {metric: 'slow_metric:SlowMetric'}\ngate: {min_pass_rate: 0.0}\n",
            encoding="utf-8",
        )
        self.out = folder / "out"
        self.out.mkdir()
        for name, text in PREVIOUS.items():
            (self.out / name).write_text(text, encoding="utf-8")
        self.stderr_path = folder / "stderr.txt"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "evaltasks.cli",
                    "run",
                    "long.yaml",
                    "--output-dir",
                    "out",
                    "--no-cache",
                    "--quiet",
                    "--batch-size",
                    "20",
                    "--task-runner",
                    "threads:2",
                ],
                cwd=folder,
                env={**server.env, "PREFECT_LOGGING_LEVEL": "INFO"},
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def wait_scoring(self) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while "Task run 'score-batch" not in self.stderr():
            assert self.proc.poll() is None, self.stderr()
            assert time.monotonic() < deadline, "no scored batch"
            time.sleep(0.02)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def check_interrupted(self, rc: int, signum: int) -> None:
        """Exit 128 + signum, one line naming the signal and the previous reports kept, no traceback."""
        err = self.stderr()
        assert rc == 128 + signum, err
        lines = [line for line in err.splitlines() if "interrupted" in line.lower()]
        assert len(lines) == 1 and lines[0].startswith(f"evaltasks: interrupted by {signal.Signals(signum).name}"), err
        assert "keeps the previous ones" in lines[0], lines
        assert "Traceback" not in err
        assert {name: (self.out / name).read_text(encoding="utf-8") for name in PREVIOUS} == PREVIOUS
        assert sorted(p.name for p in self.out.iterdir()) == sorted(PREVIOUS), "temporary files left"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")
def test_the_servers_ui_reaches_its_own_api(server: Server) -> None:
    """The UI served at the URL without /api (docs/server.md#faster-repeated-runs-evaltasks-server) asks /ui-settings where its API is:
    the server's own port, not Prefect's default 4200."""
    import httpx

    api = server.state()["url"]
    settings = httpx.get(api.removesuffix("/api") + "/ui-settings", timeout=30).json()
    assert settings["api_url"] == api, settings


def _served_metric_run(server: Server, folder: Path, body: str, extra_env: dict[str, str]) -> subprocess.Popen[str]:
    """Start ``evaltasks run`` on ``server`` of one case scored by PidMetric with ``time.sleep(1000)`` replaced
    by ``body`` (its PID_FILE is ``folder/run.pid``), in a session of its own."""
    (folder / "pid_metric.py").write_text(PID_METRIC.replace("time.sleep(1000)", body), encoding="utf-8")
    (folder / "cases.jsonl").write_text('{"input": "q", "actual_output": "a"}\n', encoding="utf-8")
    (folder / "s.yaml").write_text(
        "name: s\ndataset: {path: cases.jsonl}\nmetrics:\n  - {metric: 'pid_metric:PidMetric'}\n", encoding="utf-8"
    )
    return subprocess.Popen(
        [sys.executable, "-m", "evaltasks.cli", "run", "s.yaml", "--no-cache"],
        cwd=folder,
        env={**server.env, "PID_FILE": str(folder / "run.pid"), **extra_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _metric_pid(proc: subprocess.Popen[str], pid_file: Path) -> int:
    """The process id PidMetric wrote to ``pid_file`` once it runs (the run ``proc`` must still be running)."""
    deadline = time.monotonic() + DEADLINE_S
    while not pid_file.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return int(pid_file.read_text())


def _kill_if_running(proc: subprocess.Popen[str]) -> None:
    """After a failed test: SIGKILL the client ``proc`` (in a session of its own) and its group, if still running."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _gone(pid: int) -> bool:
    psutil = pytest.importorskip("psutil")
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process checks: Linux")
def test_a_served_run_stuck_in_a_metric_stops_after_the_grace_period_naming_it(server: Server, tmp_path: Path) -> None:
    """SIGTERM to the client of a served run whose metric spins in its own code: after the grace period
    (EVALTASKS_STOP_GRACE_S, 2 s here) the run's processes are killed, the client exits 143 with one line naming
    the metric, as an unserved run does (docs/cli.md#interrupted-runs)."""
    proc = _served_metric_run(server, tmp_path, "while True:\n            pass", {"EVALTASKS_STOP_GRACE_S": "2"})
    try:
        run_pid = _metric_pid(proc, tmp_path / "run.pid")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=DEADLINE_S)  # before: still spinning 10 minutes later
    finally:
        _kill_if_running(proc)
    assert proc.returncode == 143, err
    lines = [line for line in err.splitlines() if "interrupted" in line]
    assert lines == [
        "evaltasks: interrupted by SIGTERM: metric PidMetric did not stop within 2 s, so the run's "
        "processes were killed; no reports written"
    ], err
    assert "Traceback" not in err
    assert _gone(run_pid), f"the served run {run_pid} still runs"


STRAY_THREAD = """import threading

        threading.Thread(target=time.sleep, args=(1000,), name="stray").start()  # not a daemon thread
        while not os.path.exists(os.environ["PID_FILE"] + ".stop"):
            time.sleep(0.01)"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process checks: Linux")
def test_a_thread_a_stopped_served_runs_metric_left_does_not_keep_it_running(server: Server, tmp_path: Path) -> None:
    """SIGTERM to the client of a served run whose metric stops when asked but leaves a thread sleeping: the
    client exits 143 with the interrupted line, and the run's process, whose exit waits for that thread, is
    killed a grace period (EVALTASKS_STOP_GRACE_S, 5 s here) after its exit code went out, with one line in the
    server's log (before: it ran on, and ``evaltasks server stop`` waited for it)."""
    proc = _served_metric_run(server, tmp_path, STRAY_THREAD, {"EVALTASKS_STOP_GRACE_S": "5"})
    try:
        run_pid = _metric_pid(proc, tmp_path / "run.pid")
        proc.send_signal(signal.SIGTERM)
        (tmp_path / "run.pid.stop").write_text("", encoding="utf-8")  # the metric returns; its thread does not
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        _kill_if_running(proc)
    assert proc.returncode == 143, err
    assert [line for line in err.splitlines() if "interrupted" in line] == [
        "evaltasks: interrupted by SIGTERM: no reports written"
    ], err
    assert _gone(run_pid), f"the served run {run_pid} still runs"
    log = (server.state_path.parent / "server.log").read_text(encoding="utf-8")
    assert "did not exit within 5 s of its exit code (threads still running: ['stray']): killed" in log, log[-3000:]


FORK_SLEEPER = """pid = os.fork()
        if pid == 0:
            os.setsid()
            with open(os.environ["PID_FILE"] + ".child", "w") as handle:
                handle.write(str(os.getpid()))
            time.sleep(1000)
            os._exit(0)
        while not os.path.exists(os.environ["PID_FILE"] + ".child"):
            time.sleep(0.01)"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process checks: Linux")
def test_a_process_a_served_runs_metric_forked_ends_with_the_run(server: Server, tmp_path: Path) -> None:
    """A metric that forks a child into a session of its own and leaves it sleeping: the served run passes, and
    once it has ended the child is gone (before: it outlived the run, and the server too)."""
    proc = _served_metric_run(server, tmp_path, FORK_SLEEPER, {})
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        _kill_if_running(proc)
    assert proc.returncode == 0, out + err
    assert server.served() >= 1 and "not using the evaltasks server" not in err, err
    child = int((tmp_path / "run.pid.child").read_text())
    try:
        assert _gone(child), f"process {child}, forked by the metric, outlived the run"
    finally:
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)


def test_status_then_stop(server: Server, workdir: Path) -> None:
    """Last in the module: status names the URL, pid and runs served. A stop lets a running run go on while new
    runs go the normal way; a second stop interrupts the run (SIGTERM: exit 143, previous reports kept); then both
    processes end, status says none runs, and runs go the normal way."""
    state = server.state()
    status = _cli("server", "status", env=server.env, cwd=workdir)
    assert status.returncode == 0
    assert f"pid {state['pid']}" in status.stdout and state["url"] in status.stdout
    assert f"{state['runs_served']} run{'' if state['runs_served'] == 1 else 's'} served" in status.stdout
    run = LongRun(server, workdir)
    try:
        run.wait_scoring()
        first_stop = subprocess.Popen(
            [sys.executable, "-m", "evaltasks.cli", "server", "stop"],
            env=server.env,
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + DEADLINE_S
        while server.state()["status"] != "stopping":
            assert time.monotonic() < deadline and first_stop.poll() is None, server.state()
            time.sleep(0.02)
        served = server.served()
        meanwhile = _cli("run", "invalid.yaml", env=server.env, cwd=workdir)
        assert meanwhile.returncode == 2 and server.served() == served, "a stopping server took a new run"
        assert run.proc.poll() is None, "the running run was stopped by the first stop"
        second_stop = _cli("server", "stop", env=server.env, cwd=workdir)
        rc = run.proc.wait(timeout=DEADLINE_S)
        first_out, _ = first_stop.communicate(timeout=DEADLINE_S)
    finally:
        run.kill()
    run.check_interrupted(rc, signal.SIGTERM)
    assert first_stop.returncode == 0 and "once its running run finishes" in first_out, first_out
    assert second_stop.returncode == 0 and "stopped" in second_stop.stdout, second_stop.stdout + second_stop.stderr
    for pid in (state["pid"], state["prefect_pid"]):
        deadline = time.monotonic() + DEADLINE_S
        while Path(f"/proc/{pid}").exists() if sys.platform.startswith("linux") else False:
            assert time.monotonic() < deadline, f"process {pid} still runs"
            time.sleep(0.05)
    assert not server.state_path.exists()
    status = _cli("server", "status", env=server.env, cwd=workdir)
    assert status.returncode == 1 and "not running" in status.stdout
    after = _cli("run", "invalid.yaml", env=server.env, cwd=workdir)
    assert after.returncode == 2 and "missing.jsonl" in after.stderr


PID_METRIC = '''
import os
import time

from evaltasks import BaseMetric, MetricResult


class PidMetric(BaseMetric):
    """Writes the run's process id to PID_FILE, then sleeps 1,000 s: a run that lasts until it is killed."""

    version = "1"

    def __init__(self, threshold=0.0, *, name=None):
        super().__init__(threshold, name=name)

    def config(self):
        return {"threshold": self.threshold, "name": self.name}

    def score_batch(self, cases, vectors=None):
        with open(os.environ["PID_FILE"] + ".tmp", "w") as handle:
            handle.write(str(os.getpid()))
        os.replace(os.environ["PID_FILE"] + ".tmp", os.environ["PID_FILE"])
        time.sleep(1000)
        return [MetricResult.scored(self.name, 1.0, self.threshold, "slept", {}) for case in cases]
'''
HOSTILE_YAML = 'open({marker!r}, "a").write("imported\\n")\nraise RuntimeError("yaml.py of the working directory")\n'


@pytest.fixture(scope="module")
def checkout_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server started by ``python -m evaltasks server start`` in the root of a source checkout (a copy of the
    package, beside a ``yaml.py`` that must never be imported), as a new user starts it from a clone; runs come
    from another folder. Stopped (then killed) at the end of the module."""
    import shutil

    srv = Server(tmp_path_factory.mktemp("checkout-server"))
    checkout = srv.root / "checkout"
    shutil.copytree(REPO_ROOT / "evaltasks", checkout / "evaltasks", ignore=shutil.ignore_patterns("__pycache__"))
    (checkout / "yaml.py").write_text(HOSTILE_YAML.format(marker=str(srv.root / "yaml-imported.txt")), encoding="utf-8")
    pids: list[int | None] = []
    try:
        srv.started = subprocess.run(
            [sys.executable, "-m", "evaltasks", "server", "start"],
            env=srv.env,
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        if srv.state_path.exists():
            pids = [srv.state().get("pid"), srv.state().get("prefect_pid")]
        assert srv.started.returncode == 0, srv.started.stdout + srv.started.stderr
        yield srv
    finally:
        stopped = _cli("server", "stop", env=srv.env, cwd=srv.root)
        for pid in pids:
            _kill(pid)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def test_a_server_started_in_a_checkout_root_is_used_by_runs_from_elsewhere(
    checkout_server: Server, workdir: Path
) -> None:
    """The server imports the installed evaltasks, not the checkout's copy (nor its ``yaml.py``): a run from
    another folder uses it, says nothing about it, and ``status`` has no complaint."""
    srv = checkout_server
    assert srv.state()["package"][0] != str(srv.root / "checkout" / "evaltasks"), srv.state()["package"]
    before = srv.served()
    result = _cli("run", "invalid.yaml", env=srv.env, cwd=workdir)
    assert result.returncode == 2 and "missing.jsonl" in result.stderr, result.stderr
    assert "not using the evaltasks server" not in result.stderr, result.stderr
    assert srv.served() == before + 1
    status = _cli("server", "status", env=srv.env, cwd=workdir)
    assert status.returncode == 0 and "do not use it" not in status.stdout, status.stdout
    assert not (srv.root / "yaml-imported.txt").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGKILL and process checks: Linux")
def test_a_run_whose_server_is_killed_exits_3_and_leaves_no_process(checkout_server: Server, tmp_path: Path) -> None:
    """SIGKILL of the runner mid-run (no handler runs): the client exits 3 with one line naming the server, and
    the run's process (and Prefect's server) end with it instead of running on unseen."""
    srv = checkout_server
    state = srv.state()
    before = srv.served()
    proc = _served_metric_run(srv, tmp_path, "time.sleep(1000)", {})
    try:
        run_pid = _metric_pid(proc, tmp_path / "run.pid")
        counted = time.monotonic() + 60  # the runner counts the run in its state file after forking it
        while srv.served() != before + 1 and time.monotonic() < counted:
            time.sleep(0.05)
        if srv.served() != before + 1:  # the run went the normal way: its stderr says why
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"the run was not served: {proc.communicate()[1][-3000:]}")
        assert run_pid not in (proc.pid, state["pid"])
        os.kill(state["pid"], signal.SIGKILL)
        _, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        _kill_if_running(proc)
    assert proc.returncode == 3, err
    lines = [line for line in err.splitlines() if "evaltasks server" in line or "error" in line.lower()]
    assert lines == [
        f"evaltasks: error: the evaltasks server (pid {state['pid']}) ended during the run, which ended "
        f"with it (its log: {srv.state_path.parent / 'server.log'})"
    ], err
    assert "Traceback" not in err
    for pid in (run_pid, state["prefect_pid"]):
        assert _gone(pid), f"process {pid} still runs"
