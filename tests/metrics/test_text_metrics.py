"""The text-comparison metrics: ExactMatch, Contains, StartsWith, EndsWith, NonEmpty.

Expected values are written by hand from eval-ai-library's documentation pages
(library.eval-ai.com/metrics/deterministic/<name>) and the exact rules of docs/metrics/deterministic.md#text-comparison (Unicode White_Space, NFC,
case folding), never computed with the code under test.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import random
import unicodedata
from pathlib import Path

import pytest
import regex

import evaltasks
from evaltasks import (
    ContainsMetric,
    EndsWithMetric,
    EvalTestCase,
    ExactMatchMetric,
    InputError,
    NonEmptyMetric,
    StartsWithMetric,
    evaluate_sync,
)
from evaltasks.errors import ConfigError
from evaltasks.inputs.suite import load_suite
from evaltasks.metrics import METRICS
from evaltasks.metrics.text import WHITE_SPACE, comparable
from tests.cli_forkserver import run_cli

# Unicode White_Space characters beyond ASCII, and look-alikes that are not White_Space.
NBSP, IDEOGRAPHIC_SPACE, LINE_SEPARATOR, ZWSP, FILE_SEPARATOR = "\u00a0", "\u3000", "\u2028", "\u200b", "\x1c"
E_ACUTE, E_DECOMPOSED = "\u00e9", "e\u0301"


def run(metric, output: str, **fields):
    return asyncio.run(metric.evaluate(EvalTestCase(actual_output=output, **fields)))


# -- the shared normalisation ------------------------------------------------------------------------------
def test_white_space_is_exactly_unicode_white_space() -> None:
    expected = set(regex.findall(r"\p{White_Space}", "".join(map(chr, range(0x110000)))))
    assert set(WHITE_SPACE) == expected and len(WHITE_SPACE) == 25
    assert ZWSP not in WHITE_SPACE and FILE_SEPARATOR not in WHITE_SPACE  # str.strip() would strip U+001C


def test_comparable_rules() -> None:
    assert comparable(f"{NBSP}{IDEOGRAPHIC_SPACE} Paris{LINE_SEPARATOR}\t", strip=True) == "Paris"
    assert comparable(f"{ZWSP}Paris{ZWSP}", strip=True) == f"{ZWSP}Paris{ZWSP}"
    assert comparable(f"{FILE_SEPARATOR}Paris", strip=True) == f"{FILE_SEPARATOR}Paris"
    assert comparable(" Paris ") == " Paris "  # strip is off by default
    assert comparable(f"Caf{E_DECOMPOSED}") == f"Caf{E_ACUTE}"
    assert comparable("STRASSE", case_sensitive=False) == comparable("straße", case_sensitive=False) == "strasse"
    assert comparable("Straße") == "Straße"
    assert comparable("\u212a") == "K"  # KELVIN SIGN: NFC makes it ASCII


def test_comparable_fast_path_equals_the_full_rule() -> None:
    """ASCII takes a shortcut (no NFC, lower() for casefold); on every kind of text the result is the rule's."""
    rng = random.Random(7)
    alphabet = [chr(c) for c in range(0x80)] + [
        E_ACUTE,
        "\u0301",
        "ß",
        "İ",
        "\u212a",
        NBSP,
        IDEOGRAPHIC_SPACE,
        "\u01f0",
        "Σ",
        "ς",
        "ﬁ",
        FILE_SEPARATOR,
        ZWSP,
    ]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
        for case_sensitive in (True, False):
            for strip in (True, False):
                rule = text.strip(WHITE_SPACE) if strip else text
                rule = unicodedata.normalize("NFC", rule)
                if not case_sensitive:
                    rule = unicodedata.normalize("NFC", rule.casefold())
                assert comparable(text, case_sensitive=case_sensitive, strip=strip) == rule, repr(text)


# -- ExactMatchMetric --------------------------------------------------------------------------------------
def test_exact_match_defaults_follow_the_docs_page() -> None:
    metric = ExactMatchMetric()
    assert (metric.threshold, metric.case_sensitive, metric.strip_whitespace, metric.name) == (
        1.0,
        True,
        True,
        "ExactMatchMetric",
    )
    assert metric.config() == {
        "threshold": 1.0,
        "name": "ExactMatchMetric",
        "case_sensitive": True,
        "strip_whitespace": True,
    }


def test_exact_match_docs_examples() -> None:
    usage = ExactMatchMetric(threshold=1.0, case_sensitive=False)
    result = run(usage, "Paris", input="What is the capital of France?", expected_output="Paris")
    assert (result.score, result.success) == (1.0, True)
    assert run(usage, "hola", expected_output="Hola").score == 1.0  # "Pass (1.0)": case_sensitive=False
    fail = run(usage, "Hola, which means hello in Spanish", expected_output="Hola")
    assert (fail.score, fail.success) == (0.0, False)
    assert run(ExactMatchMetric(), "hola", expected_output="Hola").score == 0.0  # case-sensitive by default


@pytest.mark.parametrize(
    ("output", "expected", "kwargs", "score"),
    [
        (f"{NBSP}Paris{IDEOGRAPHIC_SPACE}{LINE_SEPARATOR}", "Paris", {}, 1.0),
        ("\n\tParis  ", f" Paris{NBSP}", {}, 1.0),
        (f"{ZWSP}Paris", "Paris", {}, 0.0),  # U+200B is not whitespace
        (f"{FILE_SEPARATOR}Paris", "Paris", {}, 0.0),  # nor is U+001C (str.strip() would strip it)
        (" Paris", "Paris", {"strip_whitespace": False}, 0.0),
        (" Paris", " Paris", {"strip_whitespace": False}, 1.0),
        (f"Caf{E_DECOMPOSED}", f"Caf{E_ACUTE}", {}, 1.0),
        ("STRASSE", "straße", {"case_sensitive": False}, 1.0),
        ("STRASSE", "straße", {}, 0.0),
        ("ΟΔΥΣΣΕΥΣ", "Οδυσσευς", {"case_sensitive": False}, 1.0),  # final sigma folds to σ
        ("PARIS", "paris", {"case_sensitive": False}, 1.0),
        ("", "", {}, 1.0),
        ("   ", "", {}, 1.0),
        ("x", "", {}, 0.0),
    ],
)
def test_exact_match_rules(output: str, expected: str, kwargs: dict, score: float) -> None:
    result = run(ExactMatchMetric(**kwargs), output, expected_output=expected)
    assert result.score == score
    assert result.evaluation_log == {
        "matched": score == 1.0,
        "case_sensitive": kwargs.get("case_sensitive", True),
        "strip_whitespace": kwargs.get("strip_whitespace", True),
    }


def test_exact_match_needs_expected_output() -> None:
    metric = ExactMatchMetric()
    assert metric.validate_case(EvalTestCase(actual_output="a")) == [("expected_output", "is missing")]
    assert metric.validate_case(EvalTestCase(actual_output="a", expected_output="")) == []
    with pytest.raises(ValueError, match="expected_output"):
        run(metric, "a")
    with pytest.raises(InputError) as info:
        evaluate_sync([EvalTestCase(actual_output="a", expected_output="a"), EvalTestCase(actual_output="b")], [metric])
    [problem] = info.value.problems
    assert (problem.location, problem.field) == ("item 1", "expected_output")
    assert "is missing" in problem.message and "ExactMatchMetric" in problem.message


# -- ContainsMetric ----------------------------------------------------------------------------------------
def test_contains_defaults_follow_the_docs_page() -> None:
    metric = ContainsMetric(keywords=["a"])
    assert (metric.threshold, metric.mode, metric.case_sensitive, metric.keywords, metric.name) == (
        1.0,
        "any",
        True,
        ["a"],
        "ContainsMetric",
    )
    assert metric.config() == {
        "threshold": 1.0,
        "name": "ContainsMetric",
        "keywords": ["a"],
        "mode": "any",
        "case_sensitive": True,
    }


def test_contains_docs_examples() -> None:
    usage = ContainsMetric(threshold=1.0, keywords=["red", "blue", "yellow"], mode="all", case_sensitive=False)
    result = run(usage, "The primary colors are red, blue, and yellow.", input="List the primary colors")
    assert (result.score, result.success) == (1.0, True)
    assert result.evaluation_log == {"found": ["red", "blue", "yellow"], "missing": [], "mode": "all"}

    any_ = run(ContainsMetric(keywords=["Python", "JavaScript"], mode="any"), "Python is a popular language.")
    assert (any_.score, any_.success) == (1.0, True)
    assert any_.evaluation_log == {"found": ["Python"], "missing": ["JavaScript"], "mode": "any"}

    none = run(
        ContainsMetric(keywords=["error", "fail", "exception"], mode="none"), "Operation completed successfully."
    )
    assert (none.score, none.success) == (1.0, True)

    # The page's "Fail (0.0)": here mode "all" scores the share found (2 of 3) and fails the threshold 1.0.
    fail = run(ContainsMetric(keywords=["red", "blue", "yellow"], mode="all"), "The primary colors are red and blue.")
    assert fail.score == pytest.approx(2 / 3) and fail.success is False
    assert fail.evaluation_log["missing"] == ["yellow"]
    assert "Found 2/3 keywords (mode=all)" in fail.reason and "'yellow'" in fail.reason


@pytest.mark.parametrize(
    ("keywords", "mode", "output", "score"),
    [
        (["a", "b"], "any", "xyz", 0.0),
        (["a", "b", "c", "d"], "all", "a c", 0.5),
        (["a", "b", "c", "d"], "all", "", 0.0),
        (["error", "fail"], "none", "it failed", 0.0),
        (["python"], "any", "Python", 0.0),  # case-sensitive by default (the docs page; eval_lib's code says False)
    ],
)
def test_contains_modes(keywords: list[str], mode: str, output: str, score: float) -> None:
    assert run(ContainsMetric(keywords=keywords, mode=mode), output).score == score


def test_contains_unicode_rules() -> None:
    folded = ContainsMetric(keywords=["straße"], case_sensitive=False)
    assert run(folded, "DIE STRASSE IST LANG").score == 1.0
    assert run(ContainsMetric(keywords=["straße"]), "DIE STRASSE IST LANG").score == 0.0
    assert run(ContainsMetric(keywords=[E_ACUTE]), f"caf{E_DECOMPOSED} au lait").score == 1.0
    assert run(ContainsMetric(keywords=[E_DECOMPOSED]), f"caf{E_ACUTE}").score == 1.0
    assert run(ContainsMetric(keywords=["e"]), f"caf{E_DECOMPOSED}").score == 0.0  # é is not e once composed
    assert run(ContainsMetric(keywords=["паРИж"], case_sensitive=False), "Столица — ПАРИЖ.").score == 1.0


def test_contains_duplicate_keywords_count_once_after_normalisation() -> None:
    metric = ContainsMetric(keywords=["Red", "red", "RED", "blue"], mode="all", case_sensitive=False)
    result = run(metric, "a red car")
    assert result.score == 0.5  # two distinct keywords: "Red" (first spelling) found, "blue" missing
    assert result.evaluation_log == {"found": ["Red"], "missing": ["blue"], "mode": "all"}
    assert metric.keywords == ["Red", "red", "RED", "blue"]  # config keeps what was given
    exact = ContainsMetric(keywords=[E_ACUTE, E_DECOMPOSED, "x"], mode="all")  # the same text once NFC'd
    assert run(exact, E_ACUTE).score == 0.5
    assert run(ContainsMetric(keywords=["Red", "red"], mode="all"), "red").score == 0.5  # case-sensitive: two


def test_contains_reason_is_bounded() -> None:
    keywords = [f"keyword-{i:04d}-" + "x" * 50 for i in range(1000)]
    result = run(ContainsMetric(keywords=keywords, mode="all"), keywords[0] + keywords[999])
    assert result.score == pytest.approx(2 / 1000)
    assert len(result.reason) < 400
    assert len(result.evaluation_log["found"]) == 2 and len(result.evaluation_log["missing"]) == 998


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"keywords": None}, "keywords is required"),
        ({"keywords": "error"}, "keywords must be a list"),  # a bare string is not iterated per character
        ({"keywords": []}, "keywords must not be empty"),
        ({"keywords": ["a", ""]}, r"keywords must be non-empty strings; item\(s\) \[1\]"),
        ({"keywords": ["a", 3]}, r"item\(s\) \[1\]"),
        ({"keywords": {"a": 1}}, "keywords must be a list"),
        ({"keywords": ["a"], "mode": "some"}, "mode must be one of"),
        ({"keywords": ["a"], "mode": "ALL"}, "mode must be one of"),
        ({"keywords": ["a"], "case_sensitive": "no"}, "case_sensitive must be true or false"),
        ({"keywords": ["a"], "threshold": 1.5}, "threshold"),
    ],
)
def test_contains_invalid_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ContainsMetric(**kwargs)


@pytest.mark.parametrize(
    ("cls", "label"), [(ContainsMetric, "keywords"), (StartsWithMetric, "prefix"), (EndsWithMetric, "suffix")]
)
def test_required_argument_has_no_default(cls, label: str) -> None:
    """Required arguments have no default in the signature (so the suite JSON Schema lists them as required):
    Python names the missing one; the documented keyword calls work."""
    assert inspect.signature(cls).parameters[label].default is inspect.Parameter.empty
    with pytest.raises(TypeError, match=f"missing 1 required keyword-only argument: '{label}'"):
        cls()
    with pytest.raises(TypeError, match=f"missing 1 required keyword-only argument: '{label}'"):
        cls(threshold=0.5)
    assert cls(0.5, **{label: ["a"] if label == "keywords" else "a"}).threshold == 0.5


# -- StartsWithMetric / EndsWithMetric ---------------------------------------------------------------------
def test_affix_defaults_follow_the_docs_pages() -> None:
    starts, ends = StartsWithMetric(prefix="a"), EndsWithMetric(suffix="b")
    assert (starts.threshold, starts.case_sensitive, starts.prefix, starts.name) == (1.0, True, "a", "StartsWithMetric")
    assert (ends.threshold, ends.case_sensitive, ends.suffix, ends.name) == (1.0, True, "b", "EndsWithMetric")
    assert starts.config() == {"threshold": 1.0, "name": "StartsWithMetric", "prefix": "a", "case_sensitive": True}
    assert ends.config() == {"threshold": 1.0, "name": "EndsWithMetric", "suffix": "b", "case_sensitive": True}
    assert starts.cache_key() != StartsWithMetric(prefix="b").cache_key()


def test_starts_with_docs_examples() -> None:
    usage = StartsWithMetric(threshold=1.0, prefix="Dear", case_sensitive=False)
    result = run(usage, "Dear Sir or Madam, I am writing to inquire about...", input="Write a formal greeting")
    assert (result.score, result.success) == (1.0, True)
    assert result.evaluation_log == {"prefix": "Dear", "case_sensitive": False, "matched": True}
    assert result.reason == "Output starts with 'Dear'."
    assert run(StartsWithMetric(prefix="```json", case_sensitive=True), '```json\n{"key": "value"}\n```').score == 1.0
    fail = run(StartsWithMetric(prefix="Yes", case_sensitive=True), "Of course! I'd be happy to help.")
    assert (fail.score, fail.success) == (0.0, False)
    assert fail.reason == "Output does not start with 'Yes'."


def test_ends_with_docs_examples() -> None:
    usage = EndsWithMetric(threshold=1.0, suffix=".")
    result = run(usage, "The quick brown fox jumps over the lazy dog.", input="Write a sentence ending with a period")
    assert (result.score, result.success) == (1.0, True)
    assert result.evaluation_log == {"suffix": ".", "case_sensitive": True, "matched": True}
    assert run(EndsWithMetric(suffix="```", case_sensitive=True), '```python\nprint("hello")\n```').score == 1.0
    fail = run(EndsWithMetric(suffix=".", case_sensitive=True), "The answer is 42")
    assert (fail.score, fail.success) == (0.0, False)
    assert fail.reason == "Output does not end with '.'."


@pytest.mark.parametrize(
    ("metric", "output", "score"),
    [
        (StartsWithMetric(prefix="Dear"), " Dear Sir", 0.0),  # the output is not stripped
        (EndsWithMetric(suffix="."), "Done.\n", 0.0),
        (StartsWithMetric(prefix="dear"), "Dear Sir", 0.0),  # case-sensitive by default
        (StartsWithMetric(prefix="straße", case_sensitive=False), "STRASSE 5", 1.0),
        (StartsWithMetric(prefix="STRASSE", case_sensitive=False), "straße 5", 1.0),
        (StartsWithMetric(prefix="ss", case_sensitive=False), "ßa", 1.0),  # "ß" folds to "ss"
        (EndsWithMetric(suffix="ß", case_sensitive=False), "XSS", 1.0),
        (EndsWithMetric(suffix="straße", case_sensitive=False), "HAUPTSTRASSE", 1.0),
        (EndsWithMetric(suffix="s", case_sensitive=False), "Fuß", 1.0),  # folded "fuss" ends with "s"
        (StartsWithMetric(prefix=E_DECOMPOSED), f"{E_ACUTE}t{E_ACUTE}", 1.0),
        (StartsWithMetric(prefix="e"), f"{E_DECOMPOSED}t{E_ACUTE}", 0.0),  # NFC: the output starts with é
        (EndsWithMetric(suffix=E_ACUTE), f"caf{E_DECOMPOSED}", 1.0),
        (EndsWithMetric(suffix="e"), f"caf{E_DECOMPOSED}", 0.0),
        (StartsWithMetric(prefix="Ответ", case_sensitive=False), "ОТВЕТ: да", 1.0),
        (EndsWithMetric(suffix="abc"), "bc", 0.0),
        (StartsWithMetric(prefix=" "), " x", 1.0),
    ],
)
def test_affix_rules(metric, output: str, score: float) -> None:
    assert run(metric, output).score == score


@pytest.mark.parametrize("cls", [StartsWithMetric, EndsWithMetric])
def test_affix_invalid_parameters(cls) -> None:
    label = "prefix" if cls is StartsWithMetric else "suffix"
    with pytest.raises(ValueError, match=f"{label} is required"):
        cls(**{label: None})
    with pytest.raises(ValueError, match=f"{label} must be a non-empty string"):
        cls(**{label: ""})  # always true: a configuration mistake
    with pytest.raises(ValueError, match=f"{label} must be a non-empty string"):
        cls(**{label: ["a"]})
    with pytest.raises(ValueError, match="case_sensitive"):
        cls(**{label: "a", "case_sensitive": 1})


# -- NonEmptyMetric ----------------------------------------------------------------------------------------
def test_non_empty_docs_examples_and_defaults() -> None:
    metric = NonEmptyMetric()
    assert (metric.threshold, metric.name, metric.config()) == (
        1.0,
        "NonEmptyMetric",
        {"threshold": 1.0, "name": "NonEmptyMetric"},
    )
    usage = run(NonEmptyMetric(threshold=1.0), "Hello, world!", input="Say something")
    assert (usage.score, usage.success, usage.reason) == (1.0, True, "Output is non-empty.")
    assert usage.evaluation_log == {"non_empty": True}
    assert run(metric, "Here is my response.").score == 1.0
    empty = run(metric, "")
    assert (empty.score, empty.success, empty.reason) == (0.0, False, "Output is empty or whitespace-only.")
    assert run(metric, "   \n\t  ").score == 0.0
    with pytest.raises(TypeError):
        NonEmptyMetric(min_length=1)  # the page: no parameters but threshold


@pytest.mark.parametrize(
    ("output", "score"),
    [
        (f"{NBSP}{IDEOGRAPHIC_SPACE}{LINE_SEPARATOR}\u2029\u0085\u1680\u202f\u205f", 0.0),
        ("".join(chr(c) for c in range(0x2000, 0x200B)), 0.0),
        (ZWSP, 1.0),  # zero-width space is not White_Space
        (FILE_SEPARATOR, 1.0),  # nor is U+001C, which str.strip() strips
        (" . ", 1.0),
    ],
)
def test_non_empty_uses_unicode_white_space(output: str, score: float) -> None:
    assert run(NonEmptyMetric(), output).score == score


# -- batches, registry, suite files, the CLI ---------------------------------------------------------------
def test_batches_agree_with_the_rules_case_by_case() -> None:
    """One batch of mixed ASCII and non-ASCII outputs (memoised verdicts, fast paths) gives, case by case, what
    the rule written out here gives."""
    rng = random.Random(11)
    pieces = ["the", "The", "THE", " ", NBSP, "ß", "SS", E_ACUTE, E_DECOMPOSED, "e", "x", ".", "\n", "Ж", "ж"]
    outputs = ["".join(rng.choice(pieces) for _ in range(rng.randrange(0, 6))) for _ in range(2000)]
    expected = ["".join(rng.choice(pieces) for _ in range(rng.randrange(0, 3))) for _ in range(2000)]
    cases = [EvalTestCase(actual_output=o, expected_output=e) for o, e in zip(outputs, expected)]

    def rule(text: str, case_sensitive: bool) -> str:
        text = unicodedata.normalize("NFC", text)
        return text if case_sensitive else unicodedata.normalize("NFC", text.casefold())

    for case_sensitive in (True, False):
        exact = ExactMatchMetric(case_sensitive=case_sensitive).score_batch(cases)
        assert [r.score for r in exact] == [
            float(rule(o.strip(WHITE_SPACE), case_sensitive) == rule(e.strip(WHITE_SPACE), case_sensitive))
            for o, e in zip(outputs, expected)
        ]
        keywords = ["the", "ss", E_ACUTE, "ж"]
        contains = ContainsMetric(keywords=keywords, mode="all", case_sensitive=case_sensitive).score_batch(cases)
        needles = list(dict.fromkeys(rule(k, case_sensitive) for k in keywords))
        assert [r.score for r in contains] == [
            sum(n in rule(o, case_sensitive) for n in needles) / len(needles) for o in outputs
        ]
        starts = StartsWithMetric(prefix="ThE", case_sensitive=case_sensitive).score_batch(cases)
        assert [r.score for r in starts] == [
            float(rule(o, case_sensitive).startswith(rule("ThE", case_sensitive))) for o in outputs
        ]
        ends = EndsWithMetric(suffix="ß", case_sensitive=case_sensitive).score_batch(cases)
        assert [r.score for r in ends] == [
            float(rule(o, case_sensitive).endswith(rule("ß", case_sensitive))) for o in outputs
        ]
    non_empty = NonEmptyMetric().score_batch(cases)
    assert [r.score for r in non_empty] == [float(bool(o.strip(WHITE_SPACE))) for o in outputs]


def test_registered_and_importable_at_eval_lib_paths() -> None:
    from evaltasks import deterministic_metrics as root_alias
    from evaltasks.metrics import deterministic_metrics as metrics_alias

    for cls in (ExactMatchMetric, ContainsMetric, StartsWithMetric, EndsWithMetric, NonEmptyMetric):
        assert METRICS[cls.__name__] is cls
        assert getattr(evaltasks, cls.__name__) is cls and cls.__name__ in evaltasks.__all__
        assert getattr(root_alias, cls.__name__) is cls and getattr(metrics_alias, cls.__name__) is cls
        assert cls.version == "1"


def test_through_evaluate_sync() -> None:
    cases = [
        EvalTestCase(actual_output="Paris.", expected_output="Paris."),
        EvalTestCase(actual_output="  ", expected_output="London"),
    ]
    metrics = [
        ExactMatchMetric(),
        ContainsMetric(keywords=["Paris"]),
        StartsWithMetric(prefix="P"),
        EndsWithMetric(suffix="."),
        NonEmptyMetric(),
    ]
    result = evaluate_sync(cases, metrics)
    assert [[m.score for m in c.metrics] for c in result.test_results] == [
        [1.0, 1.0, 1.0, 1.0, 1.0],
        [0.0, 0.0, 0.0, 0.0, 0.0],
    ]
    assert [c.success for c in result.test_results] == [True, False]


def test_suite_config_errors_name_the_entry_and_the_argument(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"actual_output": "x"}\n', encoding="utf-8")
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: t\ndataset:\n  path: d.jsonl\nmetrics:\n"
        "  - metric: ContainsMetric\n    mode: all\n"
        "  - metric: ContainsMetric\n    name: bare\n    keywords: error\n"
        "  - metric: StartsWithMetric\n    prefix: ''\n"
        "  - metric: EndsWithMetric\n"
        "  - metric: ContainsMetric\n    name: modes\n    keywords: [a]\n    mode: some\n"
        "  - metric: ExactMatchMetric\n    case_sensitive: 'no'\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as info:
        load_suite(suite)
    rendered = [str(p) for p in info.value.problems]
    assert rendered == [
        f"{suite}, metrics[0]: field 'keywords' is required",
        f"{suite}, metrics[1]: field 'keywords' must be a list of strings, got 'error'",
        f"{suite}, metrics[2]: field 'prefix' must be a non-empty string, got ''",
        f"{suite}, metrics[3]: field 'suffix' is required",
        f"{suite}, metrics[4]: field 'mode' must be one of ['any', 'all', 'none'], got 'some'",
        f"{suite}, metrics[5]: field 'case_sensitive' must be true or false, got 'no'",
    ]


@pytest.mark.slow
def test_cli_row_without_expected_output_exits_2_naming_row_and_field(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text(
        '{"actual_output": "a", "expected_output": "a"}\n{"actual_output": "b"}\n', encoding="utf-8"
    )
    (tmp_path / "suite.yaml").write_text(
        "name: t\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: ExactMatchMetric\n  - metric: NonEmptyMetric\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), HF_HUB_OFFLINE="1", DO_NOT_TRACK="1")
    proc = run_cli("run", "suite.yaml", "--output-dir", "out", cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "d.jsonl, line 2: field 'expected_output' is missing (needed by ExactMatchMetric)" in proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "prefect-home").exists()  # nothing ran


def test_cli_run_writes_the_five_metrics(tmp_path: Path, prefect_api_url: str) -> None:
    """A real flow run (the session's Prefect server): results.json holds each metric's score, reason and log."""
    rows = [
        {"id": "a", "actual_output": "Yes: Paris.", "expected_output": "yes: paris."},
        {"id": "b", "actual_output": f"{NBSP}", "expected_output": ""},
    ]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: t\ndataset:\n  path: d.jsonl\nmetrics:\n"
        "  - metric: ExactMatchMetric\n    case_sensitive: false\n"
        "  - metric: ContainsMetric\n    keywords: [paris, Paris, London]\n    mode: none\n"
        "  - metric: StartsWithMetric\n    prefix: 'yes:'\n    case_sensitive: false\n"
        "  - metric: EndsWithMetric\n    suffix: '.'\n"
        "  - metric: NonEmptyMetric\n"
        "gate:\n  min_pass_rate: 0\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k not in ("EVALTASKS_INDEX_DIR",)}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        HF_HUB_OFFLINE="1",
        DO_NOT_TRACK="1",
        PREFECT_API_URL=prefect_api_url,
    )
    proc = run_cli("run", "suite.yaml", "--output-dir", "out", cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    by_case = {c["id"]: {m["name"]: m for m in c["metrics"]} for c in results["cases"]}
    assert {n: m["score"] for n, m in by_case["a"].items()} == {
        "ExactMatchMetric": 1.0,
        "ContainsMetric": 0.0,
        "StartsWithMetric": 1.0,
        "EndsWithMetric": 1.0,
        "NonEmptyMetric": 1.0,
    }
    assert {n: m["score"] for n, m in by_case["b"].items()} == {
        "ExactMatchMetric": 1.0,
        "ContainsMetric": 1.0,
        "StartsWithMetric": 0.0,
        "EndsWithMetric": 0.0,
        "NonEmptyMetric": 0.0,
    }
    assert by_case["a"]["ContainsMetric"]["evaluation_log"] == {
        "found": ["Paris"],
        "missing": ["paris", "London"],
        "mode": "none",
    }
