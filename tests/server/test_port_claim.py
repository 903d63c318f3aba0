"""The temporary Prefect server holds its port from its first milliseconds (evaltasks.server.temporary._claim_port).

Prefect's start loop polls ``/health`` on the chosen port as soon as the server process starts. When another
process's server took that port in between (two runs choosing the same port at random), that server answered the
poll and the run reported to it: artifacts 404, then connection errors once it stopped. Here a real HTTP server on
127.0.0.1 plays the other run's server on the port the run chooses; the run must end up on a server of its own
and never ask the other one anything.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.process_env import REPO_ROOT, subprocess_env

SCRIPT = r"""
import http.server, json, socket, sys, threading, urllib.request

seen = []

class Other(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        seen.append(self.path)
        body = b"true"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Other)
threading.Thread(target=other.serve_forever, daemon=True).start()
taken = other.server_address[1]

from evaltasks.server import temporary

chosen = iter([taken])
temporary.free_port = lambda ports=None: next(chosen)  # the run picks the port the other server holds
starting = temporary.spawn_temporary_server()
starting.wait()
import prefect.server.api.server as server_module

(server,) = server_module.SubprocessASGIServer._instances.values()
with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/api/version", timeout=30) as answer:
    version = answer.read().decode()
print(json.dumps({"taken": taken, "port": server.port, "seen": seen, "version": version}))
temporary.stop_temporary_server()
"""


@pytest.mark.slow
def test_a_port_another_server_holds_is_given_up_and_never_asked(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO_ROOT,
        env=subprocess_env(tmp_path / "prefect-home"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["port"] != result["taken"]
    assert result["seen"] == []  # the other server was never polled
    from prefect.server.api.server import SERVER_API_VERSION

    assert json.loads(result["version"]) == SERVER_API_VERSION  # a Prefect server answered on the run's port


def test_a_cancelled_rollback_at_shutdown_is_not_printed_but_other_pool_errors_are() -> None:
    """The server's connection pool logs "Exception during reset or similar" with a CancelledError when the server
    is stopped mid-request (seen under load at the end of runs, as a traceback in the run's terminal): the server
    process filters that record out of its pool's logger; the same message with a real error still goes through.
    (The records are built here and given to the logger's filters: whether the logger prints at all depends on
    the logging configuration other tests of this process left, not on this rule.)"""
    import asyncio
    import logging

    from evaltasks.server import temporary

    def record(error: BaseException) -> logging.LogRecord:
        return logging.LogRecord(
            temporary.SHUTDOWN_NOISE_LOGGERS[0],
            logging.ERROR,
            __file__,
            1,
            "Exception during reset or similar",
            (),
            (type(error), error, None),
        )

    pool = logging.getLogger(temporary.SHUTDOWN_NOISE_LOGGERS[0])
    try:
        temporary._quiet_shutdown()
        assert temporary._cancelled in pool.filters
        assert not pool.filter(record(asyncio.CancelledError("Cancelled via cancel scope")))
        assert pool.filter(record(OSError("disk I/O error")))
    finally:
        pool.removeFilter(temporary._cancelled)
