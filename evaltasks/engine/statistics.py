"""Intervals and paired significance tests (docs/statistics.md#uncertainty-and-regressions); the run summary they go
into is built by :mod:`evaltasks.engine.summary`.

A run's summary needs no scipy: the Wilson interval (Newcombe's formula, as ``scipy.stats.binomtest(...)
.proportion_ci(method="wilson")`` computes it), the normal quantile (``statistics.NormalDist().inv_cdf``) and the
percentile bootstrap (numpy, drawing and reading the bootstrap distribution exactly as ``scipy.stats.bootstrap(...,
method="percentile")``: the same intervals, bit for bit). scipy (about 2 s to import) is imported only by the
tests a comparison with a baseline runs: ``binomtest``, ``permutation_test``, ``ttest_1samp``, ``norm.sf``. The
tests check the numbers against statsmodels and scipy. Bootstraps are seeded (:data:`SEED`), so a rerun on the
same results gives the same intervals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from evaltasks.results import (
    STATUS_CODES,
    Interval,
)

LEVEL = 0.95
RESAMPLES = 2000
SEED = 0
NORMAL_ABOVE = 100_000
"""Above this many values (cases, or paired cases) a bootstrap is replaced by the normal approximation (method
``normal``), which bounds the time and memory of very large runs."""
SCORE_NOISE = 1e-6
"""Score differences smaller than this count as no change in the paired score tests: an unchanged output
embedded again in another batch scores within about 1e-7 of before (float32 arithmetic), and the exact sign-flip
test would count that as a drop (6 cases, 5 dropped and 1 unchanged: p = 0.0625; with the 6th at -6e-8:
0.031)."""
EXACT_UNITS = 11
"""Up to this many units (cases, or clusters) the mean-score p-value is the exact sign-flip permutation test
(all 2**11 = 2,048 sign patterns, fewer than :data:`RESAMPLES`); above, the paired t-test (:func:`paired_p_value`)."""
_BATCH_VALUES = 250_000  # values resampled per vectorized bootstrap call: ~4 MB, cache-sized (fastest measured)

PASSED, FAILED, ERRORED, SKIPPED = (STATUS_CODES[s] for s in ("passed", "failed", "errored", "skipped"))
"""Status codes of :class:`~evaltasks.engine.summary.SampleCollector` (one byte per case × metric;
:data:`~evaltasks.results.STATUS_CODES`)."""

Verdict = Literal["regressed", "improved", "no significant change", "inconclusive"]


def _stats() -> Any:
    """``scipy.stats``, imported on first use by the paired tests only (it takes one to two seconds to import: a
    run's summary, commands that compute no tests, and a run's validation do not wait for it)."""
    from scipy import stats

    return stats


_VERDICT_RANK = {"regressed": 3, "improved": 2, "inconclusive": 1, "no significant change": 0}


def normal_quantile(p: float) -> float:
    """The standard normal distribution's ``p`` quantile (``statistics.NormalDist().inv_cdf``, Wichura's AS241:
    within an ulp of ``scipy.stats.norm.ppf``). Raises ValueError unless 0 < ``p`` < 1."""
    return NormalDist().inv_cdf(p)


def wilson_interval(successes: int, n: int, level: float = LEVEL) -> Interval | None:
    """The Wilson score interval of the proportion ``successes / n`` (fractions in [0, 1]) at ``level``.

    Newcombe's (1998) formula, as ``scipy.stats.binomtest(successes, n).proportion_ci(confidence_level=level,
    method="wilson")`` computes it (the bounds are exactly 0 and 1 at ``successes`` 0 and ``n``), with z from
    :func:`normal_quantile`. None when ``n`` is 0. Raises ValueError when ``successes`` is not in [0, n].
    """
    if n == 0:
        return None
    k, n = int(successes), int(n)
    if not 0 <= k <= n:
        raise ValueError(f"successes must be in [0, n], got {k} of {n}")
    p = k / n
    z = normal_quantile(0.5 + 0.5 * level)
    denom = 2 * (n + z**2)
    center = (2 * n * p + z**2) / denom
    delta = z / denom * math.sqrt(4 * n * p * (1 - p) + z**2)
    low = 0.0 if k == 0 else center - delta
    high = 1.0 if k == n else center + delta
    return Interval(low=float(low), high=float(high), level=level, method="wilson")


def _cluster_totals(values: np.ndarray, clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums of ``values`` and sizes (float arrays of length = number of distinct clusters)."""
    _, inverse = np.unique(clusters, return_inverse=True)
    sums = np.bincount(inverse, weights=values)
    sizes = np.bincount(inverse).astype(float)
    return sums, sizes


def _ratio(sums: np.ndarray, sizes: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(np.sum(sums, axis=axis) / np.sum(sizes, axis=axis))


def _bootstrap_distribution(
    values: np.ndarray,
    clusters: np.ndarray | None,
    level: float,
    resamples: int,
    seed: int,
) -> tuple[float, float, np.ndarray]:
    """Percentile bootstrap of the mean of ``values`` (per case; with ``clusters``, of the ratio of cluster sums
    to cluster sizes, resampling whole clusters): ``(low, high, bootstrap distribution)`` via
    numpy, as ``scipy.stats.bootstrap(..., method="percentile", vectorized=True)`` computes it (with clusters
    ``paired=True``), the generator seeded with ``seed``: each batch of resamples draws ``rng.integers(0, n,
    (batch, n))`` indices, and the bounds are the linear (Hyndman-Fan 7) quantiles of the distribution."""
    rng = np.random.default_rng(seed)
    if clusters is None:
        n = len(values)

        def statistic(index: np.ndarray) -> np.ndarray:
            return np.asarray(np.mean(values[index], axis=-1))
    else:
        sums, sizes = _cluster_totals(values, clusters)
        n = len(sums)

        def statistic(index: np.ndarray) -> np.ndarray:
            return _ratio(sums[index], sizes[index], axis=-1)

    batch = max(1, min(resamples, _BATCH_VALUES // max(1, n)))
    distribution = np.concatenate(
        [
            statistic(rng.integers(0, n, (min(batch, resamples - k), n), dtype=np.int64))
            for k in range(0, resamples, batch)
        ]
    )
    low, high = _linear_quantiles(distribution, (1 - level) / 2)
    return low, high, distribution


def _linear_quantiles(values: np.ndarray, alpha: float) -> tuple[float, float]:
    """The ``alpha`` and ``1 - alpha`` quantiles of ``values`` by linear interpolation between order statistics
    (Hyndman and Fan's definition 7, numpy's default), in the arithmetic of ``scipy.stats.quantile``."""
    y = np.sort(values)
    p = np.array([alpha, 1 - np.float64(alpha)])
    n = np.float64(len(y))
    jg = p * n + (1 - p)
    jp1 = jg // 1
    j = jp1 - 1
    g = jg % 1
    g[j < 0] = 0
    j, jp1 = np.clip(j, 0.0, n - 1).astype(np.int64), np.clip(jp1, 0.0, n - 1).astype(np.int64)
    low, high = (1 - g) * y[j] + g * y[jp1]
    return float(low), float(high)


def _normal_interval(values: np.ndarray, clusters: np.ndarray | None, level: float) -> tuple[float, float, float]:
    """``(mean, standard error, z)`` of the mean of ``values`` (with ``clusters``: the ratio estimator's
    linearised standard error over clusters), z = :func:`normal_quantile` of ``(1 + level) / 2``."""
    z = normal_quantile((1 + level) / 2)
    if clusters is None:
        sem = np.std(values, ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0  # scipy.stats.sem's
        return float(values.mean()), float(sem), z
    sums, sizes = _cluster_totals(values, clusters)
    g, total = len(sums), sizes.sum()
    ratio = sums.sum() / total
    if g < 2:
        return float(ratio), 0.0, z
    residual = sums - ratio * sizes
    se = np.sqrt(g / (g - 1) * np.sum(residual**2)) / total
    return float(ratio), float(se), z


def _as_clusters(clusters: Sequence[Any] | np.ndarray | None, n: int) -> np.ndarray | None:
    if clusters is None:
        return None
    array = np.asarray(clusters)
    if len(array) != n:
        raise ValueError(f"clusters has {len(array)} entries for {n} values")
    return array


def bootstrap_mean_interval(
    values: Sequence[float] | np.ndarray,
    clusters: Sequence[Any] | np.ndarray | None = None,
    level: float = LEVEL,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval | None:
    """A ``level`` interval of the mean of ``values`` (one float per case, in score units or 0/1 for a pass
    rate).

    Percentile bootstrap over cases (as ``scipy.stats.bootstrap``, ``resamples`` resamples, generator seeded with
    ``seed``: reruns are identical), method ``bootstrap``; with ``clusters`` (one label per value, any hashable
    comparable type, e.g. the ``dataset.cluster`` column), a cluster bootstrap: as ``scipy.stats.bootstrap`` over
    ``(cluster sums, cluster sizes)`` with ``paired=True`` and the ratio of the sums, method ``cluster
    bootstrap``. Above :data:`NORMAL_ABOVE` values, the normal approximation instead (mean ± z·standard error;
    with clusters the ratio estimator's linearised standard error), method ``normal``. None for no values; a
    single value (or a single cluster) gives the point itself.

    Raises ValueError when ``clusters`` does not have one entry per value.
    """
    array = np.asarray(values, dtype=float)
    groups = _as_clusters(clusters, len(array))
    if len(array) == 0:
        return None
    method = "bootstrap" if groups is None else "cluster bootstrap"
    return _mean_interval(array, groups, level, resamples, seed, method, constant=False)


def _mean_interval(
    values: np.ndarray,
    groups: np.ndarray | None,
    level: float,
    resamples: int,
    seed: int,
    method: str,
    *,
    constant: bool,
) -> Interval:
    """The interval of the mean of ``values`` (``groups``: cluster labels or None): the point itself with fewer
    than 2 units (cases or clusters), or when ``constant`` says every value is 0; the normal approximation above
    :data:`NORMAL_ABOVE` values (method ``normal``); else the percentile bootstrap, named ``method``. The body
    of :func:`bootstrap_mean_interval` and :func:`paired_interval`."""
    units = len(values) if groups is None else len(np.unique(groups))
    if units < 2 or constant:
        mean = float(values.mean())
        return Interval(low=mean, high=mean, level=level, method=method)
    if len(values) > NORMAL_ABOVE:
        mean, se, z = _normal_interval(values, groups, level)
        return Interval(low=mean - z * se, high=mean + z * se, level=level, method="normal")
    low, high, _ = _bootstrap_distribution(values, groups, level, resamples, seed)
    return Interval(low=low, high=high, level=level, method=method)


def paired_interval(
    baseline_values: Sequence[float] | np.ndarray,
    current_values: Sequence[float] | np.ndarray,
    clusters: Sequence[Any] | np.ndarray | None = None,
    level: float = 1 - 0.05,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval | None:
    """The ``level`` interval of the mean of the per-case differences ``current - baseline`` (paired values, one
    per case, same order), without a p-value.

    Paired bootstrap of the differences (:func:`bootstrap_mean_interval`'s resampling; with ``clusters``, cluster
    paired, resampling whole clusters), method ``paired bootstrap`` / ``cluster paired bootstrap``; above
    :data:`NORMAL_ABOVE` pairs the normal approximation (method ``normal``). Identical runs, a single case or a
    single cluster give the point itself. None when there are no pairs.

    Raises ValueError when the two sequences (or ``clusters``) differ in length.
    """
    prepared = _paired(baseline_values, current_values, clusters)
    if prepared is None:
        return None
    diff, groups = prepared
    method = "paired bootstrap" if groups is None else "cluster paired bootstrap"
    return _mean_interval(diff, groups, level, resamples, seed, method, constant=not diff.any())


def _paired(
    baseline_values: Sequence[float] | np.ndarray,
    current_values: Sequence[float] | np.ndarray,
    clusters: Sequence[Any] | np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray | None] | None:
    """``(current - baseline, clusters as an array or None)``, differences smaller than :data:`SCORE_NOISE` set
    to 0; None without pairs. Raises ValueError when the lengths differ."""
    base = np.asarray(baseline_values, dtype=float)
    cur = np.asarray(current_values, dtype=float)
    if len(base) != len(cur):
        raise ValueError(f"{len(base)} baseline values and {len(cur)} current values: pairs needed")
    groups = _as_clusters(clusters, len(cur))
    if len(cur) == 0:
        return None
    diff = cur - base
    diff[np.abs(diff) < SCORE_NOISE] = 0.0
    return diff, groups


def paired_p_value(
    baseline_values: Sequence[float] | np.ndarray,
    current_values: Sequence[float] | np.ndarray,
    clusters: Sequence[Any] | np.ndarray | None = None,
    *,
    seed: int = SEED,
) -> tuple[float, str] | None:
    """The two-sided p-value of "the mean of the per-case differences ``current - baseline`` is 0", and the name
    of the test that gave it (for reports: "p = 0.001 (paired t)"):

    - ``sign-flip permutation``: up to :data:`EXACT_UNITS` units (cases; with ``clusters``, clusters), the exact
      paired permutation test (:func:`sign_flip_p_value`), valid on a handful of cases (2 cases that both
      dropped: p = 0.5);
    - ``paired t``: above that, ``scipy.stats.ttest_1samp`` of the units' differences (with ``clusters``, of the
      clusters' sums of differences), fast at any size (a permutation test with random sign patterns loops per
      resample in Python: about 25 s at 20,000 cases);
    - ``paired z``: above :data:`NORMAL_ABOVE` pairs, the normal approximation that also gives the interval
      (``scipy.stats.norm``; with clusters, the ratio estimator's standard error).

    With ``clusters`` the names get the prefix ``cluster`` (``cluster paired t``). Every difference 0 gives p =
    1.0. None when there are no pairs. Raises ValueError when the lengths differ.
    """
    prepared = _paired(baseline_values, current_values, clusters)
    if prepared is None:
        return None
    diff, groups = prepared
    prefix = "" if groups is None else "cluster "
    units = diff if groups is None else _cluster_totals(diff, groups)[0]
    if len(diff) > NORMAL_ABOVE:
        mean, se, _ = _normal_interval(diff, groups, LEVEL)
        p = _t_p_value(units) if se == 0 else float(2 * _stats().norm.sf(abs(mean) / se))  # no spread: exact
        return min(1.0, p), f"{prefix}paired z"
    if len(units) <= EXACT_UNITS:
        exact = sign_flip_p_value(diff, groups, resamples=2**EXACT_UNITS, seed=seed)  # every sign pattern
        return exact, f"{prefix}sign-flip permutation"
    return _t_p_value(units), f"{prefix}paired t"


def _t_p_value(units: np.ndarray) -> float:
    """Two-sided p-value of ``scipy.stats.ttest_1samp(units, 0)``; when every unit is the same (no spread, so no
    t), the exact sign-flip p-value ``2 / 2**len(units)`` (1.0 when they are all 0)."""
    if not np.any(units):
        return 1.0
    if np.all(units == units[0]):
        return min(1.0, math.ldexp(2.0, -len(units)))  # 2 / 2**n, 0.0 once below the smallest float
    return min(1.0, float(_stats().ttest_1samp(units, 0.0).pvalue))


def paired_difference(
    baseline_values: Sequence[float] | np.ndarray,
    current_values: Sequence[float] | np.ndarray,
    clusters: Sequence[Any] | np.ndarray | None = None,
    level: float = 1 - 0.05,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> tuple[Interval, float] | None:
    """The mean of the per-case differences ``current - baseline`` (paired values, one per case, same order):
    its ``level`` interval (:func:`paired_interval`) and a two-sided p-value of "no change"
    (:func:`paired_p_value`: the exact sign-flip permutation test up to :data:`EXACT_UNITS` cases or clusters,
    the paired t-test above, the normal approximation above :data:`NORMAL_ABOVE` pairs). Identical runs give the
    interval [0, 0] and p = 1. None when there are no pairs. Callers that need only one of the two call that
    function alone.

    Raises ValueError when the two sequences (or ``clusters``) differ in length.
    """
    interval = paired_interval(baseline_values, current_values, clusters, level, resamples=resamples, seed=seed)
    tested = paired_p_value(baseline_values, current_values, clusters, seed=seed)
    if interval is None or tested is None:
        return None
    return interval, tested[0]


def sign_flip_p_value(
    differences: np.ndarray,
    clusters: np.ndarray | None = None,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> float:
    """Two-sided p-value of "the mean of ``differences`` is 0" by the paired permutation (sign-flip) test:
    under no change each case's difference (with ``clusters``: each cluster's sum of differences) is as likely
    to have either sign. ``scipy.stats.permutation_test((d,), mean, permutation_type="samples")``: exact (every
    sign pattern) when there are at most ``log2(resamples)`` units (10 at 2,000 resamples; :func:`paired_p_value`
    passes 2,048 to enumerate up to :data:`EXACT_UNITS`),
    else ``resamples`` random patterns from a generator seeded with ``seed`` (scipy loops over them in Python:
    slow on many units; :func:`paired_p_value` uses it only where it is exact). The smallest p-value ``u`` units
    can give is ``2 / 2**u`` (6 units at alpha 0.05, as for the exact McNemar test). 1.0 when every difference
    is 0, or for a single unit."""
    units = differences if clusters is None else _cluster_totals(differences, clusters)[0]
    if not np.any(units) or len(units) < 2:  # one unit: both signs give the same |mean|
        return 1.0
    total = float(len(differences))
    batch = max(1, min(resamples, _BATCH_VALUES // max(1, len(units))))
    result = _stats().permutation_test(
        (units,),
        lambda x, axis=-1: np.sum(x, axis=axis) / total,
        permutation_type="samples",
        n_resamples=resamples,
        alternative="two-sided",
        vectorized=True,
        batch=batch,
        rng=np.random.default_rng(seed),
    )
    return min(1.0, float(result.pvalue))


def min_detectable_score_change(interval: Interval, units: int, alpha: float = 0.05) -> float:
    """The smallest mean-score change the paired test could call significant: the half-width of the
    difference's interval, or 1.0 (no change in [0, 1] could be) when there are too few units (cases, or
    clusters) for :func:`sign_flip_p_value` to reach ``alpha`` at all (``2 / 2**units >= alpha``)."""
    if units < 1 or 2.0 / 2.0 ** min(units, 1000) >= alpha:
        return 1.0
    return (interval.high - interval.low) / 2


def mcnemar_test(worse: int, better: int) -> float:
    """The two-sided p-value of the exact McNemar test on the discordant pairs: ``worse`` cases went from passed
    to not passed, ``better`` the other way; ``scipy.stats.binomtest(worse, worse + better, 0.5)``. 1.0 when no
    case changed."""
    if worse + better == 0:
        return 1.0
    return float(_stats().binomtest(int(worse), int(worse + better), 0.5).pvalue)


def min_discordant(alpha: float = 0.05) -> int:
    """The smallest number m of discordant cases, all moving one way, whose exact McNemar p-value
    (:func:`mcnemar_test` ``(m, 0)``) is below ``alpha``; 6 at alpha 0.05. Raises ValueError unless
    0 < alpha < 1."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    m = 1
    while mcnemar_test(m, 0) >= alpha:
        m += 1
    return m


def min_detectable_pass_rate_change(n: int, alpha: float = 0.05) -> float | None:
    """The smallest pass-rate change (a fraction) an exact McNemar test over ``n`` paired cases can call
    significant at ``alpha``: :func:`min_discordant` ``(alpha) / n``, capped at 1.0, which means (as for
    :func:`min_detectable_score_change`) that no change could be significant: ``n`` is smaller than that count.
    None when ``n`` is 0."""
    if n <= 0:
        return None
    return min(1.0, min_discordant(alpha) / n)


def verdict(
    p_value: float | None,
    delta: float | None,
    min_detectable_effect: float | None,
    alpha: float = 0.05,
    min_effect: float = 0.01,
) -> Verdict:
    """The verdict of one test (docs/statistics.md#uncertainty-and-regressions): ``regressed`` when ``p_value < alpha``
    and ``delta < -min_effect``; ``improved`` when ``p_value < alpha`` and ``delta > min_effect``;
    ``inconclusive`` when neither, ``p_value >= alpha`` and ``min_detectable_effect > min_effect``; else ``no
    significant change`` (also when there is nothing to test: ``p_value`` or ``delta`` None)."""
    if p_value is None or delta is None:
        return "no significant change"
    if p_value < alpha and delta < -min_effect:
        return "regressed"
    if p_value < alpha and delta > min_effect:
        return "improved"
    if p_value >= alpha and min_detectable_effect is not None and min_detectable_effect > min_effect:
        return "inconclusive"
    return "no significant change"


def worst_verdict(verdicts: Iterable[Verdict | None]) -> Verdict:
    """The worst of ``verdicts`` (regressed > improved > inconclusive > no significant change; None ignored)."""
    return max((v for v in verdicts if v is not None), key=_VERDICT_RANK.__getitem__, default="no significant change")


class ClusterIndex:
    """Maps each case to a small integer cluster label (4 bytes per case in the collectors' arrays).

    Args:
        clusters: the ``dataset.cluster`` value of each case, either a list in case order or a mapping case id
            -> value; None (or a missing or None value) puts the case in a cluster of its own.
    """

    def __init__(self, clusters: Sequence[str | None] | Mapping[str, str | None]) -> None:
        self._source = clusters
        self._codes: dict[str, int] = {}
        self._singles = 0

    def code(self, position: int, case_id: str) -> int:
        """The cluster label of the case at ``position`` (0-based, case order) with id ``case_id``: >= 0 for a
        named cluster, < 0 for a case alone."""
        source = self._source
        if isinstance(source, Mapping):
            value = source.get(case_id)
        else:
            value = source[position] if position < len(source) else None
        if value is None:
            self._singles += 1
            return -self._singles
        return self._codes.setdefault(value, len(self._codes))

    @property
    def named(self) -> int:
        """How many named clusters were seen."""
        return len(self._codes)
