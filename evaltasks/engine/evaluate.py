"""The plain-Python evaluation engine, shared by :func:`evaluate` and the Prefect tasks.

Steps (data flows one way): validate every case against every metric (all problems reported at once) →
collect the texts each embedding provider must embed → embed unique references and outputs through the
:class:`~evaltasks.index.ReferenceIndex` (or directly, without one) → score each metric over batches of cases
(:mod:`evaltasks.engine.stream`, the flow's engine) → aggregate into an :class:`~evaltasks.results.EvaluationResult`.

Which entry point to use:

- ``await evaluate(cases, metrics)`` inside async code (it runs the work in a worker thread, so the event
  loop stays responsive); ``asyncio.run(evaluate(...))`` from plain scripts (eval-ai-library's documented usage);
- ``evaluate_sync(cases, metrics)`` from synchronous code, including code that already runs an event loop
  (e.g. a Jupyter cell or a sync Prefect task), where ``asyncio.run`` is not allowed.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from evaltasks.embeddings.base import EmbeddingProvider, VectorTable
from evaltasks.engine import progress as _progress
from evaltasks.errors import QUOTE_MAX_CHARS, CredentialsError, InputError, Problem, ProviderError, bounded, quote
from evaltasks.index import ReferenceIndex, report_warning
from evaltasks.metrics import METRICS
from evaltasks.metrics.base import BaseMetric, EmbeddingNeed
from evaltasks.engine.statistics import summarize
from evaltasks.engine import progress as _progress
from evaltasks.results import (
    EmbeddingCounts,
    EmbeddingModelInfo,
    EvaluationResult,
    MetricResult,
    ReferenceSetInfo,
    TestCaseResult,
    result_problem,
)
from evaltasks.engine.stream import case_results, chunks, gc_frozen, score_directly, stream_batches
from evaltasks.test_case import EvalTestCase, assign_ids

DEFAULT_BATCH_SIZE = 1024

ProgressCallback = Callable[[int], None]


def validate_metrics(metrics: Sequence[BaseMetric]) -> None:
    """Check the metric list. Raises InputError for an empty list, a non-metric or a repeated metric name."""
    problems = []
    if not metrics:
        problems.append(Problem("<python>", "metrics", "", "at least one metric is required"))
    names: set[str] = set()
    for i, metric in enumerate(metrics):
        if not isinstance(metric, BaseMetric):
            problems.append(Problem("<python>", f"metrics[{i}]", "", f"is not a metric: {quote(metric)}"))
            continue
        if metric.name in names:
            problems.append(Problem("<python>", f"metrics[{i}]", "name", f"repeats the metric name '{metric.name}'"))
        names.add(metric.name)
    if problems:
        raise InputError(problems, title="invalid metrics")


MAX_FAULTS_SHOWN = 5  # per metric: different exceptions of its validate_case listed; the rest are counted


def _exception_text(exc: BaseException) -> str:
    """``"ExceptionType: message"`` (``"ExceptionType"`` when the message is empty), the message bounded."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a user's exception whose __str__ fails
        message = "<the message could not be printed>"
    return f"{type(exc).__name__}: {bounded(message, QUOTE_MAX_CHARS * 2)}" if message else type(exc).__name__


def _field_pairs(found: object) -> list[tuple[str, str]] | None:
    """``found`` as ``(field, message)`` string pairs, or None when it is not a list/tuple of such pairs."""
    if not isinstance(found, (list, tuple)):
        return None
    pairs = []
    for item in found:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(v, str) for v in item)):
            return None
        pairs.append((item[0], item[1]))
    return pairs


def validate_cases(
    cases: Sequence[EvalTestCase],
    metrics: Sequence[BaseMetric],
    *,
    source: str = "<python>",
    locations: Sequence[str] | None = None,
) -> list[Problem]:
    """Every problem that makes a case unusable for a metric, located by ``locations[i]`` (default ``item i``),
    in case order.

    One problem per case and field, naming every metric that reported it: ``field 'expected_output' is missing
    (needed by ExactMatchMetric, SemanticSimilarityMetric)``; metrics giving different messages for one field
    share the line (``<message> (needed by A); <message> (needed by B)``).

    A metric whose ``validate_case`` raises (or returns something other than ``(field, message)`` pairs) is a
    problem of the case, not a crash: ``BrandVoiceMetric.validate_case raised RuntimeError: validate broke``.
    The same failure on later cases is counted in that first problem (``(also on 9 more cases)``), and at most
    :data:`MAX_FAULTS_SHOWN` different failures per metric are listed (one more problem counts the rest), so a
    metric that raises on every case is reported once.
    """
    problems: list[Problem] = []
    faults: dict[tuple[int, str], list[int]] = {}  # (metric index, failure) -> [its problem's index, repeats]
    shown = [0] * len(metrics)  # per metric: different failures listed so far
    overflow: dict[int, list[int]] = {}  # metric index -> [index of the problem counting the rest, count]
    for i, case in enumerate(cases):
        if not isinstance(case, EvalTestCase):
            problems.append(Problem(source, f"item {i}", "", f"is not an EvalTestCase: {type(case).__name__}"))
            continue
        by_field: dict[str, dict[str, list[str]]] | None = None  # field -> message -> the metrics giving it
        for m, metric in enumerate(metrics):
            try:
                found = metric.validate_case(case)
            except BaseException as exc:  # noqa: BLE001 - a user's metric: report it as input, located (sys.exit() included)
                if not metric_failure(exc):
                    raise
                failure = f"raised {_exception_text(exc)}"
            else:
                if not found and (found.__class__ is list or found is None):
                    continue  # the common case, kept cheap: nothing wrong (None: a function without a return)
                pairs = _field_pairs(found)
                if pairs is not None:
                    by_field = {} if by_field is None else by_field
                    for field, message in pairs:
                        by_field.setdefault(field, {}).setdefault(message, []).append(metric.name)
                    continue
                failure = f"returned {quote(found)}, not a list of (field, message) pairs"
            where = locations[i] if locations else f"item {i}"
            label = f"{type(metric).__name__}.validate_case" + (
                "" if metric.name == type(metric).__name__ else f" (metric '{metric.name}')")
            key = (m, failure)
            if key in faults:
                faults[key][1] += 1  # a repeat: counted in its first problem
            elif shown[m] < MAX_FAULTS_SHOWN:
                shown[m] += 1
                faults[key] = [len(problems), 0]
                problems.append(Problem(source, where, "", f"{label} {failure}"))
            elif m in overflow:
                overflow[m][1] += 1  # past the cap: counted in the first such problem
            else:
                overflow[m] = [len(problems), 0]
                problems.append(Problem(source, where, "", f"{label} {failure}"))
        if by_field is None:
            continue
        where = locations[i] if locations else f"item {i}"
        for field, messages in by_field.items():
            text = "; ".join(f"{message} (needed by {', '.join(names)})" for message, names in messages.items())
            problems.append(Problem(source, where, field, text))
    for index, repeats in faults.values():
        if repeats:
            old = problems[index]
            problems[index] = replace(old, message=f"{old.message} (also on {repeats} more case(s))")
    for index, count in overflow.values():
        if count:
            old = problems[index]
            problems[index] = replace(old, message=f"{old.message} (and {count} more failure(s) not listed)")
    return problems


def collect_embedding_needs(cases: Sequence[EvalTestCase], metrics: Sequence[BaseMetric]) -> dict[str, EmbeddingNeed]:
    """The unique texts each provider namespace must embed for ``cases`` × ``metrics``.

    Raises:
        CredentialsError: a provider needs credentials that are missing.
    """
    needs: dict[str, EmbeddingNeed] = {}
    for metric in metrics:
        metric.add_embedding_needs(cases, needs)
    return needs


def embed_references(
    provider: EmbeddingProvider, texts: Sequence[str], index: ReferenceIndex | None, *, probe: bool = True,
    vectors: bool = True,
) -> tuple[VectorTable, EmbeddingCounts]:
    """Embed unique reference ``texts`` through ``index`` (or directly when None).

    ``probe``: see :meth:`~evaltasks.index.ReferenceIndex.get_or_embed` (False when every text of the run
    goes through the index). ``vectors=False`` (with an index): store them only; the table's vectors have
    shape (n, 0). Returns the vectors and the counts (``references_computed``, ``references_reused``). Raises
    ProviderError when the provider fails.
    """
    table, computed, reused = _embed_unique(provider, texts, index, probe, vectors)
    return table, EmbeddingCounts(references_computed=computed, references_reused=reused)


def embed_outputs(
    provider: EmbeddingProvider, texts: Sequence[str], index: ReferenceIndex | None = None, *, probe: bool = True
) -> tuple[VectorTable, EmbeddingCounts]:
    """Embed unique non-empty output ``texts`` through ``index`` (one encode call for those not in it), or
    directly when None.

    ``probe``: as for :func:`embed_references`. Returns the vectors and the counts (``outputs_computed``,
    ``outputs_reused``: found in the index). Raises ProviderError when the provider fails.
    """
    table, computed, reused = _embed_unique(provider, texts, index, probe)
    return table, EmbeddingCounts(outputs_computed=computed, outputs_reused=reused)


def _embed_unique(
    provider: EmbeddingProvider, texts: Sequence[str], index: ReferenceIndex | None, probe: bool,
    vectors: bool = True,
) -> tuple[VectorTable, int, int]:
    """The vectors of the unique ``texts`` through ``index`` (directly when None), and how many were computed
    and reused (what :func:`embed_references` and :func:`embed_outputs` count under their own names)."""
    unique = list(dict.fromkeys(texts))
    if index is None:
        table = VectorTable.from_batch(unique, provider.embed_batch(unique)) if unique else VectorTable([], _empty())
        return table, len(unique), 0
    lookup = index.get_or_embed(provider, unique, probe=probe, vectors=vectors)
    return lookup.table, lookup.computed, lookup.reused


def embed_texts(
    provider: EmbeddingProvider, references: Sequence[str], outputs: Sequence[str], index: ReferenceIndex | None
) -> tuple[VectorTable, EmbeddingCounts]:
    """Embed the unique ``references`` and ``outputs`` of one provider namespace; a text in both is embedded
    once and counted as a reference.

    With ``index``: one lookup for all of them (a text is a text: outputs are stored beside references), one
    encode call for the texts not stored yet, and no provider call at all when every text is stored (no
    dimension probe: every vector comes from the one store). Without: references then outputs embedded
    directly (two calls), nothing written.

    Returns the vectors (references first, then outputs) and the counts. Raises ProviderError when the
    provider fails.
    """
    refs = list(dict.fromkeys(references))
    ref_set = set(refs)
    outs = [t for t in dict.fromkeys(outputs) if t not in ref_set]
    if index is None:
        ref_table, ref_counts = embed_references(provider, refs, None)
        out_table, out_counts = embed_outputs(provider, outs)
        return VectorTable.concat([ref_table, out_table]), ref_counts.add(out_counts)
    lookup = index.get_or_embed(provider, refs + outs, probe=False)
    stored = lookup.stored if lookup.stored is not None else np.zeros(len(refs) + len(outs), dtype=bool)
    ref_reused, out_reused = int(stored[: len(refs)].sum()), int(stored[len(refs) :].sum())
    return lookup.table, EmbeddingCounts(
        references_computed=len(refs) - ref_reused, references_reused=ref_reused,
        outputs_computed=len(outs) - out_reused, outputs_reused=out_reused,
    )


def _report_embedding_stage(provider: EmbeddingProvider, references: Sequence[str], outputs: Sequence[str],
                            index: ReferenceIndex | None) -> None:
    """Name the stage ``embedding N texts (MODEL)`` (:mod:`evaltasks.engine.progress`, no count: the encode is one
    call) when texts of one namespace are not stored yet: what ``evaltasks calibrate`` shows while it embeds.
    Nothing without a stage callback, or when every text is stored."""
    if not _progress.has_stage_callback():
        return
    texts = list(dict.fromkeys([*references, *outputs]))
    missing = len(index.missing_texts(provider, texts)) if index is not None else len(texts)
    if missing:
        _progress.stage(f"embedding {missing:,} text{'' if missing == 1 else 's'} ({provider.model_name})", None)


def _empty() -> np.ndarray:
    return np.zeros((0, 0), dtype=np.float32)


_BUILT_IN_METRICS = frozenset(METRICS.values())  # built-in metric classes (not their subclasses)


def score_metric_batch(
    metric: BaseMetric,
    cases: Sequence[EvalTestCase],
    vectors: dict[str, VectorTable] | None,
    failed_namespaces: dict[str, str] | None = None,
    *,
    raise_provider_errors: bool = False,
) -> list[MetricResult]:
    """Score one metric over a batch; a failure errors cases, never the run (README, "Your own metrics"),
    except missing or rejected credentials (:class:`CredentialsError`, e.g. a judge endpoint's HTTP 401/403),
    which propagate: the run stops as a credentials problem (CLI exit 2), as for embeddings.

    - A provider failure (:class:`ProviderError`) makes the batch's results ``errored``; with
      ``raise_provider_errors`` it propagates instead (a Prefect task then fails, is retried when transient,
      and is never cached as errored results).
    - Any other exception from ``metric.score_batch`` (a bug in a user's metric) re-scores the batch one case
      at a time, so only the cases that raise are ``errored``, each with ``ExceptionType: message``.
    - A result list of the wrong length, or an item that is not a :class:`MetricResult`, errors the cases it
      cannot vouch for, with a message naming the metric; so does a MetricResult whose score (or threshold) is
      not a finite number in [0, 1] (built without :meth:`MetricResult.scored`, which rejects one: README,
      "Your own metrics"). Built-in metrics build their results with ``scored`` only, so theirs are not
      re-checked (~0.07 µs per case saved: a quarter of a LengthCheck case).

    Returns one result per case, in order. While it runs, the metric is recorded as running
    (:func:`evaltasks.engine.progress.metric_running`).
    """
    with _progress.metric_running(getattr(metric, "name", type(metric).__name__)):
        return _score_metric_batch(metric, cases, vectors, failed_namespaces, raise_provider_errors)


def _score_metric_batch(
    metric: BaseMetric,
    cases: Sequence[EvalTestCase],
    vectors: dict[str, VectorTable] | None,
    failed_namespaces: dict[str, str] | None,
    raise_provider_errors: bool,
) -> list[MetricResult]:
    """:func:`score_metric_batch`'s work."""
    namespace = metric.embedding_namespace if failed_namespaces else None
    if namespace and namespace in failed_namespaces:
        # one (immutable) result for every case: built once, so its message is redacted once, not per case
        return [MetricResult.errored(metric.name, metric.threshold, failed_namespaces[namespace])] * len(cases)
    try:
        results = metric.score_batch(cases, vectors)
    except CredentialsError as exc:
        # A key missing or rejected (HTTP 401/403) stops the run: every later request would fail the same. Its
        # cause (the SDK's error) is dropped: it does not survive the pickling that brings it from a worker.
        exc.__cause__ = exc.__context__ = None
        raise
    except ProviderError as exc:
        if raise_provider_errors:
            raise
        return [MetricResult.errored(metric.name, metric.threshold, str(exc))] * len(cases)  # one, as above
    except BaseException as exc:  # noqa: BLE001 - the metric's bug: find the cases that raise (sys.exit() included)
        if not metric_failure(exc):
            raise
        if len(cases) == 1:
            return [_score_one(metric, cases[0], vectors, raise_provider_errors)]
        return [_score_one(metric, case, vectors, raise_provider_errors) for case in cases]
    if type(results) is list and len(results) == len(cases):
        if type(metric) in _BUILT_IN_METRICS:  # their results come from MetricResult.scored, which checks scores
            if all(type(r) is MetricResult for r in results):
                return results  # the fast path: one C-level pass over the list
        else:
            try:  # one pass over the list (a comparison is False for NaN, a TypeError for a non-number)
                if all(type(r) is MetricResult and (s := r.score) is not None and 0.0 <= s <= 1.0
                       and 0.0 <= (th := r.threshold) <= 1.0 and r.success is (s >= th)
                       and r.status == ("passed" if s >= th else "failed") for r in results):
                    return results
            except TypeError:
                pass
    return _checked_results(metric, cases, results)


_CONTROL_FLOW_PACKAGES = frozenset({"builtins", "asyncio", "concurrent", "anyio", "prefect", "trio"})


def metric_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a metric's own code, is the metric's failure (its case is ``errored`` with it)
    rather than control flow that must go on up: any ``Exception``, ``SystemExit`` (a metric's ``sys.exit()``),
    and a user's own ``BaseException`` subclass; not ``KeyboardInterrupt``, ``GeneratorExit``, task cancellation
    or an orchestrator's termination signal (``BaseException`` subclasses of the standard library, asyncio,
    concurrent.futures, anyio, trio or Prefect)."""
    if isinstance(exc, (Exception, SystemExit)):
        return True
    if isinstance(exc, (KeyboardInterrupt, GeneratorExit)):
        return False
    return type(exc).__module__.partition(".")[0] not in _CONTROL_FLOW_PACKAGES


def _score_one(
    metric: BaseMetric, case: EvalTestCase, vectors: dict[str, VectorTable] | None, raise_provider_errors: bool
) -> MetricResult:
    """``metric`` on one case; an exception gives an ``errored`` result ``ExceptionType: message``."""
    try:
        results = metric.score_batch([case], vectors)
    except CredentialsError as exc:
        exc.__cause__ = exc.__context__ = None  # as in score_metric_batch
        raise
    except ProviderError as exc:
        if raise_provider_errors:
            raise
        return MetricResult.errored(metric.name, metric.threshold, str(exc))
    except BaseException as exc:  # noqa: BLE001 - a metric's bug errors this case only (sys.exit() included)
        if not metric_failure(exc):
            raise
        return MetricResult.errored(metric.name, metric.threshold, f"{type(exc).__name__}: {exc}")
    return _checked_results(metric, [case], results)[0]


def _checked_results(metric: BaseMetric, cases: Sequence[EvalTestCase], results: object) -> list[MetricResult]:
    """``results`` when they are one :class:`MetricResult` per case; otherwise each case whose result is missing,
    not a MetricResult, or has a score or threshold out of [0, 1] or a status its score contradicts
    (:func:`~evaltasks.results.result_problem`) is
    ``errored`` with a message naming the metric (all of them when the count is wrong)."""
    name, threshold = getattr(metric, "name", type(metric).__name__), getattr(metric, "threshold", 0.0)
    try:
        items = list(results)  # type: ignore[call-overload]
    except TypeError:
        items = None
    if items is None or len(items) != len(cases):
        got = f"{len(items)} results" if items is not None else f"a {type(results).__name__}"
        message = (f"metric {name} ({type(metric).__qualname__}) returned {got} for {len(cases)} cases: score_batch "
                   "must return one MetricResult per case, in order")
        return [MetricResult.errored(name, threshold, message) for _ in cases]
    checked = []
    for item in items:
        if not isinstance(item, MetricResult):
            checked.append(MetricResult.errored(name, threshold, f"metric {name} ({type(metric).__qualname__}) "
                                                f"returned a {type(item).__name__} instead of a MetricResult"))
        elif (problem := result_problem(name, item)) is not None:
            checked.append(MetricResult.errored(name, threshold, problem))
        else:
            checked.append(item)
    return checked


def prepare_reference_searches(
    metrics: Sequence[BaseMetric],
    tables: dict[str, VectorTable],
    needs: dict[str, EmbeddingNeed],
    index: ReferenceIndex | None,
    cases: int,
    stored: dict[str, VectorTable] | None = None,
) -> list[ReferenceSetInfo]:
    """Build (or load) the FAISS search of every metric's reference set and measure approximate recall.

    Searches persist under ``<index>/sets/`` when an index is used. ``stored``: per namespace, the costs and
    truncation of the index-only texts (:attr:`~evaltasks.metrics.base.EmbeddingNeed.index_only`) embedded
    into ``index`` without their vectors; a set whose vectors ``tables`` lacks is read from ``index``.
    Returns one info per set searched.
    """
    infos = []
    for metric in metrics:
        reference_set = getattr(metric, "reference_set", None)
        namespace = metric.embedding_namespace
        if reference_set is None or namespace not in tables:
            continue
        directory = index.root / "sets" if index is not None else None
        outputs = [t for t in needs[namespace].outputs if t in tables[namespace]]
        _, recall = metric.prepare_search(tables[namespace], directory, cases,  # type: ignore[attr-defined]
                                          index=index, stored=(stored or {}).get(namespace),
                                          queries=tables[namespace].rows(outputs) if outputs else None)
        config = recall.query_config
        infos.append(ReferenceSetInfo(
            name=reference_set.name, metric=metric.name, count=len(reference_set), sha256=reference_set.sha256,
            search=reference_set.search.label(), recall_at_1=recall.recall_at_1, recall_at_10=recall.recall_at_10,
            nprobe=config.nprobe if config.kind == "ivf" else None,
            ef_search=config.ef_search if config.kind == "hnsw" else None, target_recall=config.target_recall,
        ))
        if recall.short_of_target():
            widths = f"nprobe {config.nprobe}" if config.kind == "ivf" else f"ef_search {config.ef_search}"
            where = (f"wider searches found no more than {widths}" if recall.plateau
                     else f"even at the widest search, {widths}")
            report_warning(f"reference set '{reference_set.name}': recall@10 {recall.recall_at_10:.3f} on the run's "
                           f"outputs is below its target_recall {config.target_recall} ({where}); "
                           "search: flat is exact")
    return infos


def model_infos(needs: dict[str, EmbeddingNeed], dimensions: dict[str, int] | None = None) -> list[EmbeddingModelInfo]:
    """One :class:`EmbeddingModelInfo` per provider namespace used."""
    return [
        EmbeddingModelInfo(
            provider=need.provider.provider, model=need.provider.model_name, fingerprint=need.provider.fingerprint,
            dimensions=(dimensions or {}).get(ns),
        )
        for ns, need in needs.items()
    ]


JUDGEMENTS_DIR = "judgements"
"""The judge answer store's folder inside the reference index directory (README, "LLM judges")."""


def as_judge(judge: Any) -> Any:
    """The ``judge=`` hook as a :class:`~evaltasks.judges.Judge`: a Judge as is, a function from messages to
    text wrapped in :class:`~evaltasks.judges.FunctionJudge`, None as None.

    Raises:
        TypeError: ``judge`` is neither.
    """
    from evaltasks.judges import FunctionJudge, Judge

    if judge is None or isinstance(judge, Judge):
        return judge
    return FunctionJudge(judge)


def bind_judges(
    metrics: Sequence[BaseMetric],
    index_dir: str | Path | None,
    *,
    refresh: bool = False,
    budget: Any = None,
    judge: Any = None,
) -> int:
    """Give every judge metric of ``metrics`` the run's :class:`~evaltasks.judges.JudgeRuntime`: the answer
    store ``<index_dir>/judgements`` (none when ``index_dir`` is None), ``refresh`` (``--no-cache``: stored
    answers are not read), the run's ``budget`` and the ``judge=`` hook (a Judge or a function from messages
    to text). Returns how many metrics were bound. Raises TypeError for a ``judge`` that is neither."""
    from evaltasks.judges import JudgeRuntime
    from evaltasks.metrics.judge.base import JudgeMetric

    judge = as_judge(judge)
    store = Path(index_dir) / JUDGEMENTS_DIR if index_dir is not None else None
    bound = 0
    for metric in metrics:
        if isinstance(metric, JudgeMetric):
            metric.judge_runtime = JudgeRuntime(store_dir=store, refresh=refresh, budget=budget, judge=judge)
            bound += 1
    return bound


def as_reused(results: list[MetricResult]) -> list[MetricResult]:
    """``results`` of a batch served from Prefect's task cache, with the judge accounting of this run: a judge
    result's requests, tokens and cost become 0 and every answer it used counts as reused (``judge_cached``),
    since nothing was sent or billed this time, and as served by the task cache (``judge_task_cached``: the
    answer store was not read). Other results are returned as they are."""
    out = []
    for r in results:
        log = r.evaluation_log
        if log and "judge_model" in log:
            used = int(log.get("judge_cached", 0)) + int(log.get("judge_requests", 0))
            log = {**log, "judge_cached": used, "judge_task_cached": used, "judge_requests": 0, "prompt_tokens": 0,
                   "completion_tokens": 0}
            r = r.model_copy(update={"evaluation_log": log, "evaluation_cost": 0.0})
        out.append(r)
    return out


def judge_budget(max_cost: float | None, spent: float, ledger: str | Path) -> Any:
    """The run's judge budget for ``--max-cost``: a :class:`~evaltasks.judges.budget.Budget` of ``max_cost`` US
    dollars with ``spent`` (the run's embedding spend) already counted, its ledger at ``ledger`` (a file that
    process and Dask workers share: a Budget pickles as its limit and ledger); None without a limit."""
    if max_cost is None:
        return None
    from evaltasks.judges.budget import Budget

    budget = Budget(max_cost, ledger)
    if spent:
        budget.add_spent(spent)
    return budget


def _client_of(metric: Any) -> Any:
    """The client ``metric`` sends to in this run (the OpenAI judge or the ``judge=`` hook), without the run's
    store and budget around it. Raises CredentialsError without an API key."""
    from evaltasks.judges import RunJudge

    judge = metric.judge()
    return judge.inner if isinstance(judge, RunJudge) else judge


def unpriced_judge_models(metrics: Sequence[BaseMetric]) -> list[str]:
    """The judge models of ``metrics``' judge metrics that have no price (in neither the built-in table nor the
    judge's ``prices``: :func:`~evaltasks.judges.prices.resolve_price`), in metric order, each once: their costs
    count as $0 and ``--max-cost`` cannot limit them. A ``judge=`` function has no prices and is not listed.

    Raises:
        CredentialsError: a judge metric's client has no API key.
    """
    from evaltasks.metrics.judge.base import JudgeMetric

    models: list[str] = []
    for metric in metrics:
        if not isinstance(metric, JudgeMetric):
            continue
        inner = _client_of(metric)
        price = getattr(inner, "price", None)
        if price is not None and not price.known and inner.model not in models:
            models.append(inner.model)
    return models


def estimate_judge_cost(cases: Sequence[EvalTestCase], metrics: Sequence[BaseMetric], *,
                        cached: Mapping[str, Collection[int]] | None = None) -> float:
    """Estimated US dollars of the judge requests of a run (for ``--max-cost``): each judge metric's
    :meth:`~evaltasks.metrics.judge.base.JudgeMetric.estimate_requests` per case, once per sample (each sample is its
    own request; a request of the metric's ``shared_prompts`` once), each priced by its judge's ``estimate_cost``
    (:meth:`~evaltasks.judges.RunJudge.estimate_cost`: the worst case at the client's prices; 0 for answers
    already in the run's store unless it refreshes, and for a ``judge=`` function). ``cached``: per metric name,
    the case rows whose results come from Prefect's task cache (nothing is sent for them). Bind the runtime
    (:func:`bind_judges`) first.

    Raises:
        CredentialsError: a judge metric's client has no API key.
    """
    from evaltasks.metrics.judge.base import JudgeMetric

    total = 0.0
    for metric in metrics:
        if not isinstance(metric, JudgeMetric):
            continue
        estimate = getattr(metric.judge(), "estimate_cost", None)
        if estimate is None:
            continue
        skip = (cached or {}).get(metric.name, ())
        for row, case in enumerate(cases):
            if row in skip:
                continue
            for request in metric.estimate_requests(case):
                shared = request.schema_name in metric.shared_prompts  # one request whichever sample sends it
                for sample in range(1 if shared else metric.samples):
                    total += float(estimate(request if shared else replace(request, sample=sample)))
    return total


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

    Returns:
        An :class:`EvaluationResult`: one result per case in input order, and the summary.

    Raises:
        ValueError (:class:`~evaltasks.errors.InputError`): invalid metrics or cases, all reported at once,
            before any scoring.
        CredentialsError: a provider's credentials are missing or rejected.
    """
    cases = list(test_cases)
    validate_metrics(metrics)
    problems = validate_cases(cases, metrics)
    if problems:
        raise InputError(problems, title="invalid test cases")
    ids = list(ids) if ids is not None else assign_ids(cases)
    # a metric searching a reference set settles its search's breadth for this call (measured on its outputs):
    # that is done on this call's own copy, so calls running at once with one metric object keep their own.
    # Other metrics are used as given (a caller may count or inspect what its own metric object did).
    metrics = [copy.copy(metric) if getattr(metric, "reference_set", None) is not None else metric
               for metric in metrics]
    bind_judges(metrics, index_dir, judge=judge)
    needs = collect_embedding_needs(cases, metrics)
    index = ReferenceIndex(index_dir) if index_dir is not None else None
    counts = EmbeddingCounts()
    tables: dict[str, VectorTable] = {}
    stored: dict[str, VectorTable] = {}  # with an index: reference sets' texts, stored there, costs only
    failed: dict[str, str] = {}
    dims: dict[str, int] = {}
    for namespace, need in needs.items():
        index_only = [t for t in need.references if t in need.index_only] if index is not None else []
        references = [t for t in need.references if t not in need.index_only] if index_only else list(need.references)
        try:
            if index_only:  # a set's vectors are read from the index by its search, never held here
                only_table, only_counts = embed_references(need.provider, index_only, index, probe=False,
                                                           vectors=False)
                counts = counts.add(only_counts)
                stored[namespace] = need.share_costs(only_table)
            _report_embedding_stage(need.provider, references, need.outputs, index)
            table, text_counts = embed_texts(need.provider, references, list(need.outputs), index)
        except CredentialsError:
            raise
        except ProviderError as exc:
            failed[namespace] = str(exc)
            continue
        counts = counts.add(text_counts)
        tables[namespace] = need.share_costs(table)
        if len(table):
            dims[namespace] = int(table.vectors.shape[1])
    set_infos = prepare_reference_searches(metrics, tables, needs, index, len(cases), stored)

    def score(rows: Sequence[int]) -> list[list[MetricResult]]:
        """Every metric's results for the cases at ``rows`` (consecutive), scored in this thread."""
        batch = cases[rows[0] : rows[-1] + 1]
        per_metric = []
        for metric in metrics:
            per_metric.append(score_metric_batch(metric, batch, tables, failed))
            if progress:
                progress(len(batch))
        return per_metric

    _progress.stage(f"scoring {len(cases):,} case{'' if len(cases) == 1 else 's'} × {len(metrics)} "
                    f"metric{'' if len(metrics) == 1 else 's'}", len(cases) * len(metrics))
    # the flow's engine, one batch at a time: a batch's per-metric lists are folded into case results before
    # the next is scored, and the collector is tuned while scoring (stream.gc_frozen)
    test_results: list[TestCaseResult] = []
    with gc_frozen():
        for rows, per_metric in stream_batches(chunks(range(len(cases)), max(1, batch_size)), score_directly(score), 1):
            test_results.extend(case_results(rows, cases, ids, per_metric))
    result = EvaluationResult(
        test_results=test_results, summary=summarize(test_results, {m.name: m.threshold for m in metrics}, counts),
        embedding_models=model_infos(needs, dims), reference_sets=set_infos or [],
    )
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
) -> EvaluationResult:
    """Evaluate ``test_cases`` with ``metrics`` (as eval-ai-library's: ``asyncio.run(evaluate(cases, metrics))``).

    Runs :func:`evaluate_sync` in a worker thread. Arguments, result and errors as :func:`evaluate_sync`.
    """
    return await asyncio.to_thread(
        evaluate_sync, test_cases, metrics, index_dir=index_dir, batch_size=batch_size, verbose=verbose,
        judge=judge,
    )
