"""IVF search against exact flat search over N synthetic 384-d unit vectors with cluster structure, one run.

The vectors are ``CLUSTERS`` Gaussian clusters (unit centres, per-dimension spread 0.04: a vector's cosine to
its centre is about 0.6), seeded; the queries are stored vectors plus noise of the same scale (near-duplicate
texts' embeddings). One process, side by side: exact flat search (``exact_top_k``: FAISS's flat kernels) of the
queries (the ground truth), then ``ReferenceSearch`` with ``search: ivf`` (IVF-Flat) and ``ivf_pq`` (IVF-PQ,
re-ranked) built as a run builds them: build seconds, resident memory added by the build, bytes per vector of
the index file, queries per second and recall@1 / recall@10 at several ``nprobe``. The machine's load average
is recorded before and after (the machine is shared)::

    .venv/bin/python bench/ivf_search.py 1000000 10000 1000 48 > ivf.json   # N CLUSTERS QUERIES PQ_M
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import near_copies, synthetic_vectors  # bench/ is the script directory: on sys.path

from evaltasks.index._blas import faiss
from evaltasks.index.search import ReferenceSearch, SearchConfig, exact_top_k

D = 384


def _rss_mib() -> float:
    """Resident memory of this process, MiB (``VmRSS``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def clustered(n: int, clusters: int, queries: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(n, 384) unit vectors in ``clusters`` Gaussian clusters and ``queries`` unit queries near stored ones."""
    rng = np.random.default_rng(seed)
    vectors = synthetic_vectors(n, dims=D, clusters=clusters, rng=rng)
    return vectors, near_copies(vectors, queries, rng, noise=0.02)


def recall(found: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """(recall@1, recall@10) of ``found`` (m, 10) against ``truth`` (m, 10)."""
    at_10 = np.mean([len(set(f) & set(t)) / truth.shape[1] for f, t in zip(found.tolist(), truth.tolist())])
    return float(np.mean(found[:, 0] == truth[:, 0])), float(at_10)


def run_ivf(vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray, exact_qps: float, config: SearchConfig,
            nprobes: tuple[int, ...], directory: Path) -> dict[str, object]:
    """Build ``config`` as a run does, then measure it at each nprobe."""
    rss0 = _rss_mib()
    t0 = time.perf_counter()
    search = ReferenceSearch(vectors, config)
    build = time.perf_counter() - t0
    path = directory / f"{search.config.label()}.faiss"
    search.save(path)
    row: dict[str, object] = {
        "label": search.config.label(), "factory": search.config.factory(), "build_s": round(build, 1),
        "build_rss_added_mib": round(_rss_mib() - rss0, 1),
        "index_file_bytes_per_vector": round(path.stat().st_size / len(vectors), 1),
        "load_avg_after_build": os.getloadavg(), "nprobe": [],
    }
    ivf = faiss.extract_index_ivf(search.index)
    for nprobe in nprobes:
        ivf.nprobe = nprobe
        object.__setattr__(search, "config", SearchConfig(**{**search.config.__dict__, "nprobe": nprobe}))
        t0 = time.perf_counter()
        _, found = search.top_k(queries, 10)
        seconds = time.perf_counter() - t0
        r1, r10 = recall(found, truth)
        row["nprobe"].append({"nprobe": nprobe, "qps": round(len(queries) / seconds, 1),
                              "speedup_vs_exact": round(len(queries) / seconds / exact_qps, 1),
                              "recall_at_1": r1, "recall_at_10": round(r10, 4)})
        print(json.dumps({"progress": row["label"], **row["nprobe"][-1]}), file=sys.stderr, flush=True)
    del search
    return row


def main() -> None:
    n, clusters, m, pq = (int(v) for v in sys.argv[1:5])
    out: dict[str, object] = {"n": n, "d": D, "clusters": clusters, "queries": m, "cpus": os.cpu_count(),
                              "load_avg_before": os.getloadavg(), "faiss": faiss.__version__}
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
        out["ivf_flat"] = run_ivf(vectors, queries, truth, m / exact, SearchConfig(kind="ivf"), nprobes, Path(tmp))
        print(json.dumps(out["ivf_flat"]), file=sys.stderr, flush=True)
        out["ivf_pq"] = run_ivf(vectors, queries, truth, m / exact, SearchConfig(kind="ivf", ivf_pq=pq), nprobes,
                                Path(tmp))
    out["load_avg_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
