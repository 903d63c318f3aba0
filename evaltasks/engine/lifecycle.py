"""A suite run's life in one place: plan → run → gate → reports → history and drift, with typed outcomes.

The steps, in the order a run takes them (the flow, :func:`evaltasks.flows.evaluate_suite.run_suite`, composes
them and adds Prefect's surfaces; ``evaltasks run`` plans first, then hands its plan to the flow):

1. **plan**: :func:`plan_run` (defined in :mod:`evaltasks.engine.run`, beside the run's options) reads and
   validates the suite, its dataset and the credentials (nothing scored), with the baseline
   (:func:`read_baseline`);
2. **run**: the cases are scored in batches and streamed into a :class:`ReportSink` (the report writer of
   :mod:`evaltasks.reports.stream`, which sits above the engine and is therefore handed in, never imported);
3. **gate**: :meth:`GateVerdict.of` applies the suite's gate (docs/statistics.md#uncertainty-and-regressions);
4. **reports**: :func:`finish_streamed_run` builds the :class:`RunHeader` (results.json's top-level keys) and
   has the sink write results.json, junit.xml and summary.md; it returns the :class:`RunOutcome`;
5. **history and drift**: :func:`record_history` appends the run to its history and tests it for drift against
   the previous runs (docs/history.md#run-history-and-drift).

What the surfaces render (summary.md, the terminal, the PR comment, Prefect's artifacts) is a :class:`RunReport`:
results.json without its cases, read back from a results.json or the flow's returned dict with
:meth:`RunReport.model_validate`. The models and the gate are defined in :mod:`evaltasks.engine.outcome` (the
renderers read them from there) and re-exported here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

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
from evaltasks.engine.outcome import (
    FAIL_ON,
    SCHEMA_VERSION,
    GateVerdict,
    ReportSink,
    RunHeader,
    RunOutcome,
    RunReport,
    gate_message,
    gate_pass_rate,
    gate_passed,
    nothing_evaluated,
)
from evaltasks.engine.run import (
    ParsedBaseline,
    RunPlan,
    judge_price_warnings,
    load_parsed_baseline,
    plan_run,
    read_baseline,
)
from evaltasks.results import (
    EmbeddingCounts,
    EmbeddingModelInfo,
    EvaluationResult,
    EvaluationSummary,
    ReferenceSetInfo,
    TargetRun,
    budget_message,
)

# -- finishing a run: gate, header, reports ---------------------------------------------------------------------


def iso_utc(timestamp: float) -> str:
    """``timestamp`` (seconds since the epoch) as ISO 8601 in UTC to the millisecond, e.g.
    ``2026-12-01T10:27:13.042Z``."""
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_warnings(plan: RunPlan, summary: EvaluationSummary, comparison: Comparison | None, cases: int) -> list[str]:
    """The run's warnings, in the order results.json lists them: the suite's, unpriced judge models, the
    reference index's (corrupt or rebuilt namespaces), the budget stop, and what the baseline could not say
    (``fail_on`` needing one that was not given, no case in common, a metric in one run only)."""
    from evaltasks.index import recorded_warnings

    gate = plan.suite.suite.gate
    no_baseline = (
        [f"gate.fail_on is {gate.fail_on} but no baseline was given: no regression can be detected (pass --baseline)"]
        if gate.fail_on != "min_pass_rate" and comparison is None
        else []
    )
    if comparison is not None and comparison.paired_cases == 0 and cases:
        no_baseline.append(f"no case of the run is in the baseline (0 of {cases} ids in common): nothing was compared")
    for m in comparison.metrics if comparison is not None else []:
        if m.verdict is None:  # in one run only (compare.MetricComparison): a rename reads as one gone, one new
            where = "the baseline only" if m.name not in summary.metrics else "this run only, not the baseline"
            no_baseline.append(f"metric {m.name} is in {where} (renamed or removed?): it was not compared")
    return [
        *plan.suite.warnings,
        *judge_price_warnings(plan),
        *recorded_warnings(),
        *filter(None, [budget_message(summary)]),
        *no_baseline,
    ]


def finish_streamed_run(
    plan: RunPlan,
    writer: ReportSink,
    started: float,
    *,
    embeddings: EmbeddingCounts | None = None,
    embedding_models: list[EmbeddingModelInfo] | None = None,
    reference_sets: list[ReferenceSetInfo] | None = None,
    summary: EvaluationSummary | None = None,
    targets: list[TargetRun] | None = None,
) -> RunOutcome:
    """Apply the gate to what ``writer`` received, compare with its baseline, and write the three reports.

    The outcome's ``result`` holds the summary, models and reference sets but no case results (they are in
    results.json); ``summary`` overrides the writer's (e.g. a caller's own: the first target's in a run with
    targets); ``targets``: one :class:`~evaltasks.results.TargetRun` per target (results.json ``targets``).

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
        test_results=[],
        summary=summary,
        embedding_models=embedding_models or [],
        reference_sets=reference_sets or [],
        targets=targets or [],
    )
    comparison = writer.comparison()
    finished = time.time()
    gate = plan.suite.suite.gate
    verdict = GateVerdict.of(result, gate, comparison)
    header = RunHeader(
        suite=plan.suite.suite.name,
        suite_path=str(plan.suite.path),
        suite_sha256=plan.suite.sha256,
        dataset=str(plan.dataset.path),
        dataset_sha256=plan.dataset.sha256,
        passed=gate_passed(result, gate.min_pass_rate, gate.allow_errors, comparison, gate.fail_on),
        gate=verdict,
        warnings=run_warnings(plan, summary, comparison, writer.cases),
        notices=[*plan.suite.notices, *plan.dataset.notices],
        started_at=iso_utc(started),
        finished_at=iso_utc(finished),
        duration_s=round(finished - started, 3),
        embedding_models=result.embedding_models,
        reference_sets=result.reference_sets,
        targets=result.targets,
    )
    highlights = writer.highlights
    paths = writer.write(header, summary, comparison)
    return RunOutcome(header=header, result=result, paths=paths, comparison=comparison, highlights=highlights)


def regression_summary(comparison: Comparison, names_shown: int = 3) -> str:
    """The one warning line a run gives for a comparison's regressions (:attr:`Comparison.regressions`, not
    empty): how many, the first ``names_shown`` subjects (``pass rate`` for all cases, else the metric names),
    and where each is described (summary.md, results.json). E.g. ``Regression since the baseline: 3
    regressions (pass rate, LengthCheckMetric, ReferenceMatchMetric); see summary.md``."""
    subjects = (
        ["pass rate"]
        if comparison.pass_rate_test is not None and comparison.pass_rate_test.verdict == "regressed"
        else []
    )
    subjects += [m.name for m in comparison.metrics if m.regressed]
    count = len(comparison.regressions)
    shown = ", ".join(subjects[:names_shown]) + (
        f" and {len(subjects) - names_shown} more" if len(subjects) > names_shown else ""
    )
    return (
        f"Regression since the baseline: {count} regression{'' if count == 1 else 's'}"
        + (f" ({shown})" if shown else "")
        + "; see summary.md"
    )


# -- history and drift ------------------------------------------------------------------------------------------


def metric_configs(plan: RunPlan) -> dict[str, dict[str, Any]]:
    """Metric name -> its suite entry (``metric``, ``name``, arguments), for the history record (a metric is
    pooled only over previous runs with the same entry)."""
    specs = plan.suite.suite.metrics
    if len(specs) != len(plan.suite.metrics):
        return {metric.name: {"metric": type(metric).__name__} for metric in plan.suite.metrics}
    return {
        metric.name: spec.model_dump(mode="json", exclude_none=True)
        for metric, spec in zip(plan.suite.metrics, specs, strict=True)
    }


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
            config=dict(configs.get(name, {})),
            threshold=m.threshold,
            passed=m.passed,
            failed=m.failed,
            errored=m.errored,
            skipped=m.skipped,
            pass_rate=m.pass_rate,
            pass_rate_interval=m.pass_rate_interval,
            mean_score=m.mean_score,
            mean_score_interval=m.mean_score_interval,
            scored=moments.n.get(name, 0),
            score_sd=moments.sd(name),
        )
        for name, m in summary.metrics.items()
    }
    evaluated = summary.cases - summary.skipped_cases
    results = outcome.paths.get("results.json")
    return RunRecord(
        suite=header.suite,
        suite_sha256=header.suite_sha256,
        dataset_sha256=header.dataset_sha256,
        metrics=metrics,
        cases=summary.cases,
        passed_cases=summary.passed_cases,
        failed_cases=summary.failed_cases,
        errored_cases=summary.errored_cases,
        skipped_cases=summary.skipped_cases,
        pass_rate=summary.passed_cases / evaluated if evaluated else None,
        pass_rate_interval=summary.pass_rate_interval,
        passed=header.passed,
        verdict=outcome.comparison.verdict if outcome.comparison else None,
        commit=commit,
        started_at=header.started_at,
        finished_at=header.finished_at,
        flow_run_id=flow_run_id,
        deployment=deployment,
        results_path=str(Path(results).resolve()) if results is not None else None,
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
    record = history_record(
        outcome,
        moments,
        metric_configs=metric_configs(plan),
        commit=current_commit(plan.suite.path.parent),
        flow_run_id=flow_run_id,
        deployment=deployment,
    )
    previous = store.read(suite.name, last=max(spec.window, shown))
    if warn is not None:
        for warning in store.warnings:
            warn(warning)
    drift = None
    if spec.drift and previous[-spec.window :]:
        drift = drift_check(record, previous[-spec.window :], alpha=suite.gate.alpha, min_effect=suite.gate.min_effect)
        record.drift = [t.label for t in drift.regressed]
    path = store.append(record)
    outcome.drift = drift
    return HistoryStep(record=record, path=path, previous=previous, drift=drift)


__all__ = [
    "FAIL_ON",
    "SCHEMA_VERSION",
    "GateVerdict",
    "HistoryStep",
    "ParsedBaseline",
    "ReportSink",
    "RunHeader",
    "RunOutcome",
    "RunPlan",
    "RunReport",
    "finish_streamed_run",
    "gate_message",
    "gate_pass_rate",
    "gate_passed",
    "history_record",
    "iso_utc",
    "load_parsed_baseline",
    "metric_configs",
    "nothing_evaluated",
    "plan_run",
    "read_baseline",
    "record_history",
    "regression_summary",
    "run_warnings",
]
