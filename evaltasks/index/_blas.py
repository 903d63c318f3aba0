"""FAISS with the CPU kernels numpy uses: import ``faiss`` from here.

The faiss-cpu wheel bundles its own OpenBLAS (0.3.15), older than numpy's. Where it does not recognise the CPU
it falls back to its slowest kernels (Prescott): exact flat search then ran 4.2 × slower than the same product
in numpy (``docs/performance.md``). Two measures, so that users need not set ``OPENBLAS_CORETYPE``:

1. Before FAISS loads (it reads the variable once, when its OpenBLAS is loaded), ``OPENBLAS_CORETYPE`` is set
   to the core numpy's OpenBLAS detected, unless the user set it. It is left in the environment (child
   processes inherit numpy's choice, which is what they would detect).
2. If FAISS was loaded before this module (by other code) and its OpenBLAS still uses other kernels than
   numpy's, :func:`flat_through_numpy` is True and exact flat search scores through numpy
   (:mod:`evaltasks.index.search`).

Where the cores cannot be read (numpy or faiss not built with a bundled OpenBLAS) nothing is changed.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from functools import lru_cache

import numpy as np

# Core names OpenBLAS 0.3.15 (faiss-cpu's) accepts in OPENBLAS_CORETYPE; newer names map to the nearest one.
_KNOWN_CORES = {
    name.lower(): name
    for name in (
        "Prescott",
        "Core2",
        "Penryn",
        "Dunnington",
        "Nehalem",
        "Sandybridge",
        "Haswell",
        "SkylakeX",
        "Cooperlake",
        "Atom",
        "Athlon",
        "Opteron",
        "Opteron_SSE3",
        "Barcelona",
        "Nano",
        "Bobcat",
        "Bulldozer",
        "Piledriver",
        "Steamroller",
        "Excavator",
        "Zen",
    )
}
_NEWER_CORES = {"sapphirerapids": "Cooperlake"}


def _corename(library_glob: str, symbols: tuple[str, ...]) -> str | None:
    """The core name the OpenBLAS matching ``library_glob`` chose (None when there is none or it cannot tell)."""
    for path in sorted(glob.glob(library_glob)):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in symbols:
            function = getattr(library, symbol, None)
            if function is not None:
                function.restype = ctypes.c_char_p
                value = function()
                return value.decode("ascii", "replace").strip() if value else None
    return None


@lru_cache(maxsize=1)
def numpy_core() -> str | None:
    """The core numpy's bundled OpenBLAS uses, e.g. ``"Haswell"`` (None when numpy has no bundled OpenBLAS)."""
    root = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*openblas*")
    return _corename(root, ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"))


def faiss_core() -> str | None:
    """The core FAISS's bundled OpenBLAS uses (call after ``faiss`` is imported; None when it has none)."""
    module = sys.modules.get("faiss")
    if module is None or module.__file__ is None:
        return None
    root = os.path.join(os.path.dirname(module.__file__), os.pardir, "faiss_cpu.libs", "*openblas*")
    return _corename(root, ("openblas_get_corename",))


def _align_before_faiss() -> None:
    """Set ``OPENBLAS_CORETYPE`` to numpy's core before FAISS's OpenBLAS loads (see the module docstring)."""
    if "faiss" in sys.modules or os.environ.get("OPENBLAS_CORETYPE", "").strip():
        return
    core = (numpy_core() or "").lower()
    name = _KNOWN_CORES.get(core) or _NEWER_CORES.get(core)
    if name:
        os.environ["OPENBLAS_CORETYPE"] = name


_align_before_faiss()

import faiss  # noqa: E402 - after the kernels are chosen

__all__ = ["faiss", "faiss_core", "flat_through_numpy", "numpy_core"]


@lru_cache(maxsize=1)
def flat_through_numpy() -> bool:
    """Whether exact flat search should score through numpy: FAISS's OpenBLAS runs other kernels than numpy's
    (FAISS was loaded before this module, or rejected the core). False when either core is unknown."""
    mine, theirs = faiss_core(), numpy_core()
    if not mine or not theirs:
        return False
    return mine.lower() != theirs.lower() and mine.lower() != (_NEWER_CORES.get(theirs.lower()) or "").lower()
