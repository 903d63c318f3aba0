"""The evaluation pipeline: its stages, defined once, and the executor that runs their work.

Stages, in order (data flows one way):

1. **load**: the cases and metrics (the Python API's arguments; a suite and its dataset through
   :func:`evaltasks.engine.run.plan_run`).
2. **validate**: every problem of the metrics and the cases, all at once, before any work (:func:`validate`;
   with a target, the fields it fills are not required of the dataset).
3. **generate** (with targets): each target run on the cases whose output is not in the output store, in
   batches (the executor's :meth:`Executor.submit_generation`), ``repeat: K`` outputs per case; a case whose
   generation failed is errored with the reason and never scored (:func:`generate`,
   docs/targets.md#the-generate-stage).
4. **embed**: per provider namespace, its unique references and outputs, through the reference index
   (:func:`embed`; the executor's :meth:`Executor.embed_namespace`). A provider that keeps failing errors its
   metrics' results, not the run.
5. **search**: each reference set's FAISS search, its recall measured on the run's outputs (:func:`search`),
   then the judge metrics wired to the run's answer store and budget (:func:`bind`).
6. **score**: batches of many cases, every metric per batch (the executor's :meth:`Executor.submit_batch`), a
   bounded window of batches in flight, results folded per case in case order as batches finish (:func:`score`).
7. **summarise**: the case results into an :class:`~evaltasks.results.EvaluationResult` (:func:`summarise`; the
   flow streams them into its reports instead).

Two executors run the same stages: :class:`InProcessExecutor` (``evaluate``/``evaluate_sync``: direct calls
in this thread) and the flow's Prefect executor (``evaltasks.flows._prefect_executor``: each stage's batches
as task runs, cached, retried and spread by Prefect's task runner). This module never imports Prefect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from evaltasks.embeddings.base import VectorTable
from evaltasks.engine import progress as _progress
from evaltasks.engine.embedding import (
    _report_embedding_stage,
    embed_references,
    embed_texts,
    model_infos,
    prepare_reference_searches,
)
from evaltasks.engine.generation import (
    GENERATE_BATCH,
    Generated,
    TargetCases,
    TargetTally,
    check_generated,
    drop_generated_problems,
    errored_results,
    fill_multi_outputs,
    flag_flaky,
    generate_outputs,
    interruptible,
    needs_field,
    resume_generation,
    sample_id,
    samples_of,
    skipped_results,
)
from evaltasks.engine.scoring import score_metric_batch
from evaltasks.engine.stream import case_results, chunks, gc_frozen, stream_batches
from evaltasks.engine.summary import summarize
from evaltasks.engine.validation import case_kind_problems, validate_cases, validate_metrics
from evaltasks.errors import InputError, Problem, ProviderError
from evaltasks.index import ReferenceIndex
from evaltasks.judges.binding import JudgedMetric, bind_judges, judge_budget
from evaltasks.judges.budget import Budget
from evaltasks.metrics.base import BaseMetric, EmbeddingNeed
from evaltasks.results import (
    EmbeddingCounts,
    EvaluationResult,
    MetricResult,
    ReferenceSetInfo,
    TargetRun,
    TestCaseResult,
)
from evaltasks.test_case import ConversationalEvalTestCase, EvalTestCase, Generation

if TYPE_CHECKING:
    from evaltasks.metrics.reliability._perturbations import PerturbationSpec
    from evaltasks.targets.base import Target
    from evaltasks.targets.generate import GeneratedCase

STAGES = ("load", "validate", "generate", "embed", "search", "score", "summarise")
"""The pipeline's stages in order (``generate`` only with targets)."""

Logger = logging.Logger | logging.LoggerAdapter[Any]
Collect = Callable[[], list[list[MetricResult]]]
"""Waits for a submitted batch and returns its results: one list per metric, in the metrics' order, each one
:class:`~evaltasks.results.MetricResult` per case of the batch."""
CollectGenerated = Callable[[], "list[GeneratedCase]"]
"""Waits for a submitted generation batch and returns its generated cases: each case's ``samples`` in a row."""


@dataclass
class EmbeddedNamespace:
    """What embedding one provider namespace produced (:meth:`Executor.embed_namespace`).

    Attributes:
        table: the vectors of the namespace's references and outputs (each unique text once).
        index_only: a reference set's texts, stored in the index with no vectors brought back (shape (n, 0):
            costs and truncation only; its search reads them from the index); None when there are none.
        counts: texts computed and reused, references and outputs apart.
        spent: US dollars the namespace's embeddings cost (the budget's starting spend).
    """

    table: VectorTable
    index_only: VectorTable | None
    counts: EmbeddingCounts
    spent: float


@dataclass
class Embeddings:
    """The embed stage's result for the whole run.

    Attributes:
        tables: namespace -> the vectors scoring reads (costs shared over the texts' uses).
        stored: namespace -> the index-only texts' costs and truncation (reference sets' texts).
        failed: namespace -> the error of a provider that kept failing (its metrics' results are errored).
        dims: namespace -> the vectors' dimensions (namespaces with at least one vector).
        counts: texts computed and reused over every namespace.
        spent: US dollars all the embeddings cost.
    """

    tables: dict[str, VectorTable] = field(default_factory=dict)
    stored: dict[str, VectorTable] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    dims: dict[str, int] = field(default_factory=dict)
    counts: EmbeddingCounts = field(default_factory=EmbeddingCounts)
    spent: float = 0.0


class Executor(Protocol):
    """How the pipeline's units of work run: in this thread (:class:`InProcessExecutor`) or as Prefect task
    runs (the flow's executor). The stages, their order and what they fold together are the pipeline's.

    Attributes:
        in_flight: batches submitted and not yet collected at most (memory holds their results).
    """

    in_flight: int

    def embed_namespace(self, need: EmbeddingNeed, index: ReferenceIndex | None) -> EmbeddedNamespace:
        """Embed one namespace's texts (``need``: references, outputs, index-only texts) through ``index``.

        Raises:
            ProviderError: the provider still fails (after any retries): the pipeline errors its metrics.
            CredentialsError: the provider's credentials are missing or rejected: the run stops.
        """
        ...

    def submit_batch(
        self, batch: Sequence[EvalTestCase], metrics: Sequence[BaseMetric], embeddings: Embeddings
    ) -> Collect:
        """Start scoring ``batch`` with every metric of ``metrics``; returns what collects the results."""
        ...

    def submit_generation(
        self, target: Target, batch: Sequence[EvalTestCase], *, index_dir: str | None, refresh: bool, samples: int
    ) -> CollectGenerated:
        """Start generating ``batch``'s outputs with ``target`` (``samples`` per case; through the output store
        of ``index_dir``, not read when ``refresh``; None: no store); returns what collects the generated cases
        (:func:`evaltasks.targets.generate.generate_batch`'s). Collecting raises CredentialsError when the target
        rejected the credentials (the run stops)."""
        ...


def validate(
    cases: Sequence[EvalTestCase],
    metrics: Sequence[BaseMetric],
    *,
    generated: bool = False,
    fields: frozenset[str] | None = None,
) -> None:
    """The validate stage: the metric list (:func:`~evaltasks.engine.validation.validate_metrics`), then every
    case against every metric (:func:`~evaltasks.engine.validation.validate_cases`). ``generated``: a target
    fills the outputs, so the fields it fills are not required yet
    (:func:`~evaltasks.engine.generation.drop_generated_problems`; ``fields``: those it fills, default
    :func:`~evaltasks.engine.generation.filled_fields` of one target that does not repeat).

    Raises:
        InputError: invalid metrics, or invalid cases (every problem at once, located by ``item i``).
    """
    validate_metrics(metrics)
    kinds = case_kind_problems(cases, metrics)  # docs/conversations.md#metrics
    if kinds:
        raise InputError([Problem("<python>", f"metrics[{m}]", "", why) for m, why in kinds], title="invalid metrics")
    problems = validate_cases(cases, metrics)
    if generated:
        problems = drop_generated_problems(problems, *([fields] if fields is not None else []))
    if problems:
        raise InputError(problems, title="invalid test cases")
    if generated and any(isinstance(case, ConversationalEvalTestCase) for case in cases):
        raise InputError([Problem("<python>", "target", "", TARGET_ON_CONVERSATIONS)], title="invalid targets")


TARGET_ON_CONVERSATIONS = (
    "a target cannot be run on conversations: it answers one input, and a conversation's turns are recorded "
    "(grade the dataset's own turns; docs/conversations.md#targets)"
)
"""Why a run with a target refuses conversations (the Python API's and the suite's)."""


def generate(
    targets: Sequence[Target],
    cases: Sequence[EvalTestCase],
    ids: Sequence[str],
    metrics: Sequence[BaseMetric],
    executor: Executor,
    *,
    index_dir: str | Path | None,
    refresh: bool = False,
    batch_size: int = GENERATE_BATCH,
    skip: Mapping[str, str] | None = None,
    perturbations: PerturbationSpec | None = None,
) -> Generated:
    """The generate stage: each target of ``targets`` run on ``cases`` (``ids`` theirs) in batches of
    ``batch_size`` cases (at least :data:`ROUNDS_PER_BATCH` times the target's ``max_concurrency``) through
    ``executor``, one batch in flight (the target's own ``max_concurrency`` runs inside it), ``repeat`` samples
    per case, outputs read from and written to the output store of ``index_dir`` (not read when ``refresh``;
    None: no store).

    A case whose generation failed, or whose generated output lacks a field a metric needs
    (:func:`~evaltasks.engine.generation.check_generated`), is recorded in its part's ``failed`` with the reason
    (its metrics are errored, it is never scored). Names the stage ``generating N outputs`` and counts each
    output (:mod:`evaltasks.engine.progress`).

    ``skip``: target name -> why it is not run (its credentials are missing and the run skips what lacks them):
    its cases are kept as they are, their metrics to be skipped with that reason.

    Reliability (docs/metrics/reliability.md#reliability-metrics): with ``repeat`` >= 2 and a metric that reads
    ``multi_outputs``, every sample of a case gets the case's outputs there
    (:func:`~evaltasks.engine.generation.fill_multi_outputs`); with ``perturbations`` and a metric that reads
    ``variants``, the target also runs on each case's perturbed variants
    (:func:`~evaltasks.engine.perturbation.add_variants`).

    Raises:
        CredentialsError: a target rejected the credentials (HTTP 401): the run stops.
    """
    from evaltasks.targets.generate import secrets_redacted, warn_of_secrets  # startup: only a run with targets

    resume_generation()  # a stop of an earlier run in this process is not this run's
    variants = perturbations.count if perturbations is not None and needs_field(metrics, "variants") else 0
    total = sum(len(cases) * (samples_of(t) + variants) for t in targets)
    _progress.stage(f"generating {total:,} output{'' if total == 1 else 's'}", total)
    where = None if index_dir is None else str(index_dir)
    parts = []
    for target in targets:
        k = samples_of(target)

        def submit(rows: Sequence[int], target: Target = target, k: int = k) -> CollectGenerated:
            """Start generating the cases at ``rows`` (consecutive positions)."""
            batch = cases[rows[0] : rows[-1] + 1]
            return executor.submit_generation(target, batch, index_dir=where, refresh=refresh, samples=k)

        if skip and target.name in skip:
            parts.append(_skipped_part(target, k, cases, ids, skip[target.name]))
            _progress.advance(len(parts[-1].cases))
            continue
        part = TargetCases(target, [], [], samples=k)
        size = max(1, batch_size, ROUNDS_PER_BATCH * _concurrency(target))
        # one batch in flight: a target runs at most its max_concurrency calls at once (a callable need not be
        # thread-safe), and a batch of whole rounds keeps its workers busy to the end
        redacted = 0
        for rows, done in stream_batches(chunks(range(len(cases)), size), submit, 1):
            for j, generated in enumerate(done):
                row, sample = rows[j // k], j % k
                _add_generated(part, generated, ids[row], sample, metrics)
            redacted += secrets_redacted(done)
            _progress.advance(len(done))
        warn_of_secrets(target.name, redacted, len(cases) * k)
        if needs_field(metrics, "multi_outputs"):
            fill_multi_outputs(part)
        if perturbations is not None and needs_field(metrics, "variants"):
            from evaltasks.engine.perturbation import add_variants

            def submit_variants(batch: Sequence[EvalTestCase], target: Target = target) -> CollectGenerated:
                """Start generating one output for each perturbed variant of ``batch``."""
                return executor.submit_generation(target, batch, index_dir=where, refresh=refresh, samples=1)

            add_variants(part, cases, perturbations, submit_variants, size)
        parts.append(part)
    return Generated(parts)


ROUNDS_PER_BATCH = 8
"""A generation batch holds at least this many rounds of the target's ``max_concurrency`` calls."""


def _skipped_part(
    target: Target, samples: int, cases: Sequence[EvalTestCase], ids: Sequence[str], reason: str
) -> TargetCases:
    """The part of a target that is not run (``reason``): each case's samples kept without an output, to be
    skipped when scored."""
    part = TargetCases(target, [], [], samples=samples, skipped=reason)
    for row, case in enumerate(cases):
        for sample in range(samples):
            generation = Generation(target=target.name, sample=sample)
            part.cases.append(case.model_copy(update={"actual_output": "", "generation": generation}))
            part.ids.append(sample_id(ids[row], sample))
    return part


def _concurrency(target: Target) -> int:
    """The target's ``max_concurrency`` (1 when it has none)."""
    value = getattr(target, "max_concurrency", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def _add_generated(
    part: TargetCases, generated: GeneratedCase, case_id: str, sample: int, metrics: Sequence[BaseMetric]
) -> None:
    """Append one generated case (sample ``sample`` of case ``case_id``) to ``part``: its failure, if any,
    recorded; a case without a ``generation`` gets one naming the target."""
    case = generated.case
    if case.generation is None:
        case = case.model_copy(update={"generation": Generation(target=part.target.name, sample=sample)})
    reason = generated.error or check_generated(case, metrics)
    if reason is not None:
        part.failed[len(part.cases)] = reason
    part.requests += int(generated.requested)
    part.cached += int(generated.error is None and case.generation is not None and case.generation.cached)
    part.cases.append(case)
    part.ids.append(sample_id(case_id, sample))


def embed(
    needs: dict[str, EmbeddingNeed], index: ReferenceIndex | None, executor: Executor, logger: Logger | None = None
) -> Embeddings:
    """The embed stage: every namespace of ``needs`` through ``executor``, folded into :class:`Embeddings`.

    A namespace whose provider still fails (:class:`~evaltasks.errors.ProviderError`) is recorded in
    ``failed`` (logged to ``logger`` when given) and contributes nothing else; the others' tables get their
    costs shared over their texts' uses (:meth:`~evaltasks.metrics.base.EmbeddingNeed.share_costs`).

    Raises:
        CredentialsError: a provider's credentials are missing or rejected.
    """
    done = Embeddings()
    for namespace, need in needs.items():
        try:
            part = executor.embed_namespace(need, index)
        except ProviderError as exc:  # a provider still failing after retries errors its metrics, not the run
            if logger is not None:
                logger.error("Embedding with %s failed: %s", namespace, exc)
            done.failed[namespace] = str(exc)
            continue
        done.counts = done.counts.add(part.counts)
        done.spent += part.spent
        done.tables[namespace] = need.share_costs(part.table)
        if part.index_only is not None and len(part.index_only):
            done.stored[namespace] = need.share_costs(part.index_only)
        if len(done.tables[namespace]):
            done.dims[namespace] = int(done.tables[namespace].vectors.shape[1])
    if logger is not None:
        logger.info("Embeddings: %s", done.counts.model_dump())
    return done


def search(
    metrics: Sequence[BaseMetric],
    embeddings: Embeddings,
    needs: dict[str, EmbeddingNeed],
    index: ReferenceIndex | None,
    cases: int,
) -> list[ReferenceSetInfo]:
    """The search stage: every reference set's search built (or loaded) and its recall measured on the run's
    outputs (:func:`~evaltasks.engine.embedding.prepare_reference_searches`); one info per set searched."""
    return prepare_reference_searches(metrics, embeddings.tables, needs, index, cases, embeddings.stored)


@dataclass
class JudgeWiring:
    """How the run's judge metrics are wired (:func:`bind`; docs/judges.md#llm-judges).

    Attributes:
        index_dir: the index directory whose ``judgements/`` folder stores their answers (None: no store).
        refresh: ``--no-cache``: stored answers are not read (new ones are still stored).
        max_cost: US dollars the run may spend (embeddings included); None: unlimited.
        ledger: the budget's ledger file, shared by every worker process (needed with ``max_cost``).
        judge: the Python API's ``judge=`` hook (:data:`~evaltasks.judges.binding.JudgeHook`).
    """

    index_dir: str | Path | None = None
    refresh: bool = False
    max_cost: float | None = None
    ledger: Path | None = None
    judge: Any = None


def bind(metrics: Sequence[BaseMetric], wiring: JudgeWiring, spent: float) -> Budget | None:
    """Give the judge metrics of ``metrics`` the run's store, hook and budget (``wiring.max_cost`` with the
    embeddings' ``spent`` already counted); returns the budget (None: unlimited, or no judge metric).

    Raises:
        TypeError: ``wiring.judge`` is neither a Judge nor a function.
        ValueError: ``wiring.max_cost`` without ``wiring.ledger``.
    """
    judged = any(isinstance(metric, JudgedMetric) for metric in metrics)
    budget = None
    if judged and wiring.max_cost is not None:
        if wiring.ledger is None:
            raise ValueError("a budget (max_cost) needs a ledger file")
        budget = judge_budget(wiring.max_cost, spent, wiring.ledger)
    bind_judges(metrics, wiring.index_dir, refresh=wiring.refresh, budget=budget, judge=wiring.judge)
    return budget


def score(
    cases: Sequence[EvalTestCase],
    ids: Sequence[str],
    metrics: Sequence[BaseMetric],
    embeddings: Embeddings,
    executor: Executor,
    batch_size: int,
    generated: Generated | None = None,
) -> Iterator[tuple[Sequence[int], list[TestCaseResult]]]:
    """The score stage: ``cases`` in batches of ``batch_size`` (many cases per unit of work, never one per
    case), every metric per batch, at most ``executor.in_flight`` batches in flight; yields each batch's case
    positions and :class:`~evaltasks.results.TestCaseResult` list in case order, as batches finish. Whatever a
    yielded batch held is dropped before the next is collected, so memory holds a few batches of results.

    Names the stage ``scoring N cases × M metrics`` (:mod:`evaltasks.engine.progress`) with the count of
    results to come.

    With ``generated`` (the generate stage's result, whose ``cases`` are ``cases``): a batch never spans two
    targets and holds whole cases (all samples of each), a case whose generation failed is not scored (its
    metrics errored with the reason), and a case whose samples' verdicts differ is marked flaky
    (:func:`~evaltasks.engine.generation.flag_flaky`).
    """
    _progress.stage(
        f"scoring {len(cases):,} case{'' if len(cases) == 1 else 's'} × {len(metrics)} "
        f"metric{'' if len(metrics) == 1 else 's'}",
        len(cases) * len(metrics),
    )

    unscored: dict[int, list[MetricResult]] = {}
    if generated is not None:
        unscored.update({i: skipped_results(reason, metrics) for i, reason in generated.skipped.items()})
        unscored.update({i: errored_results(reason, metrics) for i, reason in generated.failed.items()})

    def submit(rows: Sequence[int]) -> Collect:
        """Start the batch of ``cases`` at ``rows`` (consecutive positions)."""
        if not unscored:
            return executor.submit_batch(cases[rows[0] : rows[-1] + 1], metrics, embeddings)
        return _submit_scored(rows, cases, unscored, metrics, embeddings, executor)

    bounds = generated.bounds() if generated is not None else [(0, len(cases))]
    samples = [part.samples for part in generated.parts] if generated is not None else [1]
    batches: list[Sequence[int]] = []
    samples_of_batch: list[int] = []
    for (start, end), k in zip(bounds, samples, strict=True):
        for rows in chunks(range(start, end), -(-max(1, batch_size) // k) * k):  # whole cases per batch
            batches.append(rows)
            samples_of_batch.append(k)
    for b, (rows, per_metric) in enumerate(stream_batches(batches, submit, executor.in_flight)):
        batch_results = flag_flaky(case_results(rows, cases, ids, per_metric), samples_of_batch[b])
        del per_metric
        yield rows, batch_results
        del batch_results


def _submit_scored(
    rows: Sequence[int],
    cases: Sequence[EvalTestCase],
    unscored: dict[int, list[MetricResult]],
    metrics: Sequence[BaseMetric],
    embeddings: Embeddings,
    executor: Executor,
) -> Collect:
    """Submit the cases at ``rows`` that are to be scored; the collect function returns results for all of
    ``rows``, those of an ``unscored`` case (its generation failed, or its target was skipped) as given."""
    kept = [cases[i] for i in rows if i not in unscored]
    collect = executor.submit_batch(kept, metrics, embeddings) if kept else None

    def merged() -> list[list[MetricResult]]:
        scored = [iter(r) for r in collect()] if collect is not None else [iter([]) for _ in metrics]
        return [[unscored[i][m] if i in unscored else next(scored[m]) for i in rows] for m in range(len(metrics))]

    return merged


def summarise(
    test_results: list[TestCaseResult],
    metrics: Sequence[BaseMetric],
    embeddings: Embeddings,
    needs: dict[str, EmbeddingNeed],
    reference_sets: list[ReferenceSetInfo],
    generated: Generated | None = None,
) -> EvaluationResult:
    """The summarise stage: the run's case results (in case order), their summary per metric
    (:func:`~evaltasks.engine.summary.summarize`), the embedding models used and the reference sets searched.
    With ``generated``, one :class:`~evaltasks.results.TargetRun` per target (its cases' summary) and the run's
    summary the first target's."""
    thresholds = {m.name: m.threshold for m in metrics}
    targets = target_runs(test_results, generated, thresholds, embeddings.counts) if generated is not None else []
    return EvaluationResult(
        test_results=test_results,
        summary=targets[0].summary if targets else summarize(test_results, thresholds, embeddings.counts),
        embedding_models=model_infos(needs, embeddings.dims),
        reference_sets=reference_sets,
        targets=targets,
    )


def target_runs(
    test_results: Sequence[TestCaseResult],
    generated: Generated,
    thresholds: dict[str, float],
    counts: EmbeddingCounts | None = None,
) -> list[TargetRun]:
    """One :class:`~evaltasks.results.TargetRun` per target of ``generated``: its cases' summary (the run's
    embedding ``counts``), its generation figures (:class:`~evaltasks.engine.generation.TargetTally`)."""
    runs = []
    for part, (start, end) in zip(generated.parts, generated.bounds(), strict=True):
        tally = TargetTally(part)
        tally.add(test_results[start:end])
        runs.append(tally.run(summarize(list(test_results[start:end]), thresholds, counts)))
    return runs


def run(
    cases: Sequence[EvalTestCase],
    ids: Sequence[str],
    metrics: Sequence[BaseMetric],
    *,
    needs: dict[str, EmbeddingNeed],
    index: ReferenceIndex | None,
    executor: Executor,
    batch_size: int,
    wiring: JudgeWiring,
    generated: Generated | None = None,
) -> EvaluationResult:
    """The stages after validation, composed, with every case's results kept (the Python API's run; the flow
    composes the same stages but streams the results into its reports): embed → search → bind the judges →
    score (with the collector tuned: :func:`~evaltasks.engine.stream.gc_frozen`) → summarise. With targets,
    ``cases`` and ``ids`` are ``generated``'s (the generate stage ran before: the embedding needs read its outputs).

    Raises:
        CredentialsError: a provider's credentials are missing or rejected.
    """
    embeddings = embed(needs, index, executor)
    reference_sets = search(metrics, embeddings, needs, index, len(cases))
    bind(metrics, wiring, embeddings.spent + (generated.spent if generated is not None else 0.0))
    test_results: list[TestCaseResult] = []
    with gc_frozen():  # a batch is folded into case results before the next is scored
        for _, batch_results in score(cases, ids, metrics, embeddings, executor, batch_size, generated):
            test_results.extend(batch_results)
    return summarise(test_results, metrics, embeddings, needs, reference_sets, generated)


class InProcessExecutor:
    """The executor of the Python API: each unit of work is a direct call in this thread, one batch in flight.

    A namespace is embedded in one lookup of its references and outputs (one encode call for the texts the
    index lacks; none when every text is stored); without an index, directly (nothing written). A batch is
    scored when it is collected, metric after metric, ``progress(len(batch))`` after each.

    Args:
        progress: called with the number of case × metric results just completed; None: not called.
    """

    in_flight = 1

    def __init__(self, progress: Callable[[int], None] | None = None) -> None:
        self.progress = progress

    def embed_namespace(self, need: EmbeddingNeed, index: ReferenceIndex | None) -> EmbeddedNamespace:
        """Embed ``need``'s texts through ``index`` (:func:`~evaltasks.engine.embedding.embed_texts`); with an
        index, a reference set's texts first, into the index only (no vectors brought back).

        Raises:
            ProviderError: the provider failed.
        """
        index_only = [t for t in need.references if t in need.index_only] if index is not None else []
        references = [t for t in need.references if t not in need.index_only] if index_only else list(need.references)
        only_table, counts, spent = None, EmbeddingCounts(), 0.0
        if index_only:  # a set's vectors are read from the index by its search, never held here
            only_table, counts = embed_references(need.provider, index_only, index, probe=False, vectors=False)
            spent = float(only_table.costs.sum())
        _report_embedding_stage(need.provider, references, need.outputs, index)
        table, text_counts = embed_texts(need.provider, references, list(need.outputs), index)
        return EmbeddedNamespace(table, only_table, counts.add(text_counts), spent + float(table.costs.sum()))

    def submit_batch(
        self, batch: Sequence[EvalTestCase], metrics: Sequence[BaseMetric], embeddings: Embeddings
    ) -> Collect:
        """A collect function that scores ``batch`` with each metric in turn when called
        (:func:`~evaltasks.engine.scoring.score_metric_batch`: a metric's failure errors cases, not the run)."""

        def collect() -> list[list[MetricResult]]:
            per_metric = []
            for metric in metrics:
                per_metric.append(score_metric_batch(metric, batch, embeddings.tables, embeddings.failed))
                if self.progress:
                    self.progress(len(batch))
            return per_metric

        return collect

    def submit_generation(
        self, target: Target, batch: Sequence[EvalTestCase], *, index_dir: str | None, refresh: bool, samples: int
    ) -> CollectGenerated:
        """A collect function that generates ``batch`` when called
        (:func:`~evaltasks.engine.generation.generate_outputs`, through the output store of ``index_dir``)."""

        def collect() -> list[GeneratedCase]:
            return interruptible(
                lambda: generate_outputs(target, batch, index_dir=index_dir, refresh=refresh, samples=samples)
            )

        return collect
