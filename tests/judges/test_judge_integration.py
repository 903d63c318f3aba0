"""Judge metrics in suites, runs, results and reports (docs/judges.md#llm-judges).

The judge metric here is ``tests/judge_metric.py:VerdictMetric`` (one request per case and sample, score = the
judge's ``score``), answered by a ``judge=`` function (the Python API's hook) or, in suites, by its offline rule
judge behind the run's answer store and budget. Runs use the real Prefect engine (``prefect_harness``) and the
real CLI in a subprocess; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import threading
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rich.console import Console

from evaltasks import EvalTestCase
from evaltasks.engine.evaluate import evaluate_sync
from evaltasks.engine.lifecycle import RunReport
from evaltasks.errors import ConfigError, CredentialsError
from evaltasks.inputs.suite import load_suite, metric_arguments_schema, suite_json_schema
from evaltasks.reports import ReportWriter
from evaltasks.reports.console import print_summary
from tests.cli_forkserver import run_cli
from tests.judge_metric import VerdictMetric
from tests.judge_runs import run_judged_cli
from tests.process_env import subprocess_env

TESTS = Path(__file__).resolve().parents[1]
PYTHONPATH = os.pathsep.join([str(TESTS), str(TESTS.parent)])  # judge_metric, and this checkout's evaltasks
CLI_TIMEOUT = 600


def _write_suite(
    folder: Path,
    metrics: list[dict[str, Any]],
    judge: dict[str, Any] | None = None,
    cases: list[dict[str, Any]] | None = None,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cases = (
        cases
        if cases is not None
        else [
            {"input": f"question {i}", "actual_output": "a correct answer" if i % 2 == 0 else "a wrong answer"}
            for i in range(6)
        ]
    )
    (folder / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    suite: dict[str, Any] = {"name": "judged", "dataset": {"path": "cases.jsonl"}, "metrics": metrics}
    if judge is not None:
        suite["judge"] = judge
    path = folder / "suite.yaml"
    path.write_text(json.dumps(suite), encoding="utf-8")  # JSON is YAML
    return path


@pytest.fixture(autouse=True)
def _api_key(monkeypatch) -> None:
    """A key for the OpenAI judge client (constructed, never used, by suites whose metric answers offline)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


# -- the suite file ------------------------------------------------------------------------------------------


def test_judge_block_gives_defaults_that_a_metric_overrides(tmp_path: Path) -> None:
    path = _write_suite(
        tmp_path,
        [
            {"metric": "judge_metric:VerdictMetric", "name": "defaults"},
            {
                "metric": "judge_metric:VerdictMetric",
                "name": "own",
                "model": "m-own",
                "samples": 1,
                "judge_options": {"temperature": 0.7, "timeout": 5},
            },
        ],
        judge={
            "model": "m-suite",
            "samples": 3,
            "temperature": 0.2,
            "max_concurrency": 4,
            "base_url": "http://127.0.0.1:9/v1",
        },
    )
    defaults, own = load_suite(path).metrics
    assert (defaults.model, defaults.samples) == ("m-suite", 3)
    assert defaults.judge_options == {"temperature": 0.2, "max_concurrency": 4, "base_url": "http://127.0.0.1:9/v1"}
    assert (own.model, own.samples) == ("m-own", 1)
    assert own.judge_options == {
        "temperature": 0.7,
        "max_concurrency": 4,
        "base_url": "http://127.0.0.1:9/v1",
        "timeout": 5,
    }
    assert defaults.cache_key() != own.cache_key()


@pytest.mark.parametrize("where", ["judge", "judge_options"])
def test_api_key_in_a_suite_file_is_refused(tmp_path: Path, where: str) -> None:
    metric: dict[str, Any] = {"metric": "judge_metric:VerdictMetric"}
    judge = None
    if where == "judge":
        judge = {"api_key": "sk-committed"}
    else:
        metric["judge_options"] = {"api_key": "sk-committed"}
    with pytest.raises(ConfigError) as caught:
        load_suite(_write_suite(tmp_path, [metric], judge=judge))
    [problem] = caught.value.problems
    assert (problem.location, problem.field) == (("", "judge") if where == "judge" else ("metrics[0]", "judge_options"))
    assert "OPENAI_API_KEY" in problem.message and "sk-committed" not in str(caught.value)


def test_prompt_files_are_relative_to_the_suite_and_a_missing_one_is_located(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "evals"
    (folder / "prompts").mkdir(parents=True)
    template = folder / "prompts" / "strict.md"
    template.write_text(
        "### system\nBe strict: {{ criteria }}\n### user\n{{ input }} -> {{ actual_output }}\n", encoding="utf-8"
    )
    path = _write_suite(folder, [{"metric": "judge_metric:VerdictMetric", "prompts": {"verdict": "prompts/strict.md"}}])
    monkeypatch.chdir(tmp_path)  # not the suite's folder
    [metric] = load_suite(path).metrics
    assert metric.template("verdict").source == str(template.resolve())
    assert metric.template("verdict").system == "Be strict: {{ criteria }}"
    key = metric.cache_key()
    template.write_text(
        "### system\nBe lenient: {{ criteria }}\n### user\n{{ input }} -> {{ actual_output }}\n", encoding="utf-8"
    )
    assert load_suite(path).metrics[0].cache_key() != key  # an edited template is a new cache key

    path = _write_suite(folder, [{"metric": "judge_metric:VerdictMetric", "prompts": {"verdict": "prompts/gone.md"}}])
    with pytest.raises(ConfigError) as caught:
        load_suite(path)
    [problem] = caught.value.problems
    assert (problem.location, problem.field) == ("metrics[0]", "prompts")
    assert "verdict: prompt file not found: 'prompts/gone.md'" in problem.message


@pytest.mark.slow
def test_schema_describes_the_judge_block_and_judge_metric_arguments() -> None:
    schema = suite_json_schema()
    block = schema["$defs"]["JudgeBlock"]
    assert {
        "model",
        "samples",
        "base_url",
        "temperature",
        "max_concurrency",
        "prices",
        "structured_outputs",
        "requests_per_minute",
        "tokens_per_minute",
        "timeout",
        "max_retries",
        "azure_endpoint",
    } <= set(block["properties"])
    arguments = metric_arguments_schema(VerdictMetric)["properties"]
    assert arguments["samples"]["minimum"] == 1
    assert "base_url" in arguments["judge_options"]["properties"]
    assert arguments["prompts"]["additionalProperties"] == {"type": "string"}
    suite = {
        "name": "s",
        "dataset": {"path": "d.csv"},
        "metrics": [{"metric": "ExactMatchMetric"}],
        "judge": {"model": "llama3.2", "base_url": "http://127.0.0.1:11434/v1", "samples": 3},
    }
    jsonschema.validate(suite, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**suite, "judge": {"api_key": "sk-x"}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**suite, "judge": {"samples": 0}}, schema)
    shipped = json.loads((TESTS.parent / "evaltasks" / "schema" / "suite.schema.json").read_text(encoding="utf-8"))
    assert shipped["$defs"]["JudgeBlock"] == block


# -- the Python API: judge= hook, store, accounting, unstable cases -------------------------------------------


class ScriptedJudge:
    """A judge= function that answers each case's samples from a script, keyed by the question, and counts calls."""

    def __init__(self, script: dict[str, list[float]]) -> None:
        self.script, self.calls, self.lock = script, {}, threading.Lock()

    def __call__(self, messages: list[dict[str, str]]) -> str:
        question = messages[-1]["content"].split("\n")[0].removeprefix("Question: ")
        with self.lock:
            n = self.calls[question] = self.calls.get(question, 0) + 1
        return json.dumps({"score": self.script[question][(n - 1) % len(self.script[question])], "reason": "r"})


def _judged_run(tmp_path: Path) -> tuple[Any, ScriptedJudge, list[str]]:
    judge = ScriptedJudge({"steady": [0.8, 0.8], "split": [0.9, 0.1], "low": [0.2, 0.3], "broken": [2.0]})
    cases = [EvalTestCase(input=q, actual_output="a") for q in ("steady", "split", "low", "broken")]
    ids = ["c-steady", "c-split", "c-low", "c-broken"]
    metric = VerdictMetric(0.5, samples=2, judge_options={"max_concurrency": 1})  # samples in order
    result = evaluate_sync(cases, [metric], judge=judge, index_dir=tmp_path / "index", ids=ids)
    assert metric.judge_runtime.store_dir == tmp_path / "index" / "judgements"
    assert metric.judge_runtime.refresh is False
    return result, judge, ids


def test_judge_hook_scores_and_the_summary_accounts_for_judges(tmp_path: Path) -> None:
    result, judge, _ = _judged_run(tmp_path)
    assert judge.calls == {"steady": 2, "split": 2, "low": 2, "broken": 2}
    by_id = {c.id: c.metrics[0] for c in result.test_results}
    assert by_id["c-steady"].score == pytest.approx(0.8) and by_id["c-steady"].evaluation_log["unstable"] is False
    assert by_id["c-split"].score == pytest.approx(0.5) and by_id["c-split"].evaluation_log["unstable"] is True
    assert by_id["c-low"].score == pytest.approx(0.25) and by_id["c-low"].status == "failed"
    assert (
        by_id["c-broken"].status == "errored"
        and "JudgeError: the judge's answer does not match the schema" in by_id["c-broken"].reason
    )
    account = result.summary.judges["VerdictMetric"]
    # 4 cases x 2 samples, each one call of the function: the errored case's unparsable answers count too
    assert (account.requests, account.reused) == (8, 0) == (sum(judge.calls.values()), 0)
    assert (account.unstable, account.unstable_cases) == (1, ["c-split"])
    assert account.model.startswith("function:")
    assert result.summary.judge_total.requests == account.requests
    assert result.summary.judge_total.unstable_cases == ["c-split"]


def test_reports_show_judges_and_unstable_cases(tmp_path: Path) -> None:
    result, _, _ = _judged_run(tmp_path)
    out = tmp_path / "out"
    with ReportWriter(out, "judged", {"VerdictMetric": 0.5}) as writer:
        writer.add(result.test_results)
        summary = writer.summarize()
        report = RunReport.of_results({"suite": "judged"}, summary, passed=False, min_pass_rate=1.0)
        writer.write_results({"suite": "judged"}, report, duration_s=1.0)
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert data["summary"]["judges"]["VerdictMetric"]["unstable_cases"] == ["c-split"]
    assert data["summary"]["judge_total"]["requests"] == result.summary.judge_total.requests
    split = next(c for c in data["cases"] if c["id"] == "c-split")
    assert split["metrics"][0]["evaluation_log"]["unstable"] is True

    markdown = (out / "summary.md").read_text(encoding="utf-8")
    assert "<details><summary>LLM judges: requests, tokens and cost</summary>" in markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| VerdictMetric | function"))
    assert row.endswith("| 8<br>0 reused | 0 in<br>0 out | $0.0000 | 1 |")
    assert "Unstable in VerdictMetric: c\\-split." in markdown  # ids escaped as all model text is

    tree = ET.parse(out / "junit.xml")
    props = {
        tc.get("name"): {p.get("name"): p.get("value") for p in tc.iter("property")} for tc in tree.iter("testcase")
    }
    assert props["c-split :: VerdictMetric"] == {"unstable": "true", "score_stdev": "0.565685", "samples": "0.9 0.1"}
    assert props["c-steady :: VerdictMetric"] == {}

    console = Console(record=True, width=200)
    print_summary(result.summary, console=console)
    text = console.export_text()
    assert (
        "judge VerdictMetric (function:test_judge_integration.ScriptedJudge): 8 requests, 0 reused from the "
        "store, tokens 0 in / 0 out, $0.0000, 1 unstable" in text
    )


def test_pr_comment_shows_the_judges_table(tmp_path: Path) -> None:
    from evaltasks.reports.markdown import render_summary_markdown

    result, _, _ = _judged_run(tmp_path)
    text = render_summary_markdown(
        "judged", result.summary, result.test_results, passed=False, min_pass_rate=1.0, max_size=4000
    )
    assert "<summary>LLM judges: requests, tokens and cost</summary>" in text
    assert "Unstable in VerdictMetric: c\\-split." in text


# -- suite runs through the flow and the CLI --------------------------------------------------------------------


_cli = run_judged_cli  # `evaltasks run SUITE --output-dir --index-dir --quiet` in a subprocess


def _judge_log(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def test_cli_run_caches_judgements_and_no_cache_sends_again(tmp_path: Path, prefect_api_url: str) -> None:
    suite = _write_suite(
        tmp_path / "suite",
        [{"metric": "judge_metric:VerdictMetric", "offline": True, "threshold": 0.5}],
        judge={"model": "rule-model"},
    )
    log = tmp_path / "judge.log"
    env = {
        **subprocess_env(tmp_path / "prefect-home", prefect_api_url),
        "PYTHONPATH": PYTHONPATH,
        "EVALTASKS_TEST_JUDGE_LOG": str(log),
    }
    first = _cli(tmp_path, suite, env)
    assert first.returncode == 1, first.stderr  # 3 of 6 answers lack "correct": the gate (100 %) fails
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert _judge_log(log) == 6
    assert results["summary"]["metrics"]["VerdictMetric"]["passed"] == 3
    assert results["summary"]["judges"]["VerdictMetric"]["requests"] == 6
    assert results["summary"]["judge_total"]["requests"] == 6

    second = _cli(tmp_path, suite, env)
    assert second.returncode == 1, second.stderr
    assert _judge_log(log) == 6  # an unchanged re-run sends no judge request
    again = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert again["summary"]["judges"]["VerdictMetric"]["requests"] == 0
    assert again["summary"]["judges"]["VerdictMetric"]["reused"] == 6
    assert again["summary"]["metrics"] == results["summary"]["metrics"]

    fresh = _cli(tmp_path, suite, env, "--no-cache")
    assert fresh.returncode == 1, fresh.stderr
    assert _judge_log(log) == 12  # --no-cache: every request is sent again
    assert (
        json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["summary"]["judges"][
            "VerdictMetric"
        ]["requests"]
        == 6
    )


def test_flow_binds_the_store_beside_the_index_and_the_no_cache_flag(
    tmp_path: Path, prefect_harness, monkeypatch
) -> None:
    from prefect import flow

    from evaltasks.engine.run import RunOptions
    from flows.evaluate_suite import run_suite

    suite = _write_suite(tmp_path / "suite", [{"metric": "judge_metric:VerdictMetric", "offline": True}])
    seen: dict[str, Any] = {}

    @flow(name="judge-binding")
    def probe(cache: bool) -> None:
        outcome = run_suite(
            str(suite), RunOptions(output_dir=str(tmp_path / "out"), index_dir=str(tmp_path / "idx"), cache=cache)
        )
        seen["outcome"] = outcome

    import flows.evaluate_suite as flow_module

    original = flow_module.plan_run
    plans: list[Any] = []

    def keep_plan(*args: Any, **kwargs: Any) -> Any:  # the real plan_run, keeping its plan to look at the metrics
        plans.append(original(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(flow_module, "plan_run", keep_plan)
    monkeypatch.syspath_prepend(str(TESTS))
    probe(cache=False)
    [metric] = plans[0].suite.metrics
    assert metric.judge_runtime.store_dir == tmp_path / "idx" / "judgements"
    assert metric.judge_runtime.refresh is True
    assert seen["outcome"].result.summary.judges["VerdictMetric"].requests == 6


# -- the example suite against the loopback chat server (real openai SDK, real CLI) ----------------------------

EXAMPLE = TESTS.parent / "examples" / "judge"
EXAMPLE_METRICS = ("GEvalMetric", "FaithfulnessMetric", "AnswerRelevancyMetric")
JUDGE_MODEL = "judge-model"
KEY = "sk-test-chat-server"


def plausible(schema: dict[str, Any]) -> Any:
    """A value satisfying the answer schema a judge request carries: the first enum value (the highest of
    integers: the best score), the maximum of a number, one item per list, every property of an object."""
    if "enum" in schema:
        return max(schema["enum"]) if all(isinstance(v, int) for v in schema["enum"]) else schema["enum"][0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        return {name: plausible(sub) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [plausible(schema.get("items", {})) for _ in range(max(1, schema.get("minItems", 1)))]
    if kind in ("number", "integer"):
        return schema.get("maximum", 1)
    if kind == "boolean":
        return True
    return "a plausible statement"


def answer_plausibly(request: Any) -> Any:
    """The chat server's responder: JSON satisfying the request's ``response_format`` schema (a score token
    for a GEval request without one)."""
    from tests.chat_server import Answer

    response_format = request.body.get("response_format") or {}
    schema = (response_format.get("json_schema") or {}).get("schema")
    text = json.dumps(plausible(schema)) if schema else "10"
    return Answer(text=text, completion_tokens=None)


def _example_suite(folder: Path, judge: dict[str, Any]) -> Path:
    """The example suite, copied to ``folder`` with its judge block replaced."""
    import shutil

    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE / "answers.jsonl", folder / "answers.jsonl")
    suite = yaml.safe_load((EXAMPLE / "suite.yaml").read_text(encoding="utf-8"))
    suite["judge"] = judge
    assert [m["metric"] for m in suite["metrics"]] == list(EXAMPLE_METRICS)
    (folder / "suite.yaml").write_text(yaml.safe_dump(suite, sort_keys=False), encoding="utf-8")
    return folder / "suite.yaml"


def _results(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))


def test_example_suite_through_the_cli_against_a_chat_server(tmp_path: Path, prefect_api_url: str) -> None:
    from tests.chat_server import ChatServer

    prices = {JUDGE_MODEL: {"input": 1.0, "output": 2.0}}
    suite = _example_suite(
        tmp_path / "suite",
        {"model": JUDGE_MODEL, "max_concurrency": 4, "prices": prices, "structured_outputs": "json_schema"},
    )  # the responder reads it
    with ChatServer(api_key=KEY, responder=answer_plausibly) as server:
        env = {
            **subprocess_env(tmp_path / "prefect-home", prefect_api_url),
            "PYTHONPATH": PYTHONPATH,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": KEY,
        }
        refused = _cli(tmp_path, suite, env, "--max-cost", "0.0000001")
        assert refused.returncode == 2, refused.stderr
        assert "above --max-cost" in refused.stderr and not server.requests  # refused before any request

        first = _cli(tmp_path, suite, env)
        assert first.returncode in (0, 1), first.stderr  # the gate's verdict on these scripted answers: either
        sent = len(server.requests)
        results = _results(tmp_path)
        assert results["passed"] is (first.returncode == 0)
        judges = results["summary"]["judges"]
        assert list(judges) == ["Correctness", "FaithfulnessMetric", "AnswerRelevancyMetric"]
        assert sum(j["requests"] for j in judges.values()) == sent == results["summary"]["judge_total"]["requests"]
        assert all(j["requests"] >= 10 and j["model"] == JUDGE_MODEL for j in judges.values())
        prompt_tokens, completion_tokens = server.billed
        assert results["summary"]["judge_total"]["prompt_tokens"] == prompt_tokens
        assert results["summary"]["judge_total"]["completion_tokens"] == completion_tokens
        assert results["summary"]["judge_total"]["cost"] == pytest.approx(
            (prompt_tokens * 1.0 + completion_tokens * 2.0) / 1e6, rel=1e-9
        )
        assert results["summary"]["evaluation_cost"] == pytest.approx(results["summary"]["judge_total"]["cost"])
        assert all(m["status"] in ("passed", "failed") for case in results["cases"] for m in case["metrics"])

        again = _cli(tmp_path, suite, env, "--max-cost", "0.0000001")  # stored answers cost nothing
        assert again.returncode == first.returncode, again.stderr
        assert len(server.requests) == sent  # an unchanged re-run sends no judge request
        assert _results(tmp_path)["summary"]["judge_total"]["requests"] == 0

        fresh = _cli(tmp_path, suite, env, "--no-cache")
        assert fresh.returncode == first.returncode, fresh.stderr
        assert len(server.requests) == 2 * sent  # --no-cache sends every request again
        assert _results(tmp_path)["summary"]["judge_total"]["requests"] == sent


@pytest.mark.parametrize("runner", ["threads", "processes:2"])
def test_budget_stops_sending_mid_run_and_skips_the_rest(
    tmp_path: Path, prefect_harness, monkeypatch, runner: str
) -> None:
    from evaltasks.errors import GateFailed
    from flows.evaluate_suite import evaluate_suite, make_task_runner
    from tests.chat_server import Answer, ChatServer
    from tests.judge_metric import MAX_TOKENS

    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", str(TESTS))  # the worker processes import judge_metric too
    # Every answer bills exactly MAX_TOKENS completion tokens at $1,000 per million and prompts are free: each
    # request costs (and reserves) exactly $0.064, so a $0.3 budget holds 4 of the 6 cases' requests.
    per_request = MAX_TOKENS * 1000.0 / 1e6
    suite = _write_suite(
        tmp_path / "suite",
        [{"metric": "judge_metric:VerdictMetric", "threshold": 0.5}],
        judge={"model": JUDGE_MODEL, "max_concurrency": 3, "prices": {JUDGE_MODEL: {"input": 0.0, "output": 1000.0}}},
    )
    with ChatServer(
        api_key=KEY,
        responder=lambda request: Answer(text='{"score": 1, "reason": "fine"}', completion_tokens=MAX_TOKENS),
    ) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        # batches of 2 cases: with processes, the 3 batches' requests come from 2 worker processes at once
        # a budget-cut run fails its gate: the flow run ends Failed and a direct call raises GateFailed
        with pytest.raises(GateFailed, match="the --max-cost budget ran out") as failed:
            evaluate_suite.with_options(task_runner=make_task_runner(runner))(
                suite_path=str(suite),
                output_dir=str(tmp_path / "out"),
                index_dir=str(tmp_path / "index"),
                batch_size=2,
                cache=False,
                max_cost=0.3,
            )
        summary = failed.value.result
    assert len(server.requests) == 4
    results = _results(tmp_path)
    statuses = [case["metrics"][0]["status"] for case in results["cases"]]
    assert sorted(statuses) == ["passed"] * 4 + ["skipped"] * 2
    skipped = [case["metrics"][0]["reason"] for case in results["cases"] if case["metrics"][0]["status"] == "skipped"]
    assert all(reason.startswith("skipped: ") and "budget" in reason for reason in skipped)
    spent = results["summary"]["judge_total"]["cost"]
    assert spent == pytest.approx(4 * per_request) and spent <= 0.3
    assert summary["summary"]["skipped_cases"] == 2
    assert not list((tmp_path / "index" / "judgements" / "budgets").iterdir())  # the run's ledger is removed


def test_judge_without_a_key_is_a_credentials_problem_or_skipped(tmp_path: Path, monkeypatch) -> None:
    from evaltasks.metrics.base import SkippedMetric

    for name in ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    path = _write_suite(
        tmp_path,
        [{"metric": "judge_metric:VerdictMetric", "name": "judged"}],
        judge={"base_url": "http://127.0.0.1:9/v1"},
    )  # never contacted
    with pytest.raises(CredentialsError) as caught:  # a credentials problem, not a field of the suite file
        load_suite(path)
    [problem] = caught.value.problems
    assert (problem.location, problem.field) == ("", "")
    assert "OPENAI_API_KEY" in problem.message
    loaded = load_suite(path, skip_missing_credentials=True)
    assert isinstance(loaded.metrics[0], SkippedMetric) and loaded.metrics[0].name == "judged"
    assert loaded.warnings and "metrics[0] judged is skipped" in loaded.warnings[0]


def test_a_new_index_dir_served_by_prefects_task_cache_costs_nothing_and_says_so(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """docs/judges.md#llm-judges: a run with a new ``--index-dir`` in a Prefect home that scored the suite before is
    served by Prefect's task cache (its answer store is never read): ``--max-cost`` lets it start (it costs
    nothing), and the console and results.json say where the answers came from."""
    from tests.chat_server import ChatServer

    suite = _write_suite(
        tmp_path / "suite",
        [{"metric": "judge_metric:VerdictMetric", "threshold": 0.5}],
        judge={"model": "gpt-4o-mini"},
        cases=[{"input": f"question {i}", "actual_output": "an answer"} for i in range(6)],
    )
    with ChatServer(api_key=KEY, responder=lambda r: json.dumps({"score": 1, "reason": "ok"})) as server:
        env = {
            **subprocess_env(tmp_path / "prefect-home", prefect_api_url),
            "PYTHONPATH": PYTHONPATH,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": KEY,
            "COLUMNS": "200",
        }
        first = _cli(tmp_path, suite, env)
        assert first.returncode == 0, first.stderr
        sent = len(server.requests)
        assert sent == 6
        args = ["run", str(suite), "--output-dir", str(tmp_path / "out"), "--index-dir", str(tmp_path / "new-index")]
        second = run_cli(*args, "--max-cost", "0.0000001", env=env, cwd=tmp_path, timeout=CLI_TIMEOUT)
        assert second.returncode == 0, second.stderr
        assert len(server.requests) == sent  # nothing sent: the results came from Prefect's task cache
    judges = _results(tmp_path)["summary"]["judges"]["VerdictMetric"]
    assert (judges["requests"], judges["reused"], judges["task_cached"], judges["cost"]) == (0, 6, 6, 0.0)
    assert (
        "judge VerdictMetric (gpt-4o-mini): 0 requests, 0 reused from the store, 6 from Prefect's task cache"
        in second.stdout
    )
    assert not list((tmp_path / "new-index").rglob("*.json"))  # the new store was never written (nor read)
