"""Releases: one version source, the changelog, the release workflow and the Action's major tag.

The wheel itself is installed and run in tests/e2e/test_wheel.py; here the parts that need no build.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
from pathlib import Path

import pytest
import tomllib
import yaml

import evaltasks
from tests.process_env import REPO_ROOT

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "release.yml"


def _release() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def test_the_installed_version_is_the_packages_one_version() -> None:
    """pyproject declares the version dynamic, read from evaltasks/_version.py: the installed metadata agrees."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "evaltasks._version.__version__"}
    assert importlib.metadata.version("evaltasks") == evaltasks.__version__, (
        "metadata of an older install: pip install -e ."
    )
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?", evaltasks.__version__)


def test_the_changelog_has_an_unreleased_section_and_one_for_this_version() -> None:
    text = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[([^\]]+)\]", text, flags=re.M)
    assert headings[:2] == ["Unreleased", evaltasks.__version__], headings
    links = dict(re.findall(r"^\[([^\]]+)\]: (\S+)$", text, flags=re.M))
    assert set(headings) <= set(links), "every section heading has its link at the end"


def test_a_tag_builds_checks_publishes_with_trusted_publishing_then_moves_the_major_tag() -> None:
    workflow = _release()
    assert workflow[True] == {"push": {"tags": ["v*"]}}  # YAML 1.1 reads the key `on` as True
    assert workflow["permissions"] == {}
    jobs = workflow["jobs"]
    assert list(jobs) == ["build", "publish", "major-tag"]
    build = "\n".join(s.get("run", "") for s in jobs["build"]["steps"])
    assert "python -m build" in build and "twine check --strict dist/*" in build
    publish = jobs["publish"]
    assert publish["needs"] == "build" and publish["environment"]["name"] == "pypi"
    assert publish["permissions"] == {"id-token": "write"}
    uses = [s["uses"].split("@")[0] for s in publish["steps"]]
    assert uses == ["actions/download-artifact", "pypa/gh-action-pypi-publish"]
    assert not any("password" in s.get("with", {}) for s in publish["steps"]), "trusted publishing: no token"
    major = jobs["major-tag"]
    assert major["needs"] == ["build", "publish"] and major["permissions"] == {"contents": "write"}
    assert {name: job.get("permissions") for name, job in jobs.items()} == {
        "build": {"contents": "read"},
        "publish": {"id-token": "write"},
        "major-tag": {"contents": "write"},
    }


def test_every_action_the_release_uses_is_pinned_by_commit() -> None:
    for job in _release()["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                ref = step["uses"].split("@", 1)[1]
                assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{step['uses']} is not pinned by a commit sha"


@pytest.mark.parametrize(
    ("tag", "built", "changelog", "error", "output"),
    [
        ("v1.2.3", "1.2.3", "1.2.3", None, "major=v1\n"),
        ("v12.0.0", "12.0.0", "12.0.0", None, "major=v12\n"),
        ("v1.2.3rc1", "1.2.3rc1", "1.2.3rc1", None, ""),  # a pre-release is published, the major tag stays
        ("v1.2.4", "1.2.3", "1.2.4", "tag v1.2.4 does not match the package version", ""),  # publishes nothing
        ("v1.2.3", "1.2.3", "1.2.2", "CHANGELOG.md has no section for 1.2.3", ""),
    ],
)
def test_the_tag_must_be_the_package_version_and_names_the_major_tag(
    tmp_path: Path, tag: str, built: str, changelog: str, error: str | None, output: str
) -> None:
    """The build job's check step, run as a runner runs it (bash -eo pipefail, GITHUB_OUTPUT) on a dist/ folder
    and a changelog."""
    step = next(s for s in _release()["jobs"]["build"]["steps"] if s.get("id") == "check")
    (tmp_path / "CHANGELOG.md").write_text(f"# Changelog\n\n## [Unreleased]\n\n## [{changelog}] - 2026-01-01\n")
    (tmp_path / "dist").mkdir()
    for name in (f"evaltasks-{built}-py3-none-any.whl", f"evaltasks-{built}.tar.gz"):
        (tmp_path / "dist" / name).touch()
    github_output = tmp_path / "github-output"
    github_output.touch()
    proc = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=tmp_path,
        env={"TAG": tag, "GITHUB_OUTPUT": str(github_output), "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == (1 if error else 0), proc.stdout + proc.stderr
    assert github_output.read_text() == output
    if error:
        assert f"::error::{error}" in proc.stdout


def test_the_readmes_action_snippet_names_the_major_tag_of_this_version() -> None:
    """The README's (and the docs') workflows use the Action by the major tag the release workflow moves (v1 for
    1.x.y)."""
    pattern = re.compile(r"uses: evaltasks/evaltasks@(\S+)")
    readme = pattern.findall((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    docs = [
        ref for page in sorted((REPO_ROOT / "docs").rglob("*.md")) for ref in pattern.findall(page.read_text("utf-8"))
    ]
    assert readme and set(readme + docs) == {f"v{evaltasks.__version__.split('.')[0]}"}, (readme, docs)
