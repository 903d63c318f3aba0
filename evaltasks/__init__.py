"""evaltasks: LLM-output evaluation metrics as Prefect tasks, flows and a GitHub Action.

The public API (compatible with eval-ai-library's ``eval_lib``)::

    from evaltasks import EvalTestCase, evaluate, evaluate_sync, LengthCheckMetric, ReferenceMatchMetric
"""

import os as _os
import sys as _sys

# `python -m evaltasks` (and `-m evaltasks.cli`): Python put the working directory first on sys.path, so a `yaml.py`
# there would replace the module evaltasks imports. Drop it first thing, while Python is still locating the module
# (sys.argv[0] is "-m" then), before anything but the interpreter's own start-up modules is imported
# (docs/metrics/custom.md#your-own-metrics). Under -P (Python 3.11+) or -I it is not there. Importing evaltasks from a program never does this.
if _sys.argv[:1] == ["-m"] and not (getattr(_sys.flags, "safe_path", False) or _sys.flags.isolated) and _sys.path:
    _argv = list(getattr(_sys, "orig_argv", ()))
    if any(flag == "-m" and _argv[i + 1:i + 2] in (["evaltasks"], ["evaltasks.cli"]) for i, flag in enumerate(_argv)):
        try:
            _cwd = _os.getcwd()
        except OSError:
            _cwd = None
        if _sys.path[0] in ("", _cwd):
            del _sys.path[0]

from evaltasks._version import __version__  # noqa: E402 - after the path is made safe

# In a source checkout the flows live in ./flows (a build installs them as evaltasks.flows). Make
# `evaltasks.flows` importable from the checkout too, e.g. `python -m evaltasks.cli` run in the repo root.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "flows")) and _os.path.isfile(
    _os.path.join(_root, "flows", "evaluate_suite.py")
):
    __path__.append(_root)
from evaltasks._redact import install_log_redaction as _install_log_redaction
from evaltasks.errors import (
    ConfigError,
    CredentialsError,
    DatasetError,
    EvalTasksError,
    GateFailed,
    InputError,
    ProviderError,
)

# Every log record of a process that imports evaltasks (a worker process too) is redacted when it is made: an API
# key an endpoint echoed never reaches a console, a log file or Prefect's database (docs/reports.md#secrets-in-reports).
_install_log_redaction()

# The rest of the public API is imported when first used (PEP 562), so that `import evaltasks` and the commands
# that need none of it (`evaltasks --version`, `schema`, `index info`) do not pay for numpy, pydantic models or
# the metrics: `from evaltasks import evaluate_sync` works as before.
_LAZY: dict[str, str] = {
    "evaluate": "evaltasks.engine.evaluate",
    "evaluate_sync": "evaltasks.engine.evaluate",
    "ReferenceIndex": "evaltasks.index",
    "EvaluationResult": "evaltasks.results",
    "MetricResult": "evaltasks.results",
    "TestCaseResult": "evaltasks.results",
    "EvalTestCase": "evaltasks.test_case",
    "SemanticSimilarityMetric": "evaltasks.metrics.vector.semantic_similarity",
    "GEvalMetric": "evaltasks.metrics.judge.geval",
    "CustomEvalMetric": "evaltasks.metrics.judge.custom_eval",
    **{name: "evaltasks.metrics" for name in (
        "METRICS", "BaseMetric", "ContainsMetric", "EndsWithMetric", "ExactMatchMetric", "FormatCheckMetric",
        "JsonSchemaMetric", "LanguageDetectionMetric", "LengthCheckMetric", "NonEmptyMetric",
        "ReferenceMatchMetric", "RegexMatchMetric", "RestrictedRefusalMetric", "StartsWithMetric",
        "ToolCorrectnessMetric",
    )},
    **{name: "evaltasks.metrics" for name in (
        "AnswerRelevancyMetric", "BiasMetric", "ContextualPrecisionMetric", "ContextualRecallMetric",
        "ContextualRelevancyMetric", "FaithfulnessMetric", "ToxicityMetric",
    )},
}


def __getattr__(name: str) -> object:
    """The public name ``name`` from the module that defines it, imported on first use (PEP 562).

    Raises:
        AttributeError: ``name`` is not part of the public API.
    """
    module = _LAZY.get(name)
    import importlib

    if module is None:
        # a submodule (`evaltasks.metrics.LengthCheckMetric` after a bare `import evaltasks`), as the eager
        # imports used to bind them
        import importlib.util

        if not name.startswith("_") and importlib.util.find_spec(f"evaltasks.{name}") is not None:
            return importlib.import_module(f"evaltasks.{name}")
        raise AttributeError(f"module 'evaltasks' has no attribute {name!r}")

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:
    """The module's names, the public API's lazily imported ones included."""
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AnswerRelevancyMetric",
    "BaseMetric",
    "BiasMetric",
    "ConfigError",
    "ContainsMetric",
    "ContextualPrecisionMetric",
    "ContextualRecallMetric",
    "ContextualRelevancyMetric",
    "CredentialsError",
    "CustomEvalMetric",
    "DatasetError",
    "EndsWithMetric",
    "EvalTasksError",
    "EvalTestCase",
    "EvaluationResult",
    "ExactMatchMetric",
    "FaithfulnessMetric",
    "FormatCheckMetric",
    "GEvalMetric",
    "GateFailed",
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
    "ToxicityMetric",
    "__version__",
    "evaluate",
    "evaluate_sync",
]
