"""ToolsErrorMetric, LoopDetectionMetric and PlanningQualityMetric (docs/metrics/agent.md#agent-metrics).

Expected scores are worked out by hand in each test from the definitions on that page; each divergence from
eval-ai-library 0.8.2 has a regression test naming the library's behaviour."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from evaltasks import (
    METRICS,
    EvalTestCase,
    LoopDetectionMetric,
    PlanningQualityMetric,
    ToolsErrorMetric,
    TraceStep,
    evaluate_sync,
)
from evaltasks.agent_metrics import ToolsErrorMetric as AgentAlias
from evaltasks.reliability_metrics import LoopDetectionMetric as LoopAlias
from evaltasks.reliability_metrics import PlanningQualityMetric as PlanningAlias


def tool(name: str, args: dict | None = None, **fields) -> TraceStep:
    return TraceStep(type="tool_call", name=name, input=args, **fields)


def case(trace: list[TraceStep] | None, **fields) -> EvalTestCase:
    return EvalTestCase(actual_output="done", execution_trace=trace, **fields)


def score(metric, trace: list[TraceStep] | None, **fields):
    return asyncio.run(metric.evaluate(case(trace, **fields)))


def test_registered_under_eval_ai_library_names_and_import_paths() -> None:
    assert METRICS["ToolsErrorMetric"] is ToolsErrorMetric is AgentAlias
    assert METRICS["LoopDetectionMetric"] is LoopDetectionMetric is LoopAlias
    assert METRICS["PlanningQualityMetric"] is PlanningQualityMetric is PlanningAlias
    assert (ToolsErrorMetric().threshold, LoopDetectionMetric().threshold, PlanningQualityMetric().threshold) == (
        1.0,
        0.8,
        0.6,
    )


@pytest.mark.parametrize("metric", [ToolsErrorMetric(), LoopDetectionMetric(), PlanningQualityMetric()])
def test_a_case_without_a_trace_is_an_input_problem_not_a_perfect_score(metric) -> None:
    """eval-ai-library scores a missing execution_trace 1.0 in LoopDetection and PlanningQuality ("no trace
    available"): no evidence is not a perfect score. ``[]`` is a trace (with nothing in it)."""
    assert [field for field, _ in metric.validate_case(case(None))] == ["execution_trace"]
    with pytest.raises(ValueError, match="execution_trace"):
        score(metric, None)
    assert metric.validate_case(case([])) == []
    assert score(metric, []).score == 1.0


# -- ToolsErrorMetric ----------------------------------------------------------------------------------------


def test_tools_error_is_the_share_of_calls_without_error_and_passes_only_without_error() -> None:
    trace = [
        tool("search", {"q": "a"}, status="success"),
        tool("fetch", {"id": 1}, status="error", error="timeout"),
        tool("fetch", {"id": 1}, status="success"),
        tool("book", {"id": 1}, error="HTTP 500"),  # an error message without a status is a failure
        TraceStep(type="llm_call", name="gpt", status="error", error="rate limited"),  # not a tool call
    ]
    result = score(ToolsErrorMetric(), trace)
    assert result.score == pytest.approx(2 / 4)
    assert result.success is False
    assert result.evaluation_log["failed"] == [
        {"name": "fetch", "error": "timeout"},
        {"name": "book", "error": "HTTP 500"},
    ]
    assert result.reason == "2 of 4 tool call(s) failed: fetch: timeout; book: HTTP 500."
    clean = score(ToolsErrorMetric(), [tool("search", status="success"), tool("book", status="SUCCESS")])
    assert (clean.score, clean.success) == (1.0, True)
    assert clean.reason == "All 2 tool call(s) ran without error."
    lenient = score(ToolsErrorMetric(threshold=0.5), trace)  # a threshold the user lowers is honoured
    assert (lenient.score, lenient.success) == (0.5, True)


def test_tools_error_passing_means_no_error_where_the_library_passes_detected_errors() -> None:
    """eval-ai-library 0.8.2: score = the judge's confidence in its detection and success = detected and score
    >= threshold, so a confident "errors detected" (0.92) passes and a confident "no error" (0.95) fails. Here
    the same two traces fail and pass, in that order."""
    failing = [tool("calculate_sum", {"a": 5, "b": "hello"}, status="error", error_type="TypeError")] * 2
    passing = [tool("get_weather", {"city": "New York"}, status="success", output={"temp": 72})]
    failed_result, passed_result = score(ToolsErrorMetric(), failing), score(ToolsErrorMetric(), passing)
    assert (failed_result.score, failed_result.success) == (0.0, False)
    assert failed_result.evaluation_log["failed"] == [{"name": "calculate_sum", "error": "TypeError"}] * 2
    assert (passed_result.score, passed_result.success) == (1.0, True)
    assert failed_result.evaluation_cost == passed_result.evaluation_cost == 0.0  # no judge request


def test_tools_error_counts_a_call_recorded_twice_once_and_reads_the_nested_error() -> None:
    """A framework's tool span with the decorated function's span inside it is one call: its nested record's
    error fails that one call (eval-ai-library's tool-history rendering folds the same way)."""
    trace = [
        tool("fetch", {"id": 1}, step_id="a", status="success", timestamp=10.0, duration_ms=500),
        tool(
            "fetch",
            {"id": 1},
            step_id="b",
            parent_step_id="a",
            status="error",
            error="404",
            timestamp=10.1,
            duration_ms=300,
        ),
        tool("book", {"id": 1}, step_id="c", status="success", timestamp=11.0, duration_ms=100),
    ]
    result = score(ToolsErrorMetric(), trace)
    assert result.evaluation_log["tool_calls"] == 2
    assert result.score == 0.5
    assert result.evaluation_log["failed"] == [{"name": "fetch", "error": "404"}]


def test_tools_error_ignore_recovered_leaves_out_calls_a_later_call_of_the_tool_fixed() -> None:
    trace = [
        tool("create_user", {"name": "Alice"}, status="error", error="missing email"),
        tool("create_user", {"name": "Alice", "email": "a@example.com"}, status="success"),
        tool("notify", status="error", error="down"),
    ]
    strict = score(ToolsErrorMetric(), trace)
    assert strict.score == pytest.approx(1 / 3)
    recovered = score(ToolsErrorMetric(ignore_recovered=True), trace)
    assert recovered.score == pytest.approx(2 / 3)  # notify never recovered
    assert recovered.evaluation_log["recovered"] == ["create_user"]
    with pytest.raises(ValueError, match="ignore_recovered must be true or false"):
        ToolsErrorMetric(ignore_recovered="yes")  # type: ignore[arg-type]


# -- LoopDetectionMetric -------------------------------------------------------------------------------------


def test_loop_detection_scores_wasted_repetitions_as_the_library() -> None:
    # a a a a a b: [a] repeated 5 times, 3 accepted: 2 wasted of 6 -> 1 - 2/6
    trace = [tool("a", {"q": 1}) for _ in range(5)] + [tool("b")]
    result = score(LoopDetectionMetric(), trace)
    assert result.score == round(1 - 2 / 6, 4)
    [loop] = result.evaluation_log["loops_detected"]
    assert (loop["pattern"], loop["repetitions"], loop["start_index"], loop["end_index"], loop["severity"]) == (
        ['a({"q":1})'],
        5,
        0,
        5,
        "medium",
    )
    assert result.success is False  # 0.6667 < 0.8
    # a b a b a b a b a b: [a, b] 5 times: 2 × 2 wasted of 10 -> 0.6
    alternating = [tool(name) for _ in range(5) for name in ("a", "b")]
    assert score(LoopDetectionMetric(), alternating).score == 0.6
    # at most 3 repetitions are accepted
    assert score(LoopDetectionMetric(), [tool("a")] * 3 + [tool("b")]).score == 1.0


def test_loop_detection_considers_arguments_where_the_library_compares_names() -> None:
    """eval-ai-library compares action names only: five searches for five different things are a loop
    (score 1 - 2/5 = 0.6, failing). With arguments considered they are five different actions."""
    different = [tool("search", {"q": q}) for q in ("paris", "rome", "oslo", "bern", "riga")]
    result = score(LoopDetectionMetric(), different)
    assert (result.score, result.success, result.evaluation_log["loops_detected"]) == (1.0, True, [])
    same = [tool("search", {"q": "paris"}) for _ in range(5)]
    assert score(LoopDetectionMetric(), same).score == round(1 - 2 / 5, 4)
    # arguments recorded as JSON text or as an object, with keys in any order, are the same arguments
    mixed = [tool("s", {"a": 1, "b": 2}), tool("s", {"b": 2, "a": 1.0})] + [
        TraceStep(type="tool_call", name="s", input='{"b": 2, "a": 1}') for _ in range(3)
    ]
    assert score(LoopDetectionMetric(), mixed).score == round(1 - 2 / 5, 4)  # 5 repeats, 3 accepted


def test_loop_detection_counts_nested_spans_once_where_the_library_counts_each() -> None:
    """Each tool call recorded twice (an outer framework span and the decorated function's span inside it):
    eval-ai-library sees 8 actions a a a a a a a a (8 repeats, score 1 - 5/8 = 0.375); there are 4 calls,
    a loop of 4 (1 - 1/4 = 0.75)."""
    trace = []
    for i in range(4):
        trace.append(tool("a", step_id=f"o{i}", timestamp=float(i), duration_ms=100))
        trace.append(tool("a", step_id=f"i{i}", parent_step_id=f"o{i}", timestamp=i + 0.01, duration_ms=50))
    result = score(LoopDetectionMetric(), trace)
    assert result.evaluation_log["actions"] == 4
    assert result.score == 0.75
    # the same folding by time window, when the records carry no parent ids
    by_time = [
        tool("a", timestamp=float(i) + offset, duration_ms=d) for i in range(4) for offset, d in ((0, 100), (0.01, 50))
    ]
    assert score(LoopDetectionMetric(), by_time).evaluation_log["actions"] == 4


def _library_cycles(actions: list[str], accepted: int, shortest: int, longest: int) -> list[tuple[list[str], int]]:
    """eval-ai-library 0.8.2's ``_detect_cycles`` and ``_is_subpattern``, transcribed, for the comparison."""
    found: list[tuple[list[str], int]] = []
    n = len(actions)
    for length in range(shortest, longest + 1):
        if length > n // 2:
            break
        i = 0
        while i <= n - 2 * length:
            pattern, count, j = actions[i : i + length], 1, i + length
            while j + length <= n and actions[j : j + length] == pattern:
                count, j = count + 1, j + length
            if count > accepted:
                if not any(len(pattern) % len(p) == 0 and p * (len(pattern) // len(p)) == pattern for p, _ in found):
                    found.append((pattern, count))
                i = j
            else:
                i += 1
    return found


def test_loop_search_equals_the_library_on_name_only_traces() -> None:
    """Where every action is a distinct name without arguments, the cycle search and score are the library's."""
    rng = random.Random(7)
    metric = LoopDetectionMetric(max_acceptable_repeats=2, max_cycle_length=3)
    for _ in range(300):
        names = [rng.choice("ab") for _ in range(rng.randint(0, 14))]
        expected = _library_cycles(names, 2, 1, 3)
        got = metric.detect_cycles(names)
        assert [(loop["pattern"], loop["repetitions"]) for loop in got] == expected
        wasted = sum(len(p) * (count - 2) for p, count in expected)
        want = round(1 - min(wasted / len(names), 1.0), 4) if expected else 1.0
        assert score(metric, [tool(n) for n in names]).score == want


def test_loop_detection_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="max_acceptable_repeats must be an integer >= 1, got 0"):
        LoopDetectionMetric(max_acceptable_repeats=0)
    with pytest.raises(ValueError, match=r"max_cycle_length \(2\) must be >= min_cycle_length \(3\)"):
        LoopDetectionMetric(min_cycle_length=3, max_cycle_length=2)
    with pytest.raises(ValueError, match="min_cycle_length must be an integer >= 1, got True"):
        LoopDetectionMetric(min_cycle_length=True)


# -- PlanningQualityMetric -----------------------------------------------------------------------------------


def _agent_trace() -> list[TraceStep]:
    """An agent span (10 s) holding a plan (1 s), two tool calls (3 s and 2 s; the first recorded twice) and an
    LLM call (2 s): 2 s of the agent span are its own."""
    return [
        TraceStep(type="agent_step", name="planner", step_id="A", timestamp=0.0, duration_ms=10_000),
        TraceStep(type="reasoning", name="plan", step_id="R", parent_step_id="A", timestamp=0.0, duration_ms=1_000),
        tool("search", {"q": "x"}, step_id="T1", parent_step_id="A", timestamp=1.0, duration_ms=3_000),
        tool("search", {"q": "x"}, step_id="T1b", parent_step_id="T1", timestamp=1.1, duration_ms=2_500),
        TraceStep(type="llm_call", name="gpt", step_id="L", parent_step_id="A", timestamp=4.0, duration_ms=2_000),
        tool("book", {"id": 7}, step_id="T2", parent_step_id="A", timestamp=6.0, duration_ms=2_000),
    ]


def test_planning_quality_does_not_count_nested_durations_twice() -> None:
    """eval-ai-library sums every step's duration as the total (10 + 1 + 3 + 2.5 + 2 + 2 = 20.5 s) and every
    reasoning/agent step's as the planning time (10 + 1 = 11 s): overhead 11/20.5 = 0.537. The trace lasted
    10 s, of which planning is the plan (1 s) and the agent span's own time (10 - 1 - 3 - 2 - 2 = 2 s): 0.3.
    The library also reads the nested record of the search as a redundant call (efficiency 2/3)."""
    result = score(PlanningQualityMetric(expected_steps=4), _agent_trace())
    log = result.evaluation_log
    assert (log["total_ms"], log["planning_ms"], log["planning_overhead"]) == (10_000, 3_000, 0.3)
    assert (log["actual_steps"], log["actual_tool_calls"], log["reasoning_steps"]) == (4, 2, 2)
    assert (log["granularity_score"], log["efficiency_ratio"]) == (1.0, 1.0)
    assert result.score == round(0.4 * 1.0 + 0.4 * 1.0 + 0.2 * (1 - 0.3), 4)  # 0.94
    library_score = 0.4 * (1 - abs(5 - 4) / 5) + 0.4 * (2 / 3) + 0.2 * (1 - 11 / 20.5)
    assert result.score - library_score > 0.1


def test_planning_quality_granularity_from_expected_steps_or_the_stated_plan() -> None:
    trace = [tool("a", {"n": i}) for i in range(6)]  # no durations: overhead by count, 0 planning steps
    metric = PlanningQualityMetric(expected_steps=3)
    result = score(metric, trace)
    assert result.evaluation_log["granularity_score"] == 0.5  # 1 - |6 - 3| / 6
    assert result.score == round(0.4 * 0.5 + 0.4 + 0.2, 4)
    assert "3 extra step(s) against 3" in result.reason
    stated = score(PlanningQualityMetric(), trace, planning_steps=["find", "compare", "book", "pay"])
    assert stated.evaluation_log["reference_steps"] == 4
    assert stated.evaluation_log["granularity_score"] == round(1 - 2 / 6, 4)
    none = score(PlanningQualityMetric(), trace)  # no reference: granularity 1.0, as the library
    assert (none.evaluation_log["reference_steps"], none.score) == (None, 1.0)


def test_planning_quality_efficiency_counts_repeated_calls_with_the_same_input() -> None:
    trace = [tool("search", {"q": "x"}), tool("search", {"q": "x"}), tool("search", {"q": "y"}), tool("book")]
    result = score(PlanningQualityMetric(), trace)
    assert result.evaluation_log["efficiency_ratio"] == 0.75
    assert result.score == round(0.4 + 0.4 * 0.75 + 0.2, 4)
    assert "1 redundant tool call(s)" in result.reason


def test_planning_quality_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="expected_steps must be an integer >= 0 or null, got -1"):
        PlanningQualityMetric(expected_steps=-1)
    assert PlanningQualityMetric(expected_tool_count=2).config()["expected_tool_count"] == 2


def test_batches_through_evaluate_sync_keep_order() -> None:
    traces = [[tool("a")] * 5, [tool("a", status="error")], [], [tool("b"), tool("c")]]
    cases = [case(t) for t in traces]
    result = evaluate_sync(cases, [LoopDetectionMetric(), ToolsErrorMetric()])
    scores = [[m.score for m in c.metrics] for c in result.test_results]
    assert scores == [[round(1 - 2 / 5, 4), 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]]


def test_every_order_of_a_nested_pair_folds_to_one_call() -> None:
    """Whatever order the exporter lists a call and its nested record in, one invocation remains."""
    outer = tool("a", {"x": 1}, step_id="o", timestamp=1.0, duration_ms=100)
    inner = tool("a", {"x": 1}, step_id="i", parent_step_id="o", timestamp=1.01, duration_ms=50)
    other = tool("b", step_id="b", timestamp=2.0, duration_ms=10)
    for order in itertools.permutations([outer, inner, other]):
        assert score(ToolsErrorMetric(), list(order)).evaluation_log["tool_calls"] == 2


def test_tools_error_accepts_the_library_judge_settings_and_asks_nothing(tmp_path) -> None:
    """eval-ai-library's ToolsErrorMetric requires ``model`` (its judge) and takes ``error_types``: a suite
    written for it still loads, and the settings change nothing (no request is made)."""
    from evaltasks.inputs.suite import load_suite

    (tmp_path / "d.jsonl").write_text('{"actual_output": "a", "execution_trace": []}\n', encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: s\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: ToolsErrorMetric\n    model: gpt-4o\n"
        "    error_types: [parameter_error]\n",
        encoding="utf-8",
    )
    [metric] = load_suite(tmp_path / "suite.yaml").metrics
    assert (
        metric.config()
        == ToolsErrorMetric().config()
        == {
            "threshold": 1.0,
            "name": "ToolsErrorMetric",
            "ignore_recovered": False,
        }
    )


def test_identical_windows_fold_only_when_they_last() -> None:
    """eval-ai-library's rule: two identical positive windows are one call copied by two layers; two zero-length
    records at the same instant may be two calls."""
    copied = [tool("a", {"x": 1}, timestamp=5.0, duration_ms=20), tool("a", {"x": 1}, timestamp=5.0, duration_ms=20)]
    assert score(ToolsErrorMetric(), copied).evaluation_log["tool_calls"] == 1
    instant = [tool("a", {"x": 1}, timestamp=5.0, duration_ms=0), tool("a", {"x": 1}, timestamp=5.0, duration_ms=0)]
    assert score(ToolsErrorMetric(), instant).evaluation_log["tool_calls"] == 2
    same_object = [tool("a", timestamp=1.0, duration_ms=0)] * 4  # one object listed four times: four records
    assert score(ToolsErrorMetric(), same_object).evaluation_log["tool_calls"] == 4
