"""RepetitivePatternDetectionMetric: how free a conversation is of loops, the assistant repeating itself instead
of making progress (LLM judge; 1.0 = no repetition).

Source: eval-ai-library 0.8.2's code (``agent_metrics/repetitive_pattern_metric``; it has no docs page): one
holistic verdict on an inverted scale, ``none`` 1.0 (no repetition), ``minor`` 0.9, ``partial`` 0.7,
``mostly`` 0.3, ``fully`` 0.0 (stuck in a loop), with the repeated segments and a reason. Difference: an unknown
or mis-cased label is an unusable answer (asked again within ``content_retries``, then ``errored``), where the
library scores it 1.0, a pass: it fails open (docs/metrics/conversation.md#labels-and-verdict-counts). The
prompt's wording is evaltasks' own.
"""

from __future__ import annotations

from typing import Any, ClassVar

from evaltasks.metrics.base import UnitFloat
from evaltasks.metrics.conversation._dialogue import LabelMetric
from evaltasks.metrics.registry import register_metric

REPETITION_WEIGHTS: dict[str, float] = {"none": 1.0, "minor": 0.9, "partial": 0.7, "mostly": 0.3, "fully": 0.0}
"""The repetition labels, best first, and their weights (inverted: "fully" repetitive is the worst)."""


@register_metric("RepetitivePatternDetectionMetric")
class RepetitivePatternDetectionMetric(LabelMetric):
    """How free a conversation is of repetition without progress: one judge verdict, score = its weight (none
    1.0, minor 0.9, partial 0.7, mostly 0.3, fully 0.0; docs/metrics/conversation.md#repetitivepatterndetectionmetric).

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
    request per case. ``evaluation_log``: ``verdict``, ``repeated_segments``, ``reason``, ``number_of_turns``
    and the judge's account.
    """

    version: ClassVar[str] = "1"
    weights: ClassVar[dict[str, float]] = REPETITION_WEIGHTS
    lists: ClassVar[tuple[str, ...]] = ("repeated_segments",)
    what: ClassVar[str] = "Repetition"

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
