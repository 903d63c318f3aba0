"""RoleAdherenceMetric: how well the assistant keeps its assigned role in every turn of a conversation (LLM judge).

Source: eval-ai-library's page https://library.eval-ai.com/agent-metrics/role-adherence (parameters: threshold
0.7, temperature 0.5, ``chatbot_role`` "Override the role from test case"; a verdict per turn aggregated with
temperature-controlled softmax; requires a conversation with a role) and its 0.8.2 code
(``agent_metrics/role_adherence_metric``: the five-level weights, ``score_agg``). Differences
(docs/metrics/conversation.md#roleadherencemetric):

- the metric's ``chatbot_role`` overrides the case's, as the docs say; the 0.8.2 code uses the case's role
  whenever it has one (``test_case.chatbot_role or self.chatbot_role``);
- the judge answers one verdict per turn, checked: another number is asked again within ``content_retries``,
  then errors the case (the library aggregates whatever list came back, so a one-verdict answer for a
  ten-turn conversation scores that one verdict); an unknown or mis-cased label is off the schema, asked again,
  then errors the case (the library weighs it 0.0);
- no role at all (neither the metric's nor the case's) is an input problem of the case, not "No role
  specified" sent to the judge;
- one request per case: the reason is built from the verdicts (the library asks a second "summarise" request).
"""

from __future__ import annotations

from typing import Any, ClassVar

from evaltasks.errors import quote
from evaltasks.metrics.base import UnitFloat
from evaltasks.metrics.conversation._verdict_list import VerdictListMetric
from evaltasks.metrics.judge.base import Asker, Judged
from evaltasks.metrics.registry import register_metric
from evaltasks.test_case import ConversationalEvalTestCase, EvalTestCase


@register_metric("RoleAdherenceMetric")
class RoleAdherenceMetric(VerdictListMetric):
    """How well each assistant reply keeps the assigned role: one verdict per turn (fully 1.0, mostly 0.9,
    partial 0.7, minor 0.3, none 0.0), score = score_agg(weights, temperature)
    (docs/metrics/conversation.md#roleadherencemetric).

    Args:
        threshold: minimum passing score, default 0.7.
        model: the judge model (default: the suite's ``judge: {model}``, else ``gpt-4o-mini``).
        temperature: aggregation strictness in [0, 1]: 0.1 strict (near the weakest turn), 0.5 the mean, 1.0
            lenient; NOT the judge model's sampling temperature.
        chatbot_role: the role the assistant must keep; overrides the case's ``chatbot_role`` when given.
        samples: times each case is judged (mean, spread and ``unstable`` reported).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
        prompts: ``{"verdicts": path}`` replaces the built-in prompt template.
        name: the name in results.

    Raises:
        ValueError: invalid threshold, temperature, ``chatbot_role`` (not a non-empty string), samples, judge
            options or prompt files.

    A case is a :class:`~evaltasks.test_case.ConversationalEvalTestCase` whose turns have an ``input`` and that
    has a ``chatbot_role`` unless the metric has one. One request per case. ``evaluation_log``:
    ``chatbot_role``, ``role_source`` (``metric`` or ``case``), ``verdicts`` (``turn``, ``verdict``, ``weight``,
    ``reason``), ``number_of_turns``, ``temperature`` and the judge's account.
    """

    version: ClassVar[str] = "1"
    what: ClassVar[str] = "Role adherence"

    def __init__(
        self,
        threshold: UnitFloat = 0.7,
        model: str | None = None,
        temperature: UnitFloat = 0.5,
        chatbot_role: str | None = None,
        *,
        samples: int = 1,
        judge_options: dict[str, Any] | None = None,
        prompts: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(
            threshold, model, temperature, samples=samples, judge_options=judge_options, prompts=prompts, name=name
        )
        if chatbot_role is not None and (not isinstance(chatbot_role, str) or not chatbot_role.strip()):
            raise ValueError(f"chatbot_role must be a non-empty string, got {quote(chatbot_role)}")
        self.chatbot_role = chatbot_role

    def config(self) -> dict[str, Any]:
        """threshold, name, temperature, chatbot_role and the judge configuration."""
        return {**super().config(), "chatbot_role": self.chatbot_role}

    def role(self, case: EvalTestCase) -> tuple[str | None, str]:
        """The role judged and where it comes from: the metric's ``chatbot_role`` when set (it overrides the
        case's), else the case's; ``(None, "none")`` without either."""
        if self.chatbot_role:
            return self.chatbot_role, "metric"
        own = case.chatbot_role if isinstance(case, ConversationalEvalTestCase) else None
        return (own, "case") if own and own.strip() else (None, "none")

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A conversation whose turns have an ``input``, with a role (the metric's or its own)."""
        problems = super().validate_case(case)
        if isinstance(case, ConversationalEvalTestCase) and self.role(case)[0] is None:
            problems.append(("chatbot_role", "is missing (RoleAdherenceMetric has no chatbot_role of its own)"))
        return problems

    def variables(self, case: EvalTestCase) -> dict[str, Any]:
        """The turns and the role."""
        return {**super().variables(case), "chatbot_role": self.role(case)[0] or ""}

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """The verdicts per turn (see :class:`VerdictListMetric`), the role and its source logged."""
        judged = super().judge_case(case, asker)
        role, source = self.role(case)
        judged.log = {"chatbot_role": role, "role_source": source, **judged.log}
        return judged
