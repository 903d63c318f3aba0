"""Maintenance of the reference index: compaction, pruning and whole-file verification.

The bodies of :meth:`~evaltasks.index.ReferenceIndex.compact`, :meth:`~evaltasks.index.ReferenceIndex.prune` and
:meth:`~evaltasks.index.ReferenceIndex.check` (``evaltasks index compact``, ``index prune``, ``index verify`` /
``index info``); the public API and its documentation stay on :class:`~evaltasks.index.ReferenceIndex`. Writes go
through the namespace's commit (:mod:`evaltasks.index`), under its writer lock.

Nothing here imports Prefect, nor the package itself (``index`` arguments are the
:class:`~evaltasks.index.ReferenceIndex` calling in).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evaltasks.index import _segments
from evaltasks.index._blas import faiss

META_FILE, INDEX_FILE, FORMAT_VERSION = _segments.META_FILE, _segments.LEGACY_FILE, _segments.FORMAT_VERSION


def prune(index: Any, keep: dict[str, Sequence[str]], dry_run: bool = False) -> dict[str, int]:
    """What :meth:`ReferenceIndex.prune` does (documented there): every namespace of ``index``."""
    dropped: dict[str, int] = {}
    for namespace in [m.get("namespace") for m in index.info() if m.get("namespace")]:
        texts = keep.get(namespace, ())
        ns = index._namespace_by_name(namespace)
        if ns is None:
            continue
        wanted = np.fromiter((_segments.text_id(t) for t in dict.fromkeys(texts)), dtype=np.int64)
        with ns.lock():
            base = ns.open(locked=True)
            if not base.meta:
                continue
            keep_rows = np.zeros(base.count, dtype=bool)
            if len(wanted):
                rows = base.find(wanted)
                keep_rows[rows[rows >= 0]] = True
            dropped[namespace] = int((~keep_rows).sum())
            if dropped[namespace] and not dry_run:  # a compaction that filters: the kept rows become one segment
                ns.commit(base, keep=keep_rows)
    return dropped


def compact(
    index: Any, namespace: str | None = None, *, failed: dict[str, str] | None = None
) -> dict[str, tuple[int, int]]:
    """What :meth:`ReferenceIndex.compact` does (documented there): each namespace under its writer lock."""
    done: dict[str, tuple[int, int]] = {}
    for info in index.info():
        name = info.get("namespace")
        if not name or "error" in info:
            if failed is not None and namespace is None:
                failed[info["path"]] = f"{META_FILE} is unreadable ({info.get('error', 'no namespace')})"
            continue
        if namespace is not None and name != namespace:
            continue
        ns = index._namespace_by_name(name)
        if ns is None:
            continue
        with ns.lock():
            try:
                base = ns._reported(ns.read_verified(tolerant=True))
            except Exception as exc:  # noqa: BLE001 - a manifest that cannot be used: named, left alone
                if failed is not None:
                    failed[str(ns.dir)] = str(exc)
                continue
            for segment in base.segments:
                segment.check_ids()
            bad = int(base.verify(np.arange(base.count)).sum())
            if bad:
                index.report_dropped(ns.dir, bad, base)
            damaged = bad > 0 or bool(base.broken)
            before = 0 if base.legacy else len(base.segments) + len(base.broken)
            if before > 1 or base.legacy or damaged:
                ns.commit(base, merge="all")
            after = len(_segments.read_manifest(ns.dir).get("segments", []))
            done[name] = (before, after)
    return done


def check(root: Path) -> list[dict[str, Any]]:
    """What :meth:`ReferenceIndex.check` does (documented there) for the index under ``root``."""
    if not root.exists():
        return []
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        segmented = any(folder.glob("seg-*.npy"))
        if not (folder / META_FILE).exists() and not (folder / INDEX_FILE).exists() and not segmented:
            continue  # e.g. sets/ (reference-set searches)
        entry: dict[str, Any] = {"path": str(folder)}
        problems: list[str] = []
        meta: dict[str, Any] | None = None
        try:
            meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
            if not isinstance(meta, dict):
                raise ValueError("not a JSON object")
            entry.update(meta)
        except FileNotFoundError:
            problems.append(f"{META_FILE} is missing")
        except (OSError, ValueError) as exc:
            problems.append(f"{META_FILE} is unreadable ({exc})")
            meta = None
        index_path = folder / INDEX_FILE
        if meta is not None and meta.get("format") == FORMAT_VERSION:
            problems += _segments.verify_namespace(folder, meta)
        elif meta is None and segmented:
            pass  # segment files without a manifest: nothing to check them against
        elif not index_path.exists():
            problems.append(f"{INDEX_FILE} is missing")
        elif meta is not None:
            problems += _check_files(index_path, meta)
        entry["problems"] = problems
        out.append(entry)
    return out


def flat_file_size(count: int, dimensions: int) -> int:
    """Bytes of a ``vectors.faiss`` holding ``count`` vectors of ``dimensions`` (FAISS's own format)."""
    header = len(faiss.serialize_index(faiss.IndexIDMap2(faiss.IndexFlatIP(dimensions))))
    return header + count * (4 * dimensions + 8)


def _check_files(index_path: Path, meta: dict[str, Any]) -> list[str]:
    """What is wrong with ``index_path`` against ``meta`` (its state or the ``previous`` one): size, sha256."""
    states = [meta, *([meta["previous"]] if isinstance(meta.get("previous"), dict) else [])]
    sizes = []
    for state in states:
        count, dims = state.get("count"), state.get("dimensions")
        if isinstance(count, int) and isinstance(dims, int) and count >= 0 and dims > 0:
            sizes.append(flat_file_size(count, dims))
    if not sizes:
        return [f"{META_FILE} records no valid count and dimensions"]
    size = index_path.stat().st_size
    if size not in sizes:
        return [
            f"{INDEX_FILE} is {size:,} bytes, expected {sizes[0]:,} for {meta.get('count')} vectors × "
            f"{meta.get('dimensions')} dimensions (truncated or overwritten)"
        ]
    if _segments.file_sha256(index_path) not in {state.get("index_sha256") for state in states}:
        return [f"the sha256 of {INDEX_FILE} differs from the one {META_FILE} records"]
    return []
