"""Exact flat search runs with numpy's CPU kernels: FAISS's bundled OpenBLAS is told numpy's core before it
loads, and where FAISS still runs other kernels, flat scoring goes through numpy with FAISS's results.

This CPU is recognised by both OpenBLAS builds, so the fallback the faiss-cpu wheel shows on other CPUs
(Prescott kernels, 4.2 × slower: docs/performance.md) is produced here by loading FAISS first with
``OPENBLAS_CORETYPE=Prescott``: the same kernels it falls back to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from evaltasks.index import _blas
from evaltasks.index import search as reference_search
from evaltasks.index._blas import faiss


def _unit(rows: int, dims: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, dims)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _run(code: str, env_extra: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_faiss_gets_numpys_kernels_without_the_user_setting_anything() -> None:
    if _blas.numpy_core() is None:
        pytest.skip("numpy here has no bundled OpenBLAS")
    got = _run("""
        import json, os
        import evaltasks.index.search
        from evaltasks.index import _blas
        print(json.dumps({"env": os.environ.get("OPENBLAS_CORETYPE"), "numpy": _blas.numpy_core(),
                          "faiss": _blas.faiss_core(), "through_numpy": _blas.flat_through_numpy()}))
    """)
    assert got["env"] and got["env"].lower() == got["numpy"].lower()
    assert got["faiss"].lower() == got["numpy"].lower() and got["through_numpy"] is False


def test_flat_search_goes_through_numpy_when_faiss_runs_other_kernels() -> None:
    if _blas.numpy_core() is None or _blas.numpy_core().lower() == "prescott":
        pytest.skip("numpy's OpenBLAS is not bundled or itself uses Prescott kernels")
    got = _run("""
        import json, os
        import numpy as np
        os.environ["OPENBLAS_CORETYPE"] = "Prescott"  # FAISS loaded first, on its fallback kernels
        import faiss
        from evaltasks.index import _blas
        from evaltasks.index.search import ReferenceSearch
        rng = np.random.default_rng(3)
        x = rng.standard_normal((30000, 384)).astype(np.float32); x /= np.linalg.norm(x, axis=1, keepdims=True)
        q = rng.standard_normal((300, 384)).astype(np.float32); q /= np.linalg.norm(q, axis=1, keepdims=True)
        search = ReferenceSearch(x)
        sims, rows = search.top_k(q, 10)
        index = faiss.IndexFlatIP(384)  # FAISS's own flat search, on its fallback kernels
        index.add(x)
        want_s, want_i = index.search(q, 10)
        print(json.dumps({"faiss": _blas.faiss_core(), "numpy": _blas.numpy_core(),
                          "through_numpy": _blas.flat_through_numpy(), "same_rows": bool((rows == want_i).all()),
                          "max_diff": float(np.abs(sims - want_s).max())}))
    """)
    assert got["faiss"].lower() == "prescott" and got["numpy"].lower() != "prescott"
    assert got["through_numpy"] is True
    assert got["same_rows"] and got["max_diff"] <= 1e-5


@pytest.mark.parametrize(
    "n, m, k, block",
    [(5000, 37, 1, None), (5000, 37, 10, None), (5000, 2100, 10, 40960), (7, 5, 7, None), (20000, 64, 10, 1000)],
)
def test_numpy_top_k_equals_faiss(monkeypatch: pytest.MonkeyPatch, n: int, m: int, k: int, block: int | None) -> None:
    if block is not None:  # several reference chunks and query batches
        monkeypatch.setattr(reference_search, "_TOP_K_BLOCK", block)
    vectors, queries = _unit(n, 64, 1), _unit(m, 64, 2)
    index = faiss.IndexFlatIP(64)
    index.add(vectors)
    want_s, want_i = index.search(queries, k)
    sims, rows = reference_search.numpy_top_k(vectors, queries, k)
    assert sims.dtype == np.float32 and rows.dtype == np.int64 and sims.shape == rows.shape == (m, k)
    assert np.array_equal(rows, want_i)
    assert np.abs(sims - want_s).max() <= 1e-5


def test_numpy_top_k_orders_equal_scores_by_row() -> None:
    vectors = np.repeat(_unit(3, 16, 4), 4, axis=0)  # each vector 4 times: rows 0-3, 4-7, 8-11 tie
    sims, rows = reference_search.numpy_top_k(vectors, vectors[[0, 5]], 6)
    assert rows[0, :4].tolist() == [0, 1, 2, 3] and rows[1, :4].tolist() == [4, 5, 6, 7]
    assert np.all(np.diff(sims, axis=1) <= 0)
