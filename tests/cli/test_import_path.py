"""Files in the working directory never replace evaltasks' modules (docs/metrics/custom.md#your-own-metrics).

``python -m`` puts the working directory first on ``sys.path``. Each test runs a real command in a folder that
holds a ``yaml.py`` which, when imported, appends the importing command line to a marker file and raises: so a
command that imported it leaves the marker (and fails). The commands: ``python -m evaltasks`` (and
``-m evaltasks.cli``), the Action's run step (``action/run.sh``, as a runner runs it), and a real run whose
Prefect temporary server (its own Python process, started by evaltasks) starts in that folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.process_env import REPO_ROOT, subprocess_env

pytestmark = pytest.mark.slow  # python -m evaltasks and Prefect's temporary server in fresh processes

DEADLINE_S = 600  # generous: the machine may be shared and busy
HOSTILE_YAML = """
import sys
with open({marker!r}, "a", encoding="utf-8") as handle:
    handle.write(" ".join(sys.orig_argv) + "\\n")
raise RuntimeError("yaml.py of the working directory was imported")
"""


def _hostile_folder(folder: Path) -> Path:
    """``folder`` with the hostile ``yaml.py``, a suite of one case (NonEmptyMetric: no model, no judge) and one
    whose dataset is missing; returns the marker's path (absent until a command imports the ``yaml.py``)."""
    marker = folder / "imported.txt"
    (folder / "yaml.py").write_text(HOSTILE_YAML.format(marker=str(marker)), encoding="utf-8")
    (folder / "cases.jsonl").write_text('{"id": "a", "input": "q", "actual_output": "an answer"}\n', encoding="utf-8")
    (folder / "suite.yaml").write_text(
        "name: tiny\ndataset: {path: cases.jsonl}\nmetrics: [{metric: NonEmptyMetric}]\n", encoding="utf-8"
    )
    (folder / "invalid.yaml").write_text(
        "name: invalid\ndataset: {path: missing.jsonl}\nmetrics: [{metric: NonEmptyMetric}]\n", encoding="utf-8"
    )
    return marker


@pytest.mark.parametrize("module", ["evaltasks", "evaltasks.cli"])
def test_python_m_evaltasks_does_not_import_from_the_working_directory(tmp_path: Path, module: str) -> None:
    """The suite is read with the installed PyYAML: the missing dataset is reported (exit 2), nothing else."""
    marker = _hostile_folder(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", module, "run", "invalid.yaml"],
        cwd=tmp_path,
        env=subprocess_env(tmp_path / "prefect-home"),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert not marker.exists(), marker.read_text()
    assert result.returncode == 2 and "missing.jsonl" in result.stderr, result.stderr


def test_the_actions_run_step_does_not_import_from_the_repository(tmp_path: Path) -> None:
    """``action/run.sh`` runs in the repository's checkout (the working directory): its ``yaml.py`` stays out."""
    marker = _hostile_folder(tmp_path)
    output = tmp_path / "github-output"
    output.write_text("")
    env = {
        **subprocess_env(tmp_path / "prefect-home"),
        "PYTHON": sys.executable,
        "SUITE": "invalid.yaml",
        "OUTPUT_DIR": str(tmp_path / "eval-results"),
        "REGRESSION_TOLERANCE": "0.01",
        "RUN_LOG": str(tmp_path / "run.log"),
        "GITHUB_OUTPUT": str(output),
    }
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "action" / "run.sh")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert not marker.exists(), marker.read_text()
    assert "exit-code=2" in output.read_text() and "missing.jsonl" in result.stdout, result.stdout


def test_the_temporary_prefect_server_does_not_import_from_the_working_directory(tmp_path: Path) -> None:
    """The ``evaltasks`` command keeps the working directory off its own path (its script's folder is first);
    Prefect's temporary server, started by the run in the same folder, must too: the run completes (exit 0,
    results.json) and nothing imported the ``yaml.py``."""
    command = Path(sys.executable).with_name("evaltasks")
    if not command.is_file():
        pytest.skip(f"no `evaltasks` command beside {sys.executable} (evaltasks is not installed in this environment)")
    marker = _hostile_folder(tmp_path)
    env = subprocess_env(tmp_path / "prefect-home")
    result = subprocess.run(
        [str(command), "run", "suite.yaml", "--output-dir", "out", "--no-server"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert not marker.exists(), marker.read_text()
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert results["passed"] is True and os.path.isfile(tmp_path / "out" / "junit.xml")
