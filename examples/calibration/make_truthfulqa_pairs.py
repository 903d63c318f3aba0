"""Labelled pairs for threshold calibration, built from the TruthfulQA benchmark (docs/calibration.md).

Each question's correct answers become outputs labelled ``pass`` and its incorrect answers outputs labelled
``fail``, each scored against the question's best answer (the ``best_answer`` column, the expected output). A
correct answer that is the best answer itself (after stripping) is left out unless ``--keep-best-answer``: scored
against itself it would agree at any threshold and tell nothing.

Usage (the TruthfulQA data: docs/install.md#truthfulqa-data-not-in-the-repository; writes only OUTPUT, never into the repository)::

    .venv/bin/python examples/calibration/make_truthfulqa_pairs.py TruthfulQA.csv OUTPUT.csv [--limit N]

OUTPUT.csv columns: ``id`` (``q<question row>-c<k>`` / ``q<row>-i<k>``, rows numbered from 1), ``question``,
``answer``, ``best_answer``, ``label`` (``pass``/``fail``). List cells of the source are ``;``-separated; items
are stripped and empty ones dropped.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def _items(cell: str) -> list[str]:
    """The ``;``-separated items of a TruthfulQA list cell, stripped, empties dropped."""
    return [item.strip() for item in cell.split(";") if item.strip()]


def make_pairs(source: Path, *, limit: int | None = None, keep_best_answer: bool = False) -> list[dict[str, str]]:
    """The labelled pairs of the first ``limit`` questions (all when None) of ``source`` (TruthfulQA.csv).

    Raises:
        KeyError: a column of TruthfulQA.csv (Question, Best Answer, Correct Answers, Incorrect Answers) is missing.
    """
    pairs: list[dict[str, str]] = []
    with source.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.DictReader(handle), start=1):
            if limit is not None and number > limit:
                break
            best = row["Best Answer"].strip()
            labelled = [
                ("c", "pass", answer) for answer in _items(row["Correct Answers"]) if keep_best_answer or answer != best
            ]
            labelled += [("i", "fail", answer) for answer in _items(row["Incorrect Answers"])]
            counters = {"c": 0, "i": 0}
            for kind, label, answer in labelled:
                counters[kind] += 1
                pairs.append(
                    {
                        "id": f"q{number}-{kind}{counters[kind]}",
                        "question": row["Question"].strip(),
                        "answer": answer,
                        "best_answer": best,
                        "label": label,
                    }
                )
    return pairs


def main(argv: list[str] | None = None) -> int:
    """Write the pairs; print their counts. Exit 2 when the source cannot be read or lacks a column."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="TruthfulQA.csv")
    parser.add_argument("output", type=Path, help="the CSV to write (outside the repository)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")
    parser.add_argument(
        "--keep-best-answer", action="store_true", help="also keep the correct answer that is the best answer itself"
    )
    args = parser.parse_args(argv)
    try:
        pairs = make_pairs(args.source, limit=args.limit, keep_best_answer=args.keep_best_answer)
    except OSError as exc:
        print(f"make_truthfulqa_pairs: cannot read {args.source}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyError as exc:
        print(f"make_truthfulqa_pairs: {args.source} has no column {exc} (is it TruthfulQA.csv?)", file=sys.stderr)
        return 2
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["id", "question", "answer", "best_answer", "label"])
        writer.writeheader()
        writer.writerows(pairs)
    passing = sum(pair["label"] == "pass" for pair in pairs)
    print(f"{len(pairs)} pairs ({passing} pass, {len(pairs) - passing} fail) written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
