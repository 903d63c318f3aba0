"""The development loop of CONTRIBUTING.md: the pre-commit configuration runs the project's own ruff and mypy,
and the commands the page gives exist."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.process_env import REPO_ROOT

CONFIG = REPO_ROOT / ".pre-commit-config.yaml"


def _hooks() -> dict[str, dict]:
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    return {
        hook["id"]: {**hook, "repo": repo["repo"], "rev": repo.get("rev")}
        for repo in config["repos"]
        for hook in repo["hooks"]
    }


def test_pre_commit_runs_ruff_lint_and_format_pinned_and_mypy_from_the_venv() -> None:
    hooks = _hooks()
    assert {"ruff-check", "ruff-format", "mypy"} <= set(hooks)
    for name in ("ruff-check", "ruff-format"):
        assert hooks[name]["repo"] == "https://github.com/astral-sh/ruff-pre-commit"
        assert re.fullmatch(r"v\d+\.\d+\.\d+", hooks[name]["rev"]), hooks[name]["rev"]
    mypy = hooks["mypy"]
    assert mypy["repo"] == "local" and mypy["language"] == "system" and mypy["entry"] == ".venv/bin/mypy"
    assert mypy["pass_filenames"] is False  # pyproject's [tool.mypy] decides the files and the strictness


def test_the_pinned_ruff_is_the_one_installed_here() -> None:
    """The hook's ruff and the developer's ruff agree (else a commit and `ruff check` could judge differently)."""
    try:
        installed = importlib.metadata.version("ruff")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("ruff is not installed in this environment (CONTRIBUTING.md, 'Set up')")
    assert _hooks()["ruff-check"]["rev"] == f"v{installed}"


def test_pre_commit_accepts_the_configuration() -> None:
    tool = Path(sys.executable).parent / "pre-commit"
    if not tool.exists() and not shutil.which("pre-commit"):
        pytest.skip("pre-commit is not installed in this environment (CONTRIBUTING.md, 'Set up')")
    proc = subprocess.run(
        [str(tool) if tool.exists() else "pre-commit", "validate-config", str(CONFIG)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_contributing_names_commands_and_files_that_exist() -> None:
    text = (REPO_ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for path in (
        "constraints.txt",
        ".pre-commit-config.yaml",
        "bench/README.md",
        "evaltasks/_version.py",
        "CHANGELOG.md",
        ".github/workflows/release.yml",
        ".ci/run",
        "docs/performance.md",
    ):
        assert f"`{path}`" in text and (REPO_ROOT / path).exists(), path
    assert 'pytest -m "not slow"' in text
    extras = set(
        __import__("tomllib").loads((REPO_ROOT / "pyproject.toml").read_text("utf-8"))["project"][
            "optional-dependencies"
        ]
    )
    for group in re.findall(r'-e "?\.\[([a-z,]+)\]', text):
        assert set(group.split(",")) <= extras, group
