"""ContextDecayMetric: does a conversation still use earlier facts correctly as they recede?

Source: eval-ai-library 0.8.2's ``ContextDecayMetric`` (no documentation page exists; its module documents the
rule): per turn distance ``d = used_at - introduced_at``, CRA(d) = facts used correctly at distance d / facts
needed at distance d; the score is the mean of CRA(d) weighted ``1 / (1 + 0.2 d)`` (near distances weigh more).
Where evaltasks differs (docs/metrics/reliability.md#contextdecaymetric): a conversation without facts, or a fact
used before it was introduced, is an input error (the library scores the first 1.0 and drops the second
silently), and a fact without ``correctly_used`` is checked in the conversation itself: it is used correctly when
its text appears in the assistant's answer of turn ``used_at``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from evaltasks.embeddings.base import VectorTable
from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

DEPTH_WEIGHT = 0.2
"""The weight of distance d is ``1 / (1 + DEPTH_WEIGHT * d)`` (eval-ai-library's)."""
RANGES = (("short_range", 0, 3), ("mid_range", 4, 7), ("long_range", 8, None))
"""The library's distance ranges (inclusive): short d <= 3, mid 4-7, long d >= 8."""


def _plain(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().casefold()


def _facts_of(metric_facts: list[dict[str, Any]] | None, case: EvalTestCase) -> Any:
    """The case's facts: its own (``vars['context_facts']``, a dataset column) else the metric's."""
    own = (case.vars or {}).get("context_facts")
    return own if own is not None else metric_facts


def _fact_problems(facts: Any, turns: int) -> list[str]:
    """What is wrong with ``facts`` for a conversation of ``turns`` turns (empty: usable)."""
    if not isinstance(facts, list) or not facts:
        return [
            "no context_facts: give each fact's introduced_at and used_at turns (the metric's context_facts "
            "or the case's context_facts column)"
        ]
    problems = []
    for i, fact in enumerate(facts):
        where = f"context_facts[{i}]"
        if not isinstance(fact, Mapping):
            problems.append(f"{where} must be a mapping with fact, introduced_at, used_at")
            continue
        introduced, used = fact.get("introduced_at"), fact.get("used_at")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (introduced, used)):
            problems.append(f"{where}: introduced_at and used_at must be turn numbers >= 0 (0 is the first turn)")
            continue
        assert isinstance(introduced, int) and isinstance(used, int)
        if used < introduced:
            problems.append(f"{where}: used_at {used} is before introduced_at {introduced}")
        correct = fact.get("correctly_used")
        if correct is None:
            if not isinstance(fact.get("fact"), str) or not fact["fact"].strip():
                problems.append(f"{where}: needs correctly_used, or the fact's text to look for")
            elif used >= turns:
                problems.append(f"{where}: used_at {used} is past the conversation's last turn ({turns - 1})")
        elif not isinstance(correct, bool):
            problems.append(f"{where}: correctly_used must be true or false")
    return problems


def cra_by_depth(facts: Sequence[Mapping[str, Any]], answers: Sequence[str]) -> dict[int, float]:
    """CRA(d) per distance d, in increasing d: facts used correctly / facts at that distance. A fact without
    ``correctly_used`` is correct when its text (whitespace collapsed, case folded) is in ``answers[used_at]``."""
    total: dict[int, int] = {}
    correct: dict[int, int] = {}
    for fact in facts:
        d = int(fact["used_at"]) - int(fact["introduced_at"])
        used = fact.get("correctly_used")
        if used is None:
            used = _plain(str(fact["fact"])) in _plain(answers[int(fact["used_at"])])
        total[d] = total.get(d, 0) + 1
        correct[d] = correct.get(d, 0) + int(bool(used))
    return {d: correct[d] / total[d] for d in sorted(total)}


def decay_score(cra: Mapping[int, float]) -> float:
    """The mean of ``cra`` weighted ``1 / (1 + 0.2 d)`` (eval-ai-library's weighting)."""
    weights = {d: 1.0 / (1.0 + DEPTH_WEIGHT * d) for d in cra}
    return sum(cra[d] * weights[d] for d in cra) / sum(weights.values())


@register_metric("ContextDecayMetric")
class ContextDecayMetric(BaseMetric):
    """Correct use of earlier facts by turn distance, on a conversation (rule in the module docstring).

    Args:
        threshold: minimum passing score, default 0.7 (eval-ai-library's).
        context_facts: facts for every conversation scored (the library's parameter), each ``{fact,
            introduced_at, used_at, correctly_used}``; turns are numbered from 0; ``correctly_used`` may be left
            out to have the fact's text looked for in the answer of turn ``used_at``. A conversation's own
            ``context_facts`` (its dataset row's column, in ``vars``) win.
        name: the name in results (default ``"ContextDecayMetric"``).

    Raises:
        ValueError: a threshold outside [0, 1], ``context_facts`` that is not a list of facts (each problem
            named: a fact used before it is introduced, a turn that is not a number >= 0...), so a suite's mistake
            is reported once at the metric, not at every row.

    ``evaluation_log`` keys: ``cra_by_depth`` (distance as a string -> CRA), ``short_range_avg``,
    ``mid_range_avg``, ``long_range_avg`` (None without facts in the range), ``total_facts``.
    """

    required_fields: ClassVar[tuple[str, ...]] = ("turns",)
    version: ClassVar[str] = "1"
    case_kind: ClassVar[str] = "conversation"

    def __init__(
        self, threshold: float = 0.7, context_facts: list[dict[str, Any]] | None = None, *, name: str | None = None
    ) -> None:
        super().__init__(threshold, name=name)
        if context_facts is not None and not isinstance(context_facts, list):
            raise ValueError(f"context_facts must be a list of facts, got {type(context_facts).__name__}")
        if context_facts:  # what can be checked without a conversation (its length is checked per case)
            problems = _fact_problems(context_facts, turns=sys.maxsize)
            if problems:
                raise ValueError("; ".join(problems))
        self.context_facts = context_facts

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, context_facts)."""
        return {"threshold": self.threshold, "name": self.name, "context_facts": self.context_facts}

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A conversation with usable facts (:func:`_fact_problems`)."""
        turns = getattr(case, "turns", None)
        if not turns:
            return [("turns", "ContextDecayMetric scores conversations (a case with turns)")]
        return [("context_facts", p) for p in _fact_problems(_facts_of(self.context_facts, case), len(turns))]

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """CRA by distance and its weighted mean per conversation. Raises ValueError for an invalid case."""
        results = []
        for case in cases:
            problems = self.validate_case(case)
            if problems:
                raise ValueError("; ".join(p for _, p in problems))
            facts = _facts_of(self.context_facts, case)
            cra = cra_by_depth(facts, [turn.actual_output for turn in getattr(case, "turns", None) or []])
            score = decay_score(cra)
            ranges = {
                f"{label}_avg": (sum(v) / len(v) if v else None)
                for label, low, high in RANGES
                for v in [[c for d, c in cra.items() if d >= low and (high is None or d <= high)]]
            }
            shown = ", ".join(f"d={d}: {c:.0%}" for d, c in cra.items())
            reason = f"{len(facts)} facts used correctly by turn distance: {shown}; weighted score {score:.3f}."
            log = {"cra_by_depth": {str(d): c for d, c in cra.items()}, **ranges, "total_facts": len(facts)}
            results.append(MetricResult.scored(self.name, score, self.threshold, reason, log))
        return results
