"""The reference index's storage: append-only segments, memory-mapped reads, compaction, verification, and
namespaces written by the format-1 layout (one ``vectors.faiss``).

The embedding provider is a small deterministic one (vectors derived from a hash of the text): the subject is
the storage, and the real model is exercised by tests/index/test_index.py. Subprocesses are real processes racing
on the same files; nothing is mocked.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import faiss
import numpy as np
import pytest

from evaltasks.embeddings.base import EmbeddingBatch, normalize_rows
from evaltasks.index import ReferenceIndex, _segments, text_id

REPO = Path(__file__).resolve().parents[2]


class HashProvider:
    """16-dimensional unit vectors from the sha256 of each text; counts the texts it embeds."""

    provider, model_name = "test", "hash-16"
    fingerprint, namespace = "f0", "test/hash-16/f0"

    def __init__(self) -> None:
        self.embedded = 0

    def embed_batch(self, texts: list[str]) -> EmbeddingBatch:
        self.embedded += len(texts)
        return EmbeddingBatch.free(np.stack([_hash_vector(t) for t in texts]))

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embed_batch(texts).vectors


def _hash_vector(text: str) -> np.ndarray:
    row = np.frombuffer(hashlib.sha256(text.encode()).digest()[:16], dtype=np.uint8).astype(np.float32) - 127.5
    return normalize_rows(row[None, :])[0]


def _texts(start: int, stop: int) -> list[str]:
    return [f"reference {i}" for i in range(start, stop)]


def _namespace(root: Path) -> Path:
    (ns,) = [p for p in root.iterdir() if p.is_dir()]
    return ns


def _meta(root: Path) -> dict:
    return json.loads((_namespace(root) / "meta.json").read_text(encoding="utf-8"))


def _segment_files(root: Path) -> list[str]:
    return sorted(p.name for p in _namespace(root).glob("seg-*"))


def _add(root: Path, texts: list[str]) -> HashProvider:
    provider = HashProvider()
    ReferenceIndex(root).get_or_embed(provider, texts)
    return provider


def _cli(*args: str) -> subprocess.CompletedProcess:
    from tests.cli_forkserver import run_cli  # here: the helper scripts import this module without the tests package

    env = {k: v for k, v in os.environ.items() if k != "EVALTASKS_INDEX_DIR"}
    return run_cli(*args, cwd=REPO, env=env, timeout=300)


def test_adding_texts_writes_a_new_segment_and_rewrites_nothing(tmp_path: Path) -> None:
    """Adding one text once rewrote the whole vectors.faiss; now it writes one segment beside the others."""
    root = tmp_path / "idx"
    _add(root, _texts(0, 500))
    ns = _namespace(root)
    before = {name: ((ns / name).stat().st_ino, (ns / name).read_bytes()) for name in _segment_files(root)}
    provider = _add(root, _texts(0, 501))  # 500 stored, 1 new
    assert provider.embedded == 1
    assert _segment_files(root) == [
        "seg-000001.crc32.npy",
        "seg-000001.ids.npy",
        "seg-000001.vectors.npy",
        "seg-000002.crc32.npy",
        "seg-000002.ids.npy",
        "seg-000002.vectors.npy",
    ]
    for name, (inode, data) in before.items():  # the old segment: same file, same bytes
        assert ((ns / name).stat().st_ino, (ns / name).read_bytes()) == (inode, data)
    meta = _meta(root)
    assert meta["format"] == 2 and meta["count"] == 501 and [s["count"] for s in meta["segments"]] == [500, 1]
    assert meta["next_segment"] == 3
    again = HashProvider()
    lookup = ReferenceIndex(root).get_or_embed(again, _texts(0, 501))
    assert again.embedded == 0 and lookup.reused == 501
    assert np.array_equal(lookup.table.rows(_texts(0, 501)), np.stack([_hash_vector(t) for t in _texts(0, 501)]))


@pytest.mark.slow
def test_reads_map_the_files_and_lookups_equal_before_and_after_compaction(tmp_path: Path) -> None:
    root = tmp_path / "idx"
    for start in range(0, 1000, 200):  # five writes: five segments
        _add(root, _texts(start, start + 200))
    ns = _namespace(root)
    snapshot = ReferenceIndex(root)._namespace_by_name(HashProvider.namespace).open()
    assert len(snapshot.segments) == 5
    assert all(isinstance(s.vectors, np.memmap) and isinstance(s.ids, np.memmap) for s in snapshot.segments)
    probe = _texts(0, 1000)[::-7] + ["not stored"]
    wanted = np.array([text_id(t) for t in probe], dtype=np.int64)
    rows = snapshot.find(wanted)
    assert rows[-1] == -1 and (rows[:-1] >= 0).all()
    before = snapshot.gather(rows[:-1])
    assert np.array_equal(before, np.stack([_hash_vector(t) for t in probe[:-1]]))
    del snapshot

    proc = _cli("index", "compact", "--index-dir", str(root))
    assert proc.returncode == 0, proc.stderr
    assert f"{HashProvider.namespace}: 5 segments -> 1 (1000 vectors)" in proc.stdout
    assert _segment_files(root) == [
        "seg-000006.crc32.npy",
        "seg-000006.ids.npy",
        "seg-000006.vectors.npy",
    ]  # the old files are gone
    ids = np.load(ns / "seg-000006.ids.npy")
    assert np.array_equal(ids, np.sort(ids)) and len(ids) == 1000
    after = ReferenceIndex(root)._namespace_by_name(HashProvider.namespace).open()
    assert np.array_equal(after.gather(after.find(wanted[:-1])), before)
    assert after.find(wanted[-1:])[0] == -1
    assert ReferenceIndex(root).check()[0]["problems"] == []
    again = _cli("index", "compact", "--index-dir", str(root))  # one segment: nothing to do
    assert again.returncode == 0 and "1 segment, nothing to compact" in again.stdout, again.stdout


def test_a_write_past_the_segment_limit_compacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALTASKS_INDEX_MAX_SEGMENTS", "4")
    root = tmp_path / "idx"
    _add(root, _texts(0, 1000))  # a large first segment: kept as it is when small ones are merged
    ns = _namespace(root)
    large = (ns / "seg-000001.vectors.npy").stat().st_ino
    counts = []
    for start in range(1000, 1010):
        _add(root, _texts(start, start + 1))
        counts.append(len(_meta(root)["segments"]))
    assert max(counts) <= 4 and counts[:3] == [2, 3, 4] and counts[3] == 2  # the 5th segment merged the small ones
    assert (ns / "seg-000001.vectors.npy").stat().st_ino == large  # the large segment was not rewritten
    meta = _meta(root)
    assert meta["count"] == 1010 and sum(s["count"] for s in meta["segments"]) == 1010
    listed = {s[k] for s in meta["segments"] for k in ("ids", "vectors", "crc32")}
    assert set(_segment_files(root)) == listed  # the merged segments' files are gone
    provider = HashProvider()
    lookup = ReferenceIndex(root).get_or_embed(provider, _texts(0, 1010))
    assert provider.embedded == 0
    assert np.array_equal(lookup.table.rows(_texts(0, 1010)), np.stack([_hash_vector(t) for t in _texts(0, 1010)]))


@pytest.mark.slow
def test_verify_catches_a_flipped_byte_in_one_segment(tmp_path: Path) -> None:
    """Opening hashes nothing (a 10 GB index opens in milliseconds) and a search reads only ids: `index verify`
    reads every byte and names the damaged file (and how many of its rows)."""
    root = tmp_path / "idx"
    for start in (0, 300, 600):
        _add(root, _texts(start, start + 300))
    ns = _namespace(root)
    healthy = _cli("index", "verify", "--index-dir", str(root))
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert f"{HashProvider.namespace}: ok, 900 vectors in 3 segments" in healthy.stdout
    path = ns / "seg-000002.vectors.npy"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40  # inside the float data: the header and size still agree
    path.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ReferenceIndex(root).missing_texts(HashProvider(), _texts(0, 900)) == []  # no vector read
    broken = _cli("index", "verify", "--index-dir", str(root))
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "Traceback" not in broken.stdout + broken.stderr
    assert (
        f"BROKEN ({ns}): the sha256 of seg-000002.vectors.npy differs from the one meta.json records; "
        "seg-000002.vectors.npy: 1 of 300 vectors differ from their row checksums" in broken.stdout
    )
    assert "seg-000001" not in broken.stdout and "seg-000003" not in broken.stdout
    assert "1 of 1 reference index namespaces are broken" in broken.stderr


def _write_format1(root: Path, texts: list[str]) -> Path:
    """A namespace as evaltasks wrote it before segments: vectors.faiss (IndexIDMap2 over IndexFlatIP) and a
    format-1 meta.json with its sha256."""
    ns = root / "test--hash-16--f0"
    ns.mkdir(parents=True)
    index = faiss.IndexIDMap2(faiss.IndexFlatIP(16))
    index.add_with_ids(np.stack([_hash_vector(t) for t in texts]), np.array([text_id(t) for t in texts]))
    data = faiss.serialize_index(index).tobytes()
    (ns / "vectors.faiss").write_bytes(data)
    meta = {
        "format": 1,
        "namespace": HashProvider.namespace,
        "provider": "test",
        "model": "hash-16",
        "fingerprint": "f0",
        "dimensions": 16,
        "count": len(texts),
        "index_sha256": hashlib.sha256(data).hexdigest(),
        "versions": {},
        "created": "2026-01-01T00:00:00+00:00",
        "updated": "2026-01-01T00:00:00+00:00",
        "truncated_ids": [text_id(texts[0])],
    }
    (ns / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return ns


@pytest.mark.parametrize("convert", ["write", "compact"])
def test_a_format1_namespace_is_read_then_converted(tmp_path: Path, convert: str) -> None:
    root = tmp_path / "idx"
    ns = _write_format1(root, _texts(0, 300))
    assert ReferenceIndex(root).check()[0]["problems"] == []
    provider = HashProvider()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lookup = ReferenceIndex(root).get_or_embed(provider, _texts(0, 300))
    assert provider.embedded == 0 and lookup.reused == 300
    assert lookup.table.truncated.tolist() == [True] + [False] * 299  # the marks carry over
    assert (ns / "vectors.faiss").exists()  # reading converts nothing
    if convert == "write":
        _add(root, _texts(0, 301))
    else:
        assert ReferenceIndex(root).compact() == {HashProvider.namespace: (0, 1)}
    count = 301 if convert == "write" else 300
    assert not (ns / "vectors.faiss").exists()
    meta = _meta(root)
    assert meta["format"] == 2 and meta["count"] == count and len(meta["segments"]) == 1
    assert meta["created"] == "2026-01-01T00:00:00+00:00" and meta["truncated_ids"] == [text_id("reference 0")]
    provider = HashProvider()
    lookup = ReferenceIndex(root).get_or_embed(provider, _texts(0, count))
    assert provider.embedded == 0
    assert np.array_equal(lookup.table.rows(_texts(0, count)), np.stack([_hash_vector(t) for t in _texts(0, count)]))
    assert ReferenceIndex(root).check()[0]["problems"] == []


READER = textwrap.dedent(
    """
    import hashlib, os, sys, warnings
    import numpy as np
    sys.path.insert(0, sys.argv[3])
    from test_index_segments import HashProvider, _hash_vector, _texts
    from evaltasks.index import ReferenceIndex

    warnings.simplefilter("error")  # a corruption warning ("rebuilding it") ends the reader with a traceback
    root, stop_file = sys.argv[1], sys.argv[2]
    probe = _texts(0, 400)[::3]
    expected = np.stack([_hash_vector(t) for t in probe])
    reads = 0
    while not os.path.exists(stop_file):
        provider = HashProvider()
        lookup = ReferenceIndex(root).get_or_embed(provider, probe)
        assert provider.embedded == 0, f"read {reads}: {provider.embedded} stored texts not found"
        assert np.array_equal(lookup.table.rows(probe), expected), f"read {reads}: wrong vectors"
        reads += 1
        if reads == 1:
            print("reading", flush=True)
    print(reads, flush=True)
    """
)


def test_readers_keep_reading_while_segments_are_compacted(tmp_path: Path) -> None:
    """Readers take no lock; a compaction deletes the segments an older manifest lists: a reader that finds
    one gone reads the manifest again, and never reports corruption or misses a stored text."""
    root, stop = tmp_path / "idx", tmp_path / "stop"
    for start in range(0, 400, 100):
        _add(root, _texts(start, start + 100))
    (tmp_path / "reader.py").write_text(READER, encoding="utf-8")
    readers = [
        subprocess.Popen(
            [sys.executable, str(tmp_path / "reader.py"), str(root), str(stop), str(Path(__file__).parent)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for reader in readers:
            assert reader.stdout.readline().strip() == "reading", reader.stderr.read()
        index = ReferenceIndex(root)
        compactions = 0
        for start in range(400, 460, 2):  # a segment, then a compaction that deletes every older file
            _add(root, _texts(start, start + 2))
            assert index.compact()[HashProvider.namespace] == (5 if start == 400 else 2, 1)
            compactions += 1
    finally:
        stop.touch()
    outputs = [reader.communicate(timeout=120) for reader in readers]
    for reader, (out, err) in zip(readers, outputs):
        assert reader.returncode == 0, err[-3000:]
        assert int(out.split()[-1]) >= 1
    assert compactions == 30 and _meta(root)["count"] == 460
    print(f"\nreads while {compactions} compactions ran: {[int(o.split()[-1]) for o, _ in outputs]}")


KILLED_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[4])
    from test_index_segments import HashProvider, _texts
    from evaltasks.index import ReferenceIndex

    root, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print("ready", flush=True)
    for chunk in range(start, stop, 20):  # a segment per write; past 3 segments every write also merges
        ReferenceIndex(root).get_or_embed(HashProvider(), _texts(chunk, chunk + 20))
    print("done", flush=True)
    """
)


@pytest.mark.slow
def test_a_writer_killed_while_it_adds_or_merges_segments_leaves_a_valid_state(tmp_path: Path) -> None:
    """kill -9 at random moments of a writer that adds a segment per write and, with a limit of 3 segments,
    merges segments on most writes: each state left verifies, keeps every committed vector, holds the right
    vectors; the next writer removes the files the killed ones left (uncommitted segments, temporaries)."""
    import random
    import signal
    import time

    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER, encoding="utf-8")
    root = tmp_path / "idx"
    env = {**os.environ, "EVALTASKS_INDEX_MAX_SEGMENTS": "3"}
    rng = random.Random(11)
    committed, leftovers = 0, 0
    for kill in range(10):
        start = kill * 2000
        writer = subprocess.Popen(
            [sys.executable, str(script), str(root), str(start), str(start + 2000), str(Path(__file__).parent)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert writer.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 120  # a hang guard only
        while not (root.exists() and list(root.glob("*/meta.json"))):  # at least one write committed
            assert writer.poll() is None and time.monotonic() < deadline, "the writer wrote nothing"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.05, 0.6))
        assert writer.poll() is None, "the writer finished before the kill: give it more texts"
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
        writer.stdout.close()
        meta = _meta(root)
        listed = {s[k] for s in meta["segments"] for k in ("ids", "vectors", "crc32")}
        ns = _namespace(root)
        leftovers += any(p.name not in listed for p in ns.glob("seg-*")) or bool(list(ns.glob(".*.tmp")))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a state reported corrupt fails the test
            ids, vectors, meta = ReferenceIndex(root)._namespace_by_name(HashProvider.namespace).load()
        assert len(ids) == len(set(ids.tolist())) == meta["count"] >= committed, f"kill {kill}: lost vectors"
        texts = {text_id(t): t for t in _texts(0, start + 2000)}
        assert np.array_equal(vectors, np.stack([_hash_vector(texts[int(i)]) for i in ids])), f"kill {kill}"
        assert len(meta["segments"]) <= 3
        committed = len(ids)
    done = subprocess.run(
        [sys.executable, str(script), str(root), "50000", "50040", str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    meta = _meta(root)
    listed = {s[k] for s in meta["segments"] for k in ("ids", "vectors", "crc32")}
    ns = _namespace(root)
    assert {p.name for p in ns.glob("seg-*")} == listed and not list(ns.glob(".*.tmp"))
    assert meta["count"] == committed + 40 and ReferenceIndex(root).check()[0]["problems"] == []
    print(f"\n10 kills: {leftovers} left files of an unfinished write; {meta['count']} vectors at the end")


# -- damage is never read: row checksums, checked on a process's first read of each row ----------------------
class WideProvider:
    """384-dimensional unit vectors: text ``"wide {i}"`` gets row i of a seeded matrix; counts what it embeds."""

    provider, model_name = "test", "wide-384"
    fingerprint, namespace = "f0", "test/wide-384/f0"
    _matrix: np.ndarray | None = None

    def __init__(self) -> None:
        self.embedded: list[str] = []

    @classmethod
    def matrix(cls, n: int = 50_000) -> np.ndarray:
        if cls._matrix is None or len(cls._matrix) < n:
            cls._matrix = normalize_rows(np.random.default_rng(3).standard_normal((n, 384)).astype(np.float32))
        return cls._matrix

    def embed_batch(self, texts: list[str]) -> EmbeddingBatch:
        self.embedded += texts
        return EmbeddingBatch.free(self.matrix()[[int(t.split()[1]) for t in texts]])

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embed_batch(texts).vectors


def _flip(path: Path, offset: int, mask: int) -> None:
    """XOR one byte of ``path`` in place (the file keeps its size and header)."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([byte ^ mask]))


def _vector_offset(path: Path, row: int, column: int, dims: int) -> int:
    """Byte offset of float32 element (row, column) in a ``.npy`` file of ``dims`` columns."""
    header = path.stat().st_size - np.load(path, mmap_mode="r").nbytes
    return header + (row * dims + column) * 4


def test_a_flipped_bit_in_a_segment_over_64_mib_is_never_read(tmp_path: Path) -> None:
    """A segment over 64 MiB was never hashed when read: a flipped byte came back from get_or_embed as data,
    with no warning, run after run. Now the row's checksum catches it (even a flip of the lowest mantissa bit,
    which keeps the vector's norm 1 to 1e-7), and only that text is embedded again."""
    n = 50_000  # 50,000 × 384 float32: 77 MB, one segment
    texts = [f"wide {i}" for i in range(n)]
    root = tmp_path / "idx"
    ReferenceIndex(root).get_or_embed(WideProvider(), texts)
    ns = _namespace(root)
    (path,) = ns.glob("seg-*.vectors.npy")
    assert path.stat().st_size > 64 * 1024 * 1024
    damaged = 31_337  # text "wide 31337": its row in the segment (sorted by id)
    row = int(np.searchsorted(np.load(ns / "seg-000001.ids.npy"), text_id(f"wide {damaged}")))
    _flip(path, _vector_offset(path, row, 5, 384), 0x01)  # the lowest mantissa bit of one component
    stored = np.load(path, mmap_mode="r")[row]
    assert stored[5] != WideProvider.matrix()[damaged, 5] and abs(np.linalg.norm(stored) - 1) < 1e-6

    provider = WideProvider()
    probe = texts[damaged - 500 : damaged + 500]
    with pytest.warns(UserWarning, match=f"reference index {ns} is corrupt .*1 rows differ .*embedded again"):
        lookup = ReferenceIndex(root).get_or_embed(provider, probe)
    assert provider.embedded == [f"wide {damaged}"] and lookup.reused == len(probe) - 1
    assert np.array_equal(lookup.table.rows(probe), WideProvider.matrix()[damaged - 500 : damaged + 500])

    again = WideProvider()  # the write dropped the damaged row and stored the new vector
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lookup = ReferenceIndex(root).get_or_embed(again, texts)
    assert again.embedded == [] and np.array_equal(lookup.table.rows(texts), WideProvider.matrix()[:n])
    assert ReferenceIndex(root).check()[0]["problems"] == []
    assert _meta(root)["count"] == n


def test_a_damaged_id_costs_only_its_own_text(tmp_path: Path) -> None:
    """A flipped byte in a segment's ids file once made the whole namespace count as corrupt: every text was
    embedded again. The ids file is hashed on a process's first search; the row checksums (which cover each
    row's id) find the damaged row, and the search leaves it out (a damaged id breaks the sort order)."""
    root = tmp_path / "idx"
    _add(root, _texts(0, 400))
    _add(root, _texts(400, 800))  # two segments
    ns = _namespace(root)
    ids_path = ns / "seg-000001.ids.npy"
    header = ids_path.stat().st_size - 400 * 8
    order = np.load(ids_path)
    _flip(ids_path, header + 200 * 8 + 7, 0x40)  # the high byte of the 201st id: the sort order breaks
    damaged_text = next(t for t in _texts(0, 400) if text_id(t) == order[200])
    provider = HashProvider()
    with pytest.warns(UserWarning, match="seg-000001.ids.npy: 1 rows differ from their checksums"):
        lookup = ReferenceIndex(root).get_or_embed(provider, _texts(0, 800))
    assert provider.embedded == 1 and lookup.reused == 799
    assert np.array_equal(lookup.table.rows(_texts(0, 800)), np.stack([_hash_vector(t) for t in _texts(0, 800)]))
    again = HashProvider()
    ReferenceIndex(root).get_or_embed(again, [damaged_text, *_texts(0, 800)])
    assert again.embedded == 0 and ReferenceIndex(root).check()[0]["problems"] == []


def test_a_segment_written_before_row_checksums_is_hashed_whole_when_read(tmp_path: Path) -> None:
    """A segment written by the previous version (no crc32 file) opens as before; it is hashed whole on a
    process's first read of it, at any size: damage in it costs its own texts, not the namespace's; a
    compaction rewrites it with row checksums."""
    root = tmp_path / "idx"
    _add(root, _texts(0, 300))
    _add(root, _texts(300, 500))
    ns = _namespace(root)
    meta = _meta(root)
    for entry in meta["segments"]:  # as the previous version wrote them
        (ns / entry.pop("crc32")).unlink()
        entry["sha256"].pop("crc32")
    (ns / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    assert ReferenceIndex(root).check()[0]["problems"] == []
    path = ns / "seg-000002.vectors.npy"
    _flip(path, _vector_offset(path, 150, 3, 16), 0x01)
    provider = HashProvider()
    with pytest.warns(UserWarning, match="the sha256 of seg-000002.vectors.npy differs"):
        lookup = ReferenceIndex(root).get_or_embed(provider, _texts(0, 500))
    assert provider.embedded == 200 and lookup.reused == 300  # the damaged segment's texts only
    assert np.array_equal(lookup.table.rows(_texts(0, 500)), np.stack([_hash_vector(t) for t in _texts(0, 500)]))
    assert ReferenceIndex(root).compact() == {HashProvider.namespace: (2, 1)}
    (entry,) = _meta(root)["segments"]
    assert entry["crc32"] == "seg-000004.crc32.npy" and ReferenceIndex(root).check()[0]["problems"] == []


def test_a_truncated_segment_costs_only_its_own_texts(tmp_path: Path) -> None:
    """A truncated segment file once made the whole namespace count as corrupt; now that segment is left out
    (under the writer lock) and the others are kept."""
    root = tmp_path / "idx"
    for start in (0, 300, 600):
        _add(root, _texts(start, start + 300))
    ns = _namespace(root)
    path = ns / "seg-000002.vectors.npy"
    path.write_bytes(path.read_bytes()[:1000])
    provider = HashProvider()
    with pytest.warns(UserWarning, match="seg-000002.vectors.npy is 1,000 bytes"):
        lookup = ReferenceIndex(root).get_or_embed(provider, _texts(0, 900))
    assert provider.embedded == 300 and lookup.reused == 600
    assert np.array_equal(lookup.table.rows(_texts(0, 900)), np.stack([_hash_vector(t) for t in _texts(0, 900)]))
    assert ReferenceIndex(root).check()[0]["problems"] == [] and not path.exists()


def test_write_vectors_embeds_a_damaged_vector_again(tmp_path: Path) -> None:
    """A reference set's vectors are read from the segments by write_vectors: a damaged row is embedded again,
    never copied into the set's search."""
    root = tmp_path / "idx"
    index = ReferenceIndex(root)
    index.get_or_embed(HashProvider(), _texts(0, 500), vectors=False)
    path = _namespace(root) / "seg-000001.vectors.npy"
    _flip(path, _vector_offset(path, 123, 0, 16), 0x80)  # a sign bit
    provider = HashProvider()
    with pytest.warns(UserWarning, match="corrupt"):
        got = index.write_vectors(provider, _texts(0, 500), tmp_path / "sets" / "s.npy", chunk=64)
    assert provider.embedded == 1
    assert np.array_equal(got, np.stack([_hash_vector(t) for t in _texts(0, 500)]))


def test_lookups_across_many_segments_find_every_stored_text(tmp_path: Path) -> None:
    """Many ids over several segments are searched through one merged table (built once per process): the
    rows equal a search segment by segment, absent ids are -1."""
    root = tmp_path / "idx"
    for start in range(0, 2000, 250):
        _add(root, _texts(start, start + 250))
    snapshot = ReferenceIndex(root)._namespace_by_name(HashProvider.namespace).open()
    assert len(snapshot.segments) == 8
    probe = [*_texts(0, 2000)[::-3], "absent 1", "absent 2"]
    wanted = np.array([text_id(t) for t in probe], dtype=np.int64)
    rows = snapshot.find(wanted)  # 669 ids: over TABLE_ABOVE
    assert len(wanted) > _segments.TABLE_ABOVE
    assert (rows[-2:] == -1).all() and np.array_equal(
        rows[:-2], snapshot._find_each(wanted[:-2], np.full(len(wanted) - 2, -1))
    )
    assert np.array_equal(snapshot.gather(rows[:-2]), np.stack([_hash_vector(t) for t in probe[:-2]]))


@pytest.mark.slow
def test_compact_rebuilds_what_it_can_and_names_what_it_cannot(tmp_path: Path) -> None:
    """`index compact` on a damaged index said "rebuilding it", did nothing and exited 0. Now it drops the
    damaged rows (kept bitwise: every other vector) and exits 1 naming each namespace it cannot read."""
    root = tmp_path / "idx"
    for start in (0, 300):
        _add(root, _texts(start, start + 300))
    ns = _namespace(root)
    path = ns / "seg-000002.vectors.npy"
    _flip(path, _vector_offset(path, 17, 9, 16), 0x04)
    done = _cli("index", "compact", "--index-dir", str(root))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "rebuilding it" not in done.stderr
    assert "evaltasks: warning: reference index" in done.stderr and "dropped 1 damaged vectors" in done.stderr
    assert f"{HashProvider.namespace}: 2 segments -> 1 (599 vectors; 1 damaged vectors dropped" in done.stdout
    assert ReferenceIndex(root).check()[0]["problems"] == []
    ids, vectors, _ = ReferenceIndex(root)._namespace_by_name(HashProvider.namespace).load()
    texts = {text_id(t): t for t in _texts(0, 600)}
    assert np.array_equal(vectors, np.stack([_hash_vector(texts[int(i)]) for i in ids]))  # bitwise

    other = root / "test--other--f0"
    other.mkdir()
    (other / "meta.json").write_text("{not json", encoding="utf-8")
    (other / "seg-000001.ids.npy").write_bytes(b"")
    broken = _cli("index", "compact", "--index-dir", str(root))
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"BROKEN ({other}): meta.json is unreadable" in broken.stdout
    assert "1 reference index namespaces could not be compacted" in broken.stderr
    assert "Traceback" not in broken.stderr


def test_lookups_across_32_segments_return_the_stored_rows_bitwise_in_request_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the auto-compaction limit (32 segments), a lookup returns each requested text's stored vector, bit for
    bit, in the order requested (the gather copies a segment's rows through a small buffer, here 3 rows, then
    to their places); rows outside the snapshot are an error, not another row's vector."""
    monkeypatch.setenv("EVALTASKS_INDEX_MAX_SEGMENTS", "32")
    monkeypatch.setattr(_segments, "GATHER_BYTES", 3 * 16 * 4)  # 3 rows of 16 float32: chunks split segments
    root = tmp_path / "idx"
    for start in range(0, 32 * 20, 20):
        _add(root, _texts(start, start + 20))
    snapshot = ReferenceIndex(root)._namespace_by_name(HashProvider.namespace).open()
    assert len(snapshot.segments) == 32
    probe = [_texts(0, 640)[i] for i in np.random.default_rng(7).permutation(640)]
    expected = np.stack([_hash_vector(t) for t in probe])
    provider = HashProvider()
    lookup = ReferenceIndex(root).get_or_embed(provider, probe)
    assert provider.embedded == 0 and lookup.reused == 640
    assert lookup.table.vectors.tobytes() == expected.tobytes()
    rows = snapshot.find(np.array([text_id(t) for t in probe], dtype=np.int64))
    twice = np.concatenate([rows, rows[::-1]])  # repeated rows, a second order
    assert snapshot.gather(twice).tobytes() == np.concatenate([expected, expected[::-1]]).tobytes()
    for outside in (-1, snapshot.count):
        with pytest.raises(IndexError, match="outside"):
            snapshot.gather(np.array([0, outside], dtype=np.int64))
