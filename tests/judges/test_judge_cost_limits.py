"""Run-level behaviour of judge metrics (README, "LLM judges"): a budget that ran out fails the gate, a rejected
key stops the run, unpriced judge models are reported, the suite's ``judge:`` block is located in problems, and a
metric that evaluated nothing has no pass rate.

The judge is ``tests/judge_metric.py:VerdictMetric`` answered by the loopback chat server (tests/chat_server.py)
through the real openai SDK; runs use the real CLI in a subprocess and the real Prefect engine. Nothing is mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import subprocess_env
from evaltasks.errors import CredentialsError

TESTS = Path(__file__).resolve().parent
PYTHONPATH = os.pathsep.join([str(TESTS), str(TESTS.parent)])  # judge_metric, chat_server, this checkout
CLI_TIMEOUT = 600
JUDGE_MODEL = "judge-model"
KEY = "sk-test-chat-server"


def _write_suite(folder: Path, metrics: list[dict[str, Any]], judge: dict[str, Any] | None = None,
                 cases: int = 6) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"input": f"question {i}", "actual_output": f"answer {i}"} for i in range(cases)]
    (folder / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in rows), encoding="utf-8")
    suite: dict[str, Any] = {"name": "judged", "dataset": {"path": "cases.jsonl"}, "metrics": metrics,
                             "gate": {"min_pass_rate": 0.5}}
    if judge is not None:
        suite["judge"] = judge
    path = folder / "suite.yaml"
    path.write_text(json.dumps(suite), encoding="utf-8")  # JSON is YAML
    return path


def _cli(tmp_path: Path, suite: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "evaltasks.cli", "run", str(suite), "--output-dir", str(tmp_path / "out"),
            "--index-dir", str(tmp_path / "index"), "--quiet", *extra]
    return subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=CLI_TIMEOUT)


def _env(tmp_path: Path, prefect_api_url: str, base_url: str, key: str = KEY) -> dict[str, str]:
    return {**subprocess_env(tmp_path / "prefect-home", prefect_api_url), "PYTHONPATH": PYTHONPATH,
            "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": key}


def _results(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))


def _passing(request: Any) -> Any:
    from chat_server import Answer
    from judge_metric import MAX_TOKENS

    return Answer(text='{"score": 1, "reason": "fine"}', completion_tokens=MAX_TOKENS)


# -- a rejected key stops the run ------------------------------------------------------------------------------


@pytest.mark.parametrize("runner", ["threads", "processes:2"])
def test_rejected_judge_key_stops_the_cli_run_with_exit_2(tmp_path: Path, prefect_api_url: str, runner: str) -> None:
    from chat_server import ChatServer

    suite = _write_suite(tmp_path / "suite", [{"metric": "judge_metric:VerdictMetric"}],
                         judge={"model": JUDGE_MODEL, "prices": {JUDGE_MODEL: {"input": 1.0, "output": 1.0}}})
    with ChatServer(api_key=KEY, responder=_passing) as server:
        done = _cli(tmp_path, suite, _env(tmp_path, prefect_api_url, server.base_url, key="sk-bad"),
                    "--task-runner", runner)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("error: missing or rejected credentials") == 1, done.stderr  # one message
    if runner == "threads":  # (a worker process logs Prefect's own line for its failed task run too)
        assert done.stderr.count("HTTP 401") == 1, done.stderr  # not one per case
    assert "OPENAI_API_KEY" in done.stderr and "HTTP 401" in done.stderr
    assert "Traceback" not in done.stderr
    assert server.requests and all(r.status == 401 for r in server.requests)  # never retried into a verdict
    assert not (tmp_path / "out" / "results.json").exists()


def test_rejected_judge_key_raises_in_the_python_api(tmp_path: Path, monkeypatch) -> None:
    from chat_server import ChatServer
    from evaltasks import EvalTestCase
    from evaltasks.engine.evaluate import evaluate_sync
    from judge_metric import VerdictMetric

    with ChatServer(api_key=KEY, responder=_passing) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-bad")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        metric = VerdictMetric(model=JUDGE_MODEL, judge_options={"max_retries": 0})
        cases = [EvalTestCase(input=f"q{i}", actual_output=f"a{i}") for i in range(3)]
        with pytest.raises(CredentialsError, match=r"OPENAI_API_KEY.*HTTP 401"):
            evaluate_sync(cases, [metric])


# -- a run cut short by --max-cost fails the gate -----------------------------------------------------------------


def test_budget_that_ran_out_fails_the_gate_with_the_reason(tmp_path: Path, prefect_api_url: str) -> None:
    from chat_server import ChatServer
    from judge_metric import MAX_TOKENS

    # Every answer bills MAX_TOKENS completion tokens at $1,000 per million, prompts free: $0.064 a request, so a
    # $0.1 budget pays for 1 of the 10 cases (one request at a time); the other 9 are skipped. The metric's
    # estimate sees none of its requests (as the later steps of a multi-step metric are approximated), so the
    # run starts and the budget stops it mid-run.
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "unestimated.py").write_text(
        "from judge_metric import PROMPTS, VerdictMetric\n"
        "from evaltasks.judges.prompts import load_template\n\n\n"
        "class UnestimatedVerdict(VerdictMetric):\n"
        "    def template(self, prompt):\n"
        "        return load_template(PROMPTS / 'VerdictMetric' / f'{prompt}.md', prompt)\n\n"
        "    def estimate_requests(self, case):\n"
        "        return []\n", encoding="utf-8")
    suite = _write_suite(tmp_path / "suite", [{"metric": "unestimated:UnestimatedVerdict"}], cases=10, judge={
        "model": JUDGE_MODEL, "max_concurrency": 1, "prices": {JUDGE_MODEL: {"input": 0.0, "output": 1000.0}}})
    with ChatServer(api_key=KEY, responder=_passing) as server:
        env = _env(tmp_path, prefect_api_url, server.base_url)
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "suite"), env["PYTHONPATH"]])
        done = _cli(tmp_path, suite, {**env, "COLUMNS": "200"}, "--max-cost", "0.1")
        sent = len(server.requests)
    assert sent == 1 and MAX_TOKENS * 1000.0 / 1e6 <= 0.1, done.stderr
    assert done.returncode == 1, done.stderr
    reason = "the --max-cost budget ran out: 9 of 10 case × metric results were not judged"
    results = _results(tmp_path)
    assert results["passed"] is False
    assert results["summary"]["budget_skipped"] == 9
    assert (results["summary"]["passed_cases"], results["summary"]["skipped_cases"]) == (1, 9)
    assert reason in results["warnings"]
    summary_md = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    verdict = next(line for line in summary_md.splitlines() if "FAILED" in line)
    assert reason in verdict
    assert reason in done.stderr  # the run's warning on the console

    # the PR comment / job summary the action renders from results.json says the same
    from evaltasks.reports.markdown import render_summary_markdown
    from evaltasks.results import EvaluationSummary

    comment = render_summary_markdown("judged", EvaluationSummary.model_validate(results["summary"]), [],
                                      passed=results["passed"], min_pass_rate=0.5, warnings=results["warnings"])
    verdict = comment.splitlines()[2]
    assert verdict.startswith("❌ **FAILED**: pass rate ") and verdict.endswith(f"({reason})")
    assert "## LLM judges" in comment  # the budget decided the gate: the judges' costs in the open


def test_skips_for_missing_credentials_still_pass_the_gate(tmp_path: Path, prefect_api_url: str) -> None:
    env = {**subprocess_env(tmp_path / "prefect-home", prefect_api_url), "PYTHONPATH": PYTHONPATH}
    env.pop("OPENAI_API_KEY", None)
    env.pop("AZURE_OPENAI_API_KEY", None)
    suite = _write_suite(tmp_path / "suite", [{"metric": "judge_metric:VerdictMetric", "name": "judged"},
                                              {"metric": "LengthCheckMetric", "max_length": 100}],
                         judge={"base_url": "http://127.0.0.1:9/v1"})  # never contacted
    done = _cli(tmp_path, suite, env, "--skip-missing-credentials", "--max-cost", "1")
    assert done.returncode == 0, done.stderr
    results = _results(tmp_path)
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


# -- judge models without a price ---------------------------------------------------------------------------------


def test_unpriced_judge_model_is_a_run_warning_and_max_cost_refuses_it(tmp_path: Path, prefect_api_url: str) -> None:
    from chat_server import ChatServer

    suite = _write_suite(tmp_path / "suite", [{"metric": "judge_metric:VerdictMetric"}], cases=2,
                         judge={"model": "unpriced-model"})
    with ChatServer(api_key=KEY, responder=_passing) as server:
        env = _env(tmp_path, prefect_api_url, server.base_url)
        refused = _cli(tmp_path, suite, env, "--max-cost", "100")
        assert refused.returncode == 2, refused.stderr
        assert ("--max-cost cannot limit judge model unpriced-model: it has no price; add judge: {prices: "
                "{unpriced-model: {input: …, output: …}}}") in refused.stderr
        assert "Traceback" not in refused.stderr and not server.requests  # refused before any request

        done = _cli(tmp_path, suite, env)
        assert done.returncode == 0, done.stderr
        assert len(server.requests) == 2
        # no bare log line: the price warning is the run's own `evaltasks: warning:` line, once
        assert [line for line in done.stderr.splitlines() if "no price" in line] == [
            line for line in done.stderr.splitlines() if line.startswith("evaltasks: warning: no price for judge")]
        assert len([line for line in done.stderr.splitlines() if "no price" in line]) == 1, done.stderr
        no_key = _cli(tmp_path, suite, {k: v for k, v in env.items() if k != "OPENAI_API_KEY"})
        assert no_key.returncode == 2, no_key.stderr
        assert no_key.stderr.startswith("evaltasks: error: missing or rejected credentials"), no_key.stderr
        assert "no price" not in refused.stderr.replace("it has no price", ""), refused.stderr
    warning = ("no price for judge model unpriced-model: its costs count as $0 (undercounted) and --max-cost "
               "cannot limit its spend")
    results = _results(tmp_path)
    assert [w for w in results["warnings"] if w.startswith(warning)] == [results["warnings"][0]]
    summary_md = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "> ⚠️ no price for judge model unpriced\\-model\\: its costs count as \\$0" in summary_md  # markdown-escaped


def test_flow_with_max_cost_refuses_an_unpriced_judge_model(tmp_path: Path, prefect_harness, monkeypatch) -> None:
    from flows.evaluate_suite import evaluate_suite

    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    suite = _write_suite(tmp_path / "suite", [{"metric": "judge_metric:VerdictMetric"}], cases=2,
                         judge={"model": "unpriced-model", "base_url": "http://127.0.0.1:9/v1"})  # never contacted
    with pytest.raises(ValueError, match="--max-cost cannot limit judge model unpriced-model: it has no price"):
        evaluate_suite(suite_path=str(suite), output_dir=str(tmp_path / "out"), index_dir=str(tmp_path / "index"),
                       max_cost=1.0)
    assert not (tmp_path / "out" / "results.json").exists()


# -- problems of the suite's judge: block are located there ---------------------------------------------------------


def test_bad_judge_block_options_are_reported_at_judge_each_once(tmp_path: Path, monkeypatch) -> None:
    from evaltasks.errors import ConfigError
    from evaltasks.inputs.suite import load_suite

    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    path = _write_suite(tmp_path, [{"metric": "judge_metric:VerdictMetric", "name": "a"},
                                   {"metric": "judge_metric:VerdictMetric", "name": "b"}],
                        judge={"tempreature": 0, "prices": {"m": {"input": -1}}, "timeout": 0,
                               "base_url": "http://127.0.0.1:9/v1"})
    with pytest.raises(ConfigError) as caught:
        load_suite(path)
    found = {(p.location, p.field): p.message for p in caught.value.problems}
    assert set(found) == {("judge", "tempreature"), ("judge", "prices"), ("judge", "timeout")}, found
    assert "did you mean 'temperature'?" in found[("judge", "tempreature")]
    assert "['m']['input']" in found[("judge", "prices")]


def test_judge_block_option_the_client_rejects_is_located_at_judge(tmp_path: Path, monkeypatch) -> None:
    from evaltasks.errors import ConfigError
    from evaltasks.inputs.suite import load_suite

    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    # within the schema, refused by the client: a price entry with neither input nor output
    path = _write_suite(tmp_path, [{"metric": "judge_metric:VerdictMetric", "name": "a"},
                                   {"metric": "judge_metric:VerdictMetric", "name": "b"}],
                        judge={"prices": {"m": {}}, "base_url": "http://127.0.0.1:9/v1"})
    with pytest.raises(ConfigError) as caught:
        load_suite(path)
    [problem] = caught.value.problems  # once, not once per metric
    assert (problem.location, problem.field) == ("judge", "prices")


def test_missing_judge_key_is_a_credentials_error_naming_the_variable(tmp_path: Path, prefect_api_url: str) -> None:
    env = {**subprocess_env(tmp_path / "prefect-home", prefect_api_url), "PYTHONPATH": PYTHONPATH}
    env.pop("OPENAI_API_KEY", None)
    env.pop("AZURE_OPENAI_API_KEY", None)
    suite = _write_suite(tmp_path / "suite", [{"metric": "judge_metric:VerdictMetric", "name": "a"},
                                              {"metric": "judge_metric:VerdictMetric", "name": "b"}],
                         judge={"base_url": "http://127.0.0.1:9/v1"})
    done = _cli(tmp_path, suite, env)
    assert done.returncode == 2, done.stderr
    assert "missing or rejected credentials: 1 problem(s)" in done.stderr
    assert "OPENAI_API_KEY" in done.stderr and "judge_options" not in done.stderr and "metrics[" not in done.stderr
