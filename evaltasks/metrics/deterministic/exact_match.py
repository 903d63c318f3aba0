"""ExactMatchMetric: does the output equal the expected output?

Source: eval-ai-library's ``ExactMatchMetric`` documentation page
(https://library.eval-ai.com/metrics/deterministic/exact-match); the exact comparison rules (Unicode White_Space
stripping, NFC, case folding) are docs/metrics/deterministic.md#text-comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

from evaltasks.embeddings.base import VectorTable
from evaltasks.metrics.base import BaseMetric, check_flag
from evaltasks.metrics.registry import register_metric
from evaltasks.metrics.text import WHITE_SPACE, comparable
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase


@register_metric("ExactMatchMetric")
class ExactMatchMetric(BaseMetric):
    """Score 1.0 when ``actual_output`` equals ``expected_output`` after normalisation, else 0.0.

    Both sides go through :func:`evaltasks.metrics.text.comparable`: leading and trailing Unicode White_Space
    stripped when ``strip_whitespace``, NFC normalisation, and Unicode case folding when not ``case_sensitive``.

    Args:
        threshold: minimum passing score, default 1.0.
        case_sensitive: compare case exactly (default True); False compares case-folded text.
        strip_whitespace: ignore leading and trailing White_Space on both sides (default True).
        name: the name in results (default ``"ExactMatchMetric"``).

    Raises:
        ValueError: a threshold outside [0, 1] or a flag that is not a bool.

    A case without ``expected_output`` is invalid input (:meth:`validate_case`). ``evaluation_log`` keys:
    ``matched``, ``case_sensitive``, ``strip_whitespace`` (one dict shared by the results of equal verdicts).
    """

    required_fields: ClassVar[tuple[str, ...]] = ("actual_output", "expected_output")
    version: ClassVar[str] = "1"

    def __init__(
        self,
        threshold: float = 1.0,
        case_sensitive: bool = True,
        strip_whitespace: bool = True,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        self.case_sensitive = check_flag("case_sensitive", case_sensitive)
        self.strip_whitespace = check_flag("strip_whitespace", strip_whitespace)
        mode = ("case-sensitive" if case_sensitive else "case-insensitive") + (
            ", surrounding whitespace ignored" if strip_whitespace else ""
        )
        log = {"case_sensitive": case_sensitive, "strip_whitespace": strip_whitespace}
        self._verdicts = {
            True: (1.0, f"Output matches the expected output exactly ({mode}).", {"matched": True, **log}),
            False: (0.0, f"Output does not match the expected output ({mode}).", {"matched": False, **log}),
        }

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, case_sensitive, strip_whitespace)."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "case_sensitive": self.case_sensitive,
            "strip_whitespace": self.strip_whitespace,
        }

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs an ``expected_output`` (an empty string is a value; None is missing)."""
        if case.expected_output is None:
            return [("expected_output", "is missing")]
        return []

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Compare each case's output with its expected output; no embeddings involved. The cases of one
        verdict share one (immutable) result object."""
        results: list[MetricResult] = []
        append, scored, name, threshold = results.append, MetricResult.scored, self.name, self.threshold
        case_sensitive, strip, white_space = self.case_sensitive, self.strip_whitespace, WHITE_SPACE
        hit, miss = (scored(name, v[0], threshold, v[1], v[2]) for v in (self._verdicts[True], self._verdicts[False]))
        for case in cases:
            actual, expected = case.actual_output, cast(str, case.expected_output)  # validated: set
            if strip:
                actual, expected = actual.strip(white_space), expected.strip(white_space)
            if actual == expected:
                matched = True
            elif actual.isascii() and expected.isascii():  # NFC is a no-op on ASCII, case folding is lower()
                # lower() keeps an ASCII string's length: different lengths never match
                matched = not case_sensitive and len(actual) == len(expected) and actual.lower() == expected.lower()
            else:
                matched = comparable(actual, case_sensitive=case_sensitive) == comparable(
                    expected, case_sensitive=case_sensitive
                )
            append(hit if matched else miss)
        return results
