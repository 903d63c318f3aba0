"""Alias of eval-ai-library 0.8's ``eval_lib.agent_metrics`` module path."""

from evaltasks.metrics.conversation.conversational_flow import ConversationalFlowRateMetric
from evaltasks.metrics.conversation.goal_achievement import GoalAchievementRateMetric
from evaltasks.metrics.conversation.knowledge_retention import KnowledgeRetentionMetric
from evaltasks.metrics.conversation.repetitive_pattern import RepetitivePatternDetectionMetric
from evaltasks.metrics.conversation.role_adherence import RoleAdherenceMetric
from evaltasks.metrics.conversation.task_success_rate import TaskSuccessRateMetric
from evaltasks.metrics.conversation.uncertainty_handling import FailureRateMetric, UncertaintyHandlingMetric
from evaltasks.metrics.deterministic.tool_correctness import ToolCorrectnessMetric

__all__ = [
    "ConversationalFlowRateMetric",
    "FailureRateMetric",
    "GoalAchievementRateMetric",
    "KnowledgeRetentionMetric",
    "RepetitivePatternDetectionMetric",
    "RoleAdherenceMetric",
    "TaskSuccessRateMetric",
    "ToolCorrectnessMetric",
    "UncertaintyHandlingMetric",
]
