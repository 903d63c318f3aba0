"""Text length rules shared by metrics.

- characters: extended grapheme clusters (Unicode UAX #29, what a person sees as one character), via the
  ``regex`` package's ``\\X``;
- words: Unicode UAX #29 word segments (``regex``'s ``(?w)`` word boundaries) that contain at least one
  letter or digit (``\\p{L}``/``\\p{N}``); punctuation, dashes and spaces are not words, an apostrophe or a
  decimal point inside a word does not split it, and each CJK ideograph is its own word.
"""

from __future__ import annotations

import re

import regex

_GRAPHEME = regex.compile(r"\X")
_BOUNDARY = regex.compile(r"(?wV1)\b")
_HAS_WORD_CHAR = regex.compile(r"[\p{L}\p{N}]")
# Fast path: a UAX #29 boundary followed by a letter or digit starts exactly one counted segment, unless the
# text holds a character that can begin a segment *and then join* a letter or digit without being one itself
# (ExtendNumLet such as "_", Extend/Format/ZWJ marks, Katakana-class symbols, non-letter ALetter/Numeric
# characters such as circled letters), or an Extend character that is itself a letter (the halfwidth
# katakana sound marks U+FF9E/U+FF9F: no boundary precedes them, so a segment such as " \uff9e" holds a
# letter without starting with one). Texts holding one of those take the exact segment-by-segment path.
_SEGMENT_START = regex.compile(r"(?w)\b[\p{L}\p{N}]")
_JOINERS = regex.compile(
    r"(?V1)[\p{WB=ExtendNumLet}\p{WB=Extend}\p{WB=Format}\p{WB=ZWJ}"
    r"[[\p{WB=Katakana}\p{WB=ALetter}\p{WB=Hebrew_Letter}\p{WB=Numeric}]--[\p{L}\p{N}]]]"
)


def count_chars(text: str) -> int:
    """Number of extended grapheme clusters in ``text`` (``"e\\u0301"`` is 1, a family emoji is 1)."""
    if text.isascii():
        return len(text) - text.count("\r\n")  # in ASCII only CR LF forms a multi-code-point cluster
    return len(_GRAPHEME.findall(text))


# ASCII fast path (the common case, ~5x faster): without "_" (ExtendNumLet) ASCII holds only ALetter
# (A-Z, a-z), Numeric (0-9), MidLetter (":"), MidNumLet (".", "'"), MidNum (",", ";") and characters that always
# break. A segment holding a letter or digit is then a maximal run of letters and digits (WB8-WB10) that may
# continue across one ":", "." or "'" between two letters (WB6/WB7) or one ".", ",", ";" or "'" between two
# digits (WB11/WB12): one regex match each. Proven equal to words_exact in tests/test_text_rules.py.
_ASCII_WORD = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9]|(?<=[A-Za-z])[.':](?=[A-Za-z])|(?<=[0-9])[.,;'](?=[0-9]))*"
)


def count_words(text: str) -> int:
    """Number of UAX #29 word segments of ``text`` that contain a letter or digit.

    Examples: ``"Ответ на ваш вопрос — да, конечно"`` is 6; ``"don't pay 3.14"`` is 3; ``"我爱北京"`` is 4.
    """
    if text.isascii() and "_" not in text:
        return len(_ASCII_WORD.findall(text))
    if _JOINERS.search(text) is None:
        return len(_SEGMENT_START.findall(text))
    return sum(1 for segment in _BOUNDARY.split(text) if _HAS_WORD_CHAR.search(segment))


def words_exact(text: str) -> int:
    """The reference implementation of :func:`count_words` (segment by segment), for tests and checks."""
    return sum(1 for segment in _BOUNDARY.split(text) if _HAS_WORD_CHAR.search(segment))
