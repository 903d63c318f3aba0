"""ConversationalFlowRateMetric: how natural, coherent and progress-oriented a whole conversation is (LLM judge).

Source: eval-ai-library 0.8.2's code (``agent_metrics/conversational_flow_metric``; it has no docs page): one
holistic verdict for the dialogue, ``fully`` 1.0, ``mostly`` 0.9, ``partial`` 0.7, ``minor`` 0.3, ``none``
0.0, with the issues the judge found and a reason. Difference: an unknown or mis-cased label is an unusable
answer (asked again within ``content_retries``, then ``errored``), where the library scores it 0.0
(docs/metrics/conversation.md#labels-and-verdict-counts). The prompt's wording and examples are evaltasks' own.
"""

from __future__ import annotations

from typing import Any, ClassVar

from evaltasks.metrics.base import UnitFloat
from evaltasks.metrics.conversation._dialogue import LabelMetric
from evaltasks.metrics.judge._aggregation import VERDICT_WEIGHTS
from evaltasks.metrics.registry import register_metric


@register_metric("ConversationalFlowRateMetric")
class ConversationalFlowRateMetric(LabelMetric):
    """The flow of a conversation as a whole: one judge verdict, score = its weight (fully 1.0, mostly 0.9,
    partial 0.7, minor 0.3, none 0.0; docs/metrics/conversation.md#conversationalflowratemetric).

    Args:
        threshold: minimum passing score, default 0.7.
        model: the judge model (default: the suite's ``judge: {model}``, else ``gpt-4o-mini``).
        samples: times each case is judged (mean, spread and ``unstable`` reported).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
        prompts: ``{"verdict": path}`` replaces the built-in prompt template.
        name: the name in results.

    Raises:
        ValueError: invalid threshold, samples, judge options or prompt files.

    A case is a :class:`~evaltasks.test_case.ConversationalEvalTestCase` whose turns have an ``input``. One
    request per case. ``evaluation_log``: ``verdict``, ``key_issues``, ``reason``, ``number_of_turns`` and the
    judge's account.
    """

    version: ClassVar[str] = "1"
    weights: ClassVar[dict[str, float]] = dict(VERDICT_WEIGHTS)
    lists: ClassVar[tuple[str, ...]] = ("key_issues",)
    what: ClassVar[str] = "Conversational flow"

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
