"""LLM-judged metrics: a chat model judges each case through :mod:`evaltasks.judges` (cached, retried,
budgeted). Their shared base is :class:`evaltasks.metrics.judge.base.JudgeMetric`; docs/metrics/judge.md#llm-judged-metrics."""

from evaltasks.metrics.judge.answer_relevancy import AnswerRelevancyMetric
from evaltasks.metrics.judge.base import JudgeMetric
from evaltasks.metrics.judge.bias import BiasMetric
from evaltasks.metrics.judge.contextual_precision import ContextualPrecisionMetric
from evaltasks.metrics.judge.contextual_recall import ContextualRecallMetric
from evaltasks.metrics.judge.contextual_relevancy import ContextualRelevancyMetric
from evaltasks.metrics.judge.custom_eval import CustomEvalMetric
from evaltasks.metrics.judge.faithfulness import FaithfulnessMetric
from evaltasks.metrics.judge.geval import GEvalMetric
from evaltasks.metrics.judge.toxicity import ToxicityMetric

__all__ = [
    "AnswerRelevancyMetric",
    "BiasMetric",
    "ContextualPrecisionMetric",
    "ContextualRecallMetric",
    "ContextualRelevancyMetric",
    "CustomEvalMetric",
    "FaithfulnessMetric",
    "GEvalMetric",
    "JudgeMetric",
    "ToxicityMetric",
]
