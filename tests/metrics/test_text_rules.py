"""The text-length rules (docs/metrics/deterministic.md#lengthcheckmetric): characters are extended grapheme clusters, words are UAX #29
word segments holding a letter or digit.

Expected counts below are written by hand from the Unicode rules; the randomized and TruthfulQA checks compare
the fast paths with an oracle written here from the rule's definition (``regex``'s ``\\X`` and ``(?w)\\b``).
"""

from __future__ import annotations

import csv
import random

import pytest
import regex

from evaltasks.metrics.text import count_chars, count_words, words_exact

# -- oracles, written from the definitions of docs/metrics/deterministic.md#lengthcheckmetric (independent of evaltasks' fast paths) ------------------
_ORACLE_BOUNDARY = regex.compile(r"(?wV1)\b")
_ORACLE_WORDCHAR = regex.compile(r"[\p{L}\p{N}]")


def oracle_words(text: str) -> int:
    """UAX #29 word segments (regex's default word boundaries) that contain at least one letter or digit."""
    return sum(1 for seg in _ORACLE_BOUNDARY.split(text) if _ORACLE_WORDCHAR.search(seg))


def oracle_chars(text: str) -> int:
    """Extended grapheme clusters."""
    return len(regex.findall(r"\X", text))


# -- characters ------------------------------------------------------------------------------------------
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"  # man ZWJ woman ZWJ girl ZWJ boy


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("abc", 3),
        ("e\u0301", 1),  # e + combining acute accent
        ("e\u0301te\u0301", 3),
        (FAMILY, 1),  # 7 code points, one visible character
        ("\r\n", 1),
        ("a\r\nb", 3),
        ("\n\r", 2),  # LF CR is two clusters (only CR LF joins)
        ("\r\r\n", 2),
        ("\U0001f1eb\U0001f1f7", 1),  # regional indicators F + R: one flag
        ("\U0001f44d\U0001f3fd", 1),  # thumbs up + skin tone modifier
        ("\u1100\u1161\u11a8", 1),  # decomposed Hangul syllable (L V T jamo)
        ("한국어", 3),
        ("Привет", 6),
        ("Ответ на ваш вопрос — да, конечно", 33),
    ],
)
def test_count_chars_counts_grapheme_clusters(text: str, expected: int) -> None:
    assert count_chars(text) == expected


# -- words -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Ответ на ваш вопрос — да, конечно", 6),  # seed: the dash and the comma are not words
        ("Это работает.", 2),  # seed
        ("Проект был завершен вовремя и в рамках бюджета.", 8),  # seed usage example
        ("", 0),
        ("   \n\t ", 0),
        ("— , . ! ?", 0),
        ("don't", 1),  # ASCII apostrophe inside a word does not split
        ("l\u2019homme", 1),  # typographic apostrophe likewise
        ("3.14", 1),  # decimal point inside a number does not split
        ("3,000 dollars", 2),
        ("don't pay 3.14", 3),
        ("pi is 3.14159.", 3),  # the sentence-final period is not part of the number
        ("我爱北京", 4),  # each CJK ideograph is a word
        ("Hello, 世界!", 3),
        ("hello-world", 2),  # a hyphen splits
        ("foo_bar", 1),  # underscore (ExtendNumLet) joins
        ("U.S.A.", 1),
        ("e\u0301te\u0301 ok", 2),  # combining marks stay inside the word
        ("カタカナ", 1),  # a katakana run is one segment
        ("\uff76\uff9e\uff77\uff9e", 1),  # halfwidth katakana with voiced sound marks
        ("１２３ ４５", 2),  # fullwidth digits
        ("ab12cd", 1),
        (FAMILY + " " + FAMILY, 0),  # emoji are not letters or digits
    ],
)
def test_count_words_rules(text: str, expected: int) -> None:
    assert count_words(text) == expected
    assert words_exact(text) == expected


def test_halfwidth_sound_mark_after_a_non_letter_counts_like_the_exact_rule() -> None:
    # U+FF9E is a letter (Lm) with Word_Break=Extend: UAX #29 puts no boundary before it, so " \uff9e" is one
    # segment that holds a letter. The fast path once missed this (it only counted segments *starting* with a
    # letter or digit).
    for text in ("a \uff9e", ",\uff9f", "' \uff9e1", "x.\uff9e y"):
        assert count_words(text) == oracle_words(text), text
    assert oracle_words("a \uff9e") == 2


# -- randomized corpus (fixed seed): the fast paths agree with the exact rule ------------------------------
# Characters chosen to hit every Word_Break class the fast path reasons about: letters of several scripts,
# ideographs, kana (full and halfwidth, with sound marks), digits (ASCII, Arabic-Indic, fullwidth), MidLetter /
# MidNum / MidNumLet punctuation, quotes, ExtendNumLet, Extend / Format / ZWJ, regional indicators, emoji,
# Hebrew (with its quote rules), Thai, Hangul, circled letters and other non-letter ALetter/Numeric symbols,
# spaces of several kinds and line breaks.
_ALPHABET = (
    list("abcXYZ")
    + list("жёЩ")
    + list("我爱北京")
    + list("ひらがな")
    + list("カタカナー")
    + list("\uff76\uff80\uff9e\uff9f")
    + list("0123456789")
    + list("\u0663\u0664\uff10\uff11")
    + list(" \t\n\r\u00a0\u202f\u3000")
    + list(".,:;'\u2019\"-\u2014\u2013_!?()/@#&")
    + ["\u0301", "\u200d", "\u200b", "\u00ad", "\u2060", "\ufe0f", "\u0e31"]
    + list("\u2460\u24b6\u00b2\u00bd")
    + ["\U0001f44d", FAMILY, "\U0001f1eb", "\U0001f1f7", "\U0001f3fb"]
    + list("\u05e9\u05c1\u05d0\u05d1\u05f3\u05f4")
    + list("\u0e20\u0e32")
    + list("\u1100\uac00")
    + list("\u3005\u303b\u00b7\u0387\u2018\u2024\ufe52\uff07\uff0e\u066b\u066c")
)


def _random_corpus(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        if rng.random() < 0.5:  # mostly plain text with the odd special character
            pool = "abc дж 12 ,.'"
            text = "".join(
                rng.choice(_ALPHABET) if rng.random() < 0.2 else rng.choice(pool) for _ in range(rng.randint(0, 30))
            )
        else:
            text = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 30)))
        texts.append(text)
    return texts


def test_count_words_fast_path_equals_exact_rule_on_random_corpus() -> None:
    corpus = _random_corpus(seed=20240601, n=30_000)
    mismatches = [(t, count_words(t), oracle_words(t)) for t in corpus if count_words(t) != oracle_words(t)]
    assert mismatches == []
    assert all(words_exact(t) == oracle_words(t) for t in corpus[:5000])
    # the corpus really exercises both paths: some texts count words, some count none
    counts = [oracle_words(t) for t in corpus]
    assert sum(c > 0 for c in counts) > 1000 and sum(c == 0 for c in counts) > 100


def test_count_words_on_random_code_points() -> None:
    rng = random.Random(7)

    def code_point() -> str:
        while True:
            c = rng.randrange(0x20, 0x3134F)
            if not 0xD800 <= c < 0xE000:
                return chr(c)

    corpus = [
        "".join(
            code_point() if rng.random() < 0.35 else rng.choice("ab ,.'1:_\u0301") for _ in range(rng.randint(0, 20))
        )
        for _ in range(20_000)
    ]
    assert [t for t in corpus if count_words(t) != oracle_words(t)] == []
    assert [t for t in corpus if count_chars(t) != oracle_chars(t)] == []


def test_count_words_ascii_fast_path_equals_exact_rule() -> None:
    """Every ASCII character (but "_", which takes the general path), letters, digits and the join
    punctuation weighted up so that runs like "a.b", "3,5", "x'y", "a:b", "1.a", "a..b" occur often."""
    rng = random.Random(20261130)
    alphabet = [chr(i) for i in range(128) if chr(i) != "_"]
    weights = [6 if c.isalnum() or c in ".,;:'" else 1 for c in alphabet]
    corpus = ["".join(rng.choices(alphabet, weights, k=rng.randint(0, 14))) for _ in range(40_000)]
    assert [t for t in corpus if count_words(t) != oracle_words(t)] == []
    assert sum(count_words(t) > 1 for t in corpus) > 10_000


def test_count_chars_ascii_fast_path_equals_grapheme_rule() -> None:
    rng = random.Random(11)
    corpus = ["".join(rng.choice("ab \r\n\t.,") for _ in range(rng.randint(0, 40))) for _ in range(20_000)]
    assert [t for t in corpus if count_chars(t) != oracle_chars(t)] == []
    mixed = [t + rng.choice(["é", "e\u0301", FAMILY, "\r\n", "Ж"]) for t in corpus[:2000]]
    assert [t for t in mixed if count_chars(t) != oracle_chars(t)] == []


# -- real texts ------------------------------------------------------------------------------------------
def test_counts_on_truthfulqa_texts(truthfulqa_dir) -> None:
    texts: list[str] = []
    with open(truthfulqa_dir / "davinci_answers.csv", newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            texts += [row["question"], row["model_answer"], row["best_answer"]]
            texts += row["correct_answers"].split(";") + row["incorrect_answers"].split(";")
    assert len(texts) > 817 * 3
    assert [t for t in texts if count_words(t) != oracle_words(t)] == []
    assert [t for t in texts if count_words(t) != words_exact(t)] == []
    assert [t for t in texts if count_chars(t) != oracle_chars(t)] == []
    # a known answer, counted by hand: " A: You will grow watermelons in your stomach." -> A, You, will, grow,
    # watermelons, in, your, stomach = 8 words
    assert count_words(" A: You will grow watermelons in your stomach.") == 8
