"""ContainsMetric: does the output contain any, all or none of the given keywords?

Source: eval-ai-library's ``ContainsMetric`` documentation page
(https://library.eval-ai.com/metrics/deterministic/contains); the exact rules (substring match after NFC and
optional case folding, the share found in mode ``all``, duplicate keywords) are
docs/metrics/deterministic.md#text-comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

from annotated_types import MinLen

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.metrics.base import BaseMetric, NonEmptyStr, check_flag
from evaltasks.metrics.registry import register_metric
from evaltasks.metrics.text import comparable
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

MODES = ("any", "all", "none")

_Verdict = tuple[float, str, dict[str, Any]]


@register_metric("ContainsMetric")
class ContainsMetric(BaseMetric):
    """Score the output by which ``keywords`` it contains (substring match, after normalisation).

    Scores by ``mode``: ``"any"`` 1.0 when at least one keyword is found, else 0.0; ``"all"`` the share of
    keywords found (found / total, so with the default threshold 1.0 it passes only when every keyword is
    found); ``"none"`` 1.0 when no keyword is found, else 0.0. Output and keywords go through
    :func:`evaltasks.metrics.text.comparable` (NFC; Unicode case folding when not ``case_sensitive``).
    Keywords equal after that normalisation count once (the first spelling is the one reported).

    Args:
        threshold: minimum passing score, default 1.0.
        keywords: required; a non-empty list of non-empty strings.
        mode: ``"any"`` (default), ``"all"`` or ``"none"``.
        case_sensitive: match case exactly (default True).
        name: the name in results (default ``"ContainsMetric"``).

    Raises:
        TypeError: ``keywords`` is missing.
        ValueError: a None or empty ``keywords``, a bare string or a non-string or empty keyword, an unknown
            mode, a flag that is not a bool, or a threshold outside [0, 1].

    ``evaluation_log`` keys: ``found`` and ``missing`` (keywords as given, deduplicated, in order), ``mode``
    (one dict shared by the results of equal verdicts).
    """

    version: ClassVar[str] = "1"

    def __init__(
        self,
        threshold: float = 1.0,
        *,
        keywords: Annotated[list[NonEmptyStr], MinLen(1)],
        mode: Literal["any", "all", "none"] = "any",
        case_sensitive: bool = True,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        if keywords is None:
            raise ValueError("keywords is required: a non-empty list of strings")
        if isinstance(keywords, str) or not isinstance(keywords, (list, tuple)):
            raise ValueError(f"keywords must be a list of strings, got {quote(keywords)}")
        if not keywords:
            raise ValueError("keywords must not be empty")
        bad = [i for i, k in enumerate(keywords) if not isinstance(k, str) or not k]
        if bad:
            raise ValueError(f"keywords must be non-empty strings; item(s) {quote(bad)} are not")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {list(MODES)}, got {quote(mode)}")
        self.keywords = list(keywords)
        self.mode = mode
        self.case_sensitive = check_flag("case_sensitive", case_sensitive)
        unique: dict[str, str] = {}  # normalised keyword -> first spelling given
        for keyword in keywords:
            unique.setdefault(comparable(keyword, case_sensitive=case_sensitive), keyword)
        self._bits = tuple((needle, 1 << i) for i, needle in enumerate(unique))
        self._spellings = tuple(unique.values())

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, keywords, mode, case_sensitive)."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "keywords": self.keywords,
            "mode": self.mode,
            "case_sensitive": self.case_sensitive,
        }

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Search each case's output for the keywords; no embeddings involved. The cases that found the same
        keywords share one (immutable) result object."""
        results: list[MetricResult] = []
        append, scored, name, threshold = results.append, MetricResult.scored, self.name, self.threshold
        case_sensitive, bits = self.case_sensitive, self._bits
        shared: dict[int, MetricResult] = {}  # which keywords were found (a bit mask) -> result
        for case in cases:
            text = case.actual_output
            if not text.isascii():
                text = comparable(text, case_sensitive=case_sensitive)
            elif not case_sensitive:
                text = text.lower()  # ASCII: NFC is a no-op and case folding is lower()
            key = 0  # an int, not a tuple: nothing for the cyclic garbage collector to count per case
            for needle, bit in bits:
                if needle in text:
                    key |= bit
            result = shared.get(key)
            if result is None:
                verdict = self._verdict(key)
                result = shared[key] = scored(name, verdict[0], threshold, verdict[1], verdict[2])
            append(result)
        return results

    def _verdict(self, found_mask: int) -> _Verdict:
        """(score, reason, evaluation_log) when keyword ``i`` (deduplicated order) was found iff bit ``i`` of
        ``found_mask`` is set."""
        found = [k for i, k in enumerate(self._spellings) if found_mask >> i & 1]
        missing = [k for i, k in enumerate(self._spellings) if not found_mask >> i & 1]
        total = len(self._spellings)
        if self.mode == "any":
            score = 1.0 if found else 0.0
        elif self.mode == "all":
            score = len(found) / total
        else:
            score = 0.0 if found else 1.0
        reason = (
            f"Found {len(found)}/{total} keywords (mode={self.mode}); found: {quote(found)}; missing: {quote(missing)}."
        )
        return score, reason, {"found": found, "missing": missing, "mode": self.mode}
