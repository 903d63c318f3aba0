"""The public Python API (docs/python-api.md#python-api): eval-ai-library's import paths with eval_lib -> evaltasks."""

from __future__ import annotations

import asyncio
import importlib

import pytest
from pydantic import BaseModel, ValidationError


def test_seed_import_paths() -> None:
    import evaltasks
    from evaltasks import EvalTestCase, evaluate
    from evaltasks.metrics import LengthCheckMetric
    from evaltasks.metrics.vector_metrics import ReferenceMatchMetric
    from evaltasks.test_case import EvalTestCase as FromTestCase

    assert FromTestCase is EvalTestCase
    assert evaltasks.LengthCheckMetric is LengthCheckMetric
    assert evaltasks.ReferenceMatchMetric is ReferenceMatchMetric
    assert evaltasks.evaluate is evaluate
    assert callable(evaltasks.evaluate_sync)


@pytest.mark.parametrize(
    ("module", "name", "canonical"),
    [
        ("evaltasks.testcases_schema", "EvalTestCase", "evaltasks.test_case"),
        ("evaltasks.deterministic_metrics", "LengthCheckMetric", "evaltasks.metrics.deterministic.length_check"),
        ("evaltasks.vector_metrics", "ReferenceMatchMetric", "evaltasks.metrics.vector.reference_match"),
        (
            "evaltasks.metrics.deterministic_metrics",
            "LengthCheckMetric",
            "evaltasks.metrics.deterministic.length_check",
        ),
        ("evaltasks.metrics.vector_metrics", "ReferenceMatchMetric", "evaltasks.metrics.vector.reference_match"),
        ("evaltasks.metrics", "LengthCheckMetric", "evaltasks.metrics.deterministic.length_check"),
        ("evaltasks.metrics", "ReferenceMatchMetric", "evaltasks.metrics.vector.reference_match"),
    ],
)
def test_alias_modules_are_thin(module: str, name: str, canonical: str) -> None:
    assert getattr(importlib.import_module(module), name) is getattr(importlib.import_module(canonical), name)


def test_top_level_exports() -> None:
    import evaltasks

    for name in (
        "EvalTestCase",
        "evaluate",
        "evaluate_sync",
        "LengthCheckMetric",
        "ReferenceMatchMetric",
        "MetricResult",
        "EvaluationResult",
        "TestCaseResult",
        "ReferenceIndex",
        "CredentialsError",
    ):
        assert hasattr(evaltasks, name), name
        assert name in evaltasks.__all__
    assert isinstance(evaltasks.__version__, str) and evaltasks.__version__


def test_metric_registry_maps_class_names() -> None:
    from evaltasks.metrics import METRICS, LengthCheckMetric, ReferenceMatchMetric, get_metric_class

    assert METRICS["LengthCheckMetric"] is LengthCheckMetric
    assert METRICS["ReferenceMatchMetric"] is ReferenceMatchMetric
    with pytest.raises(KeyError, match="LengthCheckMetric"):
        get_metric_class("LenghtCheckMetric")  # a typo gets a suggestion


# -- EvalTestCase ----------------------------------------------------------------------------------------
def test_test_case_fields() -> None:
    from evaltasks import EvalTestCase

    minimal = EvalTestCase(actual_output="answer")
    assert isinstance(minimal, BaseModel)
    assert minimal.actual_output == "answer"
    assert minimal.input is None and minimal.expected_output is None and minimal.name is None
    assert minimal.references is None
    full = EvalTestCase(actual_output="", input="q", expected_output="e", name="n", references=["r1", "r2"])
    assert (full.actual_output, full.input, full.expected_output, full.name) == ("", "q", "e", "n")
    assert full.references == ["r1", "r2"]


@pytest.mark.parametrize("bad", [None, 42, 3.5, b"bytes", ["a list"], {"a": "dict"}])
def test_actual_output_must_be_a_string(bad) -> None:
    from evaltasks import EvalTestCase

    with pytest.raises(ValidationError):
        EvalTestCase(actual_output=bad)


def test_actual_output_is_required() -> None:
    from evaltasks import EvalTestCase

    with pytest.raises(ValidationError, match="actual_output"):
        EvalTestCase(input="only an input")


@pytest.mark.parametrize("bad", ["one string", [1, 2], ["ok", None]])
def test_references_must_be_a_list_of_strings(bad) -> None:
    from evaltasks import EvalTestCase

    with pytest.raises(ValidationError):
        EvalTestCase(actual_output="x", references=bad)


# -- MetricResult ----------------------------------------------------------------------------------------
def test_metric_result_fields() -> None:
    from evaltasks import EvalTestCase, LengthCheckMetric, MetricResult

    result = asyncio.run(
        LengthCheckMetric(min_length=5, max_length=50, unit="words").evaluate(
            EvalTestCase(
                input="Напишите краткое резюме", actual_output="Проект был завершен вовремя и в рамках бюджета."
            )
        )
    )
    assert isinstance(result, MetricResult) and isinstance(result, BaseModel)
    for field in ("name", "score", "threshold", "success", "reason", "evaluation_cost", "evaluation_log"):
        assert field in MetricResult.model_fields, field
    assert result.name == "LengthCheckMetric"
    assert result.score == 1.0 and 0.0 <= result.score <= 1.0
    assert result.threshold == 1.0
    assert result.success is True
    assert isinstance(result.reason, str) and "8" in result.reason
    assert result.evaluation_cost == 0.0
    assert isinstance(result.evaluation_log, dict)
    dumped = result.model_dump()
    assert dumped["score"] == 1.0 and dumped["evaluation_log"]["length"] == 8


def test_metric_result_success_follows_threshold() -> None:
    from evaltasks import MetricResult

    assert MetricResult.scored("m", 0.7, 0.7, "r", {}).success is True
    at_threshold = MetricResult.scored("m", 0.7, 0.7, "r", {})
    assert at_threshold.status == "passed"
    below = MetricResult.scored("m", 0.6999999, 0.7, "r", {})
    assert below.success is False and below.status == "failed"


def test_evaluation_result_shape() -> None:
    from evaltasks import EvalTestCase, EvaluationResult, LengthCheckMetric, TestCaseResult, evaluate

    result = asyncio.run(
        evaluate(
            [EvalTestCase(actual_output="short"), EvalTestCase(actual_output="x" * 20)],
            [LengthCheckMetric(max_length=10)],
        )
    )
    assert isinstance(result, EvaluationResult) and isinstance(result, BaseModel)
    assert all(isinstance(c, TestCaseResult) for c in result.test_results)
    assert [c.success for c in result.test_results] == [True, False]
    assert result.summary.pass_rate == 0.5
    assert result.summary.metrics["LengthCheckMetric"].mean_score == 0.5
    assert result.model_dump()["summary"]["cases"] == 2
