"""KnowledgeRetentionMetric: how well the assistant remembers and uses what was said earlier in a conversation
(LLM judge).

Source: eval-ai-library's page https://library.eval-ai.com/agent-metrics/knowledge-retention (threshold 0.7,
temperature 0.5; "single verdict for overall retention quality" of the whole dialogue) and its 0.8.2 code
(``agent_metrics/knowledge_retention_metric``: the five-level weights, ``score_agg`` over the verdicts).
Differences (docs/metrics/conversation.md#knowledgeretentionmetric):

- the answer must hold exactly the one verdict the docs define: the library asks for one but scores any list
  that comes back (three verdicts are averaged), so here another number is asked again within
  ``content_retries``, then errors the case; an unknown or mis-cased label likewise (the library weighs it 0.0);
- one request per case: the reason is built from the verdict (the library asks a second "summarise" request).

With one verdict, score_agg is the verdict's weight whatever ``temperature`` (kept for compatibility).
"""

from __future__ import annotations

from typing import Any, ClassVar

from evaltasks.metrics.base import UnitFloat
from evaltasks.metrics.conversation._verdict_list import VerdictListMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.test_case import EvalTestCase


@register_metric("KnowledgeRetentionMetric")
class KnowledgeRetentionMetric(VerdictListMetric):
    """How well the assistant retains what the user said in earlier turns: one verdict for the dialogue
    (fully 1.0, mostly 0.9, partial 0.7, minor 0.3, none 0.0), score = its weight
    (docs/metrics/conversation.md#knowledgeretentionmetric).

    Args:
        threshold: minimum passing score, default 0.7.
        model: the judge model (default: the suite's ``judge: {model}``, else ``gpt-4o-mini``).
        temperature: aggregation strictness in [0, 1] (eval-ai-library's parameter; with the one verdict the
            docs define it does not change the score).
        samples: times each case is judged (mean, spread and ``unstable`` reported).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
        prompts: ``{"verdicts": path}`` replaces the built-in prompt template.
        name: the name in results.

    Raises:
        ValueError: invalid threshold, temperature, samples, judge options or prompt files.

    A case is a :class:`~evaltasks.test_case.ConversationalEvalTestCase` whose turns have an ``input``. One
    request per case. ``evaluation_log``: ``verdicts`` (one: ``verdict``, ``weight``, ``reason``),
    ``number_of_turns``, ``temperature`` and the judge's account.
    """

    version: ClassVar[str] = "1"
    what: ClassVar[str] = "Knowledge retention"
    per: ClassVar[str] = "dialogue"

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
        super().__init__(
            threshold, model, temperature, samples=samples, judge_options=judge_options, prompts=prompts, name=name
        )

    def expected(self, case: EvalTestCase) -> int:
        """One verdict for the whole dialogue."""
        return 1
