"""The judge answer store: every validated judge answer on disk, addressed by its request's content.

An unchanged request (same model, endpoint, messages and parameters: :meth:`JudgeRequest.key`) is answered
from here instead of the endpoint, across runs and across processes (two runs at once, Prefect's process or
Dask workers). The engine puts the store in the reference index's directory (``<index_dir>/judgements``).

Layout: one JSON file per request, ``<store_dir>/<key[:2]>/<key>.json`` (256 shard folders, so no folder
grows past a few thousand files)::

    {"format": 2, "key": "<sha256>", "model": "<model asked>", "endpoint": "<base URL or ''>",
     "stored_at": "<UTC ISO time>",
     "reply": {"model": "<model that answered>", "prompt_tokens": int, "completion_tokens": int, "cost": USD,
               "choices": [{"text": str, "parsed": JSON, "logprobs": [[token, logprob, [[alt, logprob], ...]],
                            ...] | null}, ...]},
     "digest": "<HMAC-SHA256, hex>"}

Integrity: ``digest`` is an HMAC-SHA256 (:mod:`hmac`) of the entry's canonical JSON without it (sorted keys, no
spaces, UTF-8), keyed by 32 random bytes in ``<store_dir>/store.key`` (created with the store, mode 0600, owned
by the user). An entry edited after it was written, however consistently (answer, parsed value and all), no
longer matches its digest: it is a miss, with a warning naming the file, and the next answer replaces it.
Recomputing the digest needs the key, so an edit by someone who can write the entries but not read the key
file is always caught; someone who can read the key (the same user) can forge entries, as they can edit the
suite itself. A key file that another user owns or others may read makes every entry a miss, with a
warning. Entries of the first format (no digest, evaltasks before this check) are misses too, asked again once
and replaced: accepting them would accept any edit that removes a digest.

Only answers that parsed and matched the request's schema are stored (all their choices, with logprobs); the
usage and cost are those of the request that produced the answer, kept for information: a stored answer
served again costs nothing and reports 0 tokens.

Safety: a file is written under a temporary name in its shard folder, then renamed over the target
(``os.replace``, atomic), so a reader sees a whole entry or none, whichever process wrote it; two writers of
the same key write the same answer's content, and the last rename wins. Nothing is locked. An entry that
does not read back (truncated, not JSON, another key, an answer that no longer validates) is a miss, and the
next answer replaces it. Files are not fsynced: after a power loss an entry may be lost or empty, which is
again a miss. Measured with ``bench/judge_store.py`` (2-core VM, local disk): 10,000 puts then 10,000 gets of
GEval-sized answers (about 3 KB an entry with logprobs) take 2.3-2.7 s and 1.8-2.3 s from one thread (about
0.25 ms a put, 0.2 ms a get, which re-validates the answer), and about the same from 8 threads: negligible
beside one judge request.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
import threading
import time
from pathlib import Path
from typing import Any

from evaltasks._atomic import _temporary, atomic_path
from evaltasks.judges.base import Choice, JudgeError, JudgeReply, JudgeRequest, TokenLogprob
from evaltasks.judges.parsing import parse_answer

FORMAT = 2
KEY_FILE = "store.key"
"""The store's HMAC key: 32 random bytes, mode 0600 (see the module docstring)."""

log = logging.getLogger("evaltasks.judges")


class SignedStore:
    """The HMAC key and digests of an on-disk store whose entries are signed (the judge answer store, the
    target output store: :mod:`evaltasks.targets.store`): see the module docstring for the key's rules.

    Args:
        directory: the store's folder (created on the first write).

    Attributes:
        label: what the store is called in warnings (``judge answer store``).
    """

    label = "judge answer store"
    entry_label = "stored judge answer"
    """What one entry is called in the warning about a digest that does not match."""
    resend = "the request is sent again"
    """What happens instead of using such an entry (the same warning)."""
    entry_format = FORMAT
    """The entries' ``format``: an entry of another format is a miss."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)
        self._secret: bytes | None = None
        self._secret_lock = threading.Lock()
        self._warned: set[str] = set()
        self._warn_lock = threading.Lock()

    def secret(self, *, create: bool) -> bytes | None:
        """The store's HMAC key from ``<directory>/store.key``; created (mode 0600) when absent and ``create``.
        None when it is absent (and not created) or cannot be trusted: owned by another user or readable by
        others (a warning says which). Raises OSError when ``create`` and it cannot be written."""
        with self._secret_lock:
            if self._secret is not None:
                return self._secret
            path = self.directory / KEY_FILE
            if not path.exists():
                if not create:
                    return None
                self.directory.mkdir(parents=True, exist_ok=True)
                tmp = _temporary(path)  # created with mode 0600 (mkstemp)
                try:
                    os.chmod(tmp, 0o600)
                    tmp.write_bytes(secrets.token_bytes(32))
                    try:
                        os.link(tmp, path)  # atomic, never over another process's key: theirs wins
                    except FileExistsError:
                        pass
                    except OSError:  # a file system without hard links: an exclusive create instead
                        _create_exclusive(path, tmp.read_bytes())
                finally:
                    tmp.unlink(missing_ok=True)
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            except OSError as exc:
                self._warn(str(path), f"cannot read the {self.label}'s key {path}: {exc}; stored entries are not used")
                return None
            try:
                info = os.fstat(fd)
                key = os.read(fd, 64)
            finally:
                os.close(fd)
            mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()  # Windows: no owner to compare
            if not mine or (hasattr(os, "getuid") and stat.S_IMODE(info.st_mode) & 0o077) or len(key) != 32:
                self._warn(
                    str(path),
                    f"the {self.label}'s key {path} is not a 32-byte file of this user with "
                    "mode 0600: stored entries are not used (remove the folder to start afresh)",
                )
                return None
            self._secret = key
            return key

    def path(self, key: str) -> Path:
        """The file of ``key``: ``<directory>/<key[:2]>/<key>.json``."""
        return self.directory / key[:2] / f"{key}.json"

    def discard(self, key: str) -> None:
        """Remove the entry of ``key`` (e.g. an answer the metric rejected after it passed the schema), so the next
        run asks again; nothing when there is none. Raises OSError when the file cannot be removed."""
        self.path(key).unlink(missing_ok=True)

    def read_signed(self, key: str) -> dict[str, Any] | None:
        """The entry stored under ``key`` when it reads back whole, is of this format and key, and its HMAC digest
        matches; else None (absent, truncated, another key's: silently; a digest that does not match: with a
        warning naming the file, once)."""
        path = self.path(key)
        try:
            with open(path, encoding="utf-8") as handle:
                entry = json.load(handle)
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("format") != self.entry_format or entry.get("key") != key:
            return None
        secret = self.secret(create=False)
        digest = entry.get("digest")
        if (
            secret is None
            or not isinstance(digest, str)
            or not hmac.compare_digest(digest, self._digest(entry, secret))
        ):
            self._warn(
                str(path),
                f"the {self.entry_label} {path} does not match its digest (edited after it was written?): "
                f"it is not used, and {self.resend}",
            )
            return None
        return entry

    def write_signed(self, key: str, fields: dict[str, Any]) -> None:
        """Store ``fields`` under ``key`` with the format, key, time stored and HMAC digest, replacing any entry
        atomically (not fsynced: see the module docstring). Raises OSError when the folder cannot be written."""
        entry = {
            "format": self.entry_format,
            "key": key,
            "stored_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **fields,
        }
        entry["digest"] = self._digest(entry, self.secret(create=True) or b"")
        data = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        with atomic_path(self.path(key), durable=False) as tmp:
            tmp.write_bytes(data)

    def _digest(self, entry: dict[str, Any], secret: bytes) -> str:
        """HMAC-SHA256 (hex) of ``entry`` without its ``digest``, as canonical JSON."""
        body = {k: v for k, v in entry.items() if k != "digest"}
        canonical = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hmac.new(secret, canonical.encode("utf-8"), hashlib.sha256).hexdigest()

    def _warn(self, what: str, message: str) -> None:
        """Log ``message`` once per ``what`` for this store object."""
        with self._warn_lock:
            if what in self._warned:
                return
            self._warned.add(what)
        log.warning("%s", message)


class AnswerStore(SignedStore):
    """Validated judge answers on disk under ``directory`` (see the module docstring for the layout).

    Args:
        directory: the store's folder (created on the first write).

    Thread- and process-safe; every method may be called from many threads at once.
    """

    def get(self, key: str, request: JudgeRequest) -> JudgeReply | None:
        """The stored answer to ``request`` (``key`` is its content address) as a cached reply (``cached``
        True, 0 requests, 0 tokens, cost 0), or None when there is none or it does not read back whole."""
        entry = self.read_signed(key)
        if entry is None:
            return None
        try:
            reply = entry["reply"]
            choices = []
            for item in reply["choices"]:
                text = item["text"]
                if not isinstance(text, str):
                    return None
                parsed = parse_answer(text, request.schema) if request.schema is not None else None
                choices.append(Choice(text=text, parsed=parsed, logprobs=_logprobs_from_json(item.get("logprobs"))))
            if not choices or not isinstance(reply["model"], str):
                return None
            return JudgeReply(choices=tuple(choices), model=reply["model"], cached=True, requests=0)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, JudgeError):
            return None  # no longer valid: a miss, replaced by the next put

    def put(self, key: str, reply: JudgeReply, *, model: str, endpoint: str) -> None:
        """Store ``reply`` (validated) under ``key``, replacing any entry atomically.

        Raises:
            OSError: the folder cannot be written (disk full, permissions).
        """
        self.write_signed(
            key,
            {
                "model": model,
                "endpoint": endpoint,
                "reply": {
                    "model": reply.model,
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "cost": reply.cost,
                    "choices": [
                        {"text": c.text, "parsed": c.parsed, "logprobs": _logprobs_to_json(c.logprobs)}
                        for c in reply.choices
                    ],
                },
            },
        )


def _create_exclusive(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` (mode 0600) unless it exists (another process's key wins). A reader
    may see it before it is whole: a short key is not trusted, and the next process reads it whole."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _logprobs_to_json(logprobs: tuple[TokenLogprob, ...] | None) -> list[Any] | None:
    if logprobs is None:
        return None
    return [[t.token, t.logprob, [[a, lp] for a, lp in t.top]] for t in logprobs]


def _logprobs_from_json(value: Any) -> tuple[TokenLogprob, ...] | None:
    """Inverse of :func:`_logprobs_to_json`. Raises ValueError / TypeError on a malformed value."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValueError("logprobs is not a list")
    return tuple(
        TokenLogprob(str(token), float(lp), tuple((str(a), float(alp)) for a, alp in top)) for token, lp, top in value
    )
