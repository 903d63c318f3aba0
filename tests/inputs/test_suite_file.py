"""The suite file (docs/suite.md#suite-file): loading, the shipped JSON Schema, and config errors with exact locations."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from evaltasks import LengthCheckMetric, ReferenceMatchMetric
from evaltasks.errors import ConfigError, Problem
from evaltasks.inputs.suite import load_suite, plain_description, suite_json_schema

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart" / "suite.yaml"
TRUTHFULQA = REPO / "examples" / "truthfulqa" / "suite.yaml"
SCHEMA_FILE = REPO / "evaltasks" / "schema" / "suite.schema.json"

DATASET = "dataset:\n  path: d.jsonl\n"


def _write_suite(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "d.jsonl").write_text('{"actual_output": "x", "references": ["r"]}\n', encoding="utf-8")
    return path


def _problems(path: Path) -> list[Problem]:
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert isinstance(info.value, ValueError)
    for problem in info.value.problems:
        assert problem.source == str(path)
    return info.value.problems


# --- a valid suite -----------------------------------------------------------------------------------------


def test_quickstart_suite_loads() -> None:
    loaded = load_suite(QUICKSTART)
    suite = loaded.suite
    assert suite.name == "quickstart"
    assert suite.dataset.path == "answers.jsonl"
    assert suite.dataset.fields.model_dump() == {
        "actual_output": "answer",
        "input": "question",
        "expected_output": None,
        "references": "references",
        "context": None,
        "retrieval_context": None,
        "tools_called": None,
        "expected_tools": None,
        "planning_steps": None,
        "execution_trace": None,
        "tool_calls": None,
        "expected_tool_calls": None,
        "multi_outputs": None,
        "agent_confidence": None,
        "id": "id",
        "turns": None,
        "chatbot_role": None,
    }
    assert suite.gate.min_pass_rate == 0.7
    assert loaded.path == QUICKSTART.resolve()
    assert loaded.sha256 == hashlib.sha256(QUICKSTART.read_bytes()).hexdigest()
    assert loaded.dataset_path == (QUICKSTART.parent / "answers.jsonl").resolve()

    rm, lc = loaded.metrics
    assert isinstance(rm, ReferenceMatchMetric) and isinstance(lc, LengthCheckMetric)
    assert (rm.name, rm.threshold, rm.embedding_provider, rm.model_name, rm.aggregation, rm.references) == (
        "ReferenceMatchMetric",
        0.6,
        "local",
        "all-MiniLM-L6-v2",
        "max",
        None,
    )
    assert (lc.name, lc.threshold, lc.min_length, lc.max_length, lc.unit) == ("LengthCheckMetric", 1.0, 0, 30, "words")


def test_defaults_name_and_gate(tmp_path: Path) -> None:
    path = _write_suite(
        tmp_path,
        f"name: s\n{DATASET}metrics:\n  - metric: LengthCheckMetric\n    name: short\n"
        "  - metric: LengthCheckMetric\n    unit: words\n",
    )
    loaded = load_suite(path)
    assert loaded.suite.gate.min_pass_rate == 1.0
    assert loaded.suite.dataset.fields.actual_output == "actual_output"
    assert [m.name for m in loaded.metrics] == ["short", "LengthCheckMetric"]
    assert loaded.dataset_path == tmp_path.resolve() / "d.jsonl"


# --- the JSON Schema ------------------------------------------------------------------------------------


def test_shipped_schema_equals_the_generated_one() -> None:
    shipped = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert shipped == suite_json_schema(), (
        "evaltasks/schema/suite.schema.json is stale; regenerate it with\n"
        "  python -m evaltasks.cli schema > evaltasks/schema/suite.schema.json"
    )


EXAMPLE_SUITES = sorted((REPO / "examples").glob("*/suite.yaml"))


@pytest.mark.parametrize("suite_file", EXAMPLE_SUITES, ids=[p.parent.name for p in EXAMPLE_SUITES])
def test_schema_validates_the_example_suites(suite_file: Path) -> None:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load(suite_file.read_text(encoding="utf-8")))


@pytest.mark.parametrize(
    "change",
    [
        {"datset": {"path": "a.csv"}},  # unknown top-level key
        {"metrics": []},  # at least one metric
        {"metrics": [{"metric": "NoSuchMetric"}]},  # metric names are an enum
        {"gate": {"min_pass_rate": 1.5}},
        {"dataset": {"path": "a.csv", "feilds": {}}},
    ],
)
def test_schema_rejects_invalid_suites(change: dict) -> None:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    data = yaml.safe_load(QUICKSTART.read_text(encoding="utf-8"))
    data.update(change)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(data)


# Metric entries the CLI refuses, each for one argument: the schema must refuse them too.
REFUSED_ENTRIES = [
    {"metric": "ContainsMetric"},
    {"metric": "ContainsMetric", "keywords": None},
    {"metric": "ContainsMetric", "keywords": "abc"},
    {"metric": "ContainsMetric", "keywords": []},
    {"metric": "ContainsMetric", "keywords": [""]},
    {"metric": "ContainsMetric", "keywords": ["a", None]},
    {"metric": "ContainsMetric", "keywords": ["a"], "mode": "some"},
    {"metric": "StartsWithMetric"},
    {"metric": "StartsWithMetric", "prefix": ""},
    {"metric": "EndsWithMetric"},
    {"metric": "EndsWithMetric", "suffix": ""},
    {"metric": "RegexMatchMetric"},
    {"metric": "RegexMatchMetric", "pattern": ""},
    {"metric": "RegexMatchMetric", "pattern": "a", "timeout_s": 0},
    {"metric": "RegexMatchMetric", "pattern": "a", "timeout_s": -1},
    {"metric": "FormatCheckMetric"},
    {"metric": "FormatCheckMetric", "format_type": "ipv4"},
    {"metric": "FormatCheckMetric", "format_type": "EMAIL"},
    {"metric": "JsonSchemaMetric"},
    {"metric": "JsonSchemaMetric", "schema": None},
    {"metric": "LanguageDetectionMetric", "expected_language": "xx"},
    {"metric": "LanguageDetectionMetric", "expected_language": "EN"},
    {"metric": "LanguageDetectionMetric", "expected_language": "eng"},
    {"metric": "LanguageDetectionMetric", "min_confidence": 2},
    {"metric": "LanguageDetectionMetric", "min_confidence": -0.1},
    {"metric": "LengthCheckMetric", "min_length": -1},
    {"metric": "LengthCheckMetric", "max_length": -1},
    {"metric": "LengthCheckMetric", "unit": "tokens"},
    {"metric": "ReferenceMatchMetric", "references": [], "embedding_provider": "local"},
    {"metric": "ReferenceMatchMetric", "references": [""], "embedding_provider": "local"},
    {"metric": "ReferenceMatchMetric", "references": ["a"], "aggregation": "min", "embedding_provider": "local"},
    {"metric": "SemanticSimilarityMetric", "embedding_provider": "foo"},
    {"metric": "ExactMatchMetric", "threshold": 1.5},
]
# Entries both accept: the schema's constraints are no stricter than the CLI.
ACCEPTED_ENTRIES = [
    {"metric": "ContainsMetric", "keywords": ["a", "b"], "mode": "all", "case_sensitive": False},
    {"metric": "StartsWithMetric", "prefix": "Dear", "threshold": 0.0},
    {"metric": "RegexMatchMetric", "pattern": "\\bA-\\d{4}\\b", "full_match": True, "timeout_s": None},
    {"metric": "RegexMatchMetric", "pattern": "a", "timeout_s": 0.5},
    {"metric": "FormatCheckMetric", "format_type": "uuid"},
    {"metric": "JsonSchemaMetric", "schema": {"type": "object"}},
    {"metric": "LanguageDetectionMetric", "expected_language": "fr", "min_confidence": 0},
    {"metric": "LengthCheckMetric", "min_length": 0, "max_length": 0, "unit": "words"},
    {"metric": "ReferenceMatchMetric", "references": ["a"], "aggregation": "mean", "embedding_provider": "local"},
]


def _entry_suite(tmp_path: Path, entry: dict) -> tuple[dict, Path]:
    data = {"name": "s", "dataset": {"path": "d.jsonl"}, "metrics": [entry]}
    return data, _write_suite(tmp_path, yaml.safe_dump(data))


@pytest.mark.parametrize("entry", REFUSED_ENTRIES, ids=lambda e: json.dumps(e)[11:70])
def test_schema_refuses_the_metric_arguments_the_cli_refuses(tmp_path: Path, entry: dict) -> None:
    data, path = _entry_suite(tmp_path, entry)
    with pytest.raises(ConfigError):
        load_suite(path)
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(data)


@pytest.mark.parametrize("entry", ACCEPTED_ENTRIES, ids=lambda e: json.dumps(e)[11:70])
def test_schema_accepts_the_metric_arguments_the_cli_accepts(tmp_path: Path, entry: dict) -> None:
    data, path = _entry_suite(tmp_path, entry)
    assert len(load_suite(path).metrics) == 1
    jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))).validate(data)


def test_schema_lists_required_arguments_and_enumerations() -> None:
    branches = {b["title"]: b for b in suite_json_schema()["$defs"]["MetricSpec"]["oneOf"]}
    assert {title: b["required"] for title, b in branches.items() if b["required"] != ["metric"]} == {
        "ContainsMetric": ["metric", "keywords"],
        "StartsWithMetric": ["metric", "prefix"],
        "EndsWithMetric": ["metric", "suffix"],
        "RegexMatchMetric": ["metric", "pattern"],
        "FormatCheckMetric": ["metric", "format_type"],
        "JsonSchemaMetric": ["metric", "schema"],
        "GEvalMetric": ["metric", "threshold"],
        "CustomEvalMetric": ["metric", "threshold"],
        "LatencyMetric": ["metric", "max_ms"],
        "CostMetric": ["metric", "max_cost"],
    }
    assert branches["FormatCheckMetric"]["properties"]["format_type"]["enum"] == [
        "email",
        "phone",
        "date",
        "url",
        "datetime",
        "uuid",
    ]
    languages = branches["LanguageDetectionMetric"]["properties"]["expected_language"]["enum"]
    assert len(languages) == 119 and {"en", "fr", "zh"} <= set(languages) and "ceb" not in languages


def test_schema_descriptions_are_plain_text() -> None:
    """Editors show descriptions in hovers: reST markup (double backticks, Sphinx roles) is rendered."""
    text = json.dumps(suite_json_schema())
    assert "``" not in text and ":data:" not in text and ":class:" not in text and ":func:" not in text
    assert plain_description(
        '``"any"`` (default); one of :data:`ISO_639_1_CODES`, see :class:`~evaltasks.a.B` and :func:`evaltasks.c.d`'
    ) == ('`"any"` (default); one of `ISO_639_1_CODES`, see `B` and `evaltasks.c.d`')


# --- errors, each located -----------------------------------------------------------------------------------


def test_suite_file_not_found(tmp_path: Path) -> None:
    assert _problems(tmp_path / "missing.yaml") == [
        Problem(str(tmp_path / "missing.yaml"), "", "", "suite file not found"),
    ]


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = _write_suite(tmp_path, f"name: s\n{DATASET}metrics: [\n  - metric: LengthCheckMetric\n")
    [problem] = _problems(path)
    assert problem.location == "line 5"
    assert problem.message.startswith("invalid YAML")
    assert str(problem).startswith(f"{path}, line 5: invalid YAML")


def test_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = _write_suite(tmp_path, "- just\n- a list\n")
    [problem] = _problems(path)
    assert "mapping" in problem.message


def test_unknown_top_level_key_suggests_the_known_one(tmp_path: Path) -> None:
    path = _write_suite(tmp_path, "name: s\ndatset:\n  path: d.jsonl\nmetrics:\n  - metric: LengthCheckMetric\n")
    problems = _problems(path)
    assert Problem(str(path), "", "datset", "unknown key (did you mean 'dataset'?)") in problems
    assert Problem(str(path), "", "dataset", "is required") in problems
    assert len(problems) == 2


def test_unknown_nested_keys_are_located(tmp_path: Path) -> None:
    path = _write_suite(
        tmp_path,
        "name: s\ndataset:\n  path: d.jsonl\n  feilds: {}\n  fields: {inptu: a}\nmetrics:\n"
        "  - metric: LengthCheckMetric\ngate:\n  min_pass: 1\n",
    )
    assert sorted(_problems(path), key=lambda p: p.location) == [
        Problem(str(path), "dataset", "feilds", "unknown key (did you mean 'fields'?)"),
        Problem(str(path), "dataset.fields", "inptu", "unknown key (did you mean 'input'?)"),
        Problem(str(path), "gate", "min_pass", "unknown key (did you mean 'min_pass_rate'?)"),
    ]


def test_unknown_metric_suggests_the_known_one(tmp_path: Path) -> None:
    path = _write_suite(
        tmp_path, f"name: s\n{DATASET}metrics:\n  - metric: LengthCheckMetric\n  - metric: RefrenceMatchMetric\n"
    )
    [problem] = _problems(path)
    assert (problem.location, problem.field) == ("metrics[1]", "metric")
    assert "unknown metric 'RefrenceMatchMetric'" in problem.message
    assert "did you mean 'ReferenceMatchMetric'?" in problem.message


def test_unknown_metric_argument_suggests_the_known_one(tmp_path: Path) -> None:
    path = _write_suite(tmp_path, f"name: s\n{DATASET}metrics:\n  - metric: LengthCheckMetric\n    max_lenght: 3\n")
    [problem] = _problems(path)
    assert problem.location == "metrics[0]"
    assert "unknown argument 'max_lenght' for LengthCheckMetric" in problem.message
    assert "did you mean 'max_length'?" in problem.message


@pytest.mark.parametrize(
    ("entry", "field", "message"),
    [
        ("    unit: tokens\n", "unit", "must be one of ['chars', 'words'], got 'tokens'"),
        ("    min_length: 5\n    max_length: 2\n", "min_length", "(5) must be <= max_length (2)"),
        ("    threshold: high\n", "threshold", "must be a number in [0, 1], got 'high'"),
        ("    min_length: -1\n", "min_length", "must be >= 0, got -1"),
    ],
    ids=["unit", "min-gt-max", "threshold-high", "negative"],
)
def test_invalid_metric_arguments_name_the_argument(tmp_path: Path, entry: str, field: str, message: str) -> None:
    path = _write_suite(tmp_path, f"name: s\n{DATASET}metrics:\n  - metric: LengthCheckMetric\n{entry}")
    assert _problems(path) == [Problem(str(path), "metrics[0]", field, message)]


def test_reference_match_threshold_high(tmp_path: Path) -> None:
    path = _write_suite(
        tmp_path,
        f"name: s\n{DATASET}metrics:\n  - metric: ReferenceMatchMetric\n"
        "    embedding_provider: local\n    threshold: high\n",
    )
    [problem] = _problems(path)
    assert (problem.location, problem.field) == ("metrics[0]", "threshold")


def test_two_metrics_with_the_same_name(tmp_path: Path) -> None:
    path = _write_suite(
        tmp_path,
        f"name: s\n{DATASET}metrics:\n  - metric: LengthCheckMetric\n"
        "  - metric: LengthCheckMetric\n    unit: words\n"
        "  - metric: LengthCheckMetric\n    name: LengthCheckMetric\n",
    )
    problems = _problems(path)
    assert [(p.location, p.field) for p in problems] == [("metrics[1]", "name"), ("metrics[2]", "name")]
    assert all("'LengthCheckMetric' is already used by metrics[0]" in p.message for p in problems)


def test_missing_dataset_key(tmp_path: Path) -> None:
    path = _write_suite(tmp_path, "name: s\nmetrics:\n  - metric: LengthCheckMetric\n")
    assert _problems(path) == [Problem(str(path), "", "dataset", "is required")]


def test_missing_dataset_path(tmp_path: Path) -> None:
    path = _write_suite(tmp_path, "name: s\ndataset:\n  fields: {}\nmetrics:\n  - metric: LengthCheckMetric\n")
    assert _problems(path) == [Problem(str(path), "dataset", "path", "is required")]


@pytest.mark.parametrize("name", ["d.txt", "d.xlsx", "d"])
def test_wrong_dataset_extension(tmp_path: Path, name: str) -> None:
    path = _write_suite(tmp_path, f"name: s\ndataset:\n  path: {name}\nmetrics:\n  - metric: LengthCheckMetric\n")
    [problem] = _problems(path)
    assert (problem.location, problem.field) == ("dataset", "path")
    assert problem.message == f"must end in one of .csv, .jsonl, .json, .yaml, .yml: '{name}'"


def test_gate_out_of_range(tmp_path: Path) -> None:
    path = _write_suite(
        tmp_path, f"name: s\n{DATASET}metrics:\n  - metric: LengthCheckMetric\ngate:\n  min_pass_rate: 1.5\n"
    )
    [problem] = _problems(path)
    assert (problem.location, problem.field) == ("gate", "min_pass_rate")


def test_empty_list_separator(tmp_path: Path) -> None:
    path = _write_suite(
        tmp_path, "name: s\ndataset:\n  path: d.csv\n  list_separator: ''\nmetrics:\n  - metric: LengthCheckMetric\n"
    )
    assert _problems(path) == [Problem(str(path), "dataset", "list_separator", "must not be empty")]


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = _write_suite(
        tmp_path,
        "name: s\ndataset:\n  path: d.txt\nmetrics:\n  - metric: LengthChekMetric\n"
        "  - metric: LengthCheckMetric\n    unit: tokens\nextra: 1\n",
    )
    problems = _problems(path)
    assert {(p.location, p.field) for p in problems} == {
        ("dataset", "path"),
        ("", "extra"),
        ("metrics[0]", "metric"),
        ("metrics[1]", "unit"),
    }


def test_openai_without_key_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = _write_suite(tmp_path, f"name: s\n{DATASET}metrics:\n  - metric: ReferenceMatchMetric\n")
    [problem] = _problems(path)
    assert (problem.location, problem.field) == ("metrics[0]", "embedding_provider")
    assert "OPENAI_API_KEY" in problem.message and "local" in problem.message


def test_aliases_that_share_a_few_values_still_load(tmp_path: Path) -> None:
    """Anchors and aliases are allowed (merge keys too); only an expansion beyond MAX_ALIAS_EXPANSION is refused."""
    path = _write_suite(
        tmp_path,
        "name: shared\n" + DATASET + "metrics:\n"
        "  - &words {metric: LengthCheckMetric, unit: words, min_length: 1, max_length: 5}\n"
        "  - {<<: *words, name: chars, unit: chars}\n",
    )
    loaded = load_suite(path)
    assert [(m.name, m.unit, m.min_length, m.max_length) for m in loaded.metrics] == [
        ("LengthCheckMetric", "words", 1, 5),
        ("chars", "chars", 1, 5),
    ]


@pytest.mark.parametrize(
    "block, where, field, message",
    [
        ("gate: {min_pass_rate: true}", "gate", "min_pass_rate", "must be a number, got True"),
        ("gate: {alpha: true}", "gate", "alpha", "must be a number, got True"),
        ("gate: {min_effect: false}", "gate", "min_effect", "must be a number, got False"),
        ("history: yes", "", "history", "must be a mapping with dir, window and drift (or left out), got True"),
    ],
)
def test_gate_numbers_and_the_history_block_refuse_booleans(
    tmp_path: Path, block: str, where: str, field: str, message: str
) -> None:
    """YAML's true/false are not 1.0/0.0 for a rate, a significance level or an effect size."""
    (tmp_path / "d.csv").write_text("actual_output\nx\n", encoding="utf-8")
    path = _write_suite(
        tmp_path,
        "name: s\ndataset: {path: d.csv}\nmetrics: [{metric: LengthCheckMetric, max_length: 3}]\n" + block + "\n",
    )
    [problem] = _problems(path)
    assert (problem.location, problem.field, problem.message) == (where, field, message)
