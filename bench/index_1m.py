"""Benchmark: the reference index and reference-set search at 1,000,000 vectors, side by side with plain numpy.

One command runs every measurement on the same machine and writes the section
``## Reference index: {n} vectors`` of ``docs/performance.md`` (only that section is replaced)::

    .venv/bin/python bench/index_1m.py                      # n=1,000,000, 10,000 queries, 2 threads
    .venv/bin/python bench/index_1m.py --n 100000 --out /tmp/perf.md

Data: synthetic unit vectors (384 dimensions, seeded). Queries: 10,000 unit vectors, half of them noisy copies
of set vectors (cosine ~0.89 to their source, so top-1 is meaningful), half uniformly random (top-1 among
near-ties: the hard case for approximate search).

Each phase runs in a fresh subprocess so that peak memory of one phase does not mask another; within a phase
the peak (VmHWM, same as getrusage ru_maxrss on Linux) is reset between steps through /proc/self/clear_refs.
Memory is reported as the peak RSS of a step minus the RSS before it (inputs already loaded). The CPU time that
other processes use while a phase runs is recorded from /proc/stat; on a shared machine ``--quiet-cores 0.25
--retries 2`` waits for quiet before each phase and measures again (keeping the least disturbed attempt) a
phase that was slowed down.

Phases:
  numpy      np.ascontiguousarray / np.save+fsync / np.load; chunked matmul + argmax, clamped (max aggregation)
  index-*    ReferenceIndex.get_or_embed through a synthetic provider: cold (embed + persist), warm (load,
             nothing embedded), and one new text added to the full index
             (the segment storage that replaced the format-1 file is measured by bench/index_scale.py; the
             format-1 prototype phases were removed with that format; --render-from still shows old results)
  flat-*     ReferenceSearch flat: build, save, load; top_k k=1 (max aggregation) and k=10 (what
             ReferenceMatchMetric asks for); run as installed and, when FAISS's bundled OpenBLAS picks
             weaker kernels than numpy's, again with OPENBLAS_CORETYPE set to numpy's choice
  hnsw       ReferenceSearch hnsw (default SearchConfig parameters), built in chunks until --hnsw-n or the
             --hnsw-budget-s time budget; queries at each --ef-search, recall@1 against exact search
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from _common import (  # bench/: on sys.path
    Step,
    busy_seconds,
    children_cpu,
    synthetic_vectors,
    wait_quiet,
    write_section,
)

ROOT = Path(__file__).resolve().parents[1]
GIB = 1024**3
MIB = 1024**2


# ----------------------------------------------------------------------------------------------- helpers


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _blas_info() -> list[dict]:
    import threadpoolctl

    return [
        {
            k: info.get(k)
            for k in ("internal_api", "prefix", "version", "architecture", "num_threads", "threading_layer", "filepath")
        }
        for info in threadpoolctl.threadpool_info()
    ]


def numpy_max(refs, queries, qb: int = 4096, rb: int = 16384):
    """Exact max aggregation in plain numpy: per query the best reference (index, raw similarity).

    Chunked over queries and references so that one block (qb x rb float32) stays small; ties keep the
    lowest index.
    """
    import numpy as np

    m = len(queries)
    best = np.full(m, -np.inf, dtype=np.float32)
    arg = np.zeros(m, dtype=np.int64)
    buf = np.empty((qb, rb), dtype=np.float32)
    for a in range(0, m, qb):
        q = queries[a : a + qb]
        rows = np.arange(len(q))
        bv, ba = best[a : a + qb], arg[a : a + qb]
        for s in range(0, len(refs), rb):
            r = refs[s : s + rb]
            out = buf[: len(q), : len(r)]
            np.matmul(q, r.T, out=out)
            j = out.argmax(axis=1)
            v = out[rows, j]
            upd = v > bv
            bv[upd] = v[upd]
            ba[upd] = j[upd] + s
    return arg, best


def compare_top1(refs, queries, idx_a, idx_b, tie_tol: float = 1e-5) -> dict:
    """How often two top-1 answers agree; disagreements whose float64 similarities differ < tie_tol are ties."""
    import numpy as np

    diff = np.flatnonzero(idx_a != idx_b)
    gaps = []
    for i in diff:
        q = queries[i].astype(np.float64)
        gaps.append(abs(float(refs[idx_a[i]].astype(np.float64) @ q) - float(refs[idx_b[i]].astype(np.float64) @ q)))
    gaps_arr = np.asarray(gaps)
    return {
        "equal": int(len(idx_a) - len(diff)),
        "total": len(idx_a),
        "mismatches": len(diff),
        "mismatches_ties": int((gaps_arr < tie_tol).sum()) if len(gaps) else 0,
        "max_gap": float(gaps_arr.max()) if len(gaps) else 0.0,
    }


# ----------------------------------------------------------------------------------------------- phases


def _load_inputs(work: Path, mmap: bool = False):
    import numpy as np

    refs = np.load(work / "refs.npy", mmap_mode="r" if mmap else None)
    queries = np.load(work / "queries.npy")
    source = np.load(work / "source.npy")
    return refs, queries, source


def phase_env(cfg: dict, work: Path) -> dict:
    import faiss
    import numpy as np

    faiss.omp_set_num_threads(cfg["threads"])
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = re.search(r"^Model name:\s*(.+)$", lscpu, re.M)
    mem = 0
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "evaltasks"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "faiss": faiss.__version__,
        "faiss_compile": faiss.get_compile_options().strip(),
        "cpu_id": " ".join(
            f"{k.lower()} {m.group(1).strip()}"
            for k in ("CPU family", "Model", "Stepping")
            if (m := re.search(rf"^{k}:\s*(.+)$", lscpu, re.M))
        ),
        "faiss_omp_threads": faiss.omp_get_max_threads(),
        "blas": _blas_info(),
        "cpu_model": model.group(1).strip() if model else platform.processor(),
        "cpus": os.cpu_count(),
        "mem_total": mem,
        "commit": commit + (" (evaltasks/ modified)" if dirty else ""),
        "env": {
            k: os.environ.get(k)
            for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_CORETYPE")
        },
    }


def phase_gen(cfg: dict, work: Path) -> dict:
    """refs.npy (n, d) unit rows; queries.npy (q, d): noisy copies of refs (source >= 0) and random (-1)."""
    import numpy as np

    n, d, nq, seed = cfg["n"], cfg["dim"], cfg["queries"], cfg["seed"]
    rng = np.random.default_rng(seed)
    refs = np.lib.format.open_memmap(work / "refs.npy", mode="w+", dtype=np.float32, shape=(n, d))
    synthetic_vectors(n, dims=d, rng=rng, out=refs)
    refs.flush()
    half = nq // 2
    source = np.full(nq, -1, dtype=np.int64)
    source[:half] = rng.choice(n, size=half, replace=False)
    queries = rng.standard_normal((nq, d), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    noise = cfg["noise"]
    queries[:half] = np.asarray(refs[source[:half]]) + noise * queries[:half]
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    order = rng.permutation(nq)
    np.save(work / "queries.npy", np.ascontiguousarray(queries[order]))
    np.save(work / "source.npy", source[order])
    cos = np.einsum("ij,ij->i", queries[:half], np.asarray(refs[source[:half]]))
    return {"noisy_cos_mean": float(cos.mean()), "noisy_cos_min": float(cos.min())}


def phase_numpy(cfg: dict, work: Path) -> dict:
    import numpy as np

    out: dict = {}
    with Step() as st:
        refs = np.load(work / "refs.npy")
    out["load"] = st.as_dict()
    queries = np.load(work / "queries.npy")
    with Step() as st:
        mat = np.ascontiguousarray(refs, dtype=np.float32)
    out["build"] = st.as_dict()
    out["build"]["copied"] = mat is not refs
    target = work / "numpy-copy.npy"
    with Step() as st, open(target, "wb") as handle:
        np.save(handle, mat)
        handle.flush()
        os.fsync(handle.fileno())
    out["save"] = st.as_dict()
    out["disk_bytes"] = target.stat().st_size
    target.unlink()
    with Step() as st:
        arg, best = numpy_max(mat, queries)
        scores = np.clip(best, 0.0, 1.0)
    out["query"] = st.as_dict()
    out["query"]["queries"] = len(queries)
    np.save(work / "truth_idx.npy", arg)
    np.save(work / "truth_sim.npy", best)
    out["score_mean"] = float(scores.mean())
    return out


class SyntheticProvider:
    """A provider whose vectors are rows of a matrix: text ``ref-{i}`` is row i; other texts get seeded rows."""

    provider = "synthetic"
    model_name = "synthetic-unit"

    def __init__(self, vectors, seed: int) -> None:
        self.vectors = vectors
        self.seed = seed
        self.embedded = 0
        self.calls = 0
        self.seconds = 0.0

    @property
    def fingerprint(self) -> str:
        return f"seed{self.seed}-n{len(self.vectors)}-d{self.vectors.shape[1]}"

    @property
    def namespace(self) -> str:
        return f"{self.provider}/{self.model_name}/{self.fingerprint}"

    def embed_batch(self, texts):
        import numpy as np

        from evaltasks.embeddings.base import EmbeddingBatch, normalize_rows

        t0 = time.perf_counter()
        self.calls += 1
        self.embedded += len(texts)
        out = np.empty((len(texts), self.vectors.shape[1]), dtype=np.float32)
        for j, text in enumerate(texts):
            if text.startswith("ref-"):
                continue
            out[j] = np.random.default_rng([self.seed, j, len(text)]).standard_normal(self.vectors.shape[1])
        ref_rows = [j for j, t in enumerate(texts) if t.startswith("ref-")]
        if ref_rows:
            out[ref_rows] = self.vectors[[int(texts[j][4:]) for j in ref_rows]]
        other = [j for j, t in enumerate(texts) if not t.startswith("ref-")]
        if other:
            out[other] = normalize_rows(out[other])
        self.seconds += time.perf_counter() - t0
        return EmbeddingBatch.free(out)

    def embed(self, texts):
        return self.embed_batch(texts).vectors

    def estimate_cost(self, texts) -> float:
        return 0.0


def _index_phase(cfg: dict, work: Path, extra: list[str]) -> dict:
    import faiss
    import numpy as np

    from evaltasks.index import ReferenceIndex

    faiss.omp_set_num_threads(cfg["threads"])
    refs = np.load(work / "refs.npy")
    texts = [f"ref-{i}" for i in range(len(refs))] + extra
    provider = SyntheticProvider(refs, cfg["seed"])
    root = work / "index"
    if extra:  # a scratch copy, so that the phase can be measured again from the same state
        scratch = root.with_name(root.name + "-add")
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(root, scratch)
        root = scratch
    index = ReferenceIndex(root)
    with Step() as st:
        lookup = index.get_or_embed(provider, texts)
    out = st.as_dict()
    out.update(
        computed=lookup.computed, reused=lookup.reused, embedded=provider.embedded, provider_seconds=provider.seconds
    )
    out["vectors_match"] = bool(np.array_equal(lookup.table.vectors[: len(refs)], refs))
    out["disk_bytes"] = _dir_size(root)
    out["index_sha256"] = json.loads(next(root.glob("*/meta.json")).read_text()).get("index_sha256")  # format 1
    return out


def phase_index_cold(cfg: dict, work: Path) -> dict:
    shutil.rmtree(work / "index", ignore_errors=True)
    return _index_phase(cfg, work, [])


def phase_index_warm(cfg: dict, work: Path) -> dict:
    return _index_phase(cfg, work, [])


def phase_index_add1(cfg: dict, work: Path) -> dict:
    return _index_phase(cfg, work, [ADDED_TEXT])


ADDED_TEXT = "a text that is not in the index yet"


def phase_flat(cfg: dict, work: Path) -> dict:
    import faiss
    import numpy as np

    from evaltasks.index.search import ReferenceSearch, SearchConfig

    faiss.omp_set_num_threads(cfg["threads"])
    refs, queries, _source = _load_inputs(work)
    nq = cfg["flat_queries"] or len(queries)
    queries = queries[:nq]
    truth = np.load(work / "truth_idx.npy")[:nq]
    truth_sim = np.load(work / "truth_sim.npy")[:nq]
    out: dict = {"blas": _blas_info(), "queries": nq}
    config = SearchConfig()
    with Step() as st:
        search = ReferenceSearch(refs, config)
    out["build"] = st.as_dict()
    if cfg["persist"]:
        path = work / "sets" / "flat.faiss"
        with Step() as st:
            search.save(path)
        out["save"] = st.as_dict()
        stored = path.with_suffix(".npy")  # a flat search is its vectors (mapped when loaded), no FAISS file
        out["disk_bytes"] = stored.stat().st_size
        del search
        with Step() as st:
            search = ReferenceSearch.load(path, refs, config)
        out["load"] = st.as_dict()
        stored.unlink()
    with Step() as st:
        sims, idx = search.top_k(queries, 1)
        scores = np.clip(sims[:, 0], 0.0, 1.0)
    out["query_k1"] = st.as_dict()
    out["top1_vs_numpy"] = compare_top1(refs, queries, truth, idx[:, 0])
    out["max_score_diff"] = float(np.abs(scores - np.clip(truth_sim, 0.0, 1.0)).max())
    k10 = min(cfg["k10_queries"], nq)
    with Step() as st:
        search.top_k(queries[:k10], 10)
    out["query_k10"] = st.as_dict()
    out["query_k10"]["queries"] = k10
    return out


def phase_hnsw(cfg: dict, work: Path) -> dict:
    import faiss
    import numpy as np

    from evaltasks.index.search import ReferenceSearch, SearchConfig

    faiss.omp_set_num_threads(cfg["threads"])
    refs, queries, source = _load_inputs(work)
    n, d = refs.shape
    target = min(cfg["hnsw_n"] or n, n)
    base = SearchConfig(kind="hnsw")
    # The same FAISS calls as ReferenceSearch.__init__, added in chunks to record the build rate as the graph
    # grows and to stop inside the time budget.
    chunks = []
    with Step() as st:
        index = faiss.IndexHNSWFlat(d, base.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = base.ef_construction
        elapsed = 0.0
        while index.ntotal < target:
            lo = index.ntotal
            hi = min(lo + cfg["hnsw_chunk"], target)
            t0 = time.perf_counter()
            index.add(refs[lo:hi])
            dt = time.perf_counter() - t0
            elapsed += dt
            chunks.append({"from": lo, "to": hi, "seconds": dt})
            print(
                f"  hnsw: {hi:,} vectors in {elapsed:.0f} s ({(hi - lo) / dt:,.0f}/s last chunk)",
                file=sys.stderr,
                flush=True,
            )
            next_dt = dt * (min(hi + cfg["hnsw_chunk"], target) - hi) / (hi - lo) * 1.15
            if hi < target and elapsed + next_dt > cfg["hnsw_budget_s"]:
                break
    m = int(index.ntotal)
    out: dict = {
        "n": m,
        "target": target,
        "chunks": chunks,
        "build": st.as_dict(),
        "params": {"hnsw_m": base.hnsw_m, "ef_construction": base.ef_construction},
    }
    path = work / "sets" / "hnsw.faiss"
    with Step() as st:
        ReferenceSearch(refs[:m], base, index).save(path)
    out["save"] = st.as_dict()
    out["disk_bytes"] = path.stat().st_size
    path.unlink()
    sub = refs[:m]
    if m == n:
        truth, truth_sim = np.load(work / "truth_idx.npy"), np.load(work / "truth_sim.npy")
        out["numpy_query"] = None
    else:
        with Step() as st:
            truth, truth_sim = numpy_max(sub, queries)
        out["numpy_query"] = st.as_dict()
    in_set = source >= 0
    in_sub = (source >= 0) & (source < m)
    random_q = source < 0
    out["groups"] = {
        "noisy_in_set": int(in_sub.sum()),
        "random": int(random_q.sum()),
        "noisy_source_outside": int((in_set & ~in_sub).sum()),
    }
    runs = []
    for ef in cfg["ef_search"]:
        config = SearchConfig(kind="hnsw", ef_search=ef)
        search = ReferenceSearch(sub, config, index)
        with Step() as st:
            sims, idx = search.top_k(queries, 1)
        hit = idx[:, 0] == truth
        err = np.abs(np.clip(sims[:, 0], 0, 1) - np.clip(truth_sim, 0, 1))
        run = {
            "ef_search": ef,
            "query": st.as_dict(),
            "recall": float(hit.mean()),
            "recall_noisy": float(hit[in_sub].mean()) if in_sub.any() else None,
            "recall_random": float(hit[random_q].mean()) if random_q.any() else None,
            "score_err_mean": float(err.mean()),
            "score_err_max": float(err.max()),
            "score_err_max_noisy": float(err[in_sub].max()) if in_sub.any() else None,
            "score_err_max_random": float(err[random_q].max()) if random_q.any() else None,
            "missed_noisy": int((~hit & in_sub).sum()),
        }
        if ef == base.ef_search:
            with Step() as st2:
                run["measure_recall"] = search.measure_recall(queries).recall_at_1
            run["measure_recall_step"] = st2.as_dict()
        runs.append(run)
    out["runs"] = runs
    return out


PHASES = {
    "env": phase_env,
    "gen": phase_gen,
    "numpy": phase_numpy,
    "index-cold": phase_index_cold,
    "index-warm": phase_index_warm,
    "index-add1": phase_index_add1,
    "flat": phase_flat,
    "hnsw": phase_hnsw,
}


# ----------------------------------------------------------------------------------------------- driver


QUIET = {"cores": 0.0, "max_wait": 0.0, "retries": 0, "contended": 0.2}


def run_phase(name: str, work: Path, cfg: dict, env: dict, label: str | None = None) -> dict:
    (work / "cfg.json").write_text(json.dumps(cfg))
    label = label or name
    waited = wait_quiet(QUIET["cores"], QUIET["max_wait"]) if QUIET["cores"] > 0 else 0.0
    best: dict | None = None
    for attempt in range(1, 2 + int(QUIET["retries"])):
        print(
            f"[{label}] ...{f' (waited {waited:.0f} s for other processes to go quiet)' if waited > 3 else ''}",
            file=sys.stderr,
            flush=True,
        )
        t0, b0, c0 = time.perf_counter(), busy_seconds(), children_cpu()
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--phase", name, "--work", str(work)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        wall, busy, mine = time.perf_counter() - t0, busy_seconds() - b0, children_cpu() - c0
        if proc.returncode != 0:
            raise SystemExit(f"phase {label} failed with exit code {proc.returncode}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        result["_wall"] = wall
        result["_others_cores"] = max(busy - mine, 0.0) / wall
        result["_waited"] = waited
        result["_label"] = label
        result["_attempts"] = attempt
        print(
            f"[{label}] done in {wall:.1f} s; other processes used {result['_others_cores']:.2f} cores meanwhile",
            file=sys.stderr,
            flush=True,
        )
        if best is None or result["_others_cores"] < best["_others_cores"]:
            best = result
        if result["_others_cores"] <= QUIET["contended"] or attempt == 1 + int(QUIET["retries"]):
            break
        print(f"[{label}] contended: measuring it again", file=sys.stderr, flush=True)
        waited += wall
        if QUIET["cores"] > 0:
            waited += wait_quiet(QUIET["cores"], QUIET["max_wait"])
    assert best is not None
    best["_attempts"] = attempt
    best["_waited"] = waited
    return best


def _arch_fix(blas: list[dict]) -> str | None:
    """The OPENBLAS_CORETYPE that gives FAISS's OpenBLAS numpy's kernels, when FAISS's picked another one."""
    faiss_blas = [b for b in blas if b["internal_api"] == "openblas" and "faiss" in (b["filepath"] or "")]
    numpy_blas = [b for b in blas if b["internal_api"] == "openblas" and "numpy" in (b["filepath"] or "")]
    if not faiss_blas or not numpy_blas or os.environ.get("OPENBLAS_CORETYPE"):
        return None
    want = numpy_blas[0]["architecture"]
    have = faiss_blas[0]["architecture"]
    if not want or not have or want.lower() == have.lower():
        return None
    return want if want in ("Haswell", "SkylakeX", "Cooperlake", "Zen", "SandyBridge") else "Haswell"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="reference vectors (default 1,000,000)")
    parser.add_argument("--queries", type=int, default=10_000, help="query vectors (default 10,000)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--noise", type=float, default=0.5, help="noise norm of the noisy-copy queries")
    parser.add_argument("--threads", type=int, default=2, help="OMP/OpenBLAS/MKL threads (default 2)")
    parser.add_argument("--hnsw-n", type=int, default=0, help="HNSW target size (default: --n)")
    parser.add_argument(
        "--hnsw-budget-s",
        type=float,
        default=300.0,
        help="stop adding to the HNSW graph when the next chunk would pass this (default 300)",
    )
    parser.add_argument("--hnsw-chunk", type=int, default=25_000)
    parser.add_argument("--ef-search", default="64,128,256")
    parser.add_argument(
        "--installed-queries",
        type=int,
        default=1_000,
        help="queries for FAISS flat with the BLAS kernels as installed, when they are slower than numpy's (0: all)",
    )
    parser.add_argument("--k10-queries", type=int, default=2_000, help="queries for the top_k k=10 timing")
    parser.add_argument(
        "--out", type=Path, default=None, help="document to rewrite (default docs/performance.md; --quick: none)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 2,000 vectors, 100 queries; writes no document"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the raw measurements here")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch directory (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument(
        "--quiet-cores",
        type=float,
        default=0.0,
        help="before each phase, wait until other processes use at most this many cores (0: do not wait)",
    )
    parser.add_argument("--quiet-max-wait-s", type=float, default=300.0)
    parser.add_argument(
        "--retries",
        type=int,
        default=0,
        help="measure a phase again (up to this many times) when other processes used more than "
        "--contended-cores meanwhile",
    )
    parser.add_argument("--contended-cores", type=float, default=0.2)
    parser.add_argument(
        "--render-from",
        type=Path,
        default=None,
        help="write the section from a --json file of an earlier run, measuring nothing",
    )
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.phase:
        cfg = json.loads((args.work / "cfg.json").read_text())
        result = PHASES[args.phase](cfg, args.work)
        print(json.dumps(result))
        return 0

    if args.quick:
        args.n, args.queries, args.hnsw_chunk, args.installed_queries, args.k10_queries = 2_000, 100, 1_000, 50, 50
    out = args.out or (None if args.quick else ROOT / "docs" / "performance.md")
    if args.render_from:
        res = json.loads(args.render_from.read_text())
        write_section(out or ROOT / "docs" / "performance.md", render(res), heading_of(res))
        print(f"section written to {out}", file=sys.stderr)
        return 0

    QUIET.update(
        cores=args.quiet_cores, max_wait=args.quiet_max_wait_s, retries=args.retries, contended=args.contended_cores
    )
    command = " ".join([".venv/bin/python", "bench/index_1m.py", *(argv if argv is not None else sys.argv[1:])])
    started = time.perf_counter()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(args.threads)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    work = Path(tempfile.mkdtemp(prefix="bench-index-", dir=args.workdir))
    cfg = {
        "n": args.n,
        "dim": args.dim,
        "queries": args.queries,
        "seed": args.seed,
        "noise": args.noise,
        "threads": args.threads,
        "hnsw_n": args.hnsw_n,
        "hnsw_budget_s": args.hnsw_budget_s,
        "hnsw_chunk": args.hnsw_chunk,
        "ef_search": [int(x) for x in args.ef_search.split(",") if x],
        "k10_queries": args.k10_queries,
        "flat_queries": 0,
        "persist": True,
    }
    res: dict = {"cfg": cfg, "date": date, "command": command}
    try:
        res["env"] = run_phase("env", work, cfg, env)
        res["gen"] = run_phase("gen", work, cfg, env)
        res["numpy"] = run_phase("numpy", work, cfg, env)
        res["index_cold"] = run_phase("index-cold", work, cfg, env)
        res["index_warm"] = run_phase("index-warm", work, cfg, env)
        res["index_add1"] = run_phase("index-add1", work, cfg, env)
        fix = _arch_fix(res["env"]["blas"])
        res["blas_fix"] = fix
        if fix:
            fixed_env = {**env, "OPENBLAS_CORETYPE": fix}
            res["flat_fixed"] = run_phase("flat", work, cfg, fixed_env, f"flat, OPENBLAS_CORETYPE={fix}")
            installed = {**cfg, "flat_queries": args.installed_queries, "persist": False}
            res["flat"] = run_phase("flat", work, installed, env, "flat, as installed")
        else:
            res["flat"] = run_phase("flat", work, cfg, env)
        res["hnsw"] = run_phase("hnsw", work, cfg, env)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"scratch kept: {work}", file=sys.stderr)
    res["total_seconds"] = time.perf_counter() - started
    res["measured_seconds"] = sum(v["_wall"] for v in res.values() if isinstance(v, dict) and "_wall" in v)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    section = render(res)
    if out:
        write_section(out, section, heading_of(res))
    print(section)
    print(f"total {res['total_seconds']:.0f} s" + (f"; section written to {out}" if out else ""), file=sys.stderr)
    return 0


# ----------------------------------------------------------------------------------------------- report


def heading_of(res: dict) -> str:
    return f"## Reference index: {res['cfg']['n']:,} vectors"


def _s(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def _r(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def _u(step: dict) -> str:
    return f"{step['cpu_seconds'] / step['seconds']:.2f}" if step["seconds"] else "-"


def _mib(x: float) -> str:
    return f"{x / MIB:,.0f}"


def _others_line(res: dict, threads: int) -> str:
    phases = [v for v in res.values() if isinstance(v, dict) and "_others_cores" in v]
    worst = max(v["_others_cores"] for v in phases)
    line = (
        "- Other processes: average CPU cores they used while each phase ran: "
        + ", ".join(
            f"{v['_label']} {v['_others_cores']:.2f}"
            + (f" (measured {v['_attempts']} times, the least disturbed kept)" if v.get("_attempts", 1) > 1 else "")
            for v in phases
        )
        + f'. "CPU/wall" below is the process CPU time over the wall time of a step ({threads:.1f} = '
        f"all {threads} threads busy throughout)."
    )
    if worst > 0.25:
        line += (
            " **Other processes competed for the CPUs during part of this run: the times of the phases "
            "with a high figure are inflated accordingly.**"
        )
    return line


def render(res: dict) -> str:  # noqa: C901 - a report
    cfg, env = res["cfg"], res["env"]
    n, nq = cfg["n"], cfg["queries"]
    npy = res["numpy"]
    np_q = npy["query"]["seconds"]
    np_qps = nq / np_q
    blas = "; ".join(
        f"{b['prefix']} {b['version']} ({b['internal_api']}, {b.get('architecture') or '-'}, "
        f"{b['num_threads']} threads)"
        for b in env["blas"]
    )
    flat_main = res.get("flat_fixed") or res["flat"]
    waited = sum(v.get("_waited", 0.0) for v in res.values() if isinstance(v, dict))
    hn = res["hnsw"]
    lines = [
        heading_of(res),
        "",
        f"Measured by `bench/index_1m.py` on {res['date']} in one run of {res['total_seconds'] / 60:.1f} min, "
        f"{res['measured_seconds'] / 60:.1f} min of it in the phases reported"
        + (
            " (the rest: waiting for other processes to go quiet, or measuring again a phase they had slowed down)"
            if waited > 30
            else ""
        )
        + f": `{res['command']}`.",
        "",
        f"- Machine: {env['cpu_model']}{' (' + env['cpu_id'] + ')' if env.get('cpu_id') else ''}, "
        f"{env['cpus']} CPUs, {env['mem_total'] / GIB:.0f} GiB RAM; "
        f"Python {env['python']}, numpy {env['numpy']}, faiss-cpu {env['faiss']} ({env['faiss_compile'].strip()}); "
        f"commit {env['commit']}.",
        f"- Threads: OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS={cfg['threads']}, "
        f"faiss.omp_set_num_threads({cfg['threads']}). BLAS libraries loaded: {blas}.",
        f"- Data: {n:,} synthetic unit vectors, {cfg['dim']} dimensions, seed {cfg['seed']} "
        f"({n * cfg['dim'] * 4 / MIB:,.0f} MiB as float32). {nq:,} unit queries: half noisy copies of set "
        f"vectors (cosine to their source {res['gen']['noisy_cos_mean']:.3f} on average), half uniformly random "
        "(their best match is one of many near-ties, the hard case for approximate search).",
        _others_line(res, cfg["threads"]),
        '- Memory: each phase runs in a fresh process; "peak +MiB" is the peak RSS of the step minus the RSS '
        "before it, inputs already loaded (VmHWM, reset between steps with /proc/self/clear_refs).",
        "",
        "### Build, persist, load",
        "",
        "| Step | Time (s) | Peak +MiB | On disk (MiB) | CPU/wall |",
        "|---|---:|---:|---:|---:|",
    ]
    copied = " (no copy: already contiguous float32)" if not npy["build"]["copied"] else ""

    def row(label: str, step: dict, disk: int | None = None) -> str:
        return (
            f"| {label} | {_s(step['seconds'])} | {_mib(step['peak_delta'])} | "
            f"{'' if disk is None else _mib(disk)} | {_u(step)} |"
        )

    lines += [
        row(f'numpy: `np.ascontiguousarray` (the "build"){copied}', npy["build"]),
        row("numpy: `np.save` + fsync", npy["save"], npy["disk_bytes"]),
        row("numpy: `np.load`", npy["load"]),
    ]
    for key, label in (
        ("index_cold", "cold: embed all + persist"),
        ("index_warm", "warm: load, 0 embedded"),
        ("index_add1", "one new text added to the full index"),
    ):
        r = res[key]
        lines.append(
            row(
                f"`ReferenceIndex.get_or_embed`, {label} ({r['computed']:,} computed, {r['reused']:,} reused)",
                r,
                r["disk_bytes"],
            )
        )
    if "proto_cold" in res:
        for key, label in (("proto_cold", "cold"), ("proto_warm", "warm"), ("proto_add1", "one new text")):
            r = res[key]
            lines.append(row(f"prototype with fewer copies (bench only, see below), {label}", r, r["disk_bytes"]))
    lines.append(row("`ReferenceSearch` flat: build (`IndexFlatIP.add`)", flat_main["build"]))
    if "save" in flat_main:
        lines += [
            row(
                "`ReferenceSearch` flat: `save` (what `build_search` persists under `sets/`)",
                flat_main["save"],
                flat_main["disk_bytes"],
            ),
            row("`ReferenceSearch` flat: `load`", flat_main["load"]),
        ]
    m = hn["n"]
    lines += [
        row(
            f"`ReferenceSearch` hnsw (M={hn['params']['hnsw_m']}, efConstruction={hn['params']['ef_construction']})"
            f": build at n={m:,}",
            hn["build"],
        ),
        row(f"`ReferenceSearch` hnsw: `save` at n={m:,}", hn["save"], hn["disk_bytes"]),
        "",
    ]
    if m < n:
        last = hn["chunks"][-1]
        rate_last = (last["to"] - last["from"]) / last["seconds"]
        first = hn["chunks"][0]
        rate_first = (first["to"] - first["from"]) / first["seconds"]
        lower = hn["build"]["seconds"] + (n - m) / rate_last
        lines += [
            f"**HNSW did not fit at n={n:,}.** The graph was built in chunks of {cfg['hnsw_chunk']:,} with the "
            f"same FAISS calls as `ReferenceSearch.__init__` until the next chunk would pass the "
            f"{cfg['hnsw_budget_s']:.0f} s budget: it reached n={m:,} in {hn['build']['seconds']:.0f} s. The insert "
            f"rate fell from {rate_first:,.0f} vectors/s (first chunk) to {rate_last:,.0f} vectors/s (last chunk) "
            f"as the graph grew; even at that last rate the remaining {n - m:,} vectors would take "
            f"{(n - m) / rate_last / 60:.0f} min, so building at n={n:,} would take at least "
            f"{lower / 60:.0f} min here (a lower bound: the rate keeps falling). HNSW figures below are at "
            f"n={m:,}, against numpy and exact search at that same n.",
            "",
        ]
    lines += [
        f"### Max aggregation: {nq:,} queries",
        "",
        "| Method | n | Queries timed | Time (s) | Queries/s | vs numpy | Recall@1 (all / noisy / random) | "
        "Peak +MiB | CPU/wall |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
        f"| numpy: chunked matmul + argmax, clamped | {n:,} | {nq:,} | {_s(np_q)} | {np_qps:,.0f} | 1.00 | "
        f"exact | {_mib(npy['query']['peak_delta'])} | {_u(npy['query'])} |",
    ]

    def flat_row(r: dict, label: str) -> str:
        q = r["queries"]
        qps = q / r["query_k1"]["seconds"]
        t = r["top1_vs_numpy"]
        return (
            f"| {label} | {n:,} | {q:,} | {_s(r['query_k1']['seconds'])} | {qps:,.0f} | "
            f"{qps / np_qps:.2f} | top-1 = numpy on {t['equal']:,}/{t['total']:,} | "
            f"{_mib(r['query_k1']['peak_delta'])} | {_u(r['query_k1'])} |"
        )

    def k10_row(r: dict, label: str) -> str:
        q = r["query_k10"]["queries"]
        qps = q / r["query_k10"]["seconds"]
        return (
            f"| {label} | {n:,} | {q:,} | {_s(r['query_k10']['seconds'])} | {qps:,.0f} | "
            f"{qps / np_qps:.2f} | exact | {_mib(r['query_k10']['peak_delta'])} | {_u(r['query_k10'])} |"
        )

    fix = res.get("blas_fix")
    if fix:
        arch = next(
            (
                b.get("architecture")
                for b in res["flat"]["blas"]
                if b.get("internal_api") == "openblas" and "faiss" in (b.get("filepath") or "")
            ),
            "?",
        )
        lines += [
            flat_row(res["flat"], f"FAISS flat `top_k(k=1)`, BLAS as installed ({arch} kernels)"),
            flat_row(res["flat_fixed"], f"FAISS flat `top_k(k=1)`, `OPENBLAS_CORETYPE={fix}`"),
            k10_row(res["flat"], f"FAISS flat `top_k(k=10)` (what the metric asks), as installed ({arch})"),
            k10_row(res["flat_fixed"], f"FAISS flat `top_k(k=10)`, `OPENBLAS_CORETYPE={fix}`"),
        ]
    else:
        lines += [
            flat_row(res["flat"], "FAISS flat `top_k(k=1)`"),
            k10_row(res["flat"], "FAISS flat `top_k(k=10)` (what the metric asks)"),
        ]
    hn_np_qps = np_qps if hn["numpy_query"] is None else nq / hn["numpy_query"]["seconds"]
    if hn["numpy_query"] is not None:
        lines.append(
            f"| numpy at the HNSW size | {m:,} | {nq:,} | {_s(hn['numpy_query']['seconds'])} | {hn_np_qps:,.0f} | "
            f"1.00 (at n={m:,}) | exact | {_mib(hn['numpy_query']['peak_delta'])} | {_u(hn['numpy_query'])} |"
        )
    for run in hn["runs"]:
        qps = nq / run["query"]["seconds"]
        lines.append(
            f"| HNSW `top_k(k=1)`, ef_search={run['ef_search']} | {m:,} | {nq:,} | {_s(run['query']['seconds'])} | "
            f"{qps:,.0f} | {_r(qps / hn_np_qps)}{'' if m == n else f' (at n={m:,})'} | {run['recall']:.3f} / "
            f"{run['recall_noisy']:.3f} / {run['recall_random']:.3f} | {_mib(run['query']['peak_delta'])} | "
            f"{_u(run['query'])} |"
        )
    lines.append("")

    # interpretation, from the numbers above only
    fm = flat_main
    fm_qps = fm["queries"] / fm["query_k1"]["seconds"]
    t = fm["top1_vs_numpy"]
    notes = ["### Reading the numbers", ""]
    if not t["mismatches"]:
        tie_note = ""
    elif t["mismatches"] == t["mismatches_ties"]:
        tie_note = f"; the {t['mismatches']} that differ are ties (float64 similarities within {t['max_gap']:.1e})"
    else:
        tie_note = (
            f"; {t['mismatches'] - t['mismatches_ties']} differ by more than 1e-5 in float64 similarity "
            f"(max {t['max_gap']:.1e})"
        )
    notes.append(
        f"- Exact search is compute-bound: {n:,} x {nq:,} x {cfg['dim']} multiply-adds. numpy does it at "
        f"{np_qps:,.0f} queries/s; FAISS flat{f' with OPENBLAS_CORETYPE={fix}' if fix else ''} at "
        f"{fm_qps:,.0f} queries/s ({fm_qps / np_qps:.2f}x numpy). Its top-1 equals numpy's on "
        f"{t['equal']:,} of {t['total']:,} queries{tie_note}; the clamped max scores differ by at most "
        f"{fm['max_score_diff']:.1e}."
    )
    if fix:
        inst = res["flat"]
        iqps = inst["queries"] / inst["query_k1"]["seconds"]
        arch = next(
            (
                b.get("architecture")
                for b in inst["blas"]
                if b.get("internal_api") == "openblas" and "faiss" in (b.get("filepath") or "")
            ),
            "?",
        )
        notes.append(
            f"- As installed, the OpenBLAS bundled in the faiss-cpu wheel does not recognise this CPU and "
            f"falls back to its {arch} kernels (numpy's own OpenBLAS picks {fix}): FAISS flat then runs at "
            f"{iqps:,.0f} queries/s, {np_qps / iqps:.1f}x slower than numpy, so {nq:,} outputs against "
            f"{n:,} references take ~{nq / iqps / 60:.0f} min instead of ~{np_q / 60:.1f} min. "
            f"`OPENBLAS_CORETYPE={fix}` in the environment (before the process starts) gives FAISS numpy's "
            f"kernels. (As installed, measured on {inst['queries']:,} queries to keep the run short.)"
        )
    ci, cw, ca = res["index_cold"], res["index_warm"], res["index_add1"]
    notes.append(
        f"- The index layer persists {n:,} vectors in {_s(ci['seconds'])} s cold ({ci['provider_seconds']:.1f} s "
        f"of it in the synthetic provider) and loads them in {cw['seconds']:.1f} s warm with nothing embedded, against "
        f"{npy['save']['seconds']:.1f} s / {npy['load']['seconds']:.1f} s for `np.save` / `np.load`; the cost "
        f"is the sha256 check, FAISS (de)serialisation and copies: peak memory grows by "
        f"{ci['peak_delta'] / GIB:.1f} GiB (cold) and {cw['peak_delta'] / GIB:.1f} GiB (warm) for "
        f"{n * cfg['dim'] * 4 / GIB:.1f} GiB of vectors. Adding one new text to the full index rewrites "
        f"it: {_s(ca['seconds'])} s, +{ca['peak_delta'] / GIB:.1f} GiB."
    )
    if "proto_cold" in res:
        pc, pw, pa = res["proto_cold"], res["proto_warm"], res["proto_add1"]
        same = pc["index_sha256"] == ci["index_sha256"]
        notes.append(
            "- Prototype (in `bench/index_1m.py` only, not library code): the same file format and checks with "
            "fewer copies: a zero-copy view of the loaded FAISS vectors instead of `reconstruct_n`, no re-read "
            "under the lock when `meta.json` is unchanged, no concatenated or `tobytes()` copies on save "
            "(`faiss.write_index` to the temporary file, hashed from it), no gather when every text is "
            f"stored in order. Cold {_s(pc['seconds'])} s / +{pc['peak_delta'] / GIB:.1f} GiB (library "
            f"{_s(ci['seconds'])} s / +{ci['peak_delta'] / GIB:.1f} GiB), warm {_s(pw['seconds'])} s / "
            f"+{pw['peak_delta'] / GIB:.1f} GiB ({_s(cw['seconds'])} s / +{cw['peak_delta'] / GIB:.1f} GiB), one "
            f"new text {_s(pa['seconds'])} s / +{pa['peak_delta'] / GIB:.1f} GiB ({_s(ca['seconds'])} s / "
            f"+{ca['peak_delta'] / GIB:.1f} GiB). The file it writes is "
            + ("byte-identical to the library's (same sha256)." if same else "**not** byte-identical to the library's.")
            + " Vectors returned equal the input: "
            + str(all(r["vectors_match"] for r in (pc, pw, pa)))
            + "."
        )
    k1 = fm["queries"] / fm["query_k1"]["seconds"]
    k10 = fm["query_k10"]["queries"] / fm["query_k10"]["seconds"]
    notes.append(
        f"- `ReferenceMatchMetric` asks FAISS for the top 10 (logged in `evaluation_log`) even for max "
        f"aggregation: {'with numpy' + chr(39) + 's kernels ' if fix else ''}k=10 runs at {k10:,.0f} queries/s "
        f"against {k1:,.0f} for k=1"
        + (", so the top 10 cost nothing measurable here." if k1 / k10 < 1.1 else f" ({k1 / k10:.2f}x the time).")
    )
    if "save" in fm:
        verdict = (
            "so persisting a flat search saves no time over rebuilding it from the vectors the index already returned"
            if fm["load"]["seconds"] >= fm["build"]["seconds"]
            else f"{fm['build']['seconds'] - fm['load']['seconds']:.1f} s less than rebuilding it"
        )
        notes.append(
            f"- Building the flat search is a copy ({fm['build']['seconds']:.1f} s, "
            f"+{fm['build']['peak_delta'] / GIB:.1f} GiB); its persisted copy under `sets/` adds "
            f"{fm['disk_bytes'] / MIB:,.0f} MiB on disk and loads in {fm['load']['seconds']:.1f} s, {verdict}."
        )
    best = max(hn["runs"], key=lambda r: r["recall"])
    default = next((r for r in hn["runs"] if r["ef_search"] == 128), hn["runs"][0])
    notes.append(
        f"- HNSW (n={m:,}): at the default ef_search={default['ef_search']} it answers "
        f"{nq / default['query']['seconds']:,.0f} queries/s with recall@1 {default['recall']:.3f} "
        f"({default['recall_noisy']:.3f} on noisy copies, {default['recall_random']:.3f} on random queries, whose "
        f"best matches are near-ties: mean clamped-score error {default['score_err_mean']:.1e}, max "
        f"{default['score_err_max']:.1e}"
        + (
            f"; at most {default['score_err_max_random']:.1e} on random queries, while the "
            f"{default['missed_noisy']} noisy copies it missed score up to {default['score_err_max_noisy']:.2f} "
            f"below their ~{res['gen']['noisy_cos_mean']:.2f} match"
            if default.get("missed_noisy")
            else ""
        )
        + f"); the best recall measured is {best['recall']:.3f} at "
        f"ef_search={best['ef_search']}. `measure_recall` (1,000 sampled queries) reported "
        f"{default.get('measure_recall', float('nan')):.3f} in "
        f"{default.get('measure_recall_step', {}).get('seconds', 0):.1f} s."
        + (f" At n={n:,} its build time, not its queries, is what rules it out on this machine." if m < n else "")
        + " Uniformly random 384-dimensional vectors have no cluster structure, a hard case for a graph index; "
        "these recalls say nothing about the recall on real embeddings, which `measure_recall` reports per run."
    )
    return "\n".join(lines + notes) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
