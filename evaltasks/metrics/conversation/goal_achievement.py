"""GoalAchievementRateMetric: whether the user actually got what they wanted from a conversation (LLM judge).

Source: eval-ai-library 0.8.2's code (``agent_metrics/goal_achievement_metric``; it has no docs page): the
user's goal (given as ``user_goal``, else inferred), the user's positive and negative signals and unmet
requests, and one outcome verdict (``fully`` 1.0, ``mostly`` 0.9, ``partial`` 0.7, ``minor`` 0.3, ``none``
0.0); score = max(0, weight - 0.1 × number of negative signals), rounded to 4 decimals. Differences
(docs/metrics/conversation.md#goalachievementratemetric):

- one request per case: the goal, the signals and the verdict come in one answer, in that order (the library
  sends up to four: goal, signals, verdict and a "summarise" request for the reason, built here in code);
- an unknown or mis-cased verdict is off the schema, asked again within ``content_retries``, then errors the
  case (the library weighs it 0.0).
"""

from __future__ import annotations

from typing import Any, ClassVar

from evaltasks.errors import bounded, quote
from evaltasks.judges.base import JudgeRequest
from evaltasks.metrics.base import UnitFloat
from evaltasks.metrics.conversation._dialogue import ConversationJudgeMetric, conversation_turns
from evaltasks.metrics.judge._aggregation import VERDICT_WEIGHTS, VERDICTS
from evaltasks.metrics.judge._verdicts import REASON, first_request
from evaltasks.metrics.judge.base import Asker, Judged
from evaltasks.metrics.registry import register_metric
from evaltasks.test_case import EvalTestCase

SIGNALS = ("positive_signals", "negative_signals", "unmet_requests")
"""The lists of user signals the judge extracts (each a list of short quotes)."""

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user_goal": REASON,
        **{name: {"type": "array", "items": {"type": "string"}} for name in SIGNALS},
        "verdict": {"type": "string", "enum": list(VERDICTS)},
        "reason": REASON,
    },
    "required": ["user_goal", *SIGNALS, "verdict", "reason"],
    "additionalProperties": False,
}
"""The judge's answer: the goal, the three signal lists, the verdict and its reason."""

PENALTY = 0.1
"""What each negative signal takes off the verdict's weight (eval-ai-library's rule)."""

MAX_TOKENS = 900


@register_metric("GoalAchievementRateMetric")
class GoalAchievementRateMetric(ConversationJudgeMetric):
    """Whether the user got the outcome they wanted: score = max(0, verdict weight - 0.1 × negative signals)
    (docs/metrics/conversation.md#goalachievementratemetric).

    Args:
        threshold: minimum passing score, default 0.7.
        model: the judge model (default: the suite's ``judge: {model}``, else ``gpt-4o-mini``).
        user_goal: what the user wanted, when known; None: the judge infers it from the conversation.
        samples: times each case is judged (mean, spread and ``unstable`` reported).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
        prompts: ``{"verdict": path}`` replaces the built-in prompt template.
        name: the name in results.

    Raises:
        ValueError: invalid threshold, ``user_goal`` (not a non-empty string), samples, judge options or prompt
            files.

    A case is a :class:`~evaltasks.test_case.ConversationalEvalTestCase` whose turns have an ``input``. One
    request per case. ``evaluation_log``: ``user_goal``, ``user_goal_source`` (``user_provided`` or
    ``llm_inferred``), ``signals`` (the three lists), ``verdict``, ``base_weight``, ``negative_signal_penalty``,
    ``number_of_turns`` and the judge's account.
    """

    version: ClassVar[str] = "1"
    prompt_names: ClassVar[tuple[str, ...]] = ("verdict",)

    def __init__(
        self,
        threshold: UnitFloat = 0.7,
        model: str | None = None,
        user_goal: str | None = None,
        *,
        samples: int = 1,
        judge_options: dict[str, Any] | None = None,
        prompts: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, model, samples=samples, judge_options=judge_options, prompts=prompts, name=name)
        if user_goal is not None and (not isinstance(user_goal, str) or not user_goal.strip()):
            raise ValueError(f"user_goal must be a non-empty string, got {quote(user_goal)}")
        self.user_goal = user_goal

    def config(self) -> dict[str, Any]:
        """threshold, name, user_goal and the judge configuration."""
        return {**super().config(), "user_goal": self.user_goal}

    def variables(self, case: EvalTestCase) -> dict[str, Any]:
        """The turns and the given goal ("" when the judge infers it)."""
        return {**super().variables(case), "user_goal": self.user_goal or ""}

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The one request."""
        return [first_request(self, "verdict", self.variables(case), SCHEMA, max_tokens=MAX_TOKENS)]

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """Ask for the goal, signals and verdict; score = max(0, weight - 0.1 × negative signals)."""
        answer = asker.ask("verdict", self.variables(case), SCHEMA, max_tokens=MAX_TOKENS).parsed
        signals = {name: [str(s) for s in answer[name]] for name in SIGNALS}
        weight = VERDICT_WEIGHTS[answer["verdict"]]
        penalty = round(PENALTY * len(signals["negative_signals"]), 4)
        score = round(max(0.0, weight - penalty), 4)
        goal = self.user_goal or answer["user_goal"]
        negatives = len(signals["negative_signals"])
        minus = f" minus {penalty:g} for {negatives} negative signal(s)" if negatives else ""
        reason = (
            f"Goal achievement: {answer['verdict']} ({weight:g}){minus} = {score:g}. {bounded(answer['reason'], 300)}"
        )
        log = {
            "user_goal": goal,
            "user_goal_source": "user_provided" if self.user_goal else "llm_inferred",
            "signals": signals,
            "verdict": answer["verdict"],
            "reason": answer["reason"],
            "base_weight": weight,
            "negative_signal_penalty": penalty,
            "number_of_turns": len(conversation_turns(case)),
        }
        return Judged(score, reason, log)
