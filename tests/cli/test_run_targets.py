"""``evaltasks run`` with a suite target (docs/targets.md#the-generate-stage): it generates the outputs, then scores
them; a rerun makes no call; ``--no-target`` grades the dataset's own outputs; a rejected key exits 2; Ctrl+C
during generation exits 130 keeping what is stored.

Every run is a real ``evaltasks run`` subprocess against the session's Prefect server; the target is a real
Python callable in the suite's folder, which records each call in a file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli_forkserver import run_cli
from tests.process_env import subprocess_env

pytestmark = pytest.mark.slow  # CLI subprocesses and Prefect flow runs

DEADLINE_S = 600  # generous: only bounds how long a broken run may hang the test

BOT = """
import os
import time
from pathlib import Path

from evaltasks.errors import CredentialsError

ANSWERS = {"What is 2+2?": "4", "Capital of France?": "Paris", "Colour of the sky?": "green", "Say hi": "hi"}


def respond(case):
    with open(os.environ["BOT_CALLS"], "a", encoding="utf-8") as calls:
        calls.write(case.input + "\\n")
    if case.input == "reject":
        raise CredentialsError("the bot's API key was rejected (HTTP 401)")
    if case.input == "hang":
        outputs = Path(os.environ["BOT_INDEX"]) / "outputs"
        while len(list(outputs.rglob("*.json"))) < 3:
            time.sleep(0.01)  # the three answers before this one are stored: the interrupt lands on this call
        Path(os.environ["BOT_CALLS"] + ".hang").write_text("hanging", encoding="utf-8")
        time.sleep(3600)
    return {"output": ANSWERS.get(case.input, "no idea"), "cost": 0.01}
"""


def _suite(directory: Path, questions: list[str], target: str = "{python: bot:respond, max_concurrency: 2}") -> Path:
    """A suite over ``questions`` (expected answers from the table, stale ``actual_output`` column) whose target
    is ``bot.py``'s ``respond``; ExactMatch, gate 50 %."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "bot.py").write_text(BOT, encoding="utf-8")
    expected = {"What is 2+2?": "4", "Capital of France?": "Paris", "Colour of the sky?": "blue", "Say hi": "hi"}
    rows = [
        {"id": f"q{i}", "question": q, "expected": expected.get(q, "?"), "answer": expected.get(q, "?")}
        for i, q in enumerate(questions)
    ]
    (directory / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    suite = directory / "suite.yaml"
    suite.write_text(
        "name: bot\ndataset:\n  path: d.jsonl\n"
        "  fields: {id: id, input: question, expected_output: expected, actual_output: answer}\n"
        f"target: {target}\nmetrics:\n  - metric: ExactMatchMetric\ngate: {{min_pass_rate: 0.5}}\n",
        encoding="utf-8",
    )
    return suite


def _env(tmp_path: Path, api_url: str | None) -> dict[str, str]:
    env = subprocess_env(tmp_path / "prefect-home", api_url)
    env["BOT_CALLS"] = str(tmp_path / "calls.txt")
    env["BOT_INDEX"] = str(tmp_path / "index")
    return env


def _run(
    suite: Path, tmp_path: Path, api_url: str, *flags: str, quiet: bool = True
) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "run", str(suite), "--output-dir", str(tmp_path / "out"), "--index-dir", str(tmp_path / "index"),
        *(["--quiet"] if quiet else []), *flags, cwd=tmp_path, env=_env(tmp_path, api_url), timeout=DEADLINE_S,
    )  # fmt: skip


def _calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _results(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))


QUESTIONS = ["What is 2+2?", "Capital of France?", "Colour of the sky?", "Say hi"]


def test_run_generates_then_scores_and_a_rerun_makes_no_call(tmp_path: Path, prefect_api_url: str) -> None:
    suite = _suite(tmp_path / "suite", QUESTIONS)
    first = _run(suite, tmp_path, prefect_api_url)

    assert first.returncode == 0, first.stderr
    assert sorted(_calls(tmp_path)) == sorted(QUESTIONS)
    assert "the column 'answer' is ignored" in first.stderr  # the dataset's own answers are not graded
    results = _results(tmp_path)
    assert [c["actual_output"] for c in results["cases"]] == ["4", "Paris", "green", "hi"]
    assert [c["status"] for c in results["cases"]] == ["passed", "passed", "failed", "passed"]
    (target,) = results["targets"]
    assert (target["name"], target["kind"], target["requests"], target["cached"]) == ("python", "python", 4, 0)
    assert target["cost"] == pytest.approx(0.04)
    assert any("is ignored" in notice for notice in results["notices"])

    rerun = _run(suite, tmp_path, prefect_api_url, quiet=False)
    assert rerun.returncode == 0, rerun.stderr
    assert len(_calls(tmp_path)) == 4  # no call: every output came from the store
    assert "target python: 4 outputs, 0 requests, 4 from the output store, 0 failed" in rerun.stdout
    results = _results(tmp_path)
    assert (results["targets"][0]["requests"], results["targets"][0]["cached"]) == (0, 4)
    assert [c["actual_output"] for c in results["cases"]] == ["4", "Paris", "green", "hi"]

    graded = _run(suite, tmp_path, prefect_api_url, "--no-target")  # the dataset's own answers, all right
    assert graded.returncode == 0, graded.stderr
    assert len(_calls(tmp_path)) == 4
    results = _results(tmp_path)
    assert results["targets"] == [] and [c["actual_output"] for c in results["cases"]] == ["4", "Paris", "blue", "hi"]
    assert all(c["generation"] is None for c in results["cases"]) and results["summary"]["passed_cases"] == 4


def test_a_rejected_key_stops_the_run_with_exit_2(tmp_path: Path, prefect_api_url: str) -> None:
    suite = _suite(tmp_path / "suite", ["What is 2+2?", "reject"], target="{python: bot:respond}")
    run = _run(suite, tmp_path, prefect_api_url)

    assert run.returncode == 2, run.stderr
    assert "the bot's API key was rejected (HTTP 401)" in run.stderr
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups: POSIX")
def test_ctrl_c_during_generation_exits_130_keeping_what_is_stored(tmp_path: Path) -> None:
    suite = _suite(tmp_path / "suite", ["What is 2+2?", "Capital of France?", "Say hi", "hang"])
    with open(tmp_path / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "evaltasks.cli", "run", str(suite), "--output-dir", str(tmp_path / "out"),
             "--index-dir", str(tmp_path / "index"), "--quiet"],
            cwd=tmp_path, env=_env(tmp_path, None), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not (tmp_path / "calls.txt.hang").exists():
            assert proc.poll() is None, (tmp_path / "stderr.txt").read_text(encoding="utf-8")
            assert time.monotonic() < deadline, "the target never reached the hanging case"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=120)  # the call sleeps an hour: an exit now is the interrupt's
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    stderr = (tmp_path / "stderr.txt").read_text(encoding="utf-8")
    assert rc == 130, stderr
    assert "interrupted by SIGINT" in stderr and "Traceback" not in stderr
    assert len(list((tmp_path / "index" / "outputs").rglob("*.json"))) == 3  # the answers before it stay stored


def test_process_workers_generate_the_same_outputs(tmp_path: Path, prefect_api_url: str) -> None:
    """The target (the suite folder's callable, pickled by value) runs in the processes task runner's workers."""
    suite = _suite(tmp_path / "suite", QUESTIONS)
    run = _run(suite, tmp_path, prefect_api_url, "--task-runner", "processes:2")

    assert run.returncode == 0, run.stderr
    assert sorted(_calls(tmp_path)) == sorted(QUESTIONS)
    results = _results(tmp_path)
    assert [c["actual_output"] for c in results["cases"]] == ["4", "Paris", "green", "hi"]
    assert results["targets"][0]["requests"] == 4 and results["summary"]["passed_cases"] == 3


PROMPT = "### system\nYou answer in one word.\n\n### user\nQuestion: {{ input }}\n"


def _chat_suite(directory: Path, base_url: str, extra: str = "") -> Path:
    """A suite whose target is a chat model at ``base_url`` (the loopback chat server) with a prompt file."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "answer.md").write_text(PROMPT, encoding="utf-8")
    rows = [{"id": f"q{i}", "question": q, "expected": q.split()[-1]} for i, q in enumerate(["say yes", "say no"])]
    (directory / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    suite = directory / "suite.yaml"
    suite.write_text(
        "name: chat\ndataset: {path: d.jsonl, fields: {input: question, expected_output: expected}}\n"
        f"target: {{chat: {{model: bot-model, prompt: answer.md, base_url: '{base_url}'{extra}}}}}\n"
        "metrics: [{metric: ExactMatchMetric}]\ngate: {min_pass_rate: 0.5}\n",
        encoding="utf-8",
    )
    return suite


def _chat_run(
    suite: Path, tmp_path: Path, api_url: str, key: str | None, *flags: str
) -> subprocess.CompletedProcess[str]:
    env = _env(tmp_path, api_url)
    env.pop("OPENAI_API_KEY", None)
    if key is not None:
        env["OPENAI_API_KEY"] = key
    return run_cli(
        "run",
        str(suite),
        "--output-dir",
        str(tmp_path / "out"),
        "--index-dir",
        str(tmp_path / "index"),
        "--quiet",
        *flags,
        cwd=tmp_path,
        env=env,
        timeout=DEADLINE_S,
    )


def test_a_chat_target_makes_no_request_on_a_rerun_and_its_key_rules(tmp_path: Path, prefect_api_url: str) -> None:
    from tests.chat_server import ChatServer

    with ChatServer(responder=lambda r: r.user.split()[-1], retry_after_s=0) as server:
        suite = _chat_suite(tmp_path / "suite", server.base_url)
        first = _chat_run(suite, tmp_path, prefect_api_url, server.api_key)
        assert first.returncode == 0, first.stderr
        assert len(server.requests) == 2
        sent = sorted(r.body["messages"][1]["content"] for r in server.requests)
        assert sent == ["Question: say no", "Question: say yes"]  # the rendered prompt's user part
        results = _results(tmp_path)
        assert [c["actual_output"] for c in results["cases"]] == ["yes", "no"]
        assert all(c["generation"]["input_tokens"] and c["generation"]["output_tokens"] for c in results["cases"])
        assert all(c["generation"]["cost"] is None for c in results["cases"])  # bot-model has no price: unknown
        assert any("no price for the chat target chat's model bot-model" in w for w in results["warnings"])

        rerun = _chat_run(suite, tmp_path, prefect_api_url, server.api_key)
        assert rerun.returncode == 0, rerun.stderr
        assert len(server.requests) == 2  # 0 requests: the prompt and the cases are unchanged
        assert _results(tmp_path)["targets"][0]["cached"] == 2

        rejected = _chat_run(suite, tmp_path, prefect_api_url, "sk-wrong", "--no-cache")
        assert rejected.returncode == 2, rejected.stderr
        assert "Traceback" not in rejected.stderr and "sk-wrong" not in rejected.stderr

        # in a process worker too: the failed task run's error reaches the run's process and stops it with exit 2
        # (it once kept the openai error as its context, which does not unpickle: exit 3 with a traceback)
        in_worker = _chat_run(
            suite, tmp_path, prefect_api_url, "sk-wrong", "--no-cache", "--task-runner", "processes:2"
        )
        assert in_worker.returncode == 2, in_worker.stderr
        assert "rejected the key (OPENAI_API_KEY): HTTP 401" in in_worker.stderr and "sk-wrong" not in in_worker.stderr

        missing = _chat_run(suite, tmp_path, prefect_api_url, None)
        assert missing.returncode == 2 and "OPENAI_API_KEY" in missing.stderr, missing.stderr

        skipped = _chat_run(suite, tmp_path, prefect_api_url, None, "--skip-missing-credentials")
        assert "target chat skipped" in skipped.stderr, skipped.stderr
        results = _results(tmp_path)
        assert [c["status"] for c in results["cases"]] == ["skipped", "skipped"]
        assert results["targets"][0]["requests"] == 0 and any("target chat skipped" in w for w in results["warnings"])
        # the two rejected runs' requests in flight when the 401 stopped each (2 cases: at most 2 each); none since
        assert 2 + 2 <= len(server.requests) <= 2 + 2 + 2


def test_max_cost_covers_the_chat_target_before_anything_is_sent(tmp_path: Path, prefect_api_url: str) -> None:
    from tests.chat_server import ChatServer

    with ChatServer(responder=lambda r: "yes", retry_after_s=0) as server:
        unpriced = _chat_run(_chat_suite(tmp_path / "unpriced", server.base_url), tmp_path, prefect_api_url,
                             server.api_key, "--max-cost", "5")  # fmt: skip
        assert unpriced.returncode == 2, unpriced.stderr
        assert "--max-cost cannot limit the chat target chat (model bot-model): it has no price" in unpriced.stderr
        prices = ", max_tokens: 100, prices: {bot-model: {input: 1000, output: 1000}}"  # $0.1 a completion at most
        suite = _chat_suite(tmp_path / "suite", server.base_url, prices)
        refused = _chat_run(suite, tmp_path, prefect_api_url, server.api_key, "--max-cost", "0.15")
        assert refused.returncode == 2, refused.stderr
        assert "above --max-cost $0.1500" in refused.stderr and "target" in refused.stderr
        assert server.requests == []
        allowed = _chat_run(suite, tmp_path, prefect_api_url, server.api_key, "--max-cost", "5")
        assert allowed.returncode in (0, 1), allowed.stderr
        assert len(server.requests) == 2


PREFECT_API_BOT = """
from prefect.variables import Variable


def respond(case):
    Variable.set("evaltasks_target_check", case.input, overwrite=True)  # Prefect's API, from inside the target
    return {"output": Variable.get("evaltasks_target_check")}
"""


def test_a_python_target_calling_prefects_api_while_the_temporary_server_starts(tmp_path: Path) -> None:
    """Outputs are generated while Prefect's temporary server starts (docs/targets.md#generation-starts-while-prefect-starts):
    a target that calls Prefect's API (a variable, a block) from the first case on waits for the server to answer
    instead of failing its first cases with "connection refused" (no PREFECT_API_URL: the run's own server)."""
    suite = _suite(tmp_path / "suite", QUESTIONS, "{python: bot:respond, max_concurrency: 1}")
    (suite.parent / "bot.py").write_text(PREFECT_API_BOT, encoding="utf-8")
    proc = run_cli(
        "run", str(suite), "--output-dir", str(tmp_path / "out"), "--index-dir", str(tmp_path / "index"), "--quiet",
        cwd=tmp_path, env=_env(tmp_path, None), timeout=DEADLINE_S,
    )  # fmt: skip
    assert "connection refused" not in (proc.stdout + proc.stderr).lower(), proc.stderr[-3000:]
    results = _results(tmp_path)
    assert [case["actual_output"] for case in results["cases"]] == QUESTIONS  # each case read back its own input
    assert results["summary"]["cases"] == 4
