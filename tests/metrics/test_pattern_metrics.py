"""RegexMatchMetric, FormatCheckMetric and JsonSchemaMetric: the exact rules of docs/metrics/deterministic.md and the examples of
eval-ai-library's documentation pages (library.eval-ai.com/metrics/deterministic/regex-match, format-check,
json-schema), expected values worked out by hand."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaltasks import EvalTestCase, FormatCheckMetric, JsonSchemaMetric, RegexMatchMetric, evaluate_sync
from evaltasks.errors import ConfigError
from evaltasks.inputs.suite import load_suite
from evaltasks.metrics import METRICS
from evaltasks.metrics.deterministic.regex_match import clock_free_length
from tests.cli_forkserver import run_cli
from tests.process_env import subprocess_env

RUNAWAY = r"(a|aa)+$"  # on "a" * n + "b": Fibonacci(n) ways to split the a's, all tried before failing
RUNAWAY_TEXT = "a" * 100 + "b"  # ~10^20 steps: never finishes within any timeout a test would use


def run(metric, output: str, **fields):
    return asyncio.run(metric.evaluate(EvalTestCase(actual_output=output, **fields)))


def scores(metric, outputs: list[str]) -> list[float | None]:
    return [r.score for r in metric.score_batch([EvalTestCase(actual_output=o) for o in outputs])]


@pytest.mark.slow
@pytest.mark.parametrize(
    "module",
    ["evaltasks", "evaltasks.metrics", "evaltasks.deterministic_metrics", "evaltasks.metrics.deterministic_metrics"],
)
def test_eval_lib_import_paths(module: str) -> None:
    import importlib

    imported = importlib.import_module(module)
    assert (imported.RegexMatchMetric, imported.FormatCheckMetric, imported.JsonSchemaMetric) == (
        RegexMatchMetric,
        FormatCheckMetric,
        JsonSchemaMetric,
    )
    assert {"RegexMatchMetric", "FormatCheckMetric", "JsonSchemaMetric"} <= set(imported.__all__)


# == RegexMatchMetric =====================================================================================
def test_regex_defaults_follow_the_docs_page() -> None:
    metric = RegexMatchMetric(pattern="x")
    assert (metric.threshold, metric.full_match, metric.timeout_s, metric.name) == (1.0, False, 1.0, "RegexMatchMetric")
    assert metric.config() == {
        "threshold": 1.0,
        "name": "RegexMatchMetric",
        "pattern": "x",
        "full_match": False,
        "timeout_s": 1.0,
    }
    assert METRICS["RegexMatchMetric"] is RegexMatchMetric


def test_regex_docs_usage_example() -> None:
    test_case = EvalTestCase(input="Generate a date", actual_output="2025-12-31")
    metric = RegexMatchMetric(threshold=1.0, pattern=r"^\d{4}-\d{2}-\d{2}$", full_match=True)
    result = asyncio.run(metric.evaluate(test_case))
    assert (result.score, result.success) == (1.0, True)
    assert result.evaluation_log == {
        "pattern": r"^\d{4}-\d{2}-\d{2}$",
        "full_match": True,
        "matched": True,
        "match_value": "2025-12-31",
    }


def test_regex_docs_scenarios() -> None:
    partial = run(
        RegexMatchMetric(pattern=r"\d+\.\d{2}", full_match=False),
        "The total price is $19.99 including tax.",
        input="What is the price?",
    )
    assert (partial.score, partial.evaluation_log["match_value"]) == (1.0, "19.99")
    assert "19.99" in partial.reason
    full = run(
        RegexMatchMetric(pattern=r"[A-Z]{3}-\d{4}", full_match=True), "ABC-1234", input="Generate a product code"
    )
    assert full.score == 1.0
    fail = run(RegexMatchMetric(pattern=r"^\d+$", full_match=True), "The answer is 42", input="Return a number")
    assert (fail.score, fail.success, fail.status) == (0.0, False, "failed")
    assert fail.evaluation_log == {"pattern": r"^\d+$", "full_match": True, "matched": False, "match_value": None}


def test_regex_search_versus_full_match() -> None:
    outputs = ["ABC-1234", "code ABC-1234 here", "abc-1234", ""]
    assert scores(RegexMatchMetric(pattern=r"[A-Z]{3}-\d{4}"), outputs) == [1.0, 1.0, 0.0, 0.0]
    assert scores(RegexMatchMetric(pattern=r"[A-Z]{3}-\d{4}", full_match=True), outputs) == [1.0, 0.0, 0.0, 0.0]
    # fullmatch, not match + "$": the second alternative is tried when the first leaves text over
    assert scores(RegexMatchMetric(pattern="a|ab", full_match=True), ["ab", "a", "abc"]) == [1.0, 1.0, 0.0]
    # "$" also matches before a final newline; fullmatch does not
    assert scores(RegexMatchMetric(pattern=r"\d+", full_match=True), ["42\n"]) == [0.0]
    assert scores(RegexMatchMetric(pattern=r"^\d+$"), ["42\n"]) == [1.0]
    # the output is not stripped
    assert scores(RegexMatchMetric(pattern=r"\d+", full_match=True), [" 42"]) == [0.0]


def test_regex_inline_flags_and_regex_package_syntax() -> None:
    assert scores(RegexMatchMetric(pattern="(?i)paris"), ["PARIS is the capital", "Lyon"]) == [1.0, 0.0]
    assert scores(RegexMatchMetric(pattern="paris"), ["PARIS"]) == [0.0]  # case-sensitive by default
    # Unicode properties are `regex` package syntax (the standard library's re rejects \p{...})
    assert scores(RegexMatchMetric(pattern=r"\p{Han}+", full_match=True), ["北京", "Beijing"]) == [1.0, 0.0]
    assert scores(RegexMatchMetric(pattern=r"^\w+$"), ["naïve", "two words"]) == [1.0, 0.0]


def test_regex_empty_match_is_a_match() -> None:
    result = run(RegexMatchMetric(pattern="^$"), "")
    assert (result.score, result.evaluation_log["matched"], result.evaluation_log["match_value"]) == (1.0, True, "")


def test_regex_long_match_value_is_cut_in_the_log() -> None:
    result = run(RegexMatchMetric(pattern="x+"), "x" * 1000)
    assert result.score == 1.0
    assert result.evaluation_log["match_value"] == "x" * 200


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("(", "pattern '(' is invalid: missing ) at position 1"),
        ("[a-", "pattern '[a-' is invalid: unterminated character set at position 3"),
        ("a{2,1}", "pattern 'a{2,1}' is invalid: min repeat greater than max repeat at position 2"),
        ("*", "pattern '*' is invalid: nothing to repeat at position 0"),
    ],
)
def test_regex_invalid_pattern_is_rejected_at_construction(pattern: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        RegexMatchMetric(pattern=pattern)
    assert str(info.value) == message


def test_regex_pattern_shows_as_written_in_reasons_and_errors() -> None:
    """Reasons (console, junit.xml, summary.md) and errors show the pattern as the suite wrote it: repr would
    double each backslash; evaluation_log keeps the raw string."""
    pattern = r"\bA-\d{4}\b"
    missed, found = (run(RegexMatchMetric(pattern=pattern), o) for o in ("no id", "id A-1234 ok"))
    assert missed.reason == "Pattern '\\bA-\\d{4}\\b' not found in the output."
    assert found.reason == "Pattern '\\bA-\\d{4}\\b' found in the output: 'A-1234'."
    assert missed.evaluation_log["pattern"] == pattern
    whole = run(RegexMatchMetric(pattern=pattern, full_match=True), "no id")
    assert whole.reason == "The whole output does not match pattern '\\bA-\\d{4}\\b'."
    with pytest.raises(ValueError) as info:
        RegexMatchMetric(pattern=r"\d{2,1}")
    assert str(info.value) == "pattern '\\d{2,1}' is invalid: min repeat greater than max repeat at position 3"
    # a character that does not print keeps the message on one line (repr); a long pattern is cut
    assert run(RegexMatchMetric(pattern="a\nb"), "x").reason == "Pattern 'a\\nb' not found in the output."
    long_reason = run(RegexMatchMetric(pattern="x" * 500), "y").reason
    assert long_reason == f"Pattern '{'x' * 115}...' not found in the output."


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({}, TypeError, "missing 1 required keyword-only argument: 'pattern'"),
        ({"pattern": None}, TypeError, "requires pattern"),
        ({"pattern": ""}, ValueError, r"^pattern must be a non-empty string \(an empty pattern matches every"),
        ({"pattern": 42}, ValueError, "^pattern must be a string"),
        ({"pattern": "x", "full_match": "yes"}, ValueError, "^full_match must be true or false"),
        ({"pattern": "x", "timeout_s": 0}, ValueError, "^timeout_s must be a positive number"),
        ({"pattern": "x", "timeout_s": -1.0}, ValueError, "^timeout_s"),
        ({"pattern": "x", "timeout_s": True}, ValueError, "^timeout_s"),
        ({"pattern": "x", "timeout_s": float("inf")}, ValueError, "^timeout_s"),
        ({"pattern": "x", "threshold": 1.5}, ValueError, "^threshold"),
    ],
)
def test_regex_bad_arguments(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        RegexMatchMetric(**kwargs)


def test_regex_runaway_match_errors_that_case_and_scores_the_others() -> None:
    metric = RegexMatchMetric(pattern=RUNAWAY, timeout_s=0.05)
    results = metric.score_batch([EvalTestCase(actual_output=o) for o in ["aaa", RUNAWAY_TEXT, "b"]])
    assert [r.status for r in results] == ["passed", "errored", "failed"]
    assert [r.score for r in results] == [1.0, None, 0.0]
    errored = results[1]
    assert errored.success is False
    assert "exceeded the timeout of 0.05 s" in errored.error and "timeout_s" in errored.error
    assert errored.reason.startswith("Errored: ")


def test_regex_no_timeout_still_matches() -> None:
    metric = RegexMatchMetric(pattern=r"\d+", timeout_s=None)
    assert metric.config()["timeout_s"] is None
    assert scores(metric, ["a1", "b"]) == [1.0, 0.0]


@pytest.mark.parametrize(
    ("pattern", "at_1s", "at_50ms"),
    [
        # (n + 1) start positions x 1 path x 7 steps (\b, 4 digits + the repeat, \b) <= 10^6 x timeout_s
        (r"\b\d{4}\b", 142_856, 7_141),
        (r"yes|no", 124_999, 6_249),  # 2 paths of 4 steps
        (r"\d+x", 99, 35),  # n + 1 paths of up to n + 2 steps: cubic, so short outputs only
        (r"(?:ab)*c", 78, 28),
        # not provable: every match keeps its clock
        (RUNAWAY, -1, -1),  # a repeat of an alternative
        (r"(a+)+b", -1, -1),
        (r"(\w+\s?)*$", -1, -1),
        (r"(a*)*", -1, -1),  # repeats of repeats
        (r"(a)\1", -1, -1),
        (r"(?=a)b", -1, -1),
        (r"(?>a+)b", -1, -1),
        (r"a++b", -1, -1),
        (r"(?:foo){e<=1}", -1, -1),  # the regex package's fuzzy matching: the standard library reads braces
        (r"\p{L}+", -1, -1),  # regex-only syntax
    ],
)
def test_regex_clock_free_length_proves_only_bounded_patterns(pattern: str, at_1s: int, at_50ms: int) -> None:
    assert (clock_free_length(pattern, 1.0), clock_free_length(pattern, 0.05)) == (at_1s, at_50ms)
    assert RegexMatchMetric(pattern=pattern)._clock_free == at_1s
    assert RegexMatchMetric(pattern=pattern, timeout_s=None)._clock_free == -1  # no clock anyway


def test_regex_results_are_the_same_with_and_without_the_clock() -> None:
    """Outputs within and beyond the clock-free length give what a metric without any timeout gives."""
    texts = [
        "In 1999 it was.",
        "1999",
        "no year",
        "",
        "x" * 200 + " 2024 " + "y" * 200,
        "ab" * 80 + "c",
        "1" * 150 + "x",
        "12345",
        "yes",
        "maybe no",
    ]
    for pattern in (r"\b\d{4}\b", r"\d+x", r"(?:ab)*c", r"yes|no"):
        for full_match in (False, True):
            cases = [EvalTestCase(actual_output=t) for t in texts]
            clocked = RegexMatchMetric(pattern=pattern, full_match=full_match)
            assert 0 < clocked._clock_free < max(map(len, texts)) or pattern in (r"\b\d{4}\b", r"yes|no")
            plain = RegexMatchMetric(pattern=pattern, full_match=full_match, timeout_s=None)
            assert [r.model_dump() for r in clocked.score_batch(cases)] == [
                r.model_dump() for r in plain.score_batch(cases)
            ]
    assert [
        r.score
        for r in RegexMatchMetric(pattern=r"\d+x").score_batch(
            [EvalTestCase(actual_output=t) for t in ("1" * 50 + "x", "1" * 150 + "x", "1" * 150)]
        )
    ] == [1.0, 1.0, 0.0]


def test_regex_verdicts_are_shared_between_equal_matches() -> None:
    results = RegexMatchMetric(pattern=r"\d").score_batch(
        [EvalTestCase(actual_output=o) for o in ["a1", "b1", "c", "d"]]
    )
    assert results[0].evaluation_log is results[1].evaluation_log
    assert results[2].evaluation_log is results[3].evaluation_log
    assert results[0].evaluation_log["match_value"] == "1"


# == FormatCheckMetric ====================================================================================
def test_format_defaults_follow_the_docs_page() -> None:
    metric = FormatCheckMetric(format_type="email")
    assert (metric.threshold, metric.name) == (1.0, "FormatCheckMetric")
    assert metric.config() == {"threshold": 1.0, "name": "FormatCheckMetric", "format_type": "email"}
    assert METRICS["FormatCheckMetric"] is FormatCheckMetric


def test_format_docs_usage_example() -> None:
    test_case = EvalTestCase(input="Generate a contact email", actual_output="support@example.com")
    result = asyncio.run(FormatCheckMetric(threshold=1.0, format_type="email").evaluate(test_case))
    assert (result.score, result.success) == (1.0, True)
    assert result.evaluation_log == {"format_type": "email", "valid": True, "failure": None}


def test_format_docs_scenarios_and_table_examples() -> None:
    assert run(FormatCheckMetric(format_type="url"), "https://docs.example.com/api/v2").score == 1.0
    fail = run(FormatCheckMetric(format_type="date"), "December 31, 2025", input="Return today's date")
    assert (fail.score, fail.success) == (0.0, False)
    assert fail.evaluation_log == {"format_type": "date", "valid": False, "failure": "is not in the form YYYY-MM-DD"}
    assert fail.reason == "The output is not a valid ISO 8601 date (YYYY-MM-DD): it is not in the form YYYY-MM-DD."
    # the "Supported Formats" table's examples
    for format_type, example in [
        ("email", "user@example.com"),
        ("phone", "+1 (555) 123-4567"),
        ("date", "2025-12-31"),
        ("url", "https://example.com"),
    ]:
        assert run(FormatCheckMetric(format_type=format_type), example).score == 1.0, format_type


@pytest.mark.parametrize(
    ("output", "failure"),
    [
        ("user@example.com", None),
        ("a@b.co", None),
        ("first.last+tag@mail.example.org", None),
        ("ü@bücher.de", None),  # internationalised: any non-space character
        ("  user@example.com\n", None),  # stripped first
        ("userexample.com", "has no '@'"),
        ("a@@example.com", "has more than one '@'"),
        ("a@b@example.com", "has more than one '@'"),
        ("@example.com", "has nothing before the '@'"),
        ("user@localhost", "has no dot in the domain after the '@'"),
        ("user@", "has no dot in the domain after the '@'"),
        ("user@example..com", "has an empty label in the domain (a leading, trailing or doubled dot)"),
        ("user@.example.com", "has an empty label in the domain (a leading, trailing or doubled dot)"),
        ("user@example.com.", "has an empty label in the domain (a leading, trailing or doubled dot)"),
        ("john doe@example.com", "contains whitespace or a control character"),
        ("Contact support@example.com", "contains whitespace or a control character"),
        ("", "is empty"),
        ("   ", "is empty"),
    ],
)
def test_format_email(output: str, failure: str | None) -> None:
    result = run(FormatCheckMetric(format_type="email"), output)
    assert result.evaluation_log["failure"] == failure
    assert result.score == (1.0 if failure is None else 0.0)


@pytest.mark.parametrize(
    ("output", "failure"),
    [
        ("https://example.com", None),
        ("http://example.com:8080/path?q=1#frag", None),
        ("ftp://files.example.com/pub/file.txt", None),
        ("s3://bucket/key", None),  # any scheme
        ("http://[::1]:8080/", None),
        ("https://user:pw@example.com", None),
        ("example.com", "has no scheme (such as https://)"),
        ("//example.com/path", "has no scheme (such as https://)"),
        ("mailto:user@example.com", "has no host after the scheme"),
        ("https://", "has no host after the scheme"),
        ("https:///path", "has no host after the scheme"),
        ("http://:80", "has no host after the scheme"),
        ("https://exa mple.com", "contains whitespace or a control character"),
        ("See https://example.com", "contains whitespace or a control character"),
        ("http://example.com:99999", "cannot be parsed as a URL (Port out of range 0-65535)"),
        ("http://example.com:port", "cannot be parsed as a URL (Port could not be cast to integer value as 'port')"),
        ("http://[::1", "cannot be parsed as a URL (Invalid IPv6 URL)"),
    ],
)
def test_format_url(output: str, failure: str | None) -> None:
    result = run(FormatCheckMetric(format_type="url"), output)
    assert result.evaluation_log["failure"] == failure
    assert result.score == (1.0 if failure is None else 0.0)


@pytest.mark.parametrize(
    ("output", "failure"),
    [
        ("+1 (555) 123-4567", None),
        ("(555) 123-4567", None),
        ("555-1234", None),  # 7 digits
        ("+44 20 7946 0958", None),
        ("+123456789012345", None),  # 15 digits: E.164's maximum
        ("123456", "has 6 digits (a phone number has 7 to 15, E.164)"),
        ("+1234567890123456", "has 16 digits (a phone number has 7 to 15, E.164)"),
        ("555.123.4567", "contains a character other than digits, spaces, '-', '(', ')' and a leading '+'"),
        ("+1 555 123 4567 ext. 2", "contains a character other than digits, spaces, '-', '(', ')' and a leading '+'"),
        ("call 5551234", "contains a character other than digits, spaces, '-', '(', ')' and a leading '+'"),
        ("1+5551234567", "has a '+' that is not at the start"),
        ("++15551234567", "has a '+' that is not at the start"),
        (
            "(555 123) 4567",
            "has misplaced parentheses or separators (parentheses enclose digits only; it starts "
            "with a digit or '(' and ends with a digit or ')')",
        ),
        (
            "(555 1234567",
            "has misplaced parentheses or separators (parentheses enclose digits only; it starts "
            "with a digit or '(' and ends with a digit or ')')",
        ),
        (
            "-5551234567",
            "has misplaced parentheses or separators (parentheses enclose digits only; it starts "
            "with a digit or '(' and ends with a digit or ')')",
        ),
        (
            "5551234567-",
            "has misplaced parentheses or separators (parentheses enclose digits only; it starts "
            "with a digit or '(' and ends with a digit or ')')",
        ),
        ("٥٥٥١٢٣٤٥٦٧", "contains a character other than digits, spaces, '-', '(', ')' and a leading '+'"),  # ASCII only
    ],
)
def test_format_phone(output: str, failure: str | None) -> None:
    result = run(FormatCheckMetric(format_type="phone"), output)
    assert result.evaluation_log["failure"] == failure
    assert result.score == (1.0 if failure is None else 0.0)


@pytest.mark.parametrize(
    ("output", "failure"),
    [
        ("2025-12-31", None),
        ("2024-02-29", None),  # leap year
        ("2000-02-29", None),  # divisible by 400
        ("2025-02-30", "is not a calendar date (day is out of range for month)"),
        ("2023-02-29", "is not a calendar date (day is out of range for month)"),
        ("1900-02-29", "is not a calendar date (day is out of range for month)"),  # divisible by 100, not 400
        ("2025-13-01", "is not a calendar date (month must be in 1..12)"),
        ("2025-00-10", "is not a calendar date (month must be in 1..12)"),
        ("0000-01-01", "is not a calendar date (year 0 is out of range)"),
        ("2025/12/31", "is not in the form YYYY-MM-DD"),  # eval-ai-library's code accepts slashes
        ("31/12/2025", "is not in the form YYYY-MM-DD"),
        ("2025-1-5", "is not in the form YYYY-MM-DD"),
        ("20251231", "is not in the form YYYY-MM-DD"),  # ISO 8601 basic format: not the documented shape
        ("2025-12-31T00:00:00Z", "is not in the form YYYY-MM-DD"),
        ("२०२५-१२-३१", "is not in the form YYYY-MM-DD"),  # Devanagari digits: ASCII only
    ],
)
def test_format_date(output: str, failure: str | None) -> None:
    result = run(FormatCheckMetric(format_type="date"), output)
    assert result.evaluation_log["failure"] == failure
    assert result.score == (1.0 if failure is None else 0.0)


SHAPE = "is not in the form YYYY-MM-DDTHH:MM:SS[.fraction] followed by Z or +HH:MM/-HH:MM"


@pytest.mark.parametrize(
    ("output", "failure"),
    [
        ("2025-12-31T23:59:59Z", None),
        ("2025-12-31t23:59:59z", None),  # RFC 3339: T and Z may be lowercase
        ("2025-12-31T18:30:00+05:30", None),
        ("2025-12-31T18:30:00-00:00", None),  # unknown local offset (RFC 3339 section 4.3)
        ("2025-12-31T18:30:00.123456789Z", None),
        ("2016-12-31T23:59:60Z", None),  # a leap second
        ("2017-01-01T05:29:60+05:30", None),  # the same leap second in India: 23:59:60 UTC
        ("2016-12-31T18:59:60-05:00", None),  # ... and in New York
        ("2025-12-31T12:00:60Z", "has second 60 (a leap second) at a time other than 23:59:60 UTC"),
        ("2025-12-31T23:59:60+01:00", "has second 60 (a leap second) at a time other than 23:59:60 UTC"),
        ("2025-12-31T23:59:59", SHAPE),  # the offset is required
        ("2025-12-31 23:59:59Z", SHAPE),
        ("2025-12-31T23:59Z", SHAPE),
        ("2025-12-31T23:59:59+0530", SHAPE),
        ("2025-12-31T23:59:59.Z", SHAPE),
        ("2025-12-31", SHAPE),
        ("2025-02-30T00:00:00Z", "has a date that does not exist (day is out of range for month)"),
        (
            "2025-12-31T24:00:00Z",
            "has a time of day out of range (hour 0-23, minute 0-59, second 0-59, or 60 for a leap second)",
        ),
        (
            "2025-12-31T23:60:00Z",
            "has a time of day out of range (hour 0-23, minute 0-59, second 0-59, or 60 for a leap second)",
        ),
        (
            "2025-12-31T23:59:61Z",
            "has a time of day out of range (hour 0-23, minute 0-59, second 0-59, or 60 for a leap second)",
        ),
        ("2025-12-31T23:59:59+24:00", "has a UTC offset out of range (hours 0-23, minutes 0-59)"),
        ("2025-12-31T23:59:59+05:60", "has a UTC offset out of range (hours 0-23, minutes 0-59)"),
    ],
)
def test_format_datetime(output: str, failure: str | None) -> None:
    result = run(FormatCheckMetric(format_type="datetime"), output)
    assert result.evaluation_log["failure"] == failure
    assert result.score == (1.0 if failure is None else 0.0)


@pytest.mark.parametrize(
    ("output", "valid"),
    [
        ("123e4567-e89b-12d3-a456-426614174000", True),
        ("123E4567-E89B-12D3-A456-426614174000", True),
        ("00000000-0000-0000-0000-000000000000", True),  # the nil UUID: any version
        ("{123e4567-e89b-12d3-a456-426614174000}", False),  # uuid.UUID accepts these three; not canonical
        ("urn:uuid:123e4567-e89b-12d3-a456-426614174000", False),
        ("123e4567e89b12d3a456426614174000", False),
        ("123e4567-e89b-12d3-a456-42661417400", False),  # 11 digits in the last group
        ("123e4567-e89b-12d3-a456-42661417400g", False),
    ],
)
def test_format_uuid(output: str, valid: bool) -> None:
    result = run(FormatCheckMetric(format_type="uuid"), output)
    assert result.score == (1.0 if valid else 0.0)
    assert result.evaluation_log["failure"] == (
        None if valid else "is not in the canonical 8-4-4-4-12 hexadecimal form"
    )


def test_format_bad_arguments() -> None:
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'format_type'"):
        FormatCheckMetric()
    with pytest.raises(TypeError, match="requires format_type"):
        FormatCheckMetric(format_type=None)
    with pytest.raises(ValueError) as info:
        FormatCheckMetric(format_type="ipv4")
    assert str(info.value) == (
        "format_type must be one of ['email', 'phone', 'date', 'url', 'datetime', 'uuid'], got 'ipv4'"
    )
    with pytest.raises(ValueError, match="^format_type must be one of"):
        FormatCheckMetric(format_type="Email")
    with pytest.raises(ValueError, match="^threshold"):
        FormatCheckMetric(format_type="email", threshold=-0.1)


def test_format_verdicts_are_shared() -> None:
    results = FormatCheckMetric(format_type="email").score_batch(
        [EvalTestCase(actual_output=o) for o in ["a@b.co", "c@d.org", "no", "nope"]]
    )
    assert [r.score for r in results] == [1.0, 1.0, 0.0, 0.0]
    assert results[0].evaluation_log is results[1].evaluation_log
    assert results[2].evaluation_log is results[3].evaluation_log


# == JsonSchemaMetric =====================================================================================
USER_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["name", "age", "email"],
}


def test_json_defaults_follow_the_docs_page() -> None:
    metric = JsonSchemaMetric(schema={"type": "object"})
    assert (metric.threshold, metric.name) == (1.0, "JsonSchemaMetric")
    assert metric.config() == {"threshold": 1.0, "name": "JsonSchemaMetric", "schema": {"type": "object"}}
    assert METRICS["JsonSchemaMetric"] is JsonSchemaMetric


def test_json_docs_usage_example() -> None:
    test_case = EvalTestCase(
        input="Return user info as JSON", actual_output='{"name": "Alice", "age": 30, "email": "alice@example.com"}'
    )
    result = asyncio.run(JsonSchemaMetric(threshold=1.0, schema=USER_SCHEMA).evaluate(test_case))
    assert (result.score, result.success) == (1.0, True)
    assert result.evaluation_log == {"valid_json": True, "fenced": False, "errors": [], "error_count": 0}
    assert result.reason == "The output is JSON that matches the schema."


def test_json_docs_scenarios() -> None:
    colors = JsonSchemaMetric(schema={"type": "array", "items": {"type": "string"}, "minItems": 1})
    assert run(colors, '["red", "green", "blue"]', input="Return a list of colors").score == 1.0
    assert run(colors, "[]").score == 0.0  # minItems
    not_json = run(JsonSchemaMetric(schema={"type": "object"}), "This is not JSON", input="Return JSON")
    assert (not_json.score, not_json.success) == (0.0, False)
    assert not_json.reason == "The output is not valid JSON: Expecting value at line 1, column 1."
    assert not_json.evaluation_log == {
        "valid_json": False,
        "fenced": False,
        "errors": ["Expecting value at line 1, column 1"],
        "error_count": 0,
    }
    # the page's schema-violation scenario (its text is cut after `"required": ["name", "age"`): a missing field
    violation = run(JsonSchemaMetric(schema={"type": "object", "required": ["name", "age"]}), '{"name": "Bob"}')
    assert violation.score == 0.0
    assert violation.reason == (
        "The output is JSON that does not match the schema (1 error): $: 'age' is a required property."
    )


def test_json_format_keywords_are_annotations() -> None:
    # as eval-ai-library (jsonschema.validate without a format checker) and JSON Schema 2020-12's default
    output = '{"name": "Alice", "age": 30, "email": "not an email"}'
    assert run(JsonSchemaMetric(schema=USER_SCHEMA), output).score == 1.0


def test_json_reason_names_the_path_the_best_error_and_the_count() -> None:
    result = run(JsonSchemaMetric(schema=USER_SCHEMA), '{"name": 7, "age": "x", "email": "a@b.co"}')
    assert result.score == 0.0
    log = result.evaluation_log
    assert log["error_count"] == 2
    assert sorted(log["errors"]) == ["$.age: 'x' is not of type 'integer'", "$.name: 7 is not of type 'string'"]
    assert result.reason.startswith("The output is JSON that does not match the schema (2 errors): $.")
    nested = run(
        JsonSchemaMetric(
            schema={"type": "array", "items": {"type": "object", "properties": {"age": {"type": "integer"}}}}
        ),
        '[{"age": 1}, {"age": "x"}]',
    )
    assert nested.reason == (
        "The output is JSON that does not match the schema (1 error): $[1].age: 'x' is not of type 'integer'."
    )


def test_json_errors_are_bounded() -> None:
    metric = JsonSchemaMetric(schema={"type": "array", "items": {"type": "string"}})
    result = run(metric, json.dumps(list(range(2000))))
    log = result.evaluation_log
    assert log["error_count"] == 1001  # counted up to 1000, then "more than"
    assert len(log["errors"]) == 10
    assert log["errors"][0] == "$[0]: 0 is not of type 'string'"
    assert "(more than 1000 errors)" in result.reason


@pytest.mark.parametrize(
    "output",
    [
        '```json\n{"age": 3}\n```',
        '```\n{"age": 3}\n```',
        '```JSON\n{"age": 3}\n```',
        '  \n```json\n{"age": 3}\n```\n\n',
        '```json\r\n{"age": 3}\r\n```',
        '```json\n{\n  "age": 3\n}```',
    ],
)
def test_json_one_code_fence_is_removed(output: str) -> None:
    result = run(JsonSchemaMetric(schema={"type": "object", "required": ["age"]}), output)
    assert result.score == 1.0
    assert result.evaluation_log["fenced"] is True
    assert result.reason == "The output (inside the code fence) is JSON that matches the schema."


@pytest.mark.parametrize(
    "output",
    [
        'Here it is:\n```json\n{"age": 3}\n```',  # text around the fence
        '```json\n{"age": 3}\n```\n```json\n{"age": 4}\n```',  # two fences
        '```json {"age": 3}```',  # the fence's content must start on its own line
        '``json\n{"age": 3}\n``',
        '\u00a0```json\n{"age": 3}\n```',  # a no-break space is not JSON whitespace
    ],
)
def test_json_other_wrappings_are_not_json(output: str) -> None:
    result = run(JsonSchemaMetric(schema={"type": "object"}), output)
    assert result.score == 0.0
    assert result.evaluation_log["valid_json"] is False


def test_json_invalid_json_says_where() -> None:
    result = run(JsonSchemaMetric(schema={"type": "object"}), '{"a": 1,\n "b": }')
    assert result.reason == "The output is not valid JSON: Expecting value at line 2, column 7."
    fenced = run(JsonSchemaMetric(schema={"type": "object"}), '```json\n{"a": 1\n```')
    assert fenced.reason == (
        "The output (inside the code fence) is not valid JSON: Expecting ',' delimiter at line 2, column 1."
    )
    assert fenced.evaluation_log["fenced"] is True
    extra = run(JsonSchemaMetric(schema={"type": "object"}), "{} {}")
    assert extra.reason == "The output is not valid JSON: Extra data at line 1, column 4."


@pytest.mark.parametrize("output", ["", "   ", "hello", "\n\n  hello", "  \t}", "é", "\u00a0{}", "'single'", "None"])
def test_json_fast_rejection_reports_what_the_parser_would(output: str) -> None:
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads(output)
    expected = f"{info.value.msg} at line {info.value.lineno}, column {info.value.colno}"
    result = run(JsonSchemaMetric(schema={}), output)
    assert result.evaluation_log["errors"] == [expected]
    assert result.score == 0.0


@pytest.mark.parametrize("output", ["[NaN]", "[Infinity]", '{"x": -Infinity}', "-Infinity"])
def test_json_nan_and_infinity_are_not_json(output: str) -> None:
    result = run(JsonSchemaMetric(schema={}), output)  # Python's json.loads accepts all four
    assert result.score == 0.0
    assert result.evaluation_log["valid_json"] is False
    assert "is not valid JSON (RFC 8259 has no NaN or Infinity)" in result.reason
    # a bare NaN or Infinity cannot start a JSON value: rejected at its first character
    assert (
        run(JsonSchemaMetric(schema={}), "NaN").reason
        == "The output is not valid JSON: Expecting value at line 1, column 1."
    )


def test_json_scalars_and_whitespace() -> None:
    metric = JsonSchemaMetric(schema={"type": "integer"})
    assert scores(metric, ["42", " \n42\t", "4.5", '"42"', "true", "null"]) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_json_schema_draft_follows_dollar_schema() -> None:
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "number",
        "maximum": 5,
        "exclusiveMaximum": True,
    }
    assert scores(JsonSchemaMetric(schema=draft4), ["4.9", "5"]) == [1.0, 0.0]
    # the same schema is invalid in draft 2020-12, where exclusiveMaximum is a number
    with pytest.raises(ValueError, match=r"^schema is invalid at \$\.exclusiveMaximum: True is not of type 'number'$"):
        JsonSchemaMetric(schema={k: v for k, v in draft4.items() if k != "$schema"})
    # 2020-12 by default: prefixItems is known
    tuple_schema = {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}
    assert scores(JsonSchemaMetric(schema=tuple_schema), ['["a", 1]', '["a", 1, 2]', '[1, "a"]']) == [1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({}, TypeError, "JsonSchemaMetric.__init__() missing 1 required keyword-only argument: 'schema'"),
        ({"schema": None}, TypeError, "JsonSchemaMetric requires schema (a JSON Schema object)"),
        ({"schema": "object"}, ValueError, "schema must be a JSON Schema object (a mapping), got 'object'"),
        ({"schema": True}, ValueError, "schema must be a JSON Schema object (a mapping), got True"),
        (
            {"schema": {"type": "integr"}},
            ValueError,
            "schema is invalid at $.type: 'integr' is not valid under any of the given schemas",
        ),
        (
            {"schema": {"properties": {"age": {"minimum": "3"}}}},
            ValueError,
            "schema is invalid at $.properties.age.minimum: '3' is not of type 'number'",
        ),
    ],
)
def test_json_bad_schema_is_rejected_at_construction(kwargs: dict, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        JsonSchemaMetric(**kwargs)
    assert str(info.value) == message


def test_json_schema_is_copied() -> None:
    schema = {"type": "object"}
    metric = JsonSchemaMetric(schema=schema)
    schema["type"] = "array"
    assert scores(metric, ["{}"]) == [1.0]


@pytest.mark.parametrize(
    "metric",
    [
        RegexMatchMetric(pattern=r"\d+", full_match=True, timeout_s=0.5),
        FormatCheckMetric(format_type="phone"),
        JsonSchemaMetric(
            schema={"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": ["a"]}
        ),
    ],
    ids=["regex", "format", "json"],
)
def test_metrics_survive_pickling(metric) -> None:
    # task runners such as prefect-dask pickle the metric into their workers
    import pickle

    copy = pickle.loads(pickle.dumps(metric))
    assert copy.cache_key() == metric.cache_key()
    outputs = ['{"a": 1}', "12", "+1 (555) 123-4567", "{}"]
    assert scores(copy, outputs) == scores(metric, outputs)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"$schema": "http://example.com/nope", "type": "object"},
            "schema's $schema 'http://example.com/nope' names no known JSON Schema draft; known: "
            "http://json-schema.org/draft-03/schema#, http://json-schema.org/draft-04/schema#, "
            "http://json-schema.org/draft-06/schema#, http://json-schema.org/draft-07/schema#, "
            "https://json-schema.org/draft/2019-09/schema, https://json-schema.org/draft/2020-12/schema",
        ),
        (
            {"$schema": 7},
            "schema's $schema 7 names no known JSON Schema draft; known: "
            "http://json-schema.org/draft-03/schema#, http://json-schema.org/draft-04/schema#, "
            "http://json-schema.org/draft-06/schema#, http://json-schema.org/draft-07/schema#, "
            "https://json-schema.org/draft/2019-09/schema, https://json-schema.org/draft/2020-12/schema",
        ),
        ({"$ref": "#/$defs/missing"}, "schema has a $ref that points nowhere in the schema: '#/$defs/missing'"),
        (
            {"type": "object", "properties": {"a": {"prefixItems": [{"$ref": "#/definitions/x"}]}}},
            "schema has a $ref that points nowhere in the schema: '#/definitions/x'",
        ),
        (
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "definitions": {"x": {}},
                "properties": {"a": {"$ref": "#/definitions/y"}},
            },
            "schema has a $ref that points nowhere in the schema: '#/definitions/y'",
        ),
        ({"$ref": "#nowhere"}, "schema has a $ref that points nowhere in the schema: '#nowhere'"),
    ],
)
def test_json_unknown_draft_or_local_ref_that_points_nowhere_is_rejected_at_construction(
    schema: dict, message: str
) -> None:
    with pytest.raises(ValueError) as info:
        JsonSchemaMetric(schema=schema)
    assert str(info.value) == message


def test_json_local_refs_that_resolve_are_accepted() -> None:
    metric = JsonSchemaMetric(
        schema={
            "$defs": {"name": {"type": "string"}, "a/b": {"type": "integer"}, "h": {"$anchor": "here"}},
            "type": "object",
            "properties": {
                "n": {"$ref": "#/$defs/name"},
                "i": {"$ref": "#/$defs/a~1b"},
                "self": {"$ref": "#"},
                "anchored": {"$ref": "#here"},
            },
            "const_is_data": {"const": {"$ref": "#/nowhere"}},  # data, not a reference
            "items": {"$id": "https://example.com/other", "$ref": "#/elsewhere"},  # another base URI: per case
        }
    )
    assert scores(metric, ['{"n": "x", "i": 1}', '{"n": 1}']) == [1.0, 0.0]
    draft7 = JsonSchemaMetric(
        schema={
            "$schema": "http://json-schema.org/draft-07/schema",
            "definitions": {"x": {}},
            "properties": {"a": {"$ref": "#/definitions/x"}},
        }
    )
    assert scores(draft7, ['{"a": 1}']) == [1.0]


def test_json_too_deep_or_unresolvable_ref_errors_that_case_only() -> None:
    metric = JsonSchemaMetric(schema={"type": "array"})
    results = metric.score_batch([EvalTestCase(actual_output=o) for o in ["[" * 100_000 + "]" * 100_000, "[]"]])
    assert [r.status for r in results] == ["errored", "passed"]
    assert "nested too deeply" in results[0].error
    remote = JsonSchemaMetric(schema={"$ref": "https://example.invalid/schema.json"})
    [result] = remote.score_batch([EvalTestCase(actual_output="{}")])
    assert result.status == "errored"
    assert "cannot be resolved" in result.error


# == all three: suite files, the CLI and evaluate_sync ====================================================
DATASET = "dataset:\n  path: d.jsonl\n"


def _suite_problems(tmp_path: Path, metrics: str) -> list[tuple[str, str, str]]:
    path = tmp_path / "suite.yaml"
    path.write_text(f"name: s\n{DATASET}metrics:\n{metrics}", encoding="utf-8")
    (tmp_path / "d.jsonl").write_text('{"actual_output": "x"}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    return [(p.location, p.field, p.message) for p in info.value.problems]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "  - metric: RegexMatchMetric\n    pattern: '('\n",
            ("metrics[0]", "pattern", "'(' is invalid: missing ) at position 1"),
        ),
        ("  - metric: RegexMatchMetric\n    full_match: true\n", ("metrics[0]", "pattern", "is required")),
        (
            "  - metric: RegexMatchMetric\n    pattern: ''\n",
            ("metrics[0]", "pattern", "must be a non-empty string (an empty pattern matches every output)"),
        ),
        (
            "  - metric: RegexMatchMetric\n    pattern: x\n    timeout_s: 0\n",
            ("metrics[0]", "timeout_s", "must be a positive number of seconds or null (no limit), got 0"),
        ),
        (
            "  - metric: FormatCheckMetric\n    format_type: ipv4\n",
            (
                "metrics[0]",
                "format_type",
                "must be one of ['email', 'phone', 'date', 'url', 'datetime', 'uuid'], got 'ipv4'",
            ),
        ),
        ("  - metric: FormatCheckMetric\n", ("metrics[0]", "format_type", "is required")),
        (
            "  - metric: JsonSchemaMetric\n    schema: {type: integr}\n",
            ("metrics[0]", "schema", "is invalid at $.type: 'integr' is not valid under any of the given schemas"),
        ),
        (
            "  - metric: JsonSchemaMetric\n    schema: [1]\n",
            ("metrics[0]", "schema", "must be a JSON Schema object (a mapping), got [1]"),
        ),
        ("  - metric: JsonSchemaMetric\n", ("metrics[0]", "schema", "is required")),
    ],
)
def test_suite_file_errors_are_located(tmp_path: Path, entry: str, expected: tuple[str, str, str]) -> None:
    assert _suite_problems(tmp_path, entry) == [expected]


def test_suite_file_builds_all_three(tmp_path: Path) -> None:
    path = tmp_path / "suite.yaml"
    path.write_text(
        f"name: s\n{DATASET}metrics:\n"
        "  - metric: RegexMatchMetric\n    pattern: '^\\d+$'\n    full_match: true\n"
        "  - metric: FormatCheckMetric\n    format_type: uuid\n"
        "  - metric: JsonSchemaMetric\n    schema:\n      type: object\n      required: [answer]\n",
        encoding="utf-8",
    )
    (tmp_path / "d.jsonl").write_text('{"actual_output": "x"}\n', encoding="utf-8")
    regex_metric, format_metric, json_metric = load_suite(path).metrics
    assert regex_metric.config()["pattern"] == r"^\d+$" and regex_metric.full_match is True
    assert format_metric.format_type == "uuid"
    assert json_metric.schema == {"type": "object", "required": ["answer"]}


@pytest.mark.slow
def test_cli_invalid_pattern_exits_2_without_traceback(tmp_path: Path) -> None:
    (tmp_path / "suite.yaml").write_text(
        f"name: s\n{DATASET}metrics:\n  - metric: RegexMatchMetric\n    pattern: '[0-9'\n", encoding="utf-8"
    )
    (tmp_path / "d.jsonl").write_text('{"actual_output": "x"}\n', encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "evaltasks.cli", "run", "suite.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "metrics[0]" in proc.stderr and "pattern" in proc.stderr
    assert "'[0-9' is invalid: unterminated character set at position 4" in proc.stderr


def test_through_evaluate_sync() -> None:
    outputs = ['{"id": "123e4567-e89b-12d3-a456-426614174000"}', '```json\n{"id": 7}\n```', RUNAWAY_TEXT]
    metrics = [
        RegexMatchMetric(pattern=RUNAWAY, timeout_s=0.05, name="runaway"),
        RegexMatchMetric(pattern=r"[0-9a-f]{8}-", name="has-uuid"),
        FormatCheckMetric(format_type="uuid"),
        JsonSchemaMetric(schema={"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
    ]
    result = evaluate_sync([EvalTestCase(actual_output=o) for o in outputs], metrics)
    table = [[(m.name, m.status) for m in case.metrics] for case in result.test_results]
    assert table == [
        [
            ("runaway", "failed"),
            ("has-uuid", "passed"),
            ("FormatCheckMetric", "failed"),
            ("JsonSchemaMetric", "passed"),
        ],
        [
            ("runaway", "failed"),
            ("has-uuid", "failed"),
            ("FormatCheckMetric", "failed"),
            ("JsonSchemaMetric", "failed"),
        ],
        [
            ("runaway", "errored"),
            ("has-uuid", "failed"),
            ("FormatCheckMetric", "failed"),
            ("JsonSchemaMetric", "failed"),
        ],
    ]
    assert result.test_results[1].metrics[3].reason == (
        "The output (inside the code fence) is JSON that does not match the schema (1 error): "
        "$.id: 7 is not of type 'string'."
    )


def test_cli_run_through_prefect_scores_and_errors_per_case(tmp_path: Path, prefect_api_url: str) -> None:
    """The three metrics in a real run (Prefect engine, reports): the runaway case is errored, the rest scored."""
    rows = [
        {"id": "json", "actual_output": '```json\n{"id": "123e4567-e89b-12d3-a456-426614174000"}\n```'},
        {"id": "uuid", "actual_output": "123e4567-e89b-12d3-a456-426614174000"},
        {"id": "runaway", "actual_output": RUNAWAY_TEXT},
    ]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        f"name: patterns\n{DATASET}metrics:\n"
        f"  - metric: RegexMatchMetric\n    pattern: '{RUNAWAY}'\n    timeout_s: 0.05\n    threshold: 0.0\n"
        "  - metric: FormatCheckMetric\n    format_type: uuid\n    threshold: 0.0\n"
        "  - metric: JsonSchemaMetric\n    threshold: 0.0\n    schema:\n      type: object\n"
        "      properties: {id: {type: string, format: uuid}}\n      required: [id]\n",
        encoding="utf-8",
    )
    proc = run_cli(
        "run",
        "suite.yaml",
        "--output-dir",
        "out",
        cwd=tmp_path,
        env=subprocess_env(tmp_path / "prefect-home", prefect_api_url),
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr  # the errored case fails the gate
    assert "Traceback" not in proc.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    table = {case["id"]: [(m["name"], m["status"], m["score"]) for m in case["metrics"]] for case in results["cases"]}
    assert table == {
        "json": [
            ("RegexMatchMetric", "passed", 0.0),
            ("FormatCheckMetric", "passed", 0.0),
            ("JsonSchemaMetric", "passed", 1.0),
        ],
        "uuid": [
            ("RegexMatchMetric", "passed", 0.0),
            ("FormatCheckMetric", "passed", 1.0),
            ("JsonSchemaMetric", "passed", 0.0),
        ],
        "runaway": [
            ("RegexMatchMetric", "errored", None),
            ("FormatCheckMetric", "passed", 0.0),
            ("JsonSchemaMetric", "passed", 0.0),
        ],
    }
    [runaway] = [c for c in results["cases"] if c["id"] == "runaway"]
    assert "exceeded the timeout of 0.05 s" in runaway["metrics"][0]["error"]


def test_format_check_strips_unicode_white_space_only() -> None:
    """The output is stripped of Unicode White_Space (docs/metrics/deterministic.md#text-comparison): U+3000 and U+00A0 go, the
    information separator U+001F (which str.strip() would also remove) stays and fails the email shape."""
    from evaltasks import EvalTestCase, FormatCheckMetric

    outputs = ["\u3000a@b.co\u00a0", "a@b.co\x1f", "\x1ca@b.co"]
    scores = [
        r.score
        for r in FormatCheckMetric(format_type="email").score_batch([EvalTestCase(actual_output=o) for o in outputs])
    ]
    assert scores == [1.0, 0.0, 0.0]
