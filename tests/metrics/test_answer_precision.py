"""AnswerPrecisionMetric: the five sub-scores, weights and tolerances of eval-ai-library's docs page
(library.eval-ai.com/metrics/answer-precision), and each place evaltasks differs from its 0.8.2 code.

Expected values are worked out by hand from the page's definitions (tokens, numbers and overlaps listed in the
tests); the character similarity is difflib's ratio, which the page names, computed here on the hand-normalised
strings. The rules: docs/metrics/deterministic.md#answerprecisionmetric.
"""

from __future__ import annotations

import asyncio
from difflib import SequenceMatcher
from pathlib import Path

import pytest

import evaltasks
from evaltasks import AnswerPrecisionMetric, EvalTestCase, InputError, evaluate_sync
from evaltasks.errors import ConfigError
from evaltasks.inputs.suite import load_suite
from evaltasks.metrics import METRICS
from evaltasks.metrics.deterministic.answer_precision import STOPWORDS, numeric_agreement

P = 0.3
W_EXACT, W_CHAR, W_TOKEN, W_NUMERIC, W_CONTAIN = 0.25, 0.25, 0.20, 0.15, 0.15


def expected_score(exact: float, char: float, token: float, numeric: float, contain: float, p: float = P) -> float:
    """The score as defined: Σ weight · sub-score^p (weights from the docs page's table)."""
    return W_EXACT * exact**p + W_CHAR * char**p + W_TOKEN * token**p + W_NUMERIC * numeric**p + W_CONTAIN * contain**p


def score(metric: AnswerPrecisionMetric, actual: str, expected: str):
    return asyncio.run(metric.evaluate(EvalTestCase(input="q", actual_output=actual, expected_output=expected)))


def components(result) -> list[float]:
    c = result.evaluation_log["components"]
    return [
        c["exact_match"],
        c["char_similarity"],
        c["token_precision"],
        c["numeric_agreement"],
        c["token_containment"],
    ]


# -- the docs page ------------------------------------------------------------------------------------------
def test_the_docs_example_passes_as_the_page_says() -> None:
    """'The answer is 4.' against '4' at threshold 0.6 (the page's usage example). Tokens: {answer, 4} (the,
    is are stopwords) and {4}; overlap 1/min(2, 1) = 1; containment 1/1; numbers [4] and [4]; character
    similarity: 1 matching character of 16 + 1: 2·1/17."""
    [case_result] = evaluate_sync(
        [EvalTestCase(input="What is 2 + 2?", actual_output="The answer is 4.", expected_output="4")],
        [AnswerPrecisionMetric(threshold=0.6)],
    ).test_results
    [result] = case_result.metrics
    want = expected_score(0.0, 2 / 17, 1.0, 1.0, 1.0)
    assert components(result) == pytest.approx([0.0, 2 / 17, 1.0, 1.0, 1.0])
    assert result.score == pytest.approx(want) and want == pytest.approx(0.63156, abs=1e-5)
    assert result.success is True and result.status == "passed"
    # the weighted power mean itself (with its 1/p root) is logged: it would fail the page's own example
    assert result.evaluation_log["power_mean"] == pytest.approx(want ** (1 / P)) and want ** (1 / P) < 0.6
    assert "Extra terms: answer." in result.reason and "Missing terms: none." in result.reason


def test_defaults_are_the_docs_pages() -> None:
    """threshold 0.6, tolerances 0.01 / 0.05, power_p 0.3 (eval-ai-library 0.8.2's code: threshold 0.8 and
    tolerances 0.0 / 0.0)."""
    metric = AnswerPrecisionMetric()
    assert metric.config() == {
        "threshold": 0.6,
        "name": "AnswerPrecisionMetric",
        "token_stopwords": None,
        "numeric_tolerance_abs": 0.01,
        "numeric_tolerance_rel": 0.05,
        "power_p": 0.3,
    }
    weights = score(metric, "4", "4").evaluation_log["weights"]
    assert weights == {
        "exact_match": W_EXACT,
        "char_similarity": W_CHAR,
        "token_precision": W_TOKEN,
        "numeric_agreement": W_NUMERIC,
        "token_containment": W_CONTAIN,
    }


def test_identical_answers_score_one_case_insensitively() -> None:
    """Exact match is case-insensitive (the page): every sub-score is 1.0, the weights sum to 1.0."""
    result = score(AnswerPrecisionMetric(threshold=1.0), " PARIS\n", "Paris")
    assert components(result) == [1.0, 1.0, 1.0, 1.0, 1.0]
    assert result.score == 1.0 and result.success is True


def test_five_sub_scores_worked_by_hand() -> None:
    """Tokens (case-folded, stopwords 'to'/'in' left out): actual {revenue, grew, 12, 4, 2, million, 2023},
    expected {revenue, rose, 12, 4, 2, million}; 5 shared: overlap 5/min(7, 6) = 5/6, containment 5/6.
    Numbers: expected [12, 4.2] both found in [12, 4.2, 2023]: 1.0."""
    actual, expected = "Revenue grew 12% to $4.2 million in 2023.", "Revenue rose 12% to 4.2 million."
    result = score(AnswerPrecisionMetric(), actual, expected)
    char = SequenceMatcher(None, actual.lower(), expected.lower(), autojunk=False).ratio()
    assert components(result) == pytest.approx([0.0, char, 5 / 6, 1.0, 5 / 6])
    assert result.score == pytest.approx(expected_score(0.0, char, 5 / 6, 1.0, 5 / 6))
    log = result.evaluation_log
    assert log["missing_terms"] == ["rose"] and log["extra_terms"] == ["2023", "grew"]
    assert log["expected_numbers"] == [12.0, 4.2] and log["actual_numbers"] == [12.0, 4.2, 2023.0]


def test_a_wrong_answer_scores_zero() -> None:
    result = score(AnswerPrecisionMetric(), "The answer is 5.", "4")
    assert result.score == 0.0 and result.success is False
    assert "Expected numbers not matched: 4." in result.reason


def test_token_precision_is_the_overlap_coefficient_and_containment_the_expected_share() -> None:
    """actual {paris, capital, france} vs expected {paris, city}: overlap 1/min(3, 2) = 1/2, containment 1/2."""
    result = score(AnswerPrecisionMetric(), "Paris is the capital of France", "Paris city")
    assert components(result)[2:] == [0.5, 1.0, 0.5]


def test_token_stopwords_replace_the_default_set() -> None:
    """Default: 'the cat' and 'a cat' are both {cat}; with token_stopwords=[] they are {the, cat} and {a, cat}:
    overlap 1/2, containment 1/2. Stopwords compare case-folded ('CAT' drops 'cat')."""
    assert "the" in STOPWORDS and "a" in STOPWORDS and len(STOPWORDS) == 26
    assert components(score(AnswerPrecisionMetric(), "a cat", "the cat"))[2:] == [1.0, 1.0, 1.0]
    assert components(score(AnswerPrecisionMetric(token_stopwords=[]), "a cat", "the cat"))[2:] == [0.5, 1.0, 0.5]
    both_empty = score(AnswerPrecisionMetric(token_stopwords=["CAT"]), "cat!", "cat")
    assert components(both_empty)[2:] == [1.0, 1.0, 1.0]  # no token on either side: nothing disagrees


# -- numeric agreement -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("actual", "expected", "agrees"),
    [
        ([4.009], [4.0], True),  # |error| 0.009 <= 0.01 absolute
        ([4.02], [4.0], True),  # 0.02 > 0.01, but 0.02 <= 0.05 * 4 = 0.2 relative
        ([104.0], [100.0], True),  # 4 <= 5
        ([106.0], [100.0], False),  # 6 > 5 and > 0.01
        ([0.02], [0.0], False),  # relative to 0 is 0; 0.02 > 0.01
        ([0.005], [0.0], True),
    ],
)
def test_numbers_agree_within_the_docs_tolerances(actual: list[float], expected: list[float], agrees: bool) -> None:
    """The page's tolerances: 0.01 absolute OR 0.05 relative to the expected number. eval-ai-library 0.8.2's
    code defaults both to 0.0, so 4.009 against 4 disagrees there."""
    assert numeric_agreement(actual, expected, 0.01, 0.05)[0] == (1.0 if agrees else 0.0)
    assert numeric_agreement(actual, expected, 0.0, 0.0)[0] == (1.0 if actual == expected else 0.0)


def test_numeric_tolerance_through_the_metric() -> None:
    """'4.009' against '4': agreement 1.0 with the docs' defaults, 0.0 with the code's (0, 0)."""
    assert components(score(AnswerPrecisionMetric(), "4.009", "4"))[3] == 1.0
    strict = AnswerPrecisionMetric(numeric_tolerance_abs=0.0, numeric_tolerance_rel=0.0)
    assert components(score(strict, "4.009", "4"))[3] == 0.0


def test_each_expected_number_takes_the_nearest_free_one() -> None:
    """Expected [10, 20] against [19.5, 11]: 10 takes 11 (error 1 > 0.5 = 5 % of 10: no), 20 takes 19.5
    (0.5 <= 1.0: yes): 1/2. Extra actual numbers do not count; numbers only in the output: 0.0."""
    assert numeric_agreement([19.5, 11.0], [10.0, 20.0], 0.01, 0.05) == (0.5, [20.0], [10.0])
    assert numeric_agreement([1.0, 2.0, 3.0], [2.0], 0.01, 0.05)[0] == 1.0
    assert numeric_agreement([2.0], [], 0.01, 0.05)[0] == 0.0
    assert numeric_agreement([], [], 0.01, 0.05)[0] == 1.0
    assert numeric_agreement([], [3.0], 0.01, 0.05) == (0.0, [], [3.0])


# -- where evaltasks differs from eval-ai-library 0.8.2's code ------------------------------------------------
def test_no_extra_token_penalty() -> None:
    """eval-ai-library's code multiplies by 0.95 when 5 or more output tokens are not expected and its token
    precision is under 0.7; the docs page has no such penalty, and neither has evaltasks. Here: 6 extra
    tokens (answer, after, careful, long, detailed, analysis), overlap 1/1, containment 1/1."""
    actual = "The answer, after careful long detailed analysis, is 4."
    result = score(AnswerPrecisionMetric(), actual, "4")
    char = SequenceMatcher(None, actual.lower(), "4", autojunk=False).ratio()
    assert len(result.evaluation_log["extra_terms"]) == 6
    assert result.score == pytest.approx(expected_score(0.0, char, 1.0, 1.0, 1.0))


def test_urls_are_compared_as_text() -> None:
    """eval-ai-library's code deletes bare URLs (and keeps only a Markdown link's label) before comparing, so
    two answers pointing at different pages score 1.0 there. Here: tokens {docs, https, example, v1} ('a' is a
    stopword) vs {docs, https, b, example, v2}: 3 shared, overlap 3/4, containment 3/5; numbers 1 vs 2
    disagree; not exact: it fails."""
    actual, expected = "Docs: https://a.example/v1", "Docs: https://b.example/v2"
    result = score(AnswerPrecisionMetric(), actual, expected)
    char = SequenceMatcher(None, actual.lower(), expected.lower(), autojunk=False).ratio()
    assert components(result) == pytest.approx([0.0, char, 0.75, 0.0, 0.6])
    assert result.score == pytest.approx(expected_score(0.0, char, 0.75, 0.0, 0.6)) and result.success is False


def test_character_similarity_has_no_autojunk() -> None:
    """difflib's autojunk (eval-ai-library's code leaves it on) discards every character making up more than 1 %
    of a text of 200+ characters: two 1,350-character answers differing in one word per sentence score about
    0.01 there. Here the plain SequenceMatcher ratio: 2 · matched / total, with 30 × 3 changed characters (both
    compared stripped: 1,349 characters each)."""
    actual = "the quick brown fox jumps over the lazy dog. " * 30
    expected = "the quick brown cat jumps over the lazy dog. " * 30
    assert SequenceMatcher(None, actual, expected).ratio() < 0.02  # the library's reading
    sim = components(score(AnswerPrecisionMetric(), actual, expected))[1]
    length = len(actual.strip())
    assert length == 1349 and sim == pytest.approx(2 * (length - 3 * 30) / (2 * length))


def test_unicode_punctuation_separates_tokens() -> None:
    """eval-ai-library's code splits on ASCII punctuation only: 'Paris—France' is one token there, sharing
    nothing with 'France'. Here an em dash separates: {paris, france} vs {france}: overlap 1, containment 1."""
    assert components(score(AnswerPrecisionMetric(), "Paris—France", "France"))[2:] == [1.0, 1.0, 1.0]


def test_a_missing_expected_output_is_an_input_error() -> None:
    """eval-ai-library's code scores a case without expected_output 0.0 ("No expected output provided.");
    here it is invalid input, named before anything is scored. An empty string is a value."""
    with pytest.raises(InputError) as info:
        evaluate_sync([EvalTestCase(actual_output="a")], [AnswerPrecisionMetric()])
    [problem] = info.value.problems
    assert (problem.location, problem.field) == ("item 0", "expected_output")
    assert "AnswerPrecisionMetric" in problem.message
    assert score(AnswerPrecisionMetric(threshold=1.0), "", "").score == 1.0


def test_input_is_not_needed() -> None:
    """The docs page lists input as required, but no sub-score reads it: a case without one is scored."""
    [case_result] = evaluate_sync(
        [EvalTestCase(actual_output="4", expected_output="4")], [AnswerPrecisionMetric()]
    ).test_results
    assert case_result.metrics[0].score == 1.0


def test_power_p_is_the_exponent() -> None:
    """p = 1 makes the score the weighted arithmetic mean: 0.25·0 + 0.25·2/17 + 0.2 + 0.15 + 0.15."""
    result = score(AnswerPrecisionMetric(power_p=1.0), "The answer is 4.", "4")
    assert result.score == pytest.approx(0.25 * 2 / 17 + 0.5)
    assert result.evaluation_log["power_mean"] == pytest.approx(result.score)


# -- construction, registry, suites --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"numeric_tolerance_abs": -0.1}, "numeric_tolerance_abs must be a finite number >= 0"),
        ({"numeric_tolerance_rel": float("nan")}, "numeric_tolerance_rel must be a finite number >= 0"),
        ({"power_p": 0}, "power_p must be a finite number > 0"),
        ({"power_p": True}, "power_p must be a finite number > 0"),
        ({"token_stopwords": "the"}, "token_stopwords must be a list of strings"),
        ({"token_stopwords": ["a", 1]}, "token_stopwords must be strings"),
        ({"threshold": 1.5}, "threshold"),
    ],
)
def test_invalid_parameters_are_value_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AnswerPrecisionMetric(**kwargs)


def test_public_names_and_registry() -> None:
    """Importable as eval-ai-library's (eval_lib.AnswerPrecisionMetric, eval_lib.metrics.AnswerPrecisionMetric)."""
    from evaltasks.metrics import AnswerPrecisionMetric as from_metrics

    assert evaltasks.AnswerPrecisionMetric is from_metrics is METRICS["AnswerPrecisionMetric"]
    assert "AnswerPrecisionMetric" in evaltasks.__all__ and AnswerPrecisionMetric.case_kind == "single"


def test_from_a_suite_file(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"actual_output": "x", "expected_output": "x"}\n', encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: t\ndataset:\n  path: d.jsonl\nmetrics:\n"
        "  - metric: AnswerPrecisionMetric\n    threshold: 0.7\n    token_stopwords: [the]\n"
        "    numeric_tolerance_rel: 0.1\n"
        "  - metric: AnswerPrecisionMetric\n    name: bad\n    power_p: -1\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as info:
        load_suite(suite)
    [problem] = info.value.problems
    assert str(problem).startswith(f"{suite}, metrics[1]:") and "power_p" in str(problem)
    suite.write_text(suite.read_text(encoding="utf-8").split("  - metric: AnswerPrecisionMetric\n    name: bad")[0])
    [metric] = load_suite(suite).metrics
    assert isinstance(metric, AnswerPrecisionMetric)
    assert (metric.threshold, metric.token_stopwords, metric.numeric_tolerance_rel) == (0.7, ["the"], 0.1)
