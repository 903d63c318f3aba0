"""The action's install lock (action/lock/, action/lock.py) and the install step that uses it (action/install.sh).

The lock is checked as pip would after installing it (``pip check``): every ``Requires-Dist`` of every locked
distribution, of evaltasks (pyproject.toml as it is now) and of its build backend, under the lock's marker
environment and with the extras asked for, is satisfied by a locked version; the locked metadata is the real
one (compared with ``importlib.metadata`` wherever this environment has the same version installed).

install.sh runs for real except pip itself: a real install downloads ~1 GB from PyPI and the PyTorch index,
which no test can do offline. The interpreter it is given stands in for setup-python's: ``-m venv`` makes a
venv whose python records each ``pip`` command line (and succeeds), ``-m evaltasks --version`` prints a
version, and everything else (action/lock.py choosing the lock) runs in this real interpreter.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.process_env import REPO_ROOT

ACTION = REPO_ROOT / "action"
LOCKS = sorted((ACTION / "lock").glob("*.json"))
sys.path.insert(0, str(ACTION))
import lock as action_lock  # noqa: E402  (action/lock.py: standard library only, not a package)

LOCK_HERE = pytest.mark.skipif(
    f"{sys.version_info.major}.{sys.version_info.minor}" != "3.11" or sys.platform != "linux",
    reason="the lock here is for CPython 3.11 on Linux",
)


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _unsatisfied(lock: dict) -> list[str]:
    """Requirements of evaltasks (pyproject.toml now), its build backend and every locked distribution that no
    locked version satisfies, for the lock's marker environment; extras are followed."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    torch_version = lock["torch"]["requirement"].split("==", 1)[1]
    versions = {d["name"]: Version(d["version"]) for d in lock["dists"]} | {"torch": Version(torch_version)}
    requires = {d["name"]: d["requires_dist"] for d in lock["dists"]} | {"torch": None}
    env = lock["environment"]
    todo: list[tuple[str, str]] = [("evaltasks", r) for r in pyproject["project"]["dependencies"]]
    todo += [("build-system", r) for r in pyproject["build-system"]["requires"]]
    todo += [(name, r) for name, reqs in requires.items() for r in reqs or ()]
    problems, seen = [], set()
    while todo:
        owner, text = todo.pop()
        req = Requirement(text)
        _owner_name, _, extra = owner.partition("[")
        if req.marker is not None and not req.marker.evaluate({**env, "extra": extra.rstrip("]")}):
            continue
        name = canonicalize_name(req.name)
        if name not in versions:
            problems.append(f"{owner} requires {text}: {name} is not in the lock")
        elif not req.specifier.contains(versions[name], prereleases=True):
            problems.append(f"{owner} requires {text}: the lock has {versions[name]}")
        for wanted in req.extras:
            if (name, wanted) not in seen and requires.get(name) is not None:
                seen.add((name, wanted))
                todo += [
                    (f"{name}[{wanted}]", r) for r in requires[name] if "extra" in str(Requirement(r).marker or "")
                ]
    return problems


def test_a_lock_exists_for_the_actions_default_runner() -> None:
    """ubuntu-latest (x86_64 Linux) with the action's default python-version 3.11 installs from a lock."""
    assert [p.stem for p in LOCKS] == ["cp311-linux-x86_64"]


@pytest.mark.slow
@pytest.mark.parametrize("path", LOCKS, ids=[p.stem for p in LOCKS])
def test_the_lock_is_complete_and_consistent(path: Path) -> None:
    lock = _load(path)
    assert path.with_suffix(".txt").read_text(encoding="utf-8") == action_lock.render_requirements(lock)
    names = [d["name"] for d in lock["dists"]]
    assert len(names) == len(set(names)) and "evaltasks" not in names and "torch" not in names
    assert "setuptools" in names  # evaltasks is built from the checkout without an isolated build environment
    for dist in lock["dists"]:
        url = dist["url"]
        assert url.startswith("https://") and url.endswith(".whl"), url  # PyPI's files (or the torch index's)
        assert len(dist["sha256"]) == 64 and Version(dist["version"]) is not None
        assert canonicalize_name(url.rsplit("/", 1)[-1].split("-")[0]) == dist["name"], url
    assert lock["environment"]["python_version"] == lock["python"]
    assert _unsatisfied(lock) == []


@pytest.mark.slow
def test_a_missing_or_outdated_dependency_is_reported() -> None:
    """The completeness check itself: dropping a dependency or downgrading one is found."""
    lock = _load(LOCKS[0])
    lock["dists"] = [d for d in lock["dists"] if d["name"] != "jsonschema-specifications"]
    for dist in lock["dists"]:
        if dist["name"] == "pydantic-core":
            dist["version"] = "0.0.1"
    problems = _unsatisfied(lock)
    assert any("jsonschema-specifications is not in the lock" in p for p in problems), problems
    assert any(p.startswith("pydantic requires pydantic-core") and "the lock has 0.0.1" in p for p in problems)


def test_constraints_txt_pins_agree_with_the_lock() -> None:
    lines = [line.split("#")[0].strip() for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()]
    pins = [Requirement(line) for line in lines if line]
    assert pins, "constraints.txt pins nothing"
    for path in LOCKS:
        lock = _load(path)
        versions = {d["name"]: d["version"] for d in lock["dists"]}
        versions["torch"] = lock["torch"]["requirement"].split("==", 1)[1]
        for pin in pins:
            name = canonicalize_name(pin.name)
            assert name in versions and pin.specifier.contains(versions[name], prereleases=True), (pin, path.name)


def test_locked_metadata_is_what_the_distributions_declare() -> None:
    """Where this environment has a locked distribution at the locked version, its Requires-Dist and
    Requires-Python (importlib.metadata) are the ones the lock recorded from the resolution."""
    compared = 0
    for path in LOCKS:
        for dist in _load(path)["dists"]:
            try:
                installed = importlib.metadata.distribution(dist["name"])
            except importlib.metadata.PackageNotFoundError:
                continue
            if Version(installed.version) != Version(dist["version"]):
                continue
            compared += 1
            assert sorted(map(str, map(Requirement, installed.requires or []))) == sorted(
                map(str, map(Requirement, dist["requires_dist"]))
            ), dist["name"]
            assert (installed.metadata.get("Requires-Python") or "") == dist["requires_python"], dist["name"]
    assert compared >= 20  # the dev environment shares most versions with the lock


@LOCK_HERE
def test_select_finds_the_lock_for_this_interpreter_and_its_torch_pin() -> None:
    path, torch = action_lock.select()
    assert path == ACTION / "lock" / f"{action_lock.lock_name()}.txt" and path.is_file()
    assert torch == _load(path.with_suffix(".json"))["torch"]["requirement"] and torch.endswith("+cpu")


def test_select_refuses_a_lock_with_a_wheel_this_interpreter_cannot_install(tmp_path: Path) -> None:
    lock = _load(LOCKS[0])
    lock["dists"][0]["url"] = lock["dists"][0]["url"].rsplit("/", 1)[0] + "/x-1.0-cp399-cp399-win_arm64.whl"
    (tmp_path / f"{action_lock.lock_name()}.json").write_text(json.dumps(lock))
    with pytest.raises(LookupError, match="x-1.0-cp399-cp399-win_arm64.whl .* does not install on this interpreter"):
        action_lock.select(tmp_path)
    with pytest.raises(LookupError, match=f"no install lock for {action_lock.lock_name()}"):
        action_lock.select(tmp_path / "empty")


# --- install.sh -----------------------------------------------------------------------------------------------

FAKE_PYTHON = """#!/usr/bin/env bash
# setup-python's interpreter and the venv's: pip commands are recorded, the rest runs in the real interpreter
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  printf '%q ' "${@:3}" >> "$PIP_LOG"; echo >> "$PIP_LOG"
  if [ -n "${NO_TORCH:-}" ]; then case " $* " in *" torch=="*) exit 1 ;; esac; fi
  exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = "evaltasks" ]; then echo "evaltasks (stand-in)"; exit 0; fi
exec REAL_PYTHON "$@"
"""


def _install(tmp_path: Path, action_path: Path = REPO_ROOT, **env: str) -> tuple[str, list[list[str]], dict[str, str]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON.replace("REAL_PYTHON", shlex.quote(sys.executable)))
    fake.chmod(0o755)
    log, outputs = tmp_path / "pip.log", tmp_path / "outputs"
    log.touch()
    outputs.touch()
    full = {
        **os.environ,
        "BASE_PYTHON": str(fake),
        "VENV_DIR": str(tmp_path / "venv"),
        "PIP_LOG": str(log),
        "GITHUB_ACTION_PATH": str(action_path),
        "GITHUB_OUTPUT": str(outputs),
        "EVALTASKS_VERSION": "",
        "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cpu",
        "PIP_CACHE_DIR": str(tmp_path / "pip"),
        **env,
    }
    full.pop("EVALTASKS_ACTION_PYTHON", None)
    proc = subprocess.run(["bash", str(ACTION / "install.sh")], env=full, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    commands = [shlex.split(line) for line in log.read_text().splitlines()]
    return proc.stdout, commands, dict(line.split("=", 1) for line in outputs.read_text().splitlines())


@pytest.mark.slow
@LOCK_HERE
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_install_from_the_lock_resolves_nothing(tmp_path: Path, warm: bool) -> None:
    """pip download --no-deps fetches the locked files (torch from its index unless the restored cache has it),
    pip install --no-deps --no-index installs exactly those files, then the checkout: nothing is resolved."""
    txt = ACTION / "lock" / f"{action_lock.lock_name()}.txt"
    lock = _load(txt.with_suffix(".json"))
    torch = lock["torch"]["requirement"]
    wheels = tmp_path / "pip" / "lock-wheels"
    torch_file = wheels / f"torch-{torch.split('==')[1]}-cp311-cp311-manylinux_2_28_x86_64.whl"
    if warm:  # what the pip cache step restores
        wheels.mkdir(parents=True)
        torch_file.touch()
    log, commands, outputs = _install(tmp_path)
    opts = ["--disable-pip-version-check", "--progress-bar", "off", "--no-cache-dir", "--no-deps"]
    fetch = ["download", *opts, "--only-binary", ":all:", "-d", str(wheels)]
    files = [str(wheels / d["url"].rsplit("/", 1)[1]) for d in sorted(lock["dists"], key=lambda d: d["name"])]
    torch_arg = str(torch_file) if warm else str(wheels / f"torch-{torch.split('==')[1]}-*.whl")
    assert commands == [
        *([] if warm else [[*fetch, "--index-url", "https://download.pytorch.org/whl/cpu", torch]]),
        [*fetch, "--require-hashes", "-r", str(txt)],
        ["install", *opts, "--no-index", torch_arg, *files],
        ["install", *opts, "--no-index", "--no-build-isolation", str(REPO_ROOT)],
    ]
    assert len(files) == len(lock["dists"]) == len(set(files))
    assert "pip install --no-deps, nothing to resolve" in log and "no install lock applies" not in log
    assert outputs == {"python": str(tmp_path / "venv" / "bin" / "python"), "lock": str(txt)}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"EVALTASKS_VERSION": "0.1.0"}, "evaltasks-version is set"),
        ({"TORCH_INDEX_URL": ""}, "torch-index-url is empty"),
        (
            {"NO_TORCH": "1", "TORCH_INDEX_URL": "https://example.invalid/cu999"},
            "https://example.invalid/cu999 has no torch==",
        ),
        ({"LOCKLESS": "1"}, "no install lock for cp"),
    ],
)
def test_without_a_matching_lock_pip_resolves_as_before_and_the_log_says_why(
    tmp_path: Path, env: dict[str, str], why: str
) -> None:
    action_path = REPO_ROOT
    if env.pop("LOCKLESS", None):  # the action without locks: another Python or platform than any lock's
        action_path = tmp_path / "action-checkout"
        shutil.copytree(ACTION, action_path / "action", ignore=shutil.ignore_patterns("lock", "__pycache__"))
        for name in ("pyproject.toml", "constraints.txt"):
            shutil.copy(REPO_ROOT / name, action_path / name)
    log, commands, outputs = _install(tmp_path, action_path, **env)
    assert f"no install lock applies ({why}" in log and outputs["lock"] == ""
    resolving = [c for c in commands if "--no-deps" not in c]
    assert resolving and all(c[c.index("-c") + 1] == str(action_path / "constraints.txt") for c in resolving)
    target = f"evaltasks=={env['EVALTASKS_VERSION']}" if env.get("EVALTASKS_VERSION") else str(action_path)
    assert resolving[-1][-1] == target


def _prepare(tmp_path: Path, action_path: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "GITHUB_WORKSPACE": str(REPO_ROOT),
        "INPUT_SUITE": "examples/quickstart/suite.yaml",
        "RUNNER_OS": "Linux",
        "RUNNER_ARCH": "X64",
        "RUNNER_TEMP": str(tmp_path),
        "GITHUB_EVENT_NAME": "push",
        "GITHUB_ACTION_PATH": str(action_path),
        "INPUT_TORCH_INDEX_URL": "https://download.pytorch.org/whl/cpu",
        **extra,
    }
    env.pop("GITHUB_OUTPUT", None)
    if "EVALTASKS_ACTION_PYTHON" not in extra:
        env.pop("EVALTASKS_ACTION_PYTHON", None)
    out = subprocess.run(
        [sys.executable, str(action_path / "action" / "prepare.py")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line and not line.startswith("::"))


def _checkout(tmp_path: Path) -> Path:
    """A copy of what the action's checkout holds for the install: action/, pyproject.toml, constraints.txt and
    evaltasks' sources."""
    copy = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("action", "evaltasks", "flows"):
        shutil.copytree(REPO_ROOT / name, copy / name, ignore=ignore)
    for name in ("pyproject.toml", "constraints.txt"):
        shutil.copy(REPO_ROOT / name, copy / name)
    return copy


@pytest.mark.slow
def test_the_pip_cache_key_changes_with_the_lock(tmp_path: Path) -> None:
    copy = _checkout(tmp_path)
    before = _prepare(tmp_path, copy)["pip-key"]
    assert before == _prepare(tmp_path, REPO_ROOT)["pip-key"] and before.startswith("evaltasks-pip-Linux-X64-py")
    lock = next((copy / "action" / "lock").glob("*.txt"))
    lock.write_text(lock.read_text() + "# another lock\n")
    assert _prepare(tmp_path, copy)["pip-key"] != before


@pytest.mark.slow
@LOCK_HERE
def test_the_virtualenv_key_names_the_exact_python_and_hashes_the_lock_and_evaltasks_sources(tmp_path: Path) -> None:
    copy = _checkout(tmp_path)
    key = _prepare(tmp_path, copy)["venv-key"]
    assert key == _prepare(tmp_path, REPO_ROOT)["venv-key"]
    assert key.startswith(f"evaltasks-venv-Linux-X64-py{'.'.join(map(str, sys.version_info[:3]))}-")
    assert _prepare(tmp_path, copy, RUNNER_TEMP=str(tmp_path / "elsewhere"))["venv-key"] != key  # the venv's path
    lock = next((copy / "action" / "lock").glob("*.txt"))
    lock.write_text(lock.read_text() + "# another lock\n")
    after_lock = _prepare(tmp_path, copy)["venv-key"]
    source = copy / "evaltasks" / "metrics" / "__init__.py"
    source.write_text(source.read_text() + "\n# changed\n")
    after_source = _prepare(tmp_path, copy)["venv-key"]
    assert len({key, after_lock, after_source}) == 3
    # no lock applies: no virtualenv cache (a resolved install is not frozen)
    assert _prepare(tmp_path, copy, INPUT_EVALTASKS_VERSION="0.1.0")["venv-key"] == ""
    assert _prepare(tmp_path, copy, INPUT_TORCH_INDEX_URL="")["venv-key"] == ""
    assert _prepare(tmp_path, copy, EVALTASKS_ACTION_PYTHON=sys.executable)["venv-key"] == ""  # installs nothing
    shutil.rmtree(copy / "action" / "lock")
    assert _prepare(tmp_path, copy)["venv-key"] == ""


@pytest.mark.slow
def test_a_restored_virtualenv_is_used_without_installing_and_a_broken_one_is_replaced(tmp_path: Path) -> None:
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    fake = FAKE_PYTHON.replace("REAL_PYTHON", shlex.quote(sys.executable))
    (venv / "python").write_text(fake)
    (venv / "python").chmod(0o755)
    log, commands, outputs = _install(tmp_path / "restored", VENV_DIR=str(tmp_path / "venv"), VENV_RESTORED="true")
    assert commands == [] and "using the virtualenv restored from the cache" in log
    assert outputs == {"python": str(venv / "python"), "lock": ""}

    (venv / "python").write_text("#!/usr/bin/env bash\nexit 1\n")  # e.g. its interpreter is gone
    log, commands, outputs = _install(tmp_path / "broken", VENV_DIR=str(tmp_path / "venv"), VENV_RESTORED="true")
    assert "does not run evaltasks: installing anew" in log and commands and outputs["python"] == str(venv / "python")
