"""The Python API: :func:`evaluate` and :func:`evaluate_sync`, the evaluation pipeline run in this process.

The stages (validate → generate → embed → search → score → summarise; generate only with a ``target=``) are :mod:`evaltasks.engine.pipeline`'s, run by its
:class:`~evaltasks.engine.pipeline.InProcessExecutor`; the ``evaluate-suite`` flow runs the same stages through
Prefect. This module also re-exports the stages' building blocks from their modules
(:mod:`~evaltasks.engine.validation`, :mod:`~evaltasks.engine.embedding`, :mod:`~evaltasks.engine.scoring`) and
the judge wiring (:mod:`evaltasks.judges.binding`) under their former import path.

Which entry point to use:

- ``await evaluate(cases, metrics)`` inside async code (it runs the work in a worker thread, so the event
  loop stays responsive); ``asyncio.run(evaluate(...))`` from plain scripts (eval-ai-library's documented usage);
- ``evaluate_sync(cases, metrics)`` from synchronous code, including code that already runs an event loop
  (e.g. a Jupyter cell or a sync Prefect task), where ``asyncio.run`` is not allowed.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaltasks.engine.embedding import (
    collect_embedding_needs,
    embed_outputs,
    embed_references,
    embed_texts,
    model_infos,
    prepare_reference_searches,
)
from evaltasks.engine.generation import filled_fields
from evaltasks.engine.pipeline import (
    InProcessExecutor,
    JudgeWiring,
    generate,
    run,
    validate,
)
from evaltasks.engine.run_metrics import RunMetricTally, run_metric_problems, split_run_level
from evaltasks.engine.scoring import metric_failure, score_metric_batch
from evaltasks.engine.validation import MAX_FAULTS_SHOWN, validate_cases, validate_metrics
from evaltasks.index import ReferenceIndex
from evaltasks.judges.binding import (
    JUDGEMENTS_DIR,
    as_judge,
    as_reused,
    bind_judges,
    estimate_judge_cost,
    judge_budget,
    unpriced_judge_models,
)
from evaltasks.metrics.base import BaseMetric
from evaltasks.results import EvaluationResult
from evaltasks.test_case import ConversationalEvalTestCase, EvalTestCase, assign_ids

if TYPE_CHECKING:
    from evaltasks.metrics.reliability import PerturbationSpec
    from evaltasks.targets.base import Target

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "JUDGEMENTS_DIR",
    "MAX_FAULTS_SHOWN",
    "ProgressCallback",
    "as_judge",
    "as_reused",
    "bind_judges",
    "collect_embedding_needs",
    "embed_outputs",
    "embed_references",
    "embed_texts",
    "estimate_judge_cost",
    "evaluate",
    "evaluate_conversations",
    "evaluate_conversations_sync",
    "evaluate_sync",
    "judge_budget",
    "metric_failure",
    "model_infos",
    "prepare_reference_searches",
    "score_metric_batch",
    "unpriced_judge_models",
    "validate_cases",
    "validate_metrics",
]

DEFAULT_BATCH_SIZE = 1024

ProgressCallback = Callable[[int], None]


def evaluate_sync(
    test_cases: Sequence[EvalTestCase],
    metrics: Sequence[BaseMetric],
    *,
    index_dir: str | Path | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    verbose: bool = False,
    ids: Sequence[str] | None = None,
    progress: ProgressCallback | None = None,
    judge: Any = None,
    target: Target | Sequence[Target] | None = None,
    refresh: bool = False,
    perturbations: PerturbationSpec | None = None,
) -> EvaluationResult:
    """Evaluate ``test_cases`` with ``metrics``; the synchronous twin of :func:`evaluate`.

    Args:
        test_cases: the cases (each an :class:`EvalTestCase`).
        metrics: metric instances with distinct names.
        index_dir: an index directory (the CLI's default is ``.evaltasks/index``) that keeps the embeddings of
            references and outputs across calls and processes, content-addressed: a later call over the same
            texts embeds nothing (no provider request; a local model is not even loaded). None (the default)
            embeds every text directly and writes nothing to disk.
        batch_size: cases scored per metric call.
        verbose: print a summary table when done.
        ids: case ids (default: :func:`~evaltasks.test_case.assign_ids`).
        progress: called with the number of case × metric results just completed.
        judge: your own judge for every judge metric: a function from chat messages (a list of
            ``{"role", "content"}`` dicts) to the answer's text, or a :class:`~evaltasks.judges.Judge`; None: each
            metric's configured client. Its answers are stored under ``index_dir`` like any judge's.
        target: the system under test (a :class:`~evaltasks.targets.Target`, e.g. ``PythonTarget``), or several
            side by side (the first the reference): each is run on every case to produce its outputs (the cases'
            ``actual_output`` is then not needed, and ignored), stored under ``index_dir`` (``outputs/``) so a
            later call with an unchanged target makes no call (docs/targets.md#the-generate-stage). Every metric
            runs on every target's outputs.
        refresh: with ``target``, generate every output again (stored outputs are not read; new ones are stored),
            and send every judge request again.
        perturbations: with ``target``, perturbed variants of each input also run through it, for
            PromptRobustnessMetric (a :class:`~evaltasks.reliability_metrics.PerturbationSpec`, as a suite's
            ``perturbations:``; docs/metrics/reliability.md#perturbations).

    Returns:
        An :class:`EvaluationResult`: one result per case in input order, and the summary. With ``target``: each
        target's cases, target after target (``repeat: K`` samples of a case in a row, ids ``<id>~2``…), the
        first target's summary, and one :class:`~evaltasks.results.TargetRun` per target in ``targets``.

    Raises:
        ValueError (:class:`~evaltasks.errors.InputError`): invalid metrics or cases, all reported at once,
            before any scoring.
        CredentialsError: a provider's or a target's credentials are missing or rejected.
    """
    cases = list(test_cases)
    targets = _as_targets(target)
    validate(
        cases, metrics, generated=bool(targets), fields=filled_fields(targets, perturbations)
    )  # load is the caller's: the stages from here are the pipeline's
    metrics, run_metrics = split_run_level(metrics)  # scored from the run's results, never per case
    if run_metrics:
        _check_run_metrics(run_metrics, metrics)
    ids = list(ids) if ids is not None else assign_ids(cases)
    executor = InProcessExecutor(progress)
    generated = None
    if targets:  # the generate stage: the targets' outputs replace the cases' (failed ones errored)
        generated = generate(
            targets, cases, ids, metrics, executor, index_dir=index_dir, refresh=refresh, perturbations=perturbations
        )
        cases, ids = generated.cases, generated.ids
    # a metric searching a reference set settles its search's query options for this call (measured on its
    # outputs): that is done on this call's own copy, so calls running at once with one metric object keep their
    # own. Other metrics are used as given (a caller may count or inspect what its own metric object did).
    metrics = [
        copy.copy(metric) if getattr(metric, "reference_set", None) is not None else metric for metric in metrics
    ]
    wiring = JudgeWiring(index_dir=index_dir, refresh=refresh, judge=as_judge(judge))  # an unusable hook fails early
    needs = collect_embedding_needs(cases, metrics)
    index = ReferenceIndex(index_dir) if index_dir is not None else None
    result = run(
        cases,
        ids,
        metrics,
        needs=needs,
        index=index,
        executor=executor,
        batch_size=batch_size,
        wiring=wiring,
        generated=generated,
    )
    if run_metrics:
        result = _with_run_metrics(result, run_metrics, cases, generated)
    if verbose:
        from evaltasks.reports.console import print_summary

        print_summary(result.summary)
    return result


async def evaluate(
    test_cases: Sequence[EvalTestCase],
    metrics: Sequence[BaseMetric],
    *,
    index_dir: str | Path | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    verbose: bool = False,
    judge: Any = None,
    target: Target | Sequence[Target] | None = None,
    refresh: bool = False,
    perturbations: PerturbationSpec | None = None,
) -> EvaluationResult:
    """Evaluate ``test_cases`` with ``metrics`` (as eval-ai-library's: ``asyncio.run(evaluate(cases, metrics))``).

    Runs :func:`evaluate_sync` in a worker thread. Arguments, result and errors as :func:`evaluate_sync`.
    """
    return await asyncio.to_thread(
        evaluate_sync,
        test_cases,
        metrics,
        index_dir=index_dir,
        batch_size=batch_size,
        verbose=verbose,
        judge=judge,
        target=target,
        refresh=refresh,
    )


def _check_run_metrics(run_metrics: Sequence[BaseMetric], metrics: Sequence[BaseMetric]) -> None:
    """Raise InputError when a run-level metric cannot work with the run's other ``metrics``."""
    from evaltasks.errors import InputError, Problem

    problems = [
        Problem("<python>", f"metric {run_metrics[i].name}", "outcome_metric", message)
        for i, message in run_metric_problems(run_metrics, metrics)
    ]
    if problems:
        raise InputError(problems, title="invalid metrics")


def _with_run_metrics(
    result: EvaluationResult, run_metrics: Sequence[BaseMetric], cases: Sequence[EvalTestCase], generated: Any
) -> EvaluationResult:
    """``result`` with the run-level metrics' results in its summary and each target's
    (:class:`~evaltasks.engine.run_metrics.RunMetricTally`)."""
    tally = RunMetricTally(run_metrics, cases, generated.bounds() if generated is not None else None)
    tally.add(range(len(result.test_results)), result.test_results)
    targets = [t.model_copy(update={"summary": tally.attach(t.summary, i)}) for i, t in enumerate(result.targets)]
    summary = targets[0].summary if targets else tally.attach(result.summary)
    return result.model_copy(update={"summary": summary, "targets": targets})


def evaluate_conversations_sync(
    conversations: Sequence[ConversationalEvalTestCase],
    metrics: Sequence[BaseMetric],
    *,
    index_dir: str | Path | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    verbose: bool = False,
    ids: Sequence[str] | None = None,
    progress: ProgressCallback | None = None,
    judge: Any = None,
    refresh: bool = False,
) -> EvaluationResult:
    """Evaluate ``conversations`` with ``metrics``; the synchronous twin of :func:`evaluate_conversations`
    (docs/conversations.md#python-api).

    Each conversation is one case of :func:`evaluate_sync`'s pipeline (same batching, caching, statistics and
    result): its id is its ``name``, else a hash of every turn (:func:`~evaltasks.test_case.assign_ids`), and its
    :class:`~evaltasks.results.TestCaseResult` carries ``turns`` and ``chatbot_role``. Arguments as
    :func:`evaluate_sync`'s; there is no ``target`` (a target answers one input: a conversation's turns are
    recorded, not generated).

    Raises:
        ValueError (:class:`~evaltasks.errors.InputError`): an item that is not a
            :class:`~evaltasks.test_case.ConversationalEvalTestCase`, a metric that does not score conversations
            (``case_kind`` ``"single"``), or what :func:`evaluate_sync` raises for invalid metrics or cases.
        CredentialsError: a provider's credentials are missing or rejected.
    """
    from evaltasks.errors import InputError, Problem

    cases = list(conversations)
    problems = [
        Problem("<python>", f"item {i}", "", f"is not a ConversationalEvalTestCase: {type(case).__name__}")
        for i, case in enumerate(cases)
        if not isinstance(case, ConversationalEvalTestCase)
    ]
    if problems:
        raise InputError(problems, title="invalid conversations")
    return evaluate_sync(
        cases,
        metrics,
        index_dir=index_dir,
        batch_size=batch_size,
        verbose=verbose,
        ids=ids,
        progress=progress,
        judge=judge,
        refresh=refresh,
    )


async def evaluate_conversations(
    conversations: Sequence[ConversationalEvalTestCase],
    metrics: Sequence[BaseMetric],
    *,
    index_dir: str | Path | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    verbose: bool = False,
    judge: Any = None,
    refresh: bool = False,
) -> EvaluationResult:
    """Evaluate ``conversations`` with ``metrics`` (as eval-ai-library's:
    ``asyncio.run(evaluate_conversations(conversations, metrics))``; docs/conversations.md#python-api).

    Runs :func:`evaluate_conversations_sync` in a worker thread. Arguments, result and errors as its.
    """
    return await asyncio.to_thread(
        evaluate_conversations_sync,
        conversations,
        metrics,
        index_dir=index_dir,
        batch_size=batch_size,
        verbose=verbose,
        judge=judge,
        refresh=refresh,
    )


def _as_targets(target: Any) -> list[Target]:
    """``evaluate_sync``'s ``target`` as a list (None: empty).

    Raises:
        InputError: an item is not a target (it lacks ``generate``, ``case_key`` or ``name``), or two share a name.
    """
    from evaltasks.errors import InputError, Problem

    if target is None:
        return []
    targets = [target] if not isinstance(target, (list, tuple)) else list(target)
    problems = [
        Problem("<python>", f"target[{i}]", "", f"is not a target (no generate/case_key/name): {type(t).__name__}")
        for i, t in enumerate(targets)
        if not all(callable(getattr(t, attr, None)) for attr in ("generate", "case_key", "fingerprint"))
        or not isinstance(getattr(t, "name", None), str)
    ]
    names = [getattr(t, "name", None) for t in targets]
    problems += [
        Problem("<python>", f"target[{i}]", "name", f"repeats the target name '{name}'")
        for i, name in enumerate(names)
        if name in names[:i]
    ]
    if problems:
        raise InputError(problems, title="invalid targets")
    return targets
