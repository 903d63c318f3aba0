"""The statistics engine (docs/statistics.md#uncertainty-and-regressions): intervals, paired tests and verdicts, each
checked against statsmodels or an independent computation; then the gate's ``fail_on`` through real
``evaltasks run --baseline`` runs, and results.json v2 against its shipped JSON Schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar
from statsmodels.stats.proportion import proportion_confint

from evaltasks.engine import statistics
from evaltasks.engine.compare import compare_results
from evaltasks.engine.summary import SampleCollector, summarize
from evaltasks.results import MetricResult, TestCaseResult
from tests.cli_forkserver import run_cli

REPO = Path(__file__).resolve().parents[2]


# --- intervals ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("k", "n"), [(0, 10), (10, 10), (3, 10), (6, 8), (81, 100), (648, 800), (1, 1), (0, 1)])
def test_wilson_interval_matches_statsmodels(k: int, n: int) -> None:
    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    interval = statistics.wilson_interval(k, n)
    assert interval.method == "wilson" and interval.level == 0.95
    assert (interval.low, interval.high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))
    assert statistics.wilson_interval(0, 0) is None


def test_bootstrap_mean_interval_agrees_with_the_t_interval_on_a_large_sample() -> None:
    values = np.random.default_rng(7).gamma(2.0, 0.2, size=5000)  # skewed, like scores
    t_low, t_high = scipy_stats.t.interval(0.95, len(values) - 1, loc=values.mean(), scale=scipy_stats.sem(values))
    interval = statistics.bootstrap_mean_interval(values)
    half = (t_high - t_low) / 2
    assert interval.method == "bootstrap"
    assert interval.low == pytest.approx(t_low, abs=0.1 * half) and interval.high == pytest.approx(
        t_high, abs=0.1 * half
    )
    assert statistics.bootstrap_mean_interval(values) == interval  # seeded: a rerun is identical


def test_cluster_bootstrap_is_wider_on_clustered_data_and_equal_without_clusters() -> None:
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(40), 25)  # 40 passages, 25 answers each, answers of a passage alike
    values = np.clip(rng.random(40)[groups] + rng.normal(0, 0.02, size=len(groups)), 0, 1)
    naive = statistics.bootstrap_mean_interval(values)
    clustered = statistics.bootstrap_mean_interval(values, groups)
    assert clustered.method == "cluster bootstrap"
    assert clustered.high - clustered.low > 3 * (naive.high - naive.low)
    # independent check: the cluster-level t interval over the 40 passage means (equal sizes)
    means = values.reshape(40, 25).mean(axis=1)
    t_low, t_high = scipy_stats.t.interval(0.95, 39, loc=means.mean(), scale=scipy_stats.sem(means))
    assert clustered.high - clustered.low == pytest.approx(t_high - t_low, rel=0.15)
    alone = statistics.bootstrap_mean_interval(values, np.arange(len(values)))  # every case its own cluster
    assert alone.high - alone.low == pytest.approx(naive.high - naive.low, rel=0.1)


def test_above_100000_values_the_normal_approximation_is_used() -> None:
    values = np.random.default_rng(1).random(statistics.NORMAL_ABOVE + 1)
    interval = statistics.bootstrap_mean_interval(values)
    z = 1.959963984540054
    half = z * values.std(ddof=1) / np.sqrt(len(values))
    assert interval.method == "normal"
    assert (interval.low, interval.high) == (pytest.approx(values.mean() - half), pytest.approx(values.mean() + half))


@pytest.mark.parametrize("level", [0.8, 0.9, 0.95, 0.99])
def test_wilson_interval_is_scipy_binomtest_wilson_to_the_last_bits(level: float) -> None:
    """Computed without scipy (Newcombe's formula, z from statistics.NormalDist): within 4e-16 of
    ``scipy.stats.binomtest(k, n).proportion_ci(method="wilson")`` for every k of every n up to 60 (z differs from
    scipy's ``ndtri`` by at most an ulp), and exactly 0 and 1 at k = 0 and k = n."""
    for n in range(1, 61):
        for k in range(n + 1):
            ci = scipy_stats.binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
            interval = statistics.wilson_interval(k, n, level)
            assert abs(interval.low - ci.low) <= 4e-16 and abs(interval.high - ci.high) <= 4e-16, (k, n)
            assert (interval.low == 0.0) == (k == 0) and (interval.high == 1.0) == (k == n)
    with pytest.raises(ValueError):
        statistics.wilson_interval(5, 4)
    assert statistics.normal_quantile(0.975) == pytest.approx(scipy_stats.norm.ppf(0.975), abs=1e-15)


@pytest.mark.parametrize("clustered", [False, True])
def test_the_percentile_bootstrap_is_scipy_bootstrap_bit_for_bit(clustered: bool) -> None:
    """The numpy percentile bootstrap draws and reads the distribution as ``scipy.stats.bootstrap(...,
    method="percentile", vectorized=True)`` (with clusters: ``paired=True`` over the cluster sums and sizes):
    the same bounds and distribution, bit for bit, over sizes that take one batch and several."""
    rng = np.random.default_rng(11)
    for n, level in ((5, 0.95), (40, 0.9), (333, 0.99), (2000, 0.95)):
        values = np.round(rng.random(n), 2)
        groups = np.arange(n) % max(2, n // 4) if clustered else None
        low, high, distribution = statistics._bootstrap_distribution(
            values, groups, level, statistics.RESAMPLES, statistics.SEED
        )
        data = statistics._cluster_totals(values, groups) if clustered else (values,)
        batch = max(1, min(statistics.RESAMPLES, 250_000 // len(data[0])))
        expected = scipy_stats.bootstrap(
            data,
            statistics._ratio if clustered else np.mean,
            method="percentile",
            n_resamples=statistics.RESAMPLES,
            confidence_level=level,
            vectorized=True,
            paired=clustered,
            batch=batch,
            rng=np.random.default_rng(statistics.SEED),
        )
        assert (low, high) == (float(expected.confidence_interval.low), float(expected.confidence_interval.high))
        assert np.array_equal(distribution, expected.bootstrap_distribution)


def test_a_run_summary_imports_no_scipy() -> None:
    """A fresh process's evaluate_sync (pass rates with Wilson intervals, mean scores with bootstrap intervals)
    never imports scipy, whose import took about 2 s of the first call; the intervals are statsmodels'."""
    code = (
        "import json, sys\n"
        "from evaltasks import EvalTestCase, LengthCheckMetric, evaluate_sync\n"
        "result = evaluate_sync([EvalTestCase(actual_output='x' * i) for i in range(40)], "
        "[LengthCheckMetric(max_length=20)])\n"
        "s = result.summary\n"
        "print(json.dumps({'scipy': sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')),\n"
        "                  'wilson': [s.pass_rate_interval.low, s.pass_rate_interval.high],\n"
        "                  'mean': s.metrics['LengthCheckMetric'].mean_score_interval.model_dump()}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["scipy"] == []
    low, high = proportion_confint(21, 40, alpha=0.05, method="wilson")  # lengths 0..20 pass: 21 of 40
    assert seen["wilson"] == [pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12)]
    assert seen["mean"]["method"] == "bootstrap" and seen["mean"]["low"] < 0.525 < seen["mean"]["high"]


def test_degenerate_samples() -> None:
    assert statistics.bootstrap_mean_interval([]) is None
    point = statistics.bootstrap_mean_interval([0.4])
    assert (point.low, point.high) == (0.4, 0.4)
    assert statistics.paired_difference([], []) is None
    with pytest.raises(ValueError, match="pairs"):
        statistics.paired_difference([0.1], [0.1, 0.2])


# --- tests and verdicts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table"), [[[10, 5], [1, 30]], [[0, 16], [0, 784]], [[3, 0], [0, 5]], [[5, 7], [9, 2]], [[100, 40], [25, 100]]]
)
def test_mcnemar_matches_statsmodels(table: list[list[int]]) -> None:
    worse, better = table[0][1], table[1][0]  # passed -> not passed, not passed -> passed
    expected = sm_mcnemar(np.array(table), exact=True).pvalue
    assert statistics.mcnemar_test(worse, better) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.1])
def test_min_detectable_effect_is_the_smallest_significant_one_way_count(alpha: float) -> None:
    brute = next(m for m in range(1, 100) if scipy_stats.binomtest(m, m, 0.5).pvalue < alpha)
    assert statistics.min_discordant(alpha) == brute
    assert statistics.min_detectable_pass_rate_change(200, alpha) == pytest.approx(brute / 200)
    assert statistics.min_discordant(0.05) == 6 and statistics.min_detectable_pass_rate_change(8) == 0.75
    assert statistics.min_detectable_pass_rate_change(0) is None


def test_identical_paired_runs_give_no_change() -> None:
    values = np.random.default_rng(2).random(300)
    interval, p = statistics.paired_difference(values, values)
    assert (interval.low, interval.high, p) == (0.0, 0.0, 1.0)


def test_paired_bootstrap_agrees_with_the_paired_t_interval() -> None:
    rng = np.random.default_rng(5)
    base = rng.random(2000)
    cur = np.clip(base + rng.normal(-0.02, 0.1, size=2000), 0, 1)
    d = cur - base
    t_low, t_high = scipy_stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=scipy_stats.sem(d))
    interval, p = statistics.paired_difference(base, cur)
    half = (t_high - t_low) / 2
    assert interval.method == "paired bootstrap"
    assert interval.low == pytest.approx(t_low, abs=0.1 * half) and interval.high == pytest.approx(
        t_high, abs=0.1 * half
    )
    # 2,000 cases: the p-value is the paired t-test's, computed here by statsmodels
    from statsmodels.stats.weightstats import DescrStatsW

    _, sm_p, _ = DescrStatsW(d).ttest_mean(0.0)
    assert sm_p < 1e-6 and p == pytest.approx(sm_p, rel=1e-9)


def test_the_score_p_value_is_a_t_test_above_eleven_units_and_never_a_random_permutation_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """12 cases (or 12 clusters) and more: the paired t-test (statsmodels here), since scipy's random sign-flip
    test loops per resample in Python (about 25 s at 20,000 cases, and the pass-rate test used to compute one
    too and throw it away); a comparison of 500 cases does not call ``permutation_test`` at all."""
    from statsmodels.stats.weightstats import DescrStatsW

    d = np.array([-0.3, -0.1, 0.05, -0.2, -0.25, 0.1, -0.15, -0.05, -0.3, 0.02, -0.1, -0.2])
    p, test = statistics.paired_p_value(np.full(12, 0.5), 0.5 + d)
    assert test == "paired t" and p == pytest.approx(DescrStatsW(d).ttest_mean(0.0)[1], rel=1e-9)
    clusters = np.repeat(np.arange(12), 2)  # 12 clusters of 2: t-test of the clusters' sums of differences
    diffs = np.repeat(d / 2, 2)
    p, test = statistics.paired_p_value(np.zeros(24), diffs, clusters)
    assert test == "cluster paired t" and p == pytest.approx(DescrStatsW(d).ttest_mean(0.0)[1], rel=1e-9)
    assert statistics.paired_p_value(np.zeros(12), np.full(12, -0.1)) == (pytest.approx(2 / 2**12), "paired t")
    assert statistics.paired_p_value(np.zeros(11), np.full(11, -0.1)) == (
        pytest.approx(2 / 2**11),
        "sign-flip permutation",
    )
    big = statistics.NORMAL_ABOVE + 1  # every case fell by 0.1: no spread, yet no p of 1 (the exact p underflows)
    assert statistics.paired_p_value(np.zeros(big), np.full(big, -0.1)) == (0.0, "paired z")

    def no_loop(*args, **kwargs):
        raise AssertionError("permutation_test called on many units")

    monkeypatch.setattr(scipy_stats, "permutation_test", no_loop)
    comparison = _compare(*_runs(500, 400, 20, 0))
    assert comparison.metrics[0].score_test.test == "paired t" and comparison.verdict == "regressed"


@pytest.mark.parametrize(
    "differences",
    [
        [-0.4, -0.4],
        [-0.1, -0.3, -0.2, -0.05, -0.6],
        [-0.1] * 6,
        [0.2, -0.1, -0.3, -0.25, -0.05, -0.4, 0.01, -0.2],
        [0.2, -0.1, -0.3, -0.25, -0.05, -0.4, 0.01, -0.2, -0.02, 0.03, -0.12],  # 11: 2,048 patterns, all enumerated
    ],
)
def test_the_score_p_value_is_the_exact_sign_flip_test_on_few_cases(differences: list[float]) -> None:
    """Few cases: every sign pattern, counted here by hand (itertools), not a bootstrap (which gives p = 0 when
    every difference has one sign: 2 cases would be a regression)."""
    import itertools

    d = np.array(differences)
    observed = abs(d.mean())
    patterns = list(itertools.product((1, -1), repeat=len(d)))
    expected = sum(abs((np.array(signs) * d).mean()) >= observed - 1e-12 for signs in patterns) / len(patterns)
    _, p = statistics.paired_difference(np.full(len(d), 0.5), 0.5 + d)
    assert p == pytest.approx(expected)
    assert statistics.paired_p_value(np.full(len(d), 0.5), 0.5 + d)[1] == "sign-flip permutation"
    assert p >= 2 / 2 ** len(d)


def _case(case_id: str, passed: bool, log: dict | None = None) -> TestCaseResult:
    return TestCaseResult.from_metrics(
        case_id, None, "o", [MetricResult.scored("M", 0.9 if passed else 0.1, 0.5, "r", log or {})]
    )


def _doc(cases: list[TestCaseResult]) -> dict:
    return json.loads(
        json.dumps({"summary": summarize(cases, {"M": 0.5}).model_dump(), "cases": [c.model_dump() for c in cases]})
    )


def _runs(n: int, base_passed: int, worse: int, better: int) -> tuple[list[TestCaseResult], list[TestCaseResult]]:
    """Paired runs of ``n`` cases: the first ``base_passed`` pass in the baseline; ``worse`` of them fail now,
    and ``better`` of the baseline's failures pass now."""
    base = [_case(f"c{i}", i < base_passed) for i in range(n)]
    cur = [
        _case(f"c{i}", (i < base_passed and i >= worse) or (base_passed <= i < base_passed + better)) for i in range(n)
    ]
    return base, cur


def _compare(base: list[TestCaseResult], cur: list[TestCaseResult], **kwargs):
    return compare_results(_doc(base), summarize(cur, {"M": 0.5}), cur, **kwargs)


def test_six_of_eight_to_four_of_eight_is_inconclusive() -> None:
    comparison = _compare(*_runs(8, 6, 2, 0))
    test = comparison.pass_rate_test
    assert (test.paired_cases, test.worse, test.better) == (8, 2, 0)
    assert test.delta == pytest.approx(-0.25) and test.p_value == pytest.approx(0.5)
    assert test.min_detectable_effect == pytest.approx(0.75) and test.verdict == "inconclusive"
    [metric] = comparison.metrics
    assert metric.pass_rate_test.verdict == "inconclusive" and metric.score_test.p_value >= 0.05
    assert comparison.verdict == "inconclusive" and not comparison.regressed and comparison.regressions == []


def test_eighty_one_to_seventy_nine_percent_on_800_cases_regressed() -> None:
    comparison = _compare(*_runs(800, 648, 16, 0))
    test = comparison.pass_rate_test
    expected = sm_mcnemar(np.array([[632, 16], [0, 152]]), exact=True).pvalue
    assert test.p_value == pytest.approx(2 * 0.5**16) and test.p_value == pytest.approx(expected)
    assert (test.baseline, test.current) == (pytest.approx(0.81), pytest.approx(0.79))
    assert test.interval.high < 0 and test.interval.level == pytest.approx(0.95)
    assert test.verdict == "regressed" and comparison.verdict == "regressed" and comparison.regressed
    assert comparison.regressions[0] == "pass rate 81.00% → 79.00% (-2.00 points, p = 3.1e-05)"
    # the same change, with a minimum effect of 5 points: significant but too small to count
    larger = _compare(*_runs(800, 648, 16, 0), min_effect=0.05)
    assert larger.pass_rate_test.verdict == "no significant change" and larger.verdict == "no significant change"
    # the mirror: 16 cases fixed
    base, cur = _runs(800, 632, 0, 16)
    improved = _compare(base, cur)
    assert improved.pass_rate_test.delta == pytest.approx(0.02) and improved.verdict == "improved"
    assert not improved.regressed


def test_identical_runs_have_no_significant_change() -> None:
    # 600 paired cases can detect 6/600 = min_effect (1 point); fewer identical cases would be inconclusive
    base, _ = _runs(600, 400, 0, 0)
    comparison = _compare(base, base)
    for test in (comparison.pass_rate_test, comparison.metrics[0].pass_rate_test, comparison.metrics[0].score_test):
        assert (test.delta, test.p_value, test.verdict) == (0.0, 1.0, "no significant change")
        assert (test.interval.low, test.interval.high) == (0.0, 0.0)
    assert comparison.verdict == "no significant change"
    small = _compare(base[:50], base[:50])  # 6/50 = 12 points is the least 50 cases could detect
    assert small.pass_rate_test.min_detectable_effect == pytest.approx(0.12) and small.verdict == "inconclusive"


def test_new_and_removed_cases_are_listed_and_left_out_of_the_tests() -> None:
    base, cur = _runs(20, 10, 0, 0)
    base = base + [_case("gone", False)]
    cur = [_case("new", False)] + cur
    comparison = _compare(base, cur)
    assert comparison.new_cases == ["new"] and comparison.removed_cases == ["gone"]
    assert comparison.paired_cases == 20 and comparison.pass_rate_test.paired_cases == 20
    assert comparison.pass_rate_test.baseline == comparison.pass_rate_test.current == pytest.approx(0.5)


def test_flaky_judge_cases_of_either_run_are_listed() -> None:
    unstable = {"judge_model": "m", "unstable": True}
    base = [_case("a", True), _case("b", True, unstable), _case("c", True)]
    cur = [_case("a", True, unstable), _case("b", True), _case("c", True)]
    assert _compare(base, cur).flaky_cases == ["b", "a"]


def test_clustered_comparison_uses_the_cluster_paired_bootstrap() -> None:
    base, cur = _runs(60, 40, 6, 0)
    comparison = _compare(base, cur, clusters=[str(i // 10) for i in range(60)])
    assert comparison.pass_rate_test.interval.method == "cluster paired bootstrap"
    assert comparison.metrics[0].score_test.test == "cluster sign-flip permutation"  # 6 clusters: exact
    assert comparison.metrics[0].score_test.interval.method == "cluster paired bootstrap"
    plain = _compare(base, cur)
    assert plain.pass_rate_test.p_value == comparison.pass_rate_test.p_value  # McNemar either way


def test_summaries_carry_intervals() -> None:
    cases = [_case(f"c{i}", i % 4 != 0) for i in range(40)]  # 30 of 40 pass
    summary = summarize(cases, {"M": 0.5})
    low, high = proportion_confint(30, 40, method="wilson")
    assert (summary.pass_rate_interval.low, summary.pass_rate_interval.high) == (
        pytest.approx(low),
        pytest.approx(high),
    )
    metric = summary.metrics["M"]
    assert metric.pass_rate_interval == summary.pass_rate_interval
    assert metric.mean_score_interval.method == "bootstrap"
    assert metric.mean_score_interval.low <= metric.mean_score <= metric.mean_score_interval.high
    assert summary.statistics.model_dump() == {
        "level": 0.95,
        "bootstrap_resamples": 2000,
        "seed": 0,
        "cluster": None,
        "clusters": None,
    }
    clustered = summarize(cases, {"M": 0.5}, clusters=[str(i // 5) for i in range(40)], cluster_column="passage")
    assert clustered.pass_rate_interval.method == "cluster bootstrap (at least Wilson)"
    assert clustered.statistics.cluster == "passage" and clustered.statistics.clusters == 8


def test_a_clustered_pass_rate_interval_is_never_narrower_than_wilson() -> None:
    """10 of 10 passing in 2 clusters: every cluster-bootstrap resample passes (100.0-100.0 %); the interval is
    the hull with the Wilson interval (statsmodels), so 10/10 still says "at least 72 %"."""
    cases = [_case(f"c{i}", True) for i in range(10)]
    clustered = summarize(cases, {"M": 0.5}, clusters=[str(i // 5) for i in range(10)], cluster_column="passage")
    low, high = proportion_confint(10, 10, method="wilson")
    interval = clustered.pass_rate_interval
    assert (interval.low, interval.high) == (pytest.approx(low), pytest.approx(high)) and low < 0.75
    assert interval.method == "cluster bootstrap (at least Wilson)"
    assert clustered.metrics["M"].pass_rate_interval == interval
    # a clustered set wider than Wilson keeps its cluster-bootstrap bounds
    mixed = [_case(f"c{i}", i < 20) for i in range(40)]  # clusters all-pass or all-fail
    wide = summarize(mixed, {"M": 0.5}, clusters=[str(i // 10) for i in range(40)], cluster_column="passage")
    w_low, w_high = proportion_confint(20, 40, method="wilson")
    assert wide.pass_rate_interval.low < w_low and wide.pass_rate_interval.high > w_high


def test_the_minimum_detectable_pass_rate_change_is_at_most_one() -> None:
    """1 paired case: no change can be significant; the effect is 1.0 (100 points), not 6.0 (600 points)."""
    assert statistics.min_detectable_pass_rate_change(1) == 1.0
    assert statistics.min_detectable_pass_rate_change(6) == 1.0
    assert statistics.min_detectable_pass_rate_change(12) == pytest.approx(0.5)
    comparison = _compare(*_runs(1, 1, 1, 0))
    assert comparison.pass_rate_test.min_detectable_effect == 1.0 and comparison.verdict == "inconclusive"


def test_duration_includes_the_comparison(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """results.json duration_s runs "through scoring and the gate": the summary's and the comparison's
    statistics are inside it. A clock that moves only while the comparison is finished shows it."""
    import time
    from types import SimpleNamespace

    from evaltasks.engine.compare import ComparisonBuilder
    from evaltasks.engine.evaluate import evaluate_sync
    from evaltasks.engine.run import plan_run
    from evaltasks.reports.outcome import finish_run

    data = _write_run(tmp_path, "d", 5, n=10)
    plan = plan_run(_gate_suite(tmp_path, "s", data, "min_pass_rate: 0.1"))
    result = evaluate_sync(plan.dataset.cases, plan.suite.metrics, ids=plan.dataset.ids)
    finish_run(plan, result, tmp_path / "base", time.time())
    clock = [1000.0]
    finish = ComparisonBuilder.finish

    def slow_finish(self, summary):
        clock[0] += 60.0
        return finish(self, summary)

    monkeypatch.setattr("evaltasks.engine.lifecycle.time", SimpleNamespace(time=lambda: clock[0]))
    monkeypatch.setattr(ComparisonBuilder, "finish", slow_finish)
    outcome = finish_run(plan, result, tmp_path / "out", 1000.0, baseline=tmp_path / "base" / "results.json")
    assert outcome.header.duration_s == 60.0


# --- the gate through real runs ----------------------------------------------------------------------------


def _write_run(directory: Path, name: str, passing: int, n: int = 800, fail_first: int = 0) -> Path:
    """A dataset of ``n`` outputs of which those from ``fail_first`` to ``passing + fail_first`` are short
    (LengthCheck passes), the rest long."""
    rows = [
        {"id": f"c{i}", "answer": "short" if fail_first <= i < passing + fail_first else "far too long " * 10}
        for i in range(n)
    ]
    path = directory / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _gate_suite(directory: Path, name: str, data: Path, gate: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ndataset: {{path: {data.name}, fields: {{id: id, actual_output: answer}}}}\n"
        "metrics:\n  - metric: LengthCheckMetric\n    max_length: 5\n    unit: words\n"
        f"gate: {{{gate}}}\n",
        encoding="utf-8",
    )
    return path


def _run(directory: Path, suite: Path, out: str, *args: str, api_url: str) -> tuple[int, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("EVALTASKS_INDEX_DIR",)}
    env.update(
        PREFECT_API_URL=api_url, PREFECT_HOME=str(directory / "prefect-home"), HF_HUB_OFFLINE="1", DO_NOT_TRACK="1"
    )
    proc = run_cli("run", str(suite), "--output-dir", out, *args, cwd=directory, env=env, timeout=600)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.returncode, json.loads((directory / out / "results.json").read_text(encoding="utf-8"))


def test_fail_on_regression_and_either_through_evaltasks_run(tmp_path: Path, prefect_api_url: str) -> None:
    """81 % -> 79 % on 800 cases (16 passing cases now fail): regressed (p = 2 * 0.5**16)."""
    base_data = _write_run(tmp_path, "base", 648)
    cur_data = _write_run(tmp_path, "cur", 632, fail_first=16)  # c0..c15 now fail, the rest as before
    code, base = _run(
        tmp_path, _gate_suite(tmp_path, "base", base_data, "min_pass_rate: 0.5"), "b", api_url=prefect_api_url
    )
    assert code == 0 and base["gate"]["verdict"] is None and base["schema_version"] == 4
    baseline = str(tmp_path / "b" / "results.json")
    cases = {
        "fail_on: regression, min_pass_rate: 0.5": 1,
        "fail_on: either, min_pass_rate: 0.5": 1,
        "fail_on: either, min_pass_rate: 0.5, min_effect: 0.05": 0,  # 2 points < 5: no significant change
        "min_pass_rate: 0.5": 0,  # today's rule: 79 % >= 50 %, the regression is only reported
        "fail_on: regression, min_pass_rate: 0.99, min_effect: 0.05": 0,  # below min_pass_rate: not a regression
        "fail_on: either, min_pass_rate: 0.99, min_effect: 0.05": 1,  # the pass rate fails it
    }
    for i, (gate, expected) in enumerate(cases.items()):
        code, results = _run(
            tmp_path,
            _gate_suite(tmp_path, "cur", cur_data, gate),
            f"c{i}",
            "--baseline",
            baseline,
            api_url=prefect_api_url,
        )
        assert code == expected, gate
        assert results["passed"] is (expected == 0)
        regressed = "min_effect: 0.05" not in gate
        assert results["gate"]["verdict"] == ("regressed" if regressed else "no significant change"), gate
        test = results["comparison"]["pass_rate_test"]
        assert (test["worse"], test["better"], test["paired_cases"]) == (16, 0, 800)
        assert test["p_value"] == pytest.approx(2 * 0.5**16)
        _validate(results)
    # fail_on: regression without a baseline holds, with a warning
    code, results = _run(
        tmp_path,
        _gate_suite(tmp_path, "cur", cur_data, "fail_on: regression, min_pass_rate: 0.99"),
        "nobase",
        api_url=prefect_api_url,
    )
    assert code == 0 and results["gate"]["verdict"] is None
    assert any("no baseline was given" in w for w in results["warnings"])


# --- results.json schema -----------------------------------------------------------------------------------


def _validate(results: dict) -> None:
    import jsonschema

    schema = json.loads((REPO / "evaltasks" / "schema" / "results.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).validate(results)


@pytest.mark.slow
def test_the_shipped_results_schema_is_the_generated_one() -> None:
    from evaltasks.reports.json_report import results_json_schema

    shipped = json.loads((REPO / "evaltasks" / "schema" / "results.schema.json").read_text(encoding="utf-8"))
    assert shipped == results_json_schema()
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(shipped)


def test_quickstart_results_json_validates(tmp_path: Path, prefect_api_url: str) -> None:
    quickstart = REPO / "examples" / "quickstart" / "suite.yaml"
    code, results = _run(tmp_path, quickstart, "out", "--index-dir", str(tmp_path / "idx"), api_url=prefect_api_url)
    assert code == 0
    _validate(results)
    summary = results["summary"]
    low, high = proportion_confint(6, 8, method="wilson")
    assert (summary["pass_rate_interval"]["low"], summary["pass_rate_interval"]["high"]) == (
        pytest.approx(low),
        pytest.approx(high),
    )
    assert summary["metrics"]["ReferenceMatchMetric"]["mean_score_interval"]["method"] == "bootstrap"
    broken = {**results, "gate": {**results["gate"], "verdict": "worse"}}
    import jsonschema

    with pytest.raises(jsonschema.ValidationError):
        _validate(broken)


def test_the_python_api_summary_carries_intervals() -> None:
    from evaltasks import EvalTestCase, evaluate_sync
    from evaltasks.metrics import LengthCheckMetric

    cases = [EvalTestCase(input="q", actual_output="short" if i < 15 else "far too long " * 10) for i in range(20)]
    summary = evaluate_sync(cases, [LengthCheckMetric(max_length=5, unit="words")]).summary
    low, high = proportion_confint(15, 20, method="wilson")
    assert (summary.pass_rate_interval.low, summary.pass_rate_interval.high) == (
        pytest.approx(low),
        pytest.approx(high),
    )
    assert summary.metrics["LengthCheckMetric"].mean_score_interval.method == "bootstrap"
    assert summary.statistics.bootstrap_resamples == statistics.RESAMPLES


def test_the_sample_collector_gives_the_summary_builders_intervals() -> None:
    cases = [_case(f"c{i}", i % 3 != 0) for i in range(30)]
    collector = SampleCollector(["M"])
    for case in cases:
        collector.add_case(case.id, case.status, [(m.name, m.score, m.status) for m in case.metrics])
    summary = summarize(cases, {"M": 0.5})
    assert collector.pass_rate_interval(collector.case_statuses) == summary.pass_rate_interval
    assert collector.mean_score_interval("M") == summary.metrics["M"].mean_score_interval


@pytest.mark.slow
def test_a_suite_with_dataset_cluster_reports_cluster_intervals(tmp_path: Path) -> None:
    import time

    from evaltasks.engine.evaluate import evaluate_sync
    from evaltasks.engine.run import plan_run
    from evaltasks.reports.outcome import finish_run

    rows = [
        {"id": f"c{i}", "passage": f"p{i // 4}", "answer": "short" if i % 8 < 5 else "far too long " * 10}
        for i in range(40)
    ]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "name: s\ndataset: {path: d.jsonl, fields: {id: id, actual_output: answer}, cluster: passage}\n"
        "metrics:\n  - metric: LengthCheckMetric\n    max_length: 5\n    unit: words\n",
        encoding="utf-8",
    )
    plan = plan_run(suite)
    result = evaluate_sync(plan.dataset.cases, plan.suite.metrics, ids=plan.dataset.ids)
    finish_run(plan, result, tmp_path / "out", time.time())
    data = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    summary = data["summary"]
    assert summary["statistics"]["cluster"] == "passage" and summary["statistics"]["clusters"] == 10
    assert summary["pass_rate_interval"]["method"] == "cluster bootstrap (at least Wilson)"
    assert summary["metrics"]["LengthCheckMetric"]["mean_score_interval"]["method"] == "cluster bootstrap"
    _validate(data)


def test_gate_message_names_the_verdict() -> None:
    from evaltasks.engine.lifecycle import gate_message, gate_passed
    from evaltasks.inputs.suite import Gate
    from evaltasks.results import EvaluationResult

    base, cur = _runs(800, 648, 16, 0)
    result = EvaluationResult(test_results=cur, summary=summarize(cur, {"M": 0.5}))
    comparison = _compare(base, cur)
    assert gate_message(result, Gate(min_pass_rate=0.9), None) == "gate failed: pass rate 79.00% below 90.00%"
    assert gate_message(result, Gate(min_pass_rate=0.5), comparison) is None  # fail_on min_pass_rate
    assert gate_message(result, Gate(min_pass_rate=0.5, fail_on="regression"), comparison) == (
        "gate failed: regressed since the baseline: pass rate 81.00% → 79.00% (-2.00 points, p = 3.1e-05); "
        "M: mean score 0.7480 → 0.7320 (-0.0160, p = 5.9e-05)"
    )  # (648·0.9 + 152·0.1)/800 → (632·0.9 + 168·0.1)/800;
    # p: the paired t-test of 16 differences of -0.8 and 784 of 0 (statsmodels DescrStatsW: 5.9e-05)
    assert gate_passed(result, 0.5, comparison=comparison, fail_on="either") is False
    assert gate_passed(result, 0.5, comparison=None, fail_on="regression") is True
    with pytest.raises(ValueError, match="fail_on"):
        gate_passed(result, 0.5, fail_on="sometimes")


def test_float_noise_in_an_unchanged_score_is_no_change() -> None:
    """An unchanged output embedded again in another batch scores ~6e-8 lower; the exact sign-flip test must
    read it as unchanged (else 5 drops and 1 'drop' of 6e-8 give p = 0.031 instead of 0.0625: a verdict that
    depends on the cache state)."""
    from evaltasks.engine import statistics

    base = np.array([0.9, 0.8, 0.95, 0.85, 0.9, 0.7])
    drops = np.array([-0.5, -0.4, -0.6, -0.45, -0.55])
    p_unchanged = statistics.paired_p_value(base, base + np.append(drops, 0.0))
    noisy = statistics.paired_p_value(base, base + np.append(drops, -5.96e-8))
    assert p_unchanged is not None and noisy is not None
    assert p_unchanged == (pytest.approx(2 / 2**5), "sign-flip permutation")  # 5 units that moved, all down
    assert noisy == p_unchanged
    # a real change of 1e-5 is still a change
    moved = statistics.paired_p_value(base, base + np.append(drops, -1e-5))
    assert moved is not None and moved[0] == pytest.approx(2 / 2**6)
