"""Exact flat top-k: FAISS (as evaltasks loads it) against ``numpy_top_k``, interleaved, at one batch size.

Prints the OpenBLAS core FAISS runs and the seconds of each repetition (FAISS, numpy, FAISS, numpy, ...) for
``QUERIES`` synthetic unit queries against ``N`` synthetic unit vectors (384 dimensions, seeded as in
``bench/index_scale.py``)::

    .venv/bin/python bench/flat_batches.py 1000000 100 10     # N QUERIES K
    .venv/bin/python bench/flat_batches.py 1000000 1000 10
"""

from __future__ import annotations

import json
import sys
import time

from index_scale import _vectors  # bench/ is the script directory: on sys.path

from evaltasks.index import _blas
from evaltasks.index.search import ReferenceSearch, numpy_top_k


def main() -> None:
    n, m, k = (int(v) for v in sys.argv[1:4])
    vectors, queries = _vectors(n), _vectors(m, seed=99)
    search = ReferenceSearch(vectors)
    seconds: dict[str, list[float]] = {"faiss": [], "numpy": []}
    for _ in range(3):
        for name in ("faiss", "numpy"):
            t0 = time.perf_counter()
            if name == "faiss":
                search.index.search(queries, k)
            else:
                numpy_top_k(search.vectors, queries, k)
            seconds[name].append(round(time.perf_counter() - t0, 2))
    print(_blas.faiss_core(), n, m, k, json.dumps(seconds))


if __name__ == "__main__":
    main()
