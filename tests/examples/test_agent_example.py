"""``examples/agent``: the travel agent the suite runs as its ``python`` target, and the agent metrics on the
traces it returns (offline: the agent is rule-based). Expected scores are worked out by hand from the agent's
simulated clock (plan 40 ms, search 300 ms, booking 500 ms, weather 150 ms) and the metrics' definitions
(docs/metrics/agent.md#agent-metrics); the README's run shows the same numbers."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from evaltasks import EvalTestCase, ToolCall, evaluate_sync
from evaltasks.inputs.suite import load_suite
from evaltasks.targets.python import to_output
from tests.cli_forkserver import run_cli
from tests.process_env import REPO_ROOT, subprocess_env

EXAMPLE = REPO_ROOT / "examples" / "agent"
METRICS = ["ToolCorrectnessMetric", "ToolsErrorMetric", "LoopDetectionMetric", "PlanningQualityMetric"]
EXPECTED = {
    # tool correctness (exact, with arguments), tool errors, loop detection, planning quality
    "paris": [1.0, 1.0, 1.0, round(0.4 + 0.4 + 0.2 * (1 - 40 / 840), 4)],
    "lyon-weather": [1.0, 1.0, 1.0, round(0.4 + 0.4 + 0.2 * (1 - 40 / 990), 4)],
    "nice-sold-out": [1.0, 0.5, 1.0, round(0.4 + 0.4 + 0.2 * (1 - 40 / 840), 4)],
    # five identical searches: 4 extra calls; [search] 5 times in 6 actions (2 wasted); 1 distinct call of 5
    "oslo-no-hotel": [0.0, 1.0, round(1 - 2 / 6, 4), round(0.4 + 0.4 * (1 / 5) + 0.2 * (1 - 40 / 1540), 4)],
}


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    spec = importlib.util.spec_from_file_location("travel_agent_example", EXAMPLE / "agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _rows() -> list[dict]:
    lines = (EXAMPLE / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_the_agent_records_its_calls_on_the_simulated_clock(agent: ModuleType) -> None:
    out = to_output(agent.run(EvalTestCase(actual_output="", input="Book a hotel in Nice for 1 night")), "run")
    trace = out.execution_trace or []
    assert [(s.type, s.name, s.status) for s in trace] == [
        ("agent_step", "travel-agent", None),
        ("reasoning", "plan", None),
        ("tool_call", "search_hotels", "success"),
        ("tool_call", "book_hotel", "error"),
    ]
    assert trace[0].duration_ms == 40 + 300 + 500
    assert (trace[3].error, trace[3].timestamp) == ("Promenade is sold out", pytest.approx(0.34))
    assert out.tool_calls == [
        ToolCall(name="search_hotels", arguments={"city": "Nice"}),
        ToolCall(name="book_hotel", arguments={"hotel": "Promenade", "nights": 1}),
    ]
    assert out.output == "Promenade in Nice could not be booked."


def test_the_suite_scores_each_case_as_worked_out(agent: ModuleType) -> None:
    metrics = load_suite(EXAMPLE / "suite.yaml").metrics
    assert [m.name for m in metrics] == METRICS
    cases = []
    for row in _rows():
        out = to_output(agent.run(EvalTestCase(actual_output="", input=row["request"])), "run")
        cases.append(
            EvalTestCase(
                name=row["id"],
                input=row["request"],
                actual_output=out.output,
                execution_trace=out.execution_trace,
                tool_calls=out.tool_calls,
                expected_tool_calls=[ToolCall.model_validate(c) for c in row["expected_tool_calls"]],
            )
        )
    result = evaluate_sync(cases, metrics)
    scores = {c.id: [m.score for m in c.metrics] for c in result.test_results}
    assert scores == EXPECTED


@pytest.mark.slow
def test_the_readme_run_through_the_cli(tmp_path: Path, prefect_api_url: str) -> None:
    env = subprocess_env(tmp_path / "prefect-home", prefect_api_url)
    env["EVALTASKS_INDEX_DIR"] = str(tmp_path / "index")
    proc = run_cli("run", str(EXAMPLE / "suite.yaml"), "--output-dir", str(tmp_path / "out"), cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "PASSED: pass rate 50.00% (2 of 4 cases), gate 50.00%" in proc.stdout
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert {c["id"]: [m["score"] for m in c["metrics"]] for c in results["cases"]} == EXPECTED
    readme = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    assert "oslo-no-hotel — ToolCorrectnessMetric 0.0000; LoopDetectionMetric 0.6667" in readme
    assert "oslo-no-hotel — ToolCorrectnessMetric 0.0000; LoopDetectionMetric 0.6667" in proc.stdout
