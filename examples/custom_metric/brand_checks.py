"""A user's own metric, as a team would write it next to its suite: ``metric: brand_checks:BrandVoiceMetric``.

evaltasks imports this module because the suite file's directory is put first on ``sys.path``
(docs/metrics/custom.md#your-own-metrics; this folder's README.md walks through the protocol).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import regex

from evaltasks import BaseMetric, EvalTestCase, MetricResult
from evaltasks.embeddings.base import VectorTable


class BrandVoiceMetric(BaseMetric):
    """Does an answer keep the brand's voice? Two checks, each worth half the score:

    1. none of ``banned_words`` occurs as a whole word (case-insensitive; ``"cheap"`` matches ``"Cheap!"``
       but not ``"cheapest"``);
    2. the answer ends with ``sign_off`` (trailing whitespace ignored).

    Without ``sign_off`` only check 1 counts. score = checks passed / checks made, so in {0, 0.5, 1}.

    Args:
        threshold: minimum passing score, in [0, 1]; default 1.0 (both checks).
        banned_words: words the brand never uses (required; at least one, none empty).
        sign_off: the text every answer must end with; None (default) skips that check.
        name: the name in results (default ``"BrandVoiceMetric"``).

    Raises:
        ValueError: an empty ``banned_words`` list or an empty word, an empty ``sign_off``, a threshold outside
            [0, 1].

    ``evaluation_log`` keys: ``banned_found`` (the banned words found, lower-cased, in list order),
    ``signed_off`` (bool, or None without ``sign_off``).
    """

    version: ClassVar[str] = "1"

    def __init__(
        self,
        threshold: float = 1.0,
        *,
        banned_words: list[str],
        sign_off: str | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        words_ok = isinstance(banned_words, list) and all(isinstance(w, str) and w.strip() for w in banned_words)
        if not words_ok or not banned_words:
            raise ValueError("banned_words must be a non-empty list of non-empty words")
        if sign_off is not None and not sign_off.strip():
            raise ValueError("sign_off must not be empty (leave it out to skip the check)")
        self.banned_words = [w.strip().lower() for w in banned_words]
        self.sign_off = sign_off.strip() if sign_off is not None else None
        alternatives = "|".join(regex.escape(w) for w in self.banned_words)
        self._banned = regex.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", regex.IGNORECASE)

    def config(self) -> dict[str, Any]:
        """Constructor arguments: what the cache key and reports show."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "banned_words": self.banned_words,
            "sign_off": self.sign_off,
        }

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """One result per case, in order; no embeddings involved."""
        results = []
        for case in cases:
            text = case.actual_output
            found = list(dict.fromkeys(m.lower() for m in self._banned.findall(text)))
            found.sort(key=self.banned_words.index)
            checks = [not found]
            signed_off = None
            if self.sign_off is not None:
                signed_off = text.rstrip().endswith(self.sign_off)
                checks.append(signed_off)
            score = sum(checks) / len(checks)
            problems = ([f"uses banned words: {', '.join(found)}"] if found else []) + (
                ["does not end with the sign-off"] if signed_off is False else []
            )
            reason = "Keeps the brand voice." if not problems else "The answer " + "; ".join(problems) + "."
            results.append(
                MetricResult.scored(
                    self.name, score, self.threshold, reason, {"banned_found": found, "signed_off": signed_off}
                )
            )
        return results
