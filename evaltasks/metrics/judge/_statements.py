"""Deterministic splitting of an answer into sentence-level statements (no judge request).

Source: eval-ai-library 0.8.2 ``eval_lib/utils.py`` ``split_into_statements``, ported exactly: its
AnswerRelevancy and Faithfulness split the answer this way instead of asking an LLM, so the same answer always
gives the same statements (the same denominator on every run).
"""

from __future__ import annotations

import re

MAX_STATEMENTS = 12
"""The most statements kept per answer (bounds the judge prompt's size and cost)."""

_MD_EMPHASIS = re.compile(r"(\*\*|__|\*|`)")
_LINE_LIST_MARKER = re.compile(r"^(?:\d{1,2}[.)]|[-*•])\s+")
_INLINE_ENUM = re.compile(r"(?<=\s)\d{1,2}\)\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


def split_into_statements(text: str, max_statements: int = MAX_STATEMENTS) -> list[str]:
    """The sentences of ``text``, at most ``max_statements`` (the first ones).

    Markdown emphasis (``**``, ``__``, ``*``, backticks) is removed and ``\\r`` read as a line break; per line, a
    leading list marker (``1.``, ``2)``, ``-``, ``*``, ``•``) is dropped, an inline enumeration ``" 1) "`` becomes a
    space, whitespace runs become one space; each line is split after ``.``, ``!`` or ``?`` followed by
    whitespace; fragments shorter than 3 characters are dropped. Empty text: ``[]``.
    """
    if not text:
        return []
    cleaned = _MD_EMPHASIS.sub("", text).replace("\r", "\n")
    statements: list[str] = []
    for line in cleaned.split("\n"):
        line = _LINE_LIST_MARKER.sub("", line.strip())
        line = _INLINE_ENUM.sub(" ", line)
        line = re.sub(r"\s+", " ", line).strip()
        if not line:
            continue
        statements.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
    return [s for s in statements if len(s) >= 3][:max_statements]
