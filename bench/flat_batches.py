"""Exact flat top-k: FAISS (as evaltasks loads it) against ``numpy_top_k``, at one batch size, with pyperf.

``QUERIES`` synthetic unit queries against ``N`` synthetic unit vectors (384 dimensions, seeded:
``_common.synthetic_vectors``), top ``K``; pyperf runs each contender in ``--processes`` fresh worker
processes (default 3, one value each: a search takes seconds) and prints mean ± std dev; the script then prints
a table with the OpenBLAS core FAISS runs and the ratio of the medians::

    .venv/bin/python bench/flat_batches.py --n 1000000 --queries 100 --k 10
    .venv/bin/python bench/flat_batches.py --n 1000000 --queries 1000 --k 10 -o flat.json   # pyperf's JSON
    .venv/bin/python bench/flat_batches.py --quick                                          # smoke run
"""

from __future__ import annotations

import time
from typing import Any

from _common import describe, markdown_table, runner, seconds, synthetic_vectors  # bench/: on sys.path

SETUP: dict[str, Any] = {}


def _options(parser: Any) -> None:
    parser.add_argument("--n", type=int, default=1_000_000, help="stored vectors (default 1,000,000)")
    parser.add_argument("--queries", type=int, default=100, help="query vectors (default 100)")
    parser.add_argument("--k", type=int, default=10, help="top k (default 10)")


def _search(n: int, m: int) -> Any:
    """The search over ``n`` vectors and ``m`` queries, built once per worker process (outside the clock)."""
    from evaltasks.index.search import ReferenceSearch

    if "search" not in SETUP:
        SETUP["search"] = ReferenceSearch(synthetic_vectors(n))
        SETUP["queries"] = synthetic_vectors(m, seed=99)
    return SETUP["search"]


def time_faiss(loops: int, n: int, m: int, k: int) -> float:
    """Seconds of ``loops`` FAISS flat searches (pyperf's time function)."""
    from evaltasks.index._blas import faiss

    search = _search(n, m)
    t0 = time.perf_counter()
    for _ in range(loops):  # FAISS's flat kernel (what exact search runs unless it routes through numpy)
        faiss.knn(SETUP["queries"], search.vectors, k, metric=faiss.METRIC_INNER_PRODUCT)
    return time.perf_counter() - t0


def time_numpy(loops: int, n: int, m: int, k: int) -> float:
    """Seconds of ``loops`` ``numpy_top_k`` searches (pyperf's time function)."""
    from evaltasks.index.search import numpy_top_k

    search = _search(n, m)
    t0 = time.perf_counter()
    for _ in range(loops):
        numpy_top_k(search.vectors, SETUP["queries"], k)
    return time.perf_counter() - t0


def main() -> None:
    """Measure both contenders; the manager process prints the table."""
    run = runner(_options, ("n", "queries", "k"), processes=3, values=1, loops=1)
    args = run.args
    n, m = (2_000, 20) if args.quick else (args.n, args.queries)
    faiss_bench = run.bench_time_func("faiss flat", time_faiss, n, m, args.k)
    numpy_bench = run.bench_time_func("numpy_top_k", time_numpy, n, m, args.k)
    if args.worker:
        return
    from evaltasks.index import _blas

    rows = [(b.get_name(), f"{seconds(b):.3f}", describe(b)) for b in (faiss_bench, numpy_bench)]
    print(
        f"\n{n:,} vectors, {m:,} queries, top {args.k}; FAISS core {_blas.faiss_core()}; numpy / FAISS "
        f"{seconds(numpy_bench) / seconds(faiss_bench):.2f}\n"
    )
    print(markdown_table(("contender", "median s", "mean ± std dev"), rows, "lrl"))


if __name__ == "__main__":
    main()
