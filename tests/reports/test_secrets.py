"""Secrets never reach a report (docs/reports.md#secrets-in-reports).

An endpoint that echoes the API key in an error body (``400_echo`` of tests/chat_server.py and
tests/openai_server.py, real HTTP servers on 127.0.0.1) gets a canary key planted; a real ``evaltasks run`` (the
real Prefect engine and its temporary server, with its SQLite database under PREFECT_HOME) then writes its
reports, and every byte the run wrote (output folder, index, PREFECT_HOME with the database), its Prefect
database's rows, and its captured stdout/stderr are searched for the canary. The Action's run (action/run-local.sh,
the comment posted to tests/github_server.py) is searched the same way.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from evaltasks import _redact
from evaltasks._redact import MASK, redact, register
from tests.cli_forkserver import run_cli
from tests.loopback_server import LoopbackHandler, LoopbackServer
from tests.process_env import REPO_ROOT, subprocess_env

CANARY = "sk-canary-7f3a9c21d4e5b6a8c0"  # what the echoing endpoints quote back
TESTS = Path(__file__).resolve().parents[1]
ECHOED = f"Invalid request for the key {MASK} (Authorization: Bearer {MASK})"  # the echo, redacted


# -- the registry ------------------------------------------------------------------------------------------------


@pytest.fixture()
def clean_registry(monkeypatch: pytest.MonkeyPatch):
    """No secret in the environment and none registered, for the duration of a test."""
    for name in (*_redact.SECRET_VARIABLES, _redact.EXTRA_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_redact, "_registered", set())
    yield


def test_redact_hides_environment_and_registered_secrets_in_their_encodings(clean_registry, monkeypatch) -> None:
    key = 'sk-live "quoted"/ñ+key'  # characters that JSON, URLs and HTML each encode differently
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", key)
    text = (
        f"plain {key}; json {json.dumps(key)[1:-1]}; ascii json {json.dumps(key, ensure_ascii=False)[1:-1]}; "
        f"url {urllib.parse.quote(key, safe='')}; form {urllib.parse.quote_plus(key)}; "
        "html sk-live &quot;quoted&quot;/ñ+key"
    )
    assert redact(text) == (f"plain {MASK}; json {MASK}; ascii json {MASK}; url {MASK}; form {MASK}; html {MASK}")

    monkeypatch.setenv(_redact.EXTRA_VARIABLES, "MY_GATEWAY_TOKEN, OTHER_TOKEN")  # a header value from the env
    monkeypatch.setenv("MY_GATEWAY_TOKEN", "gw-0123456789")
    register("explicit-key-42")  # an api_key passed in Python
    assert redact("gw-0123456789 and explicit-key-42") == f"{MASK} and {MASK}"
    assert _redact.secret_variable_names() == [*_redact.SECRET_VARIABLES, "MY_GATEWAY_TOKEN", "OTHER_TOKEN"]

    register("ollama")  # shorter than MIN_LENGTH: a word like this is too common to hide everywhere
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    assert redact("ollama x marks the spot") == "ollama x marks the spot"


def test_errors_reasons_warnings_and_log_records_are_redacted(clean_registry, monkeypatch, recwarn) -> None:
    from evaltasks.errors import CredentialsError, ProviderError
    from evaltasks.index import IndexWarning, report_warning
    from evaltasks.results import MetricResult

    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    assert str(ProviderError(f"HTTP 400: bad key {CANARY}")) == f"HTTP 400: bad key {MASK}"
    credentials = CredentialsError(f"rejected {CANARY}")
    assert CANARY not in str(credentials) and CANARY not in credentials.message
    errored = MetricResult.errored("M", 0.5, f"BadRequestError: {CANARY}")
    assert errored.error == f"BadRequestError: {MASK}" and errored.reason == f"Errored: BadRequestError: {MASK}"
    assert MetricResult.skipped("M", 0.5, f"skipped: {CANARY}").reason == f"skipped: {MASK}"
    report_warning(f"namespace rebuilt after {CANARY}")
    assert [str(w.message) for w in recwarn if w.category is IndexWarning] == [f"namespace rebuilt after {MASK}"]

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    logger = logging.getLogger("prefect.test_secrets")
    handler = Keep()
    logger.addHandler(handler)
    try:
        logger.error("request failed: %s", f"key={CANARY}")
        try:
            raise RuntimeError(f"echo {CANARY}")
        except RuntimeError:
            logger.exception("with a traceback")
    finally:
        logger.removeHandler(handler)
    assert seen[0] == f"request failed: key={MASK}"
    assert "with a traceback" in seen[1] and f"RuntimeError: echo {MASK}" in seen[1] and CANARY not in seen[1]


def test_a_key_given_in_python_is_redacted_from_the_reasons(clean_registry) -> None:
    """``judge_options={"api_key": ...}`` (no variable set): the client registers its key where it is built."""
    from evaltasks import EvalTestCase, evaluate_sync
    from evaltasks.metrics.judge.faithfulness import FaithfulnessMetric
    from tests.chat_server import ChatServer

    with ChatServer(api_key=CANARY) as chat:
        chat.always = "400_echo"
        metric = FaithfulnessMetric(judge_options={"api_key": CANARY, "base_url": chat.base_url, "max_retries": 0})
        case = EvalTestCase(
            input="Where is Paris?",
            actual_output="Paris is in France. It is the capital.",
            retrieval_context=["Paris is the capital of France."],
        )
        result = evaluate_sync([case], [metric])
        assert len(chat.requests) == 1  # the request was sent and echoed the key
    (metric_result,) = result.test_results[0].metrics
    assert metric_result.status == "errored" and ECHOED in metric_result.reason, metric_result.reason
    assert CANARY not in result.model_dump_json()


# -- a whole run: every file it wrote, its database, its output ------------------------------------------------------


def _canary_suite(folder: Path, chat_url: str, embeddings_url: str) -> Path:
    """A suite with a judge metric (the chat server) and an OpenAI embedding metric (the embeddings server)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "d.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "id": f"c{i}",
                    "input": f"question {i}",
                    "actual_output": f"answer {i}",
                    "expected_output": f"answer {i}",
                    "retrieval_context": [f"context {i}"],
                }
            )
            + "\n"
            for i in range(3)
        ),
        encoding="utf-8",
    )
    suite = {
        "name": "canary",
        "dataset": {"path": "d.jsonl"},
        "judge": {
            "model": "judge-model",
            "base_url": chat_url,
            "max_retries": 0,
            "prices": {"judge-model": {"input": 0, "output": 0}},
        },
        "metrics": [
            {"metric": "FaithfulnessMetric"},
            {
                "metric": "SemanticSimilarityMetric",
                "embedding_provider": "openai",
                "model_name": "text-embedding-3-small",
                "provider_options": {"base_url": embeddings_url},
            },
        ],
        "gate": {"min_pass_rate": 0},
    }
    path = folder / "suite.yaml"
    path.write_text(json.dumps(suite), encoding="utf-8")  # JSON is YAML
    return path


def _files_holding(root: Path, needle: bytes) -> list[str]:
    """Every file under ``root`` whose bytes contain ``needle``."""
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


def _database_rows(database: Path) -> dict[str, list[str]]:
    """Every text value of every table of Prefect's SQLite database (the WAL read as SQLite reads it), by table."""
    rows: dict[str, list[str]] = {}
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            values = [
                str(v) for row in db.execute(f'SELECT * FROM "{table}"') for v in row if isinstance(v, (str, bytes))
            ]
            rows[table] = values
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["threads", "processes:2"])
def test_an_echoed_key_reaches_no_report_no_log_and_no_prefect_database(tmp_path: Path, runner: str) -> None:
    from tests.chat_server import ChatServer
    from tests.openai_server import OpenAIServer

    home = tmp_path / "prefect-home"
    with ChatServer(api_key=CANARY) as chat, OpenAIServer(api_key=CANARY) as embeddings:
        chat.always = embeddings.always = "400_echo"
        suite = _canary_suite(tmp_path / "suite", chat.base_url, embeddings.url + "/v1")
        env = {**subprocess_env(home), "OPENAI_API_KEY": CANARY, "PYTHONPATH": str(REPO_ROOT)}
        args = ["run", str(suite), "--output-dir", str(tmp_path / "out"), "--index-dir", str(tmp_path / "index")]
        proc = run_cli(*args, "--task-runner", runner, cwd=tmp_path, env=env, timeout=600)
        assert chat.requests and embeddings.requests, proc.stderr  # both endpoints were asked, and echoed the key
    assert proc.returncode in (0, 1), proc.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    reasons = {m["name"]: m["reason"] for m in results["cases"][0]["metrics"]}
    assert ECHOED in reasons["FaithfulnessMetric"] and ECHOED in reasons["SemanticSimilarityMetric"], reasons

    assert CANARY not in proc.stdout and CANARY not in proc.stderr
    assert ECHOED in proc.stderr  # the provider's failure is still said, without the key
    assert _files_holding(tmp_path, CANARY.encode()) == []  # reports, index, Prefect home and its database
    rows = _database_rows(home / "prefect.db")
    assert any(ECHOED in v for v in rows["task_run_state"]) and any(ECHOED in v for v in rows["log"])
    assert rows["artifact"] and rows["flow_run"]  # the run's artifacts and parameters are there, and searched
    assert [table for table, values in rows.items() if any(CANARY in v for v in values)] == []


class _EchoingApp(LoopbackHandler):
    """A system under test that answers 200 and quotes the request's Authorization header in its answer."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        echoed = f"auth={self.headers.get('Authorization')}"
        self.send_json(200, {"answer": f"debug: {echoed}", "docs": [echoed]})


class _EchoingServer(LoopbackServer):
    handler = _EchoingApp
    thread_name = "echoing-app"


@pytest.mark.slow
def test_a_target_answer_that_echoes_its_key_reaches_no_report_and_no_prefect_database(tmp_path: Path) -> None:
    """The system under test answers 200 with the secret header in its answer: the run's reports, index, output
    store, Prefect home (database included) and output hold ``***`` instead, the cases are flagged, and the run
    says which target did it."""
    secret = "apptok-canary-91b2c3d4e5"
    home = tmp_path / "prefect-home"
    with _EchoingServer() as app:
        (tmp_path / "d.jsonl").write_text(
            "".join(json.dumps({"id": f"c{i}", "question": f"q{i}"}) + "\n" for i in range(3)), encoding="utf-8"
        )
        (tmp_path / "suite.yaml").write_text(
            "name: echo\ndataset: {path: d.jsonl, fields: {input: question}}\n"
            "metrics: [{metric: LengthCheckMetric, max_length: 50, unit: words}]\n"
            f"target:\n  http:\n    url: {app.url}/ask\n    body: {{q: '{{{{ question }}}}'}}\n"
            "    output: answer\n    retrieval_context: docs\n    headers: {Authorization: APP_TOKEN}\n"
            "gate: {min_pass_rate: 0}\n",
            encoding="utf-8",
        )
        env = {**subprocess_env(home), "APP_TOKEN": f"Bearer {secret}", "EVALTASKS_SECRET_VARIABLES": "APP_TOKEN"}
        args = ["run", "suite.yaml", "--output-dir", "out", "--index-dir", "index"]
        proc = run_cli(*args, cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert [case["actual_output"] for case in results["cases"]] == ["debug: auth=***"] * 3
    assert all(case["generation"]["metadata"]["secrets_redacted"] is True for case in results["cases"])
    said = [line for line in proc.stderr.splitlines() if "with a configured secret in the output" in line]
    assert len(said) == 1 and "the target http answered 3 of 3 cases" in said[0], proc.stderr
    assert secret not in proc.stdout and secret not in proc.stderr
    assert _files_holding(tmp_path, secret.encode()) == []  # reports, index and output store, Prefect home
    rows = _database_rows(home / "prefect.db")
    assert rows["artifact"] and rows["task_run_state"]
    assert [table for table, values in rows.items() if any(secret in v for v in values)] == []


# -- the Action ------------------------------------------------------------------------------------------------------


def test_the_action_masks_each_secret_and_its_summary_comment_and_artifact_hold_none(
    tmp_path: Path, prefect_api_url: str
) -> None:
    from tests.chat_server import ChatServer
    from tests.e2e.test_action_runs import _pr_event, _run_local
    from tests.github_server import GitHubServer
    from tests.openai_server import OpenAIServer

    gateway = "gw-token-5150c0ffee"  # a header value a metric reads: named in EVALTASKS_SECRET_VARIABLES
    with ChatServer(api_key=CANARY) as chat, OpenAIServer(api_key=CANARY) as embeddings, GitHubServer() as github:
        chat.always = embeddings.always = "400_echo"
        _canary_suite(tmp_path / "ws" / "evals", chat.base_url, embeddings.url + "/v1")
        code, run = _run_local(
            tmp_path,
            "pr",
            "--with",
            "suite=evals/suite.yaml",
            "--with",
            f"openai-api-key={CANARY}",
            "--event-path",
            str(_pr_event(tmp_path)),
            server=github,
            api_url=prefect_api_url,
            env_extra={"EVALTASKS_SECRET_VARIABLES": "GATEWAY_TOKEN", "GATEWAY_TOKEN": gateway},
        )
        comments = github.all_comments()
    assert code == 1, run["log"][
        -4000:
    ]  # every case errored: nothing was evaluated, the gate fails (docs/suite.md#suite-file)
    shown = "Invalid request for the key \\*\\*\\*"  # as Markdown escapes it
    assert len(comments) == 1 and shown in comments[0]["body"] and shown in run["summary"]
    for text in (run["summary"], comments[0]["body"], run["log"], json.dumps(run["outputs"])):
        assert CANARY not in text and gateway not in text
    (artifact,) = (Path(run["runner_temp"]) / "artifacts").iterdir()
    assert ECHOED in (artifact / "results.json").read_text(encoding="utf-8")
    assert _files_holding(tmp_path, CANARY.encode()) == []  # workspace, reports, artifact, caches, runner temp


def test_the_run_step_masks_every_configured_secret_before_evaltasks_starts(tmp_path: Path) -> None:
    """action/run.sh announces each secret's value (``::add-mask::``) before it runs evaltasks: the variables of
    evaltasks._redact.SECRET_VARIABLES and those named in EVALTASKS_SECRET_VARIABLES, each line of a multi-line one."""
    fake = tmp_path / "python"
    # it says so only when started as evaltasks (run.sh first asks it whether it takes -P: `-P -c ''`)
    fake.write_text("#!/bin/sh\ncase \"$*\" in *evaltasks*) echo 'evaltasks ran';; esac\n", encoding="utf-8")
    fake.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "PYTHON": str(fake),
        "SUITE": "s.yaml",
        "OUTPUT_DIR": str(tmp_path / "out"),
        "REGRESSION_TOLERANCE": "0.01",
        "RUN_LOG": str(tmp_path / "run.log"),
        "GITHUB_OUTPUT": str(tmp_path / "github_output"),
        "OPENAI_API_KEY": CANARY,
        "AZURE_OPENAI_API_KEY": "azure-key-0123456789",
        "PREFECT_API_KEY": "",
        "EVALTASKS_SECRET_VARIABLES": "GATEWAY_TOKEN,bad-name UNSET_TOKEN",
        "GATEWAY_TOKEN": "line one\nline two",
    }
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "action" / "run.sh")], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    masks = [line.removeprefix("::add-mask::") for line in lines if line.startswith("::add-mask::")]
    assert masks == [CANARY, "azure-key-0123456789", "line one", "line two"]
    assert lines.index("evaltasks ran") > max(i for i, line in enumerate(lines) if line.startswith("::add-mask::"))
    assert "::warning" in proc.stdout and "bad-name" in proc.stdout  # a name that is no variable name is said

    for name in ("EVALTASKS_SECRET_VARIABLES", "AZURE_OPENAI_API_KEY", "GATEWAY_TOKEN"):  # unset (`set -u`)
        del env[name]
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "action" / "run.sh")], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 0 and "evaltasks ran" in proc.stdout, proc.stderr
    assert [line for line in proc.stdout.splitlines() if line.startswith("::add-mask::")] == [f"::add-mask::{CANARY}"]
