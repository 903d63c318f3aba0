"""Benchmark: the reference index's segment storage at 1,000,000 × 384 vectors, side by side with numpy.

One command measures, on one machine, each phase in a fresh process (so one phase's memory does not mask
another's), and writes the section ``## Reference index storage: {n} vectors`` of ``docs/performance.md``::

    .venv/bin/python bench/index_scale.py                     # n=1,000,000 (about 5 min on 2 cores)
    .venv/bin/python bench/index_scale.py --n 100000 --out /tmp/perf.md
    .venv/bin/python bench/index_scale.py --repeats 31   # more interleaved lookups (medians) on a loaded machine

Data: synthetic unit vectors (384 dimensions, seeded), text i = ``"text {i}"``, stored through
``ReferenceIndex.get_or_embed`` with a provider that returns them (no model).

Phases (targets from the reference index's design, at 10^6 × 384):
  build     the index written cold in one call (one segment); the same vectors with np.save, for scale
  open      the first open in a fresh process and warm opens (manifest + memory maps; target ≤ 0.2 s) vs
            np.load of the vectors; the cost of checking stored bytes (the ids file's sha256 on a process's first
            search, each row's CRC-32 on its first read: measured alone); looking up 10,000
            stored texts (find + gather from the mapped files; target ≤ 1.2 × the same searchsorted + gather
            on in-memory numpy arrays), and through get_or_embed (text hashing included)
  segments  the same lookup on namespaces of 7 and 32 segments (the data written in 7 or 32 equal parts, and one
            large segment plus 31 single-text adds; 32 is the auto-compaction limit): target ≤ 1.2 × numpy at
            every segment count; the first lookup after the open pays the merged search table, the ids hash and
            the rows' checksums (once per process)
  add       adding 1 new text, then 10,000 (target ≤ 0.2 s; peak RSS ≤ 1.2 × the added bytes + a constant)
  compact   merging the segments into one; `check()` (every byte hashed, what `evaltasks index verify` does)
  flat      exact top-10 of 100 queries over the 10^6 vectors: FAISS as evaltasks loads it (numpy's kernels),
            numpy_top_k, and FAISS on the kernels the faiss-cpu wheel falls back to on CPUs it does not know
            (OPENBLAS_CORETYPE=Prescott, in its own process)

Peak memory: VmHWM (reset through /proc/self/clear_refs at the start of a step) minus the RSS before the step;
RssAnon (process memory, not file pages that the kernel can drop) is sampled every 5 ms for its peak too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from _common import DIMS, Step, busy_seconds, synthetic_vectors, write_section  # bench/: on sys.path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024**2
REPEATS = 15  # interleaved repetitions of each lookup (index, numpy): the machine may be shared (--repeats)


class SyntheticProvider:
    """Returns row i of a seeded unit-vector matrix for text ``"text {i}"`` (rows beyond it: fresh seeds)."""

    provider, model_name, fingerprint = "bench", "synthetic-384", "s0"
    namespace = "bench/synthetic-384/s0"

    def __init__(self, vectors=None) -> None:
        self.vectors = vectors
        self.embedded = 0

    def embed_batch(self, texts):

        from evaltasks.embeddings.base import EmbeddingBatch

        self.embedded += len(texts)
        if self.vectors is not None and len(texts) == len(self.vectors):
            return EmbeddingBatch.free(self.vectors)
        return EmbeddingBatch.free(synthetic_vectors(len(texts), seed=len(texts) + 17))

    def embed(self, texts):
        return self.embed_batch(texts).vectors


def _texts(n: int) -> list[str]:
    return [f"text {i}" for i in range(n)]


def _namespace(root: Path):
    from evaltasks.index import ReferenceIndex

    return ReferenceIndex(root)._namespace_by_name(SyntheticProvider.namespace)


# ----------------------------------------------------------------------------------------------- phases


def phase_build(work: Path, n: int) -> dict:
    import numpy as np

    from evaltasks.index import ReferenceIndex

    vectors, texts = synthetic_vectors(n), _texts(n)
    with Step(sample_anon=True) as write:
        lookup = ReferenceIndex(work / "index").get_or_embed(SyntheticProvider(vectors), texts)
    assert lookup.computed == n
    with Step(sample_anon=True) as save, open(work / "vectors.npy", "wb") as handle:
        np.save(handle, vectors)
        handle.flush()
        os.fsync(handle.fileno())
    from evaltasks.index import text_id

    ids = np.fromiter((text_id(t) for t in texts), dtype=np.int64, count=n)
    order = np.argsort(ids)
    np.save(work / "ids_sorted.npy", ids[order])
    np.save(work / "rows_sorted.npy", order)
    size = sum(p.stat().st_size for p in (work / "index").rglob("*") if p.is_file())
    return {
        "index_write": write.as_dict(),
        "np_save": save.as_dict(),
        "index_bytes": size,
        "vectors_bytes": int(vectors.nbytes),
    }


def phase_open(work: Path, n: int, lookups: int) -> dict:
    import numpy as np

    from evaltasks.index import ReferenceIndex, text_id

    ns = _namespace(work / "index")
    opens = []
    for _ in range(5):
        t0 = time.perf_counter()
        snapshot = ns.open()
        opens.append(time.perf_counter() - t0)
    with Step(sample_anon=True) as np_load:
        vectors = np.load(work / "vectors.npy")
    ids_sorted, rows_sorted = np.load(work / "ids_sorted.npy"), np.load(work / "rows_sorted.npy")
    rng = np.random.default_rng(5)
    picks = rng.choice(n, size=min(lookups, n), replace=False)
    texts = [f"text {i}" for i in picks]
    wanted = np.fromiter((text_id(t) for t in texts), dtype=np.int64, count=len(texts))

    def numpy_lookup():
        pos = np.searchsorted(ids_sorted, wanted)
        return vectors[rows_sorted[pos]]

    def index_lookup():
        return snapshot.gather(snapshot.find(wanted))

    from evaltasks.index import _rows, _segments

    segment = snapshot.segments[0]
    t0 = time.perf_counter()
    _segments.file_sha256(work / "index" / ns.dir.name / segment.entry["ids"])
    ids_hash_s = time.perf_counter() - t0
    sample = np.sort(rng.choice(n, size=min(lookups, n), replace=False))
    data = np.asarray(segment.vectors[sample])
    t0 = time.perf_counter()
    _rows.row_checksums(segment.ids[sample], data)
    crc_s = time.perf_counter() - t0
    with Step(sample_anon=True) as first:  # the first lookup after the open: pages come from the page cache
        got = index_lookup()
    assert np.array_equal(got, vectors[picks]), "the index returned other vectors"
    timings: dict[str, list[float]] = {"index": [], "numpy": []}
    for _ in range(REPEATS):  # interleaved repetitions
        for name, fn in (("numpy", numpy_lookup), ("index", index_lookup)):
            t0 = time.perf_counter()
            fn()
            timings[name].append(time.perf_counter() - t0)
    assert np.array_equal(numpy_lookup(), got)
    with Step(sample_anon=True) as whole:
        provider = SyntheticProvider()
        lookup = ReferenceIndex(work / "index").get_or_embed(provider, texts)
    assert provider.embedded == 0 and lookup.reused == len(texts)
    t0 = time.perf_counter()
    hashed = np.fromiter((text_id(t) for t in texts), dtype=np.int64, count=len(texts))
    hash_s = time.perf_counter() - t0
    assert np.array_equal(hashed, wanted)
    return {
        "open_s": opens,
        "np_load": np_load.as_dict(),
        "first_lookup": first.as_dict(),
        "ids_hash_s": ids_hash_s,
        "crc_s": crc_s,
        "crc_rows": len(sample),
        "lookup_index_s": timings["index"],
        "lookup_numpy_s": timings["numpy"],
        "get_or_embed": whole.as_dict(),
        "hash_s": hash_s,
        "lookups": len(texts),
    }


def phase_segments(work: Path, n: int, lookups: int) -> dict:
    """Lookups of the same stored texts on namespaces of several segments, side by side with numpy."""
    import numpy as np

    from evaltasks.index import ReferenceIndex, text_id

    texts = _texts(n)
    vectors = np.load(work / "vectors.npy")
    ids_sorted, rows_sorted = np.load(work / "ids_sorted.npy"), np.load(work / "rows_sorted.npy")
    rng = np.random.default_rng(5)
    picks = rng.choice(n, size=min(lookups, n), replace=False)
    wanted = np.fromiter((text_id(f"text {i}") for i in picks), dtype=np.int64, count=len(picks))
    out = {}
    for label, parts, singles in (("7 equal", 7, 0), ("32 equal", 32, 0), ("1 + 31 single adds", 1, 31)):
        root = work / f"index-{parts}-{singles}"
        bounds = np.linspace(0, n, parts + 1).astype(int)
        for a, b in zip(bounds[:-1], bounds[1:]):  # noqa: RUF007
            ReferenceIndex(root).get_or_embed(SyntheticProvider(vectors[a:b]), texts[a:b])
        for i in range(singles):
            ReferenceIndex(root).get_or_embed(SyntheticProvider(), [f"single {i}"])
        ns = _namespace(root)
        t0 = time.perf_counter()
        snapshot = ns.open()
        open_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = snapshot.gather(snapshot.find(wanted))
        first_s = time.perf_counter() - t0
        assert np.array_equal(got, vectors[picks]), "the index returned other vectors"

        def numpy_lookup():
            return vectors[rows_sorted[np.searchsorted(ids_sorted, wanted)]]

        def index_lookup(snapshot=snapshot):  # bound now: the loop deletes its name
            return snapshot.gather(snapshot.find(wanted))

        timings: dict[str, list[float]] = {"index": [], "numpy": []}
        for _ in range(REPEATS):  # interleaved repetitions
            for name, fn in (("numpy", numpy_lookup), ("index", index_lookup)):
                t0 = time.perf_counter()
                fn()
                timings[name].append(time.perf_counter() - t0)
        out[label] = {
            "segments": len(snapshot.segments),
            "open_s": open_s,
            "first_s": first_s,
            "lookup_index_s": timings["index"],
            "lookup_numpy_s": timings["numpy"],
        }
        del snapshot
        import shutil

        shutil.rmtree(root)
    return out


def phase_add(work: Path, n: int, many: int) -> dict:
    import numpy as np

    from evaltasks.index import ReferenceIndex

    index = ReferenceIndex(work / "index")
    index.get_or_embed(SyntheticProvider(), ["warm-up: imports and first open"])  # a second segment
    out = {}
    for label, texts in (("one", ["one new text"]), ("many", [f"new text {i}" for i in range(many)])):
        provider = SyntheticProvider()
        with Step(sample_anon=True) as step:
            lookup = index.get_or_embed(provider, texts)
        assert lookup.computed == len(texts)
        out[label] = {**step.as_dict(), "texts": len(texts), "added_bytes": len(texts) * (DIMS * 4 + 8)}
    # the storage step alone (ReferenceIndex._store, as get_or_embed calls it once the texts are embedded): the
    # provider's output and the table returned to the caller are the caller's memory, not the index's

    from evaltasks.index import text_id

    texts = [f"stored alone {i}" for i in range(many)]
    ids = np.fromiter((text_id(t) for t in texts), dtype=np.int64, count=len(texts))
    vectors = synthetic_vectors(len(texts), seed=7)
    ns = _namespace(work / "index")
    ns.provider = SyntheticProvider()
    with Step(sample_anon=True) as step:
        index._store(ns, ids, vectors, ids[:0])
    out["store"] = {**step.as_dict(), "texts": len(texts), "added_bytes": len(texts) * (DIMS * 4 + 8)}
    out["segments"] = len(_namespace(work / "index").open().segments)
    return out


def phase_compact(work: Path, n: int) -> dict:
    from evaltasks.index import ReferenceIndex

    index = ReferenceIndex(work / "index")
    with Step(sample_anon=True) as step:
        done = index.compact()
    with Step(sample_anon=True) as check:
        problems = index.check()[0]["problems"]
    assert problems == [], problems
    ((before, after),) = done.values()
    return {
        "compact": step.as_dict(),
        "segments": [before, after],
        "check": check.as_dict(),
        "count": _namespace(work / "index").open().count,
    }


def phase_flat(work: Path, n: int, queries: int) -> dict:
    import numpy as np

    from evaltasks.index import _blas
    from evaltasks.index.search import ReferenceSearch, numpy_top_k

    vectors = np.load(work / "vectors.npy")
    q = synthetic_vectors(queries, seed=99)
    search = ReferenceSearch(vectors)
    out = {
        "faiss_core": _blas.faiss_core(),
        "numpy_core": _blas.numpy_core(),
        "through_numpy": _blas.flat_through_numpy(),
        "queries": queries,
        "env": os.environ.get("OPENBLAS_CORETYPE"),
    }
    t0 = time.perf_counter()
    from evaltasks.index._blas import faiss

    faiss_s, faiss_i = faiss.knn(q, search.vectors, 10, metric=faiss.METRIC_INNER_PRODUCT)  # FAISS's flat kernel
    out["faiss_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    np_s, np_i = numpy_top_k(search.vectors, q, 10)
    out["numpy_s"] = time.perf_counter() - t0
    out["same_rows"] = int((np_i == faiss_i).all(axis=1).sum())
    out["max_diff"] = float(np.abs(np_s - faiss_s).max())
    np.save(work / "flat_rows.npy", faiss_i)
    return out


def phase_flat_fallback(work: Path, n: int, queries: int) -> dict:
    import faiss  # loaded before evaltasks, with the variable the caller set: the wheel's fallback kernels
    import numpy as np

    from evaltasks.index import _blas

    vectors = np.load(work / "vectors.npy")
    q = synthetic_vectors(queries, seed=99)
    index = faiss.IndexFlatIP(DIMS)
    index.add(vectors)
    t0 = time.perf_counter()
    _, rows = index.search(q, 10)
    seconds = time.perf_counter() - t0
    same = int((rows == np.load(work / "flat_rows.npy")).all(axis=1).sum())
    return {"faiss_core": _blas.faiss_core(), "seconds": seconds, "same_rows": same}


PHASES = {
    "build": phase_build,
    "open": phase_open,
    "segments": phase_segments,
    "add": phase_add,
    "compact": phase_compact,
    "flat": phase_flat,
    "flat-fallback": phase_flat_fallback,
}


def _run_phase(name: str, args: argparse.Namespace, work: Path, env: dict | None = None) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--phase",
        name,
        "--work",
        str(work),
        "--n",
        str(args.n),
        "--lookups",
        str(args.lookups),
        "--many",
        str(args.many),
        "--queries",
        str(args.queries),
        "--repeats",
        str(args.repeats),
    ]
    busy0, t0 = busy_seconds(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"phase {name} failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["machine_cores_busy"] = (busy_seconds() - busy0) / wall  # this phase's own process included
    print(f"  {name}: {wall:.1f} s", file=sys.stderr)
    return result


def _cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else the machine type."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _render(r: dict, args: argparse.Namespace, seconds: float) -> str:
    n = args.n
    b, o, a, c, f, fb = r["build"], r["open"], r["add"], r["compact"], r["flat"], r["flat-fallback"]
    sg = r["segments"]
    mib = lambda v: f"{v / MIB:,.1f}"  # noqa: E731
    open_s, load_s = _median(o["open_s"][1:]), o["np_load"]["seconds"]
    li, ln = _median(o["lookup_index_s"]), _median(o["lookup_numpy_s"])
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    one, many = a["one"], a["many"]
    busy = ", ".join(f"{k} {v['machine_cores_busy']:.1f}" for k, v in r.items())
    lines = [
        f"## Reference index storage: {n:,} vectors",
        "",
        f"Measured by `bench/index_scale.py` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC in one run of "
        f"{seconds / 60:.1f} min: `.venv/bin/python bench/index_scale.py"
        + (f" --n {n}" if n != 1_000_000 else "")
        + "`.",
        "",
        f"- Machine: {_cpu_model()}, {os.cpu_count()} CPUs; Python "
        f"{platform.python_version()}; evaltasks at commit {commit}. Shared with other work: the machine's busy "
        f"cores during the phases were {busy} "
        f"(this benchmark's own process included).",
        f"- Data: {n:,} synthetic unit vectors × {DIMS} (seeded), texts `text {{i}}`; a namespace is segment files "
        f"(sorted int64 ids, float32 vectors, `.npy`) and `meta.json` (docs/embeddings.md#reference-index).",
        "",
        "| Step | Time (s) | Target | Peak RSS +MiB | Peak anon +MiB | Notes |",
        "|---|---:|---|---:|---:|---|",
        f"| write {n:,} vectors cold (one `get_or_embed`, one segment) | {b['index_write']['seconds']:.2f} | | "
        f"{mib(b['index_write']['peak_delta'])} | {mib(b['index_write']['anon_peak_delta'])} | "
        f"{b['index_bytes'] / MIB:,.0f} MiB on disk; vectors {b['vectors_bytes'] / MIB:,.0f} MiB |",
        f"| numpy: `np.save` + fsync of the same vectors | {b['np_save']['seconds']:.2f} | | "
        f"{mib(b['np_save']['peak_delta'])} | {mib(b['np_save']['anon_peak_delta'])} | |",
        f"| **first open in a fresh process** (manifest, map the segment) | {o['open_s'][0]:.4f} | ≤ 0.2 | | | |",
        f"| **warm open** (manifest, map the segment; median of 4 more) | {open_s:.4f} | ≤ 0.2 | | | |",
        f"| numpy: `np.load` of the vectors | {load_s:.2f} | | {mib(o['np_load']['peak_delta'])} | "
        f"{mib(o['np_load']['anon_peak_delta'])} | {load_s / open_s:,.0f} × the open |",
        f"| first lookup of {o['lookups']:,} stored texts after the open (find + gather, pages from the page "
        f"cache) | {o['first_lookup']['seconds']:.4f} | | {mib(o['first_lookup']['peak_delta'])} | "
        f"{mib(o['first_lookup']['anon_peak_delta'])} | |",
        f"| **lookup of {o['lookups']:,} stored texts** (find + gather from the mapped files; median of {REPEATS}) | "
        f"{li:.4f} | ≤ 1.2 × numpy | | | {li / ln:.2f} × numpy |",
        f"| numpy: `searchsorted` + gather of the same rows from in-memory arrays (median of {REPEATS}) | "
        f"{ln:.4f} | | | | |",
        f"| checks, alone: sha256 of the ids file (once per process, on the first search) | {o['ids_hash_s']:.4f} "
        f"| | | | {n * 8 / MIB:,.1f} MiB |",
        f"| checks, alone: CRC-32 of {o['crc_rows']:,} rows (each row once per process, on its first read) | "
        f"{o['crc_s']:.4f} | | | | {o['crc_s'] / o['crc_rows'] * 1e6:.2f} µs a row; in the first lookup above |",
        f"| `get_or_embed` of the {o['lookups']:,} stored texts (hashing {o['hash_s']:.3f} s included) | "
        f"{o['get_or_embed']['seconds']:.3f} | | {mib(o['get_or_embed']['peak_delta'])} | "
        f"{mib(o['get_or_embed']['anon_peak_delta'])} | nothing embedded |",
        f"| **add 1 text** (`get_or_embed`: open, find, new segment, manifest) | {one['seconds']:.4f} | ≤ 0.2 | "
        f"{mib(one['peak_delta'])} | {mib(one['anon_peak_delta'])} | added {one['added_bytes']:,} bytes |",
        f"| add {many['texts']:,} texts | {many['seconds']:.3f} | | {mib(many['peak_delta'])} | "
        f"{mib(many['anon_peak_delta'])} | added {mib(many['added_bytes'])} MiB; "
        f"{many['peak_delta'] / many['added_bytes']:.2f} × |",
        f"| the storage step alone for {a['store']['texts']:,} embedded texts (`_store`: find, new segment, "
        f"manifest) | {a['store']['seconds']:.3f} | | {mib(a['store']['peak_delta'])} | "
        f"{mib(a['store']['anon_peak_delta'])} | added {mib(a['store']['added_bytes'])} MiB; "
        f"{a['store']['peak_delta'] / a['store']['added_bytes']:.2f} × |",
        f"| compact {c['segments'][0]} segments into {c['segments'][1]} ({c['count']:,} vectors) | "
        f"{c['compact']['seconds']:.2f} | | {mib(c['compact']['peak_delta'])} | {mib(c['compact']['anon_peak_delta'])} "
        f"| RSS includes the mapped file pages read |",
        f"| `check()` / `evaltasks index verify` (sha256 of every byte) | {c['check']['seconds']:.2f} | | "
        f"{mib(c['check']['peak_delta'])} | {mib(c['check']['anon_peak_delta'])} | |",
        "",
        f"### Lookups as segments accumulate: {o['lookups']:,} stored texts of {n:,}",
        "",
        "The same vectors written in parts (each `get_or_embed` call writes one segment; 32 is the auto-compaction "
        f"limit), the same lookup (find + gather, median of {REPEATS} interleaved with numpy's). 1 segment: the "
        "one-shot build above. The first lookup after the open builds the merged search table, hashes the ids files "
        "and checks the rows' checksums (once per process).",
        "",
        "| Namespace | Segments | Open (s) | First lookup (s) | Lookup (s) | numpy (s) | × numpy (target ≤ 1.2) |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| one-shot build | 1 | {o['open_s'][0]:.4f} | {o['first_lookup']['seconds']:.4f} | {li:.4f} | {ln:.4f} | "
        f"**{li / ln:.2f}** |",
        *(
            f"| {label} | {v['segments']} | {v['open_s']:.4f} | {v['first_s']:.4f} | {_median(v['lookup_index_s']):.4f} "
            f"| {_median(v['lookup_numpy_s']):.4f} | "
            f"**{_median(v['lookup_index_s']) / _median(v['lookup_numpy_s']):.2f}** |"
            for label, v in sg.items()
            if isinstance(v, dict)
        ),
        "",
        f"### Exact flat search: top 10 of {f['queries']} queries over {n:,} vectors",
        "",
        "| Method | OpenBLAS core | Time (s) | Queries/s | Same top 10 as FAISS |",
        "|---|---|---:|---:|---|",
        f"| FAISS flat as evaltasks loads it (`OPENBLAS_CORETYPE` set to numpy's core: {f['env']}) | "
        f"{f['faiss_core']} | {f['faiss_s']:.2f} | {f['queries'] / f['faiss_s']:,.0f} | (reference) |",
        f"| `numpy_top_k` (used when FAISS runs other kernels than numpy) | {f['numpy_core']} | {f['numpy_s']:.2f} | "
        f"{f['queries'] / f['numpy_s']:,.0f} | {f['same_rows']}/{f['queries']} (scores within {f['max_diff']:.1e}) |",
        f"| FAISS flat on the wheel's fallback kernels (loaded first with `OPENBLAS_CORETYPE=Prescott`) | "
        f"{fb['faiss_core']} | {fb['seconds']:.2f} | {f['queries'] / fb['seconds']:,.0f} | "
        f"{fb['same_rows']}/{f['queries']} |",
        "",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    global REPEATS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--lookups", type=int, default=10_000)
    parser.add_argument("--many", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument(
        "--repeats",
        type=int,
        default=REPEATS,
        help="interleaved repetitions of each lookup, index and numpy (medians reported)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="document to rewrite (default docs/performance.md; --quick: none)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the raw results here")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 5,000 vectors, 200 lookups and adds, 10 queries; prints, writes no document",
    )
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    REPEATS = args.repeats
    if args.quick and not args.phase:
        args.n, args.lookups, args.many, args.queries = 5_000, 200, 200, 10
    if args.phase:
        extra = {
            "open": (args.lookups,),
            "segments": (args.lookups,),
            "add": (args.many,),
            "flat": (args.queries,),
            "flat-fallback": (args.queries,),
        }.get(args.phase, ())
        print(json.dumps(PHASES[args.phase](args.work, args.n, *extra)))
        return
    t0 = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory(prefix="index-scale-") as tmp:
        work = Path(tmp)
        env = {k: "" for k in ("EVALTASKS_INDEX_MAX_SEGMENTS",)}
        for name in ("build", "open", "segments", "add", "compact", "flat"):
            results[name] = _run_phase(name, args, work, env)
        results["flat-fallback"] = _run_phase("flat-fallback", args, work, {"OPENBLAS_CORETYPE": "Prescott"})
    seconds = time.perf_counter() - t0
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    section = _render(results, args, seconds)
    out = args.out or (None if args.quick else ROOT / "docs" / "performance.md")
    if out:
        write_section(out, section, f"## Reference index storage: {args.n:,} vectors")
    print(section)


if __name__ == "__main__":
    main()
