"""The ``evaltasks`` command line (issue #2 §6), run as a real subprocess.

Exit codes: 0 the gate holds, 1 it fails, 2 invalid config/input/credentials/usage found before scoring (no
traceback, and fast: before Prefect starts). Each subprocess gets its own PREFECT_HOME and runs in tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaltasks.suite import suite_json_schema

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "examples" / "quickstart" / "suite.yaml"
QUICKSTART_DATA = REPO / "examples" / "quickstart" / "answers.jsonl"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PREFECT_API_URL", "EVALTASKS_INDEX_DIR", "OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), HF_HUB_OFFLINE="1", DO_NOT_TRACK="1",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", **extra)
    return env


def _cli(tmp_path: Path, *args: str, timeout: float = 300, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "evaltasks.cli", *args], cwd=tmp_path, env=_env(tmp_path, **env),
        capture_output=True, text=True, timeout=timeout,
    )
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


# --- full runs (each loads the model: keep them few; the first starts a temporary Prefect server as a user's
# run does, the others use the session's server) ------------------------------------------------------------

def test_run_quickstart_passes(tmp_path: Path) -> None:
    proc, _ = _cli(tmp_path, "run", str(QUICKSTART), "--output-dir", "out", "--index-dir", "idx")
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
    assert "│ ReferenceMatchMetric │" in proc.stdout and "│ LengthCheckMetric " in proc.stdout
    assert "pass rate: 75.00%" in proc.stdout


def test_run_gate_fails_with_defaults(tmp_path: Path, prefect_api_url: str) -> None:
    suite = _suite(tmp_path, "name: strict\n" + QUICKSTART_DATASET + (
        "metrics:\n  - metric: ReferenceMatchMetric\n    threshold: 0.6\n    embedding_provider: local\n"
        "  - metric: LengthCheckMetric\n    max_length: 30\n    unit: words\n"
        "gate:\n  min_pass_rate: 1.0\n"
    ))
    # default --output-dir ./eval-results, index .evaltasks/index
    proc, _ = _cli(tmp_path, "run", suite.name, PREFECT_API_URL=prefect_api_url)
    assert proc.returncode == 1, proc.stderr
    _no_noise(proc)
    results = json.loads((tmp_path / "eval-results" / "results.json").read_text(encoding="utf-8"))
    assert results["passed"] is False
    assert results["summary"]["pass_rate"] == pytest.approx(6 / 8, abs=1e-9)
    assert (tmp_path / "eval-results" / "junit.xml").is_file()
    assert (tmp_path / "eval-results" / "summary.md").is_file()
    assert (tmp_path / ".evaltasks" / "index").is_dir()
    assert "GATE FAILED" in proc.stdout


# --- exit 2: invalid input, reported before anything runs (Prefect never starts), without a traceback ----------

INVALID = {
    "malformed-yaml": ("name: x\ndataset:\n  path: d.jsonl\nmetrics: [\n  - metric: LengthCheckMetric\n",
                       '{"actual_output": "a"}\n', ["line 5", "invalid YAML"]),
    "missing-dataset": ("name: x\ndataset:\n  path: nowhere.jsonl\nmetrics:\n  - metric: LengthCheckMetric\n",
                        None, ["nowhere.jsonl", "dataset file not found"]),
    "unknown-metric": ("name: x\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: LenghtCheckMetric\n",
                       '{"actual_output": "a"}\n', ["metrics[0]", "did you mean 'LengthCheckMetric'"]),
    "unknown-field": ("name: x\ndataset:\n  path: d.jsonl\n  fields: {output: answer}\n"
                      "metrics:\n  - metric: LengthCheckMetric\n",
                      '{"actual_output": "a"}\n', ["dataset.fields", "'output'", "unknown key"]),
    "mapped-key-typo": ("name: x\ndataset:\n  path: d.jsonl\n  fields: {input: questoin}\n"
                        "metrics:\n  - metric: LengthCheckMetric\n",
                        '{"question": "q", "actual_output": "a"}\n', ["d.jsonl", "'questoin'", "not found"]),
    "missing-column": ("name: x\ndataset:\n  path: d.csv\n  fields: {actual_output: model_answer}\n"
                       "metrics:\n  - metric: LengthCheckMetric\n",
                       "question,answer\nq,a\n", ["d.csv, line 1", "'model_answer'", "column not found"]),
    "non-string-output": ("name: x\ndataset:\n  path: d.json\nmetrics:\n  - metric: LengthCheckMetric\n",
                          '[{"actual_output": "a"}, {"actual_output": 42}]',
                          ["d.json, item 1", "'actual_output'", "must be a string, got number"]),
    "empty-dataset": ("name: x\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: LengthCheckMetric\n",
                      "", ["d.jsonl", "no rows"]),
    "missing-references": ("name: x\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: ReferenceMatchMetric\n"
                           "    embedding_provider: local\n",
                           '{"actual_output": "a", "references": ["r"]}\n{"actual_output": "b"}\n',
                           ["d.jsonl, line 2", "'references'"]),
    "openai-without-key": ("name: x\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: ReferenceMatchMetric\n"
                           "    embedding_provider: openai\n",
                           '{"actual_output": "a", "references": ["r"]}\n', ["OPENAI_API_KEY"]),
}


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
            body = json.dumps({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                         "code": "invalid_api_key"}}).encode()
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
        suite = _suite(tmp_path, "name: rejected\n" + QUICKSTART_DATASET + (
            "metrics:\n  - metric: ReferenceMatchMetric\n    embedding_provider: openai\n"
        ))
        env = _env(tmp_path, OPENAI_API_KEY="sk-rejected", PREFECT_API_URL=prefect_api_url,
                   OPENAI_BASE_URL=f"http://127.0.0.1:{server.server_address[1]}/v1")
        proc = subprocess.run([sys.executable, "-m", "evaltasks.cli", "run", suite.name, "--output-dir", "out"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 2, proc.stderr
    _no_noise(proc)
    assert "OPENAI_API_KEY" in proc.stderr and "401" in proc.stderr
    assert "evaltasks: error: missing or rejected credentials" in proc.stderr


def test_missing_suite_file_exits_2(tmp_path: Path) -> None:
    proc, _ = _cli(tmp_path, "run", "no-such-suite.yaml")
    assert proc.returncode == 2
    assert not (tmp_path / "prefect-home").exists()  # found before Prefect starts
    _no_noise(proc)
    assert "no-such-suite.yaml" in proc.stderr and "suite file not found" in proc.stderr


def test_bad_batch_size_exits_2(tmp_path: Path) -> None:
    proc, _ = _cli(tmp_path, "run", str(QUICKSTART), "--batch-size", "0")
    assert proc.returncode == 2
    assert "--batch-size" in proc.stderr
    _no_noise(proc)


@pytest.mark.parametrize("args", [[], ["run"], ["frobnicate"], ["run", "s.yaml", "--no-such-option"]])
def test_usage_errors_exit_2(tmp_path: Path, args: list[str]) -> None:
    proc, _ = _cli(tmp_path, *args)
    assert proc.returncode == 2
    assert "usage: evaltasks" in proc.stderr
    _no_noise(proc)


def test_schema_command_prints_the_schema(tmp_path: Path) -> None:
    proc, _ = _cli(tmp_path, "schema")
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    assert schema == suite_json_schema()
    assert schema == json.loads((REPO / "evaltasks" / "schema" / "suite.schema.json").read_text(encoding="utf-8"))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_version(tmp_path: Path) -> None:
    from evaltasks import __version__

    proc, _ = _cli(tmp_path, "--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"evaltasks {__version__}"
