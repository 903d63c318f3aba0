"""Dataset loading (docs/suite.md#suite-file): formats, locations, ids, errors.

Every bad row must be reported before scoring, each naming the file, the 1-based physical line (CSV,
JSONL) or the 0-based item index (JSON, YAML), and the field.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from evaltasks.engine.run import plan_run
from evaltasks.errors import DatasetError, InputError, Problem
from evaltasks.inputs.datasets import load_dataset
from evaltasks.inputs.suite import DatasetSpec
from evaltasks.test_case import EvalTestCase

DATA = Path(__file__).parents[1] / "data"
FIELDS = {"input": "question", "actual_output": "answer", "references": "refs"}

Q_FRANCE = "What is the capital of France?"
Q_WATER = "Is water\nwet?"


def _id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


# The three rows of tests/data/cases.*, as test cases (outputs unstripped, references as lists).
EXPECTED_CASES = [
    EvalTestCase(input=Q_FRANCE, actual_output="Paris.", references=["Paris", "The capital is Paris"]),
    EvalTestCase(input=Q_WATER, actual_output="  Yes, it is.  ", references=["Yes"]),
    EvalTestCase(input=Q_FRANCE, actual_output="It is Paris, of course.", references=["Paris"]),
]
# Default ids: sha256(input)[:12]; the repeated question gets "#2".
EXPECTED_IDS = [_id(Q_FRANCE), _id(Q_WATER), _id(Q_FRANCE) + "#2"]


def _load(path: Path, **spec) -> object:
    return load_dataset(DatasetSpec(path=path.name, **spec), path.parent)


def _write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", newline="")
    return path


def _problems(exc_info: pytest.ExceptionInfo) -> list[Problem]:
    return exc_info.value.problems


# --- formats -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "spec", "locations"),
    [
        # CSV: 1-based physical line; the quoted record spanning lines 3-4 is named by its first line.
        ("cases_separator.csv", {"list_separator": ";"}, ["line 2", "line 3", "line 5"]),
        # CSV without list_separator: list cells hold JSON arrays.
        ("cases_json_cells.csv", {}, ["line 2", "line 3", "line 5"]),
        # JSONL: 1-based line; line 2 is blank.
        ("cases.jsonl", {}, ["line 1", "line 3", "line 4"]),
        # JSON and YAML: 0-based item index.
        ("cases.json", {}, ["item 0", "item 1", "item 2"]),
        ("cases.yaml", {}, ["item 0", "item 1", "item 2"]),
    ],
)
def test_every_format_gives_the_same_cases(name: str, spec: dict, locations: list[str]) -> None:
    path = DATA / name
    dataset = _load(path, fields=FIELDS, **spec)
    assert dataset.cases == EXPECTED_CASES
    assert dataset.ids == EXPECTED_IDS
    assert dataset.locations == locations
    assert dataset.path == path.resolve()
    assert dataset.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_yml_extension_reads_as_yaml(tmp_path: Path) -> None:
    path = _write(tmp_path, "cases.yml", (DATA / "cases.yaml").read_text(encoding="utf-8"))
    assert _load(path, fields=FIELDS).cases == EXPECTED_CASES


def test_list_separator_strips_items_and_drops_empties(tmp_path: Path) -> None:
    path = _write(tmp_path, "d.csv", 'answer,refs\nx," a ;b;; ; c d ;"\n')
    dataset = _load(path, fields={"actual_output": "answer", "references": "refs"}, list_separator=";")
    assert dataset.cases[0].references == ["a", "b", "c d"]


def test_list_separator_also_strips_json_list_items(tmp_path: Path) -> None:
    path = _write(tmp_path, "d.json", json.dumps([{"actual_output": "x", "references": [" a ", "", "b"]}]))
    assert _load(path, list_separator=";").cases[0].references == ["a", "b"]


def test_default_field_names_and_a_yaml_mapping_with_test_cases(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "d.yaml",
        "test_cases:\n  - input: q\n    actual_output: out\n    expected_output: exp\n    references: [r]\n",
    )
    dataset = _load(path)
    assert dataset.cases == [EvalTestCase(input="q", actual_output="out", expected_output="exp", references=["r"])]
    assert dataset.ids == [_id("q")]


def test_explicit_id_column_with_integer_ids(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "d.jsonl", '{"id": "first", "answer": "a"}\n{"id": 7, "answer": "b"}\n{"id": "", "answer": "c"}\n'
    )
    dataset = _load(path, fields={"id": "id", "actual_output": "answer"})
    assert dataset.ids == ["first", "7", _id("c")]  # an empty id falls back to the derived one
    assert [c.actual_output for c in dataset.cases] == ["a", "b", "c"]


def test_explicit_ids_repeated_are_an_error() -> None:
    """Results are matched by id (baselines): an explicit id used twice is a data error."""
    with pytest.raises(DatasetError) as info:
        _load(DATA / "cases_with_ids.jsonl", fields={"id": "id", "actual_output": "answer"})
    assert _problems(info) == [
        Problem(str(DATA / "cases_with_ids.jsonl"), "line 3", "id", "duplicate id 'first' (first at line 1)")
    ]


def test_duplicate_inputs_count_up(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "d.jsonl",
        "".join(
            json.dumps({"input": q, "actual_output": str(i)}) + "\n" for i, q in enumerate(["q", "q", "other", "q"])
        ),
    )
    assert _load(path).ids == [_id("q"), _id("q") + "#2", _id("other"), _id("q") + "#3"]


def test_crlf_line_endings_keep_physical_line_numbers(tmp_path: Path) -> None:
    csv_path = _write(tmp_path, "d.csv", 'input,actual_output\r\nq1,"multi\r\nline"\r\nq2,b\r\n')
    dataset = _load(csv_path)
    assert dataset.locations == ["line 2", "line 4"]
    assert [c.actual_output for c in dataset.cases] == ["multi\r\nline", "b"]
    jsonl_path = _write(tmp_path, "d.jsonl", '{"actual_output": "a"}\r\n\r\n{"actual_output": "b"}\r\n')
    assert _load(jsonl_path).locations == ["line 1", "line 3"]


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85", "\x0c", "\x0b", "\x1c", "\x1e"])
def test_unicode_line_separators_inside_csv_cells_do_not_split_rows(tmp_path: Path, char: str) -> None:
    """Only "\\n" ends a line: U+2028, NEL, form feed… may sit inside a model output (regression)."""
    output = f"first{char}second"
    csv_path = _write(tmp_path, "d.csv", f"input,actual_output\nq1,{output}\nq2,plain\n")
    dataset = _load(csv_path)
    assert [c.actual_output for c in dataset.cases] == [output, "plain"]
    assert dataset.locations == ["line 2", "line 3"]


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85"])
def test_unicode_line_separators_inside_jsonl_strings_do_not_split_lines(tmp_path: Path, char: str) -> None:
    """JSON allows these raw inside strings (json.dumps(ensure_ascii=False) writes them so) (regression)."""
    output = f"first{char}second"
    line = json.dumps({"actual_output": output}, ensure_ascii=False)
    assert char in line
    jsonl_path = _write(tmp_path, "d.jsonl", line + "\n" + json.dumps({"actual_output": "plain"}) + "\n")
    dataset = _load(jsonl_path)
    assert [c.actual_output for c in dataset.cases] == [output, "plain"]
    assert dataset.locations == ["line 1", "line 2"]


def test_utf8_bom_is_ignored(tmp_path: Path) -> None:
    path = _write(tmp_path, "d.csv", "\ufeffinput,actual_output\nq,é\n".encode("utf-8"))
    dataset = _load(path)
    assert dataset.cases == [EvalTestCase(input="q", actual_output="é")]


# --- errors ----------------------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as info:
        load_dataset(DatasetSpec(path="nope.jsonl"), tmp_path)
    assert _problems(info) == [
        Problem(str(tmp_path / "nope.jsonl"), "", "", "dataset file not found (dataset.path 'nope.jsonl' in the suite)")
    ]
    assert isinstance(info.value, ValueError)  # the Python API raises ValueError


def test_missing_csv_column_is_named_with_the_header(tmp_path: Path) -> None:
    path = _write(tmp_path, "d.csv", "question,answer\nq,a\n")
    with pytest.raises(DatasetError) as info:
        _load(path, fields={"input": "question", "actual_output": "model_answer"})
    [problem] = _problems(info)
    assert (problem.source, problem.location, problem.field) == (str(path), "line 1", "model_answer")
    assert "column not found" in problem.message and "question, answer" in problem.message


def test_output_key_in_no_row_is_one_problem_naming_the_keys(tmp_path: Path) -> None:
    """A wrong actual_output mapping is one problem listing the keys, like any other wrong mapping."""
    path = _write(tmp_path, "d.jsonl", '{"answer": "a"}\n{"answer": "b"}\n')
    with pytest.raises(DatasetError) as info:
        _load(path)
    assert _problems(info) == [
        Problem(str(path), "", "actual_output", "key not found in any row (dataset.fields.actual_output; keys: answer)")
    ]


def test_output_key_missing_from_some_rows_names_each_row(tmp_path: Path) -> None:
    path = _write(tmp_path, "d.jsonl", '{"answer": "a"}\n{"actual_output": "b"}\n{"answer": "c"}\n')
    with pytest.raises(DatasetError) as info:
        _load(path)
    assert [(p.location, p.field) for p in _problems(info)] == [
        ("line 1", "actual_output"),
        ("line 3", "actual_output"),
    ]


@pytest.mark.parametrize("name", ["d.jsonl", "d.json", "d.yaml"])
def test_mapped_key_absent_from_every_row_is_reported(tmp_path: Path, name: str) -> None:
    """A typo in dataset.fields (``questoin``) is an error, not silently missing inputs."""
    rows = [{"question": "q1", "answer": "a", 1: "non-string key"}, {"question": "q2", "answer": "b", "refs": ["r"]}]
    if name == "d.yaml":
        import yaml

        text = yaml.safe_dump(rows)
    else:
        for row in rows:
            row.pop(1, None)
        text = json.dumps(rows) if name == "d.json" else "".join(json.dumps(r) + "\n" for r in rows)
    path = _write(tmp_path, name, text)
    with pytest.raises(DatasetError) as info:
        _load(path, fields={"input": "questoin", "actual_output": "answer", "references": "refs", "id": "key"})
    problems = _problems(info)
    assert [(p.source, p.location, p.field) for p in problems] == [
        (str(path), "", "questoin"),
        (str(path), "", "key"),
    ]
    assert "key not found in any row (dataset.fields.input; keys: " in problems[0].message
    assert "answer, question, refs" in problems[0].message
    # A key present in some rows only is fine: rows without it simply lack that field.
    dataset = _load(path, fields={"input": "question", "actual_output": "answer", "references": "refs"})
    assert [c.references for c in dataset.cases] == [None, ["r"]]


def test_ragged_csv_rows(tmp_path: Path) -> None:
    path = _write(tmp_path, "d.csv", "input,actual_output\nq1,a\nq2\nq3,b,extra\nq4,c\n")
    with pytest.raises(DatasetError) as info:
        _load(path)
    assert [(p.location, p.field, p.message) for p in _problems(info)] == [
        ("line 3", "actual_output", "is missing: the row has 1 cells but the header has 2"),
        ("line 4", "", "has 3 cells but the header has 2"),
    ]


def test_null_and_non_string_outputs(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "d.json",
        json.dumps(
            [
                {"actual_output": "fine"},
                {"actual_output": None},
                {"actual_output": 42},
                {"actual_output": 1.5},
                {"actual_output": ["x"]},
                {"input": "no output"},
            ]
        ),
    )
    with pytest.raises(DatasetError) as info:
        _load(path)
    problems = _problems(info)
    assert [(p.source, p.location, p.field) for p in problems] == [
        (str(path), f"item {i}", "actual_output") for i in (1, 2, 3, 4, 5)
    ]
    assert "missing or null" in problems[0].message
    assert problems[1].message == "must be a string, got number"
    assert problems[2].message == "must be a string, got number"
    assert problems[3].message == "must be a string, got array"
    assert "missing or null" in problems[4].message
    text = str(info.value)
    assert f"{path}, item 2: field 'actual_output'" in text


def test_non_string_text_field_and_bad_id(tmp_path: Path) -> None:
    path = _write(tmp_path, "d.jsonl", '{"actual_output": "x", "input": 3}\n{"actual_output": "x", "id": true}\n')
    with pytest.raises(DatasetError) as info:
        _load(path, fields={"id": "id"})
    assert [(p.location, p.field) for p in _problems(info)] == [("line 1", "input"), ("line 2", "id")]


def test_list_field_that_is_not_a_list(tmp_path: Path) -> None:
    yaml_path = _write(
        tmp_path,
        "d.yaml",
        "- actual_output: a\n  references: [r]\n- actual_output: b\n  references: 5\n"
        "- actual_output: c\n  references: [r, 3]\n",
    )
    with pytest.raises(DatasetError) as info:
        _load(yaml_path)
    problems = _problems(info)
    assert [(p.location, p.field) for p in problems] == [("item 1", "references"), ("item 2", "references")]
    assert problems[0].message == "must be a list of strings, got number"
    assert problems[1].message == "must be a list of strings"

    jsonl_path = _write(tmp_path, "d.jsonl", '{"actual_output": "a", "references": "one string"}\n')
    with pytest.raises(DatasetError) as info:
        _load(jsonl_path)
    [problem] = _problems(info)
    assert (problem.location, problem.field) == ("line 1", "references")
    assert "list_separator" in problem.message

    csv_path = _write(tmp_path, "d.csv", 'actual_output,references\na,"[""ok""]"\nb,not json\nc,"{""a"": 1}"\n')
    with pytest.raises(DatasetError) as info:
        _load(csv_path)
    assert [(p.location, p.field) for p in _problems(info)] == [("line 3", "references"), ("line 4", "references")]
    assert all("JSON array" in p.message for p in _problems(info))


def test_broken_jsonl_lines_and_non_objects(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "d.jsonl", '{"actual_output": "ok"}\n{"actual_output": "x"\n\n[1, 2]\n{"actual_output": "y"}\n'
    )
    with pytest.raises(DatasetError) as info:
        _load(path)
    problems = _problems(info)
    assert [p.location for p in problems] == ["line 2", "line 4"]
    assert problems[0].message.startswith("invalid JSON")
    assert problems[1].message == "must be a JSON object, got array"


def test_broken_json_and_yaml_files_name_the_line(tmp_path: Path) -> None:
    json_path = _write(tmp_path, "d.json", '[\n  {"actual_output": "a"},\n  {"actual_output": }\n]\n')
    with pytest.raises(DatasetError) as info:
        _load(json_path)
    [problem] = _problems(info)
    assert problem.location == "line 3" and problem.message.startswith("invalid JSON")
    yaml_path = _write(tmp_path, "d.yaml", "- actual_output: a\n- actual_output: [b\n- actual_output: c\n")
    with pytest.raises(DatasetError) as info:
        _load(yaml_path)
    [problem] = _problems(info)
    assert problem.location.startswith("line ") and problem.message.startswith("invalid YAML")


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("d.jsonl", ""),
        ("d.jsonl", "\n\n"),
        ("d.csv", ""),
        ("d.csv", "input,actual_output\n"),
        ("d.json", "[]"),
        ("d.yaml", "[]\n"),
    ],
)
def test_empty_dataset(tmp_path: Path, name: str, content: str) -> None:
    path = _write(tmp_path, name, content)
    with pytest.raises(DatasetError) as info:
        _load(path)
    assert _problems(info) == [Problem(str(path), "", "", "the dataset has no rows")]


def test_not_a_list_of_objects(tmp_path: Path) -> None:
    path = _write(tmp_path, "d.json", '{"actual_output": "x"}')
    with pytest.raises(DatasetError) as info:
        _load(path)
    assert "list of objects" in _problems(info)[0].message


def test_non_utf8_bytes_name_the_line(tmp_path: Path) -> None:
    prefix = b'{"actual_output": "ok"}\n{"actual_output": "caf'
    path = _write(tmp_path, "d.jsonl", prefix + b'\xe9"}\n')
    with pytest.raises(DatasetError) as info:
        _load(path)
    [problem] = _problems(info)
    assert (problem.source, problem.location) == (str(path), "line 2")
    assert problem.message == f"is not UTF-8 text (byte {len(prefix)})"


def test_many_bad_rows_are_reported_at_once(tmp_path: Path) -> None:
    rows = [{"actual_output": "ok"}] + [{"actual_output": i} for i in range(25)] + [{"actual_output": None}]
    path = _write(tmp_path, "d.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError) as info:
        _load(path)
    problems = _problems(info)
    assert len(problems) == 26
    assert [p.location for p in problems] == [f"line {n}" for n in range(2, 28)]
    text = str(info.value)
    lines = text.splitlines()
    assert lines[0] == "invalid dataset: 26 problem(s)"
    assert len([line for line in lines if line.startswith("  - ")]) == 20
    assert lines[-1] == "  ... and 6 more"
    assert f"{path}, line 21: field 'actual_output'" in text  # the 20th shown
    assert f"{path}, line 22:" not in text


# --- validation against the metrics (plan_run: before anything is scored) -----------------------------------


def _suite(tmp_path: Path, dataset_name: str, metrics: str, fields: str = "") -> Path:
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: t\ndataset:\n  path: {dataset_name}\n{fields}metrics:\n{metrics}", encoding="utf-8")
    return suite


def test_cases_missing_references_are_reported_with_line_and_field(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "d.jsonl",
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {"actual_output": "a", "references": ["r"]},
                {"actual_output": "b"},
                {"actual_output": "c", "references": []},
                {"actual_output": "d", "references": ["r", "  "]},
            ]
        ),
    )
    suite = _suite(tmp_path, "d.jsonl", "  - metric: ReferenceMatchMetric\n    embedding_provider: local\n")
    with pytest.raises(DatasetError) as info:
        plan_run(suite)
    problems = _problems(info)
    assert [(p.source, p.location, p.field) for p in problems] == [
        (str(tmp_path / "d.jsonl"), "line 2", "references"),
        (str(tmp_path / "d.jsonl"), "line 3", "references"),
        (str(tmp_path / "d.jsonl"), "line 4", "references"),
    ]
    assert all("ReferenceMatchMetric" in p.message for p in problems)


def test_metric_with_its_own_references_needs_none_from_cases(tmp_path: Path) -> None:
    _write(tmp_path, "d.jsonl", '{"actual_output": "a"}\n')
    suite = _suite(
        tmp_path,
        "d.jsonl",
        "  - metric: ReferenceMatchMetric\n    embedding_provider: local\n    references: [r]\n",
    )
    plan = plan_run(suite)
    assert [c.actual_output for c in plan.dataset.cases] == ["a"]


def test_plan_run_reports_dataset_errors_as_input_errors(tmp_path: Path) -> None:
    _write(tmp_path, "d.jsonl", '{"actual_output": 1}\n')
    with pytest.raises(InputError):
        plan_run(_suite(tmp_path, "d.jsonl", "  - metric: LengthCheckMetric\n"))


def test_truthfulqa_dataset_loads_unstripped(truthfulqa_dir: Path) -> None:
    import csv

    path = truthfulqa_dir / "davinci_answers.csv"
    dataset = load_dataset(
        DatasetSpec(
            path=path.name,
            fields={"input": "question", "actual_output": "model_answer", "references": "correct_answers"},
            list_separator=";",
        ),
        truthfulqa_dir,
    )
    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(dataset.cases) == 817
    for row, case in zip(rows, dataset.cases):
        assert case.actual_output == row["model_answer"]
        assert case.input == row["question"]
        assert case.references == [r.strip() for r in row["correct_answers"].split(";") if r.strip()]
    assert dataset.cases[0].actual_output.startswith(" A: ")  # taken as is, unstripped
    assert len(set(dataset.ids)) == 817


def test_format_comes_from_the_name_the_suite_gives_not_a_symlink_target(tmp_path: Path) -> None:
    """data.jsonl -> blob.csv reads as JSONL, and faq.txt -> blob.jsonl as one reference per line
    (docs/suite.md#suite-file: "format from the extension" of the path the suite names)."""
    rows = [{"input": "q1", "actual_output": "a, b", "id": "x"}, {"input": "q2", "actual_output": "c", "id": "y"}]
    (tmp_path / "blob.csv").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "data.jsonl").symlink_to("blob.csv")
    (tmp_path / "blob.jsonl").write_text('{"not": "json lines"}\nsecond reference\n', encoding="utf-8")
    (tmp_path / "faq.txt").symlink_to("blob.jsonl")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: linked\ndataset: {path: data.jsonl}\nreference_sets: {faq: faq.txt}\nmetrics:\n"
        "  - {metric: LengthCheckMetric}\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: faq}\n",
        encoding="utf-8",
    )
    plan = plan_run(suite)
    assert plan.dataset.ids == ["x", "y"]
    assert [(c.input, c.actual_output) for c in plan.dataset.cases] == [("q1", "a, b"), ("q2", "c")]
    assert plan.suite.metrics[1].reference_set.texts == ('{"not": "json lines"}', "second reference")
