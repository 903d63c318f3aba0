"""The base of the tests' API servers: a real threaded HTTP server on 127.0.0.1 (no mocks), for tests.

:mod:`chat_server` (OpenAI chat completions) and :mod:`openai_server` (OpenAI embeddings) build on it. It
provides what both need and answers nothing by itself:

- :class:`LoopbackServer`: a context manager that serves on a free port of 127.0.0.1 from a daemon thread
  (``url`` is ``http://127.0.0.1:PORT``), records requests under one lock, and on :meth:`LoopbackServer.close`
  wakes the responses waiting on ``_stopping`` (latency, ``slow`` faults), closes the open keep-alive
  connections and releases the port.
- :class:`LoopbackHandler`: HTTP/1.1 keep-alive with a ``Content-Length`` on every response, no access log,
  ``GET`` answered with the API's 404 body, and :meth:`LoopbackHandler.drop` for a connection closed without an
  answer. A server's own handler subclasses it and implements ``do_POST``.
- The API's error body (:func:`error_body`) and the servers' token rule (:func:`usage_tokens`).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, TypeVar

_S = TypeVar("_S", bound="LoopbackServer")


def usage_tokens(text: str) -> int:
    """The tokens the test servers bill for ``text``: ``len(text.encode("utf-8")) // 4 + 1``."""
    return len(text.encode("utf-8")) // 4 + 1


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """The OpenAI API's error payload: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class LoopbackHandler(BaseHTTPRequestHandler):
    """One connection of a :class:`LoopbackServer` (``self.server.owner`` is the server object)."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the APIs; every response carries Content-Length
    timeout = 30  # idle keep-alive connections end on their own
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.owner._track(self.connection, add=False)

    def send_json(
        self,
        status: int,
        payload: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        """Answer ``status`` with ``payload`` as JSON (NaN allowed, as a faulty server sends it) or the bytes
        ``raw``; a client that gave up (e.g. after its timeout) only ends the connection."""
        body = raw if raw is not None else json.dumps(payload).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def drop(self) -> None:
        """Close the connection without an answer (the ``drop`` fault)."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def do_GET(self) -> None:
        self.send_json(404, error_body(f"Invalid URL (GET {self.path})", "invalid_request_error"))


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: LoopbackServer


class LoopbackServer:
    """A server on 127.0.0.1 run from a daemon thread; use it as a context manager.

    Subclasses set :attr:`handler` (a :class:`LoopbackHandler` subclass) and :attr:`thread_name`, and call
    ``super().__init__()``.

    Attributes:
        url: ``http://127.0.0.1:PORT`` (no trailing slash); an AssertionError when the server is not running.
    """

    handler: ClassVar[type[LoopbackHandler]] = LoopbackHandler
    thread_name: ClassVar[str] = "loopback-test-server"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self: _S) -> _S:
        self._httpd = _HTTPServer(("127.0.0.1", 0), self.handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name=self.thread_name, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving: wake waiting responses, close open connections, release the port."""
        self._stopping.set()
        if self._httpd is None:
            return
        self._httpd.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()
        assert self._thread is not None
        self._thread.join(timeout=5)
        self._httpd = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        assert self._httpd is not None, "the server is not running"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            (self._connections.add if add else self._connections.discard)(conn)
