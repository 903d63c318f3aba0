"""Step 5 of the action: create or update the suite's one sticky comment on the pull request.

The comment is found by its hidden marker (first line, see ``report.marker``) among the pull request's comments,
read page by page (``per_page=100``, following the ``Link: rel="next"`` header), and only among comments written
by this token's identity (``GET /user``; for the default ``GITHUB_TOKEN``, which cannot read ``/user``, any bot
account such as ``github-actions[bot]``), so a comment someone else wrote with a copied marker is never edited.
Found: ``PATCH /repos/{repo}/issues/comments/{id}``; not found: ``POST /repos/{repo}/issues/{n}/comments``.
GitHub REST API v3 ("Issue comments"), ``$GITHUB_API_URL`` (a local server in tests).

From a trusted ``workflow_run`` workflow (forks, see the README): ``PR_NUMBER`` names the pull request and
``EXPECTED_HEAD_SHA`` (``github.event.workflow_run.head_sha``) must equal that pull request's head sha, so an
artifact from a fork cannot direct the comment to another pull request.

Never fails the job: a fork's read-only token, a missing token, 401/403/404, or a server still failing after
3 attempts give a ``::warning`` and exit 0. ``COMMENT_MODE=on-failure`` creates a comment only when the gate
failed or a regression was found, but always updates an existing one (so it never shows a stale failure).
Output: ``comment-id`` ('' when none was written).
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _github import annotate, append_summary, is_fork, load_event, pull_request, set_output  # noqa: E402

ATTEMPTS = 3
TIMEOUT_S = 30.0


class CommentError(Exception):
    """The GitHub API refused or kept failing; ``status`` is the HTTP status (0 for a connection error)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class GitHubClient:
    """The few REST calls this step needs, with bounded retries on 5xx, 429 and connection errors."""

    def __init__(self, api_url: str, token: str) -> None:
        import httpx

        self._http = httpx.Client(
            base_url=api_url.rstrip("/"), timeout=TIMEOUT_S,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
                     "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "evaltasks-action"},
        )

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        """One API call; returns the response. Raises CommentError for 4xx or after :data:`ATTEMPTS` failures."""
        import httpx

        last = ""
        for attempt in range(ATTEMPTS):
            try:
                response = self._http.request(method, url, **kwargs)
            except httpx.HTTPError as exc:
                last, status = f"{type(exc).__name__}: {exc}", 0
            else:
                status = response.status_code
                if status < 400:
                    return response
                last = f"HTTP {status}: {response.text[:200]}"
                if status not in (429, 500, 502, 503, 504):
                    raise CommentError(f"{method} {url}: {last}", status)
            if attempt + 1 < ATTEMPTS:
                time.sleep(min(2.0 ** attempt, 8.0))
        raise CommentError(f"{method} {url}: {last}", status)

    def identity(self) -> str | None:
        """The token's login, or None when the token cannot read ``/user`` (the default GITHUB_TOKEN)."""
        try:
            return str(self.request("GET", "/user").json().get("login")) or None
        except CommentError:
            return None

    def comments(self, repo: str, number: int) -> Any:
        """Every comment of issue/PR ``number``, page by page."""
        url: str | None = f"/repos/{repo}/issues/{number}/comments"
        params: dict[str, Any] | None = {"per_page": 100}
        while url:
            response = self.request("GET", url, params=params)
            yield from response.json()
            url, params = response.links.get("next", {}).get("url"), None


def find_sticky(comments: Any, head: str, login: str | None) -> dict[str, Any] | None:
    """The first comment whose body starts with ``head`` (the marker) written by ``login`` (or, when ``login``
    is None, by any bot account)."""
    for comment in comments:
        user = comment.get("user") or {}
        mine = user.get("login") == login if login else user.get("type") == "Bot"
        if mine and str(comment.get("body", "")).startswith(head):
            return comment
    return None


_MARKER = re.compile(r"<!-- evaltasks:sticky-comment suite=[a-z0-9-]+ -->")
MAX_BODY = 65536


def sanitize_untrusted_body(body: str, repo: str) -> str:
    """Make a comment body from another run's artifact safe to post (``workflow_run``: a fork controls the
    workflow that wrote it, so it is untrusted markdown, not necessarily evaltasks' escaped output).

    The first line must be an evaltasks marker; the rest keeps its text but loses what could act: every ``<``
    (raw HTML, a second marker), images and links (``![``/``](`` escaped, bare URLs' ``:`` escaped) except the
    link to this repository's workflow run that evaltasks writes, @mentions (a zero-width space after ``@``), issue references (after ``#``),
    and control or bidirectional-override characters. Raises ValueError when there is no marker or the body is
    over GitHub's 65,536 characters.
    """
    first, _, rest = body.partition("\n")
    if not _MARKER.fullmatch(first.strip()):
        raise ValueError("the first line is not an evaltasks marker")
    if len(body) > MAX_BODY:
        raise ValueError(f"{len(body)} characters, over GitHub's {MAX_BODY}")
    run_link = re.compile(r"\[Workflow run\]\(https://github\.com/" + re.escape(repo) + r"/actions/runs/[0-9/a-z]+\)")
    kept = run_link.findall(rest)
    rest = run_link.sub("\x00RUNLINK\x00", rest)
    rest = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200e\u200f\u202a-\u202e\u2066-\u2069]",
                  lambda m: "\x00" if m.group() == "\x00" else "", rest)
    rest = rest.replace("<", "&lt;").replace("](", "]\\(").replace("![", "!\\[")
    rest = re.sub(r"(?i)\b([a-z][a-z0-9+.-]*):(?=//)", "\\1\\:", rest)  # no bare-URL autolinks
    rest = re.sub(r"(?i)\bwww\.", "www\\.", rest)
    rest = re.sub(r"(#|\bGH-)(?=\d)", "\\1\u200b", rest.replace("@", "@\u200b"))
    for link in kept:
        rest = rest.replace("\x00RUNLINK\x00", link, 1)
    return f"{first.strip()}\n{rest.replace(chr(0), '')}"


def main() -> int:
    """Post or update the comment (module docstring); always 0."""
    env = os.environ
    set_output("comment-id", "")
    event = load_event()
    pr = pull_request(event)
    if env.get("PR_NUMBER"):  # workflow_run: the PR comes from the evaluating run's artifact
        pr = {"number": env["PR_NUMBER"]}
    elif pr is None or env.get("GITHUB_EVENT_NAME") not in ("pull_request", "pull_request_target"):
        print("not a pull request: no comment")
        return 0
    elif is_fork(event):
        message = ("Pull request from a fork: the token is read-only, so no comment was posted; the results are in "
                   "the job summary. To comment on fork PRs, see the workflow_run pattern in the evaltasks README.")
        annotate("warning", message, title="evaltasks: comment skipped")
        append_summary(f"\n> ⚠️ {message}\n")
        return 0
    token = env.get("GITHUB_TOKEN", "")
    if not token:
        annotate("warning", "No github-token: no comment was posted.", title="evaltasks: comment skipped")
        return 0
    body = Path(env["COMMENT_BODY_FILE"]).read_text(encoding="utf-8")
    repo = env.get("GITHUB_REPOSITORY") or (event.get("repository") or {}).get("full_name", "")
    if env.get("PR_NUMBER"):
        try:
            body = sanitize_untrusted_body(body, repo)
        except ValueError as exc:
            annotate("warning", f"comment.md from the evaluating run is not an evaltasks comment: {exc}",
                     title="evaltasks: comment skipped")
            return 0
    head = body.split("\n", 1)[0]
    try:
        number = int(pr["number"])
    except (TypeError, ValueError):
        annotate("warning", f"PR_NUMBER {pr['number']!r} is not a number: no comment", title="evaltasks: comment skipped")
        return 0
    client = GitHubClient(env.get("GITHUB_API_URL", "https://api.github.com"), token)
    try:
        expected = env.get("EXPECTED_HEAD_SHA")
        if expected:
            head_sha = client.request("GET", f"/repos/{repo}/pulls/{number}").json().get("head", {}).get("sha")
            if head_sha != expected:
                annotate("warning", f"pull request #{number} is at {head_sha}, not at the evaluated commit {expected}: "
                                    "no comment", title="evaltasks: comment skipped")
                return 0
        existing = find_sticky(client.comments(repo, number), head, client.identity())
        failing = env.get("GATE_PASSED") != "true" or env.get("REGRESSED") == "true"
        if existing is None and env.get("COMMENT_MODE") == "on-failure" and not failing:
            print("gate passed without regressions: no comment (comment: on-failure)")
            return 0
        if existing is not None:
            comment = client.request("PATCH", f"/repos/{repo}/issues/comments/{existing['id']}", json={"body": body}).json()
            print(f"updated comment {comment.get('id')}: {comment.get('html_url', '')}")
        else:
            comment = client.request("POST", f"/repos/{repo}/issues/{number}/comments", json={"body": body}).json()
            print(f"created comment {comment.get('id')}: {comment.get('html_url', '')}")
    except CommentError as exc:
        hint = " (the token may be read-only: give the job `permissions: pull-requests: write`)" \
            if exc.status in (401, 403, 404) else ""
        annotate("warning", f"Could not post the evaltasks comment: {exc}{hint}", title="evaltasks: comment skipped")
        return 0
    set_output("comment-id", str(comment.get("id", "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
