"""ContextualRecallMetric: the share of the reference answer's claims that the retrieval context supports (LLM judge).

Source: eval-ai-library's page https://library.eval-ai.com/metrics/contextual-recall (parameters, required
fields, supported_claims / total_claims) and its 0.8.2 code (``eval_lib/metrics/contextual_recall_metric``: an
LLM extracts at most 8 claims from the expected output, then one request checks them all; 0.0 without claims).
Differences: the claims request sees only the expected output (its claims do not depend on the context); more
than 8 claims returned are cut to the first 8 (logged); a verdict list whose length differs from the number of
claims errors the case (the code counts whatever list came back); an empty ``retrieval_context`` scores 0.0
without a request (no claim can be supported).
"""

from __future__ import annotations

from typing import Any, ClassVar

from evaltasks.judges.base import JudgeRequest
from evaltasks.metrics.base import UnitFloat
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

MAX_CLAIMS = 8
"""The most claims taken from one expected output (eval-ai-library's limit)."""

CLAIMS_SCHEMA = {
    "type": "object",
    "properties": {"claims": {"type": "array", "items": {"type": "string"}}},
    "required": ["claims"],
    "additionalProperties": False,
}
"""The judge's first answer: the expected output's claims."""

SCHEMA = answer_schema({"supported": {"type": "string", "enum": ["yes", "no"]}, "reason": REASON})
"""The judge's second answer: per claim, whether the context supports it."""


@register_metric("ContextualRecallMetric")
class ContextualRecallMetric(JudgeMetric):
    """The share of the expected output's claims supported by the retrieval context, as judged by an LLM.

    Two requests: the judge lists the expected output's atomic factual claims (at most 8), then says per claim
    whether ``retrieval_context`` supports it. score = supported claims / claims, rounded to 4 decimals
    (docs/metrics/judge.md#llm-judged-metrics); 0.0 when there is no claim.

    Args:
        threshold: minimum passing score, default 0.7.
        model: the judge model (default: the suite's ``judge: {model}``, else ``gpt-4o-mini``).
        samples: times each case is judged (mean, spread and ``unstable`` reported).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
        prompts: ``{"claims": path, "verdicts": path}`` replace the built-in prompt templates.
        name: the name in results.

    Raises:
        ValueError: invalid threshold, samples, judge options or prompt files.

    A case needs ``input``, ``expected_output`` and ``retrieval_context``. ``evaluation_log``: ``claims``,
    ``claims_dropped`` (beyond 8), ``verdicts`` (claim, supported, reason), ``supported_count``.
    """

    version: ClassVar[str] = "1"
    required_fields: ClassVar[tuple[str, ...]] = ("input", "expected_output", "retrieval_context")
    prompt_names: ClassVar[tuple[str, ...]] = ("claims", "verdicts")

    def __init__(
        self,
        threshold: UnitFloat = 0.7,
        model: str | None = None,
        *,
        samples: int = 1,
        judge_options: dict[str, Any] | None = None,
        prompts: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, model, samples=samples, judge_options=judge_options, prompts=prompts, name=name)

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs ``input``, ``expected_output`` and ``retrieval_context``."""
        return [
            (f, "is missing") for f in ("input", "expected_output", "retrieval_context") if getattr(case, f) is None
        ]

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The claims request exactly; the verdict request approximated with the expected output's sentences
        (at most 8) as its claims (none without sentences). None for an empty ``retrieval_context``."""
        if not case.retrieval_context:
            return []
        claims = split_into_statements(case.expected_output or "", MAX_CLAIMS)
        first = first_request(
            self,
            "claims",
            {"expected_output": case.expected_output or ""},
            CLAIMS_SCHEMA,
            max_tokens=max_tokens_for(MAX_CLAIMS, per_item=60),
        )
        if not claims:
            return [first]
        return [
            first,
            first_request(
                self,
                "verdicts",
                {"retrieval_context": list(case.retrieval_context), "claims": claims},
                SCHEMA,
                max_tokens=max_tokens_for(len(claims)),
            ),
        ]

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """Extract the claims, then check them all against the context in one request.

        Raises:
            JudgeError: the verdict list's length is not the number of claims.
        """
        passages = list(case.retrieval_context or [])
        if not passages:
            return Judged(
                0.0,
                "The retrieval context is empty: no claim can be supported (score 0.0).",
                {"claims": [], "claims_dropped": 0, "verdicts": [], "supported_count": 0},
            )
        reply = asker.ask(
            "claims",
            {"expected_output": case.expected_output or ""},
            CLAIMS_SCHEMA,
            max_tokens=max_tokens_for(MAX_CLAIMS, per_item=60),
        )
        found = [c.strip() for c in reply.parsed["claims"] if c.strip()]
        claims, dropped = found[:MAX_CLAIMS], max(0, len(found) - MAX_CLAIMS)
        if not claims:
            return Judged(
                0.0,
                "The expected output has no factual claim to look for (score 0.0).",
                {"claims": [], "claims_dropped": 0, "verdicts": [], "supported_count": 0},
            )
        reply, verdicts = ask_verdicts(
            asker,
            "verdicts",
            {"retrieval_context": passages, "claims": claims},
            SCHEMA,
            len(claims),
            "claim",
            max_tokens=max_tokens_for(len(claims)),
        )
        for claim, verdict in zip(claims, verdicts):
            verdict["claim"] = claim
        supported = sum(1 for v in verdicts if v["supported"] == "yes")
        score = round(supported / len(claims), 4)
        reason = verdict_reason(
            {},
            [(v["claim"], "not supported", v["reason"]) for v in verdicts if v["supported"] == "no"],
            f"{supported} of {len(claims)} claims of the expected output are supported by the retrieval context",
        )
        return Judged(
            score,
            reason,
            {"claims": claims, "claims_dropped": dropped, "verdicts": verdicts, "supported_count": supported},
        )
