"""CalibrationMetric's figures over a run (docs/metrics/reliability.md#calibrationmetric): Brier skill score,
ECE and AUROC checked against a hand-worked example and against numpy/scipy computations written here; the run
through ``evaluate_sync`` and a python target; eval-ai-library 0.8.2's defects as regression tests."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from evaltasks import CalibrationMetric, EvalTestCase, ExactMatchMetric, evaluate_sync
from evaltasks.errors import InputError
from evaltasks.reliability_metrics import CalibrationMetric as Alias
from evaltasks.targets import PythonTarget

CONF = [0.9, 0.8, 0.7, 0.6, 0.3, 0.2]
RIGHT = [True, True, False, True, False, False]


def test_the_hand_worked_example() -> None:
    """Brier = (0.01 + 0.04 + 0.49 + 0.16 + 0.09 + 0.04) / 6 = 0.83 / 6; base rate 1/2, reference 1/4, so the
    skill is 1 - (0.83 / 6) / 0.25 = 0.44667. AUROC: of the 9 (right, wrong) pairs only (0.6, 0.7) is
    misordered: 8/9. ECE over 10 bins: one case per bin, (0.1 + 0.2 + 0.7 + 0.4 + 0.3 + 0.2) / 6 = 1.9 / 6."""
    result = CalibrationMetric().score_run(CONF, RIGHT)
    d = result.details
    assert d["brier"] == pytest.approx(0.83 / 6)
    assert result.score == d["brier_skill"] == pytest.approx(1 - (0.83 / 6) / 0.25)
    assert d["auroc"] == pytest.approx(8 / 9)
    assert d["ece"] == pytest.approx(1.9 / 6)
    assert (d["cases"], d["base_rate"], d["mean_confidence"]) == (6, 0.5, pytest.approx(3.5 / 6))
    assert result.status == "passed" and result.success  # threshold 0.0
    # two bins: [0, 0.5) holds 0.3, 0.2 (accuracy 0, confidence 0.25); [0.5, 1] holds the rest (0.75 and 0.75)
    assert CalibrationMetric(n_bins=2).score_run(CONF, RIGHT).details["ece"] == pytest.approx(2 / 6 * 0.25)
    assert CalibrationMetric(threshold=0.5).score_run(CONF, RIGHT).status == "failed"


def test_figures_agree_with_numpy_and_scipy_on_random_runs() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(5, 60))
        conf = np.round(rng.random(n), 2)  # rounded: ties and bin edges happen
        right = rng.random(n) < conf
        if right.all() or not right.any():
            continue
        d = CalibrationMetric(n_bins=5).score_run(conf.tolist(), right.tolist()).details
        brier = float(np.mean((conf - right) ** 2))
        p = right.mean()
        assert d["brier"] == pytest.approx(brier)
        assert d["brier_skill"] == pytest.approx(1 - brier / (p * (1 - p)))
        u = mannwhitneyu(conf[right], conf[~right]).statistic  # U of the right cases, ties counted half
        assert d["auroc"] == pytest.approx(u / (right.sum() * (~right).sum()))
        bins = np.minimum((conf * 5).astype(int), 4)  # [i/5, (i+1)/5), 1.0 in the last
        ece = sum(
            (bins == b).mean() * abs(right[bins == b].mean() - conf[bins == b].mean())
            for b in range(5)
            if (bins == b).any()
        )
        assert d["ece"] == pytest.approx(ece)


def test_the_score_is_a_skill_score_where_the_library_reports_one_minus_brier() -> None:
    """eval-ai-library 0.8.2 scores ``1 - Brier``: a system that always says 1.0 and is right 80 % of the time
    gets 0.8 and passes its 0.7 threshold while its confidence says nothing. Its Brier skill score is
    1 - 0.2 / (0.8 * 0.2) = -0.25: worse than always forecasting the success rate, so it fails."""
    conf, right = [1.0] * 10, [True] * 8 + [False] * 2
    result = CalibrationMetric().score_run(conf, right)
    assert 1 - result.details["brier"] == pytest.approx(0.8)  # the library's score
    assert result.score == pytest.approx(-0.25) and result.status == "failed"
    assert result.details["auroc"] == 0.5  # every pair tied


def test_no_invented_score_for_a_case_or_a_tiny_run() -> None:
    """eval-ai-library 0.8.2 gives every single case 1.0 from ``evaluate`` and a run of fewer than five results 1.0
    from ``evaluate_suite``. Here a case cannot be scored, and a tiny or one-sided run is errored with why."""
    metric = Alias()
    assert metric is not None and Alias is CalibrationMetric
    with pytest.raises(ValueError, match="run-level"):
        asyncio.run(metric.evaluate(EvalTestCase(actual_output="x", agent_confidence=0.5)))
    tiny = asyncio.run(metric.evaluate_suite([(0.9, True), (0.1, False)]))
    assert tiny.score is None and tiny.status == "errored" and "needs 5" in tiny.reason
    one_sided = metric.score_run([0.9] * 6, [True] * 6)
    assert one_sided.score is None and one_sided.status == "errored" and "both outcomes" in (one_sided.error or "")


def _bot(case: EvalTestCase) -> dict[str, object]:
    """Answers right on the first four questions, sure of two wrong ones."""
    answers = {"a": ("A", 0.9), "b": ("B", 0.8), "c": ("C", 0.7), "d": ("D", 0.6), "e": ("x", 0.3), "f": ("y", 0.2)}
    text, confidence = answers[case.input or ""]
    return {"output": text, "agent_confidence": confidence}


def test_a_run_with_a_target_gets_one_run_level_result_and_no_case_carries_it() -> None:
    cases = [EvalTestCase(input=q, actual_output="", expected_output=q.upper()) for q in "abcdef"]
    result = evaluate_sync(
        cases, [ExactMatchMetric(), CalibrationMetric(outcome_metric="ExactMatchMetric")], target=PythonTarget(_bot)
    )
    # outcomes: right, right, right, right, wrong, wrong with confidences 0.9 .. 0.2
    conf, right = [0.9, 0.8, 0.7, 0.6, 0.3, 0.2], [True] * 4 + [False] * 2
    run = result.summary.run_metrics["CalibrationMetric"]
    brier = sum((c - r) ** 2 for c, r in zip(conf, right)) / 6
    assert run.score == pytest.approx(1 - brier / (4 / 6 * 2 / 6))
    assert run.details["auroc"] == 1.0 and run.details["outcome"].endswith("ExactMatchMetric")
    assert [m.name for r in result.test_results for m in r.metrics] == ["ExactMatchMetric"] * 6
    assert list(result.summary.metrics) == ["ExactMatchMetric"]
    assert result.targets[0].summary.run_metrics == result.summary.run_metrics


def test_a_run_without_confidence_or_other_metrics_is_refused() -> None:
    no_confidence = [EvalTestCase(actual_output="A", expected_output="A")]
    with pytest.raises(InputError, match="agent_confidence"):
        evaluate_sync(no_confidence, [ExactMatchMetric(), CalibrationMetric()])
    cases = [EvalTestCase(actual_output="A", expected_output="A", agent_confidence=0.5)]
    with pytest.raises(InputError, match="needs another metric"):
        evaluate_sync(cases, [CalibrationMetric()])
    with pytest.raises(InputError, match="outcome_metric 'Nope'"):
        evaluate_sync(cases, [ExactMatchMetric(), CalibrationMetric(outcome_metric="Nope")])


def test_a_run_level_metric_below_its_threshold_fails_the_gate_and_an_errored_one_does_not() -> None:
    from evaltasks.engine.outcome import gate_message, gate_passed
    from evaltasks.inputs.suite import Gate

    cases = [EvalTestCase(input=q, actual_output="", expected_output=q.upper()) for q in "abcdef"]
    strict = evaluate_sync(cases, [ExactMatchMetric(), CalibrationMetric(threshold=0.9)], target=PythonTarget(_bot))
    skill = strict.summary.run_metrics["CalibrationMetric"].score
    assert skill is not None and skill < 0.9  # every case passed or failed ExactMatch: pass rate 4/6
    assert not gate_passed(strict, min_pass_rate=0.5)
    assert gate_passed(strict, min_pass_rate=0.5, fail_on="regression")  # the regression rule reads no threshold
    message = gate_message(strict, Gate(min_pass_rate=0.5), None) or ""
    assert f"run-level CalibrationMetric scored {skill:.3f}, below its threshold 0.9" in message
    lenient = evaluate_sync(cases, [ExactMatchMetric(), CalibrationMetric(threshold=0.0)], target=PythonTarget(_bot))
    assert gate_passed(lenient, min_pass_rate=0.5)
    tiny = evaluate_sync(cases[:3], [ExactMatchMetric(), CalibrationMetric()], target=PythonTarget(_bot))
    assert tiny.summary.run_metrics["CalibrationMetric"].status == "errored"
    assert gate_passed(tiny, min_pass_rate=0.5)  # reported, not gated
