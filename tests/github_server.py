"""A real HTTP server on 127.0.0.1 that speaks the GitHub REST API's issue-comment endpoints, for tests.

Endpoints (GitHub REST API v3, "Issue comments"; JSON bodies as GitHub sends them, trimmed to what a client
reads):

- ``GET /user``: 200 ``{"login": user_login}`` when ``user_login`` is set, else 403 "Resource not accessible by
  integration" (what the default ``GITHUB_TOKEN`` gets);
- ``GET /repos/{owner}/{repo}/issues/{number}/comments?per_page=N&page=P``: the comments, oldest first, paginated
  (``per_page`` at most 100, default 30) with a ``Link: <…>; rel="next"`` header while more pages remain;
- ``POST /repos/{owner}/{repo}/issues/{number}/comments`` ``{"body"}``: 201 and the new comment;
- ``PATCH /repos/{owner}/{repo}/issues/comments/{id}`` ``{"body"}``: 200 and the updated comment; 404 when it
  does not exist; 403 when it belongs to another user (GitHub lets a token edit only its own comments here);
- ``GET /repos/{owner}/{repo}/pulls/{number}``: ``{"number", "head": {"sha"}}`` from :attr:`head_shas`;
- a body over 65,536 characters: 422 "Body is too long (maximum is 65536 characters)".

Authentication: ``Authorization: Bearer TOKEN`` must be one of ``tokens`` (else 401); a token in
``read_only_tokens`` gets 403 on POST and PATCH (a fork's token). Comments created through the API belong to
``author`` (default ``github-actions[bot]``, type Bot). ``identities`` gives other tokens their own account:
``{token: (login, type, reads_user)}``, e.g. a GitHub App installation token ``("my-app[bot]", "Bot", False)``
(``GET /user`` answers it 403, as GitHub does) or a user's token ``("alice", "User", True)``; such a token's
comments belong to that login and it may edit only those. ``fail_next`` makes the next N requests answer 502.
Every request is recorded in :attr:`GitHubServer.requests` as ``(method, path, status)``.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

MAX_BODY = 65536


class GitHubServer:
    """The server; use as a context manager. ``url`` is the API base URL (``GITHUB_API_URL``)."""

    def __init__(
        self,
        tokens: tuple[str, ...] = ("test-token",),
        read_only_tokens: tuple[str, ...] = ("fork-token",),
        user_login: str | None = None,
        author: str = "github-actions[bot]",
        identities: dict[str, tuple[str, str, bool]] | None = None,
    ) -> None:
        self.identities = dict(identities or {})
        self.tokens = set(tokens) | set(read_only_tokens) | set(self.identities)
        self.read_only_tokens = set(read_only_tokens)
        self.user_login, self.author = user_login, author
        self.comments: dict[int, list[dict[str, Any]]] = {}
        self.requests: list[tuple[str, str, int]] = []
        self.fail_next = 0
        self.head_shas: dict[int, str] = {}
        self._next_id = 1000
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
                server.requests.append((self.command, self.path, status))

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                with server._lock:
                    if server.fail_next > 0:
                        server.fail_next -= 1
                        self._send(502, {"message": "Bad Gateway"})
                        return
                    token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
                    if token not in server.tokens:
                        self._send(401, {"message": "Bad credentials"})
                        return
                    status, body, headers = server.route(self.command, self.path, raw, token)
                    self._send(status, body, headers)

            do_GET = do_POST = do_PATCH = _handle

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> GitHubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def add_comment(self, number: int, body: str, login: str = "octocat", user_type: str = "User") -> dict[str, Any]:
        """Seed a comment as if someone else had written it."""
        self._next_id += 1
        comment = {
            "id": self._next_id,
            "body": body,
            "user": {"login": login, "type": user_type},
            "html_url": f"https://github.com/o/r/pull/{number}#issuecomment-{self._next_id}",
        }
        self.comments.setdefault(number, []).append(comment)
        return comment

    def all_comments(self) -> list[dict[str, Any]]:
        """Every comment on every issue."""
        return [c for cs in self.comments.values() for c in cs]

    def route(self, method: str, path: str, raw: bytes, token: str) -> tuple[int, Any, dict[str, str]]:
        """The endpoint logic (see the module docstring)."""
        url = urlparse(path)
        login, user_type, reads_user = self.identities.get(token, (self.author, "Bot", self.user_login is not None))
        if method == "GET" and url.path == "/user":
            if token in self.identities:
                if reads_user:
                    return 200, {"login": login, "type": user_type}, {}
                return 403, {"message": "Resource not accessible by integration"}, {}
            if self.user_login:
                return 200, {"login": self.user_login, "type": "User"}, {}
            return 403, {"message": "Resource not accessible by integration"}, {}
        pull = re.fullmatch(r"/repos/[^/]+/[^/]+/pulls/(\d+)", url.path)
        if pull and method == "GET":
            return 200, {"number": int(pull.group(1)), "head": {"sha": self.head_shas.get(int(pull.group(1)), "")}}, {}
        listing = re.fullmatch(r"/repos/[^/]+/[^/]+/issues/(\d+)/comments", url.path)
        if listing and method == "GET":
            query = parse_qs(url.query)
            per_page = min(int(query.get("per_page", ["30"])[0]), 100)
            page = int(query.get("page", ["1"])[0])
            comments = self.comments.get(int(listing.group(1)), [])
            chunk = comments[(page - 1) * per_page : page * per_page]
            headers = {}
            if page * per_page < len(comments):
                headers["Link"] = f'<{self.url}{url.path}?per_page={per_page}&page={page + 1}>; rel="next"'
            return 200, chunk, headers
        if method in ("POST", "PATCH"):
            if token in self.read_only_tokens:
                return 403, {"message": "Resource not accessible by integration"}, {}
            body = json.loads(raw or b"{}").get("body", "")
            if len(body) > MAX_BODY:
                return (
                    422,
                    {
                        "message": "Validation Failed",
                        "errors": [{"message": "Body is too long (maximum is 65536 characters)"}],
                    },
                    {},
                )
            if listing:
                comment = self.add_comment(int(listing.group(1)), body, login, user_type)
                return 201, comment, {}
            edit = re.fullmatch(r"/repos/[^/]+/[^/]+/issues/comments/(\d+)", url.path)
            if edit:
                for comment in self.all_comments():
                    if comment["id"] == int(edit.group(1)):
                        if comment["user"]["login"] != login:
                            return 403, {"message": "Must have admin rights to Repository."}, {}
                        comment["body"] = body
                        return 200, comment, {}
                return 404, {"message": "Not Found"}, {}
        return 404, {"message": "Not Found"}, {}
