"""Helpers for judge metrics in whole runs: a suite of judged cases, the real CLI in a subprocess, its environment
and its results.

The judge is ``tests/judge_metric.py:VerdictMetric`` answered by the loopback chat server (tests/chat_server.py)
through the real openai SDK; a run's subprocess imports both from this folder (``PYTHONPATH``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.cli_forkserver import run_cli
from tests.process_env import subprocess_env

TESTS = Path(__file__).resolve().parent
PYTHONPATH = os.pathsep.join([str(TESTS), str(TESTS.parent)])  # judge_metric, chat_server, this checkout
CLI_TIMEOUT = 600
JUDGE_MODEL = "judge-model"
KEY = "sk-test-chat-server"


def write_suite(
    folder: Path, metrics: list[dict[str, Any]], judge: dict[str, Any] | None = None, cases: int = 6
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"input": f"question {i}", "actual_output": f"answer {i}"} for i in range(cases)]
    (folder / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in rows), encoding="utf-8")
    suite: dict[str, Any] = {
        "name": "judged",
        "dataset": {"path": "cases.jsonl"},
        "metrics": metrics,
        "gate": {"min_pass_rate": 0.5},
    }
    if judge is not None:
        suite["judge"] = judge
    path = folder / "suite.yaml"
    path.write_text(json.dumps(suite), encoding="utf-8")  # JSON is YAML
    return path


def run_judged_cli(tmp_path: Path, suite: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["run", str(suite), "--output-dir", str(tmp_path / "out"), "--index-dir", str(tmp_path / "index")]
    return run_cli(*args, "--quiet", *extra, env=env, cwd=tmp_path, timeout=CLI_TIMEOUT)


def judge_env(tmp_path: Path, prefect_api_url: str, base_url: str, key: str = KEY) -> dict[str, str]:
    return {
        **subprocess_env(tmp_path / "prefect-home", prefect_api_url),
        "PYTHONPATH": PYTHONPATH,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": key,
    }


def read_results(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))


def passing_answer(request: Any) -> Any:
    from tests.chat_server import Answer
    from tests.judge_metric import MAX_TOKENS

    return Answer(text='{"score": 1, "reason": "fine"}', completion_tokens=MAX_TOKENS)
