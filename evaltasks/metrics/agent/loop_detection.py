"""LoopDetectionMetric: does the agent repeat the same actions without making progress?

Source: eval-ai-library 0.8.2's ``reliability_metrics/loop_detection_metric`` (no documentation page): its cycle
search, its waste-based score and its defaults. Where it is wrong evaltasks differs
(docs/metrics/agent.md#loopdetectionmetric): an action is a tool *with its arguments* (the library compares
names only, so four searches for four different things are a "loop"), an invocation recorded twice by nested
spans is one action (the library counts it twice), and a case without a trace is an input error (the library
scores it 1.0, "no loop").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.metrics._traces import ACTION_TYPES, CALL_TYPES, distinct_steps, input_key
from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase, TraceStep


def _positive_int(label: str, value: Any) -> int:
    """``value`` when it is an integer >= 1. Raises ValueError otherwise (booleans included)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{label} must be an integer >= 1, got {quote(value)}")
    return value


def action_label(step: TraceStep) -> str:
    """How an action reads (and is compared): ``name(arguments)`` for a call (``tool_call``, ``retrieval``) whose
    input was recorded, its name otherwise (an ``agent_step`` is its agent)."""
    name = step.name or step.type
    if step.type in CALL_TYPES and step.input is not None:
        return f"{name}({input_key(step)})"
    return name


@register_metric("LoopDetectionMetric")
class LoopDetectionMetric(BaseMetric):
    """Score how much of an agent's trace is wasted repeating a cycle of actions.

    Actions: the ``tool_call``, ``retrieval`` and ``agent_step`` steps of ``execution_trace``, each invocation
    once, in execution order (docs/metrics/agent.md#execution-traces-as-the-metrics-read-them); two actions are
    the same when their name and recorded input (canonical JSON) are. A loop: a pattern of ``min_cycle_length`` to
    ``max_cycle_length`` actions repeated back to back more than ``max_acceptable_repeats`` times (patterns
    searched shortest first; a pattern that is a repetition of one already found is not counted again; the scan
    resumes after a loop). Score: 1 - min(1, wasted / actions), wasted = Σ pattern length × (repetitions -
    ``max_acceptable_repeats``), rounded to 4 decimals, as eval-ai-library. Fewer than 2 actions: 1.0. No judge:
    0 requests per case.

    Args:
        threshold: minimum passing score, default 0.8.
        max_acceptable_repeats: repetitions of a pattern still accepted (some retrying is normal), default 3.
        min_cycle_length: shortest pattern searched, default 1.
        max_cycle_length: longest pattern searched, default 5 (>= ``min_cycle_length``).
        name: the name in results (default ``"LoopDetectionMetric"``).

    Raises:
        ValueError: a threshold outside [0, 1], a length or repeat count that is not an integer >= 1, or
            ``max_cycle_length < min_cycle_length``.

    ``evaluation_log`` keys: ``actions`` (count), ``loops_detected`` (each ``pattern`` as labels
    ``name(arguments)``, ``repetitions``, ``start_index``, ``end_index`` (exclusive), ``severity``: ``medium``,
    ``high`` above 2 × ``max_acceptable_repeats``, ``critical`` above 3 ×), ``wasted_actions``.
    """

    version: ClassVar[str] = "1"

    def __init__(
        self,
        threshold: float = 0.8,
        max_acceptable_repeats: int = 3,
        min_cycle_length: int = 1,
        max_cycle_length: int = 5,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        self.max_acceptable_repeats = _positive_int("max_acceptable_repeats", max_acceptable_repeats)
        self.min_cycle_length = _positive_int("min_cycle_length", min_cycle_length)
        self.max_cycle_length = _positive_int("max_cycle_length", max_cycle_length)
        if max_cycle_length < min_cycle_length:
            raise ValueError(f"max_cycle_length ({max_cycle_length}) must be >= min_cycle_length ({min_cycle_length})")

    def config(self) -> dict[str, Any]:
        """Constructor arguments."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "max_acceptable_repeats": self.max_acceptable_repeats,
            "min_cycle_length": self.min_cycle_length,
            "max_cycle_length": self.max_cycle_length,
        }

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A problem on ``execution_trace`` when the case has none (None; ``[]`` is an empty trace)."""
        if case.execution_trace is None:
            return [("execution_trace", "is missing (LoopDetectionMetric looks for repeated actions in it)")]
        return []

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Score each case from its trace (no request)."""
        return [self._score(case.execution_trace or []) for case in cases]

    def _score(self, trace: Sequence[TraceStep]) -> MetricResult:
        """The result of one trace."""
        actions = [action_label(step) for step, _ in distinct_steps(trace, ACTION_TYPES)]
        loops = self.detect_cycles(actions) if len(actions) >= 2 else []
        wasted = sum(len(loop["pattern"]) * (loop["repetitions"] - self.max_acceptable_repeats) for loop in loops)
        score = round(1.0 - min(wasted / len(actions), 1.0), 4) if loops else 1.0
        if len(actions) < 2:
            reason = f"{len(actions)} action(s) in the trace: too short for a loop."
        elif not loops:
            reason = f"No pattern repeated more than {self.max_acceptable_repeats} times in {len(actions)} actions."
        else:
            parts = "; ".join(
                f"[{' → '.join(loop['pattern'])}] repeated {loop['repetitions']}x (severity: {loop['severity']})"
                for loop in loops
            )
            reason = (
                f"Detected {len(loops)} loop(s) in {len(actions)} actions, {wasted} wasted: {parts}. Score: {score:.2f}"
            )
        log = {"actions": len(actions), "loops_detected": loops, "wasted_actions": wasted}
        return MetricResult.scored(self.name, score, self.threshold, reason, log)

    def detect_cycles(self, actions: Sequence[str]) -> list[dict[str, Any]]:
        """The loops of ``actions`` (see the class docstring), as eval-ai-library's ``_detect_cycles``."""
        detected: list[dict[str, Any]] = []
        n = len(actions)
        for cycle_len in range(self.min_cycle_length, self.max_cycle_length + 1):
            if cycle_len > n // 2:
                break
            i = 0
            while i <= n - cycle_len * 2:
                pattern = list(actions[i : i + cycle_len])
                repeats, j = 1, i + cycle_len
                while j + cycle_len <= n and list(actions[j : j + cycle_len]) == pattern:
                    repeats += 1
                    j += cycle_len
                if repeats > self.max_acceptable_repeats:
                    if not _repeats_a_found_pattern(pattern, detected):
                        detected.append(
                            {
                                "pattern": pattern,
                                "repetitions": repeats,
                                "start_index": i,
                                "end_index": j,
                                "severity": self._severity(repeats),
                            }
                        )
                    i = j
                else:
                    i += 1
        return detected

    def _severity(self, repeats: int) -> str:
        """``critical`` above 3 × the accepted repeats, ``high`` above 2 ×, else ``medium``."""
        if repeats > self.max_acceptable_repeats * 3:
            return "critical"
        return "high" if repeats > self.max_acceptable_repeats * 2 else "medium"


def _repeats_a_found_pattern(pattern: list[str], found: list[dict[str, Any]]) -> bool:
    """Whether ``pattern`` is a repetition of a pattern already found (``[a, a]`` of ``[a]``)."""
    for loop in found:
        shorter = loop["pattern"]
        if len(pattern) % len(shorter) == 0 and shorter * (len(pattern) // len(shorter)) == pattern:
            return True
    return False
