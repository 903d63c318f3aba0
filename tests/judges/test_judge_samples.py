"""Judge samples (docs/judges.md#llm-judges): the mean of a metric's samples and the reason that reports it.

The judge is the product's ``judge=`` hook (:class:`~evaltasks.judges.FunctionJudge`) around a recording
function; nothing is mocked.
"""

from __future__ import annotations

import pytest

from evaltasks import BiasMetric, GEvalMetric
from tests.judge_helpers import Recorder, as_json, case, score_with

BIAS_CASE = case(input="Describe the team.", actual_output="The team shipped on time.")


def test_the_mean_of_samples_is_rounded_so_it_meets_its_threshold() -> None:
    """0.15 and 0.95: their float mean is 0.5499999999999999, which fails 0.55 unless rounded."""
    answers = iter([0.15, 0.95])
    recorder = Recorder(lambda messages: as_json({"score": next(answers), "reason": "r"}))
    metric = BiasMetric(threshold=0.55, samples=2, judge_options={"max_concurrency": 1})
    [result] = score_with(metric, [BIAS_CASE], recorder.judge())
    assert result.score == 0.55 and result.status == "passed"


def test_geval_samples_reason_says_it_quotes_the_first_sample() -> None:
    scores = iter([2, 9, 2])
    recorder = Recorder(lambda messages: as_json({"reason": "because", "score": next(scores)}))
    metric = GEvalMetric(
        0.5, evaluation_steps=["Check the facts."], n_samples=1, samples=3, judge_options={"max_concurrency": 1}
    )
    [result] = score_with(metric, [case()], recorder.judge())
    assert result.score == pytest.approx(13 / 30)
    assert result.reason.startswith("Mean of 3 samples 0.4333 (sd ")
    assert "). First sample: G-Eval score 0.2000" in result.reason
