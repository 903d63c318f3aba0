"""Uncertainty and verdicts on every surface: summary.md, the terminal, the job summary, the PR comment and the
Action's ``verdict`` output (docs/reports.md#outputs and docs/action.md#github-action).

The summaries and comparisons are built by hand from the declared fields (Interval, ChangeTest, verdicts), with
their numbers computed here by statsmodels / scipy (Wilson intervals, exact McNemar p-values) rather than by
evaltasks; the expected text is formatted in each test from those values, never copied from a renderer's output.
The Action's scripts run as the runner runs them (GITHUB_OUTPUT, GITHUB_STEP_SUMMARY files), and the comment is
rendered by cmark-gfm, GitHub's own renderer.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from scipy.stats import binomtest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

from evaltasks.engine.compare import ChangeTest, Comparison, MetricComparison
from evaltasks.engine.lifecycle import RunReport
from evaltasks.reports import write_reports
from evaltasks.reports.console import print_summary
from evaltasks.reports.markdown import render_summary_markdown
from evaltasks.results import (
    EvaluationResult,
    EvaluationSummary,
    Interval,
    MetricResult,
    MetricSummary,
    StatisticsInfo,
    TestCaseResult,
)
from tests.action.test_action import ACTION, _github_html, _import, _outputs, _pr_event, _report_env, _seen

N = 800
PASSED = 592  # 74 % now; the baseline passed 604 (75.5 %): 20 cases got worse, 8 better (604 - 20 + 8 = 592)
WORSE, BETTER = 20, 8  # exact McNemar p = 0.036


def _wilson(k: int, n: int) -> Interval:
    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    return Interval(low=float(low), high=float(high), method="wilson")


def _summary(with_intervals: bool = True) -> EvaluationSummary:
    rate = PASSED / N
    metrics = {
        "ReferenceMatchMetric": MetricSummary(
            mean_score=0.7412,
            pass_rate=rate,
            threshold=0.5,
            passed=PASSED,
            failed=N - PASSED,
            pass_rate_interval=_wilson(PASSED, N) if with_intervals else None,
            mean_score_interval=Interval(low=0.7231, high=0.7598, method="bootstrap") if with_intervals else None,
        ),
        "LengthCheckMetric": MetricSummary(mean_score=None, pass_rate=None, threshold=1.0, skipped=N),
    }
    return EvaluationSummary(
        cases=N,
        passed_cases=PASSED,
        failed_cases=N - PASSED,
        errored_cases=0,
        skipped_cases=0,
        pass_rate=rate,
        metrics=metrics,
        pass_rate_interval=_wilson(PASSED, N) if with_intervals else None,
        statistics=StatisticsInfo(bootstrap_resamples=2000, seed=0) if with_intervals else None,
    )


def _pass_test(verdict: str = "regressed", worse: int = WORSE, better: int = BETTER, n: int = N) -> ChangeTest:
    p = float(mcnemar([[0, better], [worse, 0]], exact=True).pvalue)  # statsmodels' exact McNemar
    delta = (better - worse) / n
    return ChangeTest(
        statistic="pass_rate",
        test="exact McNemar",
        paired_cases=n,
        baseline=(PASSED + worse - better) / n,
        current=PASSED / n,
        delta=delta,
        interval=Interval(low=delta - 0.0312, high=delta + 0.0297, method="paired bootstrap"),
        p_value=p,
        worse=worse,
        better=better,
        min_detectable_effect=6 / n,
        verdict=verdict,
    )


def _score_test(verdict: str = "regressed") -> ChangeTest:
    return ChangeTest(
        statistic="mean_score",
        test="paired bootstrap",
        paired_cases=N,
        baseline=0.7600,
        current=0.7412,
        delta=-0.0188,
        interval=Interval(low=-0.0301, high=-0.0071, method="paired bootstrap"),
        p_value=0.002,
        min_detectable_effect=0.0115,
        verdict=verdict,
    )


def _regression(test: ChangeTest) -> str:
    """A regression sentence as ``comparison.regressions`` words it (with its p-value)."""
    return (
        f"pass rate {test.baseline:.2%} → {test.current:.2%} ({100 * test.delta:+.2f} points), p = {test.p_value:.4f}"
    )


def _comparison(verdict: str = "regressed") -> Comparison:
    overall, score = _pass_test(verdict), _score_test(verdict)
    return Comparison(
        baseline="main",
        tolerance=0.01,
        baseline_pass_rate=overall.baseline,
        current_pass_rate=overall.current,
        pass_rate_delta=overall.delta,
        regressed=verdict == "regressed",
        metrics=[
            MetricComparison(
                name="ReferenceMatchMetric",
                baseline_mean=0.76,
                current_mean=0.7412,
                mean_delta=-0.0188,
                pass_rate_test=overall,
                score_test=score,
                verdict=verdict,
                regressed=verdict == "regressed",
            ),
            MetricComparison(name="LengthCheckMetric"),
        ],
        regressions=[_regression(overall)] if verdict == "regressed" else [],
        pass_rate_test=overall,
        verdict=verdict,
        paired_cases=N,
        new_cases=[f"new-{i}" for i in range(12)],
        removed_cases=["gone-1", "gone-2"],
        flaky_cases=["wobbly-7"],
    )


def _render(comparison: Comparison | None, summary: EvaluationSummary | None = None, **kw) -> str:
    return render_summary_markdown(
        "demo",
        summary or _summary(),
        [],
        passed=kw.pop("passed", False),
        min_pass_rate=0.5,
        comparison=comparison,
        **kw,
    )


def _ci(interval: Interval) -> str:
    return f"{100 * interval.low:.1f}–{100 * interval.high:.1f}"


# --- summary.md ---------------------------------------------------------------------------------------------


def test_summary_md_shows_each_number_with_its_interval() -> None:
    md = _render(None, passed=True)
    wilson = proportion_confint(PASSED, N, alpha=0.05, method="wilson")
    ci = f"{100 * wilson[0]:.1f}–{100 * wilson[1]:.1f}"  # 70.8–77.0: wider than a point, one decimal
    assert md.splitlines()[2] == f"✅ **PASSED**: pass rate {PASSED / N:.2%} ({PASSED} of {N} cases), gate 50.00%"
    assert f"Cases: {PASSED} passed, {N - PASSED} failed, 0 errored, 0 skipped; pass rate 95% CI {ci}%." in md
    row = next(line for line in md.splitlines() if line.startswith("| ReferenceMatchMetric |"))
    # each interval under its number: the columns stay narrow
    assert row == (
        f"| ReferenceMatchMetric | {PASSED / N:.2%}<br>{ci} | 0.7412<br>0.72–0.76 | 0.5 | {N - PASSED} | 0 | 0 |"
    )
    assert "| LengthCheckMetric | n/a | n/a | 1.0 | 0 | 0 | 800 |" in md  # nothing scored: no interval
    assert "95% confidence: pass rates by Wilson and mean scores by bootstrap (2000 bootstrap resamples, seed 0)" in md
    assert "Cases that changed" not in md and "egressed" not in md


def test_a_narrow_interval_gets_more_decimals_so_its_bounds_differ() -> None:
    summary = _summary()
    summary.metrics["ReferenceMatchMetric"].mean_score_interval = Interval(
        low=0.74101, high=0.74139, method="bootstrap"
    )
    md = _render(None, summary=summary)
    assert "| 0.7412<br>0.7410–0.7414 |" in md  # width 0.0004: four decimals, not "0.74–0.74"


def test_summary_md_regressed_verdict_tests_and_case_lists() -> None:
    c = _comparison("regressed")
    md = _render(c, fail_on="regression")
    lines = md.splitlines()
    t = c.pass_rate_test
    p = mcnemar([[0, BETTER], [WORSE, 0]], exact=True).pvalue
    assert abs(t.p_value - binomtest(WORSE, WORSE + BETTER, 0.5).pvalue) < 1e-12  # statsmodels = scipy
    # the verdict line first: the change in points, newly failing cases, the verdict with its p-value
    points = f"{100 * t.delta:+.2f}".replace("-", "−")
    assert lines[2] == (
        f"❌ **FAILED**: pass rate {PASSED / N:.2%} ({points} points since the baseline); "
        f"0 cases newly failing; regressed since the baseline (p = {p:.2g})"
    )
    header = "| metric | pass rate | Δ pass rate | mean | Δ mean | verdict |"
    verdict_at = lines.index("🔻 **Regressed since the baseline.** (alpha 0.05, min effect 0.01)")
    assert lines.index(header) < verdict_at  # the tests' details come after the table, folded
    delta_ci = f"{100 * t.interval.low:+.1f} to {100 * t.interval.high:+.1f}"
    overall = (
        f"Overall pass rate on {N} paired cases: {(PASSED + WORSE - BETTER) / N:.2%} → {PASSED / N:.2%}, "
        f"Δ {100 * (BETTER - WORSE) / N:+.2f} pt (95% CI {delta_ci}), p = {p:.4f} (exact McNemar; "
        f"{WORSE} worse, {BETTER} better)."
    )
    assert overall in lines
    ci = _ci(_wilson(PASSED, N))
    # a 🔻 on every regressed change: the overall pass rate, the metric's pass rate and its mean score
    assert (
        f"| ReferenceMatchMetric | {PASSED / N:.2%}<br>{ci} | 🔻 {100 * t.delta:+.2f} pt<br>{delta_ci}<br>"
        f"p = {p:.4f} | 0.7412<br>0.72–0.76 | 🔻 -0.0188<br>-0.03 to -0.01<br>p = 0.0020 | 🔻 regressed |"
    ) in lines
    assert (
        f"| **all cases** | {PASSED / N:.2%}<br>{ci} | 🔻 {100 * t.delta:+.2f} pt<br>{delta_ci}<br>p = {p:.4f} | "
        "| | 🔻 regressed |"
    ) in lines
    assert "| LengthCheckMetric | n/a | n/a | n/a | n/a | not in the baseline |" in lines
    assert all(
        len(re.findall(r"(?<!\\)\|", line)) == 7 for line in lines if line.startswith("| ReferenceMatchMetric | 7")
    )
    assert (
        "New since the baseline (left out of the paired tests): 12 (new\\-0, new\\-1, new\\-2, new\\-3, new\\-4, "
        "new\\-5, new\\-6, new\\-7, new\\-8, new\\-9, … 2 more)."
    ) in lines
    assert "Removed since the baseline: 2 (gone\\-1, gone\\-2)." in lines
    assert "Flaky (judge samples on both sides of the threshold): 1 (wobbly\\-7)." in lines
    assert not any(line.startswith("## Regressions") for line in lines)  # listed once: in the table


def test_summary_md_other_verdicts() -> None:
    assert "🟢 **Improved since the baseline.**" in _render(_comparison("improved"))
    assert "⚪ **No significant change since the baseline.**" in _render(_comparison("no significant change"))
    # 8 paired cases: the fewest discordant cases, all one way, that exact McNemar calls significant at 0.05
    m = next(k for k in range(1, 20) if binomtest(k, k, 0.5).pvalue < 0.05)
    assert m == 6
    small = _pass_test("inconclusive", worse=1, better=0, n=8).model_copy(update={"min_detectable_effect": m / 8})
    c = _comparison("inconclusive").model_copy(update={"pass_rate_test": small, "paired_cases": 8})
    md = _render(c)
    assert (
        f"❔ **Inconclusive: 8 paired cases can detect pass-rate changes of {100 * m / 8:.1f} points or more; "
        f"the gate's min_effect is 0.01 (1.0 points).**"
    ) in md
    assert "; inconclusive against the baseline\n" in md  # in the verdict line too


def test_a_schema_1_comparison_and_summary_render_as_before() -> None:
    """A results.json from an older evaltasks: no intervals, a comparison without tests (its verdict is only the
    model's default and is not shown): the Δ columns, 🔻 on the regressed metric and on the gate's pass-rate drop."""
    old = Comparison.model_validate(
        {
            "baseline": "main",
            "tolerance": 0.01,
            "baseline_pass_rate": 0.81,
            "current_pass_rate": 0.74,
            "pass_rate_delta": -0.07,
            "metrics": [
                {
                    "name": "ReferenceMatchMetric",
                    "baseline_mean": 0.76,
                    "current_mean": 0.7412,
                    "mean_delta": -0.0188,
                    "regressed": True,
                }
            ],
            "changes": [],
            "counts": {"worse": 3},
            "regressed": True,
            "regressions": ["pass rate 81.00% → 74.00%"],
        }
    )
    md = _render(old, summary=_summary(with_intervals=False))
    assert (
        f"❌ **FAILED**: pass rate {PASSED / N:.2%} (−7.00 points since the baseline), gate 50.00%; regressed beyond "
        "the tolerance\n"
    ) in md
    assert "| metric | pass rate | Δ pass rate | mean | Δ mean | verdict |" in md
    assert f"| ReferenceMatchMetric | {PASSED / N:.2%} | n/a | 0.7412 | 🔻 -0.0188 | 🔻 regressed |" in md
    assert f"| **all cases** | {PASSED / N:.2%} | 🔻 -7.00 pt | | | 🔻 regressed |" in md
    assert "No case changed beyond the tolerance (0.01) since main." in md
    for absent in ("since the baseline.**", "CI", "Paired by case id", "Intervals", "newly failing"):
        assert absent not in md, absent


# --- terminal -----------------------------------------------------------------------------------------------


def test_terminal_at_80_columns_shows_every_number_whole() -> None:
    long_names = ["SemanticSimilarityMetric", "LanguageDetectionMetric", "RestrictedRefusalMetric"]
    base = _summary()
    rm = base.metrics["ReferenceMatchMetric"]
    summary = base.model_copy(update={"metrics": {name: rm for name in long_names}})
    worst = ChangeTest(
        statistic="pass_rate",
        test="exact McNemar",
        paired_cases=100000,
        baseline=1.0,
        current=0.0,
        delta=-1.0,
        interval=Interval(low=-1.0, high=-0.9321, method="paired bootstrap"),
        p_value=1e-30,
        worse=100000,
        min_detectable_effect=6e-5,
        verdict="no significant change",
    )
    comparison = _comparison("regressed")
    comparison.metrics = [
        MetricComparison(name=name, pass_rate_test=worst, score_test=_score_test("inconclusive"), verdict="regressed")
        for name in long_names
    ]
    # a terminal (a pipe keeps the verdict line whole, whatever its length)
    console = Console(width=80, record=True, file=io.StringIO(), force_terminal=True)
    print_summary(
        RunReport.of(summary, passed=False, min_pass_rate=0.9, comparison=comparison, fail_on="either"), console=console
    )
    text = console.export_text()
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines) and "…" not in text, text
    for name in long_names:
        row = next(line for line in lines if line.strip().startswith(name + " ") and "pass rate" not in line)
        assert row.split()[1:3] == [f"{rm.mean_score:.4f}", f"{rm.pass_rate:.2%}"], row
    under = next(line for line in lines if "0.72–0.76" in line)
    assert under.split() == ["0.72–0.76", f"{_ci(rm.pass_rate_interval)}%"]
    t = comparison.pass_rate_test
    p = mcnemar([[0, BETTER], [WORSE, 0]], exact=True).pvalue
    assert "🔻 Regressed since the baseline (baseline main; alpha 0.05, min effect 0.01)" in text
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("all cases"))
    assert lines[at].split()[2:] == ["pass", "rate", f"{100 * t.delta:+.2f}", "pt", f"{p:.4f}", "regressed"]
    assert lines[at + 1].split() == [f"{100 * t.interval.low:+.1f}", "to", f"{100 * t.interval.high:+.1f}"]  # under Δ
    worst_at = [i for i, line in enumerate(lines) if "-100.00 pt" in line]
    assert len(worst_at) == 3
    for i in worst_at:
        # the verdict wraps at its space ("no significant / change"); the interval is the row under it
        assert "-100.00 pt  < 0.0001  no significant" in lines[i] and lines[i + 1].split() == ["change"]
        assert lines[i + 2].split() == ["-100.0", "to", "-93.2"]
    means_at = [i for i, line in enumerate(lines) if " mean " in f" {line} " and "-0.0188" in line]
    assert len(means_at) == 3
    for i in means_at:
        assert lines[i].split()[:3] == ["mean", "-0.0188", "0.0020"] and lines[i + 1].split() == [
            "-0.03",
            "to",
            "-0.01",
        ]
    assert f"pass rate: {PASSED / N:.2%} ({_ci(summary.pass_rate_interval)}%)" in " ".join(text.split())
    assert "new (not tested): 12: new-0, new-1, new-2, new-3, new-4 and 7 more" in text
    assert "removed (not tested): 2: gone-1, gone-2" in text and "flaky: 1: wobbly-7" in text
    assert f"GATE FAILED (pass rate {PASSED / N:.2%}, required 90.00% and no significant regression)" in text


def test_terminal_without_intervals_or_tests_prints_as_before() -> None:
    console = Console(width=80, record=True, file=io.StringIO())
    old = Comparison(baseline="main", tolerance=0.01, pass_rate_delta=-0.07)
    print_summary(
        RunReport.of(_summary(with_intervals=False), passed=True, min_pass_rate=0.5, comparison=old), console=console
    )
    text = console.export_text()
    verdict, _, text = text.partition("evaltasks results")  # the verdict line comes first (reports.verdict)
    assert verdict.startswith("PASSED: pass rate") and "(−7.00 points since the baseline)" in verdict
    assert "–" not in text and "since the baseline" not in text and "interval" not in text
    assert "baseline main: pass rate change -7.00 pt" in text
    assert f"GATE PASSED (pass rate {PASSED / N:.2%}, required 50.00%)" in text


# --- the Action: outputs, annotations, job summary and the comment ------------------------------------------


def _cases() -> list[TestCaseResult]:
    return [
        TestCaseResult.from_metrics(
            f"case-{i}",
            "q",
            "a",
            [MetricResult.scored("ReferenceMatchMetric", 0.9 if i % 4 else 0.2, 0.5, "cosine", {})],
        )
        for i in range(8)
    ]


def _write(out: Path, summary: EvaluationSummary, comparison: Comparison | None, schema: int = 2) -> None:
    gate = {"min_pass_rate": 0.5, "allow_errors": False, "pass_rate": summary.pass_rate}
    if schema >= 2:
        gate.update(
            fail_on="regression",
            alpha=0.05,
            min_effect=0.01,
            verdict=comparison.verdict if comparison is not None else None,
        )
    header = {"schema_version": schema, "suite": "quickstart", "passed": False, "gate": gate, "warnings": []}
    result = EvaluationResult(test_results=_cases(), summary=summary)
    write_reports(out, result, header, passed=False, min_pass_rate=0.5, comparison=comparison)


def _report(tmp_path: Path, out: Path, **extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str], str]:
    env = _report_env(tmp_path, out, _pr_event(tmp_path), None, **extra)
    proc = subprocess.run([sys.executable, str(ACTION / "report.py")], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, _outputs(env), Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")


def test_action_verdict_output_annotations_job_summary_and_sanitised_comment(tmp_path: Path) -> None:
    out = tmp_path / "results"
    comparison = _comparison("regressed")
    _write(out, _summary(), comparison)
    proc, outputs, job_summary = _report(tmp_path, out)
    assert outputs["verdict"] == "regressed" and outputs["regressed"] == "true"
    p = comparison.pass_rate_test.p_value
    assert f"Regression since the baseline: {_regression(comparison.pass_rate_test)}".replace("%", "%25") in proc.stdout
    assert f"p = {p:.4f}" in proc.stdout and 0.03 < p < 0.04
    wilson = _ci(_wilson(PASSED, N))
    for text in (job_summary, (tmp_path / "comment.md").read_text(encoding="utf-8")):
        assert "🔻 **Regressed since the baseline.**" in text and f"95% CI {wilson}%" in text
        assert (
            f"❌ **FAILED**: pass rate {PASSED / N:.2%} (−1.50 points since the baseline); 0 cases newly failing; "
            f"regressed since the baseline (p = {p:.2g})" in text
        )
    # a fork's comment.md is untrusted: the trusted workflow sanitises it before posting; what GitHub then
    # renders (cmark-gfm) still shows the verdict, the intervals and the tests
    comment = _import("comment")
    body = comment.sanitize_untrusted_body((out / "comment.md").read_text(encoding="utf-8"), "example/evaltasks-demo")
    html = _github_html(body.split("\n", 1)[1])
    seen = _seen(html)
    t = comparison.pass_rate_test
    for shown in (
        "Regressed since the baseline.",
        f"95% CI {wilson}%",
        "regressed since the baseline (p = ",
        f"p = {t.p_value:.4f}",
        "Removed since the baseline: 2 (gone-1, gone-2).",
    ):
        assert shown in seen, shown
    assert "<strong>Regressed since the baseline.</strong>" in html and "<table>" in html
    assert "<details><summary>Statistics, counts and embeddings</summary>" in html
    cells = [[_seen(part) for part in c.split("<br>")] for c in re.findall(r"<td[^>]*>(.*?)</td>", html)]
    row = [
        ["ReferenceMatchMetric"],
        [f"{PASSED / N:.2%}", wilson],
        [
            f"🔻 {100 * t.delta:+.2f} pt",
            f"{100 * t.interval.low:+.1f} to {100 * t.interval.high:+.1f}",
            f"p = {t.p_value:.4f}",
        ],
        ["0.7412", "0.72–0.76"],
        ["🔻 -0.0188", "-0.03 to -0.01", "p = 0.0020"],
        ["🔻 regressed"],
    ]
    assert any(cells[i : i + 6] == row for i in range(len(cells))), cells


def test_action_verdict_without_a_baseline_with_an_old_results_json_and_without_results(tmp_path: Path) -> None:
    out = tmp_path / "none"
    _write(out, _summary(), None)
    _, outputs, job_summary = _report(tmp_path, out)
    assert outputs["verdict"] == "no baseline" and "since the baseline" not in job_summary

    # schema 1 (an older evaltasks): no intervals in the summary, a comparison without tests or verdict
    old = tmp_path / "old"
    _write(old, _summary(with_intervals=False), None, schema=1)
    doc = json.loads((old / "results.json").read_text(encoding="utf-8"))
    for key in ("pass_rate_interval", "statistics"):
        doc["summary"].pop(key)
    for m in doc["summary"]["metrics"].values():
        m.pop("pass_rate_interval"), m.pop("mean_score_interval")
    doc["comparison"] = {
        "baseline": "main",
        "tolerance": 0.01,
        "baseline_pass_rate": 0.81,
        "current_pass_rate": 0.74,
        "pass_rate_delta": -0.07,
        "metrics": [],
        "changes": [],
        "counts": {},
        "regressed": True,
        "regressions": ["pass rate 81.00% → 74.00% (-7.00 points)"],
    }
    (old / "results.json").write_text(json.dumps(doc), encoding="utf-8")
    proc, outputs, job_summary = _report(tmp_path, old)
    assert outputs["verdict"] == "" and outputs["regressed"] == "true"
    assert (
        f"❌ **FAILED**: pass rate {PASSED / N:.2%} (−7.00 points since the baseline), gate 50.00%; regressed "
        "beyond the tolerance\n"
    ) in job_summary
    assert "| 🔻 -7.00 pt |" in job_summary and "CI" not in job_summary
    assert "Regression since the baseline: pass rate 81.00%25 → 74.00%25" in proc.stdout

    _, outputs, _ = _report(tmp_path, tmp_path / "nothing", EXIT_CODE="2")
    assert outputs["verdict"] == "" and outputs["passed"] == "false"


def test_too_few_cases_and_no_baseline_are_said_in_words() -> None:
    """A minimum detectable effect of 1.0 (no change could be significant) and an empty pairing are not "can
    detect changes of 100 points"; a regression rule without a baseline says nothing was compared."""
    few = _pass_test("inconclusive", worse=0, better=1, n=3).model_copy(update={"min_detectable_effect": 1.0})
    comparison = _comparison("inconclusive").model_copy(update={"pass_rate_test": few, "paired_cases": 3})
    assert "Inconclusive: 3 paired cases are too few for any change to be significant" in _render(comparison)
    nothing = Comparison(
        baseline="main", tolerance=0.01, verdict="inconclusive", paired_cases=0, new_cases=["a"], removed_cases=["b"]
    )
    assert "Inconclusive: no case is in both runs, so nothing was compared" in _render(nothing)
    md = _render(None, fail_on="either")
    assert "gate 50.00%; no baseline to compare with\n\n> ℹ️ No baseline to compare with" in md  # right under it
    console = Console(width=120, record=True, file=io.StringIO())
    print_summary(RunReport.of(_summary(), passed=True, min_pass_rate=0.5, fail_on="regression"), console=console)
    assert "required: no significant regression: no baseline to compare with)" in console.export_text()


def test_evaltasks_own_words_are_not_escaped_in_the_regressions() -> None:
    """summary.md read as plain text (an artifact preview, an editor): the verdict line and the tests' sentences
    are evaltasks' words and read as written; a metric's name (the suite's text) is still made inert."""
    import cmarkgfm

    comparison = _comparison("regressed")
    name = "Ref*Match*[x](https://evil.example)"
    comparison.metrics[0] = comparison.metrics[0].model_copy(update={"name": name})
    summary = _summary()
    summary.metrics = {
        name: summary.metrics["ReferenceMatchMetric"],
        "LengthCheckMetric": summary.metrics["LengthCheckMetric"],
    }
    md = _render(comparison, summary=summary)
    t = comparison.pass_rate_test
    points = f"{100 * t.delta:+.2f}".replace("-", "−")
    assert f"pass rate {t.current:.2%} ({points} points since the baseline)" in md.splitlines()[2]
    assert f"regressed since the baseline (p = {t.p_value:.2g})" in md.splitlines()[2]
    assert f"Overall pass rate on {N} paired cases: {t.baseline:.2%} → {t.current:.2%}, Δ {100 * t.delta:+.2f} pt" in md
    assert "| Ref\\*Match\\*\\[x\\]\\(https\\:\u200b//evil\\.example\\) | " in md
    html = cmarkgfm.github_flavored_markdown_to_html(md)
    assert "<a href" not in html and "<em>" not in html
