"""EndsWithMetric: does the output end with a given suffix?

Source: eval-ai-library's ``EndsWithMetric`` documentation page
(https://library.eval-ai.com/metrics/deterministic/ends-with); the exact rules (NFC, Unicode case folding, no
stripping) are docs/metrics/deterministic.md#text-comparison.
"""

from __future__ import annotations

from evaltasks.metrics.base import NonEmptyStr
from evaltasks.metrics.deterministic.starts_with import AffixMetric
from evaltasks.metrics.registry import register_metric


@register_metric("EndsWithMetric")
class EndsWithMetric(AffixMetric):
    """Score 1.0 when the output ends with ``suffix``, else 0.0 (rules: :class:`AffixMetric`; the output is
    not stripped, so a trailing newline after the suffix fails).

    Args:
        threshold: minimum passing score, default 1.0.
        suffix: required, a non-empty string.
        case_sensitive: match case exactly (default True).
        name: the name in results (default ``"EndsWithMetric"``).

    Raises:
        TypeError: ``suffix`` is missing.
        ValueError: a None, non-string or empty suffix, a flag that is not a bool, or a threshold outside
            [0, 1].

    ``evaluation_log`` keys: ``suffix``, ``case_sensitive``, ``matched`` (one dict shared by the results of
    equal verdicts).
    """

    _parameter = "suffix"
    _check = str.endswith
    _verbs = ("ends", "does not end")

    def __init__(
        self,
        threshold: float = 1.0,
        *,
        suffix: NonEmptyStr,
        case_sensitive: bool = True,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        self._setup(suffix, case_sensitive)

    @property
    def suffix(self) -> str:
        """The suffix as given."""
        return self._affix
