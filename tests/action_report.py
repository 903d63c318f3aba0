"""Running the Action's report step (``action/report.py``) as a runner runs it: a subprocess with
``GITHUB_STEP_SUMMARY``, ``GITHUB_OUTPUT`` and a real ``pull_request`` event, no comment posted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.process_env import REPO_ROOT

EVENT = REPO_ROOT / "tests" / "data" / "pull_request_event.json"


def run_action_report(tmp_path: Path, output_dir: Path, exit_code: int) -> tuple[str, str]:
    """``action/report.py`` on the reports in ``output_dir`` of a run that exited ``exit_code``.

    Returns (the job summary, the PR comment's body). Fails the test when the step fails or writes its fallback
    (a ``::warning``) instead of the report.
    """
    env = {**os.environ}
    for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        (tmp_path / name.lower()).write_text("")
        env[name] = str(tmp_path / name.lower())
    env.update(
        {
            "OUTPUT_DIR": str(output_dir),
            "EXIT_CODE": str(exit_code),
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
    return summary, (tmp_path / "comment.md").read_text(encoding="utf-8")
