"""Conversation datasets (docs/conversations.md#conversation-datasets): a ``turns`` list per row in JSONL, JSON or
YAML, each turn's keys mapped like a case's fields; CSV refused; a bad turn named by file, row and field; ids of
unnamed conversations hashed from every turn; each metric's ``case_kind`` checked against the dataset when the
suite is planned, naming the metric.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from evaltasks.engine.run import plan_run
from evaltasks.errors import ConfigError, DatasetError
from evaltasks.inputs.datasets import load_dataset
from evaltasks.inputs.suite import DatasetSpec, load_suite
from evaltasks.test_case import ConversationalEvalTestCase, EvalTestCase

ROWS = [
    {
        "id": "refund",
        "chatbot_role": "a polite support agent",
        "turns": [
            {"question": "I want a refund", "answer": "Sure, what is the order number?", "expected_output": "order"},
            {"question": "It is 42", "answer": "Refund for order 42 is on its way.", "retrieval_context": ["r1"]},
        ],
    },
    {"name": "greeting", "turns": [{"question": "Hi", "answer": "Hello!"}]},
    {"turns": [{"question": "Hi", "answer": "Hello!"}, {"question": "Bye", "answer": "Goodbye."}]},
]
FIELDS = {"input": "question", "actual_output": "answer"}


def _sha12(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _write(path: Path, rows: list) -> Path:
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(rows, allow_unicode=True), encoding="utf-8")
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".yaml"])
def test_each_format_loads_turns_role_and_ids(tmp_path: Path, suffix: str) -> None:
    _write(tmp_path / f"chats{suffix}", ROWS)
    dataset = load_dataset(DatasetSpec(path=f"chats{suffix}", fields=FIELDS), tmp_path)
    first = dataset.cases[0]
    assert isinstance(first, ConversationalEvalTestCase)
    assert first.chatbot_role == "a polite support agent"
    assert first.turns == [
        EvalTestCase(input="I want a refund", actual_output="Sure, what is the order number?", expected_output="order"),
        EvalTestCase(input="It is 42", actual_output="Refund for order 42 is on its way.", retrieval_context=["r1"]),
    ]
    # the conversation's input and output are its last turn's
    assert (first.input, first.actual_output) == ("It is 42", "Refund for order 42 is on its way.")
    # explicit id, then the row's name, then sha256 of every turn's (input, output) as compact JSON
    derived = _sha12('[["Hi","Hello!"],["Bye","Goodbye."]]')
    assert dataset.ids == ["refund", "greeting", derived]
    assert dataset.locations == (
        ["line 1", "line 2", "line 3"] if suffix == ".jsonl" else ["item 0", "item 1", "item 2"]
    )


def test_two_conversations_sharing_their_last_turn_keep_distinct_ids(tmp_path: Path) -> None:
    rows = [
        {"turns": [{"input": "Hi", "actual_output": "Hello"}, {"input": "Price?", "actual_output": "10 EUR"}]},
        {"turns": [{"input": "Hey", "actual_output": "Hello"}, {"input": "Price?", "actual_output": "10 EUR"}]},
        {"turns": [{"input": "Price?", "actual_output": "10 EUR"}]},
    ]
    dataset = load_dataset(DatasetSpec(path="c.jsonl"), _write(tmp_path / "c.jsonl", rows).parent)
    expected = [
        _sha12(json.dumps([[t["input"], t["actual_output"]] for t in row["turns"]], separators=(",", ":")))
        for row in rows
    ]
    assert dataset.ids == expected and len(set(expected)) == 3
    # a single-turn case with the same last exchange has the input's hash: another id again
    assert _sha12("Price?") not in dataset.ids
    # other scripts are hashed as UTF-8 text, unescaped; a turn without input as null
    other = [{"turns": [{"input": "Привет", "actual_output": "Здравствуйте"}, {"actual_output": "…"}]}]
    dataset = load_dataset(DatasetSpec(path="u.yaml"), _write(tmp_path / "u.yaml", other).parent)
    assert dataset.ids == [_sha12('[["Привет","Здравствуйте"],[null,"…"]]')]


def test_a_bad_turn_is_named_by_file_row_and_field(tmp_path: Path) -> None:
    rows = [
        {"turns": [{"question": "a", "answer": "b"}, {"question": "c", "answer": 7}]},
        {"turns": [{"question": "a"}, "not a turn"], "chatbot_role": ["x"]},
        {"turns": []},
        {"id": "no-turns", "chatbot_role": "r"},
        {"turns": [{"question": "q", "answer": "a", "retrieval_context": "not a list"}], "id": {"x": 1}},
    ]
    path = _write(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DatasetError) as caught:
        load_dataset(DatasetSpec(path="bad.jsonl", fields={**FIELDS, "turns": "turns"}), tmp_path)
    lines = [str(p) for p in caught.value.problems]
    assert lines == [
        f"{path}, line 1: field 'turns[1].answer' must be a string, got number",
        f"{path}, line 2: field 'turns[0].answer' is missing or null (actual_output is required)",
        f"{path}, line 2: field 'turns[1]' must be an object, got string",
        f"{path}, line 2: field 'chatbot_role' must be a string, got array",
        f"{path}, line 3: field 'turns' must be a non-empty list of turns (objects), got an empty list",
        f"{path}, line 4: field 'turns' is missing or null: a conversation row needs its turns",
        f"{path}, line 5: field 'turns[0].retrieval_context' must be a list of strings "
        "(or set dataset.list_separator to split a string)",
        f"{path}, line 5: field 'id' must be a string or integer, got object",
    ]


def test_a_mapped_turn_key_no_turn_has_is_a_typo(tmp_path: Path) -> None:
    _write(tmp_path / "c.yaml", [{"turns": [{"input": "q", "actual_output": "a"}]}])
    with pytest.raises(DatasetError) as caught:
        load_dataset(DatasetSpec(path="c.yaml", fields={"expected_output": "gold"}), tmp_path)
    assert "field 'gold' key not found in any row (dataset.fields.expected_output" in str(caught.value)


def test_csv_is_refused_for_conversations(tmp_path: Path) -> None:
    (tmp_path / "c.csv").write_text('turns,actual_output\n"[]",x\n', encoding="utf-8")
    with pytest.raises(DatasetError) as caught:
        load_dataset(DatasetSpec(path="c.csv"), tmp_path)
    assert str(caught.value.problems[0]) == (
        f"{tmp_path / 'c.csv'}, line 1: field 'turns' a conversation dataset must be JSONL, JSON or YAML: a CSV cell "
        "cannot hold a list of turns (docs/conversations.md#conversation-datasets)"
    )
    # mapped in the suite: refused when the suite loads, before the file is read
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: s\ndataset: {path: c.csv, fields: {turns: dialogue}}\n"
        "metrics: [{metric: 'tests.conversation_metric:TurnRecallMetric'}]\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught_suite:
        load_suite(suite)
    assert "a conversation dataset must be JSONL, JSON or YAML" in str(caught_suite.value)
    assert "dataset.fields.turns" in str(caught_suite.value)


def _suite(tmp_path: Path, metrics: str, rows: list, extra: str = "") -> Path:
    _write(tmp_path / "chats.jsonl", rows)
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: conv\ndataset: {{path: chats.jsonl}}\nmetrics:\n{metrics}{extra}", encoding="utf-8")
    return suite


CONVERSATION = {"turns": [{"input": "Hi", "actual_output": "Hello"}]}
SINGLE = {"input": "Hi", "actual_output": "Hello"}


def test_a_single_turn_metric_on_conversations_is_refused_naming_the_metric(tmp_path: Path) -> None:
    suite = _suite(
        tmp_path,
        "  - {metric: 'tests.conversation_metric:TurnRecallMetric'}\n"
        "  - {metric: LengthCheckMetric, max_length: 10, name: short}\n",
        [CONVERSATION, CONVERSATION, CONVERSATION],
    )
    with pytest.raises(ConfigError) as caught:
        plan_run(suite)
    assert [str(p) for p in caught.value.problems] == [
        f"{suite.resolve()}, metrics[1]: field 'metric' LengthCheckMetric 'short' scores single-turn cases only, "
        "but line 1 (and 2 more) is a conversation (docs/conversations.md#metrics)"
    ]


def test_a_conversation_metric_on_single_turn_cases_is_refused(tmp_path: Path) -> None:
    suite = _suite(tmp_path, "  - {metric: 'tests.conversation_metric:TurnRecallMetric'}\n", [CONVERSATION, SINGLE])
    with pytest.raises(ConfigError) as caught:
        plan_run(suite)
    assert [str(p) for p in caught.value.problems] == [
        f"{suite.resolve()}, metrics[0]: field 'metric' TurnRecallMetric scores conversations only, "
        "but line 2 is a single-turn case (docs/conversations.md#metrics)"
    ]


def test_an_any_metric_takes_both_kinds_in_one_dataset(tmp_path: Path) -> None:
    suite = _suite(tmp_path, "  - {metric: 'tests.conversation_metric:AnyTurnsMetric'}\n", [CONVERSATION, SINGLE])
    plan = plan_run(suite)
    assert [type(c).__name__ for c in plan.dataset.cases] == ["ConversationalEvalTestCase", "EvalTestCase"]


def test_a_target_on_a_conversation_suite_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bot.py").write_text("def answer(input):\n    return 'x'\n", encoding="utf-8")
    suite = _suite(
        tmp_path,
        "  - {metric: 'tests.conversation_metric:TurnRecallMetric'}\n",
        [CONVERSATION],
        "target: {python: 'bot:answer'}\n",
    )
    with pytest.raises(ConfigError) as caught:
        plan_run(suite)
    assert str(caught.value.problems[0]) == (
        f"{suite.resolve()}, target: a target cannot be run on conversations: it answers one input, and a "
        "conversation's turns are recorded (grade the dataset's own turns; docs/conversations.md#targets); "
        "--no-target grades them"
    )
    assert plan_run(suite, use_targets=False).dataset.cases[0].turns[0].actual_output == "Hello"


def test_a_metric_skipped_for_missing_credentials_keeps_its_case_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a fork's pull request (no key, ``--skip-missing-credentials``) a conversation judge metric's stand-in
    still takes conversations, and a single-turn judge metric's stand-in is still refused on them."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)
    suite = _suite(tmp_path, "  - {metric: RoleAdherenceMetric}\n", [CONVERSATION])
    plan = plan_run(suite, skip_missing_credentials=True)
    assert [type(m).__name__ for m in plan.suite.metrics] == ["SkippedMetric"]
    suite = _suite(tmp_path, "  - {metric: RoleAdherenceMetric}\n  - {metric: ToxicityMetric}\n", [CONVERSATION])
    with pytest.raises(ConfigError) as caught:
        plan_run(suite, skip_missing_credentials=True)
    assert [p.location for p in caught.value.problems] == ["metrics[1]"]
    assert caught.value.problems[0].message == (
        "ToxicityMetric scores single-turn cases only, but line 1 is a conversation (docs/conversations.md#metrics)"
    )


def test_extra_columns_of_a_conversation_row_are_read_from_the_row(tmp_path: Path) -> None:
    rows = [{**CONVERSATION, "topic": "billing"}, {**CONVERSATION, "id": "x", "topic": 3}]
    dataset = load_dataset(DatasetSpec(path="c.jsonl", cluster="topic"), _write(tmp_path / "c.jsonl", rows).parent)
    assert dataset.columns == {"topic": ["billing", "3"]}
