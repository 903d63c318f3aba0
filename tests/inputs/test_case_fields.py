"""eval-ai-library's list fields of a test case (``context``, ``retrieval_context``, ``tools_called``,
``expected_tools``): the model, every dataset format, located errors, and the task cache key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaltasks import EvalTestCase, LengthCheckMetric
from evaltasks.errors import DatasetError
from evaltasks.inputs.datasets import load_dataset
from evaltasks.inputs.suite import DatasetSpec, load_suite
from evaltasks.tasks import score_batch_inputs_key

LIST_FIELDS = ("context", "retrieval_context", "tools_called", "expected_tools")
# What each row below holds in every field, as the loaded lists.
ROW_1 = {
    "context": ["Paris is in France."],
    "retrieval_context": ["doc one", "doc two"],
    "tools_called": ["search", "book"],
    "expected_tools": ["search"],
}
ROW_2 = {"context": ["c"], "retrieval_context": ["r"], "tools_called": [], "expected_tools": ["search", "search"]}


def _load(path: Path, **spec) -> object:
    return load_dataset(DatasetSpec(path=path.name, **spec), path.parent)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", newline="")
    return path


def _fields(case: EvalTestCase) -> dict[str, list[str] | None]:
    return {name: getattr(case, name) for name in LIST_FIELDS}


def test_fields_default_to_none_and_are_lists_of_strings() -> None:
    case = EvalTestCase(actual_output="a")
    assert _fields(case) == dict.fromkeys(LIST_FIELDS)
    full = EvalTestCase(actual_output="a", **ROW_1)
    assert _fields(full) == ROW_1
    with pytest.raises(ValueError, match="tools_called"):
        EvalTestCase(actual_output="a", tools_called="search")  # a string is not a list (strict)
    with pytest.raises(ValueError, match="expected_tools"):
        EvalTestCase(actual_output="a", expected_tools=["search", 3])


def test_csv_json_array_cells(tmp_path: Path) -> None:
    def cell(items: list[str]) -> str:
        return '"' + json.dumps(items).replace('"', '""') + '"'

    header = "actual_output," + ",".join(LIST_FIELDS)
    rows = [f"a,{','.join(cell(ROW_1[n]) for n in LIST_FIELDS)}", f"b,{','.join(cell(ROW_2[n]) for n in LIST_FIELDS)}"]
    dataset = _load(_write(tmp_path, "d.csv", "\n".join([header, *rows]) + "\n"))
    assert [_fields(c) for c in dataset.cases] == [ROW_1, ROW_2]


def test_csv_list_separator(tmp_path: Path) -> None:
    text = (
        "answer,ctx,retrieved,called,expected\n"
        "a,Paris is in France.,doc one; doc two ;,search;book,search\n"
        "b,c,r,,search;search\n"
    )
    dataset = _load(
        _write(tmp_path, "d.csv", text),
        list_separator=";",
        fields={
            "actual_output": "answer",
            "context": "ctx",
            "retrieval_context": "retrieved",
            "tools_called": "called",
            "expected_tools": "expected",
        },
    )
    assert [_fields(c) for c in dataset.cases] == [ROW_1, ROW_2]  # an empty cell splits into []


def test_jsonl_and_yaml_lists(tmp_path: Path) -> None:
    jsonl = "\n".join(json.dumps({"actual_output": o, **row}) for o, row in (("a", ROW_1), ("b", ROW_2))) + "\n"
    assert [_fields(c) for c in _load(_write(tmp_path, "d.jsonl", jsonl)).cases] == [ROW_1, ROW_2]
    yaml_text = (
        "test_cases:\n"
        "  - actual_output: a\n    context: [Paris is in France.]\n    retrieval_context: [doc one, doc two]\n"
        "    tools_called: [search, book]\n    expected_tools: [search]\n"
        "  - actual_output: b\n    context: [c]\n    retrieval_context: [r]\n    tools_called: []\n"
        "    expected_tools:\n      - search\n      - search\n"
    )
    assert [_fields(c) for c in _load(_write(tmp_path, "d.yaml", yaml_text)).cases] == [ROW_1, ROW_2]


def test_absent_columns_leave_the_fields_none(tmp_path: Path) -> None:
    dataset = _load(_write(tmp_path, "d.jsonl", '{"actual_output": "a", "expected_tools": []}\n'))
    assert _fields(dataset.cases[0]) == {**dict.fromkeys(LIST_FIELDS), "expected_tools": []}


@pytest.mark.parametrize("name", LIST_FIELDS)
def test_wrong_types_name_file_row_and_column(tmp_path: Path, name: str) -> None:
    path = _write(
        tmp_path,
        "d.yaml",
        f"- actual_output: a\n  {name}: [x]\n- actual_output: b\n  {name}: 5\n- actual_output: c\n  {name}: [x, 3]\n",
    )
    with pytest.raises(DatasetError) as info:
        _load(path)
    problems = info.value.problems
    assert [(p.source, p.location, p.field, p.message) for p in problems] == [
        (str(path), "item 1", name, "must be a list of strings, got number"),
        (str(path), "item 2", name, "must be a list of strings"),
    ]
    assert f"{path}, item 1" in str(info.value) and f"'{name}'" in str(info.value)

    csv_path = _write(tmp_path, "d.csv", 'actual_output,col\na,"[""ok""]"\nb,not json\n')
    with pytest.raises(DatasetError) as info:
        _load(csv_path, fields={name: "col"})
    [problem] = info.value.problems
    assert (problem.source, problem.location, problem.field) == (str(csv_path), "line 3", "col")
    assert problem.message == "must hold a JSON array of strings (or set dataset.list_separator)"

    jsonl_path = _write(tmp_path, "d.jsonl", json.dumps({"actual_output": "a", name: "one string"}) + "\n")
    with pytest.raises(DatasetError) as info:
        _load(jsonl_path)
    [problem] = info.value.problems
    assert (problem.location, problem.field) == ("line 1", name)
    assert "list_separator" in problem.message


def test_suite_maps_the_fields(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text(
        json.dumps({"actual_output": "a", "called": ["t"], "tools": ["t", "u"]}) + "\n", encoding="utf-8"
    )
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: s\ndataset:\n  path: d.jsonl\n  fields: {tools_called: called, expected_tools: tools}\n"
        "metrics:\n  - metric: LengthCheckMetric\n",
        encoding="utf-8",
    )
    loaded = load_suite(suite)
    dataset = load_dataset(loaded.suite.dataset, suite.parent)
    assert (dataset.cases[0].tools_called, dataset.cases[0].expected_tools) == (["t"], ["t", "u"])


def test_cache_key_covers_the_new_fields() -> None:
    metric = LengthCheckMetric()

    def key(**fields: list[str]) -> str:
        case = EvalTestCase(actual_output="a", expected_tools=["search"], **fields)
        return score_batch_inputs_key(
            None, {"metric": metric, "cases": [case], "vectors": None, "metric_key": metric.cache_key()}
        )

    base = key(tools_called=["search"])
    assert key(tools_called=["search"]) == base  # stable
    changed = {
        key(tools_called=["book"]),
        key(tools_called=["search", "search"]),
        key(tools_called=[]),
        key(),
        key(tools_called=["search"], context=["c"]),
        key(tools_called=["search"], retrieval_context=["r"]),
    }
    assert base not in changed and len(changed) == 6
