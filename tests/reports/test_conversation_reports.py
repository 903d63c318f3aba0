"""A conversation in the reports (docs/conversations.md#reports): one case whose turns are readable in summary.md,
the Action's job summary and PR comment (action/report.py run as a runner runs it), the terminal's failing-case
list, and results.json (``turns``, ``chatbot_role``; schema 4, validated against the shipped schema); a schema 3
results.json (before conversations) is still read as a baseline.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from rich.console import Console

import evaltasks
from evaltasks import ConversationalEvalTestCase, EvalTestCase
from evaltasks.engine.baseline import load_baseline
from evaltasks.engine.compare import compare_results
from evaltasks.reports import SCHEMA_VERSION, write_reports
from evaltasks.reports.console import _print_cases, notable_cases
from evaltasks.results import EvaluationResult
from tests.action_report import run_action_report
from tests.conversation_metric import TurnRecallMetric
from tests.process_env import REPO_ROOT


def _turn(said: str, answer: str, expected: str | None = None) -> EvalTestCase:
    return EvalTestCase(input=said, actual_output=answer, expected_output=expected)


PIRATE = ConversationalEvalTestCase(
    name="pirate-refund",
    chatbot_role="a pirate who answers refund questions",
    turns=[
        _turn("Can I get a refund?", "Arr, give me yer order number.", "order number"),
        _turn("It is 42", "Order 42 be refunded, matey.", "refunded"),
        _turn("How long does it take?", "Two moons.", "5 days"),  # the miss: 2 of 3 recalled
    ],
)
UNNAMED = ConversationalEvalTestCase(
    turns=[_turn("Hello there, I need help with my invoice", "Hi!", "invoice"), _turn("Thanks", "Bye")]
)
GOOD = ConversationalEvalTestCase(name="good", turns=[_turn("Hi", "Hello", "hello")])


def _run() -> EvaluationResult:
    return evaltasks.evaluate_conversations_sync([PIRATE, UNNAMED, GOOD], [TurnRecallMetric(threshold=0.9)])


def _write(out: Path, result: EvaluationResult) -> dict[str, Path]:
    header = {"schema_version": SCHEMA_VERSION, "suite": "chat", "passed": False, "gate": {"min_pass_rate": 1.0}}
    return write_reports(out, result, header, passed=False, min_pass_rate=1.0)


PIRATE_TURNS = [  # markdown-escaped data (docs/reports.md: report text from the data is made inert)
    "- **pirate\\-refund \\(3 turns\\)** · TurnRecallMetric: 0\\.67 of the turns recalled",
    "  - role: a pirate who answers refund questions",
    "  - turn 1: user: Can I get a refund? → assistant: Arr, give me yer order number\\. (expected: order number)",
    "  - turn 2: user: It is 42 → assistant: Order 42 be refunded, matey\\. (expected: refunded)",
    "  - turn 3: user: How long does it take? → assistant: Two moons\\. (expected: 5 days)",
]


def test_results_json_carries_turns_and_role_and_validates(tmp_path: Path) -> None:
    paths = _write(tmp_path, _run())
    doc = json.loads(paths["results.json"].read_text(encoding="utf-8"))
    schema = json.loads((REPO_ROOT / "evaltasks" / "schema" / "results.schema.json").read_text(encoding="utf-8"))
    case_schema = {"$ref": "#/$defs/TestCaseResult", "$defs": schema["$defs"]}  # a whole run's file: the e2e test
    for case in doc["cases"]:
        jsonschema.Draft202012Validator(case_schema).validate(case)
    assert doc["schema_version"] == 4
    pirate = doc["cases"][0]
    assert pirate["chatbot_role"] == "a pirate who answers refund questions"
    assert pirate["turns"] == [
        {"input": t.input, "actual_output": t.actual_output, "expected_output": t.expected_output} for t in PIRATE.turns
    ]
    assert pirate["metrics"][0]["score"] == 2 / 3


def test_summary_md_shows_each_conversation_as_one_case_with_its_turns(tmp_path: Path) -> None:
    paths = _write(tmp_path, _run())
    text = paths["summary.md"].read_text(encoding="utf-8")
    assert "\n".join(PIRATE_TURNS) in text
    # an unnamed conversation is named by its first turn's input (not its hash id), and its turns follow
    assert (
        "\n".join(
            [
                "- **Hello there, I need help with my invo… \\(2 turns\\)** · TurnRecallMetric: 0\\.00 of the turns recalled",
                "  - turn 1: user: Hello there, I need help with my invoice → assistant: Hi\\! (expected: invoice)",
                "  - turn 2: user: Thanks → assistant: Bye",
            ]
        )
        in text
    )
    assert "  - output: Two moons." not in text  # the last turn is not repeated as the output


def test_the_actions_job_summary_and_pr_comment_show_the_turns(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _write(out, _run())
    for text in run_action_report(tmp_path, out, exit_code=1):
        assert "\n".join(PIRATE_TURNS) in text


def test_the_terminal_lists_failing_conversations_with_their_last_turns(tmp_path: Path) -> None:
    result = _run()
    paths = _write(tmp_path, result)
    cases = notable_cases(paths["results.json"], result.summary)
    assert cases is not None
    assert cases.rows == [
        ("Hello there, I need help with my invo… (2 turns)", ["TurnRecallMetric 0.0000"]),
        ("pirate-refund (3 turns)", ["TurnRecallMetric 0.6667"]),
    ]
    console = Console(record=True, width=100, color_system=None)
    _print_cases(console, cases)
    assert console.export_text().splitlines() == [
        "failing cases (2 of 3, lowest score first):",
        "  Hello there, I need help with my invo… (2 turns) — TurnRecallMetric 0.0000",
        "      turn 1: user: Hello there, I need help with my invoice → assistant: Hi!",
        "      turn 2: user: Thanks → assistant: Bye",
        "  pirate-refund (3 turns) — TurnRecallMetric 0.6667",
        "      turn 1: user: Can I get a refund? → assistant: Arr, give me yer order number.",
        "      turn 2: user: It is 42 → assistant: Order 42 be refunded, matey.",
        "      turn 3: user: How long does it take? → assistant: Two moons.",
    ]


def test_a_schema_3_results_json_is_still_read_as_a_baseline(tmp_path: Path) -> None:
    """A baseline written before conversations (schema 3, no ``turns``) pairs with a conversation run by id."""
    result = _run()
    old = {
        "schema_version": 3,
        "suite": "chat",
        "summary": {"pass_rate": 1.0},
        "cases": [
            {
                "id": case.id,
                "status": "passed",
                "metrics": [{"name": "TurnRecallMetric", "score": 1.0, "status": "passed"}],
            }
            for case in result.test_results
        ],
    }
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    comparison = compare_results(load_baseline(path), result.summary, result.test_results)
    assert sorted(comparison.newly_failing) == sorted([result.test_results[0].id, result.test_results[1].id])


def test_a_turn_line_fits_the_terminal_whatever_the_lengths() -> None:
    from evaltasks.reports.verdict import turn_line
    from evaltasks.results import Turn

    long_in, long_out = "why " * 40, "because " * 40
    for said, answer in ((long_in, long_out), (long_in, "ok"), ("ok?", long_out), (None, long_out)):
        line = turn_line(12, Turn(input=said, actual_output=answer), 80)
        assert len(line) <= 80 and line.startswith("turn 12: "), line
        # a short text is kept whole; a long one is cut with an ellipsis
        for text in (said, answer):
            if text is not None and len(text.strip()) < 30:
                assert text.strip() in line
    assert turn_line(1, Turn(input=long_in, actual_output=long_out), 80).count("…") == 2


def test_junit_xml_failures_hold_the_turns(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    paths = _write(tmp_path, _run())
    root = ET.parse(paths["junit.xml"]).getroot()
    failures = {case.get("name"): case.find("failure") for case in root.iter("testcase")}
    text = next(f.text for name, f in failures.items() if f is not None and "pirate-refund" in (name or ""))
    assert text is not None
    assert "chatbot_role: a pirate who answers refund questions\n" in text
    assert "turn 1 user: Can I get a refund?\nturn 1 assistant: Arr, give me yer order number.\n" in text
    assert text.endswith("turn 3 user: How long does it take?\nturn 3 assistant: Two moons.")


def test_changed_conversations_show_their_turns_against_a_baseline(tmp_path: Path) -> None:
    """Against a baseline, summary.md's changed cases and the terminal's list name a conversation by its first input
    (an id derived from its turns) and list its turns; a changed last answer is shown before; a conversation removed
    since the baseline shows the baseline's turns."""
    base = _run()
    _write(tmp_path / "base", base)
    baseline = json.loads((tmp_path / "base" / "results.json").read_text(encoding="utf-8"))
    baseline["cases"].append(
        {
            "id": "gone",
            "status": "passed",
            "actual_output": "Bye",
            "turns": [{"input": "Old question", "actual_output": "Bye"}],
            "metrics": [{"name": "TurnRecallMetric", "score": 1.0, "status": "passed"}],
        }
    )
    for case in baseline["cases"]:  # every conversation scored 1.0 in the baseline, its last answer "before"
        case["metrics"][0].update(score=1.0, status="passed")
        case["status"] = "passed"
    baseline["cases"][1]["actual_output"] = "Bye before"
    current = _run()
    comparison = compare_results(baseline, current.summary, current.test_results)
    header = {"schema_version": SCHEMA_VERSION, "suite": "chat", "passed": False, "gate": {"min_pass_rate": 1.0}}
    paths = write_reports(tmp_path / "cur", current, header, passed=False, min_pass_rate=1.0, comparison=comparison)
    text = paths["summary.md"].read_text(encoding="utf-8")
    unnamed = "\n".join(
        [
            "- 🔻 **newly failing: Hello there, I need help with my invo… \\(2 turns\\)** · TurnRecallMetric 1.0000 "
            "(passed) → 0.0000 (failed), Δ -1.0000",
            "  - turn 1: user: Hello there, I need help with my invoice → assistant: Hi\\! (expected: invoice)",
            "  - turn 2: user: Thanks → assistant: Bye",
            "  - last answer before: Bye before",
        ]
    )
    assert unnamed in text, text
    assert "**removed: gone \\(1 turn\\)**" in text and "  - turn 1: user: Old question → assistant: Bye" in text
    cases = notable_cases(paths["results.json"], current.summary)
    assert cases is not None and cases.rows[0][0] == "Hello there, I need help with my invo… (2 turns) (newly failing)"
    assert [(n, t.input) for n, t in cases.turns[0]] == [(1, "Hello there, I need help with my invoice"), (2, "Thanks")]
