"""The conversation metrics scored from a list of five-level verdicts (RoleAdherence: one per turn;
KnowledgeRetention: one for the dialogue), aggregated with eval-ai-library's temperature-controlled power mean
(:func:`evaltasks.metrics.judge._aggregation.score_agg`). The number of verdicts is checked against what they
judge: another number is asked again within ``content_retries``, then errors the case
(docs/metrics/conversation.md#labels-and-verdict-counts)."""

from __future__ import annotations

from typing import Any, ClassVar

from evaltasks.errors import bounded
from evaltasks.judges.base import JudgeRequest
from evaltasks.metrics.conversation._dialogue import ConversationJudgeMetric, conversation_turns
from evaltasks.metrics.judge._aggregation import VERDICT_WEIGHTS, VERDICTS, score_agg
from evaltasks.metrics.judge._verdicts import REASON, answer_schema, ask_verdicts, first_request, max_tokens_for
from evaltasks.metrics.judge.answer_relevancy import check_temperature
from evaltasks.metrics.judge.base import Asker, Judged
from evaltasks.test_case import EvalTestCase

SCHEMA = answer_schema({"verdict": {"type": "string", "enum": list(VERDICTS)}, "reason": REASON})
"""The judge's answer: ``{"verdicts": [{"verdict": fully|mostly|partial|minor|none, "reason"}]}``."""


class VerdictListMetric(ConversationJudgeMetric):
    """A conversation metric whose one request (prompt ``verdicts``) answers ``expected(case)`` five-level
    verdicts; score = score_agg(their weights, ``temperature``).

    Subclasses set ``what`` (the reason's lead) and ``per`` (what one verdict judges: ``"turn"`` or
    ``"dialogue"``) and may override :meth:`expected` and :meth:`variables`.
    """

    prompt_names: ClassVar[tuple[str, ...]] = ("verdicts",)
    what: ClassVar[str] = ""
    per: ClassVar[str] = "turn"

    def __init__(
        self,
        threshold: float,
        model: str | None,
        temperature: float,
        *,
        samples: int,
        judge_options: dict[str, Any] | None,
        prompts: dict[str, str] | None,
        name: str | None,
    ) -> None:
        super().__init__(threshold, model, samples=samples, judge_options=judge_options, prompts=prompts, name=name)
        self.temperature = check_temperature(temperature)

    def config(self) -> dict[str, Any]:
        """threshold, name, temperature and the judge configuration."""
        return {**super().config(), "temperature": self.temperature}

    def expected(self, case: EvalTestCase) -> int:
        """How many verdicts the answer must hold: one per turn (default)."""
        return len(conversation_turns(case))

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The one verdicts request."""
        count = self.expected(case)
        return [first_request(self, "verdicts", self.variables(case), SCHEMA, max_tokens=max_tokens_for(count))]

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """Ask for the verdicts (their number checked), aggregate their weights.

        Raises:
            JudgeError: still another number of verdicts after ``content_retries``, or a failed request.
        """
        count = self.expected(case)
        _, verdicts = ask_verdicts(
            asker, "verdicts", self.variables(case), SCHEMA, count, self.per, max_tokens=max_tokens_for(count)
        )
        weights = [VERDICT_WEIGHTS[v["verdict"]] for v in verdicts]
        score = score_agg(weights, self.temperature)
        counts = {k: sum(1 for v in verdicts if v["verdict"] == k) for k in VERDICTS}
        tally = ", ".join(f"{k} {n}" for k, n in counts.items() if n)
        parts = [f"{self.what}: {score:.4f} from {count} verdict{'s' if count != 1 else ''} ({tally})."]
        weakest = sorted(range(count), key=lambda i: weights[i])
        for i in weakest[:2]:
            if verdicts[i]["verdict"] in ("fully", "mostly") and count > 1:
                break
            where = f"turn {i + 1}: " if self.per == "turn" else ""
            parts.append(f"{where}{verdicts[i]['verdict']}: {bounded(verdicts[i]['reason'], 200)}")
        for i, verdict in enumerate(verdicts):
            verdict["weight"] = weights[i]
            if self.per == "turn":
                verdict["turn"] = i + 1
        log = {"verdicts": verdicts, "number_of_turns": len(conversation_turns(case)), "temperature": self.temperature}
        return Judged(score, " ".join(parts), log)
