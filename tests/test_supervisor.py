"""The run's parent process (:mod:`evaltasks.supervisor`, docs/cli.md#interrupted-runs): how it relays signals.

The relayed-to process is real: a small Python process in a process group of its own that counts the SIGINTs it
handles in a file and acknowledges each SIGUSR1. Linux delivers a process's pending standard signals lowest number
first, and Python runs their handlers in that order, so once a SIGUSR1 sent after the relays is acknowledged, every
SIGINT relayed before it has been counted.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaltasks import supervisor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and signal order: Linux")

DEADLINE_S = 120  # only bounds how long a broken test may hang

COUNTER = """
import signal, sys, time
from pathlib import Path
counts, acks = Path(sys.argv[1]), Path(sys.argv[2])
received = [0, 0]
def on_int(signum, frame):
    received[0] += 1
    counts.write_text(str(received[0]))
def on_usr1(signum, frame):
    received[1] += 1
    acks.write_text(str(received[1]))
signal.signal(signal.SIGINT, on_int)
signal.signal(signal.SIGUSR1, on_usr1)
acks.write_text("0")
while True:
    time.sleep(0.01)
"""


def _wait_for(path: Path, text: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not (path.exists() and path.read_text() == text):
        assert proc.poll() is None, "the counting process ended"
        assert time.monotonic() < deadline, f"{path.name} never read {text!r}"
        time.sleep(0.01)


def test_the_same_signal_sent_twice_at_once_is_relayed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """timeout(1) sends its signal to the command and then to its process group, so the run's parent gets it twice
    at once; relayed twice, the second would be a "second signal" that ends the run at once. The same signal within
    REPEAT_WINDOW_S of its last relay is dropped; after the window, or another signal, it is relayed again."""
    counts, acks = tmp_path / "sigint-count", tmp_path / "acks"
    proc = subprocess.Popen([sys.executable, "-c", COUNTER, str(counts), str(acks)], start_new_session=True)
    try:
        _wait_for(acks, "0", proc)
        parent = supervisor._Parent(proc.pid, tmp_path)
        monkeypatch.setattr(supervisor, "REPEAT_WINDOW_S", 3600.0)  # "at once", whatever the machine's load
        parent.relay(signal.SIGINT, None)
        _wait_for(counts, "1", proc)
        parent.relay(signal.SIGINT, None)  # the same signal again, within the window: dropped
        proc.send_signal(signal.SIGUSR1)
        _wait_for(acks, "1", proc)
        assert counts.read_text() == "1"
        assert parent.signum == signal.SIGINT  # the first relay started the grace period
        monkeypatch.setattr(supervisor, "REPEAT_WINDOW_S", 0.0)  # a second Ctrl+C, later: relayed
        parent.relay(signal.SIGINT, None)
        _wait_for(counts, "2", proc)
        monkeypatch.setattr(supervisor, "REPEAT_WINDOW_S", 3600.0)
        parent.relay(signal.SIGTERM, None)  # another signal is never a repeat
        assert proc.wait(timeout=DEADLINE_S) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


SECOND_SIGNAL = """
import signal
from evaltasks import supervisor

code = supervisor.supervise()
if code is None:  # the run's process
    from evaltasks.cli._signals import Interrupt

    interrupt = Interrupt(None, None, cache=False, supervised=True)
    try:
        interrupt.handler(signal.SIGINT, None)  # the first signal stops the run...
    except KeyboardInterrupt:
        pass
    interrupt.handler(signal.SIGINT, None)  # ...and a second one, while it stops, ends its process at once
    raise SystemExit("not reached")
print(f"the parent decided {code}")
"""


def test_a_second_signal_ends_the_run_with_its_exit_code_not_exit_3(tmp_path: Path) -> None:
    """The run's process, stopping after a first SIGINT, gets a second one: it prints its one line and ends at once
    with exit 130, and its parent (which takes an exit the process did not announce for a metric's ``os._exit()``,
    exit 3) decides 130 too."""
    done = subprocess.run(
        [sys.executable, "-c", SECOND_SIGNAL],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.stdout.strip() == "the parent decided 130", done.stdout + done.stderr
    assert done.stderr.startswith("evaltasks: interrupted by SIGINT: no reports written"), done.stderr
    assert "exits 3" not in done.stderr and "Traceback" not in done.stderr, done.stderr
