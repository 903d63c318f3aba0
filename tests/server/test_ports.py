"""evaltasks.server.temporary.free_port: the one port finder of the server (the system's choice) and of the
temporary Prefect server (Prefect's own range, as Prefect picks it)."""

from __future__ import annotations

import socket

import pytest

from evaltasks.server.temporary import PREFECT_PORTS, free_port


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_the_systems_choice_is_a_free_port() -> None:
    port = free_port()
    assert 1024 <= port <= 65535 and _bindable(port)


def test_a_range_gives_a_free_port_in_it() -> None:
    port = free_port(PREFECT_PORTS)
    assert port in range(8000, 9000) and _bindable(port)


def test_a_range_with_every_port_taken_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """10 tries on a one-port range that is taken, 0.1-0.5 s apart (the sleeps are skipped here), then an error."""
    import time

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        slept: list[float] = []
        monkeypatch.setattr(time, "sleep", slept.append)
        with pytest.raises(RuntimeError, match="available port"):
            free_port(range(port, port + 1))
    assert len(slept) == 10 and all(0.1 <= s <= 0.5 for s in slept)
