"""The report writer of a run, opened for its plan, and a run held in memory finished through it.

A run's life (the gate, the header, the history) is :mod:`evaltasks.engine.lifecycle`; the engine sits below the
reports, so this module hands it the writer (:class:`~evaltasks.reports.ReportWriter`, a
:class:`~evaltasks.engine.lifecycle.ReportSink`). The flow and the CLI call it at the end of a run
(docs/reports.md#outputs).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evaltasks.engine.lifecycle import RunOutcome, finish_streamed_run
from evaltasks.engine.options import DEFAULT_TOLERANCE
from evaltasks.engine.run import ParsedBaseline, RunPlan, load_parsed_baseline
from evaltasks.reports.stream import ReportWriter
from evaltasks.results import EvaluationResult


def open_report_writer(
    plan: RunPlan,
    output_dir: str | Path,
    baseline: str | Path | None = None,
    regression_tolerance: float = DEFAULT_TOLERANCE,
    baseline_label: str | None = None,
    parsed_baseline: ParsedBaseline | None = None,
    targets: Sequence[str] | None = None,
) -> ReportWriter:
    """A :class:`~evaltasks.reports.ReportWriter` for ``plan``'s run, comparing with ``baseline`` if given
    (``parsed_baseline``: that file already read, :func:`~evaltasks.engine.run.load_parsed_baseline`), and with
    two or more ``targets`` (names in the suite's order; default: the plan's targets) keeping their cases to
    compare them side by side.

    The writer's intervals and comparison use the suite's ``gate.alpha``/``gate.min_effect``/``gate.allow_errors``
    and, with ``dataset.cluster``, the dataset's cluster column (cluster bootstrap).

    Raises:
        InputError: the baseline cannot be read (the CLI checks it before scoring).
        OSError: ``output_dir`` cannot be written.
    """
    gate, column = plan.suite.suite.gate, plan.suite.suite.dataset.cluster
    return ReportWriter(
        Path(output_dir),
        plan.suite.suite.name,
        {m.name: m.threshold for m in plan.suite.metrics},
        baseline=load_parsed_baseline(baseline, parsed_baseline) if baseline is not None else None,
        tolerance=regression_tolerance,
        baseline_label=baseline_label or (str(baseline) if baseline is not None else "baseline"),
        alpha=gate.alpha,
        min_effect=gate.min_effect,
        clusters=plan.dataset.columns.get(column) if column else None,
        cluster_column=column,
        allow_errors=gate.allow_errors,
        targets=_target_names(plan) if targets is None else targets,
    )


def _target_names(plan: RunPlan) -> list[str]:
    """The names of the targets ``plan``'s run generates with, in the suite's order (none without targets or with
    ``--no-target``)."""
    return [str(target.name) for target in plan.targets]


def finish_run(
    plan: RunPlan,
    result: EvaluationResult,
    output_dir: str | Path,
    started: float,
    baseline: str | Path | None = None,
    regression_tolerance: float = DEFAULT_TOLERANCE,
) -> RunOutcome:
    """Apply the gate, compare with ``baseline`` (a results.json) if given, and write the three reports
    (:func:`~evaltasks.engine.lifecycle.finish_streamed_run` for a result held in memory; the outcome keeps
    ``result`` whole).

    With ``dataset.cluster``, the summary's intervals are recomputed by cluster (``result``'s summary, from
    :func:`~evaltasks.engine.evaluate.evaluate`, knows no clusters) and the outcome's ``result`` carries that summary.

    Raises:
        InputError: the baseline cannot be read (the CLI checks it before scoring).
        OSError: the reports cannot be written.
    """
    names = [t.name for t in result.targets]
    with open_report_writer(plan, output_dir, baseline, regression_tolerance, targets=names) as writer:
        writer.add(result.test_results)
        summary = writer.summarize(result.summary.embeddings) if plan.suite.suite.dataset.cluster else result.summary
        outcome = finish_streamed_run(
            plan,
            writer,
            started,
            embedding_models=result.embedding_models,
            reference_sets=result.reference_sets,
            summary=summary,
            targets=result.targets,
        )
    outcome.result = result if summary is result.summary else result.model_copy(update={"summary": summary})
    return outcome


__all__ = ["RunOutcome", "finish_run", "finish_streamed_run", "open_report_writer"]
