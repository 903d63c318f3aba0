"""A run's summary: counts, pass rates, mean scores and their intervals (:mod:`evaltasks.engine.statistics`),
built while the case results stream by (:class:`SummaryBuilder`) or from a list of them (:func:`summarize`).

The per-case values the intervals need are kept compactly (:class:`SampleCollector`, about 9 bytes per case and
metric), so a run of millions of cases summarises in bounded memory (docs/performance.md).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from evaltasks.engine.statistics import (
    FAILED,
    LEVEL,
    PASSED,
    RESAMPLES,
    SEED,
    SKIPPED,
    ClusterIndex,
    bootstrap_mean_interval,
    wilson_interval,
)
from evaltasks.results import (
    STATUS_CODES,
    EmbeddingCounts,
    EvaluationSummary,
    Interval,
    JudgeAccount,
    MetricSummary,
    StatisticsInfo,
    TestCaseResult,
)


class SampleCollector:
    """Per-case values a run's intervals need, kept compactly while the cases stream by: per metric a score
    (``array('d')``, NaN when not scored) and a status code (``array('b')``, :data:`STATUS_CODES`); per case
    its status code and, with clusters, its cluster label (``array('l')``). About 9 bytes per case × metric plus
    1 (5 with clusters) per case; ids are not kept.

    Args:
        metric_names: the metrics, in order.
        clusters: a :class:`ClusterIndex` (``dataset.cluster``), or None.
    """

    def __init__(self, metric_names: Iterable[str], clusters: ClusterIndex | None = None) -> None:
        self.scores = {name: array("d") for name in metric_names}
        self.statuses = {name: array("b") for name in self.scores}
        self.case_statuses = array("b")
        self.clusters = clusters
        self.cluster_codes = array("l")

    def add_case(self, case_id: str, status: str, metrics: Iterable[tuple[str, float | None, str]]) -> None:
        """Record one case: its id, status and ``(metric name, score, status)`` of each metric."""
        position = len(self.case_statuses)
        self.case_statuses.append(STATUS_CODES[status])
        if self.clusters is not None:
            self.cluster_codes.append(self.clusters.code(position, case_id))
        for name, score, m_status in metrics:
            code = STATUS_CODES[m_status]
            self.statuses[name].append(code)
            self.scores[name].append(score if score is not None and code <= FAILED else math.nan)

    def _groups(self, keep: np.ndarray) -> np.ndarray | None:
        if self.clusters is None:
            return None
        return np.asarray(np.frombuffer(self.cluster_codes, dtype=f"i{self.cluster_codes.itemsize}")[keep])

    def pass_rate_interval(self, statuses: array[int], level: float = LEVEL) -> Interval | None:
        """The interval of a pass rate (passed / not skipped) over ``statuses`` (a metric's or the cases'):
        :func:`wilson_interval`, or with clusters the hull of :func:`bootstrap_mean_interval` of the passed flags
        and the Wilson interval, method e.g. ``cluster bootstrap (at least Wilson)``: clustering can only widen
        an interval, and a cluster bootstrap of 10 passes out of 10 is the point 100 %."""
        codes = np.frombuffer(statuses, dtype=np.int8)
        if len(codes) != len(self.case_statuses):  # a metric with fewer results than cases: no clusters to align
            return wilson_interval(int(np.sum(codes == PASSED)), int(np.sum(codes != SKIPPED)), level)
        keep = codes != SKIPPED
        if self.clusters is None:
            return wilson_interval(int(np.sum(codes == PASSED)), int(keep.sum()), level)
        clustered = bootstrap_mean_interval((codes[keep] == PASSED).astype(float), self._groups(keep), level)
        wilson = wilson_interval(int(np.sum(codes == PASSED)), int(keep.sum()), level)
        if clustered is None or wilson is None:
            return clustered
        return Interval(
            low=min(clustered.low, wilson.low),
            high=max(clustered.high, wilson.high),
            level=level,
            method=f"{clustered.method} (at least Wilson)",
        )

    def mean_score_interval(self, name: str, level: float = LEVEL) -> Interval | None:
        """The interval of metric ``name``'s mean score over its scored cases (:func:`bootstrap_mean_interval`,
        clustered with clusters)."""
        scores = np.frombuffer(self.scores[name], dtype=float)
        keep = ~np.isnan(scores)
        groups = self._groups(keep) if len(scores) == len(self.case_statuses) else None
        return bootstrap_mean_interval(scores[keep], groups, level)

    def info(self, cluster_column: str | None) -> StatisticsInfo:
        """How the intervals are computed: level, resamples, seed, and the cluster column with its cluster
        count (named clusters plus cases alone)."""
        clusters = None
        groups = self._groups(np.ones(len(self.case_statuses), dtype=bool))
        if groups is not None:
            clusters = len(np.unique(groups))
        return StatisticsInfo(
            level=LEVEL, bootstrap_resamples=RESAMPLES, seed=SEED, cluster=cluster_column, clusters=clusters
        )


class SummaryBuilder:
    """Aggregates case results into an :class:`EvaluationSummary` one batch at a time (a streamed run keeps
    only counts and sums, never the cases). :func:`summarize` is this over a list.

    Args:
        metric_thresholds: metric name -> threshold, in metric order (names with no results still appear).
        clusters: the ``dataset.cluster`` value of each case (a list in case order, or a mapping case id ->
            value), for cluster-bootstrap intervals; None: every case is its own unit.
        cluster_column: the column's name, recorded in the summary's ``statistics``.

    Besides counts it keeps a :class:`SampleCollector` (about 9 bytes per case ×
    metric) for the summary's 95 % intervals (docs/statistics.md#uncertainty-and-regressions).
    """

    def __init__(
        self,
        metric_thresholds: dict[str, float],
        *,
        clusters: Sequence[str | None] | Mapping[str, str | None] | None = None,
        cluster_column: str | None = None,
    ) -> None:
        self.samples = SampleCollector(metric_thresholds, ClusterIndex(clusters) if clusters is not None else None)
        self.cluster_column = cluster_column if clusters is not None else None
        self.thresholds = dict(metric_thresholds)
        self.counts = {"passed": 0, "failed": 0, "errored": 0, "skipped": 0}
        self.per_metric: dict[str, dict[str, Any]] = {
            name: {"sum": 0.0, "n": 0, "passed": 0, "failed": 0, "errored": 0, "skipped": 0}
            for name in metric_thresholds
        }
        self.cost = 0.0
        self.cases = 0
        self.judges: dict[str, JudgeAccount] = {}
        self.budget_skipped = 0

    def add(self, test_results: Iterable[TestCaseResult]) -> None:
        """Fold a batch of case results in."""
        samples = self.samples
        codes, scores, statuses = STATUS_CODES, samples.scores, samples.statuses
        clusters, case_statuses, nan = samples.clusters, samples.case_statuses, math.nan
        for case in test_results:
            if clusters is not None:
                samples.cluster_codes.append(clusters.code(self.cases, case.id))
            self.cases += 1
            self.counts[case.status] += 1
            case_statuses.append(codes[case.status])
            for m in case.metrics:
                bucket = self.per_metric[m.name]
                bucket[m.status] += 1
                statuses[m.name].append(codes[m.status])
                if m.score is not None and m.status in ("passed", "failed"):
                    bucket["sum"] += m.score
                    bucket["n"] += 1
                    scores[m.name].append(m.score)
                else:
                    scores[m.name].append(nan)
                self.cost += m.evaluation_cost
                if "judge_model" in m.evaluation_log:  # a judge metric's result (is_judged, inlined)
                    account = self.judges.get(m.name)
                    if account is None:
                        account = self.judges[m.name] = JudgeAccount(model=str(m.evaluation_log["judge_model"]))
                    account.add(case.id, m)
                    if m.status == "skipped":  # is_budget_skip, inlined
                        self.budget_skipped += 1

    def finish(self, embeddings: EmbeddingCounts | None = None) -> EvaluationSummary:
        """The summary of everything added (rules in :mod:`evaltasks.results`' docstring)."""
        metrics = {}
        for name, bucket in self.per_metric.items():
            evaluated = bucket["passed"] + bucket["failed"] + bucket["errored"]
            metrics[name] = MetricSummary(
                mean_score=bucket["sum"] / bucket["n"] if bucket["n"] else None,
                pass_rate=bucket["passed"] / evaluated if evaluated else None,
                threshold=self.thresholds[name],
                passed=bucket["passed"],
                failed=bucket["failed"],
                errored=bucket["errored"],
                skipped=bucket["skipped"],
                pass_rate_interval=self.samples.pass_rate_interval(self.samples.statuses[name]) if evaluated else None,
                mean_score_interval=self.samples.mean_score_interval(name) if bucket["n"] else None,
            )
        n, skipped = self.cases, self.counts["skipped"]
        return EvaluationSummary(
            cases=n,
            passed_cases=self.counts["passed"],
            failed_cases=self.counts["failed"],
            errored_cases=self.counts["errored"],
            skipped_cases=skipped,
            pass_rate=self.counts["passed"] / (n - skipped) if n - skipped else 0.0,
            metrics=metrics,
            embeddings=embeddings or EmbeddingCounts(),
            evaluation_cost=self.cost,
            judges={name: self.judges[name] for name in self.per_metric if name in self.judges},
            judge_total=_judge_total(self.judges.values()) if self.judges else None,
            budget_skipped=self.budget_skipped,
            pass_rate_interval=self.samples.pass_rate_interval(self.samples.case_statuses) if n - skipped else None,
            statistics=self.samples.info(self.cluster_column),
        )


def _judge_total(accounts: Iterable[JudgeAccount]) -> JudgeAccount:
    """The run's judge total: the sums of ``accounts`` (unstable cases listed once per metric)."""
    total = JudgeAccount()
    for a in accounts:
        total.requests += a.requests
        total.reused += a.reused
        total.task_cached += a.task_cached
        total.prompt_tokens += a.prompt_tokens
        total.completion_tokens += a.completion_tokens
        total.cost += a.cost
        total.unstable_cases += a.unstable_cases
    total.unstable_cases = list(dict.fromkeys(total.unstable_cases))
    total.unstable = len(total.unstable_cases)
    return total


def summarize(
    test_results: list[TestCaseResult],
    metric_thresholds: dict[str, float],
    embeddings: EmbeddingCounts | None = None,
    *,
    clusters: Sequence[str | None] | Mapping[str, str | None] | None = None,
    cluster_column: str | None = None,
) -> EvaluationSummary:
    """Aggregate case results into an :class:`EvaluationSummary` (see :class:`SummaryBuilder`).

    Args:
        test_results: the case results.
        metric_thresholds: metric name -> threshold, in metric order (names with no results still appear).
        embeddings: embedding counts of the run.
        clusters, cluster_column: the cases' ``dataset.cluster`` values and the column's name (see
            :class:`SummaryBuilder`).
    """
    builder = SummaryBuilder(metric_thresholds, clusters=clusters, cluster_column=cluster_column)
    builder.add(test_results)
    return builder.finish(embeddings)
