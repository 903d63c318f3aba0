"""Judge credentials (docs/judges.md#llm-judges): a rejected key stops the run, a missing key is a credentials error
naming the variable, and skips for missing credentials still pass the gate.

The judge is ``tests/judge_metric.py:VerdictMetric`` answered by the loopback chat server (tests/chat_server.py)
through the real openai SDK; runs use the real CLI in a subprocess and the real Prefect engine. Nothing is mocked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evaltasks.errors import CredentialsError
from evaltasks.judges.openai import OpenAIJudge
from tests.judge_runs import (
    JUDGE_MODEL,
    KEY,
    PYTHONPATH,
    judge_env,
    passing_answer,
    read_results,
    run_judged_cli,
    write_suite,
)
from tests.process_env import subprocess_env

# -- a rejected key stops the run ------------------------------------------------------------------------------


@pytest.mark.parametrize("runner", ["threads", "processes:2"])
def test_rejected_judge_key_stops_the_cli_run_with_exit_2(tmp_path: Path, prefect_api_url: str, runner: str) -> None:
    from tests.chat_server import ChatServer

    suite = write_suite(
        tmp_path / "suite",
        [{"metric": "judge_metric:VerdictMetric"}],
        judge={"model": JUDGE_MODEL, "prices": {JUDGE_MODEL: {"input": 1.0, "output": 1.0}}},
    )
    with ChatServer(api_key=KEY, responder=passing_answer) as server:
        done = run_judged_cli(
            tmp_path,
            suite,
            judge_env(tmp_path, prefect_api_url, server.base_url, key="sk-bad"),
            "--task-runner",
            runner,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("error: missing or rejected credentials") == 1, done.stderr  # one message
    if runner == "threads":  # (a worker process logs Prefect's own line for its failed task run too)
        assert done.stderr.count("HTTP 401") == 1, done.stderr  # not one per case
    assert "OPENAI_API_KEY" in done.stderr and "HTTP 401" in done.stderr
    assert "Traceback" not in done.stderr
    assert server.requests and all(r.status == 401 for r in server.requests)  # never retried into a verdict
    assert not (tmp_path / "out" / "results.json").exists()


def test_rejected_judge_key_raises_in_the_python_api(tmp_path: Path, monkeypatch) -> None:
    from evaltasks import EvalTestCase
    from evaltasks.engine.evaluate import evaluate_sync
    from tests.chat_server import ChatServer
    from tests.judge_metric import VerdictMetric

    with ChatServer(api_key=KEY, responder=passing_answer) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-bad")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        metric = VerdictMetric(model=JUDGE_MODEL, judge_options={"max_retries": 0})
        cases = [EvalTestCase(input=f"q{i}", actual_output=f"a{i}") for i in range(3)]
        with pytest.raises(CredentialsError, match=r"OPENAI_API_KEY.*HTTP 401"):
            evaluate_sync(cases, [metric])


# -- a missing key ------------------------------------------------------------------------------------------------


def test_skips_for_missing_credentials_still_pass_the_gate(tmp_path: Path, prefect_api_url: str) -> None:
    env = {**subprocess_env(tmp_path / "prefect-home", prefect_api_url), "PYTHONPATH": PYTHONPATH}
    env.pop("OPENAI_API_KEY", None)
    env.pop("AZURE_OPENAI_API_KEY", None)
    suite = write_suite(
        tmp_path / "suite",
        [
            {"metric": "judge_metric:VerdictMetric", "name": "judged"},
            {"metric": "LengthCheckMetric", "max_length": 100},
        ],
        judge={"base_url": "http://127.0.0.1:9/v1"},
    )  # never contacted
    done = run_judged_cli(tmp_path, suite, env, "--skip-missing-credentials", "--max-cost", "1")
    assert done.returncode == 0, done.stderr
    results = read_results(tmp_path)
    assert results["passed"] is True and results["summary"]["budget_skipped"] == 0
    assert not any("budget" in w for w in results["warnings"])
    # a metric that evaluated nothing has no pass rate (not 0 %), like its mean
    skipped = results["summary"]["metrics"]["judged"]
    assert (skipped["skipped"], skipped["mean_score"], skipped["pass_rate"]) == (6, None, None)
    assert results["summary"]["metrics"]["LengthCheckMetric"]["pass_rate"] == 1.0
    summary_md = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "| judged | n/a | n/a | 0.5 | 0 | 0 | 6 |" in summary_md
    from rich.console import Console

    from evaltasks.reports.console import print_summary
    from evaltasks.results import EvaluationSummary

    console = Console(record=True, width=200)
    print_summary(EvaluationSummary.model_validate(results["summary"]), console=console)
    row = next(line for line in console.export_text().splitlines() if "judged" in line)
    assert row.split()[1:3] == ["n/a", "n/a"], row


def test_missing_judge_key_is_a_credentials_error_naming_the_variable(tmp_path: Path, prefect_api_url: str) -> None:
    env = {**subprocess_env(tmp_path / "prefect-home", prefect_api_url), "PYTHONPATH": PYTHONPATH}
    env.pop("OPENAI_API_KEY", None)
    env.pop("AZURE_OPENAI_API_KEY", None)
    suite = write_suite(
        tmp_path / "suite",
        [{"metric": "judge_metric:VerdictMetric", "name": "a"}, {"metric": "judge_metric:VerdictMetric", "name": "b"}],
        judge={"base_url": "http://127.0.0.1:9/v1"},
    )
    done = run_judged_cli(tmp_path, suite, env)
    assert done.returncode == 2, done.stderr
    assert "missing or rejected credentials: 1 problem(s)" in done.stderr
    assert "OPENAI_API_KEY" in done.stderr and "judge_options" not in done.stderr and "metrics[" not in done.stderr


def test_the_missing_key_message_does_not_send_users_to_the_suite_file(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT", "OPENAI_BASE_URL"):
        monkeypatch.setenv(name, "")
    with pytest.raises(CredentialsError) as caught:
        OpenAIJudge("gpt-4o-mini", {})
    assert (
        "set the OPENAI_API_KEY environment variable (or pass the judge option api_key in Python; a suite file "
        "may not hold one)" in str(caught.value)
    )
