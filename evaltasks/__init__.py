"""evaltasks: LLM-output evaluation metrics as Prefect tasks, flows and a GitHub Action.

The public API (seed-compatible with eval-ai-library's ``eval_lib``)::

    from evaltasks import EvalTestCase, evaluate, evaluate_sync, LengthCheckMetric, ReferenceMatchMetric
"""

import os as _os

from evaltasks._version import __version__

# In a source checkout the flows live in ./flows (a build installs them as evaltasks.flows). Make
# `evaltasks.flows` importable from the checkout too, e.g. `python -m evaltasks.cli` run in the repo root.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "flows")) and _os.path.isfile(
    _os.path.join(_root, "flows", "evaluate_suite.py")
):
    __path__.append(_root)
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
from evaltasks.metrics import (
    METRICS,
    BaseMetric,
    ContainsMetric,
    EndsWithMetric,
    ExactMatchMetric,
    FormatCheckMetric,
    JsonSchemaMetric,
    LengthCheckMetric,
    NonEmptyMetric,
    ReferenceMatchMetric,
    RegexMatchMetric,
    RestrictedRefusalMetric,
    StartsWithMetric,
    ToolCorrectnessMetric,
)
from evaltasks.metrics import METRICS, BaseMetric, LengthCheckMetric, ReferenceMatchMetric
from evaltasks.metrics.semantic_similarity import SemanticSimilarityMetric
from evaltasks.metrics import METRICS, BaseMetric, LanguageDetectionMetric, LengthCheckMetric, ReferenceMatchMetric
from evaltasks.results import EvaluationResult, MetricResult, TestCaseResult
from evaltasks.test_case import EvalTestCase

__all__ = [
    "BaseMetric",
    "ConfigError",
    "ContainsMetric",
    "CredentialsError",
    "DatasetError",
    "EndsWithMetric",
    "EvalTasksError",
    "EvalTestCase",
    "EvaluationResult",
    "ExactMatchMetric",
    "FormatCheckMetric",
    "InputError",
    "JsonSchemaMetric",
    "LanguageDetectionMetric",
    "LengthCheckMetric",
    "METRICS",
    "MetricResult",
    "NonEmptyMetric",
    "ProviderError",
    "ReferenceIndex",
    "ReferenceMatchMetric",
    "RegexMatchMetric",
    "RestrictedRefusalMetric",
    "SemanticSimilarityMetric",
    "StartsWithMetric",
    "TestCaseResult",
    "ToolCorrectnessMetric",
    "__version__",
    "evaluate",
    "evaluate_sync",
]
