"""LengthCheckMetric (eval-ai-library's LengthCheck, docs/metrics/deterministic.md#lengthcheckmetric)."""

from __future__ import annotations

import asyncio

import pytest

from evaltasks import EvalTestCase, LengthCheckMetric, evaluate_sync

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"
LOREM = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit. Sed do eiusmod tempor incididunt ut labore et "
    "dolore magna aliqua."
)


def run(metric: LengthCheckMetric, output: str, **fields):
    return asyncio.run(metric.evaluate(EvalTestCase(actual_output=output, **fields)))


# -- defaults --------------------------------------------------------------------------------------------
def test_defaults_match_the_seed() -> None:
    metric = LengthCheckMetric()
    assert metric.threshold == 1.0
    assert metric.min_length == 0
    assert metric.max_length is None
    assert metric.unit == "chars"
    assert metric.name == "LengthCheckMetric"


def test_default_metric_has_no_upper_bound_and_accepts_empty() -> None:
    metric = LengthCheckMetric()
    long = run(metric, "x" * 100_000)
    assert (long.score, long.success) == (1.0, True)
    assert long.evaluation_log["length"] == 100_000
    empty = run(metric, "")
    assert (empty.score, empty.success) == (1.0, True)
    assert empty.evaluation_log["length"] == 0


# -- seed examples ---------------------------------------------------------------------------------------
def test_seed_usage_example_scores_one() -> None:
    test_case = EvalTestCase(
        input="Напишите краткое резюме",
        actual_output="Проект был завершен вовремя и в рамках бюджета.",
    )
    metric = LengthCheckMetric(threshold=1.0, min_length=5, max_length=50, unit="words")
    result = asyncio.run(metric.evaluate(test_case))
    assert result.score == 1.0
    assert result.success is True
    assert result.evaluation_log["length"] == 8  # Проект был завершен вовремя и в рамках бюджета


def test_seed_pass_example_chars() -> None:
    metric = LengthCheckMetric(min_length=100, max_length=500, unit="chars")
    result = run(metric, LOREM, input="Напишите абзац")
    assert result.evaluation_log["length"] == len(LOREM)  # ASCII without CR LF: one character per code point
    assert 100 <= len(LOREM) <= 500
    assert (result.score, result.success) == (1.0, True)


def test_seed_too_short_example() -> None:
    metric = LengthCheckMetric(min_length=10, unit="words")
    result = run(metric, "Это работает.", input="Напишите подробное объяснение")
    assert result.evaluation_log["length"] == 2
    assert (result.score, result.success) == (0.0, False)
    assert "2" in result.reason and "10" in result.reason


def test_seed_too_long_example() -> None:
    metric = LengthCheckMetric(max_length=5, unit="words")
    result = run(metric, "Ответ на ваш вопрос — да, конечно", input="Дайте ответ одним словом")
    assert result.evaluation_log["length"] == 6
    assert (result.score, result.success) == (0.0, False)
    assert "6" in result.reason and "5" in result.reason


# -- bounds are inclusive --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("output", "words", "score"),
    [
        ("one two", 2, 0.0),
        ("one two three", 3, 1.0),  # == min_length
        ("one two three four", 4, 1.0),
        ("one two three four five", 5, 1.0),  # == max_length
        ("one two three four five six", 6, 0.0),
    ],
)
def test_word_bounds_are_inclusive(output: str, words: int, score: float) -> None:
    result = run(LengthCheckMetric(min_length=3, max_length=5, unit="words"), output)
    assert result.evaluation_log["length"] == words
    assert result.score == score
    assert result.success is (score == 1.0)


@pytest.mark.parametrize(("n", "score"), [(2, 0.0), (3, 1.0), (4, 1.0), (5, 0.0)])
def test_char_bounds_are_inclusive_and_count_graphemes(n: int, score: float) -> None:
    # "e\u0301" is 2 code points but one character: a code-point count would put every n out of range
    result = run(LengthCheckMetric(min_length=3, max_length=4), "e\u0301" * n)
    assert result.evaluation_log["length"] == n
    assert result.score == score


def test_min_equals_max_is_allowed_and_exact() -> None:
    metric = LengthCheckMetric(min_length=1, max_length=1)
    assert run(metric, FAMILY).score == 1.0  # one visible character (7 code points)
    assert run(metric, "\r\n").score == 1.0
    assert run(metric, "ab").score == 0.0
    assert run(metric, "").score == 0.0


def test_zero_bounds() -> None:
    metric = LengthCheckMetric(max_length=0, unit="words")
    assert run(metric, "— , . !").score == 1.0  # punctuation only: zero words
    assert run(metric, "a").score == 0.0


def test_words_unit_cjk_and_apostrophes() -> None:
    metric = LengthCheckMetric(max_length=4, unit="words")
    assert run(metric, "我爱北京").evaluation_log["length"] == 4
    assert run(metric, "我爱北京天").score == 0.0
    assert run(metric, "don't pay 3.14 l\u2019homme").evaluation_log["length"] == 4


# -- threshold and success -------------------------------------------------------------------------------
def test_success_is_score_at_least_threshold() -> None:
    lenient = LengthCheckMetric(threshold=0.0, max_length=1)
    result = run(lenient, "too long")
    assert result.score == 0.0
    assert result.success is True  # 0.0 >= 0.0
    assert result.threshold == 0.0
    strict = LengthCheckMetric(threshold=1.0, max_length=1)
    assert run(strict, "x").success is True  # 1.0 >= 1.0


# -- result shape ----------------------------------------------------------------------------------------
def test_evaluation_log_and_result_fields() -> None:
    metric = LengthCheckMetric(min_length=2, max_length=9, unit="words", name="short")
    result = run(metric, "Ответ на ваш вопрос — да, конечно")
    assert result.name == "short"
    log = result.evaluation_log
    assert (log["length"], log["unit"], log["min_length"], log["max_length"]) == (6, "words", 2, 9)
    assert result.evaluation_cost == 0.0
    assert result.threshold == 1.0
    assert result.status == "passed"
    assert "6" in result.reason
    default_log = run(LengthCheckMetric(), "abc").evaluation_log
    assert default_log["max_length"] is None and default_log["unit"] == "chars" and default_log["length"] == 3


def test_failed_status_and_reason_mentions_maximum() -> None:
    result = run(LengthCheckMetric(max_length=3), "abcd")
    assert result.status == "failed"
    assert "4" in result.reason and "3" in result.reason


def test_score_batch_keeps_order() -> None:
    metric = LengthCheckMetric(min_length=2, max_length=3, unit="words")
    cases = [EvalTestCase(actual_output=t) for t in ["a", "a b", "a b c", "a b c d", ""]]
    results = metric.score_batch(cases)
    assert [r.evaluation_log["length"] for r in results] == [1, 2, 3, 4, 0]
    assert [r.score for r in results] == [0.0, 1.0, 1.0, 0.0, 0.0]


def test_through_evaluate_sync() -> None:
    cases = [EvalTestCase(actual_output=t) for t in ["Это работает.", "Ответ на ваш вопрос — да, конечно"]]
    result = evaluate_sync(cases, [LengthCheckMetric(max_length=5, unit="words")])
    assert [c.metrics[0].score for c in result.test_results] == [1.0, 0.0]
    assert result.summary.embeddings.references_computed == 0
    assert result.summary.embeddings.outputs_computed == 0
    assert result.embedding_models == []


# -- construction errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"unit": "tokens"}, "unit"),
        ({"unit": "Words"}, "unit"),
        ({"unit": None}, "unit"),
        ({"min_length": -1}, "min_length"),
        ({"max_length": -1}, "max_length"),
        ({"min_length": 6, "max_length": 5}, "min_length"),
        ({"threshold": -0.01}, "threshold"),
        ({"threshold": 1.01}, "threshold"),
        ({"threshold": float("nan")}, "threshold"),
        ({"threshold": "1.0"}, "threshold"),
        ({"min_length": 2.5}, "min_length"),
        ({"min_length": 2.0}, "min_length"),
        ({"max_length": "10"}, "max_length"),
        ({"max_length": True}, "max_length"),
        ({"min_length": None}, "min_length"),
    ],
)
def test_invalid_parameters_raise_value_error(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LengthCheckMetric(**kwargs)


def test_boundary_parameters_are_valid() -> None:
    LengthCheckMetric(threshold=0.0)
    LengthCheckMetric(threshold=1)
    LengthCheckMetric(min_length=0, max_length=0)
    LengthCheckMetric(min_length=5, max_length=5, unit="words")


def test_non_string_output_is_rejected_by_the_test_case() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        EvalTestCase(actual_output=12345)
