"""The Action's report step (action/report.py, run as a runner runs it: a subprocess with GITHUB_STEP_SUMMARY,
GITHUB_OUTPUT and a real pull_request event) on a results.json of a two-target run: the job summary and the PR
comment's body show the targets side by side, read from results.json's ``side_by_side``."""

from __future__ import annotations

import json
from pathlib import Path

from evaltasks.reports import write_reports
from tests.action_report import run_action_report
from tests.side_by_side_helpers import output, two_target_result


def test_the_job_summary_and_the_comment_show_the_targets_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "results"
    result = two_target_result(tmp_path / "index")
    header = {"schema_version": 2, "suite": "prompt-change", "passed": True, "gate": {"min_pass_rate": 0.0}}
    write_reports(out, result, header, passed=True, min_pass_rate=0.0)
    summary, comment = run_action_report(tmp_path, out, exit_code=0)
    side = json.loads((out / "results.json").read_text(encoding="utf-8"))["side_by_side"]
    p = side["targets"][1]["comparison"]["pass_rate_test"]["p_value"]
    for text in (summary, comment):
        assert "## Targets side by side" in text
        assert "- 🔻 **candidate**: worse than current: pass rate on 30 paired cases: 90.00% → 60.00%" in text
        assert f"p = {p:.4f} (exact McNemar; 10 worse, 1 better)" in text
        assert "### Cases the targets split (11)" in text
        assert f"  - ✅ **current** passed: {output('current', 1)}" in text
        assert "### candidate (against current)" in text
