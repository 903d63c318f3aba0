"""``evaluate_conversations`` (docs/conversations.md#python-api): each conversation one case of the pipeline, its
result carrying ``turns`` and ``chatbot_role``; refused inputs named; cache keys covering every turn.

Scores come from ``tests/conversation_metric.py``'s TurnRecallMetric, computed here by hand per conversation.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

import evaltasks
from evaltasks import ConversationalEvalTestCase, EvalTestCase, LengthCheckMetric
from evaltasks.errors import InputError
from evaltasks.results import Turn
from evaltasks.tasks import score_batch_inputs_key
from tests.conversation_metric import AnyTurnsMetric, TurnRecallMetric


def _turn(said: str, answer: str, expected: str | None = None) -> EvalTestCase:
    return EvalTestCase(input=said, actual_output=answer, expected_output=expected)


REFUND = ConversationalEvalTestCase(
    name="refund",
    chatbot_role="support agent",
    turns=[
        _turn("I want a refund", "Sure, your order number?", "order number"),
        _turn("It is 42", "Done: refund for order 42.", "42"),
        _turn("When?", "Within a week.", "3 days"),  # a miss: 2 of 3 turns recalled
    ],
)
HELLO = ConversationalEvalTestCase(turns=[_turn("Hi", "Hello!"), _turn("Bye", "Goodbye.", "goodbye")])


def test_each_conversation_is_one_case_with_its_turns_and_role() -> None:
    """Regression (docs/conversations.md#differences-from-eval-ai-library): eval-ai-library returns a list of
    ``(None, [ConversationalTestCaseResult])`` tuples with no id and no summary; here an EvaluationResult whose
    cases carry ids, ``turns`` and ``chatbot_role``, with the run's summary."""
    result = evaltasks.evaluate_conversations_sync([REFUND, HELLO], [TurnRecallMetric(threshold=0.9)])
    refund, hello = result.test_results
    assert refund.id == "refund"
    hello_id = hashlib.sha256(json.dumps([["Hi", "Hello!"], ["Bye", "Goodbye."]]).replace(", ", ",").encode())
    assert hello.id == hello_id.hexdigest()[:12]
    assert refund.metrics[0].score == pytest.approx(2 / 3)  # "3 days" is not in "Within a week."
    assert (refund.status, hello.status) == ("failed", "passed")
    assert hello.metrics[0].score == 1.0
    assert refund.chatbot_role == "support agent" and hello.chatbot_role is None
    assert refund.turns == [
        Turn(input="I want a refund", actual_output="Sure, your order number?", expected_output="order number"),
        Turn(input="It is 42", actual_output="Done: refund for order 42.", expected_output="42"),
        Turn(input="When?", actual_output="Within a week.", expected_output="3 days"),
    ]
    assert (refund.input, refund.actual_output) == ("When?", "Within a week.")  # the last turn's
    assert result.summary.cases == 2 and result.summary.pass_rate == 0.5


def test_the_async_form_is_eval_ai_librarys() -> None:
    result = asyncio.run(evaltasks.evaluate_conversations([HELLO], [TurnRecallMetric()]))
    assert result.test_results[0].metrics[0].score == 1.0


def test_a_single_turn_case_is_refused_by_evaluate_conversations() -> None:
    with pytest.raises(InputError) as caught:
        evaltasks.evaluate_conversations_sync([HELLO, _turn("q", "a")], [AnyTurnsMetric()])
    assert [str(p) for p in caught.value.problems] == [
        "<python>, item 1: is not a ConversationalEvalTestCase: EvalTestCase"
    ]


def test_case_kind_mismatches_are_refused_naming_the_metric() -> None:
    """Regression (docs/conversations.md#differences-from-eval-ai-library): eval-ai-library's
    ``evaluate_conversations`` hands each conversation to every metric, so a single-turn metric fails part-way
    through the run (its ConversationalEvalTestCase has no ``input``/``actual_output``) after earlier conversations
    were judged; here the metric is refused before any work, named."""
    with pytest.raises(InputError) as caught:
        evaltasks.evaluate_conversations_sync([HELLO, REFUND], [TurnRecallMetric(), LengthCheckMetric(max_length=5)])
    assert [str(p) for p in caught.value.problems] == [
        "<python>, metrics[1]: LengthCheckMetric scores single-turn cases only, but item 0 (and 1 more) is a "
        "conversation (docs/conversations.md#metrics)"
    ]
    with pytest.raises(InputError) as caught:
        evaltasks.evaluate_sync([_turn("q", "a")], [TurnRecallMetric(name="recall")])
    assert "TurnRecallMetric 'recall' scores conversations only, but item 0 is a single-turn case" in str(caught.value)
    # "any": both kinds in one call
    both = evaltasks.evaluate_sync([HELLO, _turn("q", "")], [AnyTurnsMetric()])
    assert [r.metrics[0].score for r in both.test_results] == [1.0, 0.0]
    assert both.test_results[1].turns is None


def test_a_target_is_refused_on_conversations() -> None:
    from evaltasks.targets import PythonTarget

    with pytest.raises(InputError) as caught:
        evaltasks.evaluate_sync([HELLO], [AnyTurnsMetric()], target=PythonTarget(lambda text: text, name="echo"))
    assert "a target cannot be run on conversations" in str(caught.value)


def test_the_score_batch_cache_key_covers_every_turn() -> None:
    """Prefect's score-batch key (:func:`score_batch_inputs_key`) changes when any turn changes, not only the last
    one that ``input``/``actual_output`` repeat."""

    def key(case: ConversationalEvalTestCase) -> str:
        return score_batch_inputs_key(None, {"cases": [case], "metric_key": "m", "vectors": None})

    base = key(HELLO)
    first_changed = HELLO.model_copy(update={"turns": [_turn("Hi", "Hey!"), HELLO.turns[1]]})
    role_changed = HELLO.model_copy(update={"chatbot_role": "pirate"})
    assert first_changed.actual_output == HELLO.actual_output  # same last turn
    assert len({base, key(first_changed), key(role_changed)}) == 3
    assert key(ConversationalEvalTestCase(turns=list(HELLO.turns))) == base  # the same conversation: the same key


def test_conversations_are_scored_in_batches_and_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression (docs/conversations.md#differences-from-eval-ai-library): eval-ai-library judges one conversation
    at a time, metric after metric, and prints each one unless ``verbose=False``; here 25 conversations are
    scored in batches of ``batch_size`` (10, 10, 5: three calls) and nothing is printed by default."""
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("CONVERSATION_METRIC_CALLS", str(calls))
    chats = [ConversationalEvalTestCase(name=f"c{i}", turns=[_turn(f"q{i}", "a", "a")]) for i in range(25)]
    result = evaltasks.evaluate_conversations_sync(chats, [TurnRecallMetric()], batch_size=10)
    assert calls.read_text().split() == ["10", "10", "5"]
    assert [r.id for r in result.test_results] == [f"c{i}" for i in range(25)]
    assert capsys.readouterr().out == ""
