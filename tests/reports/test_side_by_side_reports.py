"""Targets side by side in a run's reports: a two-target result (the real LengthCheckMetric scored on each target's
outputs, ``targets`` filled directly) finished through the real report writer with a real suite plan, in memory
(finish_run) and streamed (finish_streamed_run); results.json's ``side_by_side`` against the shipped schema,
summary.md's section, the terminal's, and the flow's returned dict. The exact McNemar p-value is statsmodels'."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import jsonschema
import pytest
from rich.console import Console
from statsmodels.stats.contingency_tables import mcnemar

from evaltasks.engine.lifecycle import RunReport, finish_streamed_run
from evaltasks.engine.run import plan_run
from evaltasks.engine.side_by_side import SideBySide, compare_targets
from evaltasks.reports import write_reports
from evaltasks.reports.console import print_summary
from evaltasks.reports.outcome import finish_run, open_report_writer
from tests.process_env import REPO_ROOT
from tests.side_by_side_helpers import BETTER, CASES, WORSE, output, two_target_result
from tests.suite_helpers import length_suite


def _expected_p() -> float:
    passed_both = CASES - WORSE - BETTER - 2  # c0 and c10 fail on both
    return float(mcnemar([[passed_both, WORSE], [BETTER, 2]], exact=True).pvalue)


def test_a_finished_two_target_run_writes_the_comparison_into_results_json_and_summary_md(tmp_path: Path) -> None:
    """10 cases pass on current and fail on candidate, 1 the reverse: p is statsmodels' exact McNemar (0.0117),
    the candidate is worse than the reference; results.json's side_by_side holds it (valid against the shipped
    schema, read back equal), summary.md shows every target's verdict, a split case with both answers and one
    metric table per target; the flow's returned dict carries it without its per-case parts."""
    plan = plan_run(length_suite(tmp_path / "s", [2] * CASES, name="sbs"))
    result = two_target_result(tmp_path / "index")
    outcome = finish_run(plan, result, tmp_path / "out", time.time())

    side = outcome.side_by_side
    assert side is not None and side == compare_targets(result)
    assert outcome.result.targets == result.targets
    comparison = side.targets[1].comparison
    assert comparison is not None and comparison.pass_rate_test is not None
    test = comparison.pass_rate_test
    assert (test.worse, test.better, test.paired_cases) == (WORSE, BETTER, CASES) == (10, 1, 30)
    assert test.p_value == pytest.approx(_expected_p(), rel=1e-12) and _expected_p() == pytest.approx(24 / 2048)
    assert comparison.verdict == "regressed" and side.verdict == "regressed"
    assert side.split_cases == WORSE + BETTER

    data = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert SideBySide.model_validate(data["side_by_side"]) == side
    assert list(data)[-3:] == ["side_by_side", "summary", "cases"]
    schema = json.loads((REPO_ROOT / "evaltasks" / "schema" / "results.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(data)
    assert RunReport.model_validate(data).side_by_side == side  # what the Action renders from

    returned = outcome.summary_dict()
    assert "splits" not in returned["side_by_side"]
    assert "changes" not in returned["side_by_side"]["targets"][1]["comparison"]
    assert RunReport.model_validate(returned).side_by_side.split_cases == 11  # type: ignore[union-attr]

    md = outcome.paths["summary.md"].read_text(encoding="utf-8")
    assert "## Targets side by side" in md
    assert "- 🔻 **candidate**: worse than current: pass rate on 30 paired cases: 90.00% → 60.00%" in md
    assert "(exact McNemar; 10 worse, 1 better)" in md and f"p = {_expected_p():.4f}" in md
    assert "### Cases the targets split (11)" in md
    item = md[md.index("- **c1** · current passed · candidate failed") :].split("\n- ")[0]
    assert f"  - ✅ **current** passed: {output('current', 1)}" in item
    score = next(c.metrics[0].score for c in result.test_results[CASES:] if c.id == "c1")
    assert f"  - ❌ **candidate** failed (LengthCheckMetric {score:.4f}): {output('candidate', 1)}" in item
    assert "### current (the reference)\n\n| metric | pass rate | mean | threshold |" in md
    assert "### candidate (against current)\n\n| metric | pass rate | Δ pass rate | mean | Δ mean | verdict |" in md
    assert md.index("## Targets side by side") < md.index("## Metrics")


def test_a_streamed_run_compares_the_targets_its_writer_kept(tmp_path: Path) -> None:
    """The flow's path: the writer opened with the targets' names keeps their cases as batches stream in, and
    finish_streamed_run(targets=...) compares them; a writer opened without targets keeps nothing to compare."""
    plan = plan_run(length_suite(tmp_path / "s", [2] * CASES, name="sbs"))
    result = two_target_result(tmp_path / "index")
    names = [t.name for t in result.targets]
    with open_report_writer(plan, tmp_path / "out", targets=names) as writer:
        for start in range(0, len(result.test_results), 8):
            writer.add(result.test_results[start : start + 8])
        outcome = finish_streamed_run(plan, writer, time.time(), summary=result.summary, targets=result.targets)
    assert outcome.side_by_side == compare_targets(result)
    assert json.loads(outcome.paths["results.json"].read_text(encoding="utf-8"))["side_by_side"]["split_cases"] == 11
    with open_report_writer(plan, tmp_path / "out2") as writer:  # the suite has no targets: nothing kept
        writer.add(result.test_results)
        plain = finish_streamed_run(plan, writer, time.time(), summary=result.summary, targets=result.targets)
    assert plain.side_by_side is None and writer.side_by_side_builder is None
    assert "side_by_side" not in json.loads(plain.paths["results.json"].read_text(encoding="utf-8"))


def test_the_terminal_shows_each_target_against_the_first_and_the_split_cases(tmp_path: Path) -> None:
    plan = plan_run(length_suite(tmp_path / "s", [2] * CASES, name="sbs"))
    outcome = finish_run(plan, two_target_result(tmp_path / "index"), tmp_path / "out", time.time())
    console = Console(record=True, width=100, force_terminal=False)
    print_summary(outcome.report, console=console)
    text = console.export_text()
    assert "targets side by side: each compared with current (the first)" in text
    assert "target current (python): the reference" in text
    assert "🔻 target candidate (python): worse than current" in text
    assert "Δ vs current" in text or "Δ mean" in text  # each Δ under its number, or as columns
    assert "cases the targets split: 11" in text
    assert "c1 — current passed · candidate failed" in text
    assert f"{_expected_p():.4f}" in text  # the all-cases row of the tests' table


def test_write_reports_compares_the_targets_of_a_finished_result(tmp_path: Path) -> None:
    """publish_results' path (a result held in memory, no plan): the side by side at the header's gate."""
    result = two_target_result(tmp_path / "index")
    header = {"suite": "sbs", "gate": {"alpha": 0.01, "min_effect": 0.01}}
    paths = write_reports(tmp_path / "out", result, header, passed=True, min_pass_rate=0.0)
    data = json.loads(paths["results.json"].read_text(encoding="utf-8"))
    side = SideBySide.model_validate(data["side_by_side"])
    assert side == compare_targets(result, alpha=0.01) and side.alpha == 0.01
    overall = side.targets[1].comparison.pass_rate_test  # type: ignore[union-attr]
    assert overall is not None and overall.verdict == "inconclusive"  # p = 0.0117 is not below 0.01
    # at alpha 0.01 the fewest discordant cases all one way that can be significant are 8 (2 / 2**8 < 0.01)
    assert mcnemar([[0, 8], [0, 0]], exact=True).pvalue < 0.01 < mcnemar([[0, 7], [0, 0]], exact=True).pvalue
    assert overall.min_detectable_effect == pytest.approx(8 / 30)
    assert "## Targets side by side" in paths["summary.md"].read_text(encoding="utf-8")


def test_model_text_in_a_split_case_is_escaped_and_the_section_fits_a_size_limit(tmp_path: Path) -> None:
    """A candidate's answer carrying markup (a link, an image, HTML) stays text in the split case's line; cut to
    the PR comment's size, the section's head (each target's verdict and the targets table) is kept."""
    from evaltasks.reports.markdown import render_summary

    result = two_target_result(tmp_path / "index")
    evil = "![x](https://evil.example/x.png) <img src=x onerror=alert(1)> [click](https://evil.example)"
    cases = [
        c.model_copy(update={"actual_output": evil}) if c.id == "c1" and c.generation.target == "candidate" else c  # type: ignore[union-attr]
        for c in result.test_results
    ]
    result = result.model_copy(update={"test_results": cases})
    side = compare_targets(result)
    assert side is not None
    report = RunReport(suite="sbs", summary=result.summary, passed=True, side_by_side=side)
    md = render_summary(report, result.test_results)
    line = next(x for x in md.splitlines() if x.startswith("  - ❌ **candidate** failed") and "evil" in x)
    assert re.search(r"(?<!\\)<", line) is None and re.search(r"(?<!\\)\]\(", line) is None  # no live tag or link
    assert "\\<img src\\=x onerror\\=alert\\(1\\)\\>" in line
    cut = render_summary(report, result.test_results, max_size=4000)
    assert len(cut) <= 4000 and "Truncated" in cut
    assert "- 🔻 **candidate**: worse than current" in cut and "| **candidate** | python | 60.00% |" in cut
