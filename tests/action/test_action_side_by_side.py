"""The Action's report step (action/report.py, run as a runner runs it: a subprocess with GITHUB_STEP_SUMMARY,
GITHUB_OUTPUT and a real pull_request event) on a results.json of a two-target run: the job summary and the PR
comment's body show the targets side by side, read from results.json's ``side_by_side``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from evaltasks.reports import write_reports
from tests.process_env import REPO_ROOT
from tests.side_by_side_helpers import output, two_target_result

EVENT = REPO_ROOT / "tests" / "data" / "pull_request_event.json"


def test_the_job_summary_and_the_comment_show_the_targets_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "results"
    result = two_target_result(tmp_path / "index")
    header = {"schema_version": 2, "suite": "prompt-change", "passed": True, "gate": {"min_pass_rate": 0.0}}
    write_reports(out, result, header, passed=True, min_pass_rate=0.0)
    env = {**os.environ}
    for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        (tmp_path / name.lower()).write_text("")
        env[name] = str(tmp_path / name.lower())
    env.update(
        {
            "OUTPUT_DIR": str(out),
            "EXIT_CODE": "0",
            "SUITE": "suite.yaml",
            "SUITE_ID": "suite-0123abcd",
            "RUN_LOG": str(tmp_path / "run.log"),
            "COMMENT_BODY_FILE": str(tmp_path / "comment.md"),
            "GITHUB_EVENT_PATH": str(EVENT),
            "GITHUB_EVENT_NAME": "pull_request",
            "GITHUB_REPOSITORY": "example/evaltasks-demo",
            "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_RUN_ID": "4242",
        }
    )
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "action" / "report.py")], env=env, capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert b"::warning" not in proc.stdout  # the report was written, not the fallback
    summary = (tmp_path / "github_step_summary").read_text(encoding="utf-8")
    comment = (tmp_path / "comment.md").read_text(encoding="utf-8")
    side = json.loads((out / "results.json").read_text(encoding="utf-8"))["side_by_side"]
    p = side["targets"][1]["comparison"]["pass_rate_test"]["p_value"]
    for text in (summary, comment):
        assert "## Targets side by side" in text
        assert "- 🔻 **candidate**: worse than current: pass rate on 30 paired cases: 90.00% → 60.00%" in text
        assert f"p = {p:.4f} (exact McNemar; 10 worse, 1 better)" in text
        assert "### Cases the targets split (11)" in text
        assert f"  - ✅ **current** passed: {output('current', 1)}" in text
        assert "### candidate (against current)" in text
