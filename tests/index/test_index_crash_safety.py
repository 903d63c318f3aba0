"""The reference index under crashes and concurrent readers: ``kill -9`` of a writer, readers during writes.

- The reference index survives its writer being killed with SIGKILL at random moments (state verifies, no
  completed write lost), and readers never see a torn index while another process writes it.
"""

from __future__ import annotations

import hashlib
import json
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from evaltasks.index import ReferenceIndex, text_id

pytestmark = pytest.mark.slow  # writers killed at random moments, readers in subprocesses

HASH_PROVIDER = textwrap.dedent(
    """
    import hashlib
    import numpy as np
    from evaltasks.embeddings.base import EmbeddingBatch, normalize_rows

    class HashProvider:
        provider, model_name = "test", "hash-16"
        fingerprint, namespace = "f0", "test/hash-16/f0"
        def embed_batch(self, texts):
            rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], dtype=np.uint8) for t in texts]
            return EmbeddingBatch.free(normalize_rows(np.array(rows, dtype=np.float32) - 127.5))
        def embed(self, texts):
            return self.embed_batch(texts).vectors
    """
)


def _hash_vector(text: str) -> np.ndarray:
    row = np.frombuffer(hashlib.sha256(text.encode()).digest()[:16], dtype=np.uint8).astype(np.float32) - 127.5
    return row / np.linalg.norm(row)


def _index_state(root: Path) -> dict[str, tuple[np.ndarray, np.ndarray, dict]]:
    """namespace -> (ids, vectors, meta) as a run would read them; any corruption warning fails the test."""
    index = ReferenceIndex(root)
    out = {}
    for info in index.info():
        assert "error" not in info, info
        ns = index._namespace_by_name(info["namespace"])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out[info["namespace"]] = ns.load()
    return out


def _stale_temporaries(root: Path) -> list[Path]:
    return sorted(root.glob("*/.*.tmp"))


KILLED_WRITER = HASH_PROVIDER + textwrap.dedent(
    """
    import sys
    from evaltasks.index import ReferenceIndex

    root, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    texts = [f"reference {i}" for i in range(start, stop)]
    print("ready", flush=True)
    for chunk in range(0, len(texts), 20):
        ReferenceIndex(root).get_or_embed(HashProvider(), texts[chunk : chunk + 20])
    print("done", flush=True)
    """
)


def test_index_survives_sigkill_of_its_writer(tmp_path: Path) -> None:
    """A writer killed at a random moment (mid-write included) leaves a state that verifies, keeps every
    completed write, and the next writer continues from it; a final writer leaves no temporary files."""
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER, encoding="utf-8")
    root = tmp_path / "index"
    kills, step, span = 14, 150, 20_000
    known = {text_id(f"reference {i}"): f"reference {i}" for i in range(kills * step + span)}
    rng = random.Random(7)
    count_before, mid_write, between_files = 0, 0, 0
    for kill in range(kills):
        start = kill * step  # overlaps what earlier writers stored, and adds new texts
        writer = subprocess.Popen(
            [sys.executable, str(script), str(root), str(start), str(start + span)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 120  # a hang guard only
        while kill == 0 and not list(root.glob("*/meta.json")):  # the first writer completes a write: a state
            assert writer.poll() is None and time.monotonic() < deadline, "the first writer wrote nothing"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.05, 0.5))  # a random moment, mid-write included (correct at any moment)
        assert writer.poll() is None, "the writer finished before the kill: give it more texts"
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        writer.stdout.close()
        if not root.exists() or not list(root.glob("*/meta.json")):
            continue  # killed before its first write
        mid_write += bool(_stale_temporaries(root))
        namespace = next(root.glob("*/meta.json")).parent
        meta = json.loads((namespace / "meta.json").read_text())
        listed = {s[kind] for s in meta["segments"] for kind in ("ids", "vectors", "crc32")}
        between_files += any(p.name not in listed for p in namespace.glob("seg-*"))  # segment written, not committed
        ((ids, vectors, meta),) = _index_state(root).values()
        assert len(ids) == len(set(ids.tolist())) == meta["count"], f"kill {kill}: duplicated or miscounted vectors"
        assert len(ids) >= count_before, f"kill {kill}: {count_before - len(ids)} completed vectors lost"
        assert set(ids.tolist()) <= set(known), f"kill {kill}: unknown ids"
        expected = np.stack([_hash_vector(known[int(i)]) for i in ids])
        assert np.allclose(vectors, expected, atol=1e-6), f"kill {kill}: wrong vectors"
        count_before = len(ids)
    assert count_before > 0, "no writer ever wrote: the kills came too early"
    # A writer that runs to the end continues from the survivors and cleans up what the killed ones left. Its
    # 400 texts are new (the killed writers may have stored every text of any earlier range, and a writer with
    # nothing to add writes nothing, so it would clean nothing).
    fresh = kills * step + span
    done = subprocess.run(
        [sys.executable, str(script), str(root), str(fresh), str(fresh + 400)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.split() == ["ready", "done"], done.stderr
    ((ids, _, meta),) = _index_state(root).values()
    assert len(ids) >= max(count_before, 400) and not _stale_temporaries(root)
    listed = {s[kind] for s in meta["segments"] for kind in ("ids", "vectors", "crc32")}  # and no uncommitted segment
    assert {p.name for p in next(root.glob("*/meta.json")).parent.glob("seg-*")} == listed
    print(
        f"\n{kills} kills: {mid_write} left a temporary file (killed mid-write), {between_files} between "
        f"a segment and meta.json; {len(ids)} vectors at the end"
    )


READER = HASH_PROVIDER + textwrap.dedent(
    """
    import sys, time, warnings
    from evaltasks.index import ReferenceIndex

    warnings.simplefilter("error")  # a corruption warning ("rebuilding it") ends the reader with a traceback
    root, stop_file = sys.argv[1], sys.argv[2]
    probe = [f"reference {i}" for i in range(0, 3000, 7)]
    reads = 0
    import os
    while not os.path.exists(stop_file):
        ReferenceIndex(root).missing_texts(HashProvider(), probe)
        reads += 1
        if reads == 1:
            print("reading", flush=True)
    print(reads, flush=True)
    """
)


STEADY_WRITER = HASH_PROVIDER + textwrap.dedent(
    """
    import sys
    from evaltasks.index import ReferenceIndex

    root, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    texts = [f"reference {i}" for i in range(start, stop)]
    for chunk in range(0, len(texts), 10):
        ReferenceIndex(root).get_or_embed(HashProvider(), texts[chunk : chunk + 10])
    """
)


def test_readers_never_see_a_torn_index_while_writers_write(tmp_path: Path) -> None:
    """Two readers load the index in a loop while two writers replace it hundreds of times: no read is ever
    reported corrupt (a read that races a replacement is repeated under the writers' lock)."""
    (tmp_path / "reader.py").write_text(READER, encoding="utf-8")
    (tmp_path / "writer.py").write_text(STEADY_WRITER, encoding="utf-8")
    root, stop = tmp_path / "index", tmp_path / "stop"
    subprocess.run([sys.executable, str(tmp_path / "writer.py"), str(root), "0", "10"], check=True, timeout=60)
    readers = [
        subprocess.Popen(
            [sys.executable, str(tmp_path / "reader.py"), str(root), str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for reader in readers:  # both read before the writers start, however slowly the machine starts them
        assert reader.stdout.readline().strip() == "reading", reader.communicate(timeout=60)[1][-3000:]
    writers = [
        subprocess.Popen([sys.executable, str(tmp_path / "writer.py"), str(root), str(a), str(b)])
        for a, b in ((0, 2000), (1000, 3000))
    ]
    try:
        assert [w.wait(timeout=240) for w in writers] == [0, 0]
    finally:
        stop.touch()
    outputs = [r.communicate(timeout=60) for r in readers]
    for reader, (out, err) in zip(readers, outputs):
        assert reader.returncode == 0, err[-3000:]
        assert int(out) > 0
    ((ids, _, meta),) = _index_state(root).values()
    assert len(ids) == meta["count"] == 3000
    print(f"\nreads without a corrupt state: {[int(out) for out, _ in outputs]}")
