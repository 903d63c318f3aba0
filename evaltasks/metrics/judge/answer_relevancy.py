"""AnswerRelevancyMetric: how well the answer's statements serve the intent of the user's question (LLM judge).

Source: eval-ai-library's page https://library.eval-ai.com/metrics/answer-relevancy (parameters, required
fields, the five-level verdict weights, temperature-controlled aggregation) and its 0.8.2 code
(``eval_lib/metrics/answer_relevancy_metric``: the deterministic statement split, the statement types, the
rules of the verdict scale, 0.0 when no statement is a scored claim). Differences, none of which changes the
score's definition:

- one judge request per case instead of three: the intent is inferred in the same answer as the verdicts
  (eval-ai-library asks for it separately), and the reason is built here from the verdicts instead of by a
  third "summarise" request;
- a verdict list whose length differs from the number of statements errors the case (eval-ai-library scores
  whatever list came back); an answer with no statements scores 0.0 without a request.
"""

from __future__ import annotations

from typing import Any, ClassVar

from evaltasks.errors import quote
from evaltasks.judges.base import JudgeRequest
from evaltasks.metrics.base import UnitFloat
from evaltasks.metrics.judge._aggregation import VERDICT_WEIGHTS, VERDICTS, score_agg
from evaltasks.metrics.judge._statements import split_into_statements
from evaltasks.metrics.judge._verdicts import (
    REASON,
    answer_schema,
    ask_verdicts,
    first_request,
    max_tokens_for,
    verdict_reason,
)
from evaltasks.metrics.judge.base import Asker, Judged, JudgeMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.test_case import EvalTestCase

EXCLUDED_TYPES = ("non_claim", "not_in_answer")
"""Statement types kept in the log but left out of the score (pleasantries; statements not in the answer)."""

SCHEMA = answer_schema(
    {
        "type": {"type": "string", "enum": ["claim", *EXCLUDED_TYPES]},
        "verdict": {"type": "string", "enum": [*VERDICTS, "n/a"]},
        "reason": REASON,
    },
    intent=REASON,
)
"""The judge's answer: the inferred intent and one verdict per statement."""


def check_temperature(temperature: float) -> float:
    """``temperature`` as float. Raises ValueError unless it is a number in [0, 1] (aggregation strictness)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0.0 <= temperature <= 1.0:
        raise ValueError(f"temperature (aggregation strictness) must be a number in [0, 1], got {quote(temperature)}")
    return float(temperature)


@register_metric("AnswerRelevancyMetric")
class AnswerRelevancyMetric(JudgeMetric):
    """The share of the answer's statements that serve the user's intent, as judged by an LLM.

    The output is split into sentences in code (at most 12); one request asks the judge for the question's
    intent and, per statement, its type (``claim``, ``non_claim``: a pleasantry, ``not_in_answer``) and for each
    claim a verdict (fully 1.0, mostly 0.9, partial 0.7, minor 0.3, none 0.0). score = score_agg(weights of
    the claims, temperature) (docs/metrics/judge.md#llm-judged-metrics); 0.0 when no statement is a claim. A claim the judge
    marks ``n/a`` weighs 0.0, as in eval-ai-library.

    Args:
        threshold: minimum passing score, default 0.6.
        model: the judge model (default: the suite's ``judge: {model}``, else ``gpt-4o-mini``).
        temperature: aggregation strictness in [0, 1]: 0.1 strict (near the weakest verdict), 0.5 the mean,
            1.0 lenient (near the strongest); NOT the judge model's sampling temperature
            (``judge_options: {temperature}``).
        samples: times each case is judged (mean, spread and ``unstable`` reported).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
        prompts: ``{"verdicts": path}`` replaces the built-in prompt template.
        name: the name in results.

    Raises:
        ValueError: invalid threshold, temperature, samples, judge options or prompt files.

    A case needs ``input``. ``evaluation_log``: ``user_intent``, ``statements``, ``verdicts`` (statement, type,
    verdict, reason), ``scored_statement_count``, ``temperature`` and the judge's account (JudgeMetric).
    """

    version: ClassVar[str] = "1"
    required_fields: ClassVar[tuple[str, ...]] = ("input", "actual_output")
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
        """A case needs an ``input`` (the question the answer is judged against)."""
        return [("input", "is missing")] if case.input is None else []

    def _variables(self, case: EvalTestCase, statements: list[str]) -> dict[str, Any]:
        return {"input": case.input or "", "actual_output": case.actual_output, "statements": statements}

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The one verdict request (none when the output has no statements)."""
        statements = split_into_statements(case.actual_output)
        if not statements:
            return []
        return [
            first_request(
                self, "verdicts", self._variables(case, statements), SCHEMA, max_tokens=max_tokens_for(len(statements))
            )
        ]

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """Split, ask for the intent and verdicts in one request, aggregate the claims' weights.

        Raises:
            JudgeError: the verdict list's length is not the number of statements.
        """
        statements = split_into_statements(case.actual_output)
        if not statements:
            return Judged(
                0.0,
                "The output has no statement to judge (score 0.0).",
                {
                    "user_intent": None,
                    "statements": [],
                    "verdicts": [],
                    "scored_statement_count": 0,
                    "temperature": self.temperature,
                },
            )
        reply, verdicts = ask_verdicts(
            asker,
            "verdicts",
            self._variables(case, statements),
            SCHEMA,
            len(statements),
            "statement",
            max_tokens=max_tokens_for(len(statements)),
        )
        for statement, verdict in zip(statements, verdicts):
            verdict["statement"] = statement
        scored = [v for v in verdicts if v["type"] not in EXCLUDED_TYPES]
        weights = [VERDICT_WEIGHTS.get(v["verdict"], 0.0) for v in scored]
        score = score_agg(weights, self.temperature) if scored else 0.0
        counts = {k: sum(1 for v in scored if v["verdict"] == k) for k in VERDICTS}
        excluded = len(verdicts) - len(scored)
        worst = sorted(scored, key=lambda v: VERDICT_WEIGHTS.get(v["verdict"], 0.0))
        lead = (
            f"{len(scored)} of {len(statements)} statements are claims scored against the intent"
            f"{f' ({excluded} excluded)' if excluded else ''}"
            if scored
            else "No statement is a claim about the question (score 0.0)"
        )
        reason = verdict_reason(
            counts,
            [(v["statement"], v["verdict"], v["reason"]) for v in worst if v["verdict"] not in ("fully", "mostly")],
            lead,
        )
        log = {
            "user_intent": reply.parsed["intent"],
            "statements": statements,
            "verdicts": verdicts,
            "scored_statement_count": len(scored),
            "temperature": self.temperature,
        }
        return Judged(score, reason, log)
