"""The parent process of ``evaltasks run`` (docs/cli.md#the-runs-parent-process): a metric
stuck in its own code cannot hold a signal past the grace period, and nothing the run started outlives it.

Every run is a real ``evaltasks run`` subprocess in a session of its own (``start_new_session=True``), signalled
through its process group as a terminal or a CI runner does, with a real user's metric module. Moments are found by
polling for files the metric writes, never by sleeping; deadlines are generous and only bound how long a broken
run may hang the test. What is left afterwards is found with psutil: every process of the run's session, and the
processes the metrics recorded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.process_env import subprocess_env

psutil = pytest.importorskip("psutil")
pytestmark = [
    pytest.mark.slow,  # real evaltasks runs whose metrics hang, fork or exit
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux"),
]

DEADLINE_S = 600  # generous: the machine may be shared and busy

# A user's metric module. StuckMetric records its process and loops forever, swallowing every exception (a signal's
# KeyboardInterrupt included); ForkMetric forks a child that sleeps forever (its pid recorded), then scores 1.0;
# ExitMetric ends its process at once (os._exit).
MODULE = """
import os
import time
from pathlib import Path

from evaltasks import BaseMetric, MetricResult

RECORDS = Path(__file__).with_name("records")


class StuckMetric(BaseMetric):
    def __init__(self, threshold: float = 0.5, *, name=None):
        super().__init__(threshold, name=name)

    def score_batch(self, cases, vectors=None):
        (RECORDS / f"stuck-{os.getpid()}").touch()
        while True:
            try:
                time.sleep(0.05)
            except BaseException:
                pass


class ForkMetric(BaseMetric):
    def __init__(self, threshold: float = 0.5, *, name=None):
        super().__init__(threshold, name=name)

    def score_batch(self, cases, vectors=None):
        pid = os.fork()
        if pid == 0:
            while True:
                time.sleep(1)
        (RECORDS / f"forked-{pid}").touch()
        return [MetricResult.scored(self.name, 1.0, self.threshold, "r", {}) for _ in cases]


class ExitMetric(BaseMetric):
    def __init__(self, threshold: float = 0.5, *, name=None):
        super().__init__(threshold, name=name)

    def score_batch(self, cases, vectors=None):
        os._exit(0)
"""


def _workspace(root: Path, metric: str, cases: int = 4) -> Path:
    (root / "records").mkdir(parents=True)
    (root / "user_metrics.py").write_text(textwrap.dedent(MODULE), encoding="utf-8")
    with open(root / "data.jsonl", "w", encoding="utf-8") as handle:
        for i in range(cases):
            handle.write(json.dumps({"input": f"q{i}", "actual_output": f"answer {i}"}) + "\n")
    suite = root / "suite.yaml"
    suite.write_text(
        f"name: supervised\ndataset: {{path: data.jsonl}}\nmetrics:\n"
        f'  - {{metric: "user_metrics:{metric}"}}\ngate: {{min_pass_rate: 0.0}}\n',
        encoding="utf-8",
    )
    return suite


def _start(root: Path, suite: Path, runner: str, env: dict[str, str], *args: str) -> subprocess.Popen:
    with open(root / "stdout.txt", "wb") as out, open(root / "stderr.txt", "wb") as err:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "evaltasks",
                "run",
                str(suite),
                "--output-dir",
                str(root / "out"),
                "--no-server",
                "--task-runner",
                runner,
                *args,
            ],
            cwd=root,
            env=env,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )


def _wait(proc: subprocess.Popen, root: Path) -> int:
    try:
        return proc.wait(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"the run did not end within {DEADLINE_S} s:\n{(root / 'stderr.txt').read_text()}")


def _left_in_session(session: int) -> list[psutil.Process]:
    """Live processes of ``session`` (the run's session: everything it started, unless it called setsid)."""
    left = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getsid(proc.pid) == session and proc.info["status"] != psutil.STATUS_ZOMBIE:
                left.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return left


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill(pids: list[int]) -> None:
    """Clean up after a failed test: kill what the run left."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.parametrize(
    ("runner", "signum"),
    [
        ("threads", signal.SIGTERM),
        ("threads", signal.SIGINT),
        ("processes:2", signal.SIGTERM),
    ],
    ids=["threads-SIGTERM", "threads-SIGINT", "processes-SIGTERM"],
)
def test_a_stuck_metric_cannot_hold_a_signal_past_the_grace_period(
    tmp_path: Path, prefect_api_url: str, runner: str, signum: int
) -> None:
    """One signal while a metric loops in its own code, swallowing the interrupt: the run exits 128 + signal after
    the grace period (default 10 s; ``EVALTASKS_STOP_GRACE_S``, 2 s in the SIGINT case, whose message must then
    say 2 s), with one line naming the metric, and none of its processes is left (it used to hang for as long as
    the metric looped)."""
    suite = _workspace(tmp_path, "StuckMetric")
    env = subprocess_env(tmp_path / "ph", prefect_api_url)
    grace = "2" if signum == signal.SIGINT else "10"
    if grace != "10":
        env["EVALTASKS_STOP_GRACE_S"] = grace
    proc = _start(tmp_path, suite, runner, env)
    deadline = time.monotonic() + DEADLINE_S
    while not any((tmp_path / "records").iterdir()):
        assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()
        assert time.monotonic() < deadline, "the metric never ran"
        time.sleep(0.05)
    stuck = [int(p.name.split("-")[1]) for p in (tmp_path / "records").iterdir()]
    os.killpg(proc.pid, signum)
    code = _wait(proc, tmp_path)
    err = (tmp_path / "stderr.txt").read_text()
    left = _left_in_session(proc.pid)
    _kill([p.pid for p in left])
    assert code == 128 + signum, err
    if runner == "threads":  # in its own thread of the run's process: only the grace period ends it
        assert f"StuckMetric did not stop within {grace} s" in err, err
    # (a process-pool worker gets the signal too, as the whole process group does, and ends on it)
    interrupted = [line for line in err.splitlines() if "interrupted" in line]
    assert len(interrupted) == 1 and interrupted[0].startswith(f"evaltasks: interrupted by {signum.name}"), err
    if runner == "threads":  # a fresh output folder: no previous reports to keep, and the line says no more
        assert interrupted[0].endswith("so the run's processes were killed; no reports written"), err
    assert "Traceback" not in err, err
    assert not left, [p.cmdline() for p in left]
    assert not [pid for pid in stuck if _alive(pid)]


@pytest.mark.parametrize("runner", ["threads", "processes:2"])
def test_processes_a_metric_forked_are_gone_when_the_run_ends(
    tmp_path: Path, prefect_api_url: str, runner: str
) -> None:
    """A metric that forks a child which never exits: the run still ends with its verdict, and neither that child
    nor any other process of the run is left (under threads the child used to stay behind)."""
    suite = _workspace(tmp_path, "ForkMetric")
    proc = _start(tmp_path, suite, runner, subprocess_env(tmp_path / "ph", prefect_api_url), "--batch-size", "2")
    code = _wait(proc, tmp_path)
    forked = [int(p.name.split("-")[1]) for p in (tmp_path / "records").iterdir()]
    left = _left_in_session(proc.pid)
    _kill([p.pid for p in left] + forked)
    assert code == 0, (tmp_path / "stderr.txt").read_text()
    assert forked, "the metric never forked"
    assert not [pid for pid in forked if _alive(pid)], "a process the metric forked outlived the run"
    assert not left, [p.cmdline() for p in left]


def test_a_process_pool_worker_that_dies_leaves_no_prefect_server(tmp_path: Path) -> None:
    """A worker of the processes runner ends abruptly (os._exit in a metric) in a run with its temporary Prefect
    server: exit 3, and no process of the run is left, Prefect servers (in sessions of their own) included: every
    process whose environment names this run's PREFECT_HOME is gone."""
    suite = _workspace(tmp_path, "ExitMetric")
    home = tmp_path / "ph"
    proc = _start(tmp_path, suite, "processes:2", subprocess_env(home))  # no PREFECT_API_URL: temporary servers
    code = _wait(proc, tmp_path)
    err = (tmp_path / "stderr.txt").read_text()

    def ours() -> list[psutil.Process]:
        found = []
        for p in psutil.process_iter(["pid"]):
            try:
                if p.pid != os.getpid() and p.environ().get("PREFECT_HOME") == str(home):
                    found.append(p)
            except psutil.Error:
                continue
        return found

    deadline = time.monotonic() + 30  # a server asked to stop by its parent's death may take a moment
    while ours() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = ours()
    _kill([p.pid for p in left])
    assert code == 3, err
    assert "BrokenProcessPool" in err, err
    assert not left, [p.cmdline() for p in left]
