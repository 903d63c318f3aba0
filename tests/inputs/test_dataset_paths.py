"""Datasets and reference sets reached through ``..`` or a symlink (docs/suite.md#suite-file): allowed, results.json's
``dataset`` holds the resolved path, and a notice (printed by the CLI, recorded in results.json) says when it
lies outside the suite's directory.

These run the real pipeline without Prefect — ``plan_run`` (what the CLI and the flow validate with),
``evaluate_sync`` and ``finish_run`` (what the flow writes the reports with).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from evaltasks import evaluate_sync
from evaltasks.engine.run import plan_run
from evaltasks.reports.outcome import finish_run


def _run(suite: Path, out: Path) -> dict:
    """Validate, score and write the reports as ``evaltasks run`` does; return results.json."""
    plan = plan_run(suite)
    result = evaluate_sync(plan.dataset.cases, plan.suite.metrics, ids=plan.dataset.ids)
    outcome = finish_run(plan, result, out, time.time())
    return json.loads(outcome.paths["results.json"].read_text(encoding="utf-8"))


ROWS = '{"id": "a", "actual_output": "short"}\n{"id": "b", "actual_output": "a little longer"}\n'


SUITE = (
    "name: paths\ndataset:\n  path: {path}\n  fields: {{id: id}}\nmetrics:\n  - metric: LengthCheckMetric\n"
    "    max_length: 10\ngate:\n  min_pass_rate: 0.5\n"
)


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    """``project/suites/`` (the suite's directory) and ``project/data/d.jsonl`` beside it."""
    suites = tmp_path / "project" / "suites"
    data = tmp_path / "project" / "data"
    suites.mkdir(parents=True)
    data.mkdir()
    (data / "d.jsonl").write_text(ROWS, encoding="utf-8")
    return suites, data / "d.jsonl"


@pytest.mark.parametrize("how", ["dotdot", "symlink-file", "symlink-directory"])
def test_dataset_outside_the_suite_directory_is_allowed_resolved_and_reported(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suites, dataset = _layout(tmp_path)
    monkeypatch.chdir(tmp_path / "project")  # a checkout's root, as the Action runs: the notice names paths from it
    if how == "dotdot":
        path = "../data/d.jsonl"
    elif how == "symlink-file":
        (suites / "link.jsonl").symlink_to(dataset)
        path = "link.jsonl"
    else:
        (suites / "data").symlink_to(dataset.parent, target_is_directory=True)
        path = "data/d.jsonl"
    suite = suites / "suite.yaml"
    suite.write_text(SUITE.format(path=path), encoding="utf-8")

    doc = _run(suite, tmp_path / "out")

    resolved = dataset.resolve()
    assert doc["dataset"] == str(resolved)
    assert ".." not in doc["dataset"] and "link" not in doc["dataset"]
    assert doc["passed"] is True and doc["summary"]["cases"] == 2
    # relative to the working directory: no local absolute path in the reports (nor the Action's ::notice)
    assert doc["notices"] == [f"dataset.path '{path}' resolves to data/d.jsonl, outside the suite's directory suites"]
    assert doc["warnings"] == []  # a notice for reviewers, not a warning


@pytest.mark.parametrize("how", ["plain", "dotdot-inside", "symlink-inside"])
def test_dataset_inside_the_suite_directory_gives_no_warning(how: str, tmp_path: Path) -> None:
    suites, _dataset = _layout(tmp_path)
    inside = suites / "sub" / "d.jsonl"
    inside.parent.mkdir()
    inside.write_text(ROWS, encoding="utf-8")
    if how == "plain":
        path = "sub/d.jsonl"
    elif how == "dotdot-inside":
        path = "sub/../sub/d.jsonl"
    else:
        (suites / "link.jsonl").symlink_to(inside)
        path = "link.jsonl"
    suite = suites / "suite.yaml"
    suite.write_text(SUITE.format(path=path), encoding="utf-8")

    doc = _run(suite, tmp_path / "out")

    assert doc["dataset"] == str(inside.resolve())
    assert doc["notices"] == [] and doc["warnings"] == []


def test_reference_set_file_outside_the_suite_directory_is_reported(tmp_path: Path) -> None:
    from evaltasks.inputs.suite import load_suite

    suites, _ = _layout(tmp_path)
    (suites.parent / "data" / "faq.txt").write_text("Paris is the capital of France.\n", encoding="utf-8")
    (suites / "d.jsonl").write_text(ROWS, encoding="utf-8")
    suite = suites / "suite.yaml"
    suite.write_text(
        "name: s\ndataset:\n  path: d.jsonl\nreference_sets:\n  faq: ../data/faq.txt\nmetrics:\n"
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: faq}\n",
        encoding="utf-8",
    )
    notices = load_suite(suite).notices
    assert len(notices) == 1
    assert notices[0].startswith("reference_sets.faq '../data/faq.txt' resolves to ")
    assert "outside the suite's directory" in notices[0]
