"""Paths of the checkout and the environment of the subprocesses the tests start (a CLI run, a server, a script).

Test modules import these as ``from tests.process_env import ...``; ``tests/conftest.py`` sets the test process's
own environment.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DIR = REPO_ROOT.parent / "shared"

_session_env: dict[str, str] | None = None


def session_env() -> dict[str, str]:
    """The test process's environment as ``tests/conftest.py`` set it, before any test changed it (a copy of the
    first call's ``os.environ``; conftest makes that call once the environment is set)."""
    global _session_env
    if _session_env is None:
        _session_env = dict(os.environ)
    return dict(_session_env)


def subprocess_env(prefect_home: Path, api_url: str | None = None) -> dict[str, str]:
    """The environment for a CLI or server subprocess: this process's, with its own PREFECT_HOME (and API URL,
    when given), no profile or result-storage overrides, no telemetry, offline Hugging Face."""
    env = dict(os.environ)
    for name in (
        "PREFECT_API_URL",
        "PREFECT_API_KEY",
        "PREFECT_PROFILE",
        "PREFECT_LOCAL_STORAGE_PATH",
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH",
    ):
        env.pop(name, None)
    env.update(
        {
            "PREFECT_HOME": str(prefect_home),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env
