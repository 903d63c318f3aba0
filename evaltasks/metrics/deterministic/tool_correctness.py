"""ToolCorrectnessMetric: did the agent call the tools it was expected to call?

Source: eval-ai-library's Tool Correctness documentation page
(https://library.eval-ai.com/agent-metrics/tool-correctness: modes, defaults, required fields) and that
library's 0.8.2 code for the exact scoring of each mode; the rules are
docs/metrics/deterministic.md#toolcorrectnessmetric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

_Verdict = tuple[float, str, dict[str, Any]]


def _unmatched(called: Sequence[str], expected: Sequence[str]) -> list[str]:
    """The expected tools (in order) left over when each is matched by a distinct call of the same name (a
    tool expected twice needs two calls); ``len(expected)`` minus its length is the size of the multiset
    intersection of ``called`` and ``expected``."""
    remaining: dict[str, int] = {}
    for tool in called:
        remaining[tool] = remaining.get(tool, 0) + 1
    missing = []
    for tool in expected:
        left = remaining.get(tool, 0)
        if left:
            remaining[tool] = left - 1
        else:
            missing.append(tool)
    return missing


def _lcs_length(expected: Sequence[str], called: Sequence[str]) -> int:
    """Length of the longest common subsequence of ``expected`` and ``called`` (O(len × len) time, one row)."""
    row = [0] * (len(called) + 1)
    for tool in expected:
        diagonal = 0  # row[j - 1] of the previous row
        for j, other in enumerate(called, start=1):
            above = row[j]
            row[j] = diagonal + 1 if tool == other else max(above, row[j - 1])
            diagonal = above
    return row[-1]


@register_metric("ToolCorrectnessMetric")
class ToolCorrectnessMetric(BaseMetric):
    """Score the tools an agent called (``tools_called``) against the tools it should have called
    (``expected_tools``), both lists of tool names compared exactly (case-sensitive).

    Modes (eval-ai-library's; ``exact_match`` wins when both flags are set):

    - default: matched / len(expected_tools), where each expected tool is matched by a distinct call of the
      same name (multiset intersection); order and extra calls do not matter.
    - ``exact_match=True``: 1.0 when ``tools_called`` equals ``expected_tools`` (same names, same order, same
      length), else 0.0.
    - ``check_ordering=True``: length of the longest common subsequence of ``expected_tools`` and
      ``tools_called`` / len(expected_tools).

    ``expected_tools`` is required (:meth:`validate_case`); ``[]`` means "no tool expected" and scores 1.0,
    except with ``exact_match``, where it scores 1.0 only when no tool was called. ``tools_called=None`` counts
    as ``[]``.

    Args:
        threshold: minimum passing score, default 0.5.
        exact_match: require exactly the expected calls, in order; default False.
        check_ordering: score the longest in-order subsequence of expected calls; default False.
        name: the name in results (default ``"ToolCorrectnessMetric"``).

    Raises:
        ValueError: a threshold outside [0, 1], or a flag that is not a boolean.

    ``evaluation_log`` keys: ``mode`` (``"default"``, ``"exact_match"`` or ``"check_ordering"``),
    ``tools_called``, ``expected_tools``, ``matched`` (matched expected tools, LCS length, or 1/0 for exact
    match), ``missing`` (expected tools no call matched, default mode; else ``[]``).
    """

    version: ClassVar[str] = "1"

    def __init__(
        self,
        threshold: float = 0.5,
        exact_match: bool = False,
        check_ordering: bool = False,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        for label, flag in (("exact_match", exact_match), ("check_ordering", check_ordering)):
            if not isinstance(flag, bool):
                raise ValueError(f"{label} must be true or false, got {quote(flag)}")
        self.exact_match = exact_match
        self.check_ordering = check_ordering
        self._mode = "exact_match" if exact_match else "check_ordering" if check_ordering else "default"

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, exact_match, check_ordering)."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "exact_match": self.exact_match,
            "check_ordering": self.check_ordering,
        }

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A problem on ``expected_tools`` when the case has none (None); ``[]`` is valid."""
        if case.expected_tools is None:
            return [
                (
                    "expected_tools",
                    "is missing (ToolCorrectnessMetric compares tools_called with "
                    "expected_tools; [] means no tool expected)",
                )
            ]
        return []

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Score each case; cases with the same (tools_called, expected_tools) share one (immutable) result
        object."""
        results: list[MetricResult] = []
        append, scored, verdict_of = results.append, MetricResult.scored, self._verdict
        name, threshold = self.name, self.threshold
        shared: dict[tuple[tuple[str, ...], tuple[str, ...]], MetricResult] = {}
        for case in cases:
            key = (tuple(case.tools_called or ()), tuple(case.expected_tools or ()))
            result = shared.get(key)
            if result is None:
                verdict = verdict_of(*key)
                result = shared[key] = scored(name, verdict[0], threshold, verdict[1], verdict[2])
            append(result)
        return results

    def _verdict(self, called: tuple[str, ...], expected: tuple[str, ...]) -> _Verdict:
        """(score, reason, evaluation_log) of one pair of tool lists."""
        missing: list[str] = []
        if self.exact_match:
            matched = int(called == expected)
            score = float(matched)
            reason = (
                f"Exact match: the {len(expected)} expected tool call(s) were made, in order."
                if matched
                else f"Mismatch: expected {list(expected)}, called {list(called)}."
            )
        elif self.check_ordering:
            matched = _lcs_length(expected, called)
            score = matched / len(expected) if expected else 1.0
            reason = (
                f"{matched} of {len(expected)} expected tool call(s) were made in the expected order "
                f"(longest common subsequence); called {list(called)}."
            )
        else:
            missing = _unmatched(called, expected)
            matched = len(expected) - len(missing)
            score = matched / len(expected) if expected else 1.0
            reason = f"{matched} of {len(expected)} expected tool call(s) were made" + (
                f"; missing {missing}." if missing else "."
            )
        log = {
            "mode": self._mode,
            "tools_called": list(called),
            "expected_tools": list(expected),
            "matched": matched,
            "missing": missing,
        }
        return score, reason, log
