"""Comparison of a run with a baseline run (e.g. the base branch's last ``results.json``).

Cases are matched by id, metrics by name. With tolerance ``t`` (absolute, in score units; pass rates are
fractions, so the same ``t`` applies to them):

- a (case, metric) pair is **worse** when its status went from ``passed`` to ``failed``/``errored``, or its
  score dropped by more than ``t``; **better** when it went from ``failed``/``errored`` to ``passed``, or its
  score rose by more than ``t``; pairs skipped on either side are not compared;
- a case is **new** when only the current run has it, **removed** when only the baseline has it;
- a metric **regressed** when its mean score or its pass rate dropped by more than ``t``; the run regressed
  when any metric did or the overall pass rate dropped by more than ``t``. A regression is reported even when
  the gate holds.

The baseline is read as plain JSON (any ``results.json`` of schema version 1), so a baseline written by an
older evaltasks still compares.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from evaltasks.errors import InputError, Problem
from evaltasks.results import EvaluationSummary, Interval, TestCaseResult

DEFAULT_TOLERANCE = 0.01
ChangeKind = Literal["worse", "better", "new", "removed"]
Verdict = Literal["regressed", "improved", "no significant change", "inconclusive"]


class ChangeTest(BaseModel):
    """A paired test of one statistic between the baseline and the current run, over the cases both have
    (README, "Uncertainty and regressions").

    Attributes:
        statistic: ``pass_rate`` (per case: passed, or not) or ``mean_score``.
        test: ``exact McNemar`` (binomial test of the discordant pairs), ``paired bootstrap`` or ``cluster
            paired bootstrap`` (percentile interval of the mean difference; p-value from the same resamples).
        paired_cases: cases in both runs with a result on both sides (skipped ones left out).
        baseline, current: the statistic on the paired cases in each run; delta: current − baseline.
        interval: interval of ``delta`` at level 1 − alpha: the paired bootstrap of the per-case differences
            (cluster paired with ``dataset.cluster``), for both statistics.
        p_value: two-sided p-value of "no change".
        worse, better: discordant pairs of a pass-rate test (passed → not passed, not passed → passed).
        min_detectable_effect: the smallest change this test could call significant at this many paired cases
            (pass rate: every changed case moving the same way; mean score: the interval's half-width).
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
            change); None when the metric is in one run only.
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
        baseline_status, current_status: statuses on each side.
    """

    case_id: str
    metric: str = ""
    kind: ChangeKind
    baseline_score: float | None = None
    current_score: float | None = None
    delta: float | None = None
    baseline_status: str | None = None
    current_status: str | None = None


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
            improved, else ``inconclusive`` when any is, else ``no significant change``.
        paired_cases: cases in both runs; new_cases, removed_cases: ids only in the current run / only in the
            baseline (left out of the paired tests).
        flaky_cases: cases a judge metric with ``samples: K`` found unstable (samples on both sides of the
            threshold) in either run.
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


def load_baseline(path: str | Path) -> dict[str, Any]:
    """Read a baseline ``results.json``.

    Raises:
        InputError: the file is missing, unreadable, not JSON, or lacks ``summary``/``cases`` (named in the
            message with the file).
    """
    source = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError([Problem(source, "", "", "baseline results file not found")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError([Problem(source, "", "", f"cannot read the baseline: {exc}")]) from None
    except json.JSONDecodeError as exc:
        raise InputError([Problem(source, f"line {exc.lineno}", "", f"baseline is not JSON: {exc.msg}")]) from None
    if not isinstance(data, dict) or not isinstance(data.get("summary"), dict) or not isinstance(data.get("cases"), list):
        raise InputError([Problem(source, "", "", "not an evaltasks results.json (needs 'summary' and 'cases')")])
    return data


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


class ComparisonBuilder:
    """Builds a :class:`Comparison` from cases fed in batches (a streamed run): :meth:`add` each batch of the
    current run's cases, then :meth:`finish` with the run's summary. The baseline's cases are held as
    ``{case id: {metric: (score, status)}}`` (a few dozen bytes per pair); the current run's are not kept.

    Raises ValueError when ``tolerance`` is negative.
    """

    def __init__(self, baseline: Mapping[str, Any], *, tolerance: float = DEFAULT_TOLERANCE,
                 label: str = "baseline") -> None:
        if tolerance < 0:
            raise ValueError(f"tolerance must be >= 0, got {tolerance}")
        self.tolerance, self.label = tolerance, label
        self._base_summary: Mapping[str, Any] = baseline.get("summary") or {}
        self._base_cases = _scores(baseline.get("cases") or [])
        self._seen: set[str] = set()
        self._changes: list[CaseChange] = []

    def add(self, cases: Iterable[TestCaseResult]) -> None:
        """Compare a batch of the current run's cases with the baseline."""
        for case in cases:
            self._seen.add(case.id)
            base_metrics = self._base_cases.get(case.id)
            if base_metrics is None:
                self._changes.append(CaseChange(case_id=case.id, kind="new"))
                continue
            for m in case.metrics:
                base = base_metrics.get(m.name)
                if base is None:
                    continue
                cur = (m.score, m.status)
                kind = _pair_kind(base, cur, self.tolerance)
                if kind is not None:
                    self._changes.append(CaseChange(
                        case_id=case.id, metric=m.name, kind=kind, baseline_score=base[0], current_score=m.score,
                        delta=_delta(m.score, base[0]), baseline_status=base[1], current_status=m.status,
                    ))

    def finish(self, summary: EvaluationSummary) -> Comparison:
        """The comparison, given the current run's ``summary`` (rules in the module docstring)."""
        tolerance = self.tolerance
        changes = self._changes + [
            CaseChange(case_id=case_id, kind="removed") for case_id in self._base_cases if case_id not in self._seen
        ]
        changes.sort(key=lambda c: (_KIND_ORDER[c.kind], c.delta if c.delta is not None and c.kind == "worse" else 0.0))
        base_metrics: Mapping[str, Any] = self._base_summary.get("metrics") or {}
        comparison = Comparison(baseline=self.label, tolerance=tolerance)
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
            if entry.mean_delta is not None and entry.mean_delta < -tolerance:
                entry.regressed = True
                comparison.regressions.append(
                    f"{name}: mean score {entry.baseline_mean:.4f} → {entry.current_mean:.4f} ({entry.mean_delta:+.4f})"
                )
            if entry.pass_rate_delta is not None and entry.pass_rate_delta < -tolerance:
                entry.regressed = True
                comparison.regressions.append(
                    f"{name}: pass rate {entry.baseline_pass_rate:.2%} → {entry.current_pass_rate:.2%} "
                    f"({100 * entry.pass_rate_delta:+.2f} points)"
                )
            comparison.metrics.append(entry)

        base_rate = self._base_summary.get("pass_rate")
        comparison.baseline_pass_rate = float(base_rate) if isinstance(base_rate, (int, float)) else None
        evaluated = summary.cases - summary.skipped_cases
        comparison.current_pass_rate = summary.pass_rate if evaluated else None
        comparison.pass_rate_delta = _delta(comparison.current_pass_rate, comparison.baseline_pass_rate)
        if comparison.pass_rate_delta is not None and comparison.pass_rate_delta < -tolerance:
            comparison.regressions.insert(0, (
                f"pass rate {comparison.baseline_pass_rate:.2%} → {comparison.current_pass_rate:.2%} "
                f"({100 * comparison.pass_rate_delta:+.2f} points)"
            ))
        comparison.changes = changes
        comparison.counts = {kind: sum(1 for c in changes if c.kind == kind) for kind in _KIND_ORDER}
        comparison.regressed = bool(comparison.regressions)
        return comparison


def compare_results(
    baseline: Mapping[str, Any],
    summary: EvaluationSummary,
    cases: Iterable[TestCaseResult],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    label: str = "baseline",
) -> Comparison:
    """Compare the current run (``summary`` and ``cases``) with ``baseline`` (a parsed ``results.json``).

    Rules in the module docstring. Raises ValueError when ``tolerance`` is negative.
    """
    builder = ComparisonBuilder(baseline, tolerance=tolerance, label=label)
    builder.add(cases)
    return builder.finish(summary)
