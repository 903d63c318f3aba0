"""Dataset columns of agent cases: ``execution_trace``, ``tool_calls``, ``expected_tool_calls`` (lists of
objects; in CSV a cell holding JSON) and ``planning_steps`` (docs/agents.md#execution-traces)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from evaltasks.errors import DatasetError
from evaltasks.inputs.datasets import load_dataset
from evaltasks.inputs.suite import DatasetSpec
from evaltasks.test_case import ToolCall, TraceStep

TRACE = [
    {"type": "tool_call", "step_id": "1", "name": "search", "input": {"q": "x"}, "status": "success", "duration_ms": 3},
    {"type": "tool_call", "step_id": "2", "name": "book", "input": {"id": 1}, "status": "error", "error": "full"},
]
CALLS = [{"name": "search", "arguments": {"q": "x"}}]


def test_jsonl_and_yaml_rows_carry_traces_and_calls(tmp_path: Path) -> None:
    row = {
        "actual_output": "a",
        "execution_trace": TRACE,
        "tool_calls": CALLS,
        "expected_tool_calls": [{"name": "book"}],
        "planning_steps": ["search", "book"],
    }
    (tmp_path / "d.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    [case] = load_dataset(DatasetSpec(path="d.jsonl"), tmp_path).cases
    assert case.execution_trace == [TraceStep.model_validate(step) for step in TRACE]
    assert (case.tool_calls, case.expected_tool_calls) == (
        [ToolCall(name="search", arguments={"q": "x"})],
        [ToolCall(name="book")],
    )
    assert case.planning_steps == ["search", "book"]
    # a mapped column name, and a string holding the JSON
    (tmp_path / "m.jsonl").write_text(
        json.dumps({"actual_output": "a", "steps": json.dumps(TRACE)}) + "\n", encoding="utf-8"
    )
    spec = DatasetSpec.model_validate({"path": "m.jsonl", "fields": {"execution_trace": "steps"}})
    assert load_dataset(spec, tmp_path).cases[0].execution_trace == case.execution_trace


def test_csv_cells_hold_json(tmp_path: Path) -> None:
    with open(tmp_path / "d.csv", "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["actual_output", "execution_trace", "expected_tool_calls", "planning_steps"])
        writer.writerow(["a", json.dumps(TRACE), json.dumps(CALLS), '["search", "book"]'])
    [case] = load_dataset(DatasetSpec(path="d.csv"), tmp_path).cases
    assert [s.name for s in case.execution_trace or []] == ["search", "book"]
    assert case.expected_tool_calls == [ToolCall(name="search", arguments={"q": "x"})]
    assert case.planning_steps == ["search", "book"]


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        (
            [TRACE[0], {"type": "tool_call", "duration_ms": -4}],
            "execution_trace[1].duration_ms",
            "greater than or equal to 0",
        ),
        ([{"name": "a", "status": "error"}], "execution_trace[0].type", "Field required"),
        ([TRACE[0], "search"], "execution_trace[1]", "must be an object, got string"),
        ({"type": "tool_call"}, "execution_trace", "must be a list of objects, got object"),
        ("[{]", "execution_trace", "must hold a JSON list of objects: invalid JSON"),
        # what would otherwise pass a gate by accident: a tracer's own status read as success, a misspelt type
        # hiding a failed call from ToolsError, ids that do not hold the tree together
        ([{"type": "tool_call", "status": "boom"}], "execution_trace[0].status", "must be 'success' or 'error'"),
        (
            [{"type": "tool_cal", "status": "error", "error": "x"}],
            "execution_trace[0].type",
            "did you mean 'tool_call'?",
        ),
        ([TRACE[0], {**TRACE[1], "step_id": "1"}], "execution_trace[1].step_id", "the id of step 0 too"),
        (
            [TRACE[0], {**TRACE[1], "parent_step_id": "9"}],
            "execution_trace[1].parent_step_id",
            "'9' is no step_id of the trace",
        ),
    ],
)
def test_a_bad_trace_names_file_row_and_field(tmp_path: Path, value: object, field: str, message: str) -> None:
    rows = [{"actual_output": "ok", "execution_trace": TRACE}, {"actual_output": "bad", "execution_trace": value}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        load_dataset(DatasetSpec(path="d.jsonl"), tmp_path)
    [problem] = info.value.problems
    assert (problem.source, problem.location, problem.field) == (str(tmp_path / "d.jsonl"), "line 2", field)
    assert message in problem.message


def test_a_bad_tool_call_names_its_key(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text(
        json.dumps({"actual_output": "a", "tool_calls": [{"name": "a", "args": {"q": 1}}]}) + "\n", encoding="utf-8"
    )
    with pytest.raises(DatasetError) as info:
        load_dataset(DatasetSpec(path="d.jsonl"), tmp_path)
    [problem] = info.value.problems
    assert (problem.location, problem.field, problem.message) == (
        "line 1",
        "tool_calls[0].args",
        "Extra inputs are not permitted",
    )
