"""Valid but extreme input runs without a crash (README, "Metrics and their exact rules": statuses).

- a 10 MB output in a CSV cell, scored with ReferenceMatchMetric (local model, offline) and LengthCheckMetric:
  truncated for the embedding (and flagged in ``evaluation_log``), counted in full for the length, and written
  in full to results.json;
- 100,000 cases through the Python API (``evaluate_sync``);
- a dataset reached through ``..`` or a symlink: allowed, results.json's ``dataset`` holds the resolved path, and
  a warning (printed by the CLI, recorded in results.json) says when it lies outside the suite's directory.

These run the real pipeline without Prefect — ``plan_run`` (what the CLI and the flow validate with),
``evaluate_sync`` and ``finish_run`` (what the flow writes the reports with) — because a Prefect run of 100,000
cases takes over a minute on a 2-core machine (about 70 s measured, 31 s of CPU).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from evaltasks import EvalTestCase, LengthCheckMetric, evaluate_sync
from evaltasks.engine.run import plan_run
from evaltasks.reports.outcome import finish_run


def _run(suite: Path, out: Path) -> dict:
    """Validate, score and write the reports as ``evaltasks run`` does; return results.json."""
    plan = plan_run(suite)
    result = evaluate_sync(plan.dataset.cases, plan.suite.metrics, ids=plan.dataset.ids)
    outcome = finish_run(plan, result, out, time.time())
    return json.loads(outcome.paths["results.json"].read_text(encoding="utf-8"))


# --- a 10 MB output ------------------------------------------------------------------------------------------

SENTENCE = "The quick brown fox jumps over the lazy dog. "  # 45 characters, 9 words
SENTENCE_CHARS, SENTENCE_WORDS = 45, 9


def test_a_10_mb_output_is_truncated_for_embedding_and_counted_in_full(tmp_path: Path) -> None:
    repeats = 10_000_000 // len(SENTENCE) + 1
    big = SENTENCE * repeats
    assert len(big.encode("utf-8")) >= 10_000_000
    (tmp_path / "d.csv").write_text(
        'id,input,actual_output,references\n'
        f'big,Tell me about foxes.,"{big}","[""A fox jumps over a dog.""]"\n'
        'small,Tell me about foxes.,A fox jumped over a dog.,"[""A fox jumps over a dog.""]"\n',
        encoding="utf-8",
    )
    (tmp_path / "suite.yaml").write_text(
        "name: big-output\ndataset:\n  path: d.csv\n  fields: {id: id}\nmetrics:\n"
        "  - metric: ReferenceMatchMetric\n    embedding_provider: local\n    threshold: 0.0\n"
        "  - metric: LengthCheckMetric\n    name: chars\n    max_length: 100\n"
        "  - metric: LengthCheckMetric\n    name: words\n    unit: words\n    min_length: 1\n",
        encoding="utf-8",
    )
    doc = _run(tmp_path / "suite.yaml", tmp_path / "out")

    cases = {case["id"]: case for case in doc["cases"]}
    assert set(cases) == {"big", "small"}
    big_case = cases["big"]
    assert len(big_case["actual_output"]) == len(big)  # written in full, not cut
    metrics = {m["name"]: m for m in big_case["metrics"]}
    assert [m["status"] for m in big_case["metrics"]] == ["passed", "failed", "passed"]

    # Embedding: the model saw its first max_seq_length word pieces only, and says so.
    rm = metrics["ReferenceMatchMetric"]
    assert rm["evaluation_log"]["output_truncated"] is True
    assert rm["evaluation_log"]["references_truncated"] == 0
    assert 0.0 <= rm["score"] <= 1.0
    small_rm = next(m for m in cases["small"]["metrics"] if m["name"] == "ReferenceMatchMetric")
    assert small_rm["evaluation_log"]["output_truncated"] is False

    # Length: every character and word, computed here by arithmetic (plain ASCII, one space after each sentence).
    assert metrics["chars"]["evaluation_log"]["length"] == SENTENCE_CHARS * repeats
    assert metrics["chars"]["reason"] == f"Length {SENTENCE_CHARS * repeats} chars is above the maximum of 100."
    assert metrics["words"]["evaluation_log"]["length"] == SENTENCE_WORDS * repeats
    assert doc["summary"]["cases"] == 2


# --- 100,000 cases -------------------------------------------------------------------------------------------

def test_100k_cases_through_evaluate_sync() -> None:
    n = 100_000
    # Output i has i % 50 characters; the range [10, 40] holds 31 of each 50 lengths.
    cases = [EvalTestCase(actual_output="x" * (i % 50), input=f"q{i}") for i in range(n)]
    result = evaluate_sync(cases, [LengthCheckMetric(min_length=10, max_length=40)])  # its speed: bench/throughput.py

    assert len(result.test_results) == n
    assert result.summary.cases == n
    assert result.summary.passed_cases == 31 * n // 50
    assert result.summary.failed_cases == n - 31 * n // 50
    assert result.summary.pass_rate == pytest.approx(31 / 50)
    assert [r.metrics[0].evaluation_log["length"] for r in result.test_results[:3]] == [0, 1, 2]
    assert result.test_results[-1].metrics[0].evaluation_log["length"] == (n - 1) % 50
    assert len({r.id for r in result.test_results}) == n  # distinct inputs, distinct ids


# --- a dataset through `..` or a symlink ------------------------------------------------------------------------

ROWS = '{"id": "a", "actual_output": "short"}\n{"id": "b", "actual_output": "a little longer"}\n'
SUITE = "name: paths\ndataset:\n  path: {path}\n  fields: {{id: id}}\nmetrics:\n  - metric: LengthCheckMetric\n" \
        "    max_length: 10\ngate:\n  min_pass_rate: 0.5\n"


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    """``project/suites/`` (the suite's directory) and ``project/data/d.jsonl`` beside it."""
    suites = tmp_path / "project" / "suites"
    data = tmp_path / "project" / "data"
    suites.mkdir(parents=True)
    data.mkdir()
    (data / "d.jsonl").write_text(ROWS, encoding="utf-8")
    return suites, data / "d.jsonl"


@pytest.mark.parametrize("how", ["dotdot", "symlink-file", "symlink-directory"])
def test_dataset_outside_the_suite_directory_is_allowed_resolved_and_reported(how: str, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
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
    suites, dataset = _layout(tmp_path)
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
        "  - {metric: ReferenceMatchMetric, embedding_provider: local, reference_set: faq}\n", encoding="utf-8",
    )
    notices = load_suite(suite).notices
    assert len(notices) == 1
    assert notices[0].startswith("reference_sets.faq '../data/faq.txt' resolves to ")
    assert "outside the suite's directory" in notices[0]
