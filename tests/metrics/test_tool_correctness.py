"""ToolCorrectnessMetric (eval-ai-library's Tool Correctness page, library.eval-ai.com/agent-metrics/
tool-correctness; docs/metrics/deterministic.md#toolcorrectnessmetric). Expected scores are worked out by hand below."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path

import pytest

from evaltasks import EvalTestCase, ToolCorrectnessMetric, evaluate_sync
from evaltasks.agent_metrics import ToolCorrectnessMetric as AgentAlias
from evaltasks.engine.run import plan_run
from evaltasks.errors import ConfigError, DatasetError
from evaltasks.inputs.suite import load_suite
from evaltasks.metrics import METRICS
from tests.cli_forkserver import run_cli
from tests.process_env import subprocess_env

# The docs page's example.
CALLED = ["search_hotels", "sort_by_price", "book_hotel"]
EXPECTED = ["search_hotels", "book_hotel"]


def run(metric: ToolCorrectnessMetric, called: list[str] | None, expected: list[str] | None):
    case = EvalTestCase(actual_output="done", tools_called=called, expected_tools=expected)
    return asyncio.run(metric.evaluate(case))


def test_defaults_as_the_docs_page() -> None:
    metric = ToolCorrectnessMetric()
    assert (metric.threshold, metric.exact_match, metric.check_ordering, metric.name) == (
        0.5,
        False,
        False,
        "ToolCorrectnessMetric",
    )
    assert metric.config() == {
        "threshold": 0.5,
        "name": "ToolCorrectnessMetric",
        "exact_match": False,
        "check_ordering": False,
        "match_arguments": False,
    }
    assert METRICS["ToolCorrectnessMetric"] is ToolCorrectnessMetric is AgentAlias


def test_docs_page_example() -> None:
    test_case = EvalTestCase(
        input="Search for hotels in Paris and book the cheapest one.",
        actual_output="I found and booked Hotel Le Marais for $120/night.",
        tools_called=CALLED,
        expected_tools=EXPECTED,
    )
    passes = asyncio.run(ToolCorrectnessMetric(threshold=0.5).evaluate(test_case))  # all expected tools called
    assert (passes.score, passes.success) == (1.0, True)
    assert passes.evaluation_log == {
        "mode": "default",
        "tools_called": CALLED,
        "expected_tools": EXPECTED,
        "matched": 2,
        "missing": [],
    }
    exact = asyncio.run(ToolCorrectnessMetric(threshold=0.5, exact_match=True).evaluate(test_case))  # extra call
    assert (exact.score, exact.success) == (0.0, False)
    assert "sort_by_price" in exact.reason
    ordered = asyncio.run(ToolCorrectnessMetric(check_ordering=True).evaluate(test_case))  # in order, one extra
    assert (ordered.score, ordered.evaluation_log["matched"]) == (1.0, 2)


@pytest.mark.parametrize(
    ("called", "expected", "score", "missing"),
    [
        (["a", "b"], ["a", "b", "c", "d"], 0.5, ["c", "d"]),
        (["b", "a"], ["a", "b"], 1.0, []),  # order does not matter
        (["a"], ["a", "a"], 0.5, ["a"]),  # multiset: one call matches one expectation
        (["a", "a", "a"], ["a", "a"], 1.0, []),  # extra calls are not penalised
        (["x", "y"], ["a"], 0.0, ["a"]),
        ([], ["a", "b", "c"], 0.0, ["a", "b", "c"]),
        (None, ["a", "b", "c"], 0.0, ["a", "b", "c"]),  # tools_called None counts as []
        (["A"], ["a"], 0.0, ["a"]),  # names compare exactly
        (["x"], [], 1.0, []),  # no tool expected
        ([], [], 1.0, []),
    ],
)
def test_default_mode_is_the_share_of_expected_calls_made(called, expected, score, missing) -> None:
    result = run(ToolCorrectnessMetric(), called, expected)
    assert result.score == score
    assert result.evaluation_log["missing"] == missing
    assert result.evaluation_log["matched"] == len(expected) - len(missing)
    assert result.success is (score >= 0.5)


@pytest.mark.parametrize(
    ("called", "expected", "score"),
    [
        (["a", "b"], ["a", "b"], 1.0),
        (["b", "a"], ["a", "b"], 0.0),  # same set, wrong order
        (["a", "b", "b"], ["a", "b"], 0.0),  # an extra call
        (["a"], ["a", "b"], 0.0),  # a missing call
        ([], [], 1.0),  # no tool expected, none called
        (None, [], 1.0),
        (["a"], [], 0.0),  # no tool expected, one called
    ],
)
def test_exact_match_requires_the_same_calls_in_order(called, expected, score) -> None:
    assert run(ToolCorrectnessMetric(exact_match=True), called, expected).score == score
    # exact_match wins over check_ordering, as in eval-ai-library
    assert run(ToolCorrectnessMetric(exact_match=True, check_ordering=True), called, expected).score == score


@pytest.mark.parametrize(
    ("called", "expected", "lcs"),
    [
        (["a", "b", "c"], ["a", "b", "c"], 3),
        (["c", "b", "a"], ["a", "b", "c"], 1),
        (["a", "x", "c", "b"], ["a", "b", "c"], 2),  # a-c or a-b
        (["b", "a", "c", "d"], ["a", "b", "c", "d"], 3),  # a-c-d or b-c-d
        (["a", "a"], ["a", "a", "a"], 2),
        ([], ["a", "b"], 0),
        (["x"], [], 0),  # nothing expected: 1.0
    ],
)
def test_check_ordering_is_longest_common_subsequence_over_expected(called, expected, lcs) -> None:
    result = run(ToolCorrectnessMetric(check_ordering=True), called, expected)
    assert result.evaluation_log["matched"] == lcs
    assert result.score == (lcs / len(expected) if expected else 1.0)


def test_lcs_matches_brute_force() -> None:
    """The one-row LCS against every subsequence, on all pairs of short sequences over two names."""
    from evaltasks.metrics.deterministic.tool_correctness import _lcs_length

    def brute(x: tuple[str, ...], y: tuple[str, ...]) -> int:
        subsequences = {s for r in range(len(x) + 1) for s in itertools.combinations(x, r)}
        return max(r for r in range(len(x) + 1) for s in subsequences if len(s) == r and _is_subsequence(s, y))

    sequences = [s for n in range(5) for s in itertools.product("ab", repeat=n)]
    for x in sequences:
        for y in sequences:
            assert _lcs_length(x, y) == brute(x, y), (x, y)


def _is_subsequence(s: tuple[str, ...], y: tuple[str, ...]) -> bool:
    it = iter(y)
    return all(any(item == other for other in it) for item in s)


def test_expected_tools_is_a_required_field() -> None:
    metric = ToolCorrectnessMetric()
    problems = metric.validate_case(EvalTestCase(actual_output="a", tools_called=["x"]))
    assert [field for field, _ in problems] == ["expected_tools"]
    assert metric.validate_case(EvalTestCase(actual_output="a", expected_tools=[])) == []
    with pytest.raises(ValueError, match="expected_tools"):
        asyncio.run(metric.evaluate(EvalTestCase(actual_output="a", tools_called=["x"])))


@pytest.mark.slow
def test_a_dataset_row_without_expected_tools_is_located(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text(
        '{"actual_output": "a", "expected_tools": ["x"]}\n{"actual_output": "b"}\n', encoding="utf-8"
    )
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: s\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: ToolCorrectnessMetric\n", encoding="utf-8"
    )
    with pytest.raises(DatasetError) as info:
        plan_run(suite)
    [problem] = info.value.problems
    assert (problem.source, problem.location, problem.field) == (str(tmp_path / "d.jsonl"), "line 2", "expected_tools")
    # the CLI: exit 2, no traceback, the row and field named
    env = subprocess_env(tmp_path / "prefect-home")
    proc = run_cli("run", "suite.yaml", "--output-dir", "out", cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "d.jsonl, line 2" in proc.stderr and "'expected_tools'" in proc.stderr


@pytest.mark.parametrize(
    ("entry", "field", "message"),
    [
        ("    exact_match: yes please\n", "exact_match", "must be true or false, got 'yes please'"),
        ("    check_ordering: 1\n", "check_ordering", "must be true or false, got 1"),
        ("    threshold: 2\n", "threshold", "must be a number in [0, 1], got 2"),
    ],
)
def test_invalid_arguments_name_the_metric_entry_and_argument(
    tmp_path: Path, entry: str, field: str, message: str
) -> None:
    (tmp_path / "d.jsonl").write_text('{"actual_output": "a", "expected_tools": []}\n', encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"name: s\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: LengthCheckMetric\n"
        f"  - metric: ToolCorrectnessMetric\n{entry}",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as info:
        load_suite(suite)
    [problem] = info.value.problems
    assert (problem.location, problem.field, problem.message) == ("metrics[1]", field, message)


def test_batch_shares_verdicts_and_keeps_order() -> None:
    metric = ToolCorrectnessMetric()
    pairs = [(["a"], ["a", "b"]), (["a", "b"], ["a", "b"]), (["a"], ["a", "b"]), (None, ["b"])]
    cases = [EvalTestCase(actual_output=str(i), tools_called=c, expected_tools=e) for i, (c, e) in enumerate(pairs)]
    results = metric.score_batch(cases)
    assert [r.score for r in results] == [0.5, 1.0, 0.5, 0.0]
    assert results[0].evaluation_log is results[2].evaluation_log  # one log per distinct pair
    summary = evaluate_sync(cases, [metric]).summary
    assert (summary.cases, summary.passed_cases) == (4, 3)


def test_cli_run_through_prefect_scores_tools(tmp_path: Path, prefect_api_url: str) -> None:
    rows = [
        {"id": "ok", "actual_output": "booked", "tools_called": CALLED, "expected_tools": EXPECTED},
        {"id": "half", "actual_output": "found", "tools_called": ["search_hotels"], "expected_tools": EXPECTED},
        {"id": "none", "actual_output": "hi", "tools_called": [], "expected_tools": EXPECTED},
    ]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: tools\ndataset:\n  path: d.jsonl\n  fields: {id: id}\nmetrics:\n  - metric: ToolCorrectnessMetric\n"
        "  - metric: RestrictedRefusalMetric\n    name: refusal\n    threshold: 0.0\ngate: {min_pass_rate: 0.5}\n",
        encoding="utf-8",
    )
    env = subprocess_env(tmp_path / "prefect-home", prefect_api_url)
    proc = run_cli("run", "suite.yaml", "--output-dir", "out", cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    scores = {c["id"]: [(m["name"], m["score"]) for m in c["metrics"]] for c in results["cases"]}
    assert scores == {
        "ok": [("ToolCorrectnessMetric", 1.0), ("refusal", 1.0)],  # every output is short: "refusal" 1.0
        "half": [("ToolCorrectnessMetric", 0.5), ("refusal", 1.0)],
        "none": [("ToolCorrectnessMetric", 0.0), ("refusal", 1.0)],
    }
    assert os.path.isfile(tmp_path / "out" / "junit.xml")
    # The same batch with one case's tools_called changed is scored again, never read from the task cache.
    rows[1]["tools_called"] = EXPECTED
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    proc = run_cli("run", "suite.yaml", "--output-dir", "out", cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert [c["metrics"][0]["score"] for c in results["cases"]] == [1.0, 1.0, 0.0]
