"""A run's outcome: the gate applied, the comparison with the baseline, and the three reports written
(results.json, junit.xml, summary.md) from what the streaming :class:`~evaltasks.reports.ReportWriter` received.

It composes the engine (the plan, the gate, the comparison) and the writers; the flow and the CLI call it at the
end of a run (docs/reports.md#outputs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaltasks._version import __version__
from evaltasks.engine.compare import DEFAULT_TOLERANCE, Comparison
from evaltasks.engine.run import (
    ParsedBaseline,
    RunPlan,
    gate_message,
    gate_pass_rate,
    gate_passed,
    judge_price_warnings,
    load_parsed_baseline,
)
from evaltasks.reports import SCHEMA_VERSION, ReportWriter
from evaltasks.reports.markdown import Highlights
from evaltasks.results import (
    EmbeddingCounts,
    EmbeddingModelInfo,
    EvaluationResult,
    EvaluationSummary,
    ReferenceSetInfo,
    budget_message,
)


@dataclass
class RunOutcome:
    """What a finished run produced: the result, the gate verdict, the report paths, the baseline comparison."""

    result: EvaluationResult
    passed: bool
    paths: dict[str, Path]
    header: dict[str, Any]
    comparison: Comparison | None = None
    highlights: Highlights | None = None

    def summary_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: gate verdict, report paths, the run summary and, with a baseline, the comparison
        without its per-case ``changes`` (those are in results.json)."""
        return {
            "suite": self.header["suite"],
            "passed": self.passed,
            "results_path": str(self.paths["results.json"]),
            "summary": self.result.summary.model_dump(),
            "gate": dict(self.header.get("gate", {})),
            "warnings": list(self.header.get("warnings", [])),
            "regressions": self.comparison.regressions if self.comparison else [],
            # the tests and verdicts; the per-case changes (as many as the cases) stay in results.json
            "comparison": self.comparison.model_dump(exclude={"changes"}) if self.comparison else None,
            "duration_s": self.header.get("duration_s"),
        }


def open_report_writer(
    plan: RunPlan,
    output_dir: str | Path,
    baseline: str | Path | None = None,
    regression_tolerance: float = DEFAULT_TOLERANCE,
    baseline_label: str | None = None,
    parsed_baseline: ParsedBaseline | None = None,
) -> ReportWriter:
    """A :class:`~evaltasks.reports.ReportWriter` for ``plan``'s run, comparing with ``baseline`` if given
    (``parsed_baseline``: that file already read, :func:`load_parsed_baseline`).

    The writer's intervals and comparison use the suite's ``gate.alpha``/``gate.min_effect``/``gate.allow_errors``
    and, with
    ``dataset.cluster``, the dataset's cluster column (cluster bootstrap).

    Raises InputError when the baseline cannot be read (the CLI checks it before scoring), OSError when
    ``output_dir`` cannot be written.
    """
    gate, column = plan.suite.suite.gate, plan.suite.suite.dataset.cluster
    return ReportWriter(
        Path(output_dir), plan.suite.suite.name, {m.name: m.threshold for m in plan.suite.metrics},
        baseline=load_parsed_baseline(baseline, parsed_baseline) if baseline is not None else None, tolerance=regression_tolerance,
        baseline_label=baseline_label or (str(baseline) if baseline is not None else "baseline"),
        alpha=gate.alpha, min_effect=gate.min_effect,
        clusters=plan.dataset.columns.get(column) if column else None, cluster_column=column,
        allow_errors=gate.allow_errors,
    )


def _iso_utc(timestamp: float) -> str:
    """``timestamp`` (seconds since the epoch) as ISO 8601 in UTC to the millisecond, e.g.
    ``2026-12-01T10:27:13.042Z``."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def finish_streamed_run(
    plan: RunPlan,
    writer: ReportWriter,
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
    """
    summary = summary or writer.summarize(embeddings)
    result = EvaluationResult(
        test_results=[], summary=summary, embedding_models=embedding_models or [], reference_sets=reference_sets or [],
    )
    gate = plan.suite.suite.gate
    comparison = writer.comparison()
    finished = time.time()
    passed = gate_passed(result, gate.min_pass_rate, gate.allow_errors, comparison, gate.fail_on)
    no_baseline = ([f"gate.fail_on is {gate.fail_on} but no baseline was given: no regression can be detected "
                    "(pass --baseline)"] if gate.fail_on != "min_pass_rate" and comparison is None else [])
    if comparison is not None and comparison.paired_cases == 0 and writer.cases:
        no_baseline.append(f"no case of the run is in the baseline (0 of {writer.cases} ids in common): nothing "
                           "was compared")
    for m in comparison.metrics if comparison is not None else []:
        if m.verdict is None:  # in one run only (compare.MetricComparison): a rename reads as one gone, one new
            where = "the baseline only" if m.name not in summary.metrics else "this run only, not the baseline"
            no_baseline.append(f"metric {m.name} is in {where} (renamed or removed?): it was not compared")
    header: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "evaltasks_version": __version__,
        "suite": plan.suite.suite.name,
        "suite_path": str(plan.suite.path),
        "suite_sha256": plan.suite.sha256,
        "dataset": str(plan.dataset.path),
        "dataset_sha256": plan.dataset.sha256,
        "passed": passed,
        "gate": {"min_pass_rate": gate.min_pass_rate, "allow_errors": gate.allow_errors,
                 "pass_rate": gate_pass_rate(result, gate.allow_errors), "fail_on": gate.fail_on,
                 "alpha": gate.alpha, "min_effect": gate.min_effect,
                 "verdict": comparison.verdict if comparison is not None else None,
                 "message": gate_message(result, gate, comparison)},
        "warnings": [*plan.suite.warnings, *judge_price_warnings(plan), *_index_warnings(),
                     *filter(None, [budget_message(summary)]), *no_baseline],
        "notices": list(plan.suite.notices),
        "started_at": _iso_utc(started),
        "finished_at": _iso_utc(finished),
        "duration_s": round(finished - started, 3),
        "embedding_models": [m.model_dump() for m in result.embedding_models],
        "reference_sets": [info.model_dump() for info in result.reference_sets],
    }
    highlights = writer.highlights
    paths = writer.write(
        header, passed=passed, min_pass_rate=gate.min_pass_rate, duration_s=header["duration_s"],
        comparison=comparison, summary=summary,
    )
    return RunOutcome(result=result, passed=passed, paths=paths, header=header, comparison=comparison,
                      highlights=highlights)


def _index_warnings() -> list[str]:
    """What the reference index reported during this run (corrupt or rebuilt namespaces; see
    :func:`evaltasks.index.recording_warnings`)."""
    from evaltasks.index import recorded_warnings

    return recorded_warnings()


def finish_run(
    plan: RunPlan,
    result: EvaluationResult,
    output_dir: str | Path,
    started: float,
    baseline: str | Path | None = None,
    regression_tolerance: float = DEFAULT_TOLERANCE,
) -> RunOutcome:
    """Apply the gate, compare with ``baseline`` (a results.json) if given, and write the three reports
    (:func:`finish_streamed_run` for a result held in memory; the outcome keeps ``result`` whole).

    With ``dataset.cluster``, the summary's intervals are recomputed by cluster (``result``'s summary, from
    :func:`~evaltasks.engine.evaluate.evaluate`, knows no clusters) and the outcome's ``result`` carries that summary.

    Raises InputError when the baseline cannot be read (the CLI checks it before scoring).
    """
    with open_report_writer(plan, output_dir, baseline, regression_tolerance) as writer:
        writer.add(result.test_results)
        summary = writer.summarize(result.summary.embeddings) if plan.suite.suite.dataset.cluster else result.summary
        outcome = finish_streamed_run(
            plan, writer, started, embedding_models=result.embedding_models, reference_sets=result.reference_sets,
            summary=summary,
        )
    outcome.result = result if summary is result.summary else result.model_copy(update={"summary": summary})
    return outcome
