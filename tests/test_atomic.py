"""evaltasks._atomic: the one atomic write every module uses (reports, index, judge store and budget, the server's
state, the Prefect database template): the mode the file lands with and the directory fsync."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from evaltasks import _atomic
from evaltasks._atomic import atomic_path


def _synced(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real = _atomic._fsync_directory
    monkeypatch.setattr(_atomic, "_fsync_directory", lambda directory: (calls.append(directory), real(directory)))
    return calls


def test_the_file_lands_whole_with_the_permissions_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced = _synced(monkeypatch)
    target = tmp_path / "state.json"
    target.write_text("old", encoding="utf-8")
    with atomic_path(target, permissions=0o600) as tmp:
        assert stat.S_IMODE(tmp.stat().st_mode) == 0o600  # private while it is written
        tmp.write_text("new", encoding="utf-8")
        assert target.read_text(encoding="utf-8") == "old"
    assert target.read_text(encoding="utf-8") == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert synced == [tmp_path]
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary left


def test_the_default_mode_is_0644_and_durable_false_skips_the_directory_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = _synced(monkeypatch)
    target = tmp_path / "shard" / "entry.json"
    with atomic_path(target, durable=False) as tmp:
        tmp.write_bytes(b"{}")
    assert target.read_bytes() == b"{}" and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert synced == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "ledger.json"
    target.write_text("kept", encoding="utf-8")
    with pytest.raises(OSError, match="disk full"), atomic_path(target, permissions=0o600, durable=False) as tmp:
        tmp.write_text("half", encoding="utf-8")
        raise OSError("disk full")
    assert target.read_text(encoding="utf-8") == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["ledger.json"]
