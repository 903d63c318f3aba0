"""Step 1 of the action: validate the inputs and work out paths, cache keys and the fork mode.

Standard library only (runs before evaltasks is installed). Reads the inputs from ``INPUT_*`` environment
variables set by ``action.yml`` (never ``${{ }}`` inside a script), writes step outputs:

- ``suite-id``: ``[a-z0-9-]`` name of the suite within the repository (comment marker, cache and artifact keys);
- ``fork``: ``true`` for a pull request from a fork (read-only token, no secrets);
- ``pull-request``: ``true`` for a pull-request event;
- ``cache-dir``: where the reference index, the model cache and Prefect's result storage live;
- ``cache-key``/``cache-restore-keys``: the run's cache key and the prefixes to restore from;
- ``pip-cache-dir``/``pip-key``: pip's cache and its key (OS, architecture, Python, and a hash of the files the
  action installs from: pyproject.toml, constraints.txt and the install locks in ``action/lock/``);
- ``venv-dir``/``venv-key``: evaltasks' virtualenv and its cache key (``venv_key``; ``''``: not cached);
- ``baseline-file``: the baseline results.json to compare with ('' for none); ``baseline-auto``: ``true`` when it
  comes from the cache (a pull request: its base branch's last run; a push: the branch's previous run), restored
  into and saved from ``baseline-dir`` with ``baseline-restore-key``/``baseline-save-key`` (saved when
  ``save-baseline``: pushes, schedules and manual runs on a branch); both keys name the evaltasks version
  (:func:`evaltasks_version`), and ``baseline-restore-keys`` restores one of this version first, then of any;
- ``output-dir``: the reports directory (absolute): the input, else ``eval-results/<suite name>`` as ``evaltasks
  run`` picks it (:mod:`_reports_dir`).

A bad input prints an ``::error`` naming it and exits 1; so does a ``pull_request_target`` run, and a
``workflow_run`` or ``issue_comment`` run that checked out a pull request's code (:mod:`_trust`).
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lock  # noqa: E402
from _github import (  # noqa: E402
    annotate,
    append_summary,
    env_value,
    is_fork,
    load_event,
    markdown_text,
    pull_request,
    set_output,
    truthy,
)
from _reports_dir import default_reports_dir  # noqa: E402
from _trust import privileged_checkout  # noqa: E402

COMMENT_MODES = ("true", "false", "on-failure")


def suite_id(working_directory: str, suite: str) -> str:
    """A stable ``[a-z0-9-]`` id of a suite path within the repository: a readable slug plus 8 hex digits of
    the path's sha256 (two suites never share comments or caches)."""
    path = str(Path(working_directory or ".") / suite).replace("\\", "/")
    normalized = os.path.normpath(path).replace("\\", "/")
    slug = re.sub(r"[^a-z0-9]+", "-", Path(normalized).with_suffix("").as_posix().lower()).strip("-")[-40:]
    return f"{slug.strip('-') or 'suite'}-{hashlib.sha256(normalized.encode()).hexdigest()[:8]}"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def evaltasks_version(action_path: Path, env: dict[str, str]) -> str:
    """The evaltasks version step 2 installs (``install.sh``), for the baseline's cache key: the version that
    ``EVALTASKS_ACTION_PYTHON`` already has, else the ``evaltasks-version`` input, else the action checkout's
    ``evaltasks/_version.py``; ``unknown`` when it cannot be told. Characters other than ``[A-Za-z0-9._+-]`` become
    ``-``."""
    version = ""
    python = env.get("EVALTASKS_ACTION_PYTHON", "")
    if python:
        # sys.path[0] (the working directory, with -c) is dropped: the repository's files never stand in
        code = "import sys; del sys.path[0]; import evaltasks; print(evaltasks.__version__)"
        try:
            done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, check=False)
            version = done.stdout.strip() if done.returncode == 0 else ""
        except (OSError, subprocess.SubprocessError):
            version = ""
    elif env.get("INPUT_EVALTASKS_VERSION", "").strip():
        version = env["INPUT_EVALTASKS_VERSION"].strip().lstrip("=v")
    else:
        try:
            text = (action_path / "evaltasks" / "_version.py").read_text(encoding="utf-8")
        except OSError:
            text = ""
        found = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", text, re.MULTILINE)
        version = found.group(1) if found else ""
    return re.sub(r"[^A-Za-z0-9._+-]", "-", version)[:64] or "unknown"


def venv_key(
    action_path: Path, runner_os: str, arch: str, venv_dir: Path, evaltasks_version: str, torch_index_url: str
) -> str:
    """Cache key of the whole virtualenv install.sh builds from a lock: OS, architecture, the exact Python version,
    and a hash of the interpreter's path, the venv's path (a venv is not relocatable), the torch index, the lock
    and evaltasks' sources (pyproject.toml, evaltasks/, flows/: the venv holds evaltasks built from them).
    ``''`` when the install would not come from a lock (``evaltasks-version`` set, ``torch-index-url`` empty, no
    lock matching this interpreter): a resolved install is not cached as a virtualenv; ``''`` too when
    ``EVALTASKS_ACTION_PYTHON`` names a preinstalled evaltasks (nothing is installed)."""
    if evaltasks_version or not torch_index_url or env_value("EVALTASKS_ACTION_PYTHON"):
        return ""
    try:
        lock_txt, _ = lock.select(action_path / "action" / "lock")
    except LookupError:
        return ""
    digest = hashlib.sha256(f"{sys.executable}\0{venv_dir}\0{torch_index_url}\0".encode() + lock_txt.read_bytes())
    sources = [
        action_path / "pyproject.toml",
        *sorted(
            path
            for folder in ("evaltasks", "flows")
            for path in (action_path / folder).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        ),
    ]
    for path in sources:
        digest.update(path.relative_to(action_path).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return f"evaltasks-venv-{runner_os}-{arch}-py{platform.python_version()}-{digest.hexdigest()[:16]}"


def main() -> int:
    """Validate inputs and write the outputs listed in the module docstring; 0, or 1 for a bad input."""
    env = os.environ
    try:
        suite = env.get("INPUT_SUITE", "").strip()
        if not suite:
            raise ValueError("input 'suite' is required: the path of the suite YAML file")
        comment = env.get("INPUT_COMMENT", "true").strip().lower() or "true"
        if comment not in COMMENT_MODES:
            raise ValueError(f"input 'comment' must be one of {', '.join(COMMENT_MODES)}, got {comment!r}")
        # an empty input (e.g. an empty ${{ vars.X }}) is an unset one: its default, never "false"
        fail_on_gate = truthy(env_value("INPUT_FAIL_ON_GATE", "true"), "fail-on-gate")
        cache = truthy(env_value("INPUT_CACHE", "true"), "cache")
        tolerance = env.get("INPUT_REGRESSION_TOLERANCE", "0.01").strip() or "0.01"
        try:
            if not 0.0 <= float(tolerance) <= 1.0:
                raise ValueError
        except ValueError:
            raise ValueError(f"input 'regression-tolerance' must be a number in [0, 1], got {tolerance!r}") from None
        skip = env.get("INPUT_SKIP_MISSING_CREDENTIALS", "auto").strip().lower() or "auto"
        if skip != "auto":
            skip = "true" if truthy(skip, "skip-missing-credentials") else "false"
        if env.get("GITHUB_EVENT_NAME") == "pull_request_target":
            raise ValueError(
                "pull_request_target runs untrusted pull-request code with a write token and the base branch's "
                "caches: use pull_request, and the workflow_run pattern to comment on forks (see the evaltasks docs, docs/action.md#trust-model)"
            )
    except ValueError as exc:
        annotate("error", str(exc), title="evaltasks: invalid input")
        append_summary(f"# evaltasks\n\n❌ **Invalid action input**: {markdown_text(str(exc))}\n")
        return 1

    workspace = Path(env.get("GITHUB_WORKSPACE") or os.getcwd())
    working_directory = env.get("INPUT_WORKING_DIRECTORY", "").strip() or "."
    workdir = (workspace / working_directory).resolve()
    if not workdir.is_dir():
        annotate("error", f"input 'working-directory': {working_directory} is not a directory", title="evaltasks")
        return 1
    event = load_event()
    event_name = env_value("GITHUB_EVENT_NAME")
    trust = privileged_checkout(event_name, event, workdir, env_value("GITHUB_SHA"))
    if trust is not None:  # docs/action.md#trust-model: a pull request's code with the base repository's secrets
        annotate(trust[0], trust[1], title="evaltasks: untrusted code in a privileged workflow")
        if trust[0] == "error":
            append_summary(f"# evaltasks\n\n❌ **Refused**: {markdown_text(trust[1])}\n")
            return 1
    pr = pull_request(event) if event_name in ("pull_request", "pull_request_target") else None
    fork = is_fork(event) if pr is not None else False
    runner_os = env_value("RUNNER_OS", sys.platform)
    temp = Path(env.get("RUNNER_TEMP") or (workspace / ".evaltasks-action")).resolve()
    sid = suite_id(working_directory, suite)
    run = f"{env_value('GITHUB_RUN_ID', 'local')}-{env_value('GITHUB_RUN_ATTEMPT', '1')}"

    action_path = Path(env.get("GITHUB_ACTION_PATH") or Path(__file__).resolve().parent.parent)
    # the install lock (action/lock/*.txt) names every wheel pip fetches: a new lock is a new pip cache
    shipped = b"".join(
        path.read_bytes()
        for path in [
            action_path / "pyproject.toml",
            action_path / "constraints.txt",
            *sorted((action_path / "action" / "lock").glob("*.txt")),
        ]
        if path.exists()
    )
    pip_hash = hashlib.sha256(
        shipped + env.get("INPUT_EVALTASKS_VERSION", "").encode() + env.get("INPUT_TORCH_INDEX_URL", "").encode()
    ).hexdigest()[:16]
    python_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    arch = env_value("RUNNER_ARCH", platform.machine())
    venv_dir = temp / "evaltasks-venv"

    ref_name = env.get("GITHUB_REF_NAME", "")
    # A pull request compares with its base branch; a push with the same branch's previous run.
    base_ref = (((pr or {}).get("base") or {}).get("ref") or env.get("GITHUB_BASE_REF", "")) if pr else ref_name
    baseline_input = env_value("INPUT_BASELINE", "auto")
    if baseline_input.lower() in ("auto", "none", "false"):
        baseline_input = baseline_input.lower()
    baseline_dir = temp / "evaltasks-baseline" / sid
    if baseline_input == "auto":
        baseline_file = str(baseline_dir / "results.json")
    elif baseline_input in ("none", "false"):
        baseline_file = ""
    else:
        baseline_file = str((workdir / baseline_input).resolve())
    save_baseline = event_name in ("push", "schedule", "workflow_dispatch") and env.get("GITHUB_REF", "").startswith(
        "refs/heads/"
    )
    # default: the folder `evaltasks run` picks, eval-results/<suite name> (docs/cli.md#cli)
    output_dir = (workdir / (env.get("INPUT_OUTPUT_DIR", "").strip() or default_reports_dir(workdir / suite))).resolve()
    # the baseline's cache key names the evaltasks version that wrote it: a pull request restores one of its own
    # version first, then the newest of any version (action/baseline.py checks it; one it cannot read is a warning)
    version = evaltasks_version(action_path, env)
    base_prefix = f"evaltasks-baseline-{runner_os}-{sid}-b{_short_hash(base_ref)}-"

    outputs = {
        "suite-id": sid,
        "fork": "true" if fork else "false",
        "pull-request": "true" if pr is not None else "false",
        "pr-number": str((pr or {}).get("number", "")),
        "skip-missing-credentials": "true" if skip == "true" or (skip == "auto" and fork) else "false",
        "comment": comment,
        "fail-on-gate": "true" if fail_on_gate else "false",
        "baseline-label": (f"the last results of {base_ref}" if baseline_input == "auto" else baseline_input),
        "cache": "true" if cache else "false",
        "regression-tolerance": tolerance,
        "workdir": str(workdir),
        "output-dir": str(output_dir),
        "cache-dir": str(temp / "evaltasks-cache"),
        "cache-key": f"evaltasks-cache-{runner_os}-{sid}-{run}",
        "cache-restore-keys": f"evaltasks-cache-{runner_os}-{sid}-\nevaltasks-cache-{runner_os}-",
        "pip-cache-dir": str(temp / "evaltasks-pip-cache"),
        "pip-key": f"evaltasks-pip-{runner_os}-{arch}-py{python_version}-{pip_hash}",
        "venv-dir": str(venv_dir),
        "venv-key": venv_key(
            action_path,
            runner_os,
            arch,
            venv_dir,
            env_value("INPUT_EVALTASKS_VERSION"),
            env_value("INPUT_TORCH_INDEX_URL"),
        ),
        "baseline-file": baseline_file,
        "baseline-auto": "true" if baseline_input == "auto" else "false",
        "baseline-dir": str(baseline_dir),
        "baseline-restore-key": f"{base_prefix}v{version}-",
        "baseline-restore-keys": f"{base_prefix}v{version}-\n{base_prefix}",
        "save-baseline": "true" if save_baseline else "false",
        "baseline-save-key": f"evaltasks-baseline-{runner_os}-{sid}-b{_short_hash(ref_name)}-v{version}-{run}",
        "artifact-name": env.get("INPUT_ARTIFACT_NAME", "").strip()
        or (
            f"evaltasks-{sid}-{runner_os.lower()}-{env_value('GITHUB_JOB', 'job')}-py{env_value('INPUT_PYTHON_VERSION', '3.11')}"
        ),
    }
    for name, value in outputs.items():
        set_output(name, value)
    if fork:
        annotate(
            "notice",
            "Pull request from a fork: the token is read-only and secrets are unavailable; metrics "
            "without credentials are skipped and no comment is posted.",
            title="evaltasks",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
