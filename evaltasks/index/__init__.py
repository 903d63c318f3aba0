"""ReferenceIndex: embeddings of references and outputs on disk, memory-mapped, reused across runs.

Layout under the index directory (default ``.evaltasks/index``; ``--index-dir`` / ``EVALTASKS_INDEX_DIR``)::

    <provider>--<model>--<fingerprint>/
        meta.json               # the manifest: provider, model, fingerprint, dimensions, count, the segments
                                # (file names, count, sha256 of each file, created), truncated_ids, versions
        seg-000001.ids.npy      # int64 ids, sorted; ids = content hashes of the texts
        seg-000001.vectors.npy  # float32 (count, dimensions), row i is the vector of ids[i]
        seg-000001.crc32.npy    # uint32 (count,), the CRC-32 of row i's id and vector
        .lock                   # filelock guarding writers

- Namespaces: one per (provider, model, fingerprint), so vectors of different weights never mix.
- Content-addressed ids: the first 63 bits of sha256(text), so an identical text is embedded once ever. A
  namespace holds every text a run embeds through it: references, expected outputs and outputs (a text is a
  text: an output equal to a reference shares its vector).
- Writes: embed outside the lock, then under the lock re-read, and write what is still missing as a new
  segment (temporary names, fsync, rename), then replace ``meta.json`` atomically: the manifest is the commit
  point and nothing stored is rewritten. A writer killed at any moment (even with ``kill -9``) leaves the old
  manifest or the new one, each complete; files no manifest lists are removed by the next writer. Past
  ``EVALTASKS_INDEX_MAX_SEGMENTS`` segments (default 32) a write merges segments (all but the largest when it
  holds most vectors); :meth:`ReferenceIndex.compact` (``evaltasks index compact``) merges them into one.
- Reads take no lock: they read one manifest and map the segments it lists (``np.load(mmap_mode="r")``), so
  a warm open reads metadata only and vectors are paged in when used. A segment gone (a compaction committed
  meanwhile) means reading the manifest again; a state that does not verify is read again under the lock
  before it is called corrupt. Opening checks file sizes and ``.npy`` headers against the manifest; every
  stored byte is checked before it is used, at any size: a segment's ids file (its sha256) on a process's first
  search, each row (its CRC-32) the first time the process reads it (:mod:`evaltasks.index._rows`). Every byte
  is verified on demand (:meth:`ReferenceIndex.check`, ``evaltasks index verify``). Storage details:
  :mod:`evaltasks.index._segments`; compaction, pruning and verification: :mod:`evaltasks.index._maintenance`.
- Format 1 (``vectors.faiss``, a FAISS ``IndexIDMap2(IndexFlatIP)``) is still read; the next write (or a
  compaction) converts it.
- Corruption is never used for scores, and costs only what is damaged: a damaged row (its checksum) counts as
  absent, so its text is embedded again, and the write that stores it rewrites that segment without the
  damaged row; a segment whose files are missing, truncated or of another header is left out the same way
  (its texts embedded again, the others kept); a manifest that cannot be read or disagrees with the files
  (count, dimensions) makes the namespace rebuilt from scratch. Each is reported. Inside
  :func:`recording_warnings` (a run of the flow: results.json ``warnings``, summary.md, the CLI's
  ``evaltasks: warning:`` lines) the report is recorded; elsewhere it is an :class:`IndexWarning`. :meth:`ReferenceIndex.check` verifies every namespace's
  files without repairing them (``evaltasks index info``). No pickle anywhere.
- Dimensions: an API provider's namespace does not pin its vectors' dimensions (an endpoint may serve any
  model under a name), so they are compared with the stored ones before anything is stored or reused. A
  provider that reports ``output_dimensions`` and does not know them yet embeds one requested text to learn
  them, unless the caller says no text of the run comes from elsewhere (``probe=False``: vectors of one store
  agree among themselves, so a call with nothing to embed costs no request); a namespace of other dimensions is
  rebuilt from this run's vectors (and reported, as corruption is).
"""

from evaltasks.index._maintenance import flat_file_size
from evaltasks.index._segments import text_id
from evaltasks.index.reference_index import (
    DEFAULT_INDEX_DIR,
    FORMAT_VERSION,
    GATHER_CHUNK,
    INDEX_FILE,
    LOCK_FILE,
    META_FILE,
    IndexLookup,
    IndexWarning,
    ReferenceIndex,
    default_index_dir,
    recorded_warnings,
    recording_warnings,
    report_dropped,
    report_warning,
)

__all__ = [
    "DEFAULT_INDEX_DIR",
    "FORMAT_VERSION",
    "GATHER_CHUNK",
    "INDEX_FILE",
    "LOCK_FILE",
    "META_FILE",
    "IndexLookup",
    "IndexWarning",
    "ReferenceIndex",
    "default_index_dir",
    "flat_file_size",
    "recorded_warnings",
    "recording_warnings",
    "report_dropped",
    "report_warning",
    "text_id",
]
