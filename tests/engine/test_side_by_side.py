"""Targets side by side (evaltasks.engine.side_by_side): EvaluationResults with ``targets`` built directly (each
case naming its target in ``generation``; no generation runs), compared target against the first; the tests'
numbers are computed independently here (statsmodels' exact McNemar, its paired t on the differences, numpy
means), and a case the targets disagree on is listed with both answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.weightstats import DescrStatsW

from evaltasks.engine.side_by_side import SPLITS_KEPT, SideBySideBuilder, compare_targets
from evaltasks.engine.summary import summarize
from evaltasks.results import EvaluationResult, MetricResult, TargetRun, TestCaseResult
from evaltasks.test_case import Generation

THRESHOLDS = {"Exact": 0.5, "Similarity": 0.0}


def case(
    target: str,
    case_id: str,
    exact: bool | None,
    similarity: float,
    output: str | None = None,
    *,
    sample: int = 0,
) -> TestCaseResult:
    """One case of ``target``: ``Exact`` passed (score 1), failed (score 0) or errored (None), and
    ``Similarity`` scored ``similarity`` (threshold 0: it always passes), so the case's status is Exact's."""
    exact_result = (
        MetricResult.errored("Exact", 0.5, "TargetError: the target timed out after 60 s")
        if exact is None
        else MetricResult.scored("Exact", float(exact), 0.5, "match" if exact else "no match", {})
    )
    metrics = [exact_result, MetricResult.scored("Similarity", similarity, 0.0, "cosine", {})]
    result = TestCaseResult.from_metrics(
        case_id, f"question {case_id}", f"{target} says {case_id}" if output is None else output, metrics
    )
    return result.model_copy(update={"generation": Generation(target=target, latency_ms=12.0, sample=sample)})


def target_run(name: str, cases: list[TestCaseResult]) -> TargetRun:
    return TargetRun(name=name, kind="python", fingerprint="0" * 64, summary=summarize(cases, THRESHOLDS))


def run_of(*targets: tuple[str, list[TestCaseResult]]) -> EvaluationResult:
    """A multi-target result as the contract lays it out: every target's cases, target after target; the summary
    is the first target's."""
    runs = [target_run(name, cases) for name, cases in targets]
    return EvaluationResult(
        test_results=[c for _, cases in targets for c in cases], summary=runs[0].summary, targets=runs
    )


def two_targets(n: int = 60, worse: int = 12, better: int = 2, drop: float = 0.05) -> EvaluationResult:
    """``current`` and ``candidate`` on ``n`` cases: ``worse`` cases pass on current and fail on candidate,
    ``better`` the reverse, the rest agree (a third of them failing on both); Similarity drops by about
    ``drop`` (with seeded noise)."""
    rng = np.random.default_rng(7)
    sims = rng.uniform(0.5, 0.95, n)
    noise = rng.normal(0.0, 0.03, n)
    current, candidate = [], []
    for i in range(n):
        both = i % 3 != 0  # concordant cases: passed on both, or failed on both
        cur_pass, cand_pass = (True, False) if i < worse else (False, True) if i < worse + better else (both, both)
        current.append(case("current", f"q{i}", cur_pass, float(sims[i])))
        candidate.append(case("candidate", f"q{i}", cand_pass, float(np.clip(sims[i] - drop + noise[i], 0, 1))))
    return run_of(("current", current), ("candidate", candidate))


def test_each_target_is_compared_with_the_first_by_exact_mcnemar_as_statsmodels_computes_it() -> None:
    """12 cases pass on the reference and fail on the candidate, 2 the reverse: the pass-rate test is the exact
    McNemar test statsmodels computes on the 2 × 2 table, and at p < 0.05 with a 16.7-point drop the candidate
    regressed against the reference."""
    result = two_targets()
    side = compare_targets(result, alpha=0.05, min_effect=0.01)
    assert side is not None and side.reference == "current"
    assert [v.target.name for v in side.targets] == ["current", "candidate"]
    assert side.targets[0].comparison is None  # the reference is not compared with itself
    comparison = side.targets[1].comparison
    assert comparison is not None and comparison.baseline == "current"

    statuses = {
        name: [c.status == "passed" for c in result.test_results if c.generation and c.generation.target == name]
        for name in ("current", "candidate")
    }
    cur, cand = np.array(statuses["current"]), np.array(statuses["candidate"])
    table = [[int(np.sum(cur & cand)), int(np.sum(cur & ~cand))], [int(np.sum(~cur & cand)), int(np.sum(~cur & ~cand))]]
    expected_p = mcnemar(table, exact=True).pvalue
    test = comparison.pass_rate_test
    assert test is not None and test.test == "exact McNemar"
    assert (test.worse, test.better, test.paired_cases) == (12, 2, 60)
    assert test.p_value == pytest.approx(expected_p, rel=1e-12)
    assert expected_p == pytest.approx(0.012939453125)  # 2 × P(Binomial(14, 0.5) <= 2), by hand
    assert test.delta == pytest.approx(cand.mean() - cur.mean()) == pytest.approx(-10 / 60)
    assert test.verdict == "regressed" and comparison.verdict == "regressed" and side.verdict == "regressed"
    # the metric's own pass-rate test is the same table (Exact decides the case)
    exact = next(m for m in comparison.metrics if m.name == "Exact")
    assert exact.pass_rate_test is not None and exact.pass_rate_test.p_value == pytest.approx(expected_p, rel=1e-12)


def test_the_mean_score_test_is_the_paired_t_of_the_differences() -> None:
    """Similarity's scores drop by about 0.05: Δ is the mean of the per-case differences, its p-value the paired
    t test statsmodels gives on them, and its interval (paired bootstrap) holds Δ."""
    result = two_targets()
    side = compare_targets(result)
    assert side is not None and side.targets[1].comparison is not None
    similarity = next(m for m in side.targets[1].comparison.metrics if m.name == "Similarity")
    scores = {
        name: np.array([c.metrics[1].score for c in result.test_results if c.generation.target == name])  # type: ignore[union-attr]
        for name in ("current", "candidate")
    }
    diff = scores["candidate"] - scores["current"]
    test = similarity.score_test
    assert test is not None and test.test == "paired t" and test.paired_cases == 60
    assert test.delta == pytest.approx(diff.mean(), abs=1e-12)
    assert test.p_value == pytest.approx(DescrStatsW(diff).ttest_mean(0.0)[1], rel=1e-9)
    assert test.interval is not None and test.interval.method == "paired bootstrap"
    assert test.interval.low < diff.mean() < test.interval.high
    assert test.verdict == "regressed"
    assert similarity.mean_delta == pytest.approx(scores["candidate"].mean() - scores["current"].mean(), abs=1e-12)


def test_a_case_the_targets_disagree_on_is_listed_with_both_answers() -> None:
    """q1 passes on current and errors on candidate (its generation timed out), q2 fails on both, q3 passes on
    both but a skipped result is no verdict: only q1 is split, with each target's answer, status and failing
    metric."""
    current = [
        case("current", "q1", True, 0.9, "Paris is the capital of France."),
        case("current", "q2", False, 0.4),
        case("current", "q3", True, 0.8),
    ]
    candidate = [
        case("candidate", "q1", None, 0.0, ""),
        case("candidate", "q2", False, 0.3),
        case("candidate", "q3", True, 0.8),
    ]
    side = compare_targets(run_of(("current", current), ("candidate", candidate)))
    assert side is not None and side.split_cases == 1
    (split,) = side.splits
    assert split.case_id == "q1" and split.input == "question q1"
    assert [(a.target, a.status, a.output) for a in split.answers] == [
        ("current", "passed", "Paris is the capital of France."),
        ("candidate", "errored", ""),
    ]
    assert split.answers[0].failing == {} and split.answers[0].error is None
    assert split.answers[1].failing == {"Exact": None}
    assert split.answers[1].error == "TargetError: the target timed out after 60 s"
    comparison = side.targets[1].comparison
    assert comparison is not None and comparison.newly_failing == ["q1"]
    # three paired cases: no change could be significant, so the verdict says so rather than "no change"
    assert comparison.pass_rate_test is not None and comparison.pass_rate_test.min_detectable_effect == 1.0
    assert comparison.verdict == "inconclusive"


def test_inconclusive_with_its_minimum_detectable_effect() -> None:
    """20 paired cases, 1 worse and 1 better: not significant, and the smallest change 20 cases can detect
    (6 discordant cases all one way, the fewest whose exact McNemar p is below 0.05) is 30 points, above the
    min_effect of 1 point: inconclusive."""
    p6 = 2 * 0.5**6  # exact McNemar (6, 0): 0.03125 < 0.05, while (5, 0) gives 0.0625
    assert mcnemar([[0, 6], [0, 0]], exact=True).pvalue == pytest.approx(p6)
    assert mcnemar([[0, 5], [0, 0]], exact=True).pvalue > 0.05
    side = compare_targets(two_targets(n=20, worse=1, better=1, drop=0.0), min_effect=0.01)
    assert side is not None and side.targets[1].comparison is not None
    test = side.targets[1].comparison.pass_rate_test
    assert test is not None and test.p_value == pytest.approx(1.0)
    assert test.min_detectable_effect == pytest.approx(6 / 20)
    assert test.verdict == "inconclusive"


def test_three_targets_each_against_the_first() -> None:
    """A third target equal to the reference: no case changed, yet 60 paired cases cannot detect a pass-rate
    change under 10 points (6 / 60), so against the min_effect of 1 point it is inconclusive, while the second
    regressed; the overall verdict is the worst."""
    result = two_targets()
    current = [c for c in result.test_results if c.generation.target == "current"]  # type: ignore[union-attr]
    same = [c.model_copy(update={"generation": Generation(target="same")}) for c in current]
    candidate = [c for c in result.test_results if c.generation.target == "candidate"]  # type: ignore[union-attr]
    side = compare_targets(run_of(("current", current), ("candidate", candidate), ("same", same)))
    assert side is not None
    verdicts = [v.comparison.verdict if v.comparison else None for v in side.targets]
    assert verdicts == [None, "regressed", "inconclusive"]
    assert side.verdict == "regressed"
    third = side.targets[2].comparison
    assert third is not None and third.pass_rate_test is not None
    assert (third.pass_rate_test.worse, third.pass_rate_test.better, third.pass_rate_test.p_value) == (0, 0, 1.0)
    assert third.pass_rate_test.min_detectable_effect == pytest.approx(6 / 60)
    same_similarity = next(m for m in third.metrics if m.name == "Similarity")
    score_test = same_similarity.score_test  # every difference 0: an interval of width 0, nothing undetected
    assert score_test is not None and score_test.verdict == "no significant change"
    assert (score_test.delta, score_test.p_value, score_test.min_detectable_effect) == (0.0, 1.0, 0.0)
    # a split lists every target that has the case, in the targets' order
    assert side.split_cases == 14
    assert [a.target for a in side.splits[0].answers] == ["current", "candidate", "same"]


def test_fewer_than_two_targets_is_none() -> None:
    one = run_of(("current", [case("current", "q1", True, 0.9)]))
    assert compare_targets(one) is None
    plain = EvaluationResult(test_results=one.test_results, summary=one.summary)
    assert compare_targets(plain) is None


def test_samples_pair_with_the_same_sample_and_cluster_by_case() -> None:
    """``repeat: 2``: each case's second sample has the id ``ID~2`` (the generate stage's) and pairs with the other
    target's ``ID~2``; a case's samples are one cluster of the paired bootstrap and mean-score test."""
    current, candidate = [], []
    for i in range(15):
        for sample in (0, 1):
            case_id = f"q{i}" if sample == 0 else f"q{i}~2"
            current.append(case("current", case_id, True, 0.8, sample=sample))
            candidate.append(case("candidate", case_id, i % 5 != 0 or sample == 1, 0.7 + 0.01 * i, sample=sample))
    side = compare_targets(run_of(("current", current), ("candidate", candidate)))
    assert side is not None and side.targets[1].comparison is not None
    comparison = side.targets[1].comparison
    assert comparison.paired_cases == 30 and comparison.new_cases == [] and comparison.removed_cases == []
    assert comparison.pass_rate_test is not None and comparison.pass_rate_test.worse == 3
    assert comparison.pass_rate_test.interval is not None
    assert comparison.pass_rate_test.interval.method == "cluster paired bootstrap"
    assert [s.case_id for s in side.splits] == ["q0", "q5", "q10"]
    similarity = next(m for m in comparison.metrics if m.name == "Similarity")
    assert similarity.score_test is not None and similarity.score_test.test == "cluster paired t"
    # the cluster test is the t test of the 15 cases' summed differences (each sample drops by 0.1 - 0.01 i)
    sums = np.array([2 * ((0.7 + 0.01 * i) - 0.8) for i in range(15)])
    assert similarity.score_test.p_value == pytest.approx(DescrStatsW(sums).ttest_mean(0.0)[1], rel=1e-9)
    assert "q3~2" in {c.case_id for c in comparison.changes}


def test_the_builder_takes_batches_target_by_target_in_any_order() -> None:
    """Fed in batches of 7 with the candidate's cases first, the builder gives what compare_targets gives; cut
    texts keep memory bounded."""
    result = two_targets()
    builder = SideBySideBuilder(["current", "candidate"])
    cases = result.test_results[60:] + result.test_results[:60]
    for start in range(0, len(cases), 7):
        builder.add(cases[start : start + 7])
    assert builder.finish(result.targets) == compare_targets(result)
    assert SPLITS_KEPT >= 14
    long = "x" * 5000
    big = [case("current", "q", True, 0.5, long), case("candidate", "q", False, 0.5, long)]
    side = compare_targets(run_of(("current", big[:1]), ("candidate", big[1:])))
    assert side is not None and side.splits[0].answers[0].output == "x" * 1000
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        SideBySideBuilder(["a", "b"], tolerance=-1)
    assert math.isclose(side.tolerance, 0.01)
