"""The three reports (docs/reports.md#outputs): results.json, junit.xml, summary.md.

A small suite is planned and evaluated with the real engine (bundled all-MiniLM-L6-v2, real FAISS index)
and its reports written by :func:`evaltasks.reports.outcome.finish_run`; every expected value is computed here
independently (sentence-transformers + numpy for ReferenceMatch, hand counts for LengthCheck).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from evaltasks import __version__
from evaltasks.engine.evaluate import evaluate_sync
from evaltasks.engine.lifecycle import RunReport
from evaltasks.engine.run import plan_run
from evaltasks.engine.summary import summarize
from evaltasks.reports import write_reports
from evaltasks.reports.outcome import finish_run
from evaltasks.results import EvaluationResult, MetricResult, TestCaseResult

TOL = 1e-6
RM_THRESHOLD = 0.5
MAX_WORDS = 10
INJECTION = (
    "<img src=x> [link](http://x) ![i](http://x) @someone | cell \x07\x1b[31m "
    "one two three four five six seven eight nine ten eleven"
)
CASES = [
    {
        "id": "paris",
        "question": "What is the capital of France?",
        "answer": "The capital of France is Paris.",
        "refs": ["Paris is the capital of France.", "France's capital city is Paris."],
        "words": 6,
    },
    {
        "id": "boil",
        "question": "At what temperature does water boil?",
        "answer": "Water boils at 100 degrees Celsius at sea level.",
        "refs": ["At sea level water boils at 100 °C (212 °F).", "Paris is the capital of France."],
        "words": 9,
    },
    {
        "id": "inject",
        "question": "<script>alert(1)</script> Say hi",
        "answer": INJECTION,
        "refs": ["Hello there, nice to meet you."],
        "words": None,
    },  # > 10 words: the 11-word tail alone
    {"id": "empty", "question": "Anything?", "answer": "", "refs": ["Something."], "words": 0},
    {
        "id": "offtopic",
        "question": "How fast is light?",
        "answer": "Our company was founded in 2020.",
        "refs": ["Light travels at about 299,792 km per second."],
        "words": 6,
    },
]
CASE_KEYS = {"id", "input", "actual_output", "status", "success", "metrics"}
METRIC_KEYS = {"name", "status", "score", "threshold", "success", "reason", "evaluation_log"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Plan, evaluate and report the suite once for the module; return its directory."""
    root = tmp_path_factory.mktemp("reports")
    with open(root / "answers.jsonl", "w", encoding="utf-8") as handle:
        for case in CASES:
            row = {"id": case["id"], "question": case["question"], "answer": case["answer"], "refs": case["refs"]}
            handle.write(json.dumps(row) + "\n")
    (root / "suite.yaml").write_text(
        "name: reports-test\n"
        "dataset:\n  path: answers.jsonl\n  fields: {id: id, input: question, actual_output: answer, references: refs}\n"
        f"metrics:\n  - metric: ReferenceMatchMetric\n    threshold: {RM_THRESHOLD}\n    embedding_provider: local\n"
        f"  - metric: LengthCheckMetric\n    name: Short\n    max_length: {MAX_WORDS}\n    unit: words\n"
        "gate:\n  min_pass_rate: 0.4\n",
        encoding="utf-8",
    )
    plan = plan_run(root / "suite.yaml")
    result = evaluate_sync(plan.dataset.cases, plan.suite.metrics, index_dir=root / "index", ids=plan.dataset.ids)
    finish_run(plan, result, root / "out", time.time())
    return root


@pytest.fixture(scope="module")
def expected(run_dir: Path, st_model) -> dict:
    """Per case: the ReferenceMatch score (clamped cosine, max) and the expected statuses."""
    out: dict[str, dict] = {}
    for case in CASES:
        if case["answer"].strip():
            vectors = st_model.encode([case["answer"], *case["refs"]], convert_to_numpy=True).astype(np.float64)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            sims = np.clip(vectors[1:] @ vectors[0], 0.0, 1.0)
            score = float(sims.max())
            assert abs(score - RM_THRESHOLD) > 1e-3, "test data too close to the threshold"
        else:
            sims, score = np.zeros(0), 0.0
        rm_passed = score >= RM_THRESHOLD
        short_passed = case["words"] is not None and case["words"] <= MAX_WORDS
        out[case["id"]] = {
            "rm_score": score,
            "rm_sims": sims,
            "rm": "passed" if rm_passed else "failed",
            "short": "passed" if short_passed else "failed",
            "status": "passed" if rm_passed and short_passed else "failed",
        }
    return out


@pytest.fixture(scope="module")
def results(run_dir: Path) -> dict:
    return json.loads((run_dir / "out" / "results.json").read_text(encoding="utf-8"))


# --- results.json ---------------------------------------------------------------------------------------


def test_results_json_header(run_dir: Path, results: dict) -> None:
    for key in (
        "schema_version",
        "evaltasks_version",
        "suite",
        "suite_sha256",
        "dataset_sha256",
        "passed",
        "summary",
        "cases",
        "embedding_models",
    ):
        assert key in results, key
    assert results["schema_version"] == 4
    assert results["evaltasks_version"] == __version__
    assert results["suite"] == "reports-test"
    assert results["suite_sha256"] == hashlib.sha256((run_dir / "suite.yaml").read_bytes()).hexdigest()
    assert results["dataset_sha256"] == hashlib.sha256((run_dir / "answers.jsonl").read_bytes()).hexdigest()
    [model] = results["embedding_models"]
    assert model["model"] == "all-MiniLM-L6-v2" and model["provider"] == "local"
    assert re.fullmatch(r"[0-9a-f]{16}", model["fingerprint"])
    assert model["dimensions"] == 384


def test_results_json_summary(results: dict, expected: dict) -> None:
    summary = results["summary"]
    statuses = [expected[c["id"]]["status"] for c in CASES]
    passed = statuses.count("passed")
    assert passed == 2  # paris and boil; inject, empty and offtopic fail
    assert summary["cases"] == 5
    assert summary["passed_cases"] == passed
    assert summary["failed_cases"] == 5 - passed
    assert summary["errored_cases"] == summary["skipped_cases"] == 0
    assert summary["pass_rate"] == pytest.approx(passed / 5, abs=TOL)
    assert results["passed"] is True  # 0.4 >= gate 0.4 (inclusive)

    rm = summary["metrics"]["ReferenceMatchMetric"]
    rm_scores = [expected[c["id"]]["rm_score"] for c in CASES]
    assert rm["mean_score"] == pytest.approx(sum(rm_scores) / 5, abs=TOL)
    assert rm["pass_rate"] == pytest.approx([expected[c["id"]]["rm"] for c in CASES].count("passed") / 5, abs=TOL)
    assert rm["threshold"] == RM_THRESHOLD
    short = summary["metrics"]["Short"]
    short_passed = [expected[c["id"]]["short"] for c in CASES].count("passed")
    assert short_passed == 4
    assert short["mean_score"] == pytest.approx(short_passed / 5, abs=TOL)
    assert short["pass_rate"] == pytest.approx(short_passed / 5, abs=TOL)
    assert short["threshold"] == 1.0
    assert list(summary["metrics"]) == ["ReferenceMatchMetric", "Short"]

    # An empty output is scored 0.0 without embeddings, so its references ("Something.") are not embedded.
    unique_refs = {r for c in CASES if c["answer"].strip() for r in c["refs"]}
    assert len(unique_refs) == 5  # "Paris is the capital of France." appears twice
    assert summary["embeddings"]["references_computed"] == len(unique_refs)
    assert summary["embeddings"]["references_reused"] == 0
    assert summary["embeddings"]["outputs_computed"] == 4  # the empty output is never embedded


def test_results_json_cases(results: dict, expected: dict) -> None:
    assert [c["id"] for c in results["cases"]] == [c["id"] for c in CASES]
    for case, given in zip(results["cases"], CASES):
        want = expected[given["id"]]
        assert set(case) >= CASE_KEYS
        assert case["input"] == given["question"]
        assert case["actual_output"] == given["answer"]  # raw, control characters included
        assert case["status"] == want["status"]
        assert case["success"] is (want["status"] == "passed")
        rm, short = case["metrics"]
        for metric in (rm, short):
            assert set(metric) >= METRIC_KEYS
            assert metric["success"] is (metric["status"] == "passed")
        assert rm["name"] == "ReferenceMatchMetric" and short["name"] == "Short"
        assert abs(rm["score"] - want["rm_score"]) <= TOL
        assert rm["status"] == want["rm"]
        assert rm["threshold"] == RM_THRESHOLD
        assert rm["evaluation_log"]["reference_count"] == len(given["refs"])
        assert np.allclose(rm["evaluation_log"]["similarities"], want["rm_sims"], atol=2e-6)
        assert short["status"] == want["short"]
        assert short["score"] == (1.0 if want["short"] == "passed" else 0.0)
        if given["words"] is not None:
            assert short["evaluation_log"]["length"] == given["words"]
        else:
            assert short["evaluation_log"]["length"] > MAX_WORDS
    empty_rm = results["cases"][3]["metrics"][0]
    assert empty_rm["score"] == 0.0 and "empty" in empty_rm["reason"]


# --- junit.xml -----------------------------------------------------------------------------------------------


def test_junit_xml(run_dir: Path, results: dict) -> None:
    root = ET.parse(run_dir / "out" / "junit.xml").getroot()
    assert root.tag == "testsuites"
    [suite] = root.findall("testsuite")
    testcases = suite.findall("testcase")
    assert len(testcases) == 5 * 2
    expected_names = [f"{c['id']} :: {m}" for c in CASES for m in ("ReferenceMatchMetric", "Short")]
    assert [tc.get("name") for tc in testcases] == expected_names

    failed = [(c, m) for c in results["cases"] for m in c["metrics"] if m["status"] == "failed"]
    assert len(failed) == 3 + 1  # ReferenceMatch: inject, empty, offtopic; Short: inject
    for element in (root, suite):
        assert element.get("tests") == "10"
        assert element.get("failures") == str(len(failed))
        assert element.get("errors") == "0" and element.get("skipped") == "0"
    reasons = {f"{c['id']} :: {m['name']}": m["reason"] for c, m in failed}
    for tc in testcases:
        failures = tc.findall("failure")
        if tc.get("name") in reasons:
            [failure] = failures
            assert failure.get("message") == reasons[tc.get("name")]
            assert reasons[tc.get("name")] in failure.text
        else:
            assert list(tc) == []
    inject = next(tc for tc in testcases if tc.get("name") == "inject :: Short")
    text = inject.find("failure").text
    assert "<img src=x>" in text  # escaped in the file, intact once parsed
    assert "\x07" not in text and "\x1b" not in text  # XML 1.0 forbids them: removed


# --- summary.md -------------------------------------------------------------------------------------------


def test_summary_md_escapes_untrusted_text(run_dir: Path) -> None:
    md = (run_dir / "out" / "summary.md").read_text(encoding="utf-8")
    for raw in ("[link](", "](http", "![i]", "\x07", "\x1b"):
        assert raw not in md, raw
    assert "@someone" not in md  # a zero-width space after @ keeps the mention from notifying
    # Rendered as GitHub would (CommonMark + tables, markdown-it): no tag, image, link or mention survives.
    from markdown_it import MarkdownIt

    html = MarkdownIt().enable("table").render(md)
    for tag in ("<img", "<script", "<a ", "<em>", "<code>"):
        assert tag not in html, tag
    assert "&lt;img src=x&gt;" in html  # the injected output is shown as text
    assert "[link](http:\u200b//x)" in html  # shown as text; no renderer autolinks "http:​//"
    # Every table row keeps its column count
    for line in md.splitlines():
        if line.startswith("| "):
            assert len(re.findall(r"(?<!\\)\|", line)) == 8, line
    worst = [line for line in md.splitlines() if line.startswith("- **inject** · ")]
    assert len(worst) == 2  # both of its failing metrics are listed
    assert "\\| cell" in md  # the output's "|" is escaped


def _wilson(k: int, n: int) -> str:
    """The 95 % Wilson interval of k/n in points, as summary.md prints it (statsmodels, not the product's scipy)."""
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    return f"{100 * low:.1f}–{100 * high:.1f}"


def test_summary_md_content(run_dir: Path, results: dict, expected: dict) -> None:
    md = (run_dir / "out" / "summary.md").read_text(encoding="utf-8")
    assert md.startswith("# evaltasks: reports\\-test\n")
    assert md.splitlines()[2] == "✅ **PASSED**: pass rate 40.00% (2 of 5 cases), gate 40.00%"
    assert f"Cases: 2 passed, 3 failed, 0 errored, 0 skipped; pass rate 95% CI {_wilson(2, 5)}%." in md
    mean = sum(expected[c["id"]]["rm_score"] for c in CASES) / 5
    rm_row = next(line for line in md.splitlines() if line.startswith("| ReferenceMatchMetric | "))
    # the pass rate and the mean, each with its interval under it (Wilson, bootstrap)
    assert rm_row.startswith(f"| ReferenceMatchMetric | 40.00%<br>{_wilson(2, 5)} | {mean:.4f}<br>")
    assert rm_row.endswith(" | 0.5 | 3 | 0 | 0 |")
    short_row = next(line for line in md.splitlines() if line.startswith("| Short | "))
    assert short_row.startswith(f"| Short | 80.00%<br>{_wilson(4, 5)} | 0.8000<br>")
    assert short_row.endswith(" | 1.0 | 1 | 0 | 0 |")
    assert "Embeddings: 5 references computed, 0 reused from the index; 4 outputs computed" in md
    for case_id in ("paris", "boil"):  # passing cases are not among the worst
        assert f"**{case_id}**" not in md


# --- errored and skipped statuses (built directly: no provider fails offline) -------------------------------


def test_reports_with_errored_and_skipped_results(tmp_path: Path) -> None:
    cases = [
        TestCaseResult.from_metrics(
            "a",
            "q1",
            "out1",
            [
                MetricResult.scored("M", 0.9, 0.5, "fine", {}),
                MetricResult.errored("N", 0.5, "provider down"),
            ],
        ),
        TestCaseResult.from_metrics(
            "b",
            "q2",
            "out2",
            [
                MetricResult.scored("M", 0.2, 0.5, "low", {}),
                MetricResult.skipped("N", 0.5, "no credentials on fork"),
            ],
        ),
        TestCaseResult.from_metrics(
            "c",
            "q3",
            "out3",
            [
                MetricResult.skipped("M", 0.5, "skip"),
                MetricResult.skipped("N", 0.5, "skip"),
            ],
        ),
    ]
    assert [c.status for c in cases] == ["errored", "failed", "skipped"]
    summary = summarize(cases, {"M": 0.5, "N": 0.5})
    assert (summary.passed_cases, summary.failed_cases, summary.errored_cases, summary.skipped_cases) == (0, 1, 1, 1)
    assert summary.pass_rate == 0.0
    assert summary.metrics["M"].mean_score == pytest.approx((0.9 + 0.2) / 2, abs=TOL)
    assert summary.metrics["N"].mean_score is None
    result = EvaluationResult(test_results=cases, summary=summary)
    header = {"schema_version": 1, "suite": "s"}
    paths = write_reports(tmp_path, result, header, passed=False, min_pass_rate=1.0)

    data = json.loads(paths["results.json"].read_text(encoding="utf-8"))
    assert [c["status"] for c in data["cases"]] == ["errored", "failed", "skipped"]
    assert data["cases"][0]["metrics"][1]["error"] == "provider down"
    assert data["cases"][0]["metrics"][1]["score"] is None

    root = ET.parse(paths["junit.xml"]).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("6", "1", "1", "3")
    by_name = {tc.get("name"): tc for tc in root.iter("testcase")}
    assert by_name["a :: N"].find("error").get("message") == "Errored: provider down"
    assert by_name["b :: N"].find("skipped").get("message") == "no credentials on fork"
    assert by_name["b :: M"].find("failure").get("message") == "low"
    assert list(by_name["a :: M"]) == []

    md = paths["summary.md"].read_text(encoding="utf-8")
    # the skipped case is not evaluated
    assert "❌ **FAILED**: pass rate 0.00% (0 of 2 cases), gate 100.00%\n" in md
    assert f"Cases: 0 passed, 1 failed, 1 errored, 1 skipped; pass rate 95% CI {_wilson(0, 2)}%." in md
    assert f"| N | 0.00%<br>{_wilson(0, 1)} | n/a | 0.5 | 0 | 1 | 2 |" in md


def test_results_shared_between_cases_are_immutable_and_serialise_identically(tmp_path: Path) -> None:
    """Deterministic metrics hand one result object to every case with the same verdict (docs/python-api.md#python-api;
    MetricResult's docstring): it cannot be changed through one case, and results.json writes it in full for
    each case."""
    import pydantic

    from evaltasks import EvalTestCase
    from evaltasks.metrics import ContainsMetric, LengthCheckMetric, NonEmptyMetric, StartsWithMetric

    outputs = ["No, never.", "Yes, it is.", "No, never.", "  ", "Yes, it is."]
    metrics = [
        NonEmptyMetric(),
        ContainsMetric(keywords=["never"]),
        StartsWithMetric(prefix="Yes"),
        LengthCheckMetric(max_length=10),
    ]
    result = evaluate_sync(
        [EvalTestCase(actual_output=o, input=f"q{i}") for i, o in enumerate(outputs)],
        metrics,
        ids=[f"c{i}" for i in range(len(outputs))],
    )
    by_case = [case.metrics for case in result.test_results]
    # cases 0 and 2, 1 and 4 have the same output: every metric gave them the very same object
    for a, b in ((0, 2), (1, 4)):
        assert all(x is y for x, y in zip(by_case[a], by_case[b]))
    shared = by_case[0][0]  # NonEmpty's "non-empty" verdict, shared by cases 0, 1, 2 and 4
    assert all(by_case[i][0] is shared for i in (1, 2, 4)) and by_case[3][0] is not shared
    for field, value in (("score", 0.0), ("reason", "changed"), ("status", "failed"), ("evaluation_log", {})):
        with pytest.raises(pydantic.ValidationError, match="frozen"):
            setattr(shared, field, value)
    assert (shared.score, shared.status, shared.reason, shared.evaluation_log) == (
        1.0,
        "passed",
        "Output is non-empty.",
        {"non_empty": True},
    )

    paths = write_reports(tmp_path, result, {"schema_version": 1, "suite": "s"}, passed=False, min_pass_rate=1.0)
    data = json.loads(paths["results.json"].read_text(encoding="utf-8"))
    written = {c["id"]: c["metrics"] for c in data["cases"]}
    assert [written[f"c{i}"][0] for i in (0, 1, 2, 4)] == [
        {
            "name": "NonEmptyMetric",
            "score": 1.0,
            "threshold": 1.0,
            "success": True,
            "reason": "Output is non-empty.",
            "evaluation_cost": 0.0,
            "evaluation_log": {"non_empty": True},
            "status": "passed",
            "error": None,
        }
    ] * 4
    assert written["c3"][0]["score"] == 0.0 and written["c3"][0]["evaluation_log"] == {"non_empty": False}
    assert written["c0"] == written["c2"] and written["c1"] == written["c4"]
    assert written["c0"][1]["evaluation_log"] == {"found": ["never"], "missing": [], "mode": "any"}
    assert written["c1"][1]["evaluation_log"] == {"found": [], "missing": ["never"], "mode": "any"}
    assert written["c1"][3]["evaluation_log"] == {"length": 11, "unit": "chars", "min_length": 0, "max_length": 10}


# --- the console summary table -------------------------------------------------------------------------------


def test_console_table_keeps_metric_names_whole_at_80_columns(results: dict) -> None:
    import io

    from rich.console import Console

    from evaltasks.reports.console import print_summary
    from evaltasks.results import EvaluationSummary

    buffer = io.StringIO()
    summary = EvaluationSummary.model_validate(results["summary"])
    print_summary(RunReport.of(summary, passed=True, min_pass_rate=0.4), console=Console(file=buffer, width=80))
    text = buffer.getvalue()
    # a pipe (not a terminal): the verdict and the counts with the pass rate stay one line each, whatever their length
    assert all(len(line) <= 80 for line in text.splitlines() if not line.startswith(("PASSED: ", "cases: ")))
    assert " ReferenceMatchMetric " in text and " Short " in text
    assert "…" not in text
    # the longest built-in names (24 characters) with every number whole: no "0.74…" or "100.0…"
    long_names = dict(results["summary"])
    metrics = list(long_names["metrics"].values())
    long_names["metrics"] = {
        name: metrics[i % len(metrics)]
        for i, name in enumerate(["SemanticSimilarityMetric", "LanguageDetectionMetric", "RestrictedRefusalMetric"])
    }
    buffer = io.StringIO()
    print_summary(
        RunReport.of(EvaluationSummary.model_validate(long_names), passed=True, min_pass_rate=0.4),
        console=Console(file=buffer, width=80),
    )
    text = buffer.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines() if not line.startswith(("PASSED: ", "cases: ")))
    assert "…" not in text
    for name, m in long_names["metrics"].items():
        row = next(line for line in text.splitlines() if line.strip().startswith(name + " "))
        cells = row.split()
        assert cells[1] == f"{m['mean_score']:.4f}" and cells[2] == f"{m['pass_rate']:.2%}", row
        assert cells[4:] == [str(m["passed"]), str(m["failed"]), str(m["errored"]), str(m["skipped"])], row
    # a name longer than the line folds onto more lines; an unround threshold is shown short: the numbers whole
    long_names["metrics"] = {"m" * 83: {**metrics[0], "threshold": 0.123456789}}
    buffer = io.StringIO()
    print_summary(
        RunReport.of(EvaluationSummary.model_validate(long_names), passed=True, min_pass_rate=0.4),
        console=Console(file=buffer, width=80),
    )
    lines = buffer.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines if not line.startswith(("PASSED: ", "cases: ")))
    assert "…" not in "".join(lines)
    row = next(line for line in lines if line.strip().startswith("mmm"))
    assert row.split()[1:] == [
        f"{metrics[0]['mean_score']:.4f}",
        f"{metrics[0]['pass_rate']:.2%}",
        "0.1235",
        str(metrics[0]["passed"]),
        str(metrics[0]["failed"]),
        str(metrics[0]["errored"]),
        str(metrics[0]["skipped"]),
    ]
    assert (
        "".join(line.strip() for line in lines if set(line.strip()) == {"m"} or line.strip().startswith("mmm")).count(
            "m"
        )
        >= 83
    )
    assert "cases: 5  passed: 2  failed: 3  errored: 0  skipped: 0  pass rate: 40.00%" in text
    assert "GATE PASSED (pass rate 40.00%, required 40.00%)" in text


def test_score_histogram_counts_each_bin() -> None:
    from evaltasks.reports.markdown import score_histogram

    scores = [0.0, 0.05, 0.1, 0.5, 0.55, 0.99, 1.0, 1.0, 0.7]
    lines = score_histogram(scores)
    counts = [int(line.rsplit(" ", 1)[1]) for line in lines]
    assert counts == [2, 1, 0, 0, 0, 2, 0, 1, 0, 3]  # 1.0 falls in the last bin
    assert lines[9].count("#") == 30 and lines[2].count("#") == 0


def test_summary_md_has_a_distribution_per_metric(run_dir: Path) -> None:
    md = (run_dir / "out" / "summary.md").read_text(encoding="utf-8")
    results = json.loads((run_dir / "out" / "results.json").read_text())
    assert "<details><summary>Score distributions</summary>" in md
    for name in results["summary"]["metrics"]:
        scores = [
            m["score"]
            for case in results["cases"]
            for m in case["metrics"]
            if m["name"] == name and m["score"] is not None
        ]
        if set(scores) <= {0.0, 1.0}:  # a pass/fail metric: its counts, not a chart of 8 empty bins
            ones, zeros = scores.count(1.0), scores.count(0.0)
            assert f"**{name}** ({len(scores)} scores, each 0 or 1): {ones} × 1, {zeros} × 0" in md
        else:
            assert f"**{name}** ({len(scores)} scores)\n\n```mermaid\nxychart-beta\n" in md


# --- streamed reports (a run's cases arrive in batches) ---------------------------------------------------------


def test_reports_streamed_in_batches_equal_reports_written_at_once(tmp_path: Path) -> None:
    import random

    from evaltasks.reports import ReportWriter

    rng = random.Random(5)
    cases = [
        TestCaseResult.from_metrics(
            f"c{i}",
            f"q{i}",
            f'answer <{i}> & "quoted" @user',
            [
                MetricResult.scored("M", rng.random(), 0.5, f"reason {i}", {"i": i}),
                MetricResult.errored("N", 0.5, "down")
                if i % 7 == 0
                else MetricResult.scored("N", rng.random(), 0.3, "r", {}),
            ],
        )
        for i in range(500)
    ]
    result = EvaluationResult(test_results=cases, summary=summarize(cases, {"M": 0.5, "N": 0.3}))
    header = {"schema_version": 1, "suite": "s", "gate": {"min_pass_rate": 0.4, "pass_rate": result.summary.pass_rate}}
    once = write_reports(tmp_path / "once", result, header, passed=True, min_pass_rate=0.4)
    with ReportWriter(tmp_path / "streamed", "s", {"M": 0.5, "N": 0.3}) as writer:
        for start in range(0, len(cases), 37):
            writer.add(cases[start : start + 37])
        summary = writer.summarize()
        assert summary == result.summary
        streamed = writer.write_results(header, RunReport.of_results(header, summary, passed=True, min_pass_rate=0.4))
    for name in ("results.json", "junit.xml", "summary.md"):
        assert streamed[name].read_bytes() == once[name].read_bytes(), name
    assert sorted(p.name for p in (tmp_path / "streamed").iterdir()) == ["junit.xml", "results.json", "summary.md"]
    data = json.loads(streamed["results.json"].read_text(encoding="utf-8"))
    assert [c["id"] for c in data["cases"]] == [c.id for c in cases]


def test_an_abandoned_writer_leaves_the_old_reports_and_no_temporary_files(tmp_path: Path) -> None:
    from evaltasks.reports import ReportWriter

    (tmp_path / "results.json").write_text("old")
    with ReportWriter(tmp_path, "s", {"M": 0.5}) as writer:
        writer.add([TestCaseResult.from_metrics("a", None, "o", [MetricResult.scored("M", 0.9, 0.5, "r", {})])])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
    assert (tmp_path / "results.json").read_text() == "old"


# --- fast paths of the streamed reports, checked against the slow, obvious versions ------------------------------


def test_results_built_without_validation_equal_validated_models() -> None:
    """MetricResult.scored and TestCaseResult.from_metrics skip pydantic's validation (a fifth of a large
    LengthCheck run): what they build must be the very model validation builds."""
    from pydantic import BaseModel, Field

    from evaltasks.results import _check_constructible

    metric = MetricResult.scored("M", 1, 0.5, "why <&>", {"length": 3, "unit": "words"}, evaluation_cost=0.25)
    fields = {
        "name": "M",
        "score": 1.0,
        "threshold": 0.5,
        "success": True,
        "reason": "why <&>",
        "evaluation_cost": 0.25,
        "evaluation_log": {"length": 3, "unit": "words"},
        "status": "passed",
        "error": None,
    }
    validated = MetricResult.model_validate(fields)
    assert metric == validated and metric.model_dump_json() == validated.model_dump_json()
    assert metric.model_fields_set == validated.model_fields_set
    failing = MetricResult.scored("N", 0.2, 0.5, "low", {})
    case = TestCaseResult.from_metrics("id-1", None, "out", [metric, failing])
    expected = TestCaseResult.model_validate(
        {
            "id": "id-1",
            "input": None,
            "actual_output": "out",
            "status": "failed",
            "success": False,
            "metrics": [fields, failing.model_dump()],
        }
    )
    assert case == expected and case.model_dump_json() == expected.model_dump_json()
    assert TestCaseResult.from_metrics("x", "q", "o", [metric]).status == "passed"
    copy = case.model_copy(update={"id": "id-2"})  # still a working pydantic model
    assert copy.id == "id-2" and case.id == "id-1"
    with pytest.raises(TypeError):
        TestCaseResult.from_metrics("x", None, "o", [fields])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        MetricResult.scored("M", 1.0, 0.5, "r", [])  # type: ignore[arg-type]

    class Aliased(BaseModel):
        value: int = Field(alias="v")

    with pytest.raises(TypeError, match="aliases"):
        _check_constructible(Aliased)


def test_junit_attribute_escaping_equals_the_standard_library() -> None:
    import random
    from xml.sax.saxutils import escape

    from evaltasks.reports._escape import xml_text
    from evaltasks.reports.junit import _attr

    alphabet = "ab <>&\"'\n\r\t\x00\x01\x1f\x7f é€\u202e\U0001f600\ud800\ufffe"
    rng = random.Random(11)
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 12)))
        stdlib = '"' + escape(xml_text(text), {'"': "&quot;", "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}) + '"'
        assert _attr(text) == stdlib, repr(text)
        ET.fromstring(f"<t a={_attr(text)}/>")  # well-formed, whatever the text


def test_highlights_keep_the_worst_cases_of_a_stream() -> None:
    import random

    from evaltasks.reports.markdown import WORST_CASES, Highlights

    rng = random.Random(3)
    cases = [
        TestCaseResult.from_metrics(
            f"c{i}",
            None,
            f"o{i}",
            [
                MetricResult.errored("M", 0.5, "down")
                if i % 97 == 0
                else MetricResult.scored("M", round(rng.random(), 2), 0.5, f"r{i}", {})
            ],
        )
        for i in range(2000)
    ]
    streamed = Highlights()
    for start in range(0, len(cases), 150):
        streamed.add(cases[start : start + 150])
    # the obvious way: every failed or errored result, lowest score first (errored as -1), earliest first on ties
    bad = [
        (m.score if m.score is not None else -1.0, i, c.id)
        for i, c in enumerate(cases)
        for m in c.metrics
        if m.status in ("failed", "errored")
    ]
    assert [w.case_id for w in streamed.worst] == [cid for _, _, cid in sorted(bad)[:WORST_CASES]]


# --- a report set is replaced as a whole or not at all ------------------------------------------------------------


def _failing_cases(n: int) -> list[TestCaseResult]:
    """Failed cases with long reasons: junit.xml (reason twice, input and output) is larger than results.json."""
    return [
        TestCaseResult.from_metrics(
            f"c{i}",
            f"question {i}",
            f"answer {i}",
            [MetricResult.scored("M", 0.1, 0.5, f"reason {i} " + "x" * 400, {})],
        )
        for i in range(n)
    ]


def _old_set(directory: Path) -> dict[str, bytes]:
    """A previous run's three reports in ``directory``; returns their bytes."""
    cases = [TestCaseResult.from_metrics("old", "q", "o", [MetricResult.scored("M", 0.9, 0.5, "old run", {})])]
    result = EvaluationResult(test_results=cases, summary=summarize(cases, {"M": 0.5}))
    write_reports(directory, result, {"schema_version": 1, "suite": "old"}, passed=True, min_pass_rate=1.0)
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def _pages(size: int) -> int:
    return -(-size // 4096) * 4096


def test_a_full_disk_leaves_the_previous_report_set_whole(tmp_path: Path) -> None:
    """ENOSPC for real (a 4 KiB-paged tmpfs sized so results.json fits and junit.xml does not): the old code
    had replaced results.json already, leaving it beside the old junit.xml and summary.md."""
    import errno
    import subprocess

    from evaltasks.reports import ReportWriter

    cases = _failing_cases(60)
    sizes = write_reports(
        tmp_path / "scratch",
        EvaluationResult(test_results=cases, summary=summarize(cases, {"M": 0.5})),
        {"schema_version": 1, "suite": "new"},
        passed=False,
        min_pass_rate=1.0,
    )
    results_size, junit_size = (sizes[n].stat().st_size for n in ("results.json", "junit.xml"))
    assert junit_size > results_size + 8192
    # parts (about the size of each report) + old set (3 pages) + results.json + half of junit.xml
    size = 2 * _pages(results_size) + _pages(junit_size) + 3 * 4096 + _pages(junit_size // 2)
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size // 1024}k", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mount.stderr.strip()}")
    try:
        old = _old_set(disk)
        with pytest.raises(OSError) as info, ReportWriter(disk, "new", {"M": 0.5}) as writer:
            writer.add(cases)
            header = {"schema_version": 1, "suite": "new"}
            writer.write_results(
                header, RunReport.of_results(header, writer.summarize(), passed=False, min_pass_rate=1.0)
            )
        assert info.value.errno == errno.ENOSPC
        assert {p.name: p.read_bytes() for p in disk.iterdir()} == old  # the old set, whole; no temporaries
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_failed_write_leaves_the_previous_report_set_whole(tmp_path: Path) -> None:
    """The same without root: a file-size limit (RLIMIT_FSIZE) makes the write of junit.xml fail (EFBIG)
    after results.json was written; nothing of the new set may replace the old one."""
    import errno
    import resource
    import signal

    from evaltasks.reports import ReportWriter

    cases = _failing_cases(60)
    old = _old_set(tmp_path)
    with ReportWriter(tmp_path, "new", {"M": 0.5}) as writer:
        writer.add(cases)
        results_size = len(writer._parts["results.json"][0].read_bytes()) + 4096  # head + tail fit
        junit_part = len(writer._parts["junit.xml"][0].read_bytes())
        assert junit_part > results_size
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (results_size, hard))
        try:
            with pytest.raises(OSError) as info:
                header = {"schema_version": 1, "suite": "new"}
                writer.write_results(
                    header, RunReport.of_results(header, writer.summarize(), passed=False, min_pass_rate=1.0)
                )
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, previous)
    assert info.value.errno == errno.EFBIG
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == old


_WRITER = """
import sys, time
from pathlib import Path
from evaltasks._atomic import atomic_writer
with atomic_writer(Path(sys.argv[1]) / sys.argv[2]) as out:
    out.write("half a report")
    out.flush()
    print("writing", flush=True)
    time.sleep(600)
"""


@pytest.mark.slow
def test_temporaries_of_a_killed_writer_are_removed_by_the_next_run(tmp_path: Path) -> None:
    """A writer killed (SIGKILL) while writing results.json leaves its temporary file; the next run removes it
    at once (it was kept for an hour), while a temporary of a writer still running stays."""
    import signal
    import subprocess
    import sys

    from evaltasks.reports import ReportWriter

    def start(name: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), name], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "writing\n"
        return proc

    killed, running = start("results.json"), start("junit.xml")
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=60)
        [stale] = tmp_path.glob(".results.json.*.tmp")
        [live] = tmp_path.glob(".junit.xml.*.tmp")
        assert stale.read_text() == "half a report"

        cases = _failing_cases(3)
        with ReportWriter(tmp_path, "rerun", {"M": 0.5}) as writer:
            writer.add(cases)
            header = {"schema_version": 1, "suite": "rerun"}
            writer.write_results(
                header, RunReport.of_results(header, writer.summarize(), passed=False, min_pass_rate=1.0)
            )
        assert not stale.exists()
        assert live.exists()  # its writer still runs
        assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "junit.xml", "results.json", "summary.md"]
        assert json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["suite"] == "rerun"
    finally:
        for proc in (killed, running):
            proc.kill()
            proc.wait(timeout=60)


def test_junit_classes_a_generated_case_under_its_target(tmp_path: Path) -> None:
    """Two targets evaluate the same case ids: each testcase is classed under its target, so (classname, name)
    stays unique for CI reporters; a case that came with the data keeps the suite's class."""
    import functools

    from evaltasks import EvalTestCase, ExactMatchMetric
    from evaltasks.reports.junit import junit_testcases
    from evaltasks.targets import PythonTarget

    def answer(word: str, case: EvalTestCase) -> str:
        return word

    cases = [EvalTestCase(actual_output="", input=q, expected_output="yes", name=q) for q in ("a", "b")]
    targets = [PythonTarget(functools.partial(answer, w), name=w) for w in ("yes", "no")]
    result = evaluate_sync(cases, [ExactMatchMetric()], target=targets)
    xml = "<testsuite>" + "".join(junit_testcases("s", case) for case in result.test_results) + "</testsuite>"
    keys = [(t.get("classname"), t.get("name")) for t in ET.fromstring(xml).iter("testcase")]
    assert keys == [
        ("s.yes.ExactMatchMetric", "a :: ExactMatchMetric"),
        ("s.yes.ExactMatchMetric", "b :: ExactMatchMetric"),
        ("s.no.ExactMatchMetric", "a :: ExactMatchMetric"),
        ("s.no.ExactMatchMetric", "b :: ExactMatchMetric"),
    ]
    plain = TestCaseResult.from_metrics(
        "c", None, "x", [MetricResult(name="M", score=1.0, threshold=0.5, success=True, reason="r")]
    )
    assert 'classname="s.M"' in junit_testcases("s", plain)
