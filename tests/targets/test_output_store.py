"""OutputStore: entries round-trip, edits are caught by the HMAC digest, torn or foreign files are misses."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from evaltasks.targets import OutputStore, TargetOutput
from evaltasks.targets.store import sample_key

KEY = "ab" + "0" * 62


def test_round_trip_keeps_every_field_and_latency(tmp_path: Path) -> None:
    store = OutputStore(tmp_path / "outputs")
    output = TargetOutput(
        output="Paris",
        retrieval_context=["France's capital is Paris."],
        tools_called=["search"],
        cost=0.001,
        input_tokens=12,
        output_tokens=2,
        metadata={"model": "m"},
    )
    assert store.get(KEY) is None
    store.put(KEY, output, target="bot", kind="python", latency_ms=12.5)
    stored = store.get(KEY)
    assert stored is not None
    assert stored.output == output
    assert stored.latency_ms == 12.5
    path = tmp_path / "outputs" / "ab" / f"{KEY}.json"
    assert store.path(KEY) == path and path.is_file()
    entry = json.loads(path.read_text())
    assert (entry["target"], entry["kind"], entry["format"]) == ("bot", "python", 1)
    assert os.stat(tmp_path / "outputs" / "store.key").st_mode & 0o777 == 0o600
    # a second store object (another process) reads it with the same key file
    assert OutputStore(tmp_path / "outputs").get(KEY) == stored


def test_an_edited_entry_is_a_miss_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = OutputStore(tmp_path)
    store.put(KEY, TargetOutput(output="right"), target="bot", kind="python", latency_ms=None)
    path = store.path(KEY)
    entry = json.loads(path.read_text())
    entry["output"]["output"] = "forged"
    path.write_text(json.dumps(entry))
    fresh = OutputStore(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert fresh.get(KEY) is None
    assert "does not match its digest" in caplog.text and str(path) in caplog.text


@pytest.mark.parametrize("content", ["", "{not json", "[]", '{"format": 1, "key": "other"}'])
def test_unreadable_entries_are_misses(tmp_path: Path, content: str) -> None:
    store = OutputStore(tmp_path)
    store.put(KEY, TargetOutput(output="x"), target="bot", kind="python", latency_ms=1.0)
    store.path(KEY).write_text(content)
    assert store.get(KEY) is None


def test_a_key_file_others_can_read_is_not_trusted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = OutputStore(tmp_path)
    store.put(KEY, TargetOutput(output="x"), target="bot", kind="python", latency_ms=1.0)
    os.chmod(tmp_path / "store.key", 0o644)
    with caplog.at_level(logging.WARNING):
        assert OutputStore(tmp_path).get(KEY) is None
    assert "target output store's key" in caplog.text


def test_sample_keys_differ_per_sample_and_keep_sample_zero() -> None:
    keys = {sample_key(KEY, i) for i in range(5)}
    assert len(keys) == 5 and sample_key(KEY, 0) == KEY


def test_the_store_lives_in_the_index_directory(tmp_path: Path) -> None:
    store = OutputStore.in_index_dir(tmp_path)
    assert store.directory == tmp_path / "outputs"
    store.put(KEY, TargetOutput(output="x"), target="bot", kind="python", latency_ms=None)
    assert (tmp_path / "outputs" / "ab" / f"{KEY}.json").is_file()
