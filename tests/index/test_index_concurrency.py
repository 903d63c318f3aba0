"""Two processes writing the same reference index at once: no corruption, no lost vectors, right vectors.

The embedding provider here is a small deterministic one (vectors derived from a hash of the text): the
subject is the index's locking and atomic replacement, and a real model would only slow the race down.
Each writer is one long-lived process that takes one repetition per line on stdin, so 20 repetitions cost
two interpreter start-ups, and both writers of a repetition start at the same moment.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # two writer processes

WRITER = textwrap.dedent(
    """
    import hashlib, sys, time
    import numpy as np
    from evaltasks.embeddings.base import EmbeddingBatch, normalize_rows
    from evaltasks.index import ReferenceIndex

    class HashProvider:
        provider, model_name = "test", "hash-16"
        fingerprint, namespace = "f0", "test/hash-16/f0"
        def embed_batch(self, texts):
            time.sleep(0.05)  # widen the window between reading and writing the index
            rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], dtype=np.uint8) for t in texts]
            return EmbeddingBatch.free(normalize_rows(np.array(rows, dtype=np.float32) - 127.5))
        def embed(self, texts):
            return self.embed_batch(texts).vectors

    for line in sys.stdin:  # "ROOT START STOP": one repetition
        root, start, stop = line.split()
        texts = [f"reference {i}" for i in range(int(start), int(stop))]
        for chunk in range(0, len(texts), 25):
            ReferenceIndex(root).get_or_embed(HashProvider(), texts[chunk : chunk + 25])
        print("done", flush=True)
    """
)


def _expected(text: str) -> np.ndarray:
    import hashlib

    row = np.frombuffer(hashlib.sha256(text.encode()).digest()[:16], dtype=np.uint8).astype(np.float32) - 127.5
    return row / np.linalg.norm(row)


def test_two_writers_overlapping_texts(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER, encoding="utf-8")
    writers = [
        subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        for repetition in range(20):
            root = tmp_path / f"index-{repetition}"
            for writer, (start, stop) in zip(writers, ((0, 150), (100, 250))):
                writer.stdin.write(f"{root} {start} {stop}\n")
                writer.stdin.flush()
            assert [w.stdout.readline().strip() for w in writers] == ["done", "done"], f"repetition {repetition}"
            _check(root, repetition)
    finally:
        for writer in writers:
            writer.stdin.close()
    assert [w.wait(timeout=60) for w in writers] == [0, 0]


def _check(root: Path, repetition: int) -> None:
    from evaltasks.index import text_id

    namespace = next(root.glob("*/meta.json")).parent
    meta = json.loads((namespace / "meta.json").read_text())
    ids = np.concatenate([np.load(namespace / s["ids"], allow_pickle=False) for s in meta["segments"]])
    vectors = np.concatenate([np.load(namespace / s["vectors"], allow_pickle=False) for s in meta["segments"]])
    assert meta["count"] == len(ids) == len(vectors) == 250, f"repetition {repetition}: lost or duplicated vectors"
    for segment in meta["segments"]:
        for kind in ("ids", "vectors", "crc32"):
            assert segment["sha256"][kind] == hashlib.sha256((namespace / segment[kind]).read_bytes()).hexdigest()
    assert len(set(ids.tolist())) == 250
    row_of = {int(i): r for r, i in enumerate(ids)}
    for i in (0, 120, 249):
        text = f"reference {i}"
        assert np.allclose(vectors[row_of[text_id(text)]], _expected(text), atol=1e-6)
    assert not list(namespace.glob(".*.tmp")), "temporary files left behind"
    listed = {s[kind] for s in meta["segments"] for kind in ("ids", "vectors", "crc32")}
    assert {p.name for p in namespace.glob("seg-*")} == listed, "segment files no manifest lists"
