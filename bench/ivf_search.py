"""IVF search against exact flat search over N synthetic 384-d unit vectors with cluster structure, one run.

The vectors are ``CLUSTERS`` Gaussian clusters (unit centres, per-dimension spread 0.04: a vector's cosine to
its centre is about 0.6), seeded; the queries are stored vectors plus noise of the same scale (near-duplicate
texts' embeddings). One process, side by side: exact flat search (``exact_top_k``: FAISS's flat kernels) of the
queries (the ground truth), then ``ReferenceSearch`` with ``search: ivf`` (IVF-Flat), ``ivf_sq8`` (IVF-SQ8) and
``ivf_pq`` (IVF-PQ, re-ranked) built as a run builds them: build seconds, resident memory added by the build,
bytes per vector of the index file, queries per second and recall@1 / recall@10 at several ``nprobe``. The
machine's load average is recorded before and after (the machine is shared)::

    .venv/bin/python bench/ivf_search.py 1000000 10000 1000 48 > ivf.json   # N CLUSTERS QUERIES PQ_M
    .venv/bin/python bench/ivf_search.py 1000000 10000 1000 48 --only sq8   # one option

``--stream`` (for 10^7 vectors, 15.4 GB that are neither held nor written) generates the vectors in seeded
chunks of 100,000, twice: the first pass gathers the queries' sources and the training sample
(:func:`ivf_training_rows`), the second scores each chunk exactly (the queries' running top 10: exact search
streamed over chunks, timed without the generation) and adds it to IVF-SQ8 (:func:`train_ivf`, then ``add`` per
chunk, as ``ReferenceSearch`` adds). Peak RSS (``ru_maxrss``) and the RSS after each step (psutil) are
reported. Options whose search needs the vectors in memory or on disk (IVF-Flat: 4·d bytes a vector in the
index; IVF-PQ: re-ranked from them) are not built in this mode::

    nice -n 5 .venv/bin/python bench/ivf_search.py 10000000 10000 300 48 --stream > ivf-1e7.json
    # --one-pass: sample and queries from the first rows; --deadline S: stop adding after S s, measure what was added
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import psutil
from _common import near_copies, status_kib, synthetic_vectors  # bench/ is the script directory: on sys.path

from evaltasks.index._blas import faiss
from evaltasks.index.search import ReferenceSearch, SearchConfig, exact_top_k, ivf_training_rows, train_ivf

D = 384


def _rss_mib() -> float:
    """Resident memory of this process, MiB (``VmRSS``)."""
    return status_kib("VmRSS") / 1024


def clustered(n: int, clusters: int, queries: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(n, 384) unit vectors in ``clusters`` Gaussian clusters and ``queries`` unit queries near stored ones."""
    rng = np.random.default_rng(seed)
    vectors = synthetic_vectors(n, dims=D, clusters=clusters, rng=rng)
    return vectors, near_copies(vectors, queries, rng, noise=0.02)


def recall(found: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """(recall@1, recall@10) of ``found`` (m, 10) against ``truth`` (m, 10)."""
    at_10 = np.mean([len(set(f) & set(t)) / truth.shape[1] for f, t in zip(found.tolist(), truth.tolist())])
    return float(np.mean(found[:, 0] == truth[:, 0])), float(at_10)


def run_ivf(
    vectors: np.ndarray,
    queries: np.ndarray,
    truth: np.ndarray,
    exact_qps: float,
    config: SearchConfig,
    nprobes: tuple[int, ...],
    directory: Path,
) -> dict[str, object]:
    """Build ``config`` as a run does, then measure it at each nprobe."""
    rss0 = _rss_mib()
    t0 = time.perf_counter()
    search = ReferenceSearch(vectors, config)
    build = time.perf_counter() - t0
    path = directory / f"{search.config.label()}.faiss"
    search.save(path)
    row: dict[str, object] = {
        "label": search.config.label(),
        "factory": search.config.factory(),
        "build_s": round(build, 1),
        "build_rss_added_mib": round(_rss_mib() - rss0, 1),
        "index_file_bytes_per_vector": round(path.stat().st_size / len(vectors), 1),
        "load_avg_after_build": os.getloadavg(),
        "nprobe": [],
    }
    for nprobe in nprobes:
        query_config = replace(search.config, nprobe=nprobe)
        t0 = time.perf_counter()
        _, found = search.top_k(queries, 10, query_config)
        seconds = time.perf_counter() - t0
        r1, r10 = recall(found, truth)
        row["nprobe"].append(
            {
                "nprobe": nprobe,
                "qps": round(len(queries) / seconds, 1),
                "speedup_vs_exact": round(len(queries) / seconds / exact_qps, 1),
                "recall_at_1": r1,
                "recall_at_10": round(r10, 4),
            }
        )
        print(json.dumps({"progress": row["label"], **row["nprobe"][-1]}), file=sys.stderr, flush=True)
    if config.target_recall is not None:
        row["target_recall"] = _tuned(search, queries, truth, exact_qps, config)
    del search
    return row


def _tuned(
    search: ReferenceSearch, queries: np.ndarray, truth: np.ndarray, exact_qps: float, config: SearchConfig
) -> dict[str, object]:
    """What a run with ``target_recall`` gets: the breadth widened from the configured ``nprobe`` on the first
    half of ``queries`` (:meth:`ReferenceSearch.measure_recall`, as a run does on its outputs), then measured on
    the other half (held out): nprobe, queries/s, speed-up and recall@1/@10 there."""
    half = len(queries) // 2
    start = replace(search.config, nprobe=config.nprobe, target_recall=config.target_recall)
    tuned = search.measure_recall(queries[:half], sample=half, query_config=start)
    held_out, held_truth = queries[half:], truth[half:]
    t0 = time.perf_counter()
    _, found = search.top_k(held_out, 10, tuned.query_config)
    seconds = time.perf_counter() - t0
    r1, r10 = recall(found, held_truth)
    row = {
        "target": config.target_recall,
        "tuned_on": half,
        "nprobe": tuned.query_config.nprobe,
        "recall_at_10_tuned_on": round(tuned.recall_at_10 or 0.0, 4),
        "held_out": len(held_out),
        "qps": round(len(held_out) / seconds, 1),
        "speedup_vs_exact": round(len(held_out) / seconds / exact_qps, 1),
        "recall_at_1": r1,
        "recall_at_10": round(r10, 4),
    }
    print(json.dumps({"progress": "target_recall", **row}), file=sys.stderr, flush=True)
    return row


_STREAM_CHUNK = 100_000


def _peak_mib() -> float:
    """Peak resident memory of this process so far, MiB (``ru_maxrss``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def streamed_chunk(centres: np.ndarray, start: int, stop: int, seed: int = 0) -> np.ndarray:
    """Rows [start, stop) of the streamed set (``start`` a multiple of 100,000): the same rows on every call."""
    rng = np.random.default_rng([seed, start])
    block = centres[rng.integers(0, len(centres), stop - start)]
    block += 0.04 * rng.standard_normal((stop - start, D), dtype=np.float32)
    block /= np.linalg.norm(block, axis=1, keepdims=True)
    return block


def run_streamed(
    n: int, clusters: int, m: int, out: dict[str, object], one_pass: bool = False, deadline: float | None = None
) -> None:
    """Exact search and IVF-SQ8 over ``n`` streamed vectors (module docstring), results into ``out``.

    ``one_pass``: the queries' sources and the training sample are the first rows (rows are independent draws,
    so the first 39·nlist rows are as good a sample as a seeded choice) and the vectors are generated once.
    ``deadline`` (``time.time()``): stop adding there and measure the rows added so far (exact search over the
    same rows), so a run on a saturated machine still measures the 10^7 configuration on a part of the set."""
    proc = psutil.Process()
    config = SearchConfig(kind="ivf", ivf_sq8=True).resolve(n)
    rng = np.random.default_rng(1)
    centres = rng.standard_normal((clusters, D)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    sources = np.sort(rng.choice(n, m, replace=False))
    train_rows = ivf_training_rows(n, config)
    queries = np.empty((m, D), dtype=np.float32)
    sample = np.empty((len(train_rows), D), dtype=np.float32)
    if one_pass:
        sources = np.sort(np.random.default_rng(2).choice(_STREAM_CHUNK, m, replace=False))
        train_rows = np.arange(len(train_rows))
    t0 = time.perf_counter()
    for start in range(0, n if not one_pass else len(train_rows), _STREAM_CHUNK):  # pass 1: sources, sample
        stop = min(n, start + _STREAM_CHUNK)
        block = streamed_chunk(centres, start, stop)
        for rows, into in ((sources, queries), (train_rows, sample)):
            lo, hi = np.searchsorted(rows, [start, stop])
            into[lo:hi] = block[rows[lo:hi] - start]
    queries += 0.02 * rng.standard_normal((m, D), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    out["generate_pass_s"] = round(time.perf_counter() - t0, 1)
    out["config"] = {
        "factory": config.factory(),
        "label": config.label(),
        "nprobe": config.nprobe,
        "training_rows": len(train_rows),
    }
    rss0 = proc.memory_info().rss / 2**20
    t0, c0 = time.perf_counter(), time.process_time()
    index = train_ivf(sample, n, config)
    train, train_cpu = time.perf_counter() - t0, time.process_time() - c0
    del sample
    out["train_s"], out["train_cpu_s"] = round(train, 1), round(train_cpu, 1)
    print(json.dumps(out), file=sys.stderr, flush=True)
    best_s = np.full((m, 10), -np.inf, dtype=np.float32)
    best_i = np.full((m, 10), -1, dtype=np.int64)
    exact = add = exact_cpu = add_cpu = 0.0  # wall and process CPU seconds (CPU / 2: an idle 2-core machine)
    added = 0
    for start in range(0, n, _STREAM_CHUNK):  # pass 2: exact top 10 of the chunk, then the chunk into the index
        if deadline is not None and added and time.time() > deadline:
            break
        stop = added = min(n, start + _STREAM_CHUNK)
        block = streamed_chunk(centres, start, stop)
        t0, c0 = time.perf_counter(), time.process_time()
        sims, rows = exact_top_k(block, queries, 10)
        cand_s, cand_i = np.concatenate([best_s, sims], axis=1), np.concatenate([best_i, rows + start], axis=1)
        order = np.argsort(-cand_s, axis=1, kind="stable")[:, :10]
        best_s, best_i = np.take_along_axis(cand_s, order, axis=1), np.take_along_axis(cand_i, order, axis=1)
        t1, c1 = time.perf_counter(), time.process_time()
        index.add(block)
        t2, c2 = time.perf_counter(), time.process_time()
        exact, add, exact_cpu, add_cpu = exact + t1 - t0, add + t2 - t1, exact_cpu + c1 - c0, add_cpu + c2 - c1
        if start % 1_000_000 == 0:
            print(
                json.dumps(
                    {
                        "progress": stop,
                        "exact_s": round(exact, 1),
                        "add_s": round(add, 1),
                        "exact_cpu_s": round(exact_cpu, 1),
                        "add_cpu_s": round(add_cpu, 1),
                        "peak_rss_mib": round(_peak_mib()),
                        "load": os.getloadavg(),
                    }
                ),
                file=sys.stderr,
                flush=True,
            )
    out["rows_added"] = added
    out["exact"] = {
        "rows": added,
        "seconds": round(exact, 1),
        "cpu_s": round(exact_cpu, 1),
        "qps": round(m / exact, 1),
        "bytes_per_vector": 4 * D,
        "how": "exact_top_k per 100,000-row chunk, running top 10 merged; generation not timed",
    }
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        path = Path(tmp) / "ivf.faiss"
        faiss.write_index(index, str(path))
        file_bytes = path.stat().st_size
    row: dict[str, object] = {
        "label": config.label(),
        "factory": config.factory(),
        "build_s": round(train + add, 1),
        "train_s": round(train, 1),
        "add_s": round(add, 1),
        "train_cpu_s": round(train_cpu, 1),
        "add_cpu_s": round(add_cpu, 1),
        "peak_rss_mib": round(_peak_mib(), 1),
        "rss_after_build_mib": round(proc.memory_info().rss / 2**20, 1),
        "rss_before_train_mib": round(rss0, 1),
        "index_file_bytes_per_vector": round(file_bytes / added, 1),
        "load_avg_after_build": os.getloadavg(),
        "nprobe": [],
    }
    ivf = faiss.extract_index_ivf(index)
    for nprobe in (8, 16, 32, 64):
        ivf.nprobe = nprobe
        t0, c0 = time.perf_counter(), time.process_time()
        _, found = index.search(queries, 10)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        r1, r10 = recall(found, best_i)
        row["nprobe"].append(
            {
                "nprobe": nprobe,
                "qps": round(m / seconds, 1),
                "cpu_s": round(cpu, 2),
                "speedup_vs_exact": round(m / seconds / (m / exact), 1),
                "cpu_speedup_vs_exact": round(exact_cpu / cpu, 1),
                "recall_at_1": r1,
                "recall_at_10": round(r10, 4),
            }
        )
        print(json.dumps({"progress": row["label"], **row["nprobe"][-1]}), file=sys.stderr, flush=True)
    out["ivf_sq8"] = row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("n", "clusters", "queries", "pq_m"):
        parser.add_argument(name, type=int)
    parser.add_argument("--only", default="flat,sq8,pq", help="options to build: flat, sq8, pq (comma-separated)")
    parser.add_argument("--stream", action="store_true", help="generate the vectors in chunks (10^7), IVF-SQ8 only")
    parser.add_argument("--one-pass", action="store_true", help="with --stream: sample and queries from the first rows")
    parser.add_argument("--deadline", type=float, help="with --stream: stop adding after this many seconds")
    args = parser.parse_args()
    n, clusters, m, pq = args.n, args.clusters, args.queries, args.pq_m
    only = set(args.only.split(","))
    out: dict[str, object] = {
        "n": n,
        "d": D,
        "clusters": clusters,
        "queries": m,
        "cpus": os.cpu_count(),
        "load_avg_before": os.getloadavg(),
        "faiss": faiss.__version__,
    }
    if args.stream:
        deadline = time.time() + args.deadline if args.deadline else None
        run_streamed(n, clusters, m, out, one_pass=args.one_pass, deadline=deadline)
        out["load_avg_after"] = os.getloadavg()
        print(json.dumps(out, indent=1))
        return
    t0 = time.perf_counter()
    vectors, queries = clustered(n, clusters, m)
    out["generate_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    _, truth = exact_top_k(vectors, queries, 10)
    exact = time.perf_counter() - t0
    out["exact"] = {"seconds": round(exact, 1), "qps": round(m / exact, 1), "bytes_per_vector": 4 * D}
    print(json.dumps(out), file=sys.stderr, flush=True)
    nprobes = (4, 8, 16, 32, 64, 128)
    with tempfile.TemporaryDirectory() as tmp:
        for option, config in (
            ("flat", SearchConfig(kind="ivf")),
            ("sq8", SearchConfig(kind="ivf", ivf_sq8=True)),
            ("pq", SearchConfig(kind="ivf", ivf_pq=pq)),
        ):
            if option in only:
                out[f"ivf_{option}"] = run_ivf(vectors, queries, truth, m / exact, config, nprobes, Path(tmp))
                print(json.dumps(out[f"ivf_{option}"]), file=sys.stderr, flush=True)
    out["load_avg_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
