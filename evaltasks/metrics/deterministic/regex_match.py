"""RegexMatchMetric: does the output match a regular expression?

Source: eval-ai-library's ``RegexMatchMetric`` documentation page
(https://library.eval-ai.com/metrics/deterministic/regex-match); the exact rules are
docs/metrics/deterministic.md#regexmatchmetric. Differences from eval-ai-library: an invalid pattern is rejected at construction (it scored
every case 0.0 there), and a match that runs longer than ``timeout_s`` errors that case instead of hanging the run.
"""

from __future__ import annotations

import re._constants as _c  # the standard library's own parser: the structure of a pattern, for clock_free_length
import re._parser as _re_parser
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar

import regex
from annotated_types import Gt

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import QUOTE_MAX_CHARS, bounded, quote
from evaltasks.metrics.base import BaseMetric, NonEmptyStr
from evaltasks.metrics.registry import register_metric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

DEFAULT_TIMEOUT_S = 1.0
MATCH_VALUE_MAX_CHARS = 200  # what the log and reason keep of the matched text
#: Backtracking steps per second assumed when proving that a match ends well within ``timeout_s`` (see
#: :func:`clock_free_length`): the engine does ~100 times more, so such a match takes ~1 % of its timeout.
SAFE_STEPS_PER_S = 1_000_000
_LONGEST_OUTPUT = 1 << 40  # beyond any output: the upper end of clock_free_length's search
_ONE_CHARACTER = frozenset({_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN, _c.CATEGORY})
_BRACES = frozenset({ord("{"), ord("}")})


def show_pattern(pattern: str) -> str:
    """``pattern`` as its user wrote it, between single quotes and cut to :data:`~evaltasks.errors.QUOTE_MAX_CHARS`
    characters: ``\\bA-\\d{4}\\b`` shows as ``'\\bA-\\d{4}\\b'``, where ``repr`` would double each backslash;
    a pattern holding a character that does not print (a newline, a tab) shows as its ``repr``,
    so a message stays on one line."""
    if not pattern.isprintable():
        return quote(pattern)
    return "'" + bounded(pattern, QUOTE_MAX_CHARS - 2) + "'"


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """``pattern`` compiled by the ``regex`` package (Python syntax, inline flags such as ``(?i)`` included).

    Raises:
        ValueError: ``pattern`` is not a string, is empty (it would match every output), or is not a valid
            expression; the message starts with ``pattern`` and says why and where, e.g. ``pattern '(' is
            invalid: missing ) at position 1`` (the pattern shown by :func:`show_pattern`).
    """
    if not isinstance(pattern, str):
        raise ValueError(f"pattern must be a string (a regular expression), got {quote(pattern)}")
    if not pattern:
        raise ValueError("pattern must be a non-empty string (an empty pattern matches every output)")
    try:
        return regex.compile(pattern)
    except regex.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise ValueError(f"pattern {show_pattern(pattern)} is invalid: {exc.msg}{where}") from None
    except (OverflowError, RecursionError, ValueError) as exc:  # e.g. a repeat count beyond the engine's limit
        raise ValueError(f"pattern {show_pattern(pattern)} is invalid: {exc}") from None


def clock_free_length(pattern: str, timeout_s: float) -> int:
    """The longest output (in characters; -1: none) on which matching ``pattern`` provably takes far less than
    ``timeout_s``, so that the ``regex`` engine may run it without its timeout (whose two clock reads cost
    ~1.2 µs a match, twice the match itself on a 100-character output).

    The proof covers backtracking patterns only: literals, character sets and classes, anchors (``\\b``, ``^``,
    ``$``), groups, alternatives, and repeats of a body with no choice in it (``\\d{4}``, ``\\w+``,
    ``(?:ab)*``). On an output of ``n`` characters the engine tries at most ``n + 1`` start positions; from
    each, at most ``paths`` ways through the pattern (the product of the repeats' choices,
    ``min(max, n) - min + 1`` each; alternatives add up), each at most ``depth`` steps long (every repeat taken
    ``min(max, n)`` times). The output qualifies while ``(n + 1) × paths × depth`` is at most
    :data:`SAFE_STEPS_PER_S` × ``timeout_s``. Anything else (a repeat of a repeat or of an alternative,
    backreferences, lookarounds, atomic groups, possessive repeats, braces the standard library reads as
    literals, such as the ``regex`` package's fuzzy ``{e<=1}``, and any syntax it does not know) is not proved:
    -1, and every match keeps its timeout. The structure is read by the standard library's own parser
    (``re._parser``), which agrees with the ``regex`` package (version 0, its default) on what it accepts.
    """
    try:
        tree = _re_parser.parse(pattern)
    except Exception:  # syntax the standard library does not know (regex-only), or beyond its limits  # noqa: BLE001
        return -1
    budget = SAFE_STEPS_PER_S * timeout_s

    def fixed(items: Any) -> bool:
        """Whether ``items`` match in one way only (no alternative, no repeat with a choice, at any depth)."""
        for op, arg in items:
            if op == _c.SUBPATTERN:
                if not fixed(arg[3]):
                    return False
            elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
                if arg[0] != arg[1] or not fixed(arg[2]):
                    return False
            elif op not in _ONE_CHARACTER and op != _c.AT:
                return False
        return True

    def walk(items: Any, n: int) -> tuple[float, float] | None:
        """(paths, depth) of ``items`` on ``n`` characters, each capped just above the budget; None: not
        provable."""
        paths, depth = 1.0, 0.0
        for op, arg in items:
            if op in _ONE_CHARACTER or op == _c.AT:
                if op == _c.LITERAL and arg in _BRACES:
                    return None
                inner: tuple[float, float] | None = (1.0, 1.0)
            elif op == _c.SUBPATTERN:
                inner = walk(arg[3], n)
            elif op == _c.BRANCH:
                branches = [walk(branch, n) for branch in arg[1]]
                if any(b is None for b in branches):
                    return None
                inner = (sum(b[0] for b in branches), 1.0 + max(b[1] for b in branches))  # type: ignore[index,misc]
            elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
                low, high, body = arg
                once = walk(body, n) if fixed(body) else None  # a repeat of a choice: exponential
                if once is None:
                    return None
                times = min(high, n)
                inner = (float(max(1, times - low + 1)), 1.0 + max(times, low) * once[1])
            else:
                return None
            if inner is None:
                return None
            paths, depth = min(paths * inner[0], budget + 1), min(depth + inner[1], budget + 1)
        return paths, depth

    def fits(n: int) -> bool:
        found = walk(tree, n)
        return found is not None and (n + 1) * found[0] * max(found[1], 1.0) <= budget

    if not fits(0):
        return -1
    low, high = 0, _LONGEST_OUTPUT
    while low < high:  # the bound grows with n: the largest n that fits
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


@register_metric("RegexMatchMetric")
class RegexMatchMetric(BaseMetric):
    """Score 1.0 when ``pattern`` matches the output, else 0.0.

    The pattern is Python regular-expression syntax, run by the ``regex`` package; there are no flag
    parameters (eval-ai-library documents none): use inline flags, e.g. ``(?i)`` for case-insensitive.
    ``full_match=False`` (default) searches for the pattern anywhere in the output (``search``);
    ``full_match=True`` requires the whole output to match (``fullmatch``). The output is not stripped.
    An output on which the match provably ends within ~1 % of ``timeout_s`` (:func:`clock_free_length`, e.g.
    ``\\b\\d{4}\\b`` on up to ~140,000 characters) is matched without the timeout's clock: same result, no clock
    reads.

    Args:
        threshold: minimum passing score, default 1.0.
        pattern: the regular expression (required).
        full_match: whole output must match, default False.
        timeout_s: seconds one match may run (default 1.0, > 0); a pattern that backtracks catastrophically on
            an output (e.g. ``(a|aa)+$`` on ``"a" * 60 + "b"``) is stopped there and that case is ``errored``,
            while the other cases are scored. None: no limit (about 1.2 us per case faster: the engine reads no
            clock), for trusted patterns only.
        name: the name in results (default ``"RegexMatchMetric"``).

    Raises:
        TypeError: ``pattern`` is missing.
        ValueError: an empty or invalid pattern (message ``pattern '...' is invalid: <why> at position <n>``), a
            non-boolean ``full_match``, a ``timeout_s`` that is neither None nor a positive number, a threshold
            outside [0, 1].

    ``evaluation_log`` keys: ``pattern``, ``full_match``, ``matched``, ``match_value`` (the matched text, at
    most 200 characters, or None).
    """

    version: ClassVar[str] = "1"

    def __init__(
        self,
        threshold: float = 1.0,
        *,
        pattern: NonEmptyStr,
        full_match: bool = False,
        timeout_s: Annotated[float, Gt(0)] | None = DEFAULT_TIMEOUT_S,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        if pattern is None:
            raise TypeError("RegexMatchMetric requires pattern (a regular expression)")
        self._compiled = compile_pattern(pattern)
        if not isinstance(full_match, bool):
            raise ValueError(f"full_match must be true or false, got {quote(full_match)}")
        if timeout_s is not None and (
            isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf")
        ):
            raise ValueError(
                f"timeout_s must be a positive number of seconds or null (no limit), got {quote(timeout_s)}"
            )
        self.pattern = pattern
        self.full_match = full_match
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        # outputs up to this many characters are matched without the timeout's clock (-1: none)
        self._clock_free = -1 if self.timeout_s is None else clock_free_length(pattern, self.timeout_s)

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, pattern, full_match, timeout_s)."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "pattern": self.pattern,
            "full_match": self.full_match,
            "timeout_s": self.timeout_s,
        }

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Match each case's output; a case whose match exceeds ``timeout_s`` is ``errored``, the rest scored.
        The cases without a match, and those with the same matched text, share one (immutable) result object."""
        results: list[MetricResult] = []
        append, scored, name, threshold = results.append, MetricResult.scored, self.name, self.threshold
        timeout, clock_free = self.timeout_s, self._clock_free
        find = self._compiled.fullmatch if self.full_match else self._compiled.search
        no_match = scored(name, 0.0, threshold, *self._verdict(None))
        timed_out: MetricResult | None = None
        shared: dict[str, MetricResult] = {}  # matched text -> result
        for case in cases:
            text = case.actual_output
            try:
                # positional (string, pos, endpos, concurrent, partial, timeout): keywords cost ~0.3 us a call
                found = find(text, None, None, None, False, None if len(text) <= clock_free else timeout)
            except TimeoutError:
                if timed_out is None:
                    timed_out = MetricResult.errored(name, threshold, self._timeout_message())
                append(timed_out)
                continue
            if found is None:
                append(no_match)
                continue
            value = found.group()
            result = shared.get(value)
            if result is None:
                result = shared[value] = scored(name, 1.0, threshold, *self._verdict(value))
            append(result)
        return results

    def _timeout_message(self) -> str:
        return (
            f"matching pattern {quote(self.pattern)} exceeded the timeout of {self.timeout_s:g} s "
            "(timeout_s; the pattern likely backtracks catastrophically on this output)"
        )

    def _verdict(self, value: str | None) -> tuple[str, dict[str, Any]]:
        """(reason, evaluation_log) of a match of ``value`` (None: no match)."""
        pattern = show_pattern(self.pattern)
        kept = None if value is None else value[:MATCH_VALUE_MAX_CHARS]
        if self.full_match:
            reason = (
                f"The whole output does not match pattern {pattern}."
                if value is None
                else f"The whole output matches pattern {pattern}."
            )
        else:
            reason = (
                f"Pattern {pattern} not found in the output."
                if value is None
                else f"Pattern {pattern} found in the output: {quote(value)}."
            )
        return reason, {
            "pattern": self.pattern,
            "full_match": self.full_match,
            "matched": value is not None,
            "match_value": kept,
        }
