"""Text length rules shared by metrics.

- characters: extended grapheme clusters (Unicode UAX #29, what a person sees as one character), via the
  ``regex`` package's ``\\X``;
- words: Unicode UAX #29 word segments (``regex``'s ``(?w)`` word boundaries) that contain at least one
  letter or digit (``\\p{L}``/``\\p{N}``); punctuation, dashes and spaces are not words, an apostrophe or a
  decimal point inside a word does not split it, and each CJK ideograph is its own word.

Text comparison rules shared by the text-comparison metrics (:func:`comparable`): Unicode White_Space
stripping, NFC normalisation and case folding.
"""

from __future__ import annotations

import re
import unicodedata

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
# digits (WB11/WB12): one regex match each. Proven equal to words_exact in tests/metrics/test_text_rules.py.
_ASCII_WORD = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|(?<=[A-Za-z])[.':](?=[A-Za-z])|(?<=[0-9])[.,;'](?=[0-9]))*")


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


# Unicode's White_Space property (PropList.txt): what "strip" removes. Not str.strip()'s default set, which also
# strips U+001C..U+001F (information separators, not White_Space); zero-width U+200B is not White_Space either.
WHITE_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_NFC = unicodedata.normalize


def comparable(text: str, *, case_sensitive: bool = True, strip: bool = False) -> str:
    """``text`` in the form the text-comparison metrics compare (ExactMatch, Contains, StartsWith, EndsWith).

    Steps: strip leading and trailing Unicode White_Space (:data:`WHITE_SPACE`) when ``strip``; NFC
    normalisation (a decomposed ``"e\\u0301"`` equals ``"\\xe9"``); when not ``case_sensitive``, Unicode full
    case folding (``str.casefold``: ``"STRASSE"`` and ``"straße"`` both become ``"strasse"``) and NFC again
    (folding can leave a non-NFC sequence). ASCII text takes a fast path with the same result (NFC is a no-op
    on it and its case folding is ``str.lower``). Folding can change a string's length, so callers compare
    folded strings and never slice the original by a folded length.

    Source: docs/metrics/deterministic.md#text-comparison.
    """
    if strip:
        text = text.strip(WHITE_SPACE)
    if text.isascii():
        return text if case_sensitive else text.lower()
    text = _NFC("NFC", text)
    return text if case_sensitive else _NFC("NFC", text.casefold())
