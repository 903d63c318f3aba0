"""evaltasks inside someone else's flow (docs/prefect.md#prefect): the pipeline example, and a user's flow script gets
the CLI's Prefect defaults unless the user set their own."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # users' flow scripts in subprocesses, Prefect flow runs

ROOT = Path(__file__).resolve().parents[2]


def _load_example():
    spec = importlib.util.spec_from_file_location(
        "answer_and_evaluate", ROOT / "examples/pipeline/answer_and_evaluate.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("min_pass_rate", [0.75, 1.0])
def test_example_pipeline_branches_on_pass_rate(prefect_harness, cosine, tmp_path: Path, min_pass_rate: float) -> None:
    example = _load_example()
    outcome = example.answer_and_evaluate(min_pass_rate=min_pass_rate, output_dir=str(tmp_path))
    # Independently: a case passes when ReferenceMatch (max, clamped) >= 0.6 and it has <= 40 words.
    passed = 0
    for question, references in example.QUESTIONS.items():
        answer = example.CANNED_ANSWERS[question]
        score = float(np.clip(cosine(answer, references), 0, 1).max())
        passed += score >= 0.6 and len(answer.split()) <= 40
    expected_rate = passed / len(example.QUESTIONS)
    assert outcome["pass_rate"] == pytest.approx(expected_rate)
    assert expected_rate == 0.75  # the off-topic answer fails, the others pass
    assert outcome["passed"] is (expected_rate >= min_pass_rate)
    assert outcome["decision"].startswith("promoted" if expected_rate >= min_pass_rate else "incident opened")
    assert set(outcome["artifacts"]) == {"answer-and-evaluate-metrics", "answer-and-evaluate-summary"}
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["summary"]["pass_rate"] == pytest.approx(expected_rate)


# A user's own flow script: imports prefect first (as users do), then evaltasks.tasks; reads the effective
# settings back from Prefect before, after the import and inside the flow run (on the temporary server).
USER_FLOW_SCRIPT = """
import json, sys
import prefect
from prefect import flow
from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, get_current_settings

def effective():
    settings = get_current_settings()
    return {"timeout": PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value(),
            "analytics": settings.server.analytics_enabled}

before = effective()
from evaltasks import EvalTestCase, LengthCheckMetric
from evaltasks.tasks import evaluate_test_cases
after = effective()

@flow(name="users-own-flow")
def users_own_flow() -> dict:
    cases = [EvalTestCase(input="q", actual_output="one two three"), EvalTestCase(input="q", actual_output="a " * 9)]
    result = evaluate_test_cases(cases, [LengthCheckMetric(max_length=5, unit="words")])
    return {"in_flow": effective(), "pass_rate": result.summary.pass_rate}

outcome = users_own_flow() if sys.argv[1:] == ["run"] else {}
print(json.dumps({"before": before, "after": after, **outcome}))
"""


def _user_flow_env(prefect_home: Path) -> dict[str, str]:
    """This process's environment without the Prefect settings under test (conftest sets the timeout)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name
        not in (
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
            "PREFECT_SERVER_ANALYTICS_ENABLED",
            "PREFECT_API_URL",
            "PREFECT_PROFILE",
        )
    }
    env["PREFECT_HOME"] = str(prefect_home)
    return env


def test_users_flow_script_gets_the_clis_prefect_defaults(tmp_path: Path) -> None:
    """A plain Python flow using evaltasks.tasks, prefect imported first: Prefect's temporary server gets 120 s
    to start (not 20 s) and its analytics service (whose heartbeat failed with "database is locked") is off."""
    script = tmp_path / "my_flow.py"
    script.write_text(USER_FLOW_SCRIPT, encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(script), "run"],
        cwd=tmp_path,
        env=_user_flow_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    assert outcome["before"] == {"timeout": 20, "analytics": True}  # Prefect's own defaults
    assert outcome["after"] == {"timeout": 120, "analytics": False}
    assert outcome["in_flow"] == {"timeout": 120, "analytics": False}
    assert outcome["pass_rate"] == 0.5  # 3 words pass max_length 5, 9 words fail
    assert "Traceback" not in run.stderr and "database is locked" not in run.stderr, run.stderr[-3000:]


@pytest.mark.parametrize("where", ["environment", "profile"])
def test_users_own_prefect_settings_win(tmp_path: Path, where: str) -> None:
    """A timeout or analytics setting the user chose (environment variable or Prefect profile) is kept."""
    script = tmp_path / "my_flow.py"
    script.write_text(USER_FLOW_SCRIPT, encoding="utf-8")
    home = tmp_path / "home"
    env = _user_flow_env(home)
    if where == "environment":
        env.update(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="45", PREFECT_SERVER_ANALYTICS_ENABLED="true")
    else:
        home.mkdir()
        (home / "profiles.toml").write_text(
            'active = "mine"\n[profiles.mine]\nPREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS = "45"\n'
            'PREFECT_SERVER_ANALYTICS_ENABLED = "true"\n',
            encoding="utf-8",
        )
    run = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    assert outcome["before"] == outcome["after"] == {"timeout": 45, "analytics": True}
