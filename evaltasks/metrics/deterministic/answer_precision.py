"""AnswerPrecisionMetric: how precisely the output matches the expected output, without a model.

Source: eval-ai-library's ``AnswerPrecisionMetric`` documentation page
(https://library.eval-ai.com/metrics/answer-precision/): five sub-scores (exact match, character similarity,
token precision, numeric agreement, token containment) with weights 0.25 / 0.25 / 0.20 / 0.15 / 0.15, numeric
tolerances 0.01 absolute and 0.05 relative, exponent ``power_p`` 0.3 and threshold 0.6. The page's rules win over
its 0.8.2 code, which scores other components with other weights; the exact rules, and where and why evaltasks
differs from both, are docs/metrics/deterministic.md#answerprecisionmetric.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from difflib import SequenceMatcher
from typing import Annotated, Any, ClassVar, cast

import regex
from annotated_types import Ge, Gt

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.metrics.text import comparable
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

#: The sub-scores and their weights, in the docs page's order (they sum to 1.0).
WEIGHTS: dict[str, float] = {
    "exact_match": 0.25,
    "char_similarity": 0.25,
    "token_precision": 0.20,
    "numeric_agreement": 0.15,
    "token_containment": 0.15,
}

#: eval-ai-library 0.8.2's stopword set (``STOPWORDS`` of its answer_precision module), the default
#: ``token_stopwords``.
STOPWORDS: frozenset[str] = frozenset(
    [
        "the",
        "a",
        "an",
        "and",
        "or",
        "but",
        "if",
        "then",
        "else",
        "to",
        "of",
        "in",
        "on",
        "for",
        "with",
        "as",
        "by",
        "at",
        "from",
        "that",
        "this",
        "it",
        "is",
        "are",
        "was",
        "were",
    ]
)

# A token: a run of letters, digits and combining marks; anything else (whitespace, punctuation, symbols)
# separates tokens. On ASCII text this is eval-ai-library's rule (split on whitespace and ASCII punctuation).
_TOKEN = regex.compile(r"[\p{L}\p{N}\p{M}]+")
# eval-ai-library's number pattern, unchanged: an optional sign, digits with an optional decimal point, an
# optional exponent ("4", "-3.5", ".5", "1e-3"; "1,000" is 1 and 000).
_NUMBER = re.compile(r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?")
_SHOWN_TERMS = 10  # terms named in a reason; evaluation_log holds them all


def _tokens(text: str, stopwords: frozenset[str]) -> set[str]:
    """The set of tokens of ``text`` (already case-folded), stopwords left out."""
    return {t for t in _TOKEN.findall(text) if t not in stopwords}


def _numbers(text: str) -> list[float]:
    """The finite numbers written in ``text``, in order (eval-ai-library's pattern)."""
    values = (float(m) for m in _NUMBER.findall(text))
    return [v for v in values if math.isfinite(v)]


def numeric_agreement(
    actual: Sequence[float], expected: Sequence[float], tol_abs: float, tol_rel: float
) -> tuple[float, list[float], list[float]]:
    """Share of the expected numbers that the actual numbers agree with, and which did / did not.

    Each expected number, in order, takes the nearest actual number not taken yet (eval-ai-library's greedy
    matching); it agrees when ``|a - e| <= tol_abs`` or ``|a - e| <= tol_rel * |e|``. Extra actual numbers do
    not count. No number on either side: 1.0; numbers only in the actual output: 0.0 (as the library).

    Returns:
        ``(score, matched expected numbers, unmatched expected numbers)``.
    """
    if not expected:
        return (0.0 if actual else 1.0), [], []
    free = list(actual)
    matched: list[float] = []
    missed: list[float] = []
    for e in expected:
        if not free:
            missed.append(e)
            continue
        best = min(range(len(free)), key=lambda i: abs(free[i] - e))
        error = abs(free.pop(best) - e)
        (matched if error <= tol_abs or error <= tol_rel * abs(e) else missed).append(e)
    return len(matched) / len(expected), matched, missed


def _check_non_negative(label: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{label} must be a finite number >= 0, got {quote(value)}")
    return float(value)


def _check_stopwords(token_stopwords: Iterable[str] | None) -> frozenset[str]:
    if token_stopwords is None:
        return STOPWORDS
    if isinstance(token_stopwords, str) or not isinstance(token_stopwords, (list, tuple, set, frozenset)):
        raise ValueError(f"token_stopwords must be a list of strings, got {quote(token_stopwords)}")
    bad = [w for w in token_stopwords if not isinstance(w, str)]
    if bad:
        raise ValueError(f"token_stopwords must be strings; {quote(bad)} are not")
    return frozenset(comparable(w, case_sensitive=False) for w in token_stopwords)


def _terms(terms: set[str]) -> str:
    shown = sorted(terms)
    more = f" (+{len(shown) - _SHOWN_TERMS} more)" if len(shown) > _SHOWN_TERMS else ""
    return ", ".join(shown[:_SHOWN_TERMS]) + more if shown else "none"


@register_metric("AnswerPrecisionMetric")
class AnswerPrecisionMetric(BaseMetric):
    """Score how precisely ``actual_output`` matches ``expected_output``: five sub-scores in [0, 1], combined.

    Both sides are compared as ExactMatch compares them case-insensitively (surrounding Unicode White_Space
    stripped, NFC, full case folding); tokens are runs of letters, digits and marks, ``token_stopwords`` left out.

    - exact match (weight 0.25): 1.0 when the two sides are equal, else 0.0;
    - character similarity (0.25): ``difflib.SequenceMatcher(None, actual, expected, autojunk=False).ratio()``;
    - token precision (0.20): the overlap coefficient of the token sets, ``|A ∩ E| / min(|A|, |E|)``;
    - numeric agreement (0.15): the share of the expected numbers matched within the tolerances
      (:func:`numeric_agreement`);
    - token containment (0.15): the share of the expected tokens found in the output, ``|A ∩ E| / |E|``
      (1.0 when the expected output has no token).

    Score = ``Σ weight · sub_score ** power_p``: the weighted power mean before its final ``1 / power_p``
    root, which orders answers the same way but lets a correct, longer answer pass (the docs page's own
    example, "The answer is 4." against "4", scores 0.6316 and passes 0.6; the mean itself, 0.2161, logged as
    ``power_mean``, cannot exceed 0.383 for any answer that is not an exact match). Token precision: both
    token sets empty count as agreeing (1.0), one empty as 0.0.

    Args:
        threshold: minimum passing score, default 0.6 (the docs page's).
        token_stopwords: words left out of the token sub-scores (compared case-folded); default
            :data:`STOPWORDS`, eval-ai-library's set.
        numeric_tolerance_abs: absolute tolerance of a number, default 0.01.
        numeric_tolerance_rel: tolerance relative to the expected number, default 0.05.
        power_p: the exponent, default 0.3; > 0.
        name: the name in results (default ``"AnswerPrecisionMetric"``).

    Raises:
        ValueError: a threshold outside [0, 1], a tolerance negative or not finite, ``power_p`` not > 0 and
            finite, ``token_stopwords`` not a list of strings.

    A case without ``expected_output`` is invalid input (:meth:`validate_case`). ``evaluation_log`` keys:
    ``components`` (the five sub-scores), ``weights``, ``power_p``, ``power_mean``, ``missing_terms`` and
    ``extra_terms`` (expected tokens absent from the output, output tokens absent from the expected),
    ``expected_numbers``, ``actual_numbers``, ``unmatched_numbers``, ``numeric_tolerance_abs``,
    ``numeric_tolerance_rel``.
    """

    required_fields: ClassVar[tuple[str, ...]] = ("actual_output", "expected_output")
    version: ClassVar[str] = "1"

    def __init__(
        self,
        threshold: float = 0.6,
        token_stopwords: list[str] | None = None,
        numeric_tolerance_abs: Annotated[float, Ge(0)] = 0.01,
        numeric_tolerance_rel: Annotated[float, Ge(0)] = 0.05,
        power_p: Annotated[float, Gt(0)] = 0.3,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        self.token_stopwords = None if token_stopwords is None else list(token_stopwords)
        self._stopwords = _check_stopwords(token_stopwords)
        self.numeric_tolerance_abs = _check_non_negative("numeric_tolerance_abs", numeric_tolerance_abs)
        self.numeric_tolerance_rel = _check_non_negative("numeric_tolerance_rel", numeric_tolerance_rel)
        if isinstance(power_p, bool) or not isinstance(power_p, (int, float)) or not 0 < power_p < math.inf:
            raise ValueError(f"power_p must be a finite number > 0, got {quote(power_p)}")
        self.power_p = float(power_p)

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, token_stopwords, tolerances, power_p)."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "token_stopwords": None if self.token_stopwords is None else sorted(self._stopwords),
            "numeric_tolerance_abs": self.numeric_tolerance_abs,
            "numeric_tolerance_rel": self.numeric_tolerance_rel,
            "power_p": self.power_p,
        }

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs an ``expected_output`` (an empty string is a value; None is missing)."""
        if case.expected_output is None:
            return [("expected_output", "is missing")]
        return []

    def components(self, actual: str, expected: str) -> tuple[dict[str, float], dict[str, Any]]:
        """The five sub-scores of one pair of texts, and the details behind them (``evaluation_log`` keys)."""
        a = comparable(actual, case_sensitive=False, strip=True)
        e = comparable(expected, case_sensitive=False, strip=True)
        a_tokens, e_tokens = _tokens(a, self._stopwords), _tokens(e, self._stopwords)
        common = len(a_tokens & e_tokens)
        if a_tokens and e_tokens:
            overlap, containment = common / min(len(a_tokens), len(e_tokens)), common / len(e_tokens)
        else:  # both empty: nothing to disagree on; one empty: nothing shared
            overlap = containment = 0.0 if (a_tokens or e_tokens) else 1.0
        if not e_tokens:
            containment = 1.0  # no expected token to look for
        a_numbers, e_numbers = _numbers(a), _numbers(e)
        numeric, _, missed = numeric_agreement(
            a_numbers, e_numbers, self.numeric_tolerance_abs, self.numeric_tolerance_rel
        )
        scores = {
            "exact_match": 1.0 if a == e else 0.0,
            "char_similarity": SequenceMatcher(None, a, e, autojunk=False).ratio(),
            "token_precision": overlap,
            "numeric_agreement": numeric,
            "token_containment": containment,
        }
        details = {
            "missing_terms": sorted(e_tokens - a_tokens),
            "extra_terms": sorted(a_tokens - e_tokens),
            "expected_numbers": e_numbers,
            "actual_numbers": a_numbers,
            "unmatched_numbers": missed,
        }
        return scores, details

    def _result(self, actual: str, expected: str) -> MetricResult:
        scores, details = self.components(actual, expected)
        p = self.power_p
        score = min(1.0, math.fsum(WEIGHTS[k] * s**p for k, s in scores.items()))  # exact: Σ weights = 1.0
        reason = (
            f"Score {score:.4f} = Σ weight × sub-score^{p:g}: exact match {scores['exact_match']:.0f}, "
            f"character similarity {scores['char_similarity']:.2f}, token precision {scores['token_precision']:.2f}, "
            f"numeric agreement {scores['numeric_agreement']:.2f}, token containment "
            f"{scores['token_containment']:.2f}. Missing terms: {_terms(set(details['missing_terms']))}. "
            f"Extra terms: {_terms(set(details['extra_terms']))}."
        )
        if details["unmatched_numbers"]:
            reason += f" Expected numbers not matched: {', '.join(f'{v:g}' for v in details['unmatched_numbers'])}."
        log = {
            "components": scores,
            "weights": WEIGHTS,
            "power_p": p,
            "power_mean": score ** (1 / p),
            **details,
            "numeric_tolerance_abs": self.numeric_tolerance_abs,
            "numeric_tolerance_rel": self.numeric_tolerance_rel,
        }
        return MetricResult.scored(self.name, score, self.threshold, reason, log)

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Score each case against its expected output; no embeddings involved."""
        return [self._result(case.actual_output, cast(str, case.expected_output)) for case in cases]
