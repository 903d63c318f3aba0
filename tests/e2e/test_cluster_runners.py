"""`evaltasks run --task-runner ray:ADDRESS | dask:tcp://...` on real clusters started as separate processes.

Each cluster is started here the way a user starts one (`ray start --head`; `dask scheduler` + two `dask worker`
processes) on this machine, in a session of its own so that the finalizer ends exactly its processes (`ray stop`
would end every Ray process of the user on the machine, other test runs' too). The suite (48 cases: per-case
references, a reference set searched with FAISS, LengthCheck) runs through the CLI in a subprocess without
``PREFECT_API_URL``, as a user's first run does: the workers must report to the run's temporary Prefect server
rather than start one each. Scores must equal the in-process (threads) run's exactly; the task runs must have
run in the cluster's worker processes (their log files and pids), each loading the embedding model at most once
(docs/prefect.md#task-runners). Waits poll for a condition under generous deadlines; nothing depends on speed.
Each cluster starts while the threads run it is compared with runs (that run is made once per test session,
whichever pytest-xdist worker needs it first).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from tests.process_env import subprocess_env
from tests.suite_helpers import reference_suite

psutil = pytest.importorskip("psutil")

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 600  # generous: the machine may be shared and busy
BATCH_SIZE = 8  # 48 cases: 6 score-batch task runs per metric, 18 in all
# Variants of the quickstart answers: 6 × 8 = 48 distinct outputs (each one embedded once by a worker).
VARIANTS = ["", "In short: ", "To answer your question, ", "Briefly, ", "As far as I know, ", "Here is the answer. "]
FACTS = "Paris is the capital of France.\nThe Solar System has eight planets.\nWater boils at 100 °C at sea level.\n"
# The threads a process's torch sums a forward pass with, the same in the threads run and in every worker: float32
# sums split over 1 or 2 threads differ in the last bit, and so do the scores (docs/scaling.md#exact-scores-on-a-cluster).
# Ray sets OMP_NUM_THREADS to a task's CPUs (1) in a worker where it is unset; torch reads it when its thread pool
# starts, which is before or after that depending on the worker's first task: one CI run in dozens embedded with 1.
EMBED_THREADS = "2"
MODEL_LOAD = "loading embedding model"  # evaltasks.embeddings.local logs it once per process that loads the model
TASK_DONE = re.compile(
    r"Task run '(score-batch|embed-outputs|embed-references|generate-outputs)-[0-9a-f]+' - Finished in state Completed"
)
SCORE_DONE_AT = re.compile(r"^(\d\d:\d\d:\d\d\.\d+) \| INFO +\| Task run 'score-batch-[0-9a-f]+' - Finished", re.M)
# Ray replaces 127.0.0.1 by the machine's address and listens on every interface, except where it keeps a cluster
# on one machine (its rule for macOS and Windows): this keeps the test's cluster, and its driver, on 127.0.0.1.
RAY_ON_LOOPBACK = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    # Ray's own connection limits (5 s / 60 s), raised for a 2-core machine busy with other test
    # workers: a driver that missed the head's pubsub within 5 s once hung there for 10 minutes
    "RAY_gcs_rpc_server_connect_timeout_s": "60",
    "RAY_gcs_rpc_server_reconnect_timeout_s": "300",
    "RAY_py_gcs_connect_timeout_s": "120",
}
TIMINGS: dict[
    str, float
] = {}  # wall seconds per runner (printed with -s, for docs/performance.md#scaling-out-a-real-dask-or-ray-cluster)


@pytest.fixture(scope="module", autouse=True)
def _print_timings() -> Iterator[None]:
    """Wall seconds of each cluster start and run, printed at the end (``pytest -s``: the numbers of docs/performance.md#scaling-out-a-real-dask-or-ray-cluster)."""
    yield
    print("\ncluster runner timings (s):", {name: round(value, 1) for name, value in TIMINGS.items()})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(condition: Any, what: str, process: subprocess.Popen[Any] | None = None) -> Any:
    """Poll ``condition()`` until it returns something truthy (returned), failing after DEADLINE_S or when
    ``process`` has exited."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            pytest.fail(f"{what}: the process exited with {process.returncode} first")
        time.sleep(0.2)
    pytest.fail(f"{what}: not within {DEADLINE_S} s")


def _end_groups(*processes: subprocess.Popen[Any]) -> None:
    """End each process's session (each was started with ``start_new_session``), all at once: SIGTERM, SIGKILL
    what is left after 5 s (Ray's GCS server and a Dask worker take longer to stop on SIGTERM); wait until none
    of their processes is left."""
    groups = {process.pid for process in processes}
    members = [p for p in psutil.process_iter() if _group_of(p) in groups]
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        for group in groups:
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p) for p in members):
            time.sleep(0.2)
    for process in processes:
        process.wait(timeout=DEADLINE_S)
    _wait_for(
        lambda: not any(_alive(p) for p in members) and not any(_group_of(p) in groups for p in psutil.process_iter()),
        f"the processes of sessions {sorted(groups)} to end",
    )


def _group_of(proc: Any) -> int | None:
    try:
        return os.getpgid(proc.pid) if proc.status() != psutil.STATUS_ZOMBIE else None
    except (psutil.Error, ProcessLookupError, PermissionError):
        return None


def _alive(proc: Any) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 48-case suite: ReferenceMatch (per-case references), ReferenceMatch against a reference set, LengthCheck."""
    directory = tmp_path_factory.mktemp("cluster-suite")
    rows = [json.loads(line) for line in (ROOT / "examples/quickstart/answers.jsonl").read_text().splitlines() if line]
    with (directory / "answers.jsonl").open("w", encoding="utf-8") as out:
        for number, prefix in enumerate(VARIANTS):
            for row in rows:
                out.write(json.dumps({**row, "id": f"{row['id']}-{number}", "answer": prefix + row["answer"]}) + "\n")
    suite = reference_suite(directory, name="cluster-check", dataset="answers.jsonl", facts=FACTS)
    # the outputs come from a python target (a module of the suite's folder, pickled by value to the workers) that
    # answers with the dataset's answer column and names the process it ran in
    (directory / "cluster_bot.py").write_text(
        "import os\n\ndef respond(case):\n    return {'output': case.vars['answer'], 'metadata': {'pid': os.getpid()}}\n",
        encoding="utf-8",
    )
    with suite.open("a", encoding="utf-8") as file:
        file.write("target: {python: cluster_bot:respond}\n")
    return suite


def _run(suite: Path, runner: str, workdir: Path, env: dict[str, str]) -> tuple[int, str, dict]:
    """``evaltasks run SUITE --task-runner RUNNER`` in a subprocess, with an index of its own (every text is
    embedded by this run's workers): the CLI's pid, its stderr and its results.json."""
    workdir.mkdir()
    started = time.monotonic()
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "evaltasks.cli",
            "run",
            str(suite),
            "--task-runner",
            runner,
            "--batch-size",
            str(BATCH_SIZE),
            "--no-cache",
            "--quiet",
            "--output-dir",
            str(workdir / "out"),
            "--index-dir",
            str(workdir / "index"),
        ],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = cli.communicate(timeout=DEADLINE_S)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    TIMINGS[runner.partition(":")[0]] = time.monotonic() - started
    assert cli.returncode == 0, stderr[-5000:]
    assert "Traceback" not in stderr, stderr[-5000:]
    return cli.pid, stderr, json.loads((workdir / "out/results.json").read_text(encoding="utf-8"))


def _cli_env(tmp_path: Path) -> dict[str, str]:
    """A user's environment: no PREFECT_API_URL (the run starts its temporary server of its own), and the
    embedding's thread count fixed (:data:`EMBED_THREADS`) for the CLI and every worker it reaches."""
    (tmp_path / "prefect-home").mkdir(parents=True, exist_ok=True)
    return {**subprocess_env(tmp_path / "prefect-home"), "OMP_NUM_THREADS": EMBED_THREADS}


def _worker_env(tmp_path: Path) -> dict[str, str]:
    """A cluster worker's environment: a user's, with INFO lines of every logger in the worker's log (Prefect's
    root level; by default WARNING), so evaltasks' "loading embedding model" shows once per load."""
    return {**_cli_env(tmp_path), "PREFECT_LOGGING_ROOT_LEVEL": "INFO"}


@pytest.fixture(scope="module")
def threads_results(suite: Path, tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> dict:
    """The same suite run in-process (the default threads runner), on a temporary Prefect server of its own, as
    the cluster runs (the session's server is shared with the tests running beside this one).

    Made once per test session: under pytest-xdist the first worker to need it runs it and leaves its
    results.json in the directory all workers' temporary directories share, the others wait on a file lock and
    read that (pytest-xdist's documented pattern for a once-per-session set-up)."""
    tmp = tmp_path_factory.mktemp("threads")
    if worker_id == "master":  # no pytest-xdist: this process is the session
        return _run(suite, "threads", tmp / "run", _cli_env(tmp))[2]
    shared = tmp_path_factory.getbasetemp().parent / "cluster-threads-results.json"
    with FileLock(f"{shared}.lock", timeout=DEADLINE_S):
        if not shared.is_file():
            shared.write_text(json.dumps(_run(suite, "threads", tmp / "run", _cli_env(tmp))[2]), encoding="utf-8")
    return json.loads(shared.read_text(encoding="utf-8"))


def _scores(results: dict) -> list[tuple[str, str, float, bool]]:
    return [
        (case["id"], metric["name"], metric["score"], metric["success"])
        for case in results["cases"]
        for metric in case["metrics"]
    ]


def _errors(results: dict) -> list[str]:
    """The errored results of a run, as 'case/metric: error' (what an assertion message needs)."""
    return [
        f"{case['id']}/{m['name']}: {m.get('error')}"
        for case in results["cases"]
        for m in case["metrics"]
        if m["status"] == "errored"
    ][:5]


def _check_same_scores(distributed: dict, local: dict) -> None:
    assert len(local["cases"]) == len(distributed["cases"]) == 48
    assert not _errors(local) and not _errors(distributed), (_errors(local), _errors(distributed))
    assert _scores(distributed) == _scores(local)  # exactly: the same model, texts, batches and threads
    assert distributed["summary"] == local["summary"]


def _check_generated_on_workers(results: dict, logs: dict[int, str], cli_pid: int) -> None:
    """Every output was generated by the suite's python target in a worker process (a pid of the workers' logs),
    none in the CLI's process, and every one by a request of this run (``--no-cache``)."""
    pids = {case["generation"]["metadata"]["pid"] for case in results["cases"]}
    assert cli_pid not in pids and pids <= set(logs), (pids, set(logs))
    assert results["targets"][0]["requests"] == 48 and not any(c["generation"]["cached"] for c in results["cases"])


def _check_worker_logs(logs: dict[int, str], cli_pid: int, runner: str) -> None:
    """The task runs ran in the workers (pids from their log files, not the CLI's), each worker loaded the model
    at most once, and no worker started a Prefect server of its own. Records the median time between two
    score-batch completions in one worker (8 cases of sub-millisecond scoring: the cost of a task run there)."""
    done = {pid: Counter(m.group(1) for m in TASK_DONE.finditer(text)) for pid, text in logs.items()}
    gaps = []
    for text in logs.values():
        stamps = [datetime.datetime.strptime(m.group(1), "%H:%M:%S.%f") for m in SCORE_DONE_AT.finditer(text)]
        gaps += [(later - earlier).total_seconds() for earlier, later in zip(stamps, stamps[1:])]  # noqa: RUF007
    if gaps:
        TIMINGS[f"{runner} per score-batch task"] = statistics.median(gaps)
    total = sum(done.values(), Counter())
    assert total["score-batch"] == 3 * 48 // BATCH_SIZE, done
    assert total["generate-outputs"] >= 1, done
    assert total["embed-outputs"] >= 1 and total["embed-references"] >= 1, done
    assert cli_pid not in logs
    assert len([pid for pid, count in done.items() if count]) >= 1
    loads = {pid: text.count(MODEL_LOAD) for pid, text in logs.items()}
    assert all(count <= 1 for count in loads.values()), loads  # once per worker process, never per task
    assert sum(loads.values()) >= 1, loads  # the embedding tasks ran in workers, which loaded the model
    for pid, text in logs.items():
        assert "Starting temporary server" not in text, (pid, text[-3000:])  # they report to the run's server


# ---------------------------------------------------------------------------------------------------------- Ray


def _ray_token(tmp_path: Path) -> dict[str, str]:
    """The environment of a Ray cluster secured as Ray 2.5x+ secures a local one (a token in a file, and
    ``RAY_AUTH_MODE`` unset, so that ``ray start`` turns token authentication on because a token exists) and of
    the user's run, which names the same file; ``~/.ray/auth_token`` then plays no part
    (docs/scaling.md#token-authentication)."""
    token = tmp_path / "ray-auth-token"
    if not token.exists():
        token.write_text(secrets.token_hex(32), encoding="utf-8")
    return {"RAY_AUTH_TOKEN_PATH": str(token)}


@pytest.fixture()
def ray_cluster(tmp_path: Path) -> Iterator[Callable[[], tuple[str, Path]]]:
    """``ray start --head`` (2 CPUs: two worker processes at a time) in a session of its own, started here and
    waited for by the function yielded (its GCS address and its session directory), so that the test can do
    other work while it starts. Ended, with every process it started, after the test."""
    pytest.importorskip("prefect_ray", reason="the Ray runner needs evaltasks[ray] (prefect-ray needs Python >= 3.11)")
    # Ray's sockets live under its temporary directory: pytest's paths are too long for them (AF_UNIX: 107 bytes).
    temp_dir = Path(tempfile.mkdtemp(prefix="evaltasks-ray-"))
    env = {**_worker_env(tmp_path / "workers"), **RAY_ON_LOOPBACK, **_ray_token(tmp_path)}  # the workers inherit it
    started = time.monotonic()
    head = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "start",
            "--head",
            "--block",
            "--node-ip-address",
            "127.0.0.1",
            "--port",
            "0",
            "--num-cpus",
            "2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--ray-client-server-port",
            str(_free_port()),
            "--dashboard-agent-listen-port",
            str(_free_port()),
            "--temp-dir",
            str(temp_dir),
        ],
        cwd=tmp_path,
        env=env,
        stdout=(tmp_path / "ray-head.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    address_file = temp_dir / "ray_current_cluster"

    def ready() -> tuple[str, Path]:
        _wait_for(
            lambda: (
                address_file.is_file()
                and address_file.read_text().strip()
                and "Ray runtime started" in (tmp_path / "ray-head.log").read_text()
            ),
            "ray start",
            head,
        )
        TIMINGS.setdefault("ray start", time.monotonic() - started)
        return address_file.read_text().strip(), temp_dir / "session_latest"

    try:
        yield ready
    finally:
        _end_groups(head)
        shutil.copytree(
            temp_dir / "session_latest" / "logs",
            tmp_path / "ray-logs",
            dirs_exist_ok=True,
            ignore_dangling_symlinks=True,
        )  # kept with the test's files for a look after a failure
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_suite_on_a_ray_cluster_equals_threads(
    ray_cluster: Callable[[], tuple[str, Path]], suite: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """`--task-runner ray:ADDRESS` against a cluster started with `ray start --head`: the same scores as the
    in-process run; every task ran in a Ray worker process, which loaded the model at most once, and the python
    target generated every output there."""
    threads_results = request.getfixturevalue("threads_results")  # while the cluster starts
    address, session = ray_cluster()
    assert address.startswith("127.0.0.1:")
    assert "Token authentication is enabled for this Ray cluster" in (tmp_path / "ray-head.log").read_text()
    cli_pid, stderr, results = _run(
        suite, f"ray:{address}", tmp_path / "run", {**_cli_env(tmp_path), **RAY_ON_LOOPBACK, **_ray_token(tmp_path)}
    )
    _check_same_scores(results, threads_results)
    assert "Connected to Ray cluster" in stderr, stderr[-3000:]  # with the token: evaltasks turned its use on
    # Ray writes each worker process's stdout and stderr to logs/worker-<id>-<job>-<pid>.{out,err}.
    logs: dict[int, str] = {}
    for path in (session / "logs").glob("worker-*.*"):
        if path.suffix in (".out", ".err"):
            pid = int(path.stem.rsplit("-", 1)[1])
            logs[pid] = logs.get(pid, "") + path.read_text(errors="replace")
    _check_worker_logs(logs, cli_pid, "ray")
    _check_generated_on_workers(results, logs, cli_pid)


# --------------------------------------------------------------------------------------------------------- Dask


@pytest.fixture()
def dask_cluster(tmp_path: Path) -> Iterator[Callable[[], tuple[str, dict[int, Path]]]]:
    """``dask scheduler`` and two ``dask worker --nthreads 1 --no-nanny`` processes (so each worker's pid is the
    process started here), each in a session of its own, started here and waited for by the function yielded
    (the scheduler's address and each worker's log by pid), so that the test can do other work while they start.
    Ended, with every process they started, after the test."""
    pytest.importorskip("prefect_dask", reason="the Dask runner needs evaltasks[dask]")
    env = _worker_env(tmp_path / "workers")
    scheduler_file = tmp_path / "scheduler.json"
    processes: list[subprocess.Popen[Any]] = []

    def start(args: list[str], log: Path) -> subprocess.Popen[Any]:
        process = subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=tmp_path,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        processes.append(process)
        return process

    def address() -> str | None:
        try:
            return str(json.loads(scheduler_file.read_text())["address"])
        except (OSError, ValueError, KeyError):
            return None  # not written yet, or half-written

    started = time.monotonic()
    try:
        scheduler_log = tmp_path / "scheduler.log"
        scheduler = start(
            [
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
            ],
            scheduler_log,
        )
        logs = {}
        for number in range(2):  # they wait for the scheduler file (--scheduler-file) and register when it is up
            log = tmp_path / f"worker-{number}.log"
            worker = start(
                [
                    "distributed.cli.dask_worker",
                    "--scheduler-file",
                    str(scheduler_file),
                    "--nthreads",
                    "1",
                    "--no-nanny",
                    "--no-dashboard",
                    "--host",
                    "127.0.0.1",
                ],
                log,
            )
            logs[worker.pid] = log

        def ready() -> tuple[str, dict[int, Path]]:
            scheduler_address = _wait_for(address, "dask scheduler", scheduler)
            _wait_for(
                lambda: scheduler_log.read_text(errors="replace").count("Register worker") >= 2,
                "two dask workers registered",
                scheduler,
            )
            TIMINGS.setdefault("dask start", time.monotonic() - started)
            return scheduler_address, logs

        yield ready
    finally:
        _end_groups(*processes)


def test_suite_on_a_dask_cluster_equals_threads(
    dask_cluster: Callable[[], tuple[str, dict[int, Path]]], suite: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """`--task-runner dask:tcp://...` against `dask scheduler` + two `dask worker` processes: the same scores as
    the in-process run; every task ran in a worker process, which loaded the model at most once."""
    threads_results = request.getfixturevalue("threads_results")  # while the cluster starts
    address, worker_logs = dask_cluster()
    assert address.startswith("tcp://127.0.0.1:")
    cli_pid, _stderr, results = _run(suite, f"dask:{address}", tmp_path / "run", _cli_env(tmp_path))
    _check_same_scores(results, threads_results)
    logs = {pid: log.read_text(errors="replace") for pid, log in worker_logs.items()}
    _check_worker_logs(logs, cli_pid, "dask")
    _check_generated_on_workers(results, logs, cli_pid)


# --------------------------------------------------------------------------- which workers get the run's server


def test_this_machine_is_told_from_other_hosts() -> None:
    """A worker's host is this machine when a socket binds to its address: loopback, this host's name and the
    address of its interface (the one a UDP socket towards a public address would use) are; others are not."""
    from evaltasks.flows._cluster import is_this_machine

    assert is_this_machine("127.0.0.1") and is_this_machine("localhost") and is_this_machine(socket.gethostname())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.7", 9))  # UDP connect sends nothing: it picks the outgoing interface
            assert is_this_machine(probe.getsockname()[0])
        except OSError:  # no route at all: only loopback here
            pass
    assert not is_this_machine("203.0.113.7")  # TEST-NET-3 (RFC 5737): never an address of this machine


def test_workers_elsewhere_keep_their_settings_and_the_run_says_why() -> None:
    """Workers on another machine cannot reach the run's temporary server (127.0.0.1): the runner leaves their
    settings alone and warns once, naming the host and PREFECT_API_URL. (Records are collected by a handler on
    the runner's own logger: importing Prefect first in this test reconfigures logging and would drop pytest's
    caplog handler from the root logger.)"""
    import logging

    from evaltasks.flows._cluster import WorkersReportHere

    class Collect(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.WARNING)
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    class Runner(WorkersReportHere):  # the mixin's own logic, with hosts given (no second machine here)
        logger = logging.getLogger("evaltasks-test-runner")

        def __init__(self, hosts: set[str]) -> None:
            self.hosts = hosts

        def worker_hosts(self) -> set[str]:
            return self.hosts

    collect = Collect()
    Runner.logger.addHandler(collect)
    try:
        assert Runner({"127.0.0.1", "localhost"})._workers_here()
        assert not collect.records
        elsewhere = Runner({"127.0.0.1", "203.0.113.7"})
        assert not elsewhere._workers_here() and not elsewhere._workers_here()
    finally:
        Runner.logger.removeHandler(collect)
    assert len(collect.records) == 1
    text = collect.records[0].getMessage()
    assert "203.0.113.7" in text and "PREFECT_API_URL" in text and "127.0.0.1," not in text


@pytest.mark.parametrize("kind", ["ray", "dask"])
def test_a_missing_runner_package_names_the_extra(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without prefect-ray (prefect-dask) the CLI exits 2 before anything starts, naming `evaltasks[ray]`
    (`evaltasks[dask]`). Both are installed here: the package is hidden from the import system (the one mock)."""
    import importlib.util

    from evaltasks import cli

    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *args: None if name == f"prefect_{kind}" else found(name, *args)
    )
    suite = tmp_path / "suite.yaml"
    suite.write_text("name: s\ndataset: {path: cases.jsonl}\nmetrics: [{metric: NonEmptyMetric}]\n", encoding="utf-8")
    (tmp_path / "cases.jsonl").write_text('{"actual_output": "one"}\n', encoding="utf-8")
    assert cli.main(["run", str(suite), "--task-runner", f"{kind}:127.0.0.1:1"]) == 2
    error = capsys.readouterr().err
    assert f"task runner '{kind}' needs the prefect-{kind} package (pip install 'evaltasks[{kind}]')" in error
    assert "Traceback" not in error
