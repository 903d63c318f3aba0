"""The suite's ``judge:`` block (docs/judges.md#llm-judges, docs/suite.md#suite-file): its problems are located at ``judge``, once,
not once per metric.

The judge metric is ``tests/judge_metric.py:VerdictMetric``; suites load in-process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.judge_runs import KEY, TESTS, write_suite


def test_bad_judge_block_options_are_reported_at_judge_each_once(tmp_path: Path, monkeypatch) -> None:
    from evaltasks.errors import ConfigError
    from evaltasks.inputs.suite import load_suite

    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    path = write_suite(
        tmp_path,
        [{"metric": "judge_metric:VerdictMetric", "name": "a"}, {"metric": "judge_metric:VerdictMetric", "name": "b"}],
        judge={"tempreature": 0, "prices": {"m": {"input": -1}}, "timeout": 0, "base_url": "http://127.0.0.1:9/v1"},
    )
    with pytest.raises(ConfigError) as caught:
        load_suite(path)
    found = {(p.location, p.field): p.message for p in caught.value.problems}
    assert set(found) == {("judge", "tempreature"), ("judge", "prices"), ("judge", "timeout")}, found
    assert "did you mean 'temperature'?" in found[("judge", "tempreature")]
    assert "['m']['input']" in found[("judge", "prices")]


def test_judge_block_option_the_client_rejects_is_located_at_judge(tmp_path: Path, monkeypatch) -> None:
    from evaltasks.errors import ConfigError
    from evaltasks.inputs.suite import load_suite

    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    # within the schema, refused by the client: a price entry with neither input nor output
    path = write_suite(
        tmp_path,
        [{"metric": "judge_metric:VerdictMetric", "name": "a"}, {"metric": "judge_metric:VerdictMetric", "name": "b"}],
        judge={"prices": {"m": {}}, "base_url": "http://127.0.0.1:9/v1"},
    )
    with pytest.raises(ConfigError) as caught:
        load_suite(path)
    [problem] = caught.value.problems  # once, not once per metric
    assert (problem.location, problem.field) == ("judge", "prices")
