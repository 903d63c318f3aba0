"""Small conversation metrics the tests define (a user's metrics: ``tests.conversation_metric:TurnRecallMetric`` in a
suite), so conversations run through the real engine without a judge.

``TurnRecallMetric``: the share of a conversation's turns whose answer contains that turn's ``expected_output``
(case-insensitive); turns without one are not counted (a conversation with none scores 1.0). Each ``score_batch``
call appends its number of cases to the file ``$CONVERSATION_METRIC_CALLS`` names, when set (so a test sees
whether a run in another process scored or read Prefect's cache).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from evaltasks import BaseMetric, MetricResult
from evaltasks.test_case import ConversationalEvalTestCase, EvalTestCase


def turn_recall(turns: Sequence[EvalTestCase]) -> float:
    """The share of ``turns`` with an ``expected_output`` whose ``actual_output`` contains it (1.0 with none)."""
    judged = [turn for turn in turns if turn.expected_output is not None]
    if not judged:
        return 1.0
    hits = sum(turn.expected_output.lower() in turn.actual_output.lower() for turn in judged)  # type: ignore[union-attr]
    return hits / len(judged)


class TurnRecallMetric(BaseMetric):
    """Share of turns whose answer contains the turn's expected output (a conversation metric)."""

    case_kind: ClassVar[str] = "conversation"

    def __init__(self, threshold: float = 1.0, *, name: str | None = None) -> None:
        super().__init__(threshold, name=name)

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, Any] | None = None
    ) -> list[MetricResult]:
        """One result per conversation: :func:`turn_recall` of its turns."""
        record = os.environ.get("CONVERSATION_METRIC_CALLS")
        if record:
            with open(record, "a", encoding="utf-8") as handle:
                handle.write(f"{len(cases)}\n")
        results = []
        for case in cases:
            assert isinstance(case, ConversationalEvalTestCase)
            score = turn_recall(case.turns)
            results.append(
                MetricResult.scored(self.name, score, self.threshold, f"{score:.2f} of the turns recalled", {})
            )
        return results


class AnyTurnsMetric(BaseMetric):
    """Scores single-turn cases and conversations alike (``case_kind`` ``any``): 1.0 when the (last) answer is
    not empty."""

    case_kind: ClassVar[str] = "any"

    def __init__(self, threshold: float = 0.5, *, name: str | None = None) -> None:
        super().__init__(threshold, name=name)

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, Any] | None = None
    ) -> list[MetricResult]:
        """1.0 for a non-empty ``actual_output``, else 0.0."""
        return [
            MetricResult.scored(self.name, float(bool(case.actual_output)), self.threshold, "answered", {})
            for case in cases
        ]
