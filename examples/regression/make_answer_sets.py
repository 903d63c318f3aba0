"""Write two answer sets of the TruthfulQA davinci answers, and a suite for each, to compare one with the other.

    python examples/regression/make_answer_sets.py DAVINCI_ANSWERS_CSV OUT_DIR [FIRST_N]

writes ``OUT_DIR/given/`` (the answers as the model gave them, each starting with " A: ") and
``OUT_DIR/stripped/`` (the same answers with that prefix removed), each holding ``answers.csv`` and
``suite.yaml``. The suites are the same apart from their dataset, so ``evaltasks run OUT_DIR/stripped/suite.yaml
--baseline <the given run's results.json>`` compares the two answer sets case by case (cases are matched by
id: the question's hash, the same in both). FIRST_N keeps only the first N questions (a small comparison).
docs/statistics.md walks through the result. The data is the public
TruthfulQA set with davinci's answers (docs/install.md#truthfulqa-data-not-in-the-repository); nothing is downloaded.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

SUITE = """\
# TruthfulQA davinci answers ({variant}), compared with the other answer set (docs/statistics.md).
name: truthfulqa-answers
dataset:
  path: answers.csv
  fields: {{input: question, actual_output: model_answer, references: correct_answers}}
  list_separator: ";"
  cluster: category          # answers in one TruthfulQA category are not independent
metrics:
  - metric: ReferenceMatchMetric
    threshold: 0.7
    embedding_provider: local
  - metric: LengthCheckMetric
    max_length: 60
    unit: words
gate:
  min_pass_rate: 0.5
  fail_on: either            # the absolute floor, and no significant regression against the baseline
"""

PREFIX = " A: "


def main(argv: list[str]) -> int:
    """Write the two answer sets; returns the exit status (2: wrong arguments or an unreadable CSV)."""
    if len(argv) not in (2, 3) or (len(argv) == 3 and not argv[2].isdigit()):
        print(__doc__, file=sys.stderr)
        return 2
    source, out = Path(argv[0]), Path(argv[1])
    first = int(argv[2]) if len(argv) == 3 else None
    try:
        with source.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))[:first]
    except OSError as exc:
        print(f"cannot read {source}: {exc}", file=sys.stderr)
        return 2
    columns = ["question", "category", "model_answer", "correct_answers"]
    for variant in ("given", "stripped"):
        directory = out / variant
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / "answers.csv").open("w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            for row in rows:
                answer = row["model_answer"]
                if variant == "stripped" and answer.startswith(PREFIX):
                    answer = answer[len(PREFIX) :]
                writer.writerow(
                    {
                        "question": row["question"],
                        "category": row["category"],
                        "model_answer": answer,
                        "correct_answers": row["correct_answers"],
                    }
                )
        (directory / "suite.yaml").write_text(SUITE.format(variant=variant), encoding="utf-8")
    print(f"wrote {len(rows)} answers to {out / 'given'} and {out / 'stripped'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
