"""The built wheel installs into a fresh virtualenv and runs the quickstart, with no checkout in sight.

What is installed: in ``.ci/run``, the release artifacts it built with ``python -m build`` (an sdist, then the
wheel from that sdist) and checked with ``twine check``, passed in ``EVALTASKS_DIST_DIR``: the very wheel a
release would publish. Without that variable, a wheel built here from a copy of the sources by ``pip wheel``
(setuptools as installed, nothing downloaded), as a developer's ``pip install -e ".[test]"`` environment allows.

How the fresh virtualenv gets its third-party dependencies, and why that is still honest: installing torch,
Prefect and the rest from the package index into a new virtualenv costs minutes and needs the network, so the
dependencies are lent, read-only, from the environment running the tests:

1. ``python -m venv --without-pip`` creates the virtualenv: no system or test-environment site-packages
   (``--system-site-packages`` would not be fresh).
2. Every ``Requires-Dist`` the wheel declares (markers evaluated, extras left out) must be installed in the test
   environment at a version the specifier accepts; the test fails otherwise, so the wheel's metadata is checked
   rather than assumed.
3. A folder of symlinks to the test environment's site-packages entries, *without* anything of evaltasks (its
   dist-info and the editable install's finder and ``.pth``), is put on the fresh virtualenv's path by one ``.pth``
   line. Python processes ``.pth`` files only in site directories, so the editable install cannot come back
   through that folder.
4. pip installs the wheel itself with ``--no-deps`` into the fresh virtualenv, then ``pip check`` there confirms
   that every installed distribution's requirements, the wheel's included, are met.

The quickstart runs from a temporary copy of ``examples/quickstart``, outside the checkout, through the
virtualenv's own ``evaltasks`` script; the test asserts that ``evaltasks`` and ``evaltasks.flows`` were imported
from the virtualenv, that the installed version is the wheel's, and that the run wrote ``results.json``.
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

from tests.process_env import REPO_ROOT, subprocess_env

pytestmark = pytest.mark.slow

# What a build reads: the package, the flows it installs as evaltasks.flows, and the metadata files.
_SOURCES = ("evaltasks", "flows", "pyproject.toml", "README.md", "CHANGELOG.md", "MANIFEST.in")
# Entries of the test environment's site-packages the fresh virtualenv must not see: evaltasks itself.
_OWN = ("evaltasks", "__editable__", "__editable___evaltasks")


def _build(tmp_path: Path) -> tuple[Path, Path | None]:
    """The wheel and sdist of ``EVALTASKS_DIST_DIR`` (.ci/run), else a wheel built here from a source copy."""
    given = os.environ.get("EVALTASKS_DIST_DIR")
    if given:
        dist = Path(given)
        wheels, sdists = sorted(dist.glob("evaltasks-*.whl")), sorted(dist.glob("evaltasks-*.tar.gz"))
        assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in dist.iterdir())
        return wheels[0], sdists[0]
    src, dist = tmp_path / "src", tmp_path / "dist"
    src.mkdir()
    for name in _SOURCES:
        path = REPO_ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(dist),
            str(src),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = dist.glob("evaltasks-*.whl")
    return wheel, None


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(archive.read(name).decode("utf-8"))


def _unmet_requirements(metadata: email.message.Message) -> list[str]:
    """The wheel's run-time requirements (no extras) that the test environment does not satisfy."""
    unmet = []
    environment = {**default_environment(), "extra": ""}
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        try:
            installed = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            unmet.append(f"{line} (not installed)")
            continue
        if not requirement.specifier.contains(Version(installed), prereleases=True):
            unmet.append(f"{line} (installed {installed})")
    return unmet


def _lend_dependencies(venv: Path, view: Path) -> None:
    """Put symlinks to the test environment's site-packages, evaltasks left out, on ``venv``'s path."""
    view.mkdir()
    for site in dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]):
        for entry in Path(site).iterdir():
            if entry.name.startswith(_OWN) or entry.suffix == ".pth" or (view / entry.name).exists():
                continue
            (view / entry.name).symlink_to(entry)
    fresh_site = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert not any(Path(p).samefile(fresh_site) for p in sysconfig.get_paths().values() if Path(p).exists())
    (Path(fresh_site) / "lent-dependencies.pth").write_text(f"{view}\n", encoding="utf-8")


def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_quickstart(tmp_path: Path) -> None:
    wheel, sdist = _build(tmp_path)
    metadata = _metadata(wheel)
    import evaltasks

    assert metadata["Version"] == evaltasks.__version__
    assert _unmet_requirements(metadata) == []
    with zipfile.ZipFile(wheel) as archive:  # the data a run reads beside the code
        names = set(archive.namelist())
    assert {
        "evaltasks/schema/suite.schema.json",
        "evaltasks/schema/results.schema.json",
        "evaltasks/py.typed",
        "evaltasks/flows/evaluate_suite.py",
    } <= names
    assert any(n.startswith("evaltasks/judges/prompts/") and n.endswith(".md") for n in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    _lend_dependencies(venv, tmp_path / "lent")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check"]
    proc = subprocess.run([*pip, "install", "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([*pip, "check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    work = tmp_path / "work"
    shutil.copytree(REPO_ROOT / "examples" / "quickstart", work / "quickstart")
    env = subprocess_env(tmp_path / "prefect-home")
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(name, None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    probe = (
        "import importlib, importlib.metadata, json, evaltasks; f = importlib.import_module('evaltasks.flows.evaluate_suite'); "
        "print(json.dumps([evaltasks.__file__, f.__file__, evaltasks.__version__, importlib.metadata.version('evaltasks')]))"
    )
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe], cwd=work, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    package, flows, version, installed = json.loads(proc.stdout)
    assert Path(package).is_relative_to(venv) and Path(flows).is_relative_to(venv), (package, flows)
    assert version == installed == metadata["Version"]

    proc = subprocess.run(
        [str(venv / "bin" / "evaltasks"), "run", "suite.yaml"],
        cwd=work / "quickstart",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    results = json.loads((work / "quickstart" / "eval-results" / "quickstart" / "results.json").read_text("utf-8"))
    assert results["evaltasks_version"] == metadata["Version"]
    assert results["passed"] is True
    assert [c["id"] for c in results["cases"]] and len(results["cases"]) == 8
    assert "GATE PASSED" in proc.stdout
    if sdist is not None:
        assert sdist.name == f"evaltasks-{metadata['Version']}.tar.gz"
