"""ContextualPrecisionMetric: whether the passages relevant to the reference answer are ranked first (LLM judge).

Source: eval-ai-library's page https://library.eval-ai.com/metrics/contextual-precision (parameters, required
fields, the Precision@K formula, relevance to the reference answer) and its 0.8.2 code
(``eval_lib/metrics/contextual_precision_metric``: 0.0 when no passage is relevant). Differences:

- the docs win: a passage is judged against ``expected_output`` (the reference answer); the 0.8.2 code
  compares it with ``actual_output`` instead;
- one judge request per case for all passages instead of one request per passage; a verdict list whose
  length differs from the number of passages errors the case; an empty ``retrieval_context`` scores 0.0
  without a request.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from annotated_types import Ge

from evaltasks.errors import quote
from evaltasks.judges.base import JudgeRequest
from evaltasks.metrics.base import UnitFloat
from evaltasks.metrics.judge._verdicts import REASON, answer_schema, ask_verdicts, first_request, max_tokens_for
from evaltasks.metrics.judge.base import Asker, Judged, JudgeMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.test_case import EvalTestCase

SCHEMA = answer_schema({"relevant": {"type": "string", "enum": ["yes", "no"]}, "reason": REASON})
SCHEMA["properties"]["verdicts"]["items"]["required"] = ["relevant"]
"""The judge's answer: per passage, whether it holds information of the reference answer; a ``reason`` is
optional (the built-in prompt asks for none, as eval-ai-library's does not: the metric's reason is built from the
ranks, and a reason per passage would cost completion tokens for nothing the score uses)."""


def context_precision(relevant: list[bool]) -> float:
    """sum over ranks k of precision@k × v_k, divided by the number of relevant passages (v_k = 1 when the
    passage at rank k is relevant; precision@k = relevant passages in the first k / k), rounded to 4 decimals;
    0.0 when none is relevant."""
    hits, total = 0, 0.0
    for k, v in enumerate(relevant, 1):
        if v:
            hits += 1
            total += hits / k
    return round(total / hits, 4) if hits else 0.0


@register_metric("ContextualPrecisionMetric")
class ContextualPrecisionMetric(JudgeMetric):
    """Precision@K of the retrieved passages' ranking against the reference answer, relevance judged by an LLM.

    One request asks the judge, per passage of ``retrieval_context`` (the first ``top_k``), whether it holds
    information that also appears in ``expected_output``. score = Σ_k precision@k × v_k / (relevant passages)
    (docs/metrics/judge.md#llm-judged-metrics); 0.0 when no passage is relevant.

    Args:
        threshold: minimum passing score, default 0.7.
        model: the judge model (default: the suite's ``judge: {model}``, else ``gpt-4o-mini``).
        top_k: judge only the first ``top_k`` passages (an integer >= 1); None: all.
        samples: times each case is judged (mean, spread and ``unstable`` reported).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
        prompts: ``{"verdicts": path}`` replaces the built-in prompt template.
        name: the name in results.

    Raises:
        ValueError: invalid threshold, top_k, samples, judge options or prompt files.

    A case needs ``input``, ``expected_output`` and ``retrieval_context``. ``evaluation_log``: ``verdicts``
    (rank, passage, relevant, ``precision@k``, and the judge's reason where it gave one), ``relevant_count``, ``top_k``.
    """

    version: ClassVar[str] = "1"
    required_fields: ClassVar[tuple[str, ...]] = ("input", "actual_output", "expected_output", "retrieval_context")
    prompt_names: ClassVar[tuple[str, ...]] = ("verdicts",)

    def __init__(
        self,
        threshold: UnitFloat = 0.7,
        model: str | None = None,
        top_k: Annotated[int, Ge(1)] | None = None,
        *,
        samples: int = 1,
        judge_options: dict[str, Any] | None = None,
        prompts: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, model, samples=samples, judge_options=judge_options, prompts=prompts, name=name)
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"top_k must be an integer >= 1 or null, got {quote(top_k)}")
        self.top_k = top_k

    def config(self) -> dict[str, Any]:
        """threshold, name, top_k and the judge configuration."""
        return {**super().config(), "top_k": self.top_k}

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs ``input``, ``expected_output`` and ``retrieval_context``."""
        return [
            (f, "is missing") for f in ("input", "expected_output", "retrieval_context") if getattr(case, f) is None
        ]

    def _passages(self, case: EvalTestCase) -> list[str]:
        passages = list(case.retrieval_context or [])
        return passages[: self.top_k] if self.top_k else passages

    def _variables(self, case: EvalTestCase) -> dict[str, Any]:
        return {
            "input": case.input or "",
            "expected_output": case.expected_output or "",
            "retrieval_context": self._passages(case),
        }

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The one relevance request (none for an empty ``retrieval_context``)."""
        n = len(self._passages(case))
        return (
            [first_request(self, "verdicts", self._variables(case), SCHEMA, max_tokens=max_tokens_for(n))] if n else []
        )

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """Ask for every passage's relevance in one request; compute Precision@K.

        Raises:
            JudgeError: the verdict list's length is not the number of passages.
        """
        passages = self._passages(case)
        if not passages:
            return Judged(
                0.0,
                "The retrieval context is empty: no relevant passage (score 0.0).",
                {"verdicts": [], "relevant_count": 0, "top_k": self.top_k},
            )
        _reply, verdicts = ask_verdicts(
            asker,
            "verdicts",
            self._variables(case),
            SCHEMA,
            len(passages),
            "passage",
            max_tokens=max_tokens_for(len(passages)),
        )
        relevant = [v["relevant"] == "yes" for v in verdicts]
        hits = 0
        for rank, (passage, verdict, v) in enumerate(zip(passages, verdicts, relevant), 1):
            hits += v
            verdict.update(rank=rank, passage=passage, **{"precision@k": round(hits / rank, 4)})
        score = context_precision(relevant)
        ranks = [v["rank"] for v in verdicts if v["relevant"] == "yes"]
        reason = (
            f"Relevant passages at ranks {', '.join(map(str, ranks))} of {len(passages)}: context precision "
            f"{score:.4f}."
            if ranks
            else f"None of the {len(passages)} passages holds information of the expected output (score 0.0)."
        )
        return Judged(score, reason, {"verdicts": verdicts, "relevant_count": len(ranks), "top_k": self.top_k})
