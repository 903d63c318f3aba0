"""Verdict weights and their aggregation, shared by the verdict-scored judge metrics.

Source: eval-ai-library 0.8.2 (``eval_lib/utils.py``: ``score_agg`` and ``_map_temperature_to_p``; the verdict
weights of its AnswerRelevancy, Faithfulness and ContextualRelevancy metrics), whose docs pages call it
"temperature-controlled softmax" aggregation: it is a power mean of the verdict weights with a penalty for the
share of ``none`` verdicts, both steered by the metric's ``temperature`` (aggregation strictness, not the judge
model's sampling temperature). Ported exactly, rounding included (docs/metrics/judge.md#llm-judged-metrics).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

VERDICT_WEIGHTS: dict[str, float] = {"fully": 1.0, "mostly": 0.9, "partial": 0.7, "minor": 0.3, "none": 0.0}
"""The five-level verdicts and their weights (eval-ai-library's docs, "Scoring Details")."""

VERDICTS: tuple[str, ...] = tuple(VERDICT_WEIGHTS)
"""The verdict names, strongest first (the JSON Schema enum of a verdict)."""


def temperature_to_power(temperature: float) -> float:
    """The power-mean exponent p for an aggregation ``temperature``: linear from p = -8 at 0.1 (near the minimum)
    through p = 1 at 0.5 (the arithmetic mean) to p = 12.25 at 1.0 (near the maximum); ``temperature`` is
    clamped to [0.1, 1.0] first."""
    t = max(0.1, min(1.0, temperature))
    return -8.0 + (t - 0.1) / 0.9 * 20.25


def score_agg(scores: Sequence[float], temperature: float = 0.5, eps_for_neg_p: float = 1e-9) -> float:
    """Aggregate verdict weights ``scores`` (each in [0, 1]) into one score in [0, 1], rounded to 4 decimals.

    agg = (mean of s_i^p)^(1/p) with p = :func:`temperature_to_power` (zeros count as ``eps_for_neg_p`` when
    p < 0; the geometric mean at p = 0); then agg × (1 - none_frac)^alpha, where none_frac is the share of
    zero weights and alpha = (1.5 - temperature) × min(1, (n - 1) / 4): no penalty for one verdict, full
    strength from five. ``temperature`` here is NOT clamped (as in eval-ai-library). No scores: 0.0.
    """
    if not scores:
        return 0.0
    p = temperature_to_power(temperature)
    base = [s if s > 0.0 else eps_for_neg_p for s in scores] if p < 0 else list(scores)
    if abs(p) < 1e-12:
        agg = math.exp(sum(math.log(s if s > 0 else eps_for_neg_p) for s in base) / len(base))
    else:
        agg = (sum(s**p for s in base) / len(base)) ** (1.0 / p)
    n = len(scores)
    none_frac = sum(1 for s in scores if s == 0.0) / n
    alpha = (1.5 - temperature) * min(1.0, (n - 1) / 4.0)
    return float(round(agg * (1.0 - none_frac) ** alpha, 4))
