"""ContextualRelevancyMetric: how well each retrieved passage serves the question and its intent (LLM judge).

Source: eval-ai-library's page https://library.eval-ai.com/metrics/contextual-relevancy (parameters, required
fields, temperature-controlled aggregation) and its 0.8.2 code (``eval_lib/metrics/contextual_relevancy_metric``:
the verdict per context segment, the five-level weights, the rule that a segment about the entity asked about
is at least ``minor``). Differences, none of which changes the score's definition:

- one judge request per case instead of three: the intent is inferred in the same answer as the verdicts,
  and the reason is built here from the verdicts instead of by a "summarise" request;
- a verdict list whose length differs from the number of passages errors the case (eval-ai-library scores
  whatever list came back); an empty ``retrieval_context`` scores 0.0 without a request (as score_agg of no
  verdicts does there).
"""

from __future__ import annotations

from typing import Any, ClassVar

from evaltasks.judges.base import JudgeRequest
from evaltasks.metrics.base import UnitFloat
from evaltasks.metrics.judge._aggregation import VERDICT_WEIGHTS, VERDICTS, score_agg
from evaltasks.metrics.judge._verdicts import (
    REASON,
    answer_schema,
    ask_verdicts,
    first_request,
    max_tokens_for,
    verdict_reason,
)
from evaltasks.metrics.judge.answer_relevancy import check_temperature
from evaltasks.metrics.judge.base import Asker, Judged, JudgeMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.test_case import EvalTestCase

SCHEMA = answer_schema({"verdict": {"type": "string", "enum": list(VERDICTS)}, "reason": REASON}, intent=REASON)
"""The judge's answer: the inferred intent and one verdict per passage."""


@register_metric("ContextualRelevancyMetric")
class ContextualRelevancyMetric(JudgeMetric):
    """The relevance of the retrieved passages to the question and its intent, as judged by an LLM.

    One request asks the judge for the question's intent and, per ``retrieval_context`` passage, a verdict
    (fully 1.0, mostly 0.9, partial 0.7, minor 0.3, none 0.0). score = score_agg(weights of all passages,
    temperature) (docs/metrics/judge.md#llm-judged-metrics).

    Args:
        threshold: minimum passing score, default 0.6.
        model: the judge model (default: the suite's ``judge: {model}``, else ``gpt-4o-mini``).
        temperature: aggregation strictness in [0, 1] (0.1 strict, 0.5 the mean, 1.0 lenient); NOT the judge
            model's sampling temperature (``judge_options: {temperature}``).
        samples: times each case is judged (mean, spread and ``unstable`` reported).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
        prompts: ``{"verdicts": path}`` replaces the built-in prompt template.
        name: the name in results.

    Raises:
        ValueError: invalid threshold, temperature, samples, judge options or prompt files.

    A case needs ``input`` and ``retrieval_context``. ``evaluation_log``: ``user_intent``, ``verdicts``
    (passage, verdict, reason), ``temperature``.
    """

    version: ClassVar[str] = "1"
    required_fields: ClassVar[tuple[str, ...]] = ("input", "actual_output", "retrieval_context")
    prompt_names: ClassVar[tuple[str, ...]] = ("verdicts",)

    def __init__(
        self,
        threshold: UnitFloat = 0.6,
        model: str | None = None,
        temperature: UnitFloat = 0.5,
        *,
        samples: int = 1,
        judge_options: dict[str, Any] | None = None,
        prompts: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, model, samples=samples, judge_options=judge_options, prompts=prompts, name=name)
        self.temperature = check_temperature(temperature)

    def config(self) -> dict[str, Any]:
        """threshold, name, temperature and the judge configuration."""
        return {**super().config(), "temperature": self.temperature}

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs ``input`` and ``retrieval_context``."""
        return [(f, "is missing") for f in ("input", "retrieval_context") if getattr(case, f) is None]

    def _variables(self, case: EvalTestCase) -> dict[str, Any]:
        return {"input": case.input or "", "retrieval_context": list(case.retrieval_context or [])}

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The one verdict request (none for an empty ``retrieval_context``)."""
        n = len(case.retrieval_context or [])
        return (
            [first_request(self, "verdicts", self._variables(case), SCHEMA, max_tokens=max_tokens_for(n))] if n else []
        )

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """Ask for the intent and a verdict per passage in one request; aggregate the weights.

        Raises:
            JudgeError: the verdict list's length is not the number of passages.
        """
        passages = list(case.retrieval_context or [])
        if not passages:
            return Judged(
                0.0,
                "The retrieval context is empty: nothing serves the question (score 0.0).",
                {"user_intent": None, "verdicts": [], "temperature": self.temperature},
            )
        reply, verdicts = ask_verdicts(
            asker,
            "verdicts",
            self._variables(case),
            SCHEMA,
            len(passages),
            "passage",
            max_tokens=max_tokens_for(len(passages)),
        )
        for passage, verdict in zip(passages, verdicts):
            verdict["passage"] = passage
        score = score_agg([VERDICT_WEIGHTS[v["verdict"]] for v in verdicts], self.temperature)
        counts = {k: sum(1 for v in verdicts if v["verdict"] == k) for k in VERDICTS}
        worst = sorted(verdicts, key=lambda v: VERDICT_WEIGHTS[v["verdict"]])
        reason = verdict_reason(
            counts,
            [(v["passage"], v["verdict"], v["reason"]) for v in worst if v["verdict"] not in ("fully", "mostly")],
            f"{len(passages)} passages judged against the question's intent",
        )
        return Judged(
            score,
            reason,
            {"user_intent": reply.parsed["intent"], "verdicts": verdicts, "temperature": self.temperature},
        )
