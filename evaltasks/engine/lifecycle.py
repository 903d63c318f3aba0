"""A suite run's life in one place: plan → run → gate → reports → history and drift, with typed outcomes.

The steps, in the order a run takes them (the flow, :func:`evaltasks.flows.evaluate_suite.run_suite`, composes
them and adds Prefect's surfaces; ``evaltasks run`` plans first, then hands its plan to the flow):

1. **plan**: :func:`evaltasks.engine.run.plan_run` reads and validates the suite, its dataset and the credentials (nothing scored);
2. **run**: the cases are scored in batches and streamed into a :class:`ReportSink` (the report writer of
   :mod:`evaltasks.reports.stream`, which sits above the engine and is therefore handed in, never imported);
3. **gate**: :meth:`GateVerdict.of` applies the suite's gate (README, "Uncertainty and regressions");
4. **reports**: :func:`finish_streamed_run` builds the :class:`RunHeader` (results.json's top-level keys) and
   has the sink write results.json, junit.xml and summary.md; it returns the :class:`RunOutcome`;
5. **history and drift**: :func:`record_history` appends the run to its history and tests it for drift against
   the previous runs (README, "Run history and drift").

What the surfaces render (summary.md, the terminal, the PR comment, Prefect's artifacts) is a :class:`RunReport`:
results.json without its cases, read back from a results.json or the flow's returned dict with
:meth:`RunReport.model_validate`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, Field

from evaltasks._version import __version__
from evaltasks.engine.compare import Comparison
from evaltasks.engine.history import (
    DriftReport,
    HistoryStore,
    MetricRecord,
    RunRecord,
    ScoreMoments,
    current_commit,
    drift_check,
)
from evaltasks.results import (
    EmbeddingCounts,
    EmbeddingModelInfo,
    EvaluationResult,
    EvaluationSummary,
    ReferenceSetInfo,
    budget_message,
)

if TYPE_CHECKING:  # the plan's step (evaltasks.engine.run, with the suite and metric loaders) stays unimported
    from evaltasks.engine.run import RunPlan  # until a run is planned: reports read with this module are light
    from evaltasks.inputs.suite import Gate

SCHEMA_VERSION = 2
"""The version of results.json a run writes (README, "Outputs"); ``evaltasks.reports.SCHEMA_VERSION``."""

FAIL_ON = ("min_pass_rate", "regression", "either")


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
    """The gate (README, "Uncertainty and regressions"), by the suite's ``gate.fail_on``:

    - ``min_pass_rate`` (the default): :func:`gate_pass_rate` >= ``min_pass_rate``;
    - ``regression``: fails only when ``comparison`` (the comparison with the baseline) has the verdict
      ``regressed``; without a baseline (``comparison`` None) it holds (the run's warnings say so);
    - ``either``: fails on either rule.

    Whatever ``fail_on`` says, a run that evaluated nothing fails (README, "Suite file"): an empty dataset, and a
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
    rate = gate_pass_rate(result, allow_errors)
    holds = rate is None or rate >= min_pass_rate - 1e-12
    return holds and not (fail_on == "either" and regressed)


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
    how = "errored" if s.errored_cases == s.cases else f"errored ({s.errored_cases}) or were skipped ({s.skipped_cases})"
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
    if gate.fail_on != "min_pass_rate" and comparison is not None and comparison.verdict == "regressed":
        # a suite of one metric: its pass-rate sentence repeats the overall one; say it once
        sentences = [r for r in comparison.regressions
                     if r.partition(": ")[2] not in comparison.regressions or not r.partition(": ")[0]]
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
        return cls(min_pass_rate=gate.min_pass_rate, allow_errors=gate.allow_errors,
                   pass_rate=gate_pass_rate(result, gate.allow_errors), fail_on=gate.fail_on, alpha=gate.alpha,
                   min_effect=gate.min_effect, verdict=comparison.verdict if comparison is not None else None,
                   message=gate_message(result, gate, comparison))


class RunHeader(BaseModel):
    """results.json's top-level keys before ``comparison``, ``summary`` and ``cases``, in their order (README,
    "Outputs"): what ran, the gate's verdict, the warnings and the timing. :meth:`model_dump` is the dict the
    report writer writes (every value as results.json has held it since schema version 2).

    Attributes:
        schema_version, evaltasks_version: the format and the writer.
        suite, suite_path, suite_sha256, dataset, dataset_sha256: what ran (sha256 of the files' bytes).
        passed: the gate held; gate: how (:class:`GateVerdict`).
        warnings: the run's warnings (suite, judge prices, index, budget, baseline), shown under the verdict.
        notices: informational lines of the suite (not warnings).
        started_at, finished_at: ISO 8601 UTC to the millisecond; duration_s: seconds between them.
        embedding_models, reference_sets: the providers' models and the reference sets searched.
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
    """

    suite: str = "evaltasks"
    summary: EvaluationSummary
    passed: bool
    gate: GateVerdict = Field(default_factory=GateVerdict)
    comparison: Comparison | None = None
    warnings: list[str] = Field(default_factory=list)
    duration_s: float | None = None

    @classmethod
    def of(
        cls, summary: EvaluationSummary, *, passed: bool, min_pass_rate: float, suite: str = "evaltasks",
        comparison: Comparison | None = None, warnings: Iterable[str] = (), pass_rate: float | None = None,
        fail_on: str | None = None, message: str | None = None,
    ) -> RunReport:
        """A report from its parts (a gate given by its threshold, the rate it compared and its rule): for
        callers that hold no results.json, e.g. a test or ``publish_results``."""
        gate = GateVerdict(min_pass_rate=min_pass_rate, pass_rate=pass_rate, fail_on=fail_on, message=message)
        return cls(suite=suite, summary=summary, passed=passed, gate=gate, comparison=comparison,
                   warnings=list(warnings))

    @classmethod
    def of_results(
        cls, header: Mapping[str, Any], summary: EvaluationSummary, *, passed: bool, min_pass_rate: float,
        comparison: Comparison | None = None,
    ) -> RunReport:
        """A report from a results.json-shaped ``header`` (its ``suite``, default ``evaltasks``, ``warnings`` and
        ``gate``: ``pass_rate``, ``fail_on``, ``message``…, any of them missing), with the gate's verdict and
        threshold as given (they win over the header's): what :func:`evaltasks.reports.write_reports` renders.

        Raises:
            pydantic.ValidationError: a header value of the wrong type.
        """
        return cls.model_validate({
            **header, "suite": str(header.get("suite", "evaltasks")), "summary": summary, "passed": passed,
            "comparison": comparison, "gate": {**(header.get("gate") or {}), "min_pass_rate": min_pass_rate},
        })

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

    def write(self, header: RunHeader, summary: EvaluationSummary,
              comparison: Comparison | None = None) -> dict[str, Path]:
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
    """

    header: RunHeader
    result: EvaluationResult
    paths: dict[str, Path] = field(default_factory=dict)
    comparison: Comparison | None = None
    highlights: Any = None
    drift: DriftReport | None = None

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
        return RunReport(suite=self.header.suite, summary=self.result.summary, passed=self.passed, gate=self.gate,
                         comparison=self.comparison, warnings=self.header.warnings,
                         duration_s=self.header.duration_s)

    def summary_dict(self) -> dict[str, Any]:
        """The flow's returned dict (README, "Prefect"): ``suite``, ``passed``, ``results_path``, ``summary``,
        ``gate``, ``warnings``, ``regressions``, ``comparison`` without its per-case ``changes`` (those are in
        results.json), ``duration_s`` and ``drift`` (the history's drift report, or None). JSON-ready;
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
        }


# -- finishing a run: gate, header, reports ---------------------------------------------------------------------


def iso_utc(timestamp: float) -> str:
    """``timestamp`` (seconds since the epoch) as ISO 8601 in UTC to the millisecond, e.g.
    ``2026-12-01T10:27:13.042Z``."""
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_warnings(plan: RunPlan, summary: EvaluationSummary, comparison: Comparison | None, cases: int) -> list[str]:
    """The run's warnings, in the order results.json lists them: the suite's, unpriced judge models, the
    reference index's (corrupt or rebuilt namespaces), the budget stop, and what the baseline could not say
    (``fail_on`` needing one that was not given, no case in common, a metric in one run only)."""
    from evaltasks.engine.run import judge_price_warnings
    from evaltasks.index import recorded_warnings

    gate = plan.suite.suite.gate
    no_baseline = ([f"gate.fail_on is {gate.fail_on} but no baseline was given: no regression can be detected "
                    "(pass --baseline)"] if gate.fail_on != "min_pass_rate" and comparison is None else [])
    if comparison is not None and comparison.paired_cases == 0 and cases:
        no_baseline.append(f"no case of the run is in the baseline (0 of {cases} ids in common): nothing "
                           "was compared")
    for m in comparison.metrics if comparison is not None else []:
        if m.verdict is None:  # in one run only (compare.MetricComparison): a rename reads as one gone, one new
            where = "the baseline only" if m.name not in summary.metrics else "this run only, not the baseline"
            no_baseline.append(f"metric {m.name} is in {where} (renamed or removed?): it was not compared")
    return [*plan.suite.warnings, *judge_price_warnings(plan), *recorded_warnings(),
            *filter(None, [budget_message(summary)]), *no_baseline]


def finish_streamed_run(
    plan: RunPlan,
    writer: ReportSink,
    started: float,
    *,
    embeddings: EmbeddingCounts | None = None,
    embedding_models: list[EmbeddingModelInfo] | None = None,
    reference_sets: list[ReferenceSetInfo] | None = None,
    summary: EvaluationSummary | None = None,
) -> RunOutcome:
    """Apply the gate to what ``writer`` received, compare with its baseline, and write the three reports.

    The outcome's ``result`` holds the summary, models and reference sets but no case results (they are in
    results.json); ``summary`` overrides the writer's (e.g. a caller's own).

    ``started`` (``time.time()``) is when the run began reading its suite. The header records it as
    ``started_at``, the moment before the reports are written (after the summary, its intervals and the
    comparison with the baseline are computed) as ``finished_at`` (ISO 8601, UTC, to the millisecond), and
    ``duration_s`` = the seconds between the two: the flow run's own work (reading and validating the inputs,
    embedding, scoring, the statistics, the gate), without the process's start-up before the flow
    (imports, Prefect's temporary server) and without writing the reports. junit.xml's ``time`` is the same.

    Raises:
        OSError: the reports cannot be written (the previous ones stay as they were).
    """
    summary = summary or writer.summarize(embeddings)
    result = EvaluationResult(
        test_results=[], summary=summary, embedding_models=embedding_models or [], reference_sets=reference_sets or [],
    )
    comparison = writer.comparison()
    finished = time.time()
    gate = plan.suite.suite.gate
    verdict = GateVerdict.of(result, gate, comparison)
    header = RunHeader(
        suite=plan.suite.suite.name, suite_path=str(plan.suite.path), suite_sha256=plan.suite.sha256,
        dataset=str(plan.dataset.path), dataset_sha256=plan.dataset.sha256,
        passed=gate_passed(result, gate.min_pass_rate, gate.allow_errors, comparison, gate.fail_on), gate=verdict,
        warnings=run_warnings(plan, summary, comparison, writer.cases), notices=list(plan.suite.notices),
        started_at=iso_utc(started), finished_at=iso_utc(finished), duration_s=round(finished - started, 3),
        embedding_models=result.embedding_models, reference_sets=result.reference_sets,
    )
    highlights = writer.highlights
    paths = writer.write(header, summary, comparison)
    return RunOutcome(header=header, result=result, paths=paths, comparison=comparison, highlights=highlights)


def regression_summary(comparison: Comparison, names_shown: int = 3) -> str:
    """The one warning line a run gives for a comparison's regressions (:attr:`Comparison.regressions`, not
    empty): how many, the first ``names_shown`` subjects (``pass rate`` for all cases, else the metric names),
    and where each is described (summary.md, results.json). E.g. ``Regression since the baseline: 3
    regressions (pass rate, LengthCheckMetric, ReferenceMatchMetric); see summary.md``."""
    subjects = ["pass rate"] if comparison.pass_rate_test is not None and \
        comparison.pass_rate_test.verdict == "regressed" else []
    subjects += [m.name for m in comparison.metrics if m.regressed]
    count = len(comparison.regressions)
    shown = ", ".join(subjects[:names_shown]) + (f" and {len(subjects) - names_shown} more"
                                                 if len(subjects) > names_shown else "")
    return (f"Regression since the baseline: {count} regression{'' if count == 1 else 's'}"
            + (f" ({shown})" if shown else "") + "; see summary.md")


# -- history and drift ------------------------------------------------------------------------------------------


def metric_configs(plan: RunPlan) -> dict[str, dict[str, Any]]:
    """Metric name -> its suite entry (``metric``, ``name``, arguments), for the history record (a metric is
    pooled only over previous runs with the same entry)."""
    specs = plan.suite.suite.metrics
    if len(specs) != len(plan.suite.metrics):
        return {metric.name: {"metric": type(metric).__name__} for metric in plan.suite.metrics}
    return {metric.name: spec.model_dump(mode="json", exclude_none=True)
            for metric, spec in zip(plan.suite.metrics, specs, strict=True)}


def history_record(
    outcome: RunOutcome,
    moments: ScoreMoments,
    *,
    metric_configs: Mapping[str, dict[str, Any]] | None = None,
    commit: str | None = None,
    flow_run_id: str | None = None,
    deployment: str | None = None,
) -> RunRecord:
    """The :class:`~evaltasks.engine.history.RunRecord` of a finished run: its summary and header as written to
    results.json, ``moments`` fed with the run's case results, ``metric_configs`` metric name -> its suite
    entry, the commit evaluated and the Prefect flow run and deployment (when there is one)."""
    summary, header = outcome.result.summary, outcome.header
    configs = metric_configs or {}
    metrics = {
        name: MetricRecord(
            config=dict(configs.get(name, {})), threshold=m.threshold, passed=m.passed, failed=m.failed,
            errored=m.errored, skipped=m.skipped, pass_rate=m.pass_rate, pass_rate_interval=m.pass_rate_interval,
            mean_score=m.mean_score, mean_score_interval=m.mean_score_interval, scored=moments.n.get(name, 0),
            score_sd=moments.sd(name),
        )
        for name, m in summary.metrics.items()
    }
    evaluated = summary.cases - summary.skipped_cases
    results = outcome.paths.get("results.json")
    return RunRecord(
        suite=header.suite, suite_sha256=header.suite_sha256, dataset_sha256=header.dataset_sha256, metrics=metrics,
        cases=summary.cases, passed_cases=summary.passed_cases, failed_cases=summary.failed_cases,
        errored_cases=summary.errored_cases, skipped_cases=summary.skipped_cases,
        pass_rate=summary.passed_cases / evaluated if evaluated else None,
        pass_rate_interval=summary.pass_rate_interval, passed=header.passed,
        verdict=outcome.comparison.verdict if outcome.comparison else None, commit=commit,
        started_at=header.started_at, finished_at=header.finished_at, flow_run_id=flow_run_id,
        deployment=deployment, results_path=str(Path(results).resolve()) if results is not None else None,
    )


@dataclass
class HistoryStep:
    """What :func:`record_history` did.

    Attributes:
        record: the run's record as appended; path: the history file it went to.
        previous: the suite's earlier records, oldest first (as many as asked for: the artifact's table).
        drift: the run tested against the last ``history.window`` of them (None without any, or with
            ``history.drift: false``).
    """

    record: RunRecord
    path: Path
    previous: list[RunRecord]
    drift: DriftReport | None


def record_history(
    plan: RunPlan,
    outcome: RunOutcome,
    moments: ScoreMoments,
    directory: Path,
    *,
    shown: int = 0,
    flow_run_id: str | None = None,
    deployment: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> HistoryStep:
    """Append the run to the history in ``directory`` and test it for drift against the previous runs (the
    suite's ``history.window``, with the gate's ``alpha`` and ``min_effect``); the drift report is also set on
    ``outcome.drift``. ``shown``: earlier records to return besides the window (for a table of the history);
    ``warn`` is called with each line of the history that could not be read (skipped), before anything is written.

    Raises:
        OSError: the history cannot be read or written.
        filelock.Timeout: another run held the history's lock too long.
    """
    from evaltasks.inputs.suite import HistorySpec

    suite = plan.suite.suite
    spec = suite.history or HistorySpec()
    store = HistoryStore(directory)
    record = history_record(outcome, moments, metric_configs=metric_configs(plan),
                            commit=current_commit(plan.suite.path.parent), flow_run_id=flow_run_id,
                            deployment=deployment)
    previous = store.read(suite.name, last=max(spec.window, shown))
    if warn is not None:
        for warning in store.warnings:
            warn(warning)
    drift = None
    if spec.drift and previous[-spec.window:]:
        drift = drift_check(record, previous[-spec.window:], alpha=suite.gate.alpha, min_effect=suite.gate.min_effect)
        record.drift = [t.label for t in drift.regressed]
    path = store.append(record)
    outcome.drift = drift
    return HistoryStep(record=record, path=path, previous=previous, drift=drift)


__all__ = [
    "SCHEMA_VERSION", "GateVerdict", "HistoryStep", "ReportSink", "RunHeader", "RunOutcome", "RunReport",
    "finish_streamed_run", "gate_message", "gate_pass_rate", "gate_passed", "history_record", "iso_utc",
    "metric_configs", "nothing_evaluated", "record_history", "regression_summary", "run_warnings",
]
