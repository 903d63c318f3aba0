"""ToolCorrectnessMetric: did the agent call the tools it was expected to call?

Source: eval-ai-library's Tool Correctness documentation page
(https://library.eval-ai.com/agent-metrics/tool-correctness: modes, defaults, required fields) and that
library's 0.8.2 code for the exact scoring of each mode; the rules are
docs/metrics/deterministic.md#toolcorrectnessmetric, ``match_arguments`` (evaltasks' own) is
docs/metrics/agent.md#toolcorrectnessmetric-with-arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.metrics._traces import canonical, trace_calls
from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase, ToolCall

_Verdict = tuple[float, str, dict[str, Any]]


# A call as the metric compares it: (name, canonical JSON of the arguments, or None when not recorded / not
# constrained). Without ``match_arguments`` the second part is always None.
_Call = tuple[str, str | None]


def _matches(call: Any, expected: Any) -> bool:
    """Whether a called tool satisfies an expected one: same name (exactly), and, when the expected call fixes
    arguments, the call's recorded arguments hold each of them with an equal value (:func:`_same_arguments`)."""
    if isinstance(call, str) or isinstance(expected, str):
        return bool(call == expected)
    if call[0] != expected[0]:
        return False
    return expected[1] is None or (call[1] is not None and _same_arguments(call[1], expected[1]))


def _same_arguments(called: str, expected: str) -> bool:
    """Whether the called arguments (canonical JSON of an object) hold every expected key with an equal value
    (extra called arguments are allowed: an expected call lists the arguments that must match)."""
    have, want = json.loads(called), json.loads(expected)
    return all(key in have and canonical(have[key]) == canonical(value) for key, value in want.items())


def _unmatched(called: Sequence[Any], expected: Sequence[Any]) -> list[Any]:
    """The expected tools (in order) left over when each is matched by a distinct call (a tool expected twice
    needs two calls); ``len(expected)`` minus its length is the size of the matching. Items are names, or
    :data:`_Call` pairs compared with :func:`_matches` (first unused matching call, as eval-ai-library)."""
    if all(isinstance(item, str) for item in (*called, *expected)):
        remaining: dict[Any, int] = {}
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
    return _unmatched_bipartite(called, expected)


def _unmatched_bipartite(called: Sequence[Any], expected: Sequence[Any]) -> list[Any]:
    """:func:`_unmatched` for calls with arguments: a maximum matching (augmenting paths), so an expected call
    with loose arguments never takes the one call a stricter expectation needed."""
    owner: dict[int, int] = {}  # called index -> expected index

    def assign(e: int, seen: set[int]) -> bool:
        for c, call in enumerate(called):
            if c in seen or not _matches(call, expected[e]):
                continue
            seen.add(c)
            if c not in owner or assign(owner[c], seen):
                owner[c] = e
                return True
        return False

    for e in range(len(expected)):
        assign(e, set())
    matched = set(owner.values())
    return [item for e, item in enumerate(expected) if e not in matched]


def _lcs_length(expected: Sequence[Any], called: Sequence[Any]) -> int:
    """Length of the longest common subsequence of ``expected`` and ``called`` (O(len × len) time, one row);
    items equal when :func:`_matches` says so."""
    row = [0] * (len(called) + 1)
    for tool in expected:
        diagonal = 0  # row[j - 1] of the previous row
        for j, other in enumerate(called, start=1):
            above = row[j]
            row[j] = diagonal + 1 if _matches(other, tool) else max(above, row[j - 1])
            diagonal = above
    return row[-1]


def _label(item: Any) -> str:
    """How a call reads in a reason: its name, with its arguments when they count."""
    if isinstance(item, str):
        return item
    return item[0] if item[1] is None else f"{item[0]}({item[1]})"


def _labels(items: Sequence[Any]) -> list[str]:
    """:func:`_label` of each item."""
    return [_label(item) for item in items]


@register_metric("ToolCorrectnessMetric")
class ToolCorrectnessMetric(BaseMetric):
    """Score the tools an agent called against the tools it should have called, names compared exactly
    (case-sensitive), and with ``match_arguments`` their arguments too.

    Modes (eval-ai-library's; ``exact_match`` wins when both flags are set):

    - default: matched / len(expected), where each expected tool is matched by a distinct call (multiset
      intersection; with arguments a maximum matching); order and extra calls do not matter.
    - ``exact_match=True``: 1.0 when the calls equal the expected calls (same tools, same order, same length:
      an extra call fails it), else 0.0.
    - ``check_ordering=True``: length of the longest common subsequence of the expected calls and the calls /
      len(expected).

    What is compared: without ``match_arguments``, ``tools_called`` against ``expected_tools`` (each falling
    back to the names of ``tool_calls``, then of the ``execution_trace``'s ``tool_call`` steps, and to the names
    of ``expected_tool_calls``). With ``match_arguments=True``, ``tool_calls`` (else the trace's tool calls, each
    invocation once, their ``input`` as arguments) against ``expected_tool_calls``: a call matches an expected
    call of the same name when it holds every argument the expected call lists, with an equal JSON value (1 and
    1.0 equal, ``true`` and 1 not; extra arguments allowed); an expected call without arguments matches by name.

    The expected list is required (:meth:`validate_case`); ``[]`` means "no tool expected" and scores 1.0,
    except with ``exact_match``, where it scores 1.0 only when no tool was called. No calls recorded counts as
    ``[]``. The reason states what the score counts (matched, missing, extra calls), never more or less.

    Args:
        threshold: minimum passing score, default 0.5.
        exact_match: require exactly the expected calls, in order; default False.
        check_ordering: score the longest in-order subsequence of expected calls; default False.
        match_arguments: compare arguments too (``tool_calls`` / trace against ``expected_tool_calls``); default
            False.
        name: the name in results (default ``"ToolCorrectnessMetric"``).

    Raises:
        ValueError: a threshold outside [0, 1], or a flag that is not a boolean.

    ``evaluation_log`` keys: ``mode`` (``"default"``, ``"exact_match"`` or ``"check_ordering"``),
    ``tools_called``, ``expected_tools`` (names; ``name({arguments})`` where arguments count), ``matched``
    (matched expected tools, LCS length, or 1/0 for exact match), ``missing`` (expected tools no call matched,
    default mode; else ``[]``); exact match adds ``extra`` (calls no expected tool matched); ``match_arguments``
    adds ``match_arguments: true``.
    """

    version: ClassVar[str] = "2"

    def __init__(
        self,
        threshold: float = 0.5,
        exact_match: bool = False,
        check_ordering: bool = False,
        match_arguments: bool = False,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        for label, flag in (
            ("exact_match", exact_match),
            ("check_ordering", check_ordering),
            ("match_arguments", match_arguments),
        ):
            if not isinstance(flag, bool):
                raise ValueError(f"{label} must be true or false, got {quote(flag)}")
        self.exact_match = exact_match
        self.check_ordering = check_ordering
        self.match_arguments = match_arguments
        self._mode = "exact_match" if exact_match else "check_ordering" if check_ordering else "default"

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, exact_match, check_ordering, match_arguments)."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "exact_match": self.exact_match,
            "check_ordering": self.check_ordering,
            "match_arguments": self.match_arguments,
        }

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """Problems: no expected list (``expected_tools`` or ``expected_tool_calls``; ``[]`` is valid); with
        ``match_arguments``, no ``expected_tool_calls``, or calls recorded by name only (``tools_called`` without
        ``tool_calls`` or an ``execution_trace``)."""
        if self.match_arguments:
            problems = []
            if case.expected_tool_calls is None:
                problems.append(
                    (
                        "expected_tool_calls",
                        "is missing (ToolCorrectnessMetric with match_arguments compares the calls with "
                        "expected_tool_calls; [] means no tool expected)",
                    )
                )
            if case.tool_calls is None and case.execution_trace is None and case.tools_called is not None:
                problems.append(
                    (
                        "tool_calls",
                        "is missing: match_arguments needs the calls' arguments (tool_calls or an "
                        "execution_trace); tools_called holds names only",
                    )
                )
            return problems
        if case.expected_tools is None and case.expected_tool_calls is None:
            return [
                (
                    "expected_tools",
                    "is missing (ToolCorrectnessMetric compares tools_called with "
                    "expected_tools; [] means no tool expected)",
                )
            ]
        return []

    def _calls(self, case: EvalTestCase) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """(called, expected) of ``case`` as compared: names, or :data:`_Call` pairs with ``match_arguments``."""
        if self.match_arguments:
            calls: list[ToolCall] | None = case.tool_calls
            if calls is None and case.execution_trace is not None:
                calls = trace_calls(case.execution_trace)
            return tuple(map(_pair, calls or ())), tuple(map(_pair, case.expected_tool_calls or ()))
        called = case.tools_called
        if called is None and case.tool_calls is not None:
            called = [call.name for call in case.tool_calls]
        if called is None and case.execution_trace is not None:
            called = [call.name for call in trace_calls(case.execution_trace)]
        expected = case.expected_tools
        if expected is None and case.expected_tool_calls is not None:
            expected = [call.name for call in case.expected_tool_calls]
        return tuple(called or ()), tuple(expected or ())

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Score each case; cases with the same (calls, expected calls) share one (immutable) result object."""
        results: list[MetricResult] = []
        append, scored, verdict_of = results.append, MetricResult.scored, self._verdict
        name, threshold = self.name, self.threshold
        shared: dict[tuple[tuple[Any, ...], tuple[Any, ...]], MetricResult] = {}
        for case in cases:
            key = self._calls(case)
            result = shared.get(key)
            if result is None:
                verdict = verdict_of(*key)
                result = shared[key] = scored(name, verdict[0], threshold, verdict[1], verdict[2])
            append(result)
        return results

    def _verdict(self, called: tuple[Any, ...], expected: tuple[Any, ...]) -> _Verdict:
        """(score, reason, evaluation_log) of one pair of call lists."""
        missing: list[Any] = []
        log: dict[str, Any] = {"mode": self._mode, "tools_called": _labels(called), "expected_tools": _labels(expected)}
        if self.exact_match:
            matched = int(len(called) == len(expected) and all(map(_matches, called, expected)))
            score = float(matched)
            extra = _unmatched(expected, called)  # calls no expected tool accounts for
            reason = _exact_reason(called, expected, bool(matched), extra)
            log["extra"] = _labels(extra)
        elif self.check_ordering:
            matched = _lcs_length(expected, called)
            score = matched / len(expected) if expected else 1.0
            reason = (
                f"{matched} of {len(expected)} expected tool call(s) were made in the expected order "
                f"(longest common subsequence); called {_labels(called)}."
            )
        else:
            missing = _unmatched(called, expected)
            matched = len(expected) - len(missing)
            score = matched / len(expected) if expected else 1.0
            reason = f"{matched} of {len(expected)} expected tool call(s) were made" + (
                f"; missing {_labels(missing)}{_other_arguments(called, missing)}." if missing else "."
            )
        log.update(matched=matched, missing=_labels(missing))
        if self.match_arguments:
            log["match_arguments"] = True
        return score, reason, log


def _pair(call: ToolCall) -> _Call:
    """A :class:`ToolCall` as compared with ``match_arguments``."""
    return call.name, None if call.arguments is None else canonical(call.arguments)


def _exact_reason(called: Sequence[Any], expected: Sequence[Any], matched: bool, extra: Sequence[Any]) -> str:
    """The reason of an exact-match verdict: what made it pass, or each thing that made it fail."""
    if matched:
        return f"Exact match: the {len(expected)} expected tool call(s) were made, in order, and no other."
    missing = _unmatched(called, expected)
    parts = []
    if missing:
        parts.append(f"missing {_labels(missing)}")
    if extra:
        parts.append(f"{len(extra)} extra call(s) {_labels(extra)}")
    if not parts:
        parts.append("the same calls in another order")
    return f"Mismatch: expected {_labels(expected)}, called {_labels(called)}: {'; '.join(parts)}."


def _other_arguments(called: Sequence[Any], missing: Sequence[Any]) -> str:
    """For missing expected calls whose tool was called with other arguments, a clause naming those tools."""
    names = sorted({item[0] for item in missing if not isinstance(item, str) and any(c[0] == item[0] for c in called)})
    return f" ({', '.join(names)} called with other arguments)" if names else ""
