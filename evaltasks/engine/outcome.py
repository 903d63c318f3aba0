"""A run's outcome as typed models, and the gate that decides it (docs/statistics.md#uncertainty-and-regressions).

:class:`GateVerdict` (results.json ``gate``), :class:`RunHeader` (results.json's header), :class:`RunReport` (what
every surface renders: results.json without its cases) and :class:`RunOutcome` (what a finished run produced),
with :class:`ReportSink`, the protocol of the report writer a run writes through. The steps of a run's life that
produce them are :mod:`evaltasks.engine.lifecycle`, which re-exports all of this; the models live apart so that
the renderers (:mod:`evaltasks.reports`) read them without importing the run's steps (and, through them, the
evaluation that prints with the renderers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, Field

from evaltasks._version import __version__
from evaltasks.engine.compare import Comparison
from evaltasks.engine.side_by_side import SideBySide
from evaltasks.results import (
    EmbeddingCounts,
    EmbeddingModelInfo,
    EvaluationResult,
    EvaluationSummary,
    ReferenceSetInfo,
    TargetRun,
    budget_message,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from evaltasks.engine.history import DriftReport
    from evaltasks.inputs.suite import Gate

SCHEMA_VERSION = 4
"""The version of results.json a run writes (docs/reports.md#outputs); ``evaltasks.reports.SCHEMA_VERSION``. Version 3
added each case's ``generation`` and the top-level ``targets`` (runs with targets, docs/targets.md#the-generate-stage);
version 4 each case's ``turns`` and ``chatbot_role`` (conversations, docs/conversations.md#reports)."""

FAIL_ON = ("min_pass_rate", "regression", "either")
SIDE_BY_SIDE_CASES: dict[str, Any] = {"splits": True, "targets": {"__all__": {"comparison": {"changes"}}}}
"""What the flow's returned dict leaves out of ``side_by_side``: its per-case parts (results.json has them)."""


# -- the gate ---------------------------------------------------------------------------------------------------


def gate_pass_rate(result: EvaluationResult, allow_errors: bool = False) -> float | None:
    """The pass rate the gate compares: passed / evaluated cases, skipped cases left out, and errored cases
    left out too when ``allow_errors``; None when no case is left."""
    s = result.summary
    counted = s.cases - s.skipped_cases - (s.errored_cases if allow_errors else 0)
    return s.passed_cases / counted if counted else None


def gate_passed(
    result: EvaluationResult,
    min_pass_rate: float,
    allow_errors: bool = False,
    comparison: Comparison | None = None,
    fail_on: str = "min_pass_rate",
) -> bool:
    """The gate (docs/statistics.md#uncertainty-and-regressions), by the suite's ``gate.fail_on``:

    - ``min_pass_rate`` (the default): :func:`gate_pass_rate` >= ``min_pass_rate``;
    - ``regression``: fails only when ``comparison`` (the comparison with the baseline) has the verdict
      ``regressed``; without a baseline (``comparison`` None) it holds (the run's warnings say so);
    - ``either``: fails on either rule.

    With ``min_pass_rate`` or ``either``, a run-level metric (CalibrationMetric) whose result failed its threshold
    also fails the gate (:func:`failed_run_metrics`; docs/metrics/reliability.md#calibrationmetric).

    Whatever ``fail_on`` says, a run that evaluated nothing fails (docs/suite.md#suite-file): an empty dataset, and a
    run in which no case was scored, every case skipped (e.g. all metrics need credentials a fork's pull request
    does not get) or errored (``allow_errors`` allows errors beside scored cases, not in place of them: a metric
    that raises on every case must not pass). So does a run cut short by its ``--max-cost`` budget (a judge result
    skipped because the budget ran out, :func:`~evaltasks.results.is_budget_skip`): a verdict on the cases judged
    before the money ran out says nothing about the rest.

    Raises:
        ValueError: ``fail_on`` is none of ``min_pass_rate``, ``regression``, ``either``.
    """
    summary = result.summary
    if nothing_evaluated(result) or summary.cases == 0 or summary.budget_skipped:
        return False
    if fail_on not in FAIL_ON:
        raise ValueError(f"fail_on must be min_pass_rate, regression or either, got {fail_on!r}")
    regressed = comparison is not None and comparison.verdict == "regressed"
    if fail_on == "regression":
        return not regressed
    if failed_run_metrics(summary):  # a run-level metric (CalibrationMetric) below its threshold
        return False
    rate = gate_pass_rate(result, allow_errors)
    holds = rate is None or rate >= min_pass_rate - 1e-12
    return holds and not (fail_on == "either" and regressed)


def failed_run_metrics(summary: EvaluationSummary) -> list[str]:
    """Why each run-level metric of ``summary`` failed (``run-level CalibrationMetric scored -0.250, below its
    threshold 0``): with ``fail_on`` ``min_pass_rate`` or ``either`` such a failure fails the gate. An errored one
    (too few cases, every case right) is reported, not gated (docs/metrics/reliability.md#calibrationmetric)."""
    return [
        f"run-level {r.name} scored {r.score:.3f}, below its threshold {r.threshold:g}"
        for r in summary.run_metrics.values()
        if r.status == "failed" and r.score is not None
    ]


def nothing_evaluated(result: EvaluationResult) -> str | None:
    """Why no case of ``result`` was evaluated when no case was scored (each one skipped or errored), naming the
    skipped and errored metrics, e.g. ``nothing was evaluated: all 6 cases were skipped (metrics skipped: judged;
    the warnings say why)`` or ``nothing was evaluated: all 2 cases errored (metrics errored: M; the reasons say
    why)``; None when some case was scored (passed or failed) or the run has no case."""
    s = result.summary
    if s.cases == 0 or s.passed_cases + s.failed_cases > 0:
        return None
    if s.skipped_cases == s.cases:
        names = [name for name, metric in s.metrics.items() if metric.skipped]
        which = f"metrics skipped: {', '.join(names)}; " if names else ""
        return f"nothing was evaluated: all {s.cases} cases were skipped ({which}the warnings say why)"
    names = [name for name, metric in s.metrics.items() if metric.errored]
    which = f"metrics errored: {', '.join(names)}; " if names else ""
    failed = [f"{t.name} on {t.errored} case{'' if t.errored == 1 else 's'}" for t in result.targets or [] if t.errored]
    if failed:  # the metrics errored because there was no output to score: the targets are to blame
        which = f"generation failed: target {', '.join(failed)}; "
    how = (
        "errored" if s.errored_cases == s.cases else f"errored ({s.errored_cases}) or were skipped ({s.skipped_cases})"
    )
    return f"nothing was evaluated: all {s.cases} cases {how} ({which}the reasons say why)"


def gate_message(result: EvaluationResult, gate: Gate, comparison: Comparison | None) -> str | None:
    """Why the gate failed, naming the verdict (e.g. ``gate failed: pass rate 50.00% below 90.00%`` or ``gate
    failed: regressed since the baseline: pass rate 81.00% → 74.00% (-7.00 points, p = 0.0003)``), for the
    flow run's Failed state; None when :func:`gate_passed` holds. ``gate`` is the suite's
    :class:`~evaltasks.inputs.suite.Gate`."""
    if gate_passed(result, gate.min_pass_rate, gate.allow_errors, comparison, gate.fail_on):
        return None
    reasons = []
    skipped = nothing_evaluated(result)
    if result.summary.cases == 0:
        reasons.append("no test cases were evaluated")
    elif skipped:
        reasons.append(skipped)
    budget = budget_message(result.summary)
    if budget:
        reasons.append(budget)
    rate = gate_pass_rate(result, gate.allow_errors)
    if gate.fail_on != "regression" and rate is not None and rate < gate.min_pass_rate - 1e-12:
        reasons.append(f"pass rate {rate:.2%} below {gate.min_pass_rate:.2%}")
    if gate.fail_on != "regression":
        reasons += failed_run_metrics(result.summary)
    if gate.fail_on != "min_pass_rate" and comparison is not None and comparison.verdict == "regressed":
        # a suite of one metric: its pass-rate sentence repeats the overall one; say it once
        sentences = [
            r
            for r in comparison.regressions
            if r.partition(": ")[2] not in comparison.regressions or not r.partition(": ")[0]
        ]
        reasons.append("regressed since the baseline: " + "; ".join(sentences))
    return "gate failed: " + ("; ".join(reasons) or "see results.json")


# -- the outcome models -----------------------------------------------------------------------------------------


class GateVerdict(BaseModel):
    """The gate as applied to a run: results.json's ``gate`` object, field for field and in its order.

    Attributes:
        min_pass_rate: the gate's threshold (a fraction of the evaluated cases).
        allow_errors: errored cases left out of the pass rate it compares.
        pass_rate: the pass rate it compared (:func:`gate_pass_rate`); None when no case was counted.
        fail_on: ``min_pass_rate``, ``regression`` or ``either`` (None in a header that does not say: read as
            ``min_pass_rate``).
        alpha, min_effect: the comparison's significance level and smallest change that counts.
        verdict: the comparison's verdict with a baseline (``regressed``, ``improved``, ``inconclusive``, ``no
            significant change``), else None.
        message: why the gate failed (:func:`gate_message`), None when it held.
    """

    min_pass_rate: float = 1.0
    allow_errors: bool = False
    pass_rate: float | None = None
    fail_on: str | None = None
    alpha: float = 0.05
    min_effect: float = 0.01
    verdict: str | None = None
    message: str | None = None

    @classmethod
    def of(cls, result: EvaluationResult, gate: Gate, comparison: Comparison | None) -> GateVerdict:
        """The suite's ``gate`` applied to ``result`` (its summary) and the ``comparison`` with the baseline."""
        return cls(
            min_pass_rate=gate.min_pass_rate,
            allow_errors=gate.allow_errors,
            pass_rate=gate_pass_rate(result, gate.allow_errors),
            fail_on=gate.fail_on,
            alpha=gate.alpha,
            min_effect=gate.min_effect,
            verdict=comparison.verdict if comparison is not None else None,
            message=gate_message(result, gate, comparison),
        )


class RunHeader(BaseModel):
    """results.json's top-level keys before ``comparison``, ``summary`` and ``cases``, in their order
    (docs/reports.md#outputs): what ran, the gate's verdict, the warnings and the timing. :meth:`model_dump` is the dict the
    report writer writes (every value as results.json has held it since schema version 2).

    Attributes:
        schema_version, evaltasks_version: the format and the writer.
        suite, suite_path, suite_sha256, dataset, dataset_sha256: what ran (sha256 of the files' bytes).
        passed: the gate held; gate: how (:class:`GateVerdict`).
        warnings: the run's warnings (suite, judge prices, index, budget, baseline), shown under the verdict.
        notices: informational lines of the suite (not warnings).
        started_at, finished_at: ISO 8601 UTC to the millisecond; duration_s: seconds between them.
        embedding_models, reference_sets: the providers' models and the reference sets searched.
        targets: with targets, one :class:`~evaltasks.results.TargetRun` per target (empty without).
    """

    schema_version: int = SCHEMA_VERSION
    evaltasks_version: str = __version__
    suite: str
    suite_path: str
    suite_sha256: str
    dataset: str
    dataset_sha256: str
    passed: bool
    gate: GateVerdict
    warnings: list[str] = Field(default_factory=list)
    notices: list[str] = Field(default_factory=list)
    started_at: str
    finished_at: str
    duration_s: float
    embedding_models: list[EmbeddingModelInfo] = Field(default_factory=list)
    reference_sets: list[ReferenceSetInfo] = Field(default_factory=list)
    targets: list[TargetRun] = Field(default_factory=list)


class RunReport(BaseModel):
    """What every surface renders (summary.md, the terminal, the PR comment, Prefect's artifacts and state): a
    run's results.json without its cases. ``RunReport.model_validate`` reads one from a parsed results.json or
    from the flow's returned dict (:meth:`RunOutcome.summary_dict`); other keys are ignored.

    Attributes:
        suite: the suite's name; summary: the run's summary.
        passed: the gate held; gate: how (:class:`GateVerdict`).
        comparison: the comparison with the baseline (None without one).
        warnings: shown under the verdict.
        duration_s: the flow run's own seconds (None when not known).
        targets: with targets, one :class:`~evaltasks.results.TargetRun` per target (empty without).
        side_by_side: a run with several targets, each compared with the first (results.json's
            ``side_by_side``; None otherwise).
    """

    suite: str = "evaltasks"
    summary: EvaluationSummary
    passed: bool
    gate: GateVerdict = Field(default_factory=GateVerdict)
    comparison: Comparison | None = None
    warnings: list[str] = Field(default_factory=list)
    duration_s: float | None = None
    targets: list[TargetRun] = Field(default_factory=list)
    side_by_side: SideBySide | None = None

    @classmethod
    def of(
        cls,
        summary: EvaluationSummary,
        *,
        passed: bool,
        min_pass_rate: float,
        suite: str = "evaltasks",
        comparison: Comparison | None = None,
        warnings: Iterable[str] = (),
        pass_rate: float | None = None,
        fail_on: str | None = None,
        message: str | None = None,
        side_by_side: SideBySide | None = None,
    ) -> RunReport:
        """A report from its parts (a gate given by its threshold, the rate it compared and its rule): for
        callers that hold no results.json, e.g. a test or ``publish_results``."""
        gate = GateVerdict(min_pass_rate=min_pass_rate, pass_rate=pass_rate, fail_on=fail_on, message=message)
        return cls(
            suite=suite,
            summary=summary,
            passed=passed,
            gate=gate,
            comparison=comparison,
            warnings=list(warnings),
            side_by_side=side_by_side,
        )

    @classmethod
    def of_results(
        cls,
        header: Mapping[str, Any],
        summary: EvaluationSummary,
        *,
        passed: bool,
        min_pass_rate: float,
        comparison: Comparison | None = None,
    ) -> RunReport:
        """A report from a results.json-shaped ``header`` (its ``suite``, default ``evaltasks``, ``warnings`` and
        ``gate``: ``pass_rate``, ``fail_on``, ``message``…, any of them missing), with the gate's verdict and
        threshold as given (they win over the header's): what :func:`evaltasks.reports.write_reports` renders.

        Raises:
            pydantic.ValidationError: a header value of the wrong type.
        """
        return cls.model_validate(
            {
                **header,
                "suite": str(header.get("suite", "evaltasks")),
                "summary": summary,
                "passed": passed,
                "comparison": comparison,
                "gate": {**(header.get("gate") or {}), "min_pass_rate": min_pass_rate},
            }
        )

    @property
    def rate(self) -> float:
        """The pass rate the gate compared (``gate.pass_rate``), else the summary's."""
        return self.summary.pass_rate if self.gate.pass_rate is None else self.gate.pass_rate


class ReportSink(Protocol):
    """Where a run's case results stream and its reports are written: the report writer
    (:class:`evaltasks.reports.ReportWriter`, opened by :func:`evaltasks.reports.outcome.open_report_writer`).
    The engine sits below the reports, so the writer is handed in."""

    cases: int

    @property
    def highlights(self) -> Any:
        """Worst cases and score histograms (what summary.md shows of a streamed run's cases)."""

    def summarize(self, embeddings: EmbeddingCounts | None = None) -> EvaluationSummary:
        """The run's summary (after the last batch)."""

    def comparison(self) -> Comparison | None:
        """The comparison with the baseline (None without one)."""

    def side_by_side(self, targets: Sequence[TargetRun]) -> SideBySide | None:
        """The run's ``targets`` side by side (None with fewer than 2); call after the last batch."""

    def write(
        self,
        header: RunHeader,
        summary: EvaluationSummary,
        comparison: Comparison | None = None,
        side_by_side: SideBySide | None = None,
    ) -> dict[str, Path]:
        """Write results.json, junit.xml and summary.md as one set; their paths by file name."""


@dataclass
class RunOutcome:
    """What a finished run produced.

    Attributes:
        header: results.json's header (:class:`RunHeader`: the gate's verdict, warnings, timing).
        result: the summary, models and reference sets (its ``test_results`` empty for a streamed run: the cases
            are in results.json).
        paths: the reports' paths by file name (``results.json``, ``junit.xml``, ``summary.md``).
        comparison: the comparison with the baseline (None without one).
        highlights: the worst cases and histograms the report writer kept (None when not streamed).
        drift: the run tested against its history (:func:`record_history`; None without history or previous runs).
        side_by_side: the targets side by side, each compared with the first (None without several targets).
    """

    header: RunHeader
    result: EvaluationResult
    paths: dict[str, Path] = field(default_factory=dict)
    comparison: Comparison | None = None
    highlights: Any = None
    drift: DriftReport | None = None
    side_by_side: SideBySide | None = None

    @property
    def passed(self) -> bool:
        """Whether the gate held."""
        return self.header.passed

    @property
    def gate(self) -> GateVerdict:
        """The gate's verdict (results.json ``gate``)."""
        return self.header.gate

    @property
    def report(self) -> RunReport:
        """What the surfaces render (:class:`RunReport`)."""
        return RunReport(
            suite=self.header.suite,
            summary=self.result.summary,
            passed=self.passed,
            gate=self.gate,
            comparison=self.comparison,
            warnings=self.header.warnings,
            duration_s=self.header.duration_s,
            targets=self.header.targets,
            side_by_side=self.side_by_side,
        )

    def summary_dict(self) -> dict[str, Any]:
        """The flow's returned dict (docs/prefect.md#prefect): ``suite``, ``passed``, ``results_path``, ``summary``,
        ``gate``, ``warnings``, ``regressions``, ``comparison`` without its per-case ``changes`` (those are in
        results.json), ``duration_s``, ``drift`` (the history's drift report, or None) and ``side_by_side``
        (with several targets, else None; without its per-case changes and split cases). JSON-ready;
        :meth:`RunReport.model_validate` reads it back."""
        return {
            "suite": self.header.suite,
            "passed": self.passed,
            "results_path": str(self.paths["results.json"]),
            "summary": self.result.summary.model_dump(),
            "gate": self.gate.model_dump(),
            "warnings": list(self.header.warnings),
            "regressions": self.comparison.regressions if self.comparison else [],
            "comparison": self.comparison.model_dump(exclude={"changes"}) if self.comparison else None,
            "duration_s": self.header.duration_s,
            "drift": self.drift.model_dump() if self.drift is not None else None,
            "targets": [t.model_dump() for t in self.header.targets],
            "side_by_side": (
                self.side_by_side.model_dump(exclude=SIDE_BY_SIDE_CASES) if self.side_by_side is not None else None
            ),
        }


__all__ = [
    "FAIL_ON",
    "SCHEMA_VERSION",
    "GateVerdict",
    "ReportSink",
    "RunHeader",
    "RunOutcome",
    "RunReport",
    "gate_message",
    "gate_pass_rate",
    "gate_passed",
    "nothing_evaluated",
]
