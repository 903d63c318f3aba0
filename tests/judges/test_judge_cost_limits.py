"""Judge costs within limits (docs/judges.md#llm-judges): a run cut short by ``--max-cost`` fails the gate with the
reason, a request whose worst case does not fit is skipped, and a judge model without a price is a warning that
``--max-cost`` refuses.

The judge is ``tests/judge_metric.py:VerdictMetric`` answered by the loopback chat server (tests/chat_server.py)
through the real openai SDK; runs use the real CLI in a subprocess and the real Prefect engine. Nothing is mocked.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evaltasks import BiasMetric
from evaltasks.judges.budget import Budget
from tests.chat_server import ChatServer
from tests.judge_helpers import as_json, case, score_with, server_options
from tests.judge_runs import (
    JUDGE_MODEL,
    KEY,
    TESTS,
    judge_env,
    passing_answer,
    read_results,
    run_judged_cli,
    write_suite,
)

BIAS_CASE = case(input="Describe the team.", actual_output="The team shipped on time.")


# -- a run cut short by --max-cost fails the gate -----------------------------------------------------------------
def test_budget_that_ran_out_fails_the_gate_with_the_reason(tmp_path: Path, prefect_api_url: str) -> None:
    from tests.chat_server import ChatServer
    from tests.judge_metric import MAX_TOKENS

    # Every answer bills MAX_TOKENS completion tokens at $1,000 per million, prompts free: $0.064 a request, so a
    # $0.1 budget pays for 1 of the 10 cases (one request at a time); the other 9 are skipped. The metric's
    # estimate sees none of its requests (as the later steps of a multi-step metric are approximated), so the
    # run starts and the budget stops it mid-run.
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "unestimated.py").write_text(
        "from tests.judge_metric import PROMPTS, VerdictMetric\n"
        "from evaltasks.judges.prompts import load_template\n\n\n"
        "class UnestimatedVerdict(VerdictMetric):\n"
        "    def template(self, prompt):\n"
        "        return load_template(PROMPTS / 'VerdictMetric' / f'{prompt}.md', prompt)\n\n"
        "    def estimate_requests(self, case):\n"
        "        return []\n",
        encoding="utf-8",
    )
    suite = write_suite(
        tmp_path / "suite",
        [{"metric": "unestimated:UnestimatedVerdict"}],
        cases=10,
        judge={"model": JUDGE_MODEL, "max_concurrency": 1, "prices": {JUDGE_MODEL: {"input": 0.0, "output": 1000.0}}},
    )
    with ChatServer(api_key=KEY, responder=passing_answer) as server:
        env = judge_env(tmp_path, prefect_api_url, server.base_url)
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "suite"), env["PYTHONPATH"]])
        done = run_judged_cli(tmp_path, suite, {**env, "COLUMNS": "200"}, "--max-cost", "0.1")
        sent = len(server.requests)
    assert sent == 1 and MAX_TOKENS * 1000.0 / 1e6 <= 0.1, done.stderr
    assert done.returncode == 1, done.stderr
    reason = "the --max-cost budget ran out: 9 of 10 case × metric results were not judged"
    results = read_results(tmp_path)
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

    comment = render_summary_markdown(
        "judged",
        EvaluationSummary.model_validate(results["summary"]),
        [],
        passed=results["passed"],
        min_pass_rate=0.5,
        warnings=results["warnings"],
    )
    verdict = comment.splitlines()[2]
    assert verdict.startswith("❌ **FAILED**: pass rate ") and verdict.endswith(f"({reason})")
    assert "## LLM judges" in comment  # the budget decided the gate: the judges' costs in the open


# -- a request whose worst case does not fit ----------------------------------------------------------------------
def test_a_budget_stop_says_the_next_worst_case_does_not_fit() -> None:
    with ChatServer() as server:
        server.answers.append(as_json({"score": 0.9, "reason": "ok"}))
        # worst case 832 + 400 tokens at $1,400 per million: $1.72, within the $2 limit, not in the $1.50 left
        options = server_options(server, prices={"gpt-4o-mini": {"input": 1400.0, "output": 1400.0}})
        budget = Budget(2.0)
        budget.add_spent(0.5)
        [result] = score_with(BiasMetric(judge_options=options), [BIAS_CASE], budget=budget)
    assert result.status == "skipped" and not server.requests
    assert result.reason.startswith("skipped: the next request's worst case $")
    assert (
        "does not fit in the $1.5000 left of the run's --max-cost budget of $2.0000 ($0.5000 spent so far)"
        in result.reason
    )


# -- judge models without a price ---------------------------------------------------------------------------------
def test_unpriced_judge_model_is_a_run_warning_and_max_cost_refuses_it(tmp_path: Path, prefect_api_url: str) -> None:
    from tests.chat_server import ChatServer

    suite = write_suite(
        tmp_path / "suite", [{"metric": "judge_metric:VerdictMetric"}], cases=2, judge={"model": "unpriced-model"}
    )
    with ChatServer(api_key=KEY, responder=passing_answer) as server:
        env = judge_env(tmp_path, prefect_api_url, server.base_url)
        refused = run_judged_cli(tmp_path, suite, env, "--max-cost", "100")
        assert refused.returncode == 2, refused.stderr
        assert (
            "--max-cost cannot limit judge model unpriced-model: it has no price; add judge: {prices: "
            "{unpriced-model: {input: …, output: …}}}"
        ) in refused.stderr
        assert "Traceback" not in refused.stderr and not server.requests  # refused before any request

        done = run_judged_cli(tmp_path, suite, env)
        assert done.returncode == 0, done.stderr
        assert len(server.requests) == 2
        # no bare log line: the price warning is the run's own `evaltasks: warning:` line, once
        assert [line for line in done.stderr.splitlines() if "no price" in line] == [
            line for line in done.stderr.splitlines() if line.startswith("evaltasks: warning: no price for judge")
        ]
        assert len([line for line in done.stderr.splitlines() if "no price" in line]) == 1, done.stderr
        no_key = run_judged_cli(tmp_path, suite, {k: v for k, v in env.items() if k != "OPENAI_API_KEY"})
        assert no_key.returncode == 2, no_key.stderr
        assert no_key.stderr.startswith("evaltasks: error: missing or rejected credentials"), no_key.stderr
        assert "no price" not in refused.stderr.replace("it has no price", ""), refused.stderr
    warning = (
        "no price for judge model unpriced-model: its costs count as $0 (undercounted) and --max-cost "
        "cannot limit its spend"
    )
    results = read_results(tmp_path)
    assert [w for w in results["warnings"] if w.startswith(warning)] == [results["warnings"][0]]
    summary_md = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "> ⚠️ no price for judge model unpriced\\-model\\: its costs count as \\$0" in summary_md  # markdown-escaped


def test_flow_with_max_cost_refuses_an_unpriced_judge_model(tmp_path: Path, prefect_harness, monkeypatch) -> None:
    from flows.evaluate_suite import evaluate_suite

    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    suite = write_suite(
        tmp_path / "suite",
        [{"metric": "judge_metric:VerdictMetric"}],
        cases=2,
        judge={"model": "unpriced-model", "base_url": "http://127.0.0.1:9/v1"},
    )  # never contacted
    with pytest.raises(ValueError, match="--max-cost cannot limit judge model unpriced-model: it has no price"):
        evaluate_suite(
            suite_path=str(suite), output_dir=str(tmp_path / "out"), index_dir=str(tmp_path / "index"), max_cost=1.0
        )
    assert not (tmp_path / "out" / "results.json").exists()
