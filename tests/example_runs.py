"""Running an example's suite the way its README does: ``evaltasks run SUITE`` in a subprocess (a user's
environment, a Prefect home of the test's own, the session's Prefect server), for the examples' end-to-end tests."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.cli_forkserver import run_cli
from tests.process_env import subprocess_env


def run_example_suite(
    suite: Path,
    tmp_path: Path,
    api_url: str,
    out: str,
    *extra: str,
    env: Mapping[str, str] | None = None,
    drop_env: tuple[str, ...] = (),
) -> tuple[int, dict[str, Any], str]:
    """``evaltasks run SUITE --output-dir OUT --quiet --index-dir TMP/index EXTRA...`` from ``tmp_path``.

    Args:
        suite: the suite file (usually a copy of an example's in ``tmp_path``).
        tmp_path: the test's folder: the run's working directory, its Prefect home and its index.
        api_url: the Prefect API the run reports to (the session's server: ``prefect_api_url``).
        out: the output directory, relative to ``tmp_path``.
        extra: more CLI arguments.
        env: variables added to the run's environment (e.g. ``OPENAI_BASE_URL``).
        drop_env: variables removed from it.

    Returns:
        (exit status, results.json parsed, stdout + stderr). Fails the test when no results.json was written.
    """
    run_env = subprocess_env(tmp_path / "prefect-home", api_url)
    run_env.update(env or {})
    for name in drop_env:
        run_env.pop(name, None)
    proc = run_cli(
        "run",
        str(suite),
        "--output-dir",
        out,
        "--quiet",
        "--index-dir",
        str(tmp_path / "index"),
        *extra,
        cwd=tmp_path,
        env=run_env,
    )
    results = tmp_path / out / "results.json"
    assert results.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.returncode, json.loads(results.read_text(encoding="utf-8")), proc.stdout + proc.stderr
