"""Valid but large inputs run without a crash (docs/metrics/index.md#statuses).

- a 10 MB output in a CSV cell, scored with ReferenceMatchMetric (local model, offline) and LengthCheckMetric:
  truncated for the embedding (and flagged in ``evaluation_log``), counted in full for the length, and written
  in full to results.json;
- 100,000 cases through the Python API (``evaluate_sync``).

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

pytestmark = pytest.mark.slow  # a 10 MB output and 100,000 cases


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
        "id,input,actual_output,references\n"
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
