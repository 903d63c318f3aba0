"""The output store: every output a target generated, on disk, addressed by what produced it.

The key of an output is the target's :meth:`~evaltasks.targets.base.Target.case_key` for the case (the
target's fingerprint plus what it sends for the case; a sample after the first adds its number,
:func:`sample_key`). An unchanged target on an unchanged case is answered from here, across runs and processes:
a rerun makes no request, and a prompt edit regenerates exactly the cases whose rendered prompt changed
(docs/targets.md#the-output-store). The engine puts the store in the reference index's directory
(``<index_dir>/outputs``, beside the judge answer store's ``judgements``), so a CI cache of the index keeps it.

Layout: one JSON file per output, ``<store_dir>/<key[:2]>/<key>.json``::

    {"format": 1, "key": "<sha256>", "target": "<name>", "kind": "python|chat|http",
     "stored_at": "<UTC ISO time>", "latency_ms": float | null,
     "output": {<TargetOutput's fields>}, "digest": "<HMAC-SHA256, hex>"}

Integrity and safety are the judge answer store's (:mod:`evaltasks.judges.store`, whose key code this store
shares through :class:`~evaltasks.judges.store.SignedStore`): ``digest`` is an HMAC-SHA256 of the entry's
canonical JSON keyed by ``<store_dir>/store.key`` (32 random bytes, mode 0600), so an entry edited after it was
written is a miss (with a warning) and is generated again; files are written under a temporary name and
renamed (atomic, not fsynced); an entry that does not read back whole is a miss. Only successful outputs are
stored, never errors.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from evaltasks.judges.store import SignedStore
from evaltasks.targets.base import TargetOutput

FORMAT = 1
DIRECTORY = "outputs"
"""The store's folder in the reference index's directory (beside the judge answer store's ``judgements``)."""


@dataclass(frozen=True)
class StoredOutput:
    """An output read back from the store.

    Attributes:
        output: what the target returned.
        latency_ms: wall time of the call that produced it, in milliseconds (None if not measured).
    """

    output: TargetOutput
    latency_ms: float | None


def sample_key(case_key: str, sample: int) -> str:
    """The store key of sample ``sample`` (0-based, ``repeat: K``) of the case whose key is ``case_key``: the
    case key itself for sample 0, else the hex SHA-256 of ``"<case_key>#<sample>"``."""
    if sample == 0:
        return case_key
    return hashlib.sha256(f"{case_key}#{sample}".encode()).hexdigest()


class OutputStore(SignedStore):
    """Generated outputs on disk under ``directory`` (see the module docstring for the layout and rules).

    Args:
        directory: the store's folder, usually ``<index_dir>/outputs`` (created on the first write).

    Thread- and process-safe; every method may be called from many threads at once.
    """

    label = "target output store"
    entry_label = "stored target output"
    resend = "the output is generated again"
    entry_format = FORMAT

    @classmethod
    def in_index_dir(cls, index_dir: Path | str) -> OutputStore:
        """The store of the reference index in ``index_dir``: ``<index_dir>/outputs`` (:data:`DIRECTORY`)."""
        return cls(Path(index_dir) / DIRECTORY)

    def get(self, key: str) -> StoredOutput | None:
        """The stored output of ``key``, or None when there is none, it does not read back whole, or its digest
        does not match (a warning names the file)."""
        entry = self.read_signed(key)
        if entry is None:
            return None
        try:
            latency = entry.get("latency_ms")
            if latency is not None and (isinstance(latency, bool) or not isinstance(latency, (int, float))):
                return None
            return StoredOutput(
                TargetOutput.model_validate(entry["output"]), None if latency is None else float(latency)
            )
        except (KeyError, TypeError, ValidationError):
            return None  # not an output of this version: a miss, replaced by the next put

    def put(self, key: str, output: TargetOutput, *, target: str, kind: str, latency_ms: float | None) -> None:
        """Store ``output`` under ``key``, replacing any entry atomically.

        Raises:
            OSError: the folder cannot be written (disk full, permissions).
        """
        self.write_signed(
            key,
            {"target": target, "kind": kind, "latency_ms": latency_ms, "output": output.model_dump(mode="json")},
        )
