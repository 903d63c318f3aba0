"""The text similarity the reliability metrics agree on: a normalised edit similarity (rapidfuzz).

Rule (eval-ai-library's ``_compute_similarity`` of OutcomeConsistencyMetric and PromptRobustnessMetric, computed
with rapidfuzz instead of its pure-Python Levenshtein): both texts stripped of surrounding whitespace and
lower-cased, then ``1 - levenshtein(a, b) / max(len(a), len(b))``; two empty texts are equal (1.0), an empty
text and a non-empty one share nothing (0.0). docs/metrics/reliability.md#outcomeconsistencymetric.
"""

from __future__ import annotations

from rapidfuzz.distance import Levenshtein


def similarity(a: str, b: str) -> float:
    """Normalised edit similarity of ``a`` and ``b`` in [0, 1] (rule in the module docstring)."""
    left, right = a.strip().lower(), b.strip().lower()
    if left == right:
        return 1.0
    if not left or not right:
        return 0.0
    return float(Levenshtein.normalized_similarity(left, right))


def pairwise(outputs: list[str], agree_at: float) -> tuple[int, int, list[float]]:
    """Every unordered pair of ``outputs`` compared: ``(agreeing pairs, pairs, similarities)``, where a pair
    agrees when its :func:`similarity` is at least ``agree_at``; similarities in pair order (0,1), (0,2)..."""
    sims = [similarity(outputs[i], outputs[j]) for i in range(len(outputs)) for j in range(i + 1, len(outputs))]
    return sum(1 for s in sims if s >= agree_at), len(sims), sims
