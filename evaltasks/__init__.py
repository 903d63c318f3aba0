"""evaltasks: LLM-output evaluation metrics as Prefect tasks, flows and a GitHub Action.

The public API (seed-compatible with eval-ai-library's ``eval_lib``)::

    from evaltasks import EvalTestCase, evaluate, evaluate_sync, LengthCheckMetric, ReferenceMatchMetric
"""

from evaltasks._version import __version__
from evaltasks.errors import (
    ConfigError,
    CredentialsError,
    DatasetError,
    EvalTasksError,
    InputError,
    ProviderError,
)
from evaltasks.evaluate import evaluate, evaluate_sync
from evaltasks.index import ReferenceIndex
from evaltasks.metrics import METRICS, BaseMetric, LengthCheckMetric, ReferenceMatchMetric
from evaltasks.results import EvaluationResult, MetricResult, TestCaseResult
from evaltasks.test_case import EvalTestCase

__all__ = [
    "METRICS",
    "BaseMetric",
    "ConfigError",
    "CredentialsError",
    "DatasetError",
    "EvalTasksError",
    "EvalTestCase",
    "EvaluationResult",
    "InputError",
    "LengthCheckMetric",
    "MetricResult",
    "ProviderError",
    "ReferenceIndex",
    "ReferenceMatchMetric",
    "TestCaseResult",
    "__version__",
    "evaluate",
    "evaluate_sync",
]
