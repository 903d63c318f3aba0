"""Comparison of a run with a baseline run (e.g. the base branch's last ``results.json``).

Cases are matched by id, metrics by name. With tolerance ``t`` (absolute, in score units; pass rates are
fractions, so the same ``t`` applies to them):

- a (case, metric) pair is **worse** when its status went from ``passed`` to ``failed``/``errored``, or its
  score dropped by more than ``t``; **better** when it went from ``failed``/``errored`` to ``passed``, or its
  score rose by more than ``t``; pairs skipped on either side are not compared;
- a case is **new** when only the current run has it, **removed** when only the baseline has it;
- whether a metric, or the run, **regressed** is not decided by ``t`` but by paired tests over the cases both
  runs evaluated (docs/statistics.md#uncertainty-and-regressions): pass rates by the exact McNemar test, mean scores by
  a paired test of the per-case differences with a paired bootstrap interval (cluster paired with
  ``dataset.cluster``), each with a
  verdict (``regressed``, ``improved``, ``inconclusive``, ``no significant change``) at the suite's
  ``gate.alpha`` and ``gate.min_effect`` (:mod:`evaltasks.engine.statistics`). A regression is reported even
  when the gate holds.

The baseline is read as plain JSON (any ``results.json``, schema version 1 or 2), so a baseline written by an
older evaltasks still compares.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from evaltasks.engine import statistics
from evaltasks.engine.baseline import BASELINE_SCHEMA_VERSIONS as BASELINE_SCHEMA_VERSIONS  # their home before 1.1
from evaltasks.engine.baseline import baseline_problems as baseline_problems
from evaltasks.engine.baseline import load_baseline as load_baseline
from evaltasks.engine.baseline import reference_target_cases as reference_target_cases
from evaltasks.engine.options import DEFAULT_TOLERANCE  # the run option's default, declared there
from evaltasks.results import EvaluationSummary, Interval, TestCaseResult, Turn

ChangeKind = Literal["worse", "better", "new", "removed"]
Verdict = Literal["regressed", "improved", "no significant change", "inconclusive"]


class ChangeTest(BaseModel):
    """A paired test of one statistic between the baseline and the current run, over the cases both have
    (docs/statistics.md#uncertainty-and-regressions).

    Attributes:
        statistic: ``pass_rate`` (per case: passed, or not) or ``mean_score``.
        test: the test that gives ``p_value``: ``exact McNemar`` (binomial test of the discordant pairs) for a
            pass rate; for a mean score ``sign-flip permutation`` (exact, up to 11 cases), ``paired t`` (above)
            or ``paired z`` (above 100,000 pairs), each prefixed ``cluster`` with ``dataset.cluster``
            (:func:`~evaltasks.engine.statistics.paired_p_value`); ``interval.method`` names the interval's.
        paired_cases: cases in both runs with a result on both sides (skipped ones left out; with
            ``gate.allow_errors``, errored ones too in a pass-rate test).
        baseline, current: the statistic on the paired cases in each run; delta: current − baseline.
        interval: interval of ``delta`` at level 1 − alpha: the paired bootstrap of the per-case differences
            (cluster paired with ``dataset.cluster``), for both statistics.
        p_value: two-sided p-value of "no change".
        worse, better: discordant pairs of a pass-rate test (passed → not passed, not passed → passed).
        min_detectable_effect: the smallest change this test could call significant at this many paired cases
            (pass rate: every changed case moving the same way; mean score: the interval's half-width); 1.0
            when no change could be (too few paired cases).
        verdict: ``regressed`` / ``improved`` (p < alpha and |delta| > min_effect), ``inconclusive`` (not
            significant and ``min_detectable_effect`` > min_effect), else ``no significant change``.
    """

    statistic: Literal["pass_rate", "mean_score"]
    test: str
    paired_cases: int
    baseline: float | None = None
    current: float | None = None
    delta: float | None = None
    interval: Interval | None = None
    p_value: float | None = None
    worse: int = 0
    better: int = 0
    min_detectable_effect: float | None = None
    verdict: Verdict = "no significant change"


_KIND_ORDER = {"worse": 0, "new": 1, "removed": 2, "better": 3}
CHANGE_TEXT_LIMIT = 1000
"""Characters of a case's input, expected output and outputs kept in a :class:`CaseChange`."""


def _cut(text: Any) -> str | None:
    return text[:CHANGE_TEXT_LIMIT] if isinstance(text, str) else None


CHANGE_TURNS_KEPT = 10
"""A conversation's last turns kept in a :class:`CaseChange` (docs/conversations.md#reports)."""


def _cut_turns(turns: Any) -> list[Turn] | None:
    """A conversation's last :data:`CHANGE_TURNS_KEPT` turns (results or results.json dicts), texts cut to
    :data:`CHANGE_TEXT_LIMIT`; None for a single-turn case or turns that cannot be read."""
    if not isinstance(turns, list) or not turns:
        return None
    try:
        kept = [turn if isinstance(turn, Turn) else Turn.model_validate(turn) for turn in turns[-CHANGE_TURNS_KEPT:]]
    except ValueError:  # a baseline's malformed turns: shown as a single-turn case
        return None
    return [
        Turn(input=_cut(t.input), actual_output=_cut(t.actual_output) or "", expected_output=_cut(t.expected_output))
        for t in kept
    ]


def _lowest(scores: Iterable[Any]) -> float | None:
    values = [float(s) for s in scores if isinstance(s, (int, float)) and not isinstance(s, bool)]
    return min(values) if values else None


class MetricComparison(BaseModel):
    """One metric in both runs (a side is None when the metric exists in one run only).

    Attributes:
        name: the metric's name.
        baseline_mean, current_mean: mean scores (None when nothing was scored).
        mean_delta: current − baseline mean score, when both exist.
        baseline_pass_rate, current_pass_rate, pass_rate_delta: the same for pass rates (fractions).
        regressed: the metric's verdict is ``regressed``.
        pass_rate_test, score_test: the paired tests (None when the metric is in one run only or nothing
            paired).
        verdict: the worse of the two tests' verdicts (regressed > improved > inconclusive > no significant
            change); ``inconclusive`` when the metric is in both runs but no case was paired (both tests None);
            None when the metric is in one run only.
    """

    name: str
    baseline_mean: float | None = None
    current_mean: float | None = None
    mean_delta: float | None = None
    baseline_pass_rate: float | None = None
    current_pass_rate: float | None = None
    pass_rate_delta: float | None = None
    regressed: bool = False
    pass_rate_test: ChangeTest | None = None
    score_test: ChangeTest | None = None
    verdict: Verdict | None = None


class CaseChange(BaseModel):
    """A (case, metric) pair that changed beyond the tolerance, or a case that is new or removed.

    Attributes:
        case_id: the case id; metric: the metric name ("" for a new or removed case).
        kind: ``worse``, ``better``, ``new`` or ``removed``.
        baseline_score, current_score, delta: scores on each side and current − baseline.
        baseline_status, current_status: statuses on each side. A new case has its current side only, a removed
            case its baseline side only: its case status and, as its score, the lowest of its metric scores.
        input, expected_output: the case's input and expected answer or reference (None when it has none or the
            results.json that held it is older); baseline_output, current_output: the output on each side. Texts
            are cut to :data:`CHANGE_TEXT_LIMIT` characters (results.json's cases hold them whole).
        turns, turns_total: a conversation's last :data:`CHANGE_TURNS_KEPT` turns (this run's; a removed case's
            from the baseline) and how many it has; None for a single-turn case (docs/conversations.md#reports).
    """

    case_id: str
    metric: str = ""
    kind: ChangeKind
    baseline_score: float | None = None
    current_score: float | None = None
    delta: float | None = None
    baseline_status: str | None = None
    current_status: str | None = None
    input: str | None = None
    expected_output: str | None = None
    baseline_output: str | None = None
    current_output: str | None = None
    turns: list[Turn] | None = None
    turns_total: int | None = None


class Comparison(BaseModel):
    """A run compared with a baseline.

    Attributes:
        baseline: where the baseline came from (a path or a label).
        tolerance: the tolerance used (score units).
        baseline_pass_rate, current_pass_rate, pass_rate_delta: overall pass rates (fractions).
        metrics: one entry per metric of either run, current run's order first.
        changes: changed pairs, worst first (worse by delta, then new, removed, better).
        counts: number of changes per kind.
        regressed: the overall verdict is ``regressed``.
        regressions: one sentence per regression (verdict ``regressed``), with its p-value, for annotations.
        alpha, min_effect: the gate's significance level and smallest effect that counts.
        pass_rate_test: the paired test of the overall (case) pass rate.
        verdict: ``regressed`` when the overall test or any metric regressed, else ``improved`` when any
            improved, else ``inconclusive`` when any is or when no case is in both runs (nothing was compared),
            else ``no significant change``.
        paired_cases: cases in both runs (by id, whatever their status); a test's ``paired_cases`` counts
            only the pairs it tested (skipped ones left out), so it can be smaller. new_cases, removed_cases:
            ids only in the current run / only in the baseline (left out of the paired tests).
        flaky_cases: cases a judge metric with ``samples: K`` found unstable (samples on both sides of the
            threshold) in either run.
        newly_failing: ids of cases that passed in the baseline and failed or errored now, in case order;
            newly_passing: the reverse (failed or errored then, passed now).
    """

    baseline: str
    tolerance: float
    baseline_pass_rate: float | None = None
    current_pass_rate: float | None = None
    pass_rate_delta: float | None = None
    metrics: list[MetricComparison] = Field(default_factory=list)
    changes: list[CaseChange] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    regressed: bool = False
    regressions: list[str] = Field(default_factory=list)
    alpha: float = 0.05
    min_effect: float = 0.01
    pass_rate_test: ChangeTest | None = None
    verdict: Verdict = "no significant change"
    paired_cases: int = 0
    new_cases: list[str] = Field(default_factory=list)
    removed_cases: list[str] = Field(default_factory=list)
    flaky_cases: list[str] = Field(default_factory=list)
    newly_failing: list[str] = Field(default_factory=list)
    newly_passing: list[str] = Field(default_factory=list)


def _scores(cases: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, tuple[float | None, str]]]:
    out: dict[str, dict[str, tuple[float | None, str]]] = {}
    for case in cases:
        metrics = {}
        for m in case.get("metrics") or []:
            if isinstance(m, Mapping) and isinstance(m.get("name"), str):
                score = m.get("score")
                metrics[m["name"]] = (float(score) if isinstance(score, (int, float)) else None, str(m.get("status")))
        out[str(case.get("id"))] = metrics
    return out


def _pair_kind(base: tuple[float | None, str], cur: tuple[float | None, str], tolerance: float) -> ChangeKind | None:
    (b_score, b_status), (c_score, c_status) = base, cur
    if "skipped" in (b_status, c_status):
        return None
    if b_status == "passed" and c_status in ("failed", "errored"):
        return "worse"
    if b_status in ("failed", "errored") and c_status == "passed":
        return "better"
    if b_score is not None and c_score is not None:
        if c_score < b_score - tolerance:
            return "worse"
        if c_score > b_score + tolerance:
            return "better"
    elif b_score is not None and c_status == "errored":
        return "worse"
    return None


def _delta(current: float | None, baseline: float | None) -> float | None:
    return None if current is None or baseline is None else current - baseline


def _base_case_status(case: Mapping[str, Any]) -> str:
    """A baseline case's status: its ``status``, else derived from its metrics' (the rule of
    :func:`~evaltasks.results.case_status`)."""
    status = case.get("status")
    if isinstance(status, str):
        return status
    statuses = {str(m.get("status")) for m in case.get("metrics") or [] if isinstance(m, Mapping)}
    return next((s for s in ("errored", "failed", "passed") if s in statuses), "skipped")


def _unstable(case: Mapping[str, Any]) -> bool:
    """Whether a baseline case (JSON) has a judge result whose samples were unstable."""
    return any(
        isinstance(m, Mapping)
        and isinstance(m.get("evaluation_log"), Mapping)
        and m["evaluation_log"].get("unstable") is True
        for m in case.get("metrics") or []
    )


class _Pairs:
    """Paired values of one test, held compactly: baseline and current values (``array('d')``, 16 bytes a
    pair) and, with clusters, the current case's cluster label (``array('l')``)."""

    def __init__(self) -> None:
        self.base, self.cur, self.clusters = array("d"), array("d"), array("l")

    def add(self, base: float, cur: float, cluster: int | None) -> None:
        self.base.append(base)
        self.cur.append(cur)
        if cluster is not None:
            self.clusters.append(cluster)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        groups = np.frombuffer(self.clusters, dtype=f"i{self.clusters.itemsize}") if len(self.clusters) else None
        return np.frombuffer(self.base, dtype=float), np.frombuffer(self.cur, dtype=float), groups


def _pass_rate_test(
    pairs: _Pairs, alpha: float, min_effect: float, memo: dict[bytes, Interval | None] | None = None
) -> ChangeTest | None:
    """The exact McNemar test of paired passed flags (1.0 passed, 0.0 not), with the paired bootstrap interval
    of the difference at level 1 − alpha (no other p-value is computed); None without pairs. ``memo`` keeps
    intervals by their data, so the same flags (the overall test and the only metric's) are resampled once."""
    base, cur, groups = pairs.arrays()
    n = len(base)
    if n == 0:
        return None
    worse, better = int(np.sum(base > cur)), int(np.sum(cur > base))
    key = b"".join((base.tobytes(), cur.tobytes(), b"" if groups is None else groups.tobytes()))
    interval = (memo or {}).get(key)
    if interval is None:
        interval = statistics.paired_interval(base, cur, groups, 1 - alpha)
        if memo is not None:
            memo[key] = interval
    p = statistics.mcnemar_test(worse, better)
    b_rate, c_rate = float(base.mean()), float(cur.mean())
    mde = statistics.min_detectable_pass_rate_change(n, alpha)
    return ChangeTest(
        statistic="pass_rate",
        test="exact McNemar",
        paired_cases=n,
        baseline=b_rate,
        current=c_rate,
        delta=c_rate - b_rate,
        interval=interval,
        p_value=p,
        worse=worse,
        better=better,
        min_detectable_effect=mde,
        verdict=statistics.verdict(p, c_rate - b_rate, mde, alpha, min_effect),
    )


def _score_test(pairs: _Pairs, alpha: float, min_effect: float) -> ChangeTest | None:
    """The paired test of the mean score: the paired bootstrap interval of the mean difference (level 1 −
    alpha, :func:`~evaltasks.engine.statistics.paired_interval`) and the p-value of
    :func:`~evaltasks.engine.statistics.paired_p_value` (the test named after it); None without pairs."""
    base, cur, groups = pairs.arrays()
    n = len(base)
    if n == 0:
        return None
    interval = statistics.paired_interval(base, cur, groups, 1 - alpha)
    p, test = statistics.paired_p_value(base, cur, groups)  # type: ignore[misc]
    b_mean, c_mean = float(base.mean()), float(cur.mean())
    units = n if groups is None else len(np.unique(groups))
    mde = statistics.min_detectable_score_change(interval, units, alpha)  # type: ignore[arg-type]
    return ChangeTest(
        statistic="mean_score",
        test=test,
        paired_cases=n,
        baseline=b_mean,
        current=c_mean,
        delta=c_mean - b_mean,
        interval=interval,
        p_value=p,
        min_detectable_effect=mde,
        verdict=statistics.verdict(p, c_mean - b_mean, mde, alpha, min_effect),
    )


def regression_sentence(subject: str, test: ChangeTest) -> str:
    """One regression as a sentence after ``subject`` (``""`` or ``"NAME: "``), e.g. ``pass rate 81.00% →
    79.00% (-2.00 points, p = 3.1e-05)``: the words of :attr:`Comparison.regressions` (reports rebuild them
    the same way)."""
    if test.statistic == "pass_rate":
        change = f"pass rate {test.baseline:.2%} → {test.current:.2%} ({100 * (test.delta or 0.0):+.2f} points"
    else:
        change = f"mean score {test.baseline:.4f} → {test.current:.4f} ({test.delta:+.4f}"
    return f"{subject}{change}, p = {test.p_value:.2g})"


class ComparisonBuilder:
    """Builds a :class:`Comparison` from cases fed in batches (a streamed run): :meth:`add` each batch of the
    current run's cases (in case order), then :meth:`finish` with the run's summary. The baseline's cases are
    held as ``{case id: {metric: (score, status)}}`` (a few dozen bytes per pair); of the current run only the
    ids seen and the paired values the tests need (floats in compact arrays, about 40 bytes per paired case ×
    metric) are kept.

    Args:
        baseline: a parsed baseline results.json.
        tolerance: the per-case change list's tolerance (score units).
        label: how the baseline is named in reports.
        alpha, min_effect: the suite's ``gate.alpha`` and ``gate.min_effect``.
        allow_errors: the suite's ``gate.allow_errors``: pairs with an errored result on either side are left
            out of the pass-rate tests, as the gate leaves errored cases out of its pass rate (the change list
            still lists them).
        clusters: the current run's ``dataset.cluster`` values (a list in case order, or a mapping case id ->
            value) for cluster-paired intervals; None: cases are independent.

    Raises ValueError when ``tolerance`` is negative.
    """

    def __init__(
        self,
        baseline: Mapping[str, Any],
        *,
        tolerance: float = DEFAULT_TOLERANCE,
        label: str = "baseline",
        alpha: float = 0.05,
        min_effect: float = 0.01,
        clusters: Sequence[str | None] | Mapping[str, str | None] | None = None,
        allow_errors: bool = False,
    ) -> None:
        if tolerance < 0:
            raise ValueError(f"tolerance must be >= 0, got {tolerance}")
        self.tolerance, self.label = tolerance, label
        self.alpha, self.min_effect = alpha, min_effect
        self._left_out = ("skipped", "errored") if allow_errors else ("skipped",)  # of the pass-rate tests
        self._base_summary: Mapping[str, Any] = baseline.get("summary") or {}
        base_cases = [c for c in baseline.get("cases") or [] if isinstance(c, Mapping)]
        self._base_cases = _scores(base_cases)
        self._base_status = {str(c.get("id")): _base_case_status(c) for c in base_cases}
        self._base_docs = {str(c.get("id")): c for c in base_cases}  # the parsed baseline's own objects
        self._newly_failing: list[str] = []
        self._newly_passing: list[str] = []
        self._flaky: dict[str, None] = {str(c.get("id")): None for c in base_cases if _unstable(c)}
        self._clusters = statistics.ClusterIndex(clusters) if clusters is not None else None
        self._position = 0
        self._seen: set[str] = set()
        self._changes: list[CaseChange] = []
        self._overall = _Pairs()
        self._passes: dict[str, _Pairs] = {}
        self._scores: dict[str, _Pairs] = {}

    def add(self, cases: Iterable[TestCaseResult]) -> None:
        """Compare a batch of the current run's cases with the baseline (cases in case order)."""
        for case in cases:
            position = self._position
            self._position += 1
            self._seen.add(case.id)
            for m in case.metrics:
                if m.evaluation_log.get("unstable") is True:
                    self._flaky[case.id] = None
            base_metrics = self._base_cases.get(case.id)
            cluster = self._clusters.code(position, case.id) if self._clusters is not None else None
            if base_metrics is None:
                self._changes.append(
                    CaseChange(
                        case_id=case.id,
                        kind="new",
                        current_status=case.status,
                        current_score=_lowest(m.score for m in case.metrics),
                        input=_cut(case.input),
                        expected_output=_cut(case.expected_output),
                        current_output=_cut(case.actual_output),
                        turns=_cut_turns(case.turns),
                        turns_total=len(case.turns) if case.turns else None,
                    )
                )
                continue
            base_status = self._base_status[case.id]
            if base_status == "passed" and case.status in ("failed", "errored"):
                self._newly_failing.append(case.id)
            elif base_status in ("failed", "errored") and case.status == "passed":
                self._newly_passing.append(case.id)
            base_doc = self._base_docs[case.id]
            if base_status not in self._left_out and case.status not in self._left_out:
                self._overall.add(float(base_status == "passed"), float(case.status == "passed"), cluster)
            for m in case.metrics:
                base = base_metrics.get(m.name)
                if base is None:
                    continue
                cur = (m.score, m.status)
                if "skipped" not in (base[1], m.status):
                    if base[1] not in self._left_out and m.status not in self._left_out:
                        pairs = self._passes.get(m.name) or self._passes.setdefault(m.name, _Pairs())
                        pairs.add(float(base[1] == "passed"), float(m.status == "passed"), cluster)
                    if (
                        base[0] is not None
                        and m.score is not None
                        and base[1] in ("passed", "failed")
                        and m.status in ("passed", "failed")
                    ):
                        pairs = self._scores.get(m.name) or self._scores.setdefault(m.name, _Pairs())
                        pairs.add(base[0], m.score, cluster)
                kind = _pair_kind(base, cur, self.tolerance)
                if kind is not None:
                    self._changes.append(
                        CaseChange(
                            case_id=case.id,
                            metric=m.name,
                            kind=kind,
                            baseline_score=base[0],
                            current_score=m.score,
                            delta=_delta(m.score, base[0]),
                            baseline_status=base[1],
                            current_status=m.status,
                            input=_cut(case.input),
                            expected_output=_cut(case.expected_output),
                            baseline_output=_cut(base_doc.get("actual_output")),
                            current_output=_cut(case.actual_output),
                            turns=_cut_turns(case.turns),
                            turns_total=len(case.turns) if case.turns else None,
                        )
                    )

    def finish(self, summary: EvaluationSummary) -> Comparison:
        """The comparison, given the current run's ``summary`` (rules in the module docstring and in
        :class:`Comparison`)."""
        tolerance, alpha, min_effect = self.tolerance, self.alpha, self.min_effect
        removed = [case_id for case_id in self._base_cases if case_id not in self._seen]
        changes = self._changes + [self._removed(case_id) for case_id in removed]
        changes.sort(key=lambda c: (_KIND_ORDER[c.kind], c.delta if c.delta is not None and c.kind == "worse" else 0.0))
        base_metrics: Mapping[str, Any] = self._base_summary.get("metrics") or {}
        comparison = Comparison(baseline=self.label, tolerance=tolerance, alpha=alpha, min_effect=min_effect)
        memo: dict[bytes, Interval | None] = {}
        names = list(summary.metrics) + [n for n in base_metrics if n not in summary.metrics]
        for name in names:
            cur_m = summary.metrics.get(name)
            base_m = base_metrics.get(name) if isinstance(base_metrics.get(name), Mapping) else None
            entry = MetricComparison(
                name=name,
                baseline_mean=base_m.get("mean_score") if base_m else None,
                current_mean=cur_m.mean_score if cur_m else None,
                baseline_pass_rate=base_m.get("pass_rate") if base_m else None,
                current_pass_rate=cur_m.pass_rate if cur_m else None,
            )
            entry.mean_delta = _delta(entry.current_mean, entry.baseline_mean)
            entry.pass_rate_delta = _delta(entry.current_pass_rate, entry.baseline_pass_rate)
            if cur_m is not None and cur_m.passed + cur_m.failed + cur_m.errored == 0:
                entry.pass_rate_delta = None  # skipped in this run (e.g. a fork): not a regression
            if cur_m is not None and base_m is not None:
                entry.pass_rate_test = _pass_rate_test(self._passes.get(name, _Pairs()), alpha, min_effect, memo)
                entry.score_test = _score_test(self._scores.get(name, _Pairs()), alpha, min_effect)
                tests = [t.verdict for t in (entry.pass_rate_test, entry.score_test) if t is not None]
                entry.verdict = statistics.worst_verdict(tests) if tests else "inconclusive"  # nothing paired
                entry.regressed = entry.verdict == "regressed"
                for test in (entry.pass_rate_test, entry.score_test):
                    if test is not None and test.verdict == "regressed":
                        comparison.regressions.append(regression_sentence(f"{name}: ", test))
            comparison.metrics.append(entry)

        base_rate = self._base_summary.get("pass_rate")
        comparison.baseline_pass_rate = float(base_rate) if isinstance(base_rate, (int, float)) else None
        evaluated = summary.cases - summary.skipped_cases
        comparison.current_pass_rate = summary.pass_rate if evaluated else None
        comparison.pass_rate_delta = _delta(comparison.current_pass_rate, comparison.baseline_pass_rate)
        comparison.pass_rate_test = _pass_rate_test(self._overall, alpha, min_effect, memo)
        if comparison.pass_rate_test is not None and comparison.pass_rate_test.verdict == "regressed":
            comparison.regressions.insert(0, regression_sentence("", comparison.pass_rate_test))
        comparison.verdict = statistics.worst_verdict(
            [
                comparison.pass_rate_test.verdict if comparison.pass_rate_test else None,
                *(m.verdict for m in comparison.metrics),
            ]
        )
        comparison.changes = changes
        comparison.counts = {kind: sum(1 for c in changes if c.kind == kind) for kind in _KIND_ORDER}
        comparison.paired_cases = len(self._seen) - sum(1 for c in self._changes if c.kind == "new")
        if comparison.paired_cases == 0:
            comparison.verdict = "inconclusive"  # no case in both runs: nothing was compared
        comparison.regressed = comparison.verdict == "regressed"
        comparison.new_cases = [c.case_id for c in self._changes if c.kind == "new"]
        comparison.removed_cases = removed
        comparison.flaky_cases = list(self._flaky)
        comparison.newly_failing = self._newly_failing
        comparison.newly_passing = self._newly_passing
        return comparison

    def _removed(self, case_id: str) -> CaseChange:
        """The change of a baseline case absent from this run: its baseline side only."""
        doc = self._base_docs[case_id]
        return CaseChange(
            case_id=case_id,
            kind="removed",
            baseline_status=self._base_status[case_id],
            baseline_score=_lowest(score for score, _ in self._base_cases[case_id].values()),
            input=_cut(doc.get("input")),
            expected_output=_cut(doc.get("expected_output")),
            baseline_output=_cut(doc.get("actual_output")),
            turns=_cut_turns(doc.get("turns")),
            turns_total=len(doc["turns"]) if _cut_turns(doc.get("turns")) else None,
        )


def compare_results(
    baseline: Mapping[str, Any],
    summary: EvaluationSummary,
    cases: Iterable[TestCaseResult],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    label: str = "baseline",
    alpha: float = 0.05,
    min_effect: float = 0.01,
    clusters: Sequence[str | None] | Mapping[str, str | None] | None = None,
    allow_errors: bool = False,
) -> Comparison:
    """Compare the current run (``summary`` and ``cases``, in case order) with ``baseline`` (a parsed
    ``results.json``); ``alpha``, ``min_effect``, ``clusters`` and ``allow_errors`` as
    :class:`ComparisonBuilder`'s.

    Rules in the module docstring. Raises ValueError when ``tolerance`` is negative.
    """
    builder = ComparisonBuilder(
        baseline,
        tolerance=tolerance,
        label=label,
        alpha=alpha,
        min_effect=min_effect,
        clusters=clusters,
        allow_errors=allow_errors,
    )
    builder.add(cases)
    return builder.finish(summary)
