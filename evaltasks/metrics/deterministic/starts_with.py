"""StartsWithMetric: does the output start with a given prefix? (and the base shared with EndsWithMetric)

Source: eval-ai-library's ``StartsWithMetric`` documentation page
(https://library.eval-ai.com/metrics/deterministic/starts-with); the exact rules (NFC, Unicode case folding,
no stripping) are docs/metrics/deterministic.md#text-comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.metrics.base import BaseMetric, NonEmptyStr, check_flag
from evaltasks.metrics.registry import register_metric
from evaltasks.metrics.text import comparable
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase


class AffixMetric(BaseMetric):
    """Base of :class:`StartsWithMetric` and :class:`EndsWithMetric`: 1.0 when the output, as is (not
    stripped), starts (ends) with the affix, compared after :func:`evaltasks.metrics.text.comparable` (NFC;
    Unicode case folding when not ``case_sensitive``), else 0.0.

    Subclasses set ``_parameter`` (``"prefix"``/``"suffix"``), ``_check`` (``str.startswith``/``str.endswith``)
    and ``_verbs`` (the reason's wording), and call :meth:`_setup` from their constructor.
    """

    version: ClassVar[str] = "1"
    _parameter: ClassVar[str]
    _check: ClassVar[Callable[[str, str], bool]]
    _verbs: ClassVar[tuple[str, str]]  # (matched, not matched), e.g. ("starts", "does not start")

    def _setup(self, affix: str | None, case_sensitive: bool) -> None:
        """Check and store the affix. Raises ValueError for a missing, non-string or empty affix or a non-bool
        ``case_sensitive``."""
        label = self._parameter
        if affix is None:
            raise ValueError(f"{label} is required: a non-empty string")
        if not isinstance(affix, str) or not affix:
            raise ValueError(f"{label} must be a non-empty string, got {quote(affix)}")
        self.case_sensitive = check_flag("case_sensitive", case_sensitive)
        self._affix = affix
        self._needle = comparable(affix, case_sensitive=case_sensitive)
        shown = quote(affix)
        self._verdicts = {
            matched: (
                1.0 if matched else 0.0,
                f"Output {self._verbs[not matched]} with {shown}.",
                {label: affix, "case_sensitive": case_sensitive, "matched": matched},
            )
            for matched in (True, False)
        }

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, prefix or suffix, case_sensitive)."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            self._parameter: self._affix,
            "case_sensitive": self.case_sensitive,
        }

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Check each case's output; no embeddings involved. The cases of one verdict share one (immutable)
        result object."""
        results: list[MetricResult] = []
        append, scored, name, threshold = results.append, MetricResult.scored, self.name, self.threshold
        case_sensitive, needle, check = self.case_sensitive, self._needle, type(self)._check
        hit, miss = (scored(name, v[0], threshold, v[1], v[2]) for v in (self._verdicts[True], self._verdicts[False]))
        for case in cases:
            text = case.actual_output
            if not text.isascii():
                text = comparable(text, case_sensitive=case_sensitive)
            elif not case_sensitive:
                text = text.lower()  # ASCII: NFC is a no-op and case folding is lower()
            append(hit if check(text, needle) else miss)
        return results


@register_metric("StartsWithMetric")
class StartsWithMetric(AffixMetric):
    """Score 1.0 when the output starts with ``prefix``, else 0.0 (rules: :class:`AffixMetric`).

    Args:
        threshold: minimum passing score, default 1.0.
        prefix: required, a non-empty string.
        case_sensitive: match case exactly (default True).
        name: the name in results (default ``"StartsWithMetric"``).

    Raises:
        TypeError: ``prefix`` is missing.
        ValueError: a None, non-string or empty prefix, a flag that is not a bool, or a threshold outside
            [0, 1].

    ``evaluation_log`` keys: ``prefix``, ``case_sensitive``, ``matched`` (one dict shared by the results of
    equal verdicts).
    """

    _parameter = "prefix"
    _check = str.startswith
    _verbs = ("starts", "does not start")

    def __init__(
        self,
        threshold: float = 1.0,
        *,
        prefix: NonEmptyStr,
        case_sensitive: bool = True,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        self._setup(prefix, case_sensitive)

    @property
    def prefix(self) -> str:
        """The prefix as given."""
        return self._affix
