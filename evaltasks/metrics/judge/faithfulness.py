"""FaithfulnessMetric: how well the answer's statements are supported by the retrieval context (LLM judge).

Source: eval-ai-library's page https://library.eval-ai.com/metrics/faithfulness (parameters, required fields,
the five-level verdicts, temperature-controlled aggregation) and its 0.8.2 code
(``eval_lib/metrics/faithfulness_metric``: the deterministic statement split; the statement types, of which
only facts and inferences are scored; a ``non_claim`` label honoured only for a sentence shaped like an offer,
a question or a pleasantry; a verdict above ``none`` kept only with a supporting quote drawn from the context;
1.0 when no statement is scored). Differences, none of which changes the score's definition:

- one judge request per case instead of two: the reason is built here from the verdicts instead of by a
  "summarise" request;
- a verdict list whose length differs from the number of statements errors the case (eval-ai-library then
  skips its non-claim check and scores whatever list came back); an answer with no statements scores 1.0
  without a request.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

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
from evaltasks.metrics.judge.answer_relevancy import check_temperature
from evaltasks.metrics.judge.base import Asker, Judged, JudgeMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.test_case import EvalTestCase

SCORED_TYPES = ("fact", "inference")
EXCLUDED_TYPES = ("input_restatement", "non_claim")
"""Statement types kept in the log but left out of the score."""

SCHEMA = answer_schema(
    {
        "type": {"type": "string", "enum": [*SCORED_TYPES, *EXCLUDED_TYPES]},
        "verdict": {"type": "string", "enum": [*VERDICTS, "n/a"]},
        "reason": REASON,
        "support": {"type": "string"},
    }
)
"""The judge's answer: one verdict per statement, with the context quote that supports it (or "none")."""

_TOKEN = re.compile(r"[a-z0-9]{3,}")
_NON_CLAIM = re.compile(  # eval-ai-library 0.8.2's shapes of an offer, a question to the user, a pleasantry
    r"(?:"
    r"\?\s*$"
    r"|\bi(?:'ll|'d|'m)\b|\b(?:i|we)\s+(?:can|could|will|would|am|are)\b"
    r"|\blet me\b|\bfeel free\b|\bhappy to help\b|\bglad to help\b"
    r"|\b(?:share|send|tell|give|provide|confirm|let)\s+(?:me|us)\b"
    r"|\b(?:share|send|provide|enter|confirm)\s+(?:your|the)\s+"
    r"(?:order\s+id|order\s+number|email|account|card|last\s+4|details?)\b"
    r"|\bif you\s+(?:tell|share|send|give|provide)\b"
    r"|\bplease\s+(?:share|send|provide|tell|let|confirm|enter)\b"
    r"|\b(?:thanks|thank you|you're welcome)\b"
    r")",
    re.IGNORECASE,
)


def support_grounded(support: str, context: str, min_overlap: float = 0.6) -> bool:
    """Whether the judge's quote ``support`` is drawn from ``context``: at least ``min_overlap`` of its distinct
    lowercase ``[a-z0-9]{3,}`` tokens occur in the context (tolerates case, punctuation, light rewording)."""
    quote_tokens = set(_TOKEN.findall(support.lower()))
    if not quote_tokens:
        return False
    return len(quote_tokens & set(_TOKEN.findall(context.lower()))) / len(quote_tokens) >= min_overlap


def looks_like_non_claim(statement: str) -> bool:
    """Whether ``statement`` has the shape of an offer, a question or request to the user, or a pleasantry."""
    return bool(_NON_CLAIM.search(statement.strip()))


@register_metric("FaithfulnessMetric")
class FaithfulnessMetric(JudgeMetric):
    """The support of the answer's statements in the retrieval context, as judged by an LLM.

    The output is split into sentences in code (at most 12); one request asks the judge, per statement, for its
    type (``fact``, ``inference`` from the question and the context, ``input_restatement``, ``non_claim``), a
    verdict (fully 1.0, mostly 0.9, partial 0.7, minor 0.3, none 0.0) and the context sentence(s) supporting it.
    Then, in code: a ``non_claim`` that is not shaped like an offer, a question or a pleasantry is scored as a
    fact (``n/a`` becoming ``none``); a verdict above ``none`` whose quote is not drawn from the context (under
    60 % of its words found there) becomes ``none``. score = score_agg(weights of facts and inferences,
    temperature) (docs/metrics/judge.md#llm-judged-metrics); 1.0 when none is scored (nothing to contradict the context).

    Args:
        threshold: minimum passing score, default 0.7.
        model: the judge model (default: the suite's ``judge: {model}``, else ``gpt-4o-mini``).
        temperature: aggregation strictness in [0, 1] (0.1 strict, 0.5 the mean, 1.0 lenient); NOT the judge
            model's sampling temperature (``judge_options: {temperature}``).
        samples: times each case is judged (mean, spread and ``unstable`` reported).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
        prompts: ``{"verdicts": path}`` replaces the built-in prompt template.
        name: the name in results.

    Raises:
        ValueError: invalid threshold, temperature, samples, judge options or prompt files.

    A case needs ``input`` and ``retrieval_context`` (a list; joined with newlines as the context).
    ``evaluation_log``: ``statements``, ``verdicts`` (statement, type, verdict, reason, support, and
    ``adjusted`` when code changed the judge's type or verdict), ``scored_statement_count``, ``temperature``.
    """

    version: ClassVar[str] = "1"
    required_fields: ClassVar[tuple[str, ...]] = ("input", "actual_output", "retrieval_context")
    prompt_names: ClassVar[tuple[str, ...]] = ("verdicts",)

    def __init__(
        self,
        threshold: UnitFloat = 0.7,
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

    def _variables(self, case: EvalTestCase, statements: list[str]) -> dict[str, Any]:
        return {
            "input": case.input or "",
            "retrieval_context": list(case.retrieval_context or []),
            "statements": statements,
        }

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The one verdict request (none when the output has no statements)."""
        statements = split_into_statements(case.actual_output)
        if not statements:
            return []
        return [
            first_request(
                self,
                "verdicts",
                self._variables(case, statements),
                SCHEMA,
                max_tokens=max_tokens_for(len(statements), per_item=160),
            )
        ]

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """Split, ask for the verdicts in one request, apply the non-claim and quote checks, aggregate.

        Raises:
            JudgeError: the verdict list's length is not the number of statements.
        """
        statements = split_into_statements(case.actual_output)
        if not statements:
            return Judged(
                1.0,
                "The output has no statement that could contradict the context (score 1.0).",
                {"statements": [], "verdicts": [], "scored_statement_count": 0, "temperature": self.temperature},
            )
        _reply, verdicts = ask_verdicts(
            asker,
            "verdicts",
            self._variables(case, statements),
            SCHEMA,
            len(statements),
            "statement",
            max_tokens=max_tokens_for(len(statements), per_item=160),
        )
        context = "\n".join(case.retrieval_context or [])
        for statement, verdict in zip(statements, verdicts):
            verdict["statement"] = statement
            if verdict["type"] == "non_claim" and not looks_like_non_claim(statement):
                verdict["type"], verdict["adjusted"] = "fact", "non_claim is not an offer, question or pleasantry"
                if verdict["verdict"] == "n/a":
                    verdict["verdict"] = "none"
            if verdict["type"] in SCORED_TYPES and verdict["verdict"] in ("fully", "mostly", "partial", "minor"):
                support = verdict["support"].strip()
                if support.lower() in ("", "none") or not support_grounded(support, context):
                    verdict["adjusted"] = f"{verdict['verdict']} without a supporting quote from the context"
                    verdict["verdict"] = "none"
        scored = [v for v in verdicts if v["type"] in SCORED_TYPES]
        score = score_agg([VERDICT_WEIGHTS.get(v["verdict"], 0.0) for v in scored], self.temperature) if scored else 1.0
        counts = {k: sum(1 for v in scored if v["verdict"] == k) for k in VERDICTS}
        excluded = len(verdicts) - len(scored)
        worst = sorted(scored, key=lambda v: VERDICT_WEIGHTS.get(v["verdict"], 0.0))
        lead = (
            f"{len(scored)} of {len(statements)} statements checked against the context"
            f"{f' ({excluded} excluded)' if excluded else ''}"
            if scored
            else "No statement asserts anything to check against the context (score 1.0)"
        )
        reason = verdict_reason(
            counts,
            [(v["statement"], v["verdict"], v["reason"]) for v in worst if v["verdict"] not in ("fully", "mostly")],
            lead,
        )
        return Judged(
            score,
            reason,
            {
                "statements": statements,
                "verdicts": verdicts,
                "scored_statement_count": len(scored),
                "temperature": self.temperature,
            },
        )
