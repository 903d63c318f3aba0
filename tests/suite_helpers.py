"""Suite files the tests write: shared by the flow, Prefect-surface, cluster,
scale-out and reference-set tests."""

from __future__ import annotations

import json
from pathlib import Path


def length_suite(
    directory: Path, words: list[int], *, name: str, gate: str = "gate: {min_pass_rate: 0}", history: str = ""
) -> Path:
    """A LengthCheckMetric suite (max 5 words) over outputs of ``words`` words each (case ids ``c0``…), with the
    suite-file lines ``gate`` and ``history``; returns the suite file (``directory/suite.yaml``)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "d.jsonl").write_text(
        "".join(json.dumps({"id": f"c{i}", "actual_output": " ".join(["w"] * n)}) + "\n" for i, n in enumerate(words)),
        encoding="utf-8",
    )
    suite = directory / "suite.yaml"
    suite.write_text(
        f"name: {name}\ndataset:\n  path: d.jsonl\nmetrics:\n  - metric: LengthCheckMetric\n"
        f"    max_length: 5\n    unit: words\n{gate}\n{history}",
        encoding="utf-8",
    )
    return suite


def reference_suite(directory: Path, *, name: str, dataset: str | Path, facts: str) -> Path:
    """A suite over a dataset shaped like ``examples/quickstart/answers.jsonl`` (``id``, ``question``, ``answer``,
    ``references``): ReferenceMatch against each case's references (threshold 0.6), ReferenceMatch against the
    reference set ``facts`` (``facts``, written to ``directory/facts.txt``; metric name ``facts``) and LengthCheck
    (30 words), local model, gate 0; returns the suite file (``directory/suite.yaml``)."""
    (directory / "facts.txt").write_text(facts, encoding="utf-8")
    path = directory / "suite.yaml"
    path.write_text(
        f"name: {name}\ndataset:\n  path: {dataset}\n"
        "  fields: {id: id, input: question, actual_output: answer, references: references}\n"
        "reference_sets: {facts: facts.txt}\n"
        "metrics:\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, threshold: 0.6}\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: facts, name: facts}\n"
        "  - {metric: LengthCheckMetric, max_length: 30, unit: words}\n"
        "gate: {min_pass_rate: 0}\n",
        encoding="utf-8",
    )
    return path
