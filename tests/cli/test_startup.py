"""Start-up of ``evaltasks run`` and of the package (docs/cli.md#cli; docs/performance.md#where-a-runs-time-goes).

- ``import evaltasks`` and the commands that need neither Prefect nor a model import neither (PEP 562 lazy
  names in ``evaltasks/__init__.py``; checked with the interpreter's own ``-X importtime`` list);
- the temporary server the run starts early (``evaltasks.server.temporary.spawn_temporary_server``) is started with
  Prefect's own command line, ends with the run however it ends, and the run is still a real Prefect flow run
  with its task runs and artifacts (read back from the run's own Prefect database);
- the command's exit skips the interpreter's teardown but keeps its exit code, its output and its exit handlers.

Every run is a real ``evaltasks`` subprocess with the real Prefect server and the bundled model; nothing waits
on timing: process ends are polled for with generous deadlines.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fresh_process import run_script
from tests.process_env import REPO_ROOT, subprocess_env

pytestmark = pytest.mark.slow  # fresh processes: imports, Prefect's temporary server, whole runs

psutil = pytest.importorskip("psutil")

DEADLINE_S = 600  # generous: the machine may be shared and busy
QUICKSTART = REPO_ROOT / "examples" / "quickstart"


def _imported(args: list[str], cwd: Path) -> set[str]:
    """Top-level packages a fresh ``python -X importtime ARGS`` imports (from the interpreter's own list)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=subprocess_env(cwd / "prefect-home"),
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {
        line.split("|")[-1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_import_evaltasks_loads_neither_prefect_nor_numpy_nor_torch(tmp_path: Path) -> None:
    loaded = _imported(["-c", "import evaltasks"], tmp_path)
    assert "evaltasks" in loaded
    assert not loaded & {"prefect", "torch", "sentence_transformers", "numpy", "faiss", "pydantic"}, loaded


def test_every_public_name_still_imports_from_the_package(tmp_path: Path) -> None:
    code = (
        "import evaltasks, sys\n"
        "from evaltasks import evaluate_sync, EvalTestCase, LengthCheckMetric, ReferenceMatchMetric, METRICS\n"
        "assert evaltasks.SemanticSimilarityMetric.__name__ == 'SemanticSimilarityMetric'\n"
        "missing = [n for n in evaltasks.__all__ if not hasattr(evaltasks, n)]\n"
        "assert not missing, missing\n"
        "assert set(evaltasks.__all__) <= set(dir(evaltasks))\n"
        "from evaltasks import *\n"
        "assert LengthCheckMetric(max_length=3).name == 'LengthCheckMetric'\n"
        "try:\n"
        "    evaltasks.NoSuchName\n"
        "except AttributeError as exc:\n"
        "    assert 'NoSuchName' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
        "assert 'prefect' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=subprocess_env(tmp_path / "prefect-home"),
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize(
    "first",
    [
        "from evaltasks.engine.evaluate import evaluate_sync",
        "import evaltasks.index",
        "from evaltasks import EvalTestCase",
    ],
)
def test_evaluate_stays_the_function_whatever_is_imported_first(tmp_path: Path, first: str) -> None:
    """The submodule evaltasks.evaluate, once imported (by the engine, a metric, the user), does not replace the
    public function of the same name, which eval-ai-library's usage calls: ``asyncio.run(evaluate(cases, metrics))``."""
    code = (
        f"{first}\n"
        "import asyncio, inspect, evaltasks\n"
        "from evaltasks import evaluate, EvalTestCase, LengthCheckMetric\n"
        "assert inspect.iscoroutinefunction(evaluate) and evaltasks.evaluate is evaluate, evaluate\n"
        "import evaltasks.engine.evaluate\n"
        "assert evaltasks.evaluate is evaluate\n"
        "result = asyncio.run(evaluate([EvalTestCase(input='q', actual_output='one')],"
        " [LengthCheckMetric(max_length=5)]))\n"
        "assert result.test_results[0].metrics[0].score == 1.0\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=subprocess_env(tmp_path / "prefect-home"),
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize(
    "command", [["--version"], ["schema"], ["index", "info", "--index-dir", "idx"], ["init", "starter"]]
)
def test_commands_without_a_run_import_neither_prefect_nor_torch(tmp_path: Path, command: list[str]) -> None:
    loaded = _imported(["-m", "evaltasks", *command], tmp_path)
    assert not loaded & {"prefect", "torch", "sentence_transformers", "transformers"}, loaded
    assert not (tmp_path / "prefect-home").exists()


def test_the_early_server_is_started_with_prefects_own_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line and environment built without Prefect's server module are those Prefect itself uses.

    Prefect's ``SubprocessASGIServer._run_uvicorn_command`` is called for real; only its ``subprocess.Popen`` is
    replaced by a recorder (starting a second server would only prove less).
    """
    import prefect.server.api.server as server_module

    from evaltasks.server.temporary import server_command

    recorded: dict[str, object] = {}

    class Recorder:
        def __getattr__(self, name: str) -> object:
            return getattr(subprocess, name)

        @staticmethod
        def Popen(args: list[str], **kwargs: object) -> None:  # noqa: N802 - the name it stands in for
            recorded.update(args=list(args), env=kwargs.get("env"))

    monkeypatch.setattr(server_module, "subprocess", Recorder())
    server_module.SubprocessASGIServer(port=8765)._run_uvicorn_command()
    server_module.SubprocessASGIServer._instances.pop(8765, None)
    args, env = server_command(8765)
    assert args == recorded["args"]
    assert env == recorded["env"]


def _server_of(pid: int) -> list[psutil.Process]:
    """Live temporary-server processes started (through evaltasks.server.temporary) for the process ``pid`` or the
    run's child of it (the command's process only waits for the run: docs/cli.md#the-runs-parent-process)."""
    try:
        pids = {str(pid), *(str(child.pid) for child in psutil.Process(pid).children())}
    except psutil.NoSuchProcess:
        pids = {str(pid)}
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(part.endswith(os.path.join("server", "temporary.py")) for part in cmdline) and pids & set(cmdline):
            found.append(proc)
    return found


def _gone(pid: int) -> bool:
    """Poll (generous deadline) until no temporary server of process ``pid`` is left; True when none is."""
    deadline = time.monotonic() + 120
    while _server_of(pid):
        if time.monotonic() > deadline:
            for proc in _server_of(pid):
                proc.kill()
            return False
        time.sleep(0.1)
    return True


def _workspace(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    shutil.copytree(QUICKSTART, work)
    return work


def test_a_run_is_a_real_flow_run_and_its_early_server_ends_with_it(tmp_path: Path) -> None:
    """Exit code, summary and reports as before; the run's own Prefect database holds the completed flow run,
    its task runs, its artifacts and its events, no heartbeat; the server process is gone once the command has
    exited."""
    work = _workspace(tmp_path)
    home = tmp_path / "prefect-home"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "evaltasks",
            "run",
            "suite.yaml",
            "--no-cache",
            "--output-dir",
            "out",
            "--index-dir",
            "idx",
        ],
        cwd=work,
        env=subprocess_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err[-3000:]
    assert "GATE PASSED" in out and "reports: out/results.json" in out, out  # the last lines reach a pipe
    assert (work / "out" / "results.json").is_file()
    assert _gone(proc.pid), "the temporary server outlived the run"
    with sqlite3.connect(home / "prefect.db") as db:
        flow_runs = db.execute("SELECT id, state_type FROM flow_run").fetchall()
        assert [state for _, state in flow_runs] == ["COMPLETED"]
        tasks = db.execute("SELECT name, state_type FROM task_run WHERE flow_run_id = ?", (flow_runs[0][0],)).fetchall()
        assert {name.rsplit("-", 1)[0] for name, _ in tasks} >= {"embed-references", "embed-outputs", "score-batch"}
        assert {state for _, state in tasks} == {"COMPLETED"}
        artifacts = db.execute("SELECT key FROM artifact WHERE flow_run_id = ?", (flow_runs[0][0],)).fetchall()
        assert any("quickstart" in (key or "") for (key,) in artifacts), artifacts
        # the flow run's events reached the server, and no heartbeat among them (a temporary server has no use
        # for them; stopping their thread cost the run up to a second)
        events = dict(db.execute("SELECT event, count(*) FROM events GROUP BY event").fetchall())
        assert events.get("prefect.flow-run.Completed") == 1, events
        assert "prefect.flow-run.heartbeat" not in events, events


def test_a_failed_gate_keeps_exit_code_1(tmp_path: Path) -> None:
    work = _workspace(tmp_path)
    suite = (work / "suite.yaml").read_text(encoding="utf-8").replace("min_pass_rate: 0.7", "min_pass_rate: 0.9")
    (work / "suite.yaml").write_text(suite, encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "evaltasks",
            "run",
            "suite.yaml",
            "--no-cache",
            "--output-dir",
            "out",
            "--index-dir",
            "idx",
        ],
        cwd=work,
        env=subprocess_env(tmp_path / "prefect-home"),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "GATE FAILED" in done.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT])
def test_the_early_server_ends_with_a_run_stopped_while_it_starts(tmp_path: Path, signum: int) -> None:
    """A run killed (or interrupted) as soon as its server process exists, before the flow and possibly before
    Prefect took the server over, leaves no server behind; the server is in a session of its own."""
    work = _workspace(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "evaltasks", "run", "suite.yaml", "--no-cache", "--quiet", "--output-dir", "out"],
        cwd=work,
        env=subprocess_env(tmp_path / "prefect-home"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not _server_of(proc.pid):
            assert proc.poll() is None, f"the run ended before its server started: {proc.stderr.read()!r}"
            assert time.monotonic() < deadline, "no temporary server process"
            time.sleep(0.01)
        server = _server_of(proc.pid)[0]
        assert os.getsid(server.pid) != os.getsid(proc.pid), "the server shares the run's session"
        command = server.cmdline()
        started_by = int(command[command.index("-m") - 1])  # the run's process (the guard's PARENT_PID)
        os.killpg(proc.pid, signum)
        proc.wait(timeout=DEADLINE_S)
        if signum == signal.SIGINT:
            assert proc.returncode == 130, proc.stderr.read()
        assert _gone(started_by), "the temporary server outlived the run"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_database_template_is_used_only_for_the_same_prefect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A migrated empty database kept for one Prefect (version, migration files, SQLite) seeds a missing
    database of that Prefect only; it never replaces a database that exists."""
    import prefect

    from evaltasks.server import temporary as guard

    templates = tmp_path / "templates"
    source = tmp_path / "migrated.db"
    with sqlite3.connect(source) as db:
        db.execute("CREATE TABLE alembic_version (version_num TEXT)")
        db.execute("INSERT INTO alembic_version VALUES ('head')")
    db.close()
    assert guard.save_database_template(source, templates)
    assert not guard.save_database_template(source, templates), "an existing template is left alone"
    assert [p.name for p in templates.iterdir()] == [f"{guard.database_template_key()}.db"]

    monkeypatch.setattr(prefect, "__version__", prefect.__version__ + ".post1")
    assert not guard.seed_database(tmp_path / "other-version" / "prefect.db", templates)
    assert not (tmp_path / "other-version" / "prefect.db").exists()
    monkeypatch.undo()

    existing = tmp_path / "existing" / "prefect.db"
    existing.parent.mkdir()
    existing.write_bytes(b"a database of its own")
    assert not guard.seed_database(existing, templates)
    assert existing.read_bytes() == b"a database of its own"

    fresh = tmp_path / "fresh" / "prefect.db"
    assert guard.seed_database(fresh, templates)
    with sqlite3.connect(fresh) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [("head",)]
    db.close()
    assert [p.name for p in fresh.parent.iterdir()] == ["prefect.db"], "no temporary file left"


def test_the_temporary_server_registers_no_block_types_unless_the_environment_says() -> None:
    """Both settings are off for the temporary server unless the environment names either of them, under any of
    the names Prefect's settings model accepts for it (read from that model, not copied)."""
    from prefect.settings.models.server.root import ServerSettings

    from evaltasks.server.temporary import (
        MEMOIZE_REGISTRATION_VARIABLES,
        REGISTER_BLOCKS_VARIABLES,
        without_block_registration,
    )

    def env_names(field: str) -> set[str]:
        choices = ServerSettings.model_fields[field].validation_alias.choices  # type: ignore[union-attr]
        return {choice.upper() for choice in choices if isinstance(choice, str)}

    assert set(REGISTER_BLOCKS_VARIABLES) == env_names("register_blocks_on_start")
    assert set(MEMOIZE_REGISTRATION_VARIABLES) == env_names("memoize_block_auto_registration")
    base = {"PATH": "/usr/bin", "PREFECT_HOME": "/tmp/home"}
    assert without_block_registration(base) == {
        **base,
        "PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "false",
        "PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false",
    }
    assert base == {"PATH": "/usr/bin", "PREFECT_HOME": "/tmp/home"}, "the caller's mapping is left as it was"
    for name in (*REGISTER_BLOCKS_VARIABLES, *MEMOIZE_REGISTRATION_VARIABLES):
        for value in ("true", "false"):
            assert without_block_registration({**base, name: value}) == {**base, name: value}


def test_a_fresh_prefect_home_starts_from_the_template_the_first_run_left(tmp_path: Path) -> None:
    """The first run on a fresh PREFECT_HOME keeps its database as migrated (before anything else was written) as
    the template; the next fresh home starts from it and holds a real completed flow run like the first.

    The temporary server registers no block types on start unless the user's environment asks for it
    (evaltasks.server.temporary.without_block_registration): the first run asks, and its block types are written
    after the template was taken; the second, by default, has none."""
    cache = tmp_path / "cache"
    for name, register in (("first", True), ("second", False)):
        work = _workspace(tmp_path / name)
        env = subprocess_env(tmp_path / name / "prefect-home")
        env["EVALTASKS_CACHE_DIR"] = str(cache)
        if register:
            env["PREFECT_SERVER_REGISTER_BLOCKS_ON_START"] = "true"
        done = subprocess.run(
            [sys.executable, "-m", "evaltasks", "run", "suite.yaml", "--no-cache", "--quiet", "--output-dir", "out"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        templates = list((cache / "prefect-db").glob("*.db"))
        assert len(templates) == 1
        with sqlite3.connect(templates[0]) as db:  # migrated, nothing else: no block types, no runs
            assert db.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)
            assert db.execute("SELECT count(*) FROM block_type").fetchone() == (0,)
            assert db.execute("SELECT count(*) FROM flow_run").fetchone() == (0,)
        db.close()
        with sqlite3.connect(tmp_path / name / "prefect-home" / "prefect.db") as db:
            assert db.execute("SELECT state_type FROM flow_run").fetchall() == [("COMPLETED",)]
            block_types = db.execute("SELECT count(*) FROM block_type").fetchone()[0]
            assert (block_types > 0) is register, block_types
        db.close()


def test_a_run_without_a_local_model_never_imports_torch(tmp_path: Path) -> None:
    """Only a local model needs torch: a LengthCheck run (real server, real flow) imports neither torch nor
    sentence-transformers, in the command or in the server process (whose import list shares the stderr)."""
    (tmp_path / "cases.jsonl").write_text('{"input": "q", "actual_output": "a short answer"}\n', encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: lengths\ndataset: {path: cases.jsonl}\nmetrics:\n  - {metric: LengthCheckMetric, max_length: 5, "
        "unit: words}\ngate: {min_pass_rate: 1.0}\n",
        encoding="utf-8",
    )
    loaded = _imported(
        ["-m", "evaltasks", "run", "suite.yaml", "--no-cache", "--quiet", "--output-dir", "out"], tmp_path
    )
    assert "prefect" in loaded and "evaltasks" in loaded
    assert not loaded & {"torch", "sentence_transformers", "transformers"}, loaded


def test_a_damaged_template_is_removed_and_the_run_migrates_from_nothing(tmp_path: Path) -> None:
    """A template cut short or overwritten (a full disk, a crash mid-copy) is never copied into a PREFECT_HOME: it
    is removed, Prefect migrates from nothing, and that run leaves a sound template again."""
    from evaltasks.server.temporary import _sound_template, database_template_key

    cache = tmp_path / "cache"
    (cache / "prefect-db").mkdir(parents=True)
    template = cache / "prefect-db" / f"{database_template_key()}.db"
    template.write_bytes(os.urandom(8192))
    work = _workspace(tmp_path / "work")
    env = subprocess_env(tmp_path / "prefect-home")
    env["EVALTASKS_CACHE_DIR"] = str(cache)
    done = subprocess.run(
        [sys.executable, "-m", "evaltasks", "run", "suite.yaml", "--no-cache", "--quiet", "--output-dir", "out"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert _sound_template(template)
    with sqlite3.connect(tmp_path / "prefect-home" / "prefect.db") as db:
        assert db.execute("SELECT state_type FROM flow_run").fetchall() == [("COMPLETED",)]
    db.close()


def test_a_reader_that_leaves_early_and_a_closed_stdout_keep_the_verdict(tmp_path: Path, prefect_api_url: str) -> None:
    """`evaltasks run ... | head -1` (the pipe closes before the summary is printed) and `>&-` (no stdout at all):
    the gate's exit code (0: the quickstart passes), reports written, no traceback. (On the session's server: the
    subject is the output, not the server; the temporary server's own tests are the others here.)"""
    work = _workspace(tmp_path / "work")
    env = subprocess_env(tmp_path / "prefect-home", prefect_api_url)
    command = [sys.executable, "-m", "evaltasks", "run", "suite.yaml", "--no-cache", "--output-dir", "out"]
    proc = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before anything was printed
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-3000:]
    assert (work / "out" / "results.json").is_file()
    closed = subprocess.run(
        ["bash", "-c", 'exec "$@" >&-', "bash", *command[:-1], "out-closed"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert closed.returncode == 0, closed.stderr[-3000:]
    assert "Exception ignored" not in closed.stderr and "Traceback" not in closed.stderr, closed.stderr[-3000:]
    assert (work / "out-closed" / "results.json").is_file()


def test_a_deleted_working_directory_is_a_usage_error(tmp_path: Path) -> None:
    """Run from a directory removed meanwhile: exit 2 with one line saying so, before Prefect starts."""
    suite = _workspace(tmp_path / "work") / "suite.yaml"
    done = subprocess.run(
        [
            "bash",
            "-c",
            'mkdir gone && cd gone && rmdir ../gone && exec "$@"',
            "bash",
            sys.executable,
            "-m",
            "evaltasks",
            "run",
            str(suite),
        ],
        cwd=tmp_path,
        env=subprocess_env(tmp_path / "prefect-home"),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "current directory no longer exists" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "prefect-home" / "prefect.db").exists()


def test_submodules_are_attributes_of_the_package_after_a_bare_import(tmp_path: Path) -> None:
    code = (
        "import evaltasks\n"
        "assert evaltasks.metrics.LengthCheckMetric.__name__ == 'LengthCheckMetric'\n"
        "assert evaltasks.results.EvaluationResult.__name__ == 'EvaluationResult'\n"
        "assert evaltasks.index.ReferenceIndex.__name__ == 'ReferenceIndex'\n"
        "assert callable(evaltasks.evaluate) and not hasattr(evaltasks, 'no_such_module')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=subprocess_env(tmp_path / "prefect-home"),
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]


FIRST_CALL = """
import json, sys
from evaltasks import EvalTestCase, GEvalMetric, evaluate_sync
metric = GEvalMetric(threshold=0.5, model="gpt-4o-mini", evaluation_steps=["Check the answer against the question."])
cases = [EvalTestCase(input=f"What is {i} + {i}?", actual_output=f"{2 * i}") for i in range(40)]
result = evaluate_sync(cases, [metric], index_dir=sys.argv[1])
print(json.dumps({"scores": [case.metrics[0].score for case in result.test_results],
                  "loaded": sorted(m for m in ("scipy", "openai") if m in sys.modules)}))
"""


def test_a_cached_judge_call_in_a_fresh_process_imports_neither_scipy_nor_openai(tmp_path: Path) -> None:
    """The first evaluate_sync of 40 GEval cases whose answers are all stored sends no request and imports
    neither scipy (the summary's Wilson and bootstrap intervals need none) nor openai (the judge client is built
    on its first request): together about 2-3 s of the first call (bench/first_call.py). The fill, which sends
    requests, imports openai."""
    from tests.chat_server import Answer, ChatServer

    def answer(request: object) -> Answer:  # GEval's score answer, with its score token's probabilities
        return Answer(json.dumps({"reason": "right", "score": 10}), alternatives={"10": [("10", 0.0)]})

    with ChatServer(responder=answer) as server:
        env = {
            **subprocess_env(tmp_path / "prefect-home"),
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": server.api_key,
        }

        fill = run_script(FIRST_CALL, [str(tmp_path / "index")], env, tmp_path)
        sent = len(server.requests)
        cached = run_script(FIRST_CALL, [str(tmp_path / "index")], env, tmp_path)
    assert sent >= 40 and len(server.requests) == sent  # the second process was served from the store
    assert fill["loaded"] == ["openai"] and cached["loaded"] == []
    assert cached["scores"] == fill["scores"] and all(s is not None for s in cached["scores"])


_PREFECT_FIRST = """
import io, json, logging, sys
import prefect.main  # a program that imported Prefect (which read its settings and set up its logging) first
from prefect.settings import get_current_settings
before = get_current_settings().logging.level
sys.stderr = io.StringIO()  # the streams the command then runs with
from evaltasks.cli._checks import quiet_prefect_defaults
quiet_prefect_defaults()
logging.getLogger("prefect.test").warning("to the current stderr")
print(json.dumps({"before": before, "after": get_current_settings().logging.level,
                  "stderr": sys.stderr.getvalue()}))
"""


def test_the_clis_prefect_defaults_hold_when_prefect_was_imported_first(tmp_path: Path) -> None:
    """The CLI sets its Prefect defaults (``PREFECT_LOGGING_LEVEL=WARNING``...) before it first uses Prefect; in a
    program that had imported Prefect already, Prefect reads its settings again then, and its log handlers write to
    the streams of that moment (Prefect's own hooks: evaltasks.cli._checks.reread_prefect_settings)."""
    env = {k: v for k, v in subprocess_env(tmp_path / "prefect-home").items() if k != "PREFECT_LOGGING_LEVEL"}
    seen = run_script(_PREFECT_FIRST, [], env, tmp_path)
    assert (seen["before"], seen["after"]) == ("INFO", "WARNING")  # Prefect's default, then the CLI's
    assert "to the current stderr" in seen["stderr"], seen
