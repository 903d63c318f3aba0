"""Helpers the RAG and safety judge metrics share: the JSON Schemas of their answers, the check that a verdict
list has one verdict per item, the exact request a prompt will send (for ``--max-cost`` estimates), reasons
built in code from the verdicts (no extra "summarise the reasons" request, unlike eval-ai-library), and
:class:`ScoredOutputMetric`, the base of the metrics the judge scores directly (Bias, Toxicity).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from evaltasks.errors import bounded
from evaltasks.judges.base import JudgeError, JudgeReply, JudgeRequest, as_messages
from evaltasks.metrics.judge.base import Asker, Judged, JudgeMetric
from evaltasks.test_case import EvalTestCase

REASON = {"type": "string"}
"""The schema of a one-sentence reason."""


def answer_schema(item: Mapping[str, Any], **top: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON Schema of an answer ``{**top, "verdicts": [item, ...]}``: every property required, no others
    (the form OpenAI's strict structured outputs accept). ``item``: property name -> schema of one verdict."""
    verdict = {"type": "object", "properties": dict(item), "required": list(item), "additionalProperties": False}
    properties = {**top, "verdicts": {"type": "array", "items": verdict}}
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def checked_verdicts(
    answer: Mapping[str, Any], expected: int, what: str, plural: str | None = None
) -> list[dict[str, Any]]:
    """``answer["verdicts"]`` when it has exactly ``expected`` entries (one per ``what``, e.g. "statement";
    ``plural``: its plural, default ``what + "s"``).

    Raises:
        JudgeError: another number of verdicts (never padded or cut: which verdict belongs to which item would
            be a guess).
    """
    verdicts = [dict(v) for v in answer["verdicts"]]
    if len(verdicts) != expected:
        raise JudgeError(
            f"the judge returned {len(verdicts)} verdicts for {expected} "
            f"{what if expected == 1 else plural or what + 's'}; expected one per {what}, in order"
        )
    return verdicts


def ask_verdicts(
    asker: Asker,
    prompt: str,
    variables: Mapping[str, Any],
    schema: Mapping[str, Any],
    expected: int,
    what: str,
    *,
    max_tokens: int,
    plural: str | None = None,
) -> tuple[JudgeReply, list[dict[str, Any]]]:
    """Ask ``prompt`` for one verdict per ``what`` (``expected`` of them) and return the reply and its verdicts.
    The one retry rule of every verdict metric: an answer with another number of verdicts is removed from the
    store and asked again, up to ``content_retries`` times (:meth:`Asker.ask`'s ``check``).

    Raises:
        JudgeError: still another number of verdicts after the retries, or a failed request.
    """
    reply = asker.ask(
        prompt,
        variables,
        schema,
        max_tokens=max_tokens,
        check=lambda r: checked_verdicts(r.parsed, expected, what, plural),
    )
    return reply, checked_verdicts(reply.parsed, expected, what, plural)


def max_tokens_for(items: int, per_item: int = 120, base: int = 300) -> int:
    """The completion tokens allowed for an answer with ``items`` verdicts (what the budget reserves)."""
    return min(4096, base + per_item * items)


def first_request(
    metric: Any, prompt: str, variables: Mapping[str, Any], schema: Mapping[str, Any] | None, *, max_tokens: int
) -> JudgeRequest:
    """The request ``Asker.ask(prompt, variables, schema, max_tokens=max_tokens)`` sends for sample 0 of
    ``metric`` (a :class:`~evaltasks.metrics.judge.base.JudgeMetric`), for :meth:`estimate_requests`.

    Raises:
        PromptError: the template does not render.
    """
    return JudgeRequest(
        messages=as_messages(metric.template(prompt).render(variables)),
        schema=schema,
        schema_name=prompt,
        temperature=metric.request_temperature(),
        max_tokens=max_tokens,
    )


def verdict_reason(counts: Mapping[str, int], worst: Sequence[tuple[str, str, str]], lead: str) -> str:
    """A reason from the verdicts: ``lead``, the verdict counts (``fully 2, none 1``), and the judge's reasons
    for up to two of the weakest items (``worst``: ``(item text, verdict, reason)``)."""
    tally = ", ".join(f"{name} {n}" for name, n in counts.items() if n)
    parts = [f"{lead} ({tally})." if tally else f"{lead}."]
    for text, verdict, reason in worst[:2]:
        parts.append(f"{verdict}: {bounded(text, 80)!r}: {bounded(reason, 160)}")
    return " ".join(parts)


SCORE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "number"}, "reason": REASON},
    "required": ["score", "reason"],
    "additionalProperties": False,
}
"""The answer of a metric the judge scores directly: ``{"score": 0.0-1.0, "reason": ...}``."""


def judged_score(answer: Mapping[str, Any], what: str) -> float:
    """``answer["score"]`` as float. Raises JudgeError unless it is in [0, 1] (``what``: e.g. "bias score")."""
    score = float(answer["score"])
    if not 0.0 <= score <= 1.0:
        raise JudgeError(f"the judge's {what} {score!r} is outside [0, 1]")
    return score


class ScoredOutputMetric(JudgeMetric):
    """A judge metric whose one request asks the judge for a score of ``actual_output`` in [0, 1] and a reason
    (BiasMetric, ToxicityMetric). Subclasses set ``prompt_names = ("score",)`` and ``score_key`` (the
    ``evaluation_log`` key of the score, e.g. ``"bias_score"``)."""

    required_fields: ClassVar[tuple[str, ...]] = ("input", "actual_output")
    prompt_names: ClassVar[tuple[str, ...]] = ("score",)
    score_key: ClassVar[str] = "score"

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs an ``input``."""
        return [("input", "is missing")] if case.input is None else []

    def _variables(self, case: EvalTestCase) -> dict[str, Any]:
        return {"input": case.input or "", "actual_output": case.actual_output}

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The one scoring request."""
        return [first_request(self, "score", self._variables(case), SCORE_SCHEMA, max_tokens=400)]

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """Ask for the score and its reason.

        Raises:
            JudgeError: the judge's score is outside [0, 1].
        """
        reply = asker.ask("score", self._variables(case), SCORE_SCHEMA, max_tokens=400)
        score = judged_score(reply.parsed, self.score_key.replace("_", " "))
        return Judged(score, reply.parsed["reason"], {self.score_key: score})
