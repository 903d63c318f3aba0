"""Conversation metrics: an LLM judge reads a whole conversation (:class:`~evaltasks.ConversationalEvalTestCase`)
in one request and scores it (docs/metrics/conversation.md). TaskSuccessRateMetric also scores single-turn
cases."""

from evaltasks.metrics.conversation.conversational_flow import ConversationalFlowRateMetric
from evaltasks.metrics.conversation.goal_achievement import GoalAchievementRateMetric
from evaltasks.metrics.conversation.knowledge_retention import KnowledgeRetentionMetric
from evaltasks.metrics.conversation.repetitive_pattern import RepetitivePatternDetectionMetric
from evaltasks.metrics.conversation.role_adherence import RoleAdherenceMetric
from evaltasks.metrics.conversation.task_success_rate import TaskSuccessRateMetric
from evaltasks.metrics.conversation.uncertainty_handling import FailureRateMetric, UncertaintyHandlingMetric

__all__ = [
    "ConversationalFlowRateMetric",
    "FailureRateMetric",
    "GoalAchievementRateMetric",
    "KnowledgeRetentionMetric",
    "RepetitivePatternDetectionMetric",
    "RoleAdherenceMetric",
    "TaskSuccessRateMetric",
    "UncertaintyHandlingMetric",
]
