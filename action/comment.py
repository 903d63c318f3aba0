"""Step 5 of the action: create or update the suite's one sticky comment on the pull request.

The comment is found by its hidden marker (first line, see ``report.marker``) among the pull request's comments,
read page by page (``per_page=100``, following the ``Link: rel="next"`` header), and only among comments this
token's identity may have written: ``GET /user`` names it for user tokens; the default ``GITHUB_TOKEN`` and GitHub
App installation tokens cannot read ``/user``, so then any bot account's (``github-actions[bot]``,
``my-app[bot]``), newest first. A comment someone else wrote with a copied marker is never edited.
Found: ``PATCH /repos/{repo}/issues/comments/{id}`` of the newest candidate only; when GitHub refuses the edit
(403/404: another account wrote it, e.g. before ``github-token`` changed to an App token, or back), a new comment
is posted (``POST /repos/{repo}/issues/{n}/comments``) with a ``::notice`` naming the comment that keeps older
results. An older candidate is never updated in its place: the newest evaltasks comment on the pull request must
be the one with the current results. Not found: the POST.
GitHub REST API v3 ("Issue comments"), ``$GITHUB_API_URL`` (a local server in tests; empty means unset).
The body is sanitised first when untrusted and measured after: over GitHub's 65,536 characters it is cut after
whole lines with a note saying where the rest is (:func:`fit_body`).

From a trusted ``workflow_run`` workflow (forks, see docs/action.md#comments-on-pull-requests-from-forks-workflow_run): ``PR_NUMBER`` names the pull request and
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
import unicodedata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _github import annotate, append_summary, env_value, is_fork, load_event, pull_request, set_output  # noqa: E402

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

        self.api_url = api_url.rstrip("/")
        self._http = httpx.Client(
            base_url=api_url.rstrip("/"),
            timeout=TIMEOUT_S,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": "evaltasks-action",
            },
        )

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        """One API call; returns the response. Raises CommentError for 4xx or after :data:`ATTEMPTS` failures."""
        import httpx

        last, where = "", url if "://" in url else f"{self.api_url}{url}"
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
                    raise CommentError(f"{method} {where}: {last}", status)
            if attempt + 1 < ATTEMPTS:
                time.sleep(min(2.0**attempt, 8.0))
        raise CommentError(f"{method} {where}: {last}", status)

    def identity(self) -> str | None:
        """The token's login, or None when the token cannot read ``/user`` (the default GITHUB_TOKEN and GitHub
        App installation tokens: an app's bot login is known from ``GET /app`` only with the app's JWT)."""
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


def find_sticky(comments: Any, head: str, login: str | None) -> list[dict[str, Any]]:
    """The comments whose body starts with ``head`` (the marker) that this token may have written, newest first:
    those by ``login`` when the token's identity is known, else (``GET /user`` is refused to ``GITHUB_TOKEN``
    and GitHub App installation tokens) those by any bot account. A user cannot fake a bot account, so a
    copied marker in a person's comment is never a candidate."""
    found = []
    for comment in comments:
        user = comment.get("user") or {}
        mine = user.get("login") == login if login else user.get("type") == "Bot"
        if mine and str(comment.get("body", "")).startswith(head):
            found.append(comment)
    return found[::-1]


def foreign_markers(comments: Any, head: str, login: str | None) -> list[str]:
    """Logins of other accounts' comments that start with ``head`` (for the notice when a new comment is posted
    beside them)."""
    return sorted(
        {
            str((c.get("user") or {}).get("login"))
            for c in comments
            if str(c.get("body", "")).startswith(head) and login and (c.get("user") or {}).get("login") != login
        }
    )


_MARKER = re.compile(r"<!-- evaltasks:sticky-comment suite=[a-z0-9-]+ -->")
MAX_BODY = 65536  # GitHub: a comment body has at most 65,536 characters
MAX_UNTRUSTED_INPUT = 1_000_000  # characters of an untrusted comment.md read at all (the rest cannot fit anyway)
TRUNCATED_NOTE = (
    "> ⚠️ Truncated: this comment was cut to GitHub's limit of 65,536 characters. The full report is "
    "in the evaluating run's job summary and its reports artifact (results.json, summary.md)."
)
ZWSP = "\u200b"

# Every ASCII punctuation character that is active in CommonMark/GFM (emphasis, code, links, images, HTML,
# entities, tables, strikethrough, headings, lists, math): a backslash before ASCII punctuation always renders as
# the character itself (CommonMark 0.31, "Backslash escapes"), outside code spans and code blocks.
_ACTIVE = re.compile(r"""([\\`*_{}\[\]()<>#+\-!|~:&.=$^"])""")
_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")  # a CommonMark backslash escape: the character it stands for
_BOLD = re.compile(r"\*\*((?:\\.|[^*\\\n]){1,200}?)\*\*")
_HEADING = re.compile(r"(#{1,6}) +(.*)")
_DELIMITER_ROW = re.compile(r"\|(?: *:?-+:? *\|)+")
_FENCE_OPEN = re.compile(r"```[A-Za-z0-9]*")
_FENCE_CLOSE = re.compile(r"`{3,}")
_SUMMARY = re.compile(r"<details><summary>(.{1,200}?)</summary>")
_BREAK = "<br>"  # a line break inside a table cell (its parts inert)


def _visible(text: str) -> str:
    """``text`` without control characters (but tabs) and format characters (Unicode Cf: bidirectional
    overrides, zero-width characters), which hide or reorder what a reader sees."""
    return "".join(c for c in text if c == "\t" or unicodedata.category(c) not in ("Cc", "Cf"))


def inert_text(markdown: str) -> str:
    """The text ``markdown`` shows (its backslash escapes resolved), escaped again so that GitHub shows it
    character for character and nothing in it acts: every active ASCII punctuation character backslash-escaped
    (no link, image, reference definition, autolink, HTML, entity, emphasis, table cell or heading can start),
    a zero-width space after ``:`` before ``/`` and after ``www`` (no bare-URL autolinks: ``https://``, ``//``,
    ``www.``), after ``@`` (no @mentions, no e-mail autolinks) and after ``#``/``GH-`` before a digit (no issue
    references)."""
    text = _ESCAPED.sub(r"\1", _visible(markdown))
    text = _ACTIVE.sub(r"\\\1", text)
    text = re.sub(r"\\:(?=/)", "\\:" + ZWSP, text)
    text = re.sub(r"(?i)\bwww(?=\\\.)", "\\g<0>" + ZWSP, text)
    text = text.replace("@", "@" + ZWSP)
    return re.sub(r"(?i)(\\#|\bGH\\-)(?=\d)", "\\1" + ZWSP, text)


def _inline(markdown: str, keep: re.Pattern[str] | None) -> str:
    """One line of untrusted inline markdown rebuilt from inert text: ``**bold**`` (its text inert) and the
    matches of ``keep`` (this repository's run link) are the only markup kept."""
    out, pos = [], 0
    pattern = _BOLD if keep is None else re.compile(f"(?:{keep.pattern})|{_BOLD.pattern}")
    for match in pattern.finditer(markdown):
        out.append(inert_text(markdown[pos : match.start()]))
        if match.group(1) is None:  # the run link
            out.append(match.group())
        else:
            inner = inert_text(match.group(1)).strip()
            out.append(f"**{inner}**" if inner else "")
        pos = match.end()
    out.append(inert_text(markdown[pos:]))
    return "".join(out)


def _cells(row: str) -> list[str]:
    """The cells of a GFM table row ``| a | b |`` (``\\|`` is a pipe inside a cell)."""
    cells, current, i = [], [], 1 if row.startswith("|") else 0
    while i < len(row):
        if row[i] == "\\" and i + 1 < len(row):
            current.append(row[i : i + 2])
            i += 2
            continue
        if row[i] == "|":
            cells.append("".join(current))
            current = []
        else:
            current.append(row[i])
        i += 1
    if "".join(current).strip():
        cells.append("".join(current))
    return cells


def sanitize_untrusted_body(body: str, repo: str, server: str = "https://github.com") -> str:
    """Make a comment body from another run's artifact safe to post (``workflow_run``: a fork controls the
    workflow that wrote it, so it is untrusted markdown, not necessarily evaltasks' escaped output).

    The first line must be an evaltasks marker. The rest is rebuilt line by line from the few block shapes an
    evaltasks report uses, with all of their text made inert by :func:`inert_text`: headings (``#``), table rows
    (cell by cell, ``<br>`` between a cell's lines kept; delimiter rows kept), ``> `` quotes, ``- `` list items
    (nested ones by two spaces), ``<details><summary>…</summary>`` and ``</details>`` lines, ``---`` rules,
    fenced code blocks (emitted as plain ```` ```text ```` blocks, where nothing renders as markup), ``**bold**``,
    and the link to
    this repository's workflow run (``server``/``repo``/``actions/runs/N``) that evaltasks writes. Anything else
    is a paragraph line of inert text, so no link, image, HTML, mention or issue reference can come out. The
    result may be longer than the input: :func:`fit_body` measures it. Raises ValueError when there is no marker.
    """
    first, _, rest = body.partition("\n")
    if not _MARKER.fullmatch(first.strip()):
        raise ValueError("the first line is not an evaltasks marker")
    run_link = re.compile(
        r"\[Workflow run\]\("
        + re.escape(server.rstrip("/") + "/" + repo)
        + r"/actions/runs/[0-9]+(?:/attempts/[0-9]+)?\)"
    )
    lines, in_code = [first.strip()], False
    for raw in rest.replace("\r\n", "\n").split("\n"):
        line = _visible(raw).rstrip()
        if in_code:
            if _FENCE_CLOSE.fullmatch(line.strip()):
                lines.append("```")
                in_code = False
            else:  # inside a code block nothing is markup; GitHub shows it as it is
                lines.append(line)
            continue
        stripped = line.strip()
        heading = _HEADING.fullmatch(stripped)
        if not stripped:
            lines.append("")
        elif _FENCE_OPEN.fullmatch(stripped):
            lines.append("```text")
            in_code = True
        elif stripped == "---":
            lines.append("---")
        elif _DELIMITER_ROW.fullmatch(stripped):
            lines.append(stripped)
        elif stripped.startswith("|"):
            lines.append(
                "| "
                + " | ".join(
                    _BREAK.join(_inline(part.strip(), None) for part in cell.split(_BREAK)) for cell in _cells(stripped)
                )
                + " |"
            )
        elif heading:
            lines.append(f"{heading.group(1)} {_inline(heading.group(2), None)}")
        elif stripped == "</details>":
            lines.append(stripped)
        elif _SUMMARY.fullmatch(stripped):
            # raw HTML: escapes mean nothing there, so only words, digits and a little punctuation are kept
            title = re.sub(r"[^\w .,;()–×-]", "", _ESCAPED.sub(r"\1", _SUMMARY.fullmatch(stripped).group(1)))
            lines.append(f"<details><summary>{title}</summary>")
        elif stripped.startswith(("> ", "- ")):
            indent = "  " if line.startswith("  - ") else ""  # a nested list item (a changed case's texts)
            lines.append(indent + stripped[:2] + _inline(stripped[2:].strip(), None))
        else:
            lines.append(_inline(stripped, run_link))
    if in_code:
        lines.append("```")
    while lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def utf16_units(text: str) -> int:
    """Length in UTF-16 code units (how GitHub counts a comment's characters; an emoji counts 2)."""
    return len(text.encode("utf-16-le")) // 2


_CLOSE_DETAILS = "\n</details>\n"  # a blank line first: a </details> right after a list item would belong to it


def fit_body(body: str, limit: int = MAX_BODY) -> str:
    """``body`` as it is when it has at most ``limit`` characters (UTF-16 code units), else cut after whole
    lines, keeping the first line (the marker) and a trailing ``---`` + run-link footer, with
    :data:`TRUNCATED_NOTE` saying where the rest is. What the cut leaves open is closed, so the note and the
    footer show: a code block (```` ``` ````), then each ``<details>`` (collapsed, it would hide them)."""
    if utf16_units(body) <= limit:
        return body
    lines = body.rstrip("\n").split("\n")
    footer: list[str] = []
    if len(lines) > 2 and lines[-2] == "---" and lines[-1].startswith("[Workflow run]("):
        footer, lines = lines[-2:], lines[:-2]
    tail = ["", TRUNCATED_NOTE, *([""] + footer if footer else [])]
    budget = limit - utf16_units("\n".join(tail) + "\n") - utf16_units("\n```") - 1
    closer = utf16_units(_CLOSE_DETAILS)
    kept, used, open_code, depth = [], 0, False, 0
    for line in lines:
        fence = line.startswith("```")
        after = depth
        if not open_code and not fence:
            after += line.startswith("<details>") - (line.strip() == "</details>")
            after = max(after, 0)
        cost = utf16_units(line) + 1
        if used + cost + closer * after > budget:
            break
        kept.append(line)
        used += cost
        open_code, depth = open_code != fence, after
    if open_code:
        kept.append("```")
    return "\n".join(kept) + "\n" + _CLOSE_DETAILS * depth + "\n".join(tail) + "\n"


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
        message = (
            "Pull request from a fork: the token is read-only, so no comment was posted; the results are in "
            "the job summary. To comment on fork PRs, see the workflow_run pattern in the evaltasks docs, docs/action.md#comments-on-pull-requests-from-forks-workflow_run."
        )
        annotate("warning", message, title="evaltasks: comment skipped")
        append_summary(f"\n> ⚠️ {message}\n")
        return 0
    token = env_value("GITHUB_TOKEN")
    if not token:
        annotate("warning", "No github-token: no comment was posted.", title="evaltasks: comment skipped")
        return 0
    with open(env["COMMENT_BODY_FILE"], encoding="utf-8", errors="replace") as handle:
        body = handle.read(MAX_UNTRUSTED_INPUT)
    repo = env_value("GITHUB_REPOSITORY") or (event.get("repository") or {}).get("full_name", "")
    if env.get("PR_NUMBER"):
        try:  # sanitise first, measure after: escaping makes the text longer
            body = sanitize_untrusted_body(body, repo, env_value("GITHUB_SERVER_URL", "https://github.com"))
        except ValueError as exc:
            annotate(
                "warning",
                f"comment.md from the evaluating run is not an evaltasks comment: {exc}",
                title="evaltasks: comment skipped",
            )
            return 0
    body = fit_body(body)
    head = body.split("\n", 1)[0]
    try:
        number = int(pr["number"])
    except (TypeError, ValueError):
        annotate(
            "warning", f"PR_NUMBER {pr['number']!r} is not a number: no comment", title="evaltasks: comment skipped"
        )
        return 0
    client = GitHubClient(env_value("GITHUB_API_URL", "https://api.github.com"), token)
    try:
        expected = env.get("EXPECTED_HEAD_SHA")
        if expected:
            head_sha = client.request("GET", f"/repos/{repo}/pulls/{number}").json().get("head", {}).get("sha")
            if head_sha != expected:
                annotate(
                    "warning",
                    f"pull request #{number} is at {head_sha}, not at the evaluated commit {expected}: no comment",
                    title="evaltasks: comment skipped",
                )
                return 0
        login = client.identity()
        comments = list(client.comments(repo, number))
        candidates = find_sticky(comments, head, login)
        failing = env.get("GATE_PASSED") != "true" or env.get("REGRESSED") == "true"
        if not candidates and env.get("COMMENT_MODE") == "on-failure" and not failing:
            print("gate passed without regressions: no comment (comment: on-failure)")
            return 0
        comment, refused = None, []
        for existing in candidates[:1]:  # the newest only: updating an older one would leave stale results below
            try:
                comment = client.request(
                    "PATCH", f"/repos/{repo}/issues/comments/{existing['id']}", json={"body": body}
                ).json()
            except CommentError as exc:
                if exc.status not in (403, 404):
                    raise
                refused.append(
                    f"comment {existing['id']} by {(existing.get('user') or {}).get('login')} (HTTP {exc.status})"
                )
                continue
            print(f"updated comment {comment.get('id')}: {comment.get('html_url', '')}")
        if comment is None:
            comment = client.request("POST", f"/repos/{repo}/issues/{number}/comments", json={"body": body}).json()
            print(f"created comment {comment.get('id')}: {comment.get('html_url', '')}")
            others = foreign_markers(comments, head, login)
            if refused:
                annotate(
                    "notice",
                    f"Posted a new evaltasks comment: this token may not edit the newest earlier "
                    f"one, {', '.join(refused)}, written by another account (e.g. before github-token "
                    "changed); it and any older evaltasks comment keep older results.",
                    title="evaltasks: new comment",
                )
            elif others:
                annotate(
                    "notice",
                    f"Posted a new evaltasks comment: the earlier one by {', '.join(others)} was "
                    f"written by another account than this token's ({login}) and is left as it is.",
                    title="evaltasks: new comment",
                )
    except CommentError as exc:
        hint = (
            " (the token may be read-only: give the job `permissions: pull-requests: write`)"
            if exc.status in (401, 403, 404)
            else ""
        )
        annotate("warning", f"Could not post the evaltasks comment: {exc}{hint}", title="evaltasks: comment skipped")
        return 0
    set_output("comment-id", str(comment.get("id", "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
