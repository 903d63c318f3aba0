"""Interrupting ``evaltasks run``, ``evaluate_sync`` and local embeddings (docs/cli.md#interrupted-runs).

Every run is a real ``evaltasks run`` subprocess in a session of its own (``start_new_session=True``), signalled
through its process group (``os.killpg``) the way a terminal's Ctrl+C or a CI runner's cancel reaches it. The
stage a signal lands in is found by polling for what the run itself shows (its children, the libraries it has
mapped, Prefect's INFO log lines, files appearing), never by sleeping; deadlines are generous and only bound
how long a broken run may hang the test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evaltasks.engine.lifecycle import RunReport
from tests.process_env import subprocess_env

pytestmark = pytest.mark.slow  # signals to real evaltasks runs

psutil = pytest.importorskip("psutil")

DEADLINE_S = 600  # generous: the machine may be shared and busy
EMBED_CASES = 8000  # outputs to embed: ~16 chunks (evaltasks.embeddings.local.ENCODE_CHUNK), ten seconds or more of
# work, so a signal sent when the references are done lands during the outputs' encode even on a busy machine
LENGTH_CASES = 100_000  # LengthCheck only: 20 scoring batches and reports of ~40 MB
SERVER_APP = "prefect.server.api.server:create_app"  # in the command line of Prefect's temporary server
RUNS: list[Run] = []  # started by the running test
PREVIOUS = {"results.json": '{"previous": true}\n', "junit.xml": "<testsuites/>\n", "summary.md": "# previous\n"}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two suites (ReferenceMatch + LengthCheck on EMBED_CASES outputs; LengthCheck on LENGTH_CASES) and one
    PREFECT_HOME shared by the module's runs (its database is created once)."""
    root = tmp_path_factory.mktemp("interrupts")
    with open(root / "embed.jsonl", "w", encoding="utf-8") as handle:
        for i in range(EMBED_CASES):
            handle.write(
                json.dumps(
                    {
                        "input": f"question {i}",
                        "actual_output": f"Answer {i}: the fox number {i * 7} jumps over dog {i % 13}.",
                        "references": [f"Reference {i % 40} about foxes and dogs."],
                    }
                )
                + "\n"
            )
    (root / "embed.yaml").write_text(
        "name: embed\ndataset: {path: embed.jsonl}\nmetrics:\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local}\n"
        "  - {metric: LengthCheckMetric, max_length: 60, unit: words}\ngate: {min_pass_rate: 0.0}\n",
        encoding="utf-8",
    )
    with open(root / "length.jsonl", "w", encoding="utf-8") as handle:
        for i in range(LENGTH_CASES):
            handle.write(json.dumps({"input": f"q{i}", "actual_output": f"answer {i} " + "word " * (i % 50)}) + "\n")
    (root / "length.yaml").write_text(
        "name: length\ndataset: {path: length.jsonl}\nmetrics:\n"
        "  - {metric: LengthCheckMetric, max_length: 30, unit: words}\ngate: {min_pass_rate: 0.0}\n",
        encoding="utf-8",
    )
    return root


@pytest.fixture(autouse=True)
def _stop_runs() -> Iterator[None]:
    """Whatever a test leaves running (when it fails) is killed."""
    yield
    while RUNS:
        RUNS.pop().stop()


class Run:
    """An ``evaltasks run`` subprocess in its own session, its stderr in a file, its children remembered."""

    def __init__(self, workspace: Path, name: str, suite: str) -> None:
        self.dir = workspace / name
        self.dir.mkdir()
        self.out = self.dir / "out"
        self.index = self.dir / "index"
        self.out.mkdir()
        for file, text in PREVIOUS.items():  # a previous, complete report set the run must not half-replace
            (self.out / file).write_text(text, encoding="utf-8")
        env = subprocess_env(workspace / "prefect-home")
        env["PREFECT_LOGGING_LEVEL"] = "INFO"  # the flow's log lines mark its stages
        self.stderr_path = self.dir / "stderr.txt"
        self.stdout_path = self.dir / "stdout.txt"
        with open(self.stderr_path, "wb") as err, open(self.stdout_path, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "evaltasks.cli",
                    "run",
                    str(workspace / suite),
                    "--output-dir",
                    str(self.out),
                    "--index-dir",
                    str(self.index),
                    "--no-cache",
                    "--quiet",
                ],
                cwd=self.dir,
                env=env,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.children: dict[int, float] = {}  # pid -> create time of every descendant seen
        RUNS.append(self)

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def watch_children(self) -> list[Any]:
        """The run's live descendants (remembered for :meth:`leftovers`).

        Read from ``/proc/PID/task/TID/children``, the kernel's list of each thread's children: a few small
        files instead of psutil's scan of every process on the machine (about 4 ms of CPU at 150 processes,
        every 10 ms of a wait: a quarter of a core taken from the run being watched on a 2-core machine)."""
        found = []
        for pid in _descendants(self.proc.pid):
            try:
                child = psutil.Process(pid)
                self.children.setdefault(pid, child.create_time())
            except psutil.NoSuchProcess:
                continue
            found.append(child)
        return found

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        """Poll ``condition`` (and the run's children) until it holds; fail if the run ends first."""
        deadline = time.monotonic() + DEADLINE_S
        while not condition():
            self.watch_children()
            assert self.proc.poll() is None, (
                f"the run ended (rc {self.proc.returncode}) before {what}:\n{self.stderr()}"
            )
            assert time.monotonic() < deadline, f"no {what} within {DEADLINE_S} s:\n{self.stderr()}"
            time.sleep(0.01)
        self.watch_children()

    def signal_group(self, signum: int) -> int:
        """Send ``signum`` to the run's process group (as a terminal's Ctrl+C does); wait for the exit code."""
        os.killpg(self.proc.pid, signum)
        deadline = time.monotonic() + DEADLINE_S
        while self.proc.poll() is None:
            self.watch_children()
            assert time.monotonic() < deadline, f"still running {DEADLINE_S} s after {signum}:\n{self.stderr()}"
            time.sleep(0.05)
        return self.proc.returncode

    def leftovers(self) -> list[int]:
        """Descendants seen during the run still alive 60 s after it has exited (then killed, so that a
        failing test leaves nothing behind)."""
        deadline = time.monotonic() + 60
        while True:
            alive = []
            for pid, created in self.children.items():
                try:
                    if psutil.Process(pid).create_time() == created:
                        alive.append(psutil.Process(pid))
                except psutil.NoSuchProcess:
                    pass
            if not alive or time.monotonic() > deadline:
                for proc in alive:
                    proc.kill()
                return [proc.pid for proc in alive]
            time.sleep(0.1)

    def stop(self) -> None:
        """Kill what is left of the run (after a failed test)."""
        if self.proc.poll() is None:
            self.watch_children()
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.leftovers()

    def servers(self) -> list[Any]:
        """The run's temporary Prefect server processes."""
        return [c for c in self.watch_children() if SERVER_APP in _cmdline(c)]

    def check_interrupted(self, rc: int, signum: int, *, new_reports_allowed: bool = False) -> None:
        """Exit 130/143, one "interrupted" line, no traceback or Prefect noise, no process left, reports either
        the previous set or (``new_reports_allowed``) a complete new one, the index intact."""
        err = self.stderr()
        assert rc == 128 + signum, err
        lines = [line for line in err.splitlines() if "interrupted" in line.lower()]
        assert len(lines) == 1 and lines[0].startswith(f"evaltasks: interrupted by {signal.Signals(signum).name}"), err
        for noise in ("Traceback", "ConnectError", "EventsWorker", "terminate called", "Crash detected", "| ERROR"):
            assert noise not in err, err
        assert not self.leftovers(), f"processes left: {self.leftovers()}"
        reports = {file: (self.out / file).read_text(encoding="utf-8") for file in PREVIOUS}
        if reports != PREVIOUS:
            assert new_reports_allowed, reports
            results = json.loads(reports["results.json"])  # a complete new set: the three agree
            assert len(results["cases"]) == results["summary"]["cases"]
            assert f'tests="{results["summary"]["cases"]}"' in reports["junit.xml"]
            assert "reports in" in lines[0]
        else:
            assert "keeps the previous ones" in lines[0]
        assert not [p.name for p in self.out.iterdir() if p.name not in PREVIOUS], "temporary files left"
        _assert_index_intact(self.index)


def _descendants(pid: int) -> list[int]:
    """The pids of ``pid``'s live descendants, from ``/proc/PID/task/TID/children`` (Linux 3.5+; every thread's
    list, since a child belongs to the thread that forked it); psutil's full scan where the files are absent."""
    if not Path(f"/proc/{pid}/task/{pid}/children").exists():
        try:
            return [child.pid for child in psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
    found: list[int] = []
    parents = [pid]
    while parents:
        parent = parents.pop()
        try:
            threads = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:  # ended meanwhile
            continue
        for thread in threads:
            try:
                children = [int(child) for child in (thread / "children").read_text().split()]
            except OSError:
                continue
            found += children
            parents += children
    return found


def _cmdline(proc: Any) -> list[str]:
    try:
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def _assert_index_intact(index_dir: Path) -> None:
    """Every namespace in ``index_dir`` (if any) reads and verifies: checksum, count, dimensions."""
    from evaltasks.index import ReferenceIndex

    entries = ReferenceIndex(index_dir).info()
    assert all("error" not in entry for entry in entries), entries
    if entries:
        from evaltasks.embeddings.local import LocalEmbeddingProvider

        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "reference index ... is corrupt" would raise
            missing = ReferenceIndex(index_dir).missing_texts(
                LocalEmbeddingProvider(), [f"Reference {i} about foxes and dogs." for i in range(40)]
            )
        assert len(missing) in (0, 40)


def _mapped(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")
def test_sigint_while_the_temporary_server_starts(workspace: Path) -> None:
    run = Run(workspace, "server", "embed.yaml")
    run.wait_for(run.servers, "the temporary server process")
    run.check_interrupted(run.signal_group(signal.SIGINT), signal.SIGINT)
    assert not (run.index.exists() and any(run.index.iterdir())), "nothing was embedded yet"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")
def test_sigint_while_the_model_loads(workspace: Path) -> None:
    run = Run(workspace, "model", "embed.yaml")
    # the suite runs in a child of the command's process (its parent only waits: docs/cli.md#the-runs-parent-process)
    run.wait_for(
        lambda: any(_mapped(pid, "libtorch") for pid in [run.proc.pid, *_descendants(run.proc.pid)]),
        "torch being loaded",
    )
    run.check_interrupted(run.signal_group(signal.SIGINT), signal.SIGINT)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_embedding_stops_within_a_chunk(workspace: Path, signum: int) -> None:
    """The references are in the index, the outputs' encode (several chunks) is running: it stops. With SIGTERM
    Prefect's own handler runs first; the embedding tasks it cancels once logged their failures as ERROR lines."""
    run = Run(workspace, f"embedding-{signum}", "embed.yaml")
    run.wait_for(lambda: "Task run 'embed-references" in run.stderr(), "the references embedded")
    run.check_interrupted(run.signal_group(signum), signum)
    assert "Embeddings:" not in run.stderr(), "the outputs' encode ran to its end"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")
def test_sigterm_while_scoring(workspace: Path) -> None:
    run = Run(workspace, "scoring", "length.yaml")
    run.wait_for(lambda: "Task run 'score-batch" in run.stderr(), "a scored batch")
    run.check_interrupted(run.signal_group(signal.SIGTERM), signal.SIGTERM)


FINALIZER_SCRIPT = """
import os, signal, sys, time

from evaltasks.cli._signals import Interrupt, run_interruptible

class SignalledWhileCollected:
    # The signal arrives while the garbage collector runs this finalizer: its handler runs here, and Python
    # drops what a finalizer raises ("Exception ignored in").
    def __del__(self):
        try:
            os.kill(os.getpid(), SIGNUM)  # the handler runs before os.kill returns, at the latest in the loop
            for _ in range(100_000):
                pass
        except BaseException as exc:
            print("raised in the finalizer:", type(exc).__name__, flush=True)
            raise

def run(interrupt):  # stands in for the evaluation: the signal must stop it
    with PREFECT_HANDLER():
        SignalledWhileCollected()  # no reference kept: finalized at once
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.01)
    print("ran to the end", flush=True)
    return 0

sys.exit(run_interruptible(run, Interrupt(output_dir=sys.argv[1], index_dir=sys.argv[1], cache=False)))
"""


@pytest.mark.parametrize(
    ("signum", "prefect_handler"),
    [
        (signal.SIGINT, False),
        (signal.SIGTERM, False),
        (signal.SIGTERM, True),
    ],
    ids=["SIGINT", "SIGTERM", "SIGTERM-in-a-flow-run"],
)
def test_a_signal_handled_inside_a_finalizer_still_stops_the_run(
    tmp_path: Path, signum: int, prefect_handler: bool
) -> None:
    """A signal whose handler runs inside ``__del__`` (where Python drops the exception it raises) still stops
    the run with its exit code and one line: the CLI delivers it again. With ``prefect_handler``, Prefect's own
    SIGTERM bridge (``capture_sigterm``, installed for a flow run) is the handler that raises there. The stand-in
    for the evaluation is the only substitute: the signals, handlers and finalizer are real."""
    script = FINALIZER_SCRIPT.replace("SIGNUM", f"signal.{signal.Signals(signum).name}").replace(
        "PREFECT_HANDLER", "capture_sigterm" if prefect_handler else "contextlib.nullcontext"
    )
    script = (
        "import contextlib\nfrom prefect.utilities.engine import capture_sigterm\n"
        if prefect_handler
        else "import contextlib\n"
    ) + script
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        env=subprocess_env(tmp_path / "prefect"),
    )
    raised = "TerminationSignal" if prefect_handler else "KeyboardInterrupt"
    assert f"raised in the finalizer: {raised}" in proc.stdout, proc.stdout + proc.stderr  # and Python dropped it
    assert "ran to the end" not in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 128 + signum, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "interrupted" in line]
    assert len(lines) == 1 and lines[0].startswith(f"evaltasks: interrupted by {signal.Signals(signum).name}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")
def test_sigint_while_writing_reports_leaves_one_complete_set(workspace: Path) -> None:
    """Signalled once the reports' temporary files appear: the previous set stays, or the new set is complete
    (the three files replace the old ones together, the signal held back meanwhile)."""
    run = Run(workspace, "reporting", "length.yaml")
    run.wait_for(lambda: any(p.name.startswith(".results.json.") for p in run.out.iterdir()), "reports being written")
    run.check_interrupted(run.signal_group(signal.SIGINT), signal.SIGINT, new_reports_allowed=True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")
def test_sigkill_of_the_cli_takes_the_temporary_server_with_it(workspace: Path) -> None:
    """SIGKILL runs no handler: the server, in a session of its own, must end when its parent does."""
    run = Run(workspace, "sigkill", "embed.yaml")
    run.wait_for(lambda: "Beginning flow run" in run.stderr(), "the flow run")
    servers = run.servers()
    assert len(servers) == 1
    server_session = os.getsid(servers[0].pid)
    run.proc.kill()
    run.proc.wait(timeout=60)
    assert not run.leftovers(), "the temporary server outlived the CLI"
    assert server_session != run.proc.pid, "the server was in the CLI's session: a terminal's Ctrl+C reaches it"


EVALUATE_SCRIPT = """
import atexit, sys, threading, time
from evaltasks import EvalTestCase, ReferenceMatchMetric, evaluate_sync
from evaltasks.embeddings import local

atexit.register(lambda: print(f"chunks {local.chunks_encoded()}", flush=True))  # after the threads are joined
cases = [EvalTestCase(actual_output=f"Output number {i}: a sentence about foxes, dogs and {i * 31}.",
                      references=["A reference about foxes."]) for i in range(int(sys.argv[1]))]


def report():
    while True:
        print(f"progress {local.chunks_encoded()}", flush=True)
        time.sleep(0.02)


threading.Thread(target=report, daemon=True).start()
evaluate_sync(cases, [ReferenceMatchMetric(embedding_provider="local")])
print("finished", flush=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups: Linux")
def test_sigint_stops_evaluate_sync_within_a_chunk(tmp_path: Path) -> None:
    """10,000 outputs are 20 chunks (plus 1 for the reference); SIGINT after the second: the encoder stops
    within a chunk and the interpreter exits (it used to finish the whole encode first)."""
    from evaltasks.embeddings.local import ENCODE_CHUNK

    cases = 10_000
    full = 1 + -(-cases // ENCODE_CHUNK)  # the count a whole run encodes (batch size 64 divides 512)
    script = tmp_path / "script.py"
    script.write_text(EVALUATE_SCRIPT, encoding="utf-8")
    out_path = tmp_path / "stdout.txt"
    with open(out_path, "wb") as out, open(tmp_path / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(cases)],
            env=subprocess_env(tmp_path / "ph"),
            stdout=out,
            stderr=err,
            start_new_session=True,
            cwd=tmp_path,
        )

    def chunks(prefix: str) -> int:
        # by pattern, not by line: the reporter thread may print while the atexit line is written
        values = [int(value) for value in re.findall(rf"{prefix} (\d+)", out_path.read_text())]
        return values[-1] if values else -1

    deadline = time.monotonic() + DEADLINE_S
    while chunks("progress") < 2:  # the reference and one chunk of outputs done: the outputs' encode runs
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr.txt").read_text()
        time.sleep(0.01)
    signalled_at = chunks("progress")
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=DEADLINE_S)
    err = (tmp_path / "stderr.txt").read_text()
    assert proc.returncode == -signal.SIGINT, err  # an uncaught KeyboardInterrupt ends a script so
    assert "finished" not in out_path.read_text()
    assert "terminate called" not in err and "Aborted" not in err, err
    encoded = chunks("chunks")
    assert 0 < encoded <= signalled_at + 2 < full, (encoded, signalled_at, full)


def test_a_signal_between_the_report_renames_is_held_until_the_set_is_complete(tmp_path: Path, monkeypatch) -> None:
    """The real SIGINT, raised right after the first of the three renames (the only injected part: the moment),
    reaches the program only once all three new reports are in place; before that change it left a new
    results.json beside the previous junit.xml and summary.md."""
    import evaltasks._atomic as atomic
    from evaltasks.reports import ReportWriter
    from evaltasks.results import MetricResult, TestCaseResult

    for file, text in PREVIOUS.items():
        (tmp_path / file).write_text(text, encoding="utf-8")
    real_replace, renamed = os.replace, []

    def replace_then_signal(src: str, dst: str) -> None:
        real_replace(src, dst)
        renamed.append(Path(dst).name)
        if len(renamed) == 1:
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt), ReportWriter(tmp_path, "s", {"M": 0.5}) as writer:  # closed as the flow does
        writer.add([TestCaseResult.from_metrics("a", None, "o", [MetricResult.scored("M", 0.9, 0.5, "r", {})])])
        monkeypatch.setattr(atomic.os, "replace", replace_then_signal)
        header = {"schema_version": 1, "suite": "s"}
        writer.write_results(header, RunReport.of_results(header, writer.summarize(), passed=True, min_pass_rate=0.5))
    monkeypatch.undo()
    assert sorted(renamed) == sorted(PREVIOUS)
    reports = {file: (tmp_path / file).read_text(encoding="utf-8") for file in PREVIOUS}
    assert all(reports[file] != PREVIOUS[file] for file in PREVIOUS), reports
    assert json.loads(reports["results.json"])["summary"]["cases"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(PREVIOUS), "temporary files left"


def test_the_action_summary_names_an_interrupted_run(tmp_path: Path) -> None:
    """The GitHub Action's summary for a run that wrote no new results says it was interrupted (exit 130/143)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("action_report", Path(__file__).parents[2] / "action" / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    log = tmp_path / "run.log"
    log.write_text("evaltasks: interrupted by SIGTERM: no reports written\n", encoding="utf-8")
    text = report._failure_markdown("demo", "143", str(log))
    assert "the run was interrupted (SIGTERM) (exit code 143)" in text and "interrupted by SIGTERM" in text
    assert "the run was interrupted (SIGINT) (exit code 130)" in report._failure_markdown("demo", "130", str(log))


def test_an_error_a_library_made_of_the_interrupt_ends_the_run_as_interrupted(tmp_path: Path) -> None:
    """pydantic-core reports a KeyboardInterrupt raised while it serialised a model as a PydanticSerializationError:
    once a signal has stopped the run, such an error is raised again for the interrupt's exit (130), not reported
    as an aborted run (exit 3, seen when Ctrl+C landed during generation); before any signal it is exit 3."""
    import argparse

    from pydantic import BaseModel, field_serializer

    from evaltasks.cli._signals import Interrupt, run_interruptible
    from evaltasks.cli.run import _aborted

    class Interrupted(BaseModel):
        value: int = 0

        @field_serializer("value")
        def _signal(self, value: int) -> int:
            raise KeyboardInterrupt  # as the signal handler does when the signal lands here

    args = argparse.Namespace(output_dir=str(tmp_path / "out"))

    def work(interrupt: Interrupt) -> int:
        try:
            Interrupted().model_dump()
        except Exception:  # noqa: BLE001 - what evaltasks.cli.run._run does with an unexpected error
            return _aborted(args, interrupt)
        return 0

    quiet = Interrupt(output_dir=None, index_dir=None, cache=False)
    assert work(quiet) == 3 and (tmp_path / "out" / "evaltasks-error.log").is_file()  # no signal: aborted
    stopped = Interrupt(output_dir=None, index_dir=None, cache=False)
    stopped.signum = signal.SIGINT  # the handler ran (Interrupt.begin) before raising KeyboardInterrupt
    try:
        assert run_interruptible(work, stopped) == 130
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
        sys.unraisablehook = stopped.previous_unraisablehook
