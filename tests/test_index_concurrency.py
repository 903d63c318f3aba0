"""Two processes writing the same reference index at once: no corruption, no lost vectors, right vectors.

The embedding provider here is a small deterministic one (vectors derived from a hash of the text): the
subject is the index's locking and atomic replacement, and a real model would only slow the race down.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

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

    root, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    texts = [f"reference {i}" for i in range(start, stop)]
    for chunk in range(0, len(texts), 25):
        ReferenceIndex(root).get_or_embed(HashProvider(), texts[chunk : chunk + 25])
    """
)


def _expected(text: str) -> np.ndarray:
    import hashlib

    row = np.frombuffer(hashlib.sha256(text.encode()).digest()[:16], dtype=np.uint8).astype(np.float32) - 127.5
    return row / np.linalg.norm(row)


def test_two_writers_overlapping_texts(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER, encoding="utf-8")
    for repetition in range(10):
        root = tmp_path / f"index-{repetition}"
        writers = [
            subprocess.Popen([sys.executable, str(script), str(root), "0", "150"]),
            subprocess.Popen([sys.executable, str(script), str(root), "100", "250"]),
        ]
        assert [w.wait(timeout=120) for w in writers] == [0, 0]
        import faiss

        namespace = next(root.glob("*/meta.json")).parent
        meta = json.loads((namespace / "meta.json").read_text())
        index = faiss.read_index(str(namespace / "vectors.faiss"))
        assert meta["count"] == index.ntotal == 250, f"repetition {repetition}: lost or duplicated vectors"
        ids = faiss.vector_to_array(faiss.downcast_index(index).id_map)
        assert len(set(ids.tolist())) == 250
        from evaltasks.index import text_id

        flat = faiss.downcast_index(faiss.downcast_index(index).index)
        vectors = flat.reconstruct_n(0, flat.ntotal)
        row_of = {int(i): r for r, i in enumerate(ids)}
        for i in (0, 120, 249):
            text = f"reference {i}"
            assert np.allclose(vectors[row_of[text_id(text)]], _expected(text), atol=1e-6)
        assert not list(namespace.glob(".*.tmp")), "temporary files left behind"
