"""What the action's scripts share: GitHub Actions workflow commands, step outputs, the event payload.

Standard library only: ``prepare.py`` runs before evaltasks is installed.
References: GitHub Docs, "Workflow commands for GitHub Actions" (``::error``, escaping of data and properties,
``$GITHUB_OUTPUT`` multiline delimiters, ``$GITHUB_STEP_SUMMARY``) and "Webhook events and payloads"
(``pull_request``).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

PULL_REQUEST_EVENTS = ("pull_request", "pull_request_target")


def markdown_text(text: str) -> str:
    """``text`` made inert in markdown with the standard library only (this module runs before evaltasks is
    installed): markdown/HTML punctuation backslash-escaped, a zero-width space after ``@``."""
    import re

    return re.sub(r"([\\`*_{}\[\]()<>#+\-!|~:&.=$^\"])", r"\\\1", " ".join(text.split())).replace("@", "@\u200b")


def env_value(name: str, default: str = "") -> str:
    """``$name`` with surrounding whitespace stripped, or ``default`` when it is unset or empty: an empty
    ``${{ vars.X }}`` or input reaches a step as an empty variable and means "not set", never a blank value."""
    return os.environ.get(name, "").strip() or default


def command_data(text: str) -> str:
    """``text`` escaped as the message of a workflow command (``%``, CR, LF), so it cannot end the command
    or start a new one."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def command_property(text: str) -> str:
    """``text`` escaped as a workflow command property value (``title=``): data escapes plus ``:`` and ``,``."""
    return command_data(text).replace(":", "%3A").replace(",", "%2C")


def annotate(level: str, message: str, title: str | None = None) -> None:
    """Print an ``::error``/``::warning``/``::notice`` annotation (``level``); message and title escaped."""
    if level not in ("error", "warning", "notice"):
        raise ValueError(f"unknown annotation level {level!r}")
    props = f" title={command_property(title)}" if title else ""
    line = f"::{level}{props}::{command_data(message)}\n"
    # bytes, UTF-8: a Windows runner's console encoding (cp1252) cannot print "→" and would crash the step
    sys.stdout.flush()
    sys.stdout.buffer.write(line.encode("utf-8"))
    sys.stdout.buffer.flush()


def set_output(name: str, value: str) -> None:
    """Append ``name`` = ``value`` to ``$GITHUB_OUTPUT`` with a random heredoc delimiter (multiline-safe: the
    value cannot contain the delimiter). Without ``$GITHUB_OUTPUT`` (a local run) print ``name=value``."""
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        print(f"{name}={value}")
        return
    delimiter = f"ghadelimiter_{uuid.uuid4()}"
    while delimiter in value:  # pragma: no cover - a uuid4 in the value is astronomically unlikely
        delimiter = f"ghadelimiter_{uuid.uuid4()}"
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")


def append_summary(markdown: str) -> None:
    """Append ``markdown`` to ``$GITHUB_STEP_SUMMARY`` (no-op when unset)."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(markdown if markdown.endswith("\n") else markdown + "\n")


def load_event() -> dict[str, Any]:
    """The event payload at ``$GITHUB_EVENT_PATH`` ({} when unset or unreadable)."""
    path = os.environ.get("GITHUB_EVENT_PATH")
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def pull_request(event: dict[str, Any]) -> dict[str, Any] | None:
    """The ``pull_request`` object of a pull-request event payload, else None."""
    pr = event.get("pull_request")
    return pr if isinstance(pr, dict) else None


def is_fork(event: dict[str, Any]) -> bool:
    """True for a pull request whose head repository differs from its base repository (a fork, or a deleted
    one): GitHub gives such runs a read-only token and no secrets."""
    pr = pull_request(event)
    if pr is None:
        return False
    head_repo = (pr.get("head") or {}).get("repo")
    base_repo = (pr.get("base") or {}).get("repo") or event.get("repository") or {}
    if not isinstance(head_repo, dict):
        return True
    return head_repo.get("full_name") != base_repo.get("full_name")


def run_url() -> str:
    """The URL of this workflow run (``$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/actions/runs/$GITHUB_RUN_ID``)."""
    server = env_value("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    repo, run_id = env_value("GITHUB_REPOSITORY"), env_value("GITHUB_RUN_ID")
    if not repo or not run_id:
        return ""
    attempt = env_value("GITHUB_RUN_ATTEMPT")
    return f"{server}/{repo}/actions/runs/{run_id}" + (f"/attempts/{attempt}" if attempt and attempt != "1" else "")


def truthy(value: str | None, name: str) -> bool:
    """Parse a boolean action input (``true``/``false``, any case). Raises ValueError naming the input."""
    text = (value or "").strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise ValueError(f"input '{name}' must be true or false, got {value!r}")
