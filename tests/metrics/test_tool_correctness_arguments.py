"""ToolCorrectnessMetric with ``match_arguments``, extra calls under ``exact_match``, and reasons that agree with
the score (docs/metrics/agent.md#toolcorrectnessmetric-with-arguments). Expected values are worked out by hand,
or by brute force over every assignment of calls to expectations."""

from __future__ import annotations

import asyncio
import itertools
import random
import re

import pytest

from evaltasks import EvalTestCase, ToolCall, ToolCorrectnessMetric, TraceStep


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


def run(metric: ToolCorrectnessMetric, **fields):
    return asyncio.run(metric.evaluate(EvalTestCase(actual_output="done", **fields)))


def test_arguments_must_hold_each_expected_argument() -> None:
    expected = [call("search_flights", to="Paris", day="Monday"), call("book_flight", flight="AF1")]
    right = [call("search_flights", to="Paris", day="Monday", cabin="economy"), call("book_flight", flight="AF1")]
    wrong = [call("search_flights", to="Rome", day="Monday"), call("book_flight", flight="AF1")]
    metric = ToolCorrectnessMetric(match_arguments=True)
    assert run(metric, tool_calls=right, expected_tool_calls=expected).score == 1.0  # extra arguments allowed
    result = run(metric, tool_calls=wrong, expected_tool_calls=expected)
    assert (result.score, result.success) == (0.5, True)
    assert result.reason == (
        '1 of 2 expected tool call(s) were made; missing [\'search_flights({"day":"Monday","to":"Paris"})\'] '
        "(search_flights called with other arguments)."
    )
    assert result.evaluation_log["match_arguments"] is True
    # the same calls by name only: both match
    assert run(ToolCorrectnessMetric(), tool_calls=wrong, expected_tool_calls=expected).score == 1.0


@pytest.mark.parametrize(
    ("called", "wanted", "match"),
    [
        (1, 1.0, True),  # JSON numbers: 1 and 1.0 are one value
        (True, 1, False),  # a boolean is not a number
        ({"b": [1, {"c": 2}], "a": None}, {"a": None, "b": [1.0, {"c": 2}]}, True),  # key order does not matter
        ([1, 2], [2, 1], False),  # list order does
        ("1", 1, False),
    ],
)
def test_argument_values_compare_as_json(called, wanted, match) -> None:
    result = run(
        ToolCorrectnessMetric(match_arguments=True),
        tool_calls=[call("f", x=called)],
        expected_tool_calls=[call("f", x=wanted)],
    )
    assert result.score == (1.0 if match else 0.0)


def test_an_expected_call_without_arguments_matches_by_name_and_a_call_without_recorded_arguments_does_not() -> None:
    metric = ToolCorrectnessMetric(match_arguments=True)
    loose = [ToolCall(name="search")]
    assert run(metric, tool_calls=[call("search", q="x")], expected_tool_calls=loose).score == 1.0
    unrecorded = [ToolCall(name="search")]
    assert run(metric, tool_calls=unrecorded, expected_tool_calls=[call("search", q="x")]).score == 0.0


def test_a_loose_expectation_does_not_take_the_call_a_strict_one_needs() -> None:
    """Matching is a maximum matching: eval-ai-library's first-fit would give the loose ``search`` the only
    call with q=x (its first), leaving ``search(q=x)`` unmatched."""
    calls = [call("search", q="x"), call("search", q="y")]
    expected = [ToolCall(name="search"), call("search", q="x")]
    result = run(ToolCorrectnessMetric(match_arguments=True), tool_calls=calls, expected_tool_calls=expected)
    assert result.score == 1.0


def _brute_force_matched(called: list[tuple], expected: list[tuple]) -> int:
    """The largest number of expected calls that distinct calls can match (every injective assignment)."""

    def fits(c: tuple, e: tuple) -> bool:
        return c[0] == e[0] and all(k in c[1] and c[1][k] == v for k, v in e[1].items())

    best = 0
    for size in range(min(len(called), len(expected)), 0, -1):
        for chosen in itertools.combinations(range(len(expected)), size):
            for targets in itertools.permutations(range(len(called)), size):
                if all(fits(called[t], expected[e]) for e, t in zip(chosen, targets)):
                    return size
    return best


def test_default_mode_with_arguments_equals_brute_force() -> None:
    rng = random.Random(11)
    metric = ToolCorrectnessMetric(match_arguments=True)
    for _ in range(300):
        called = [
            (rng.choice("ab"), {k: rng.randint(0, 1) for k in rng.sample("xy", rng.randint(0, 2))})
            for _ in range(rng.randint(0, 4))
        ]
        expected = [
            (rng.choice("ab"), {k: rng.randint(0, 1) for k in rng.sample("xy", rng.randint(0, 2))})
            for _ in range(rng.randint(1, 4))
        ]
        result = run(
            metric,
            tool_calls=[ToolCall(name=n, arguments=a) for n, a in called],
            expected_tool_calls=[ToolCall(name=n, arguments=a) for n, a in expected],
        )
        assert result.evaluation_log["matched"] == _brute_force_matched(called, expected), (called, expected)
        assert result.score == result.evaluation_log["matched"] / len(expected)


def test_extra_calls_count_against_exact_match() -> None:
    """The docs page says exact_match requires "the exact same set of tools": as sets, ``[a, a]`` and ``[a]``
    are equal. An extra call of an expected tool fails exact_match all the same, and the reason names it."""
    result = run(ToolCorrectnessMetric(exact_match=True), tools_called=["a", "a"], expected_tools=["a"])
    assert (result.score, result.success) == (0.0, False)
    assert result.reason == "Mismatch: expected ['a'], called ['a', 'a']: 1 extra call(s) ['a']."
    assert result.evaluation_log["extra"] == ["a"]
    with_arguments = run(
        ToolCorrectnessMetric(exact_match=True, match_arguments=True),
        tool_calls=[call("a", x=1), call("a", x=2)],
        expected_tool_calls=[call("a", x=1)],
    )
    assert (with_arguments.score, with_arguments.evaluation_log["extra"]) == (0.0, ['a({"x":2})'])
    reordered = run(ToolCorrectnessMetric(exact_match=True), tools_called=["b", "a"], expected_tools=["a", "b"])
    assert reordered.reason == "Mismatch: expected ['a', 'b'], called ['b', 'a']: the same calls in another order."


def test_the_reason_never_contradicts_the_score() -> None:
    """eval-ai-library builds its reason from sets: with ``[a]`` called and ``[a, a]`` expected it scores 0.5
    and says "All expected tools ['a', 'a'] were called." Here, over random cases in every mode, the reason
    states the counts the score is made of, and a passing exact match is the only one called exact."""
    rng = random.Random(3)
    for _ in range(400):
        called = [rng.choice("abc") for _ in range(rng.randint(0, 4))]
        expected = [rng.choice("abc") for _ in range(rng.randint(0, 4))]
        for mode in ({}, {"exact_match": True}, {"check_ordering": True}):
            result = run(ToolCorrectnessMetric(**mode), tools_called=called, expected_tools=expected)
            counted = re.match(r"(\d+) of (\d+) expected", result.reason)
            if counted:
                matched, total = int(counted[1]), int(counted[2])
                assert (total, matched / total if total else 1.0) == (len(expected), result.score), result.reason
                if "missing" in result.reason:
                    assert result.score < 1.0
            else:
                assert result.reason.startswith("Exact match") is (result.score == 1.0), result.reason
    regression = run(ToolCorrectnessMetric(), tools_called=["a"], expected_tools=["a", "a"])
    assert (regression.score, regression.reason) == (0.5, "1 of 2 expected tool call(s) were made; missing ['a'].")


def test_calls_come_from_the_trace_when_not_given_each_invocation_once() -> None:
    trace = [
        TraceStep(type="agent_step", name="agent", step_id="A"),
        TraceStep(type="tool_call", name="search", input='{"q": "x"}', step_id="1", parent_step_id="A"),
        TraceStep(type="tool_call", name="search", input={"q": "x"}, step_id="2", parent_step_id="1"),  # nested
        TraceStep(type="tool_call", name="book", input={"id": 7}, step_id="3", parent_step_id="A"),
    ]
    expected = [call("search", q="x"), call("book", id=7)]
    exact = ToolCorrectnessMetric(exact_match=True, match_arguments=True)
    result = run(exact, execution_trace=trace, expected_tool_calls=expected)
    assert (result.score, result.evaluation_log["tools_called"]) == (1.0, ['search({"q":"x"})', 'book({"id":7})'])
    by_name = run(ToolCorrectnessMetric(exact_match=True), execution_trace=trace, expected_tools=["search", "book"])
    assert by_name.score == 1.0


def test_what_match_arguments_requires() -> None:
    metric = ToolCorrectnessMetric(match_arguments=True)
    names_only = EvalTestCase(actual_output="x", tools_called=["a"], expected_tool_calls=[call("a", q=1)])
    assert [f for f, _ in metric.validate_case(names_only)] == ["tool_calls"]
    no_expected = EvalTestCase(actual_output="x", tool_calls=[call("a")], expected_tools=["a"])
    assert [f for f, _ in metric.validate_case(no_expected)] == ["expected_tool_calls"]
    # without match_arguments, expected_tool_calls' names are an expected list
    assert ToolCorrectnessMetric().validate_case(no_expected) == []
    assert ToolCorrectnessMetric().validate_case(EvalTestCase(actual_output="x", expected_tool_calls=[])) == []
    with pytest.raises(ValueError, match="match_arguments must be true or false, got 'yes'"):
        ToolCorrectnessMetric(match_arguments="yes")  # type: ignore[arg-type]
