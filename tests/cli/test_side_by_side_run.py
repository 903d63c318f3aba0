"""End to end: ``evaltasks run`` on a suite with two python targets (real callables in the suite's folder),
generated, scored and compared side by side through the real flow on the session's Prefect server. The terminal,
results.json and summary.md show each target against the first; the McNemar p-value is statsmodels'."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.weightstats import DescrStatsW

from evaltasks.engine.side_by_side import SideBySide

CASES = 24
BOT = """
def _n(case):
    return int(case.vars["n"])  # the dataset row's column

def current(case):
    return "yes" if _n(case) % 8 else "no, and a much longer answer than allowed"

def candidate(case):
    return "yes" if _n(case) >= 9 else "no, and a much longer answer than allowed"
"""


@pytest.mark.slow
def test_a_run_with_two_targets_reports_them_side_by_side(tmp_path: Path, prefect_api_url: str) -> None:
    """current fails cases 0, 8, 16; candidate fails 0–8: 7 cases pass on current and fail on candidate (1–7), 1 the
    reverse (16). Everything the run reports of the comparison agrees with statsmodels' exact McNemar on that table."""
    (tmp_path / "sbs_bot.py").write_text(BOT, encoding="utf-8")
    rows = [{"id": f"c{n}", "input": f"question {n}", "n": n} for n in range(CASES)]  # no actual_output: generated
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "suite.yaml").write_text(
        "name: sbs-e2e\ndataset:\n  path: d.jsonl\n"
        "targets:\n  - {name: current, python: 'sbs_bot:current'}\n  - {name: candidate, python: 'sbs_bot:candidate'}\n"
        "metrics:\n  - metric: LengthCheckMetric\n    max_length: 3\n    unit: words\ngate: {min_pass_rate: 0}\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k != "EVALTASKS_INDEX_DIR"}
    env.update(PREFECT_API_URL=prefect_api_url, PREFECT_HOME=str(tmp_path / "ph"), HF_HUB_OFFLINE="1", COLUMNS="120")
    proc = subprocess.run(
        [sys.executable, "-m", "evaltasks", "run", "suite.yaml", "--output-dir", "out", "--index-dir", "idx"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    side = SideBySide.model_validate(results["side_by_side"])
    assert [v.target.name for v in side.targets] == ["current", "candidate"]
    assert [t["name"] for t in results["targets"]] == ["current", "candidate"]

    current_fails, candidate_fails = {0, 8, 16}, set(range(9))
    worse, better = len(candidate_fails - current_fails), len(current_fails - candidate_fails)
    both = len(current_fails & candidate_fails)
    table = [[CASES - worse - better - both, worse], [better, both]]
    expected = mcnemar(table, exact=True).pvalue
    comparison = side.targets[1].comparison
    assert comparison is not None and comparison.pass_rate_test is not None
    test = comparison.pass_rate_test
    assert (test.worse, test.better, test.paired_cases) == (7, 1, CASES)
    assert test.p_value == pytest.approx(expected, rel=1e-12)
    # p = 0.0703 (2 × 9 / 256) is not below 0.05, and 24 paired cases cannot detect under 6 discordant ones (25 points)
    assert expected == pytest.approx(18 / 256) and test.verdict == "inconclusive"
    assert test.min_detectable_effect == pytest.approx(6 / CASES)
    # the mean-score test: statsmodels' paired t on the per-case score differences read from results.json's cases
    scores: dict[str, dict[str, float]] = {"current": {}, "candidate": {}}
    for case in results["cases"]:
        scores[case["generation"]["target"]][case["id"]] = case["metrics"][0]["score"]
    diff = np.array([scores["candidate"][i] - scores["current"][i] for i in scores["current"]])
    metric = comparison.metrics[0]
    assert metric.score_test is not None and metric.score_test.test == "paired t"
    assert metric.score_test.delta == pytest.approx(diff.mean(), abs=1e-12)
    p_t = DescrStatsW(diff).ttest_mean(0.0)[1]
    assert metric.score_test.p_value == pytest.approx(p_t, rel=1e-9)
    # 7 cases scored 1 → 0, 1 case 0 → 1: Δ -0.25, p = 0.031 < 0.05: the candidate regressed on mean score
    assert diff.mean() == pytest.approx(-0.25) and p_t < 0.05
    assert metric.score_test.verdict == "regressed" and side.verdict == comparison.verdict == "regressed"
    assert side.split_cases == worse + better
    answers = {s.case_id: [(a.target, a.status, a.output) for a in s.answers] for s in side.splits}
    assert answers["c3"] == [
        ("current", "passed", "yes"),
        ("candidate", "failed", "no, and a much longer answer than allowed"),
    ]

    md = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "## Targets side by side" in md and f"p = {expected:.4f} (exact McNemar; 7 worse, 1 better)" in md
    assert "- 🔻 **candidate**: worse than current: pass rate on 24 paired cases: 87.50% → 62.50%" in md
    assert "### current (the reference)" in md and "### candidate (against current)" in md
    assert "targets side by side: each compared with current (the first)" in proc.stdout
    assert "cases the targets split: 8" in proc.stdout
    # the terminal names the split cases (read from results.json: the flow's outcome leaves them out)
    split_lines = [line for line in proc.stdout.splitlines() if "current passed · candidate failed" in line]
    assert len(split_lines) == worse and any("c3" in line for line in split_lines), proc.stdout
