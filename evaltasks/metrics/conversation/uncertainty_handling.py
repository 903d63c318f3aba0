"""UncertaintyHandlingMetric (eval-ai-library's FailureRateMetric): how well the assistant behaves where it does
not know the answer, across a conversation (LLM judge; 1.0 = handled well or nothing to handle).

Source: eval-ai-library 0.8.2's code (``agent_metrics/failure_rate_metric``; it has no docs page): one holistic
verdict, ``hallucination`` 0.0, ``stall`` 0.4, ``mixed`` 0.6, ``honest_fallback`` 1.0,
``alternative_proposed`` 1.0, ``not_applicable`` 1.0 (no uncertainty arose), with evidence and a reason.
Differences (docs/metrics/conversation.md#uncertaintyhandlingmetric):

- the name says what it measures: the score is not a rate of failures (higher is better, and it is one label,
  not a share of turns); ``FailureRateMetric`` stays importable and usable in suites under that name, with the
  same score;
- an unknown or mis-cased label is an unusable answer (asked again within ``content_retries``, then
  ``errored``), where the library turns it into ``not_applicable``, 1.0, a pass: it fails open.

The prompt's wording is evaltasks' own.
"""

from __future__ import annotations

from typing import Any, ClassVar

from evaltasks.metrics.base import UnitFloat
from evaltasks.metrics.conversation._dialogue import LabelMetric
from evaltasks.metrics.registry import register_metric

HANDLING_WEIGHTS: dict[str, float] = {
    "hallucination": 0.0,
    "stall": 0.4,
    "mixed": 0.6,
    "honest_fallback": 1.0,
    "alternative_proposed": 1.0,
    "not_applicable": 1.0,
}
"""The uncertainty-handling labels, worst first, and their weights (eval-ai-library's ``FAILURE_WEIGHTS``)."""


class UncertaintyHandling(LabelMetric):
    """What UncertaintyHandlingMetric and its eval-ai-library name FailureRateMetric share: one judge verdict on
    how the assistant handled not knowing, score = its weight (hallucination 0.0, stall 0.4, mixed 0.6,
    honest_fallback / alternative_proposed / not_applicable 1.0).

    Args:
        threshold: minimum passing score, default 0.7.
        model: the judge model (default: the suite's ``judge: {model}``, else ``gpt-4o-mini``).
        samples: times each case is judged (mean, spread and ``unstable`` reported).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
        prompts: ``{"verdict": path}`` replaces the built-in prompt template.
        name: the name in results (default: the class name).

    Raises:
        ValueError: invalid threshold, samples, judge options or prompt files.

    A case is a :class:`~evaltasks.test_case.ConversationalEvalTestCase` whose turns have an ``input``. One
    request per case. ``evaluation_log``: ``verdict``, ``evidence``, ``reason``, ``number_of_turns`` and the
    judge's account.
    """

    version: ClassVar[str] = "1"
    weights: ClassVar[dict[str, float]] = HANDLING_WEIGHTS
    lists: ClassVar[tuple[str, ...]] = ("evidence",)
    what: ClassVar[str] = "Uncertainty handling"
    prompt_class: ClassVar[str | None] = "UncertaintyHandlingMetric"

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


@register_metric("UncertaintyHandlingMetric")
class UncertaintyHandlingMetric(UncertaintyHandling):
    """How well the assistant handles not knowing across a conversation: honest fallbacks and useful
    alternatives score 1.0, stalling 0.4, a mix 0.6, anything made up 0.0; 1.0 when no uncertainty arose
    (docs/metrics/conversation.md#uncertaintyhandlingmetric). Arguments and log as :class:`UncertaintyHandling`.
    """


@register_metric("FailureRateMetric")
class FailureRateMetric(UncertaintyHandling):
    """eval-ai-library's name of :class:`UncertaintyHandlingMetric`, kept so its suites and imports run unchanged:
    the same judge request and score (1.0 = uncertainty handled well, NOT a rate of failures;
    docs/metrics/conversation.md#uncertaintyhandlingmetric). Results carry the name ``FailureRateMetric`` unless
    ``name`` is given. Arguments and log as :class:`UncertaintyHandling`.
    """
