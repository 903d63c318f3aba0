"""Which events may run a pull request's code with the base repository's token and secrets (docs/action.md#trust-model).

``pull_request`` runs a pull request's code with a read-only token and, from a fork, no secrets: the safe
trigger. ``pull_request_target``, ``workflow_run`` and ``issue_comment`` run in the base repository's context
(a write token, its secrets and caches); once such a workflow checks out the pull request's code, the pull
request controls what runs there: the suite, its gate, the metric code, the prompts and the datasets
(GitHub, "Keeping your GitHub Actions and workflows secure: Preventing pwn requests",
https://securitylab.github.com/resources/github-actions-preventing-pwn-requests/).

:func:`privileged_checkout` tells, from the event payload and the commit checked out in the working directory
(``git rev-parse HEAD``), whether this is such a run. Standard library only (runs before evaltasks is installed).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

PRIVILEGED_EVENTS = ("workflow_run", "issue_comment")  # pull_request_target is refused outright (prepare.py)


def checked_out_commit(workdir: Path) -> str | None:
    """The commit checked out in ``workdir`` (``git rev-parse HEAD``), or None when git cannot tell (no git, not
    a repository)."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(workdir), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = proc.stdout.strip()
    return commit if proc.returncode == 0 and commit else None


def _full_name(repository: Any) -> str:
    return str(repository.get("full_name") or "") if isinstance(repository, dict) else ""


def privileged_checkout(
    event_name: str, event: dict[str, Any], workdir: Path, github_sha: str
) -> tuple[str, str] | None:
    """``("error", why)`` when a ``workflow_run`` or ``issue_comment`` run evaluates a pull request's code: a
    ``workflow_run`` of a fork's pull request with that pull request's head commit checked out, or an
    ``issue_comment`` on a pull request with another commit than ``github_sha`` (the default branch's, which
    is what GitHub checks out for that event) checked out. ``("warning", why)`` when such a run's checked-out
    commit cannot be told (no git). None for other events and for runs on the base repository's own code."""
    if event_name not in PRIVILEGED_EVENTS:
        return None
    if event_name == "workflow_run":
        run = event.get("workflow_run") if isinstance(event.get("workflow_run"), dict) else {}
        head_repo, base_repo = _full_name(run.get("head_repository")), _full_name(event.get("repository"))
        if not str(run.get("event", "")).startswith("pull_request") or not head_repo or head_repo == base_repo:
            return None  # not a pull request's run, or one from the base repository itself
        pr_commit, what = str(run.get("head_sha") or ""), f"the fork {head_repo}'s pull request"
    else:
        issue = event.get("issue") if isinstance(event.get("issue"), dict) else {}
        if not issue.get("pull_request"):
            return None  # a comment on an issue: no pull request's code
        pr_commit, what = "", "a pull request"
    commit = checked_out_commit(workdir)
    if commit is None:
        return (
            "warning",
            f"{event_name} runs with the base repository's token and secrets, and the commit checked "
            f"out in {workdir} cannot be told (no git): never check out {what}'s code in such a workflow "
            "(docs/action.md#trust-model)",
        )
    foreign = commit == pr_commit if event_name == "workflow_run" else bool(github_sha) and commit != github_sha
    if not foreign:
        return None
    return (
        "error",
        f"{event_name} runs with the base repository's token and secrets, and this workflow checked "
        f"out {what}'s code ({commit[:12]}): the pull request would control the suite, its gate, the metric "
        "code, the prompts and the datasets. Evaluate pull requests on pull_request, and comment on forks with "
        "the workflow_run pattern, which checks out no pull-request code (docs/action.md#trust-model)",
    )
