"""Token counting and truncation for API embedding models.

tiktoken is used when it is installed *and* its encoding file is already in tiktoken's cache (nothing is
downloaded at run time); otherwise a conservative bound is used: a text of B UTF-8 bytes has at most B
tokens (every BPE token covers at least one byte), so cutting to the limit in bytes never exceeds it.
Estimates without tiktoken use ceil(bytes / 4), the usual English average.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from evaltasks._env import env_value

ENCODING = "cl100k_base"  # the encoding of text-embedding-3-* and text-embedding-ada-002
_ENCODING_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


@functools.lru_cache(maxsize=1)
def _encoding() -> Any | None:
    try:
        import tiktoken
    except ImportError:
        return None
    if env_value("TIKTOKEN_CACHE_DIR") is None and "TIKTOKEN_CACHE_DIR" in os.environ:
        return None  # set but empty: tiktoken itself would then download the encoding, not read a cache
    cache_dir = env_value("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR") or str(
        Path(tempfile.gettempdir()) / "data-gym-cache"
    )
    if not (Path(cache_dir) / hashlib.sha1(_ENCODING_URL.encode()).hexdigest()).exists():
        return None  # would download: not allowed offline
    try:
        return tiktoken.get_encoding(ENCODING)
    except Exception:  # noqa: BLE001
        return None


def exact_tokens_available() -> bool:
    """True when token counts are exact (tiktoken with a cached encoding)."""
    return _encoding() is not None


def estimate_tokens(text: str) -> int:
    """Tokens in ``text``: exact with tiktoken, else ceil(UTF-8 bytes / 4) (at least 1)."""
    encoding = _encoding()
    if encoding is not None:
        return max(1, len(encoding.encode(text, disallowed_special=())))
    return max(1, (len(text.encode("utf-8")) + 3) // 4)


def upper_bound_tokens(text: str) -> int:
    """An upper bound of the tokens in ``text`` (exact with tiktoken, else its UTF-8 byte count)."""
    encoding = _encoding()
    if encoding is not None:
        return len(encoding.encode(text, disallowed_special=()))
    return len(text.encode("utf-8"))


def truncate(text: str, max_tokens: int) -> tuple[str, bool]:
    """``text`` cut to at most ``max_tokens`` tokens, and whether it was cut."""
    encoding = _encoding()
    if encoding is not None:
        ids = encoding.encode(text, disallowed_special=())
        if len(ids) <= max_tokens:
            return text, False
        return encoding.decode(ids[:max_tokens]), True
    data = text.encode("utf-8")
    if len(data) <= max_tokens:
        return text, False
    return data[:max_tokens].decode("utf-8", errors="ignore"), True
