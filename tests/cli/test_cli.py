"""The ``evaltasks`` command line (docs/cli.md#cli), run as a real subprocess.

Exit codes: 0 the gate holds, 1 it fails, 2 invalid config/input/credentials/usage found before scoring (no
traceback, and fast: before Prefect starts). Each subprocess gets its own PREFECT_HOME and runs in tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaltasks.inputs.suite import suite_json_schema
from tests.cli_forkserver import run_cli

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart" / "suite.yaml"
QUICKSTART_DATA = REPO / "examples" / "quickstart" / "answers.jsonl"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PREFECT_API_URL", "EVALTASKS_INDEX_DIR", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    }
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        HF_HUB_OFFLINE="1",
        DO_NOT_TRACK="1",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        **extra,
    )
    return env


def _cli(tmp_path: Path, *args: str, timeout: float = 300, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = run_cli(*args, cwd=tmp_path, env=_env(tmp_path, **env), timeout=timeout)
    return proc, time.monotonic() - started


def _no_noise(proc: subprocess.CompletedProcess) -> None:
    for stream in (proc.stdout, proc.stderr):
        assert "Traceback" not in stream, stream
        assert "Error flushing events" not in stream, stream


def _suite(tmp_path: Path, body: str, name: str = "suite.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


QUICKSTART_DATASET = (
    f"dataset:\n  path: {QUICKSTART_DATA}\n"
    "  fields: {id: id, input: question, actual_output: answer, references: references}\n"
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("truthfulqa-davinci", "truthfulqa-davinci"),
        ("TruthfulQA / davinci 1.0", "TruthfulQA-davinci-1.0"),
        ("../../etc", "etc"),
        ("..", "suite"),
        ("оценка", "оценка"),
        ("名前/評価", "名前-評価"),
        ("?!", "suite"),
        (".hidden", "hidden"),
        ("a" * 300, "a" * 100),
        ("評" * 90, "評" * 85),
        ("a" + "評" * 99, "a" + "評" * 84),  # 255 bytes at most, cut between characters
    ],
)
def test_default_output_dir_is_one_safe_directory_per_suite(name: str, expected: str) -> None:
    from evaltasks.engine.run import default_output_dir

    assert default_output_dir(name) == Path("eval-results") / expected


@pytest.mark.slow
def test_long_names_an_output_dir_component_over_255_bytes_is_exit_2_and_a_long_cjk_suite_runs(tmp_path: Path) -> None:
    """A 300-byte ``--output-dir`` component is a usage error found before anything runs (it was exit 3, its
    traceback file in $TMPDIR); a suite named with 90 CJK characters (270 bytes) runs without ``--output-dir``:
    its default folder and history file are cut to whole characters within 255 bytes (it failed on 300)."""
    (tmp_path / "d.csv").write_text("actual_output\nabc\n", encoding="utf-8")
    name = "評" * 90
    _suite(
        tmp_path,
        f"name: {name}\ndataset: {{path: d.csv}}\nhistory: {{dir: hist}}\n"
        "metrics: [{metric: LengthCheckMetric, max_length: 10}]\n",
        "s.yaml",
    )
    temp = tmp_path / "temp"
    temp.mkdir()
    long_dir = f"out/{'x' * 300}"
    proc, _ = _cli(tmp_path, "run", "s.yaml", "--no-server", "--output-dir", long_dir, TMPDIR=str(temp))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"evaltasks: error: --output-dir {long_dir}: the name 'xxx")
    assert "is 300 bytes, longer than the 255 bytes" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert list(temp.iterdir()) == [] and not (tmp_path / "out").exists()
    _no_noise(proc)
    proc, _ = _cli(tmp_path, "run", "s.yaml", "--no-server", TMPDIR=str(temp))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    reports = tmp_path / "eval-results" / ("評" * 85)
    assert json.loads((reports / "results.json").read_text(encoding="utf-8"))["passed"] is True
    assert [p.name for p in (tmp_path / "hist").glob("*.jsonl")] == [f"{'評' * 81}.jsonl"]  # its .lock fits too
    _no_noise(proc)


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_in_process_command_leaves_the_callers_environment_as_it_was(
    tmp_path: Path, prefect_api_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``evaltasks.cli.main(argv)`` called from a program (a run on the session's Prefect server) leaves
    ``os.environ`` exactly as it found it, a blank ``PREFECT_LOGGING_LEVEL`` included, and Prefect's global settings
    read from it again (blank counts as unset: Prefect's default level, not the run's WARNING); before, the run's
    Prefect defaults (``PREFECT_LOGGING_LEVEL=WARNING``, ``DO_NOT_TRACK=1``...) stayed and reached every process
    the program started afterwards."""
    import prefect.context

    from evaltasks import cli

    _suite(tmp_path, "name: s\ndataset: {path: d.jsonl}\nmetrics: [{metric: ExactMatchMetric}]\n")
    (tmp_path / "d.jsonl").write_text('{"actual_output": "a", "expected_output": "a"}\n', encoding="utf-8")
    monkeypatch.setenv("PREFECT_API_URL", prefect_api_url)
    for name in ("DO_NOT_TRACK", "PREFECT_SERVER_LOGGING_LEVEL", "DASK_LOGGING__DISTRIBUTED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_LOGGING_LEVEL", "")  # an unset `${{ vars.X }}` in a CI workflow
    before = dict(os.environ)
    code = cli.main(["run", str(tmp_path / "suite.yaml"), "--output-dir", str(tmp_path / "out"), "--no-server"])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "results.json").is_file()
    assert dict(os.environ) == before
    assert prefect.context.GLOBAL_SETTINGS_CONTEXT.settings.logging.level == "INFO"  # Prefect's default
    monkeypatch.delenv("PREFECT_LOGGING_LEVEL")
    prefect.context.refresh_global_settings_context()  # the session's own settings again for the next tests


@pytest.mark.slow
@pytest.mark.parametrize(
    "mistake", ["stopped server", "index dir is a file", "index dir under a file", "negative max cost"]
)
def test_setup_mistakes_are_exit_2_and_one_line_before_prefect_starts(tmp_path: Path, mistake: str) -> None:
    """PREFECT_API_URL still exported after its server stopped (docs/prefect.md#deploy-with-prefectyaml), an
    --index-dir that is a file and ``--max-cost -1``: exit 2 and one line, no Prefect log lines (the first two
    were exit 3, "internal bug"; the index only after 7.5 s and three Prefect ERROR lines; -1 was accepted)."""
    (tmp_path / "d.jsonl").write_text(
        '{"id": "c1", "actual_output": "hello", "references": ["hello"]}\n', encoding="utf-8"
    )
    _suite(
        tmp_path,
        "name: s\ndataset: {path: d.jsonl}\nmetrics: [{metric: ReferenceMatchMetric, embedding_provider: local}]\n",
        "s.yaml",
    )
    (tmp_path / "idx").write_text("", encoding="utf-8")
    url = f"http://127.0.0.1:{_closed_port()}/api"
    args, env, expected = {
        "stopped server": (
            [],
            {"PREFECT_API_URL": url},
            f"the Prefect server at {url} (PREFECT_API_URL) cannot be reached: ",
        ),
        "index dir is a file": (["--index-dir", "idx"], {}, "--index-dir idx: idx is a file, not a directory"),
        "index dir under a file": (
            [],
            {"EVALTASKS_INDEX_DIR": "idx/sub"},
            "$EVALTASKS_INDEX_DIR idx/sub: idx is a file, not a directory",
        ),
        "negative max cost": (["--max-cost", "-1"], {}, "--max-cost must be a number of USD of at least 0, got -1"),
    }[mistake]
    proc, _ = _cli(tmp_path, "run", "s.yaml", "--no-server", *args, **env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"evaltasks: error: {expected}"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and proc.stdout == "", proc.stdout + proc.stderr
    assert not (tmp_path / "eval-results").exists()


# --- full runs (each loads the model: keep them few; the first starts a temporary Prefect server as a user's
# run does, the others use the session's server) ------------------------------------------------------------


@pytest.mark.slow
def test_run_quickstart_passes(tmp_path: Path) -> None:
    proc, wall_s = _cli(tmp_path, "run", str(QUICKSTART), "--output-dir", "out", "--index-dir", "idx")
    assert proc.returncode == 0, proc.stderr
    _no_noise(proc)
    out = tmp_path / "out"
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["suite"] == "quickstart" and results["passed"] is True
    assert (results["summary"]["cases"], results["summary"]["passed_cases"]) == (8, 6)
    assert results["summary"]["embeddings"]["references_computed"] == 10
    assert (out / "junit.xml").read_text(encoding="utf-8").startswith("<?xml")
    assert (out / "summary.md").read_text(encoding="utf-8").startswith("# evaltasks: quickstart")
    assert (tmp_path / "idx").is_dir() and any((tmp_path / "idx").iterdir())
    assert "GATE PASSED" in proc.stdout
    # The summary table shows whole metric names even in an 80-column, non-terminal log.
    assert " ReferenceMatchMetric " in proc.stdout and " LengthCheckMetric " in proc.stdout and "…" not in proc.stdout
    assert "pass rate: 75.00%" in proc.stdout
    # One run, durations each named: results.json's duration_s (= finished_at - started_at) is junit's time
    # and the printed "flow run"; "total" is the whole command, so it lies between the flow run and the wall
    # time this test measured around the subprocess.
    from datetime import datetime

    started = datetime.fromisoformat(results["started_at"].replace("Z", "+00:00"))
    finished = datetime.fromisoformat(results["finished_at"].replace("Z", "+00:00"))
    assert results["started_at"].endswith("Z") and started.utcoffset().total_seconds() == 0
    assert results["duration_s"] == pytest.approx((finished - started).total_seconds(), abs=0.002)
    junit_time = float(
        re.search(r'<testsuites [^>]*time="([0-9.]+)"', (out / "junit.xml").read_text(encoding="utf-8")).group(1)
    )
    assert junit_time == pytest.approx(results["duration_s"], abs=0.0005)
    flow_s, total_s = map(float, re.search(r"\(flow run ([0-9.]+) s, total ([0-9.]+) s\)", proc.stdout).groups())
    assert flow_s == pytest.approx(results["duration_s"], abs=0.05)
    assert flow_s <= total_s <= wall_s + 0.05


def test_run_gate_fails_with_defaults(tmp_path: Path, prefect_api_url: str) -> None:
    suite = _suite(
        tmp_path,
        "name: strict\n"
        + QUICKSTART_DATASET
        + (
            "metrics:\n  - metric: ReferenceMatchMetric\n    threshold: 0.6\n    embedding_provider: local\n"
            "  - metric: LengthCheckMetric\n    max_length: 30\n    unit: words\n"
            "gate:\n  min_pass_rate: 1.0\n"
        ),
    )
    # default --output-dir ./eval-results/strict, index .evaltasks/index
    proc, _ = _cli(tmp_path, "run", suite.name, PREFECT_API_URL=prefect_api_url)
    assert proc.returncode == 1, proc.stderr
    _no_noise(proc)
    out = tmp_path / "eval-results" / "strict"  # one directory per suite
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["passed"] is False
    assert results["summary"]["pass_rate"] == pytest.approx(6 / 8, abs=1e-9)
    assert (out / "junit.xml").is_file()
    assert (out / "summary.md").is_file()
    assert f"reports: {Path('eval-results') / 'strict' / 'results.json'}" in proc.stdout
    # A second suite run from the same directory keeps the first one's reports.
    other = _suite(
        tmp_path,
        "name: lengths / words\n"
        + QUICKSTART_DATASET
        + ("metrics:\n  - metric: LengthCheckMetric\n    max_length: 30\n    unit: words\ngate: {min_pass_rate: 0}\n"),
        name="other.yaml",
    )
    # ... with variables a CI workflow exports blank (an unset `${{ vars.X }}`): blank counts as unset (Prefect
    # refused a blank PREFECT_LOGGING_LEVEL with a settings traceback, exit 3).
    blank = dict.fromkeys(
        (
            "PREFECT_LOGGING_LEVEL",
            "PREFECT_SERVER_LOGGING_LEVEL",
            "PREFECT_API_KEY",
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
            "EVALTASKS_INDEX_DIR",
        ),
        "",
    )
    second, _ = _cli(tmp_path, "run", other.name, "--quiet", PREFECT_API_URL=prefect_api_url, **blank)
    assert second.returncode == 0, second.stderr
    _no_noise(second)
    assert (
        json.loads((tmp_path / "eval-results" / "lengths-words" / "results.json").read_text())["suite"]
        == "lengths / words"
    )
    assert json.loads((out / "results.json").read_text(encoding="utf-8"))["suite"] == "strict"
    assert (tmp_path / ".evaltasks" / "index").is_dir()
    assert "GATE FAILED" in proc.stdout


# --- exit 2: invalid input, reported before anything runs (Prefect never starts), without a traceback ----------

INVALID = {
    "malformed-yaml": (
        "name: x\ndataset:\n  path: d.jsonl\nmetrics: [\n  - metric: LengthCheckMetric\n",
        '{"actual_output": "a"}\n',
        ["line 5", "invalid YAML"],
    ),
    "missing-dataset": (
        "name: x\ndataset:\n  path: nowhere.jsonl\nmetrics:\n  - metric: LengthCheckMetric\n",
        None,
        ["nowhere.jsonl", "dataset file not found"],
    ),
    "unknown-metric": (
        "name: x\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: LenghtCheckMetric\n",
        '{"actual_output": "a"}\n',
        ["metrics[0]", "did you mean 'LengthCheckMetric'"],
    ),
    "unknown-field": (
        "name: x\ndataset:\n  path: d.jsonl\n  fields: {output: answer}\nmetrics:\n  - metric: LengthCheckMetric\n",
        '{"actual_output": "a"}\n',
        ["dataset.fields", "'output'", "unknown key"],
    ),
    "mapped-key-typo": (
        "name: x\ndataset:\n  path: d.jsonl\n  fields: {input: questoin}\nmetrics:\n  - metric: LengthCheckMetric\n",
        '{"question": "q", "actual_output": "a"}\n',
        ["d.jsonl", "'questoin'", "not found"],
    ),
    "missing-column": (
        "name: x\ndataset:\n  path: d.csv\n  fields: {actual_output: model_answer}\n"
        "metrics:\n  - metric: LengthCheckMetric\n",
        "question,answer\nq,a\n",
        ["d.csv, line 1", "'model_answer'", "column not found"],
    ),
    "non-string-output": (
        "name: x\ndataset:\n  path: d.json\nmetrics:\n  - metric: LengthCheckMetric\n",
        '[{"actual_output": "a"}, {"actual_output": 42}]',
        ["d.json, item 1", "'actual_output'", "must be a string, got number"],
    ),
    "empty-dataset": (
        "name: x\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: LengthCheckMetric\n",
        "",
        ["d.jsonl", "no rows"],
    ),
    "missing-references": (
        "name: x\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: ReferenceMatchMetric\n"
        "    embedding_provider: local\n",
        '{"actual_output": "a", "references": ["r"]}\n{"actual_output": "b"}\n',
        ["d.jsonl, line 2", "'references'"],
    ),
    "openai-without-key": (
        "name: x\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: ReferenceMatchMetric\n"
        "    embedding_provider: openai\n",
        '{"actual_output": "a", "references": ["r"]}\n',
        ["OPENAI_API_KEY"],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_input_exits_2_fast(tmp_path: Path, case: str) -> None:
    suite_text, data, needles = INVALID[case]
    suite = _suite(tmp_path, suite_text)
    if data is not None:
        name = next(line.split(":", 1)[1].strip() for line in suite_text.splitlines() if "path:" in line)
        (tmp_path / name).write_text(data, encoding="utf-8")
    proc, _ = _cli(tmp_path, "run", suite.name, "--output-dir", "out")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    _no_noise(proc)
    assert proc.stderr.startswith("evaltasks: error:")
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)
    assert not (tmp_path / "out").exists()  # nothing ran
    assert not (tmp_path / "prefect-home").exists()  # Prefect never started


def test_rejected_api_key_exits_2_without_traceback(tmp_path: Path, prefect_api_url: str) -> None:
    """A key the server rejects (401) surfaces during the run: exit 2, the message names OPENAI_API_KEY, and
    Prefect's log of the failed flow carries no traceback. The real openai client talks to a local HTTP
    server on 127.0.0.1 that answers every request with 401 (no network)."""
    import http.server
    import threading

    class Reject(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length", 0)))
            body = json.dumps(
                {
                    "error": {
                        "message": "Incorrect API key provided",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                }
            ).encode()
            self.send_response(401)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Reject)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        suite = _suite(
            tmp_path,
            "name: rejected\n"
            + QUICKSTART_DATASET
            + ("metrics:\n  - metric: ReferenceMatchMetric\n    embedding_provider: openai\n"),
        )
        env = _env(
            tmp_path,
            OPENAI_API_KEY="sk-rejected",
            PREFECT_API_URL=prefect_api_url,
            OPENAI_BASE_URL=f"http://127.0.0.1:{server.server_address[1]}/v1",
        )
        proc = run_cli("run", suite.name, "--output-dir", "out", cwd=tmp_path, env=env, timeout=300)
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 2, proc.stderr
    _no_noise(proc)
    assert "OPENAI_API_KEY" in proc.stderr and "401" in proc.stderr
    assert "evaltasks: error: missing or rejected credentials" in proc.stderr


@pytest.mark.slow
def test_missing_suite_file_exits_2(tmp_path: Path) -> None:
    proc, _ = _cli(tmp_path, "run", "no-such-suite.yaml")
    assert proc.returncode == 2
    assert not (tmp_path / "prefect-home").exists()  # found before Prefect starts
    _no_noise(proc)
    assert "no-such-suite.yaml" in proc.stderr and "suite file not found" in proc.stderr


@pytest.mark.slow
def test_bad_batch_size_exits_2(tmp_path: Path) -> None:
    proc, _ = _cli(tmp_path, "run", str(QUICKSTART), "--batch-size", "0")
    assert proc.returncode == 2
    assert "--batch-size" in proc.stderr
    _no_noise(proc)


def _unwritable_dir(tmp_path: Path, kind: str, cleanups: list) -> Path:
    """A PREFECT_HOME that cannot be written, even by root (the tests run as root: permission bits do not bind).

    ``a-file``: a regular file; ``under-a-file``: a path below one (cannot be created); ``immutable``: an existing directory
    with the immutable attribute (``chattr +i``); ``read-only-mount``: a tmpfs mounted read-only. The last two
    skip where the machine does not allow them.
    """
    import shutil

    if kind in ("a-file", "under-a-file"):
        (tmp_path / "a-file").write_text("x", encoding="utf-8")
        return tmp_path / "a-file" / ("prefect-home" if kind == "under-a-file" else "")
    target = tmp_path / f"{kind}-home"
    target.mkdir()
    if kind == "immutable":
        command, undo = ["chattr", "+i", str(target)], ["chattr", "-i", str(target)]
    else:
        command, undo = ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(target)], ["umount", str(target)]
    if shutil.which(command[0]) is None:
        pytest.skip(f"{command[0]} is not available")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot make a read-only directory with {' '.join(command[:3])}: {done.stderr.strip()}")
    cleanups.append(undo)
    try:
        (target / "probe").write_text("x", encoding="utf-8")
    except OSError:
        return target
    pytest.skip(f"{' '.join(command[:3])} did not stop writes here")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["a-file", "under-a-file", "immutable", "read-only-mount"])
@pytest.mark.parametrize("command", ["run", "serve"])
def test_unwritable_prefect_home_exits_2_before_prefect_starts(tmp_path: Path, kind: str, command: str) -> None:
    """A PREFECT_HOME Prefect cannot write: one line naming the setting and the directory, exit 2, found
    before Prefect starts (the run used to wait for the temporary server's start-up timeout, then exit 3
    blaming the server)."""
    cleanups: list[list[str]] = []
    try:
        home = _unwritable_dir(tmp_path, kind, cleanups)
        env = _env(tmp_path)
        env["PREFECT_HOME"] = str(home)
        proc = run_cli(command, str(QUICKSTART), "--output-dir", "out", cwd=tmp_path, env=env, timeout=600)
    finally:
        for undo in cleanups:
            subprocess.run(undo, check=True)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    _no_noise(proc)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"evaltasks: error: PREFECT_HOME {home}: "), proc.stderr
    assert "writable directory" in lines[0]
    assert "serving" not in proc.stdout
    assert not (tmp_path / "out").exists()  # nothing ran
    assert not home.is_dir() or not any(home.iterdir())  # Prefect never started


@pytest.mark.slow
@pytest.mark.parametrize("args", [[], ["run"], ["frobnicate"], ["run", "s.yaml", "--no-such-option"]])
def test_usage_errors_exit_2(tmp_path: Path, args: list[str]) -> None:
    proc, _ = _cli(tmp_path, *args)
    assert proc.returncode == 2
    assert "usage: evaltasks" in proc.stderr
    _no_noise(proc)


@pytest.mark.slow
def test_schema_command_prints_the_schema(tmp_path: Path) -> None:
    proc, _ = _cli(tmp_path, "schema")
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    assert schema == suite_json_schema()
    assert schema == json.loads((REPO / "evaltasks" / "schema" / "suite.schema.json").read_text(encoding="utf-8"))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.slow
def test_version(tmp_path: Path) -> None:
    from evaltasks import __version__

    proc, _ = _cli(tmp_path, "--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"evaltasks {__version__}"


def test_the_error_log_of_an_aborted_run_does_not_follow_a_symlink(tmp_path: Path, prefect_api_url: str) -> None:
    """A run that aborts (exit 3: a file stands where the index keeps the model's namespace folder; an index
    directory that is itself a file is a usage error, exit 2, found before Prefect starts) writes
    evaltasks-error.log into the output directory; a symlink placed there under that name is replaced, the file
    it points to untouched."""
    from evaltasks.embeddings.local import LocalEmbeddingProvider

    (tmp_path / "d.jsonl").write_text('{"actual_output": "hello"}\n', encoding="utf-8")
    _suite(
        tmp_path,
        "name: s\ndataset: {path: d.jsonl}\nmetrics:\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, references: [hi]}\n",
    )
    namespace = re.sub(r"[^A-Za-z0-9._-]+", "_", LocalEmbeddingProvider().namespace.replace("/", "--"))
    (tmp_path / "idx").mkdir()
    (tmp_path / "idx" / namespace).write_text("not a directory\n", encoding="utf-8")
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "evaltasks-error.log").symlink_to(outside)

    proc, _ = _cli(
        tmp_path,
        "run",
        "suite.yaml",
        "--output-dir",
        "out",
        "--index-dir",
        "idx",
        "--max-cost",
        "1",
        PREFECT_API_URL=prefect_api_url,
    )

    assert proc.returncode == 3, proc.stderr
    assert "full traceback: out/evaltasks-error.log" in proc.stderr, proc.stderr
    assert outside.read_text(encoding="utf-8") == "keep me\n"
    log = out / "evaltasks-error.log"
    assert not log.is_symlink()
    assert re.search(
        r"(NotADirectoryError|FileExistsError): .*" + re.escape(namespace), log.read_text(encoding="utf-8")
    )
    assert sorted(p.name for p in out.iterdir()) == ["evaltasks-error.log"]


def test_piped_and_quiet_runs_lead_with_the_verdict(tmp_path: Path, prefect_api_url: str) -> None:
    """Piped (no terminal): the first line is the verdict (no blank line left by the progress display); with
    ``--quiet`` stdout holds only the verdict, gate and reports lines, and stderr one warning line for all the
    regressions against the baseline (it had two per regressed metric)."""

    def write(name: str, words: int) -> str:
        with open(tmp_path / f"{name}.jsonl", "w", encoding="utf-8") as handle:
            for i in range(20):
                handle.write(
                    json.dumps(
                        {"id": f"q{i:02d}", "input": f"question {i}", "actual_output": " ".join(["word"] * words)}
                    )
                    + "\n"
                )
        metrics = "".join(
            f"  - {{metric: LengthCheckMetric, max_length: 5, unit: words, name: length_{k}}}\n" for k in range(4)
        )
        _suite(
            tmp_path,
            f"name: piped\ndataset: {{path: {name}.jsonl}}\nmetrics:\n{metrics}gate: {{min_pass_rate: 0.5}}\n",
            name=f"{name}.yaml",
        )
        return f"{name}.yaml"

    base, worse = write("base", 3), write("worse", 9)
    first = subprocess.run(
        f"{sys.executable} -m evaltasks.cli run {base} --output-dir out-base 2>&1",
        shell=True,
        cwd=tmp_path,
        env=_env(tmp_path, PREFECT_API_URL=prefect_api_url),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stdout
    assert first.stdout.splitlines()[0] == "PASSED: pass rate 100.00% (20 of 20 cases), gate 50.00%", first.stdout
    proc, _ = _cli(
        tmp_path,
        "run",
        worse,
        "--output-dir",
        "out-worse",
        "--quiet",
        "--baseline",
        "out-base/results.json",
        PREFECT_API_URL=prefect_api_url,
    )
    assert proc.returncode == 1, proc.stderr
    _no_noise(proc)
    lines = proc.stdout.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith(
        "FAILED: pass rate 0.00% (−100.00 points since the baseline), gate 50.00%; 20 cases newly failing"
    ), lines
    assert lines[1] == "GATE FAILED: pass rate 0.00% below 50.00%", lines
    assert lines[2].startswith("reports: out-worse/results.json, junit.xml, summary.md (flow run "), lines
    warnings = [line for line in proc.stderr.splitlines() if "Regression since the baseline" in line]
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].startswith("evaltasks: warning: Regression since the baseline: "), (
        warnings
    )  # not Prefect's format
    assert re.search(
        r"Regression since the baseline: \d+ regressions \(pass rate, length_0, length_1 and 2 more\); "
        r"see summary\.md$",
        warnings[0],
    ), warnings


def test_a_skipped_metric_is_warned_about_once_and_the_flow_run_logs_keep_it(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """``--skip-missing-credentials`` without OPENAI_API_KEY: one ``evaltasks: warning:`` line names the skipped
    judge metric (the flow's own log record of it no longer reaches the terminal as a second, Prefect-formatted
    line), and that record is still in the flow run's logs on the Prefect server."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    (tmp_path / "d.jsonl").write_text(
        "".join(json.dumps({"id": f"c{i}", "input": "q", "actual_output": "a b"}) + "\n" for i in range(2)),
        encoding="utf-8",
    )
    _suite(
        tmp_path,
        "name: skipping\ndataset: {path: d.jsonl}\nmetrics:\n"
        "  - {metric: LengthCheckMetric, max_length: 5, unit: words}\n"
        "  - {metric: AnswerRelevancyMetric, model: gpt-4o-mini}\n",
    )
    out = f"out-skipped-{time.time_ns()}"  # finds this run among the server's
    proc, _ = _cli(
        tmp_path,
        "run",
        "suite.yaml",
        "--output-dir",
        out,
        "--index-dir",
        "index",
        "--no-server",
        "--skip-missing-credentials",
        PREFECT_API_URL=prefect_api_url,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "AnswerRelevancyMetric is skipped" in line]
    assert len(lines) == 1 and lines[0].startswith("evaltasks: warning: metrics[1] AnswerRelevancyMetric is skipped"), (
        proc.stderr
    )

    async def read() -> list[str]:
        async with get_client() as client:
            runs = [run.id for run in await client.read_flow_runs(limit=200) if run.parameters.get("output_dir") == out]
            assert len(runs) == 1, runs
            logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=runs)))
            return [log.message for log in logs]

    deadline = time.monotonic() + 120  # the logs are sent in the background, then written by the server
    messages = asyncio.run(read())
    while not any("AnswerRelevancyMetric is skipped" in m for m in messages):
        assert time.monotonic() < deadline, messages
        time.sleep(1)
        messages = asyncio.run(read())


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "server", "serve", "schema", "calibrate", "history", "index", "init"])
def test_each_command_help_has_a_description_and_names_its_docs_section(command: str, tmp_path: Path) -> None:
    """``evaltasks COMMAND --help`` says what the command does under its usage, and ends with the docs section
    to read (a heading of a docs/ page), never "README" (a pip-installed user has no README file)."""
    proc, _ = _cli(tmp_path, command, "--help")
    assert proc.returncode == 0, proc.stderr
    paragraphs = proc.stdout.split("\n\n")
    assert paragraphs[0].startswith("usage: evaltasks ") and len(paragraphs[1].split()) >= 4, proc.stdout
    assert not paragraphs[1].startswith(("positional arguments", "options")), proc.stdout
    assert "README" not in proc.stdout, proc.stdout
    found = re.fullmatch(r"More: (docs/[\w/-]+\.md)(?:#([\w-]+))?\.", proc.stdout.strip().splitlines()[-1])
    assert found, proc.stdout
    page = REPO / found.group(1)
    assert page.is_file(), page
    if found.group(2):  # the anchor is a heading of that page, as Python-Markdown's toc names it
        from markdown.extensions.toc import slugify

        headings = [line.lstrip("#").strip() for line in page.read_text("utf-8").splitlines() if line.startswith("#")]
        assert found.group(2) in {slugify(h, "-") for h in headings}, (found.group(2), headings)


def test_docs_links_follow_the_one_docs_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """Set the docs' base URL in one place and every help reference becomes a link to the section's anchor."""
    import evaltasks._version as version

    assert version.docs_ref("Run history and drift") == "docs/history.md"
    assert version.docs_ref("Reference index") == "docs/embeddings.md#reference-index"
    assert version.docs_ref("A section without a page") == 'docs, "A section without a page"'
    monkeypatch.setattr(version, "DOCS_URL", "https://docs.example/evaltasks/")
    assert version.docs_ref("Run history and drift") == "https://docs.example/evaltasks/history/"
    assert version.docs_ref("Faster repeated runs: `evaltasks server`") == "https://docs.example/evaltasks/server/"
    assert version.docs_ref("Reference index") == "https://docs.example/evaltasks/embeddings/#reference-index"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "listed"),
    [
        (["index"], "{build,info,verify,compact,prune}"),
        ([], "{run,server,serve,schema,calibrate,history,index,init}"),
    ],
)
def test_a_missing_subcommand_names_the_ones_that_exist(args: list[str], listed: str, tmp_path: Path) -> None:
    proc, _ = _cli(tmp_path, *args)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(f"error: the following arguments are required: {listed}")
    assert "index_command" not in proc.stderr and "required: command" not in proc.stderr
