"""The generate stage's bookkeeping: each target's generated cases, the cases whose generation failed, repeated
samples and their flaky verdicts, and each target's :class:`~evaltasks.results.TargetRun` (docs/targets.md#the-generate-stage).

The stage itself (submitting batches to an executor) is :func:`evaltasks.engine.pipeline.generate`; running a
target on one batch is :func:`evaltasks.targets.generate.generate_batch`. This module never imports Prefect.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from evaltasks.engine.progress import current_run_context
from evaltasks.errors import Problem
from evaltasks.results import EvaluationSummary, MetricResult, TargetRun, TestCaseResult
from evaltasks.test_case import EvalTestCase

if TYPE_CHECKING:
    from evaltasks.targets.base import Target
    from evaltasks.targets.early import EarlyGeneration

_T = TypeVar("_T")

GENERATED_FIELDS = frozenset(
    {
        "actual_output",
        "retrieval_context",
        "context",
        "tools_called",
        "execution_trace",
        "tool_calls",
        "agent_confidence",
    }
)
"""The case fields a target fills (:class:`~evaltasks.targets.base.TargetOutput`): before generation, a metric's
complaint about one of them is not a problem of the dataset (:func:`drop_generated_problems`)."""

STOP = threading.Event()
"""Set when the process is stopping (Ctrl+C, SIGTERM: :func:`stop_generation`): generation in this process ends
within a second, cases not started are skipped (what was stored stays stored)."""

GENERATE_BATCH = 64
"""Cases per ``generate-outputs`` unit of work at least (more for a target with a large ``max_concurrency``): the
target's own concurrency runs inside a batch, one batch in flight, and a batch is small enough that progress is
seen within seconds."""


def drop_generated_problems(problems: Sequence[Problem], fields: frozenset[str] = GENERATED_FIELDS) -> list[Problem]:
    """``problems`` without those about a field a target fills (``fields``, default :data:`GENERATED_FIELDS`;
    :func:`filled_fields`): a dataset run with a target needs no ``actual_output`` column (what the target returns
    is checked after generation, :func:`check_generated`)."""
    return [p for p in problems if p.field not in fields]


def filled_fields(targets: Sequence[Any], perturbations: Any = None) -> frozenset[str]:
    """The case fields the generate stage fills for ``targets``: :data:`GENERATED_FIELDS`, ``multi_outputs``
    when every target repeats (``repeat`` >= 2: :func:`fill_multi_outputs`), ``variants`` with the suite's
    ``perturbations`` (:mod:`evaltasks.engine.perturbation`)."""
    fields = set(GENERATED_FIELDS)
    if targets and all(samples_of(t) >= 2 for t in targets):
        fields.add("multi_outputs")
    if targets and perturbations is not None:
        fields.add("variants")
    return frozenset(fields)


def needs_field(metrics: Sequence[Any], name: str) -> bool:
    """Whether a metric of ``metrics`` lists ``name`` among its ``required_fields``."""
    return any(name in getattr(m, "required_fields", ()) for m in metrics)


def fill_multi_outputs(part: TargetCases) -> None:
    """Give every sample of each of ``part``'s cases (``part.samples`` >= 2 in a row) the case's outputs as
    ``multi_outputs``: those of its samples whose generation succeeded, in sample order
    (OutcomeConsistencyMetric; docs/metrics/reliability.md#outcomeconsistencymetric). Nothing with one sample."""
    k = part.samples
    if k < 2:
        return
    for start in range(0, len(part.cases), k):
        rows = range(start, start + k)
        outputs = [part.cases[i].actual_output for i in rows if i not in part.failed]
        for i in rows:
            part.cases[i] = part.cases[i].model_copy(update={"multi_outputs": outputs})


def samples_of(target: Target) -> int:
    """How many outputs ``target`` generates per case: its ``repeat`` (1 when it has none)."""
    repeat = getattr(target, "repeat", 1)
    return repeat if isinstance(repeat, int) and not isinstance(repeat, bool) and repeat >= 1 else 1


def sample_id(case_id: str, sample: int) -> str:
    """The id of sample ``sample`` (0-based) of a case: the case's id for the first, ``<id>~<n>`` (1-based)
    for the others, so a baseline with the same ``repeat`` pairs sample with sample."""
    return case_id if sample == 0 else f"{case_id}~{sample + 1}"


@dataclass
class TargetCases:
    """One target's part of a run: its generated cases, case after case, each case's samples together.

    Attributes:
        target: the target.
        cases: ``len(inputs) × samples`` cases with their outputs (a failed one keeps an empty ``actual_output``).
        ids: the cases' ids (:func:`sample_id`).
        failed: position in ``cases`` -> why its generation failed (the case's metrics are errored with it).
        samples: outputs per input case (``repeat``).
        requests: generations sent in this run; cached: outputs read from the output store.
        skipped: why the target was not run (its credentials are missing and the run skips what lacks them): every
            case's metrics are skipped with it; None: it ran.
    """

    target: Target
    cases: list[EvalTestCase]
    ids: list[str]
    failed: dict[int, str] = field(default_factory=dict)
    samples: int = 1
    requests: int = 0
    cached: int = 0
    skipped: str | None = None


@dataclass
class Generated:
    """The generate stage's result: each target's :class:`TargetCases`, in the targets' order."""

    parts: list[TargetCases]

    @property
    def cases(self) -> list[EvalTestCase]:
        """Every target's cases, target after target (what the later stages read)."""
        return [case for part in self.parts for case in part.cases]

    @property
    def ids(self) -> list[str]:
        """The ids of :attr:`cases` (repeated across targets)."""
        return [case_id for part in self.parts for case_id in part.ids]

    @property
    def failed(self) -> dict[int, str]:
        """Position in :attr:`cases` -> why its generation failed."""
        failed: dict[int, str] = {}
        offset = 0
        for part in self.parts:
            failed.update({offset + i: reason for i, reason in part.failed.items()})
            offset += len(part.cases)
        return failed

    @property
    def skipped(self) -> dict[int, str]:
        """Position in :attr:`cases` -> why its target was not run (its metrics are skipped)."""
        skipped: dict[int, str] = {}
        for part, (start, end) in zip(self.parts, self.bounds(), strict=True):
            if part.skipped is not None:
                skipped.update(dict.fromkeys(range(start, end), part.skipped))
        return skipped

    @property
    def spent(self) -> float:
        """US dollars this run's generations cost (stored outputs count 0), perturbed variants' included (once per
        case, though every sample carries them): the budget's starting spend."""
        return sum(
            case.generation.cost or 0.0
            for part in self.parts
            for case in part.cases
            if case.generation is not None and not case.generation.cached
        ) + sum(
            variant.generation.cost or 0.0
            for part in self.parts
            for case in part.cases
            if case.variants and (case.generation is None or case.generation.sample == 0)
            for variant in case.variants
            if variant.generation is not None and not variant.generation.cached
        )

    def bounds(self) -> list[tuple[int, int]]:
        """Each target's ``[start, end)`` positions in :attr:`cases`."""
        bounds, start = [], 0
        for part in self.parts:
            bounds.append((start, start + len(part.cases)))
            start += len(part.cases)
        return bounds


def check_generated(case: EvalTestCase, metrics: Sequence[Any]) -> str | None:
    """Why a generated ``case`` cannot be scored by ``metrics`` (a field a metric needs that the target did not
    return, e.g. ``retrieval_context``), or None. Only the fields a target fills are checked: the rest was
    validated with the dataset."""
    from evaltasks.engine.validation import validate_cases

    problems = [p for p in validate_cases([case], metrics) if p.field in GENERATED_FIELDS]
    if not problems:
        return None
    return "the target's output cannot be scored: " + "; ".join(f"field '{p.field}' {p.message}" for p in problems)


GENERATION_FAILED = "generation failed: "
"""How each errored metric's ``error`` starts when the case's target failed to produce its output (reports read it
to name the target's failure rather than the metrics')."""


def errored_results(reason: str, metrics: Sequence[Any]) -> list[MetricResult]:
    """One errored result per metric for a case whose generation failed with ``reason``."""
    return [MetricResult.errored(m.name, m.threshold, GENERATION_FAILED + reason) for m in metrics]


def skipped_results(reason: str, metrics: Sequence[Any]) -> list[MetricResult]:
    """One skipped result per metric for a case whose target was not run, for ``reason``."""
    return [MetricResult.skipped(m.name, m.threshold, reason) for m in metrics]


def flag_flaky(results: list[TestCaseResult], samples: int) -> list[TestCaseResult]:
    """``results`` (whole cases, each case's ``samples`` results together, as :func:`sample_id` orders them) with
    every metric whose verdict differs across a case's samples marked ``unstable`` in its ``evaluation_log`` on
    each sample (as a judge metric's unstable samples are: reports list the case as flaky). Results of one
    sample (``samples`` 1) are returned as they are."""
    if samples <= 1:
        return results
    out: list[TestCaseResult] = []
    for start in range(0, len(results), samples):
        group = results[start : start + samples]
        unstable = {
            name
            for name in (m.name for m in group[0].metrics)
            if len({m.success for r in group for m in r.metrics if m.name == name and m.score is not None}) > 1
        }
        if not unstable:
            out.extend(group)
            continue
        for r in group:
            metrics = [
                m.model_copy(update={"evaluation_log": {**m.evaluation_log, "unstable": True}})
                if m.name in unstable
                else m
                for m in r.metrics
            ]
            out.append(r.model_copy(update={"metrics": metrics}))
    return out


def flaky_ids(results: Iterable[TestCaseResult]) -> list[str]:
    """The ids (sample suffix dropped) of the cases some metric of which was marked unstable, in order, once."""
    ids: dict[str, None] = {}
    for r in results:
        if r.generation is not None and any(m.evaluation_log.get("unstable") is True for m in r.metrics):
            ids[r.id.rsplit("~", 1)[0] if r.generation.sample else r.id] = None
    return list(ids)


def _percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (not empty) by linear interpolation (numpy's default method)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


GENERATED_LISTED = 50
"""At most this many ids of the cases a run generated anew beside stored ones (``TargetRun.generated_cases``)."""


@dataclass
class TargetTally:
    """A target's generation figures folded from its case results as they stream by (:class:`TargetRun`'s)."""

    part: TargetCases
    latencies: list[float] = field(default_factory=list)
    cost: float = 0.0
    flaky: dict[str, None] = field(default_factory=dict)
    generated: dict[str, None] = field(default_factory=dict)

    def add(self, results: Iterable[TestCaseResult]) -> None:
        """Count a batch of this target's case results in."""
        for r in results:
            g = r.generation
            if g is None:
                continue
            if not g.cached and len(self.generated) < GENERATED_LISTED:
                self.generated[r.id.rsplit("~", 1)[0] if g.sample else r.id] = None
            if not g.cached and g.latency_ms is not None:
                self.latencies.append(g.latency_ms)
            if not g.cached and g.cost is not None:
                self.cost += g.cost
        self.flaky.update(dict.fromkeys(flaky_ids(results)))

    def run(self, summary: EvaluationSummary) -> TargetRun:
        """This target's :class:`TargetRun` with its ``summary`` (its cases only)."""
        target = self.part.target
        return TargetRun(
            name=target.name,
            kind=target.kind,
            fingerprint=target.fingerprint(),
            summary=summary,
            requests=self.part.requests,
            cached=self.part.cached,
            errored=len(self.part.failed),
            latency_ms_median=_percentile(self.latencies, 50) if self.latencies else None,
            latency_ms_p95=_percentile(self.latencies, 95) if self.latencies else None,
            cost=self.cost,
            samples=self.part.samples,
            flaky_cases=list(self.flaky),
            generated_cases=list(self.generated) if self.part.cached else [],
        )


def split_by_target(
    positions: Sequence[int], results: Sequence[TestCaseResult], bounds: Sequence[tuple[int, int]]
) -> Iterator[tuple[int, list[TestCaseResult]]]:
    """``results`` (at case ``positions``) grouped by the target whose ``bounds`` hold them: ``(target index,
    its results)`` in order."""
    groups: dict[int, list[TestCaseResult]] = {}
    for position, result in zip(positions, results, strict=True):
        for t, (start, end) in enumerate(bounds):
            if start <= position < end:
                groups.setdefault(t, []).append(result)
                break
    yield from sorted(groups.items())


def estimate_generation_cost(targets: Sequence[Target], cases: Sequence[EvalTestCase]) -> float:
    """US dollars generating ``cases`` with ``targets`` may cost at most (each target's
    :meth:`~evaltasks.targets.base.Target.estimate_cost` per case, times its ``repeat``); stored outputs are
    counted too (the estimate does not read the output store)."""
    return sum(samples_of(t) * sum(t.estimate_cost(case) for case in cases) for t in targets)


def generate_outputs(
    target: Target,
    cases: Sequence[EvalTestCase],
    *,
    index_dir: str | None = None,
    refresh: bool = False,
    samples: int = 1,
) -> list[Any]:
    """Run ``target`` on ``cases`` (``samples`` outputs each, a case's samples in a row), through the output
    store of ``index_dir`` (None: none; ``refresh``: stored outputs not read): the generated cases
    (:class:`~evaltasks.targets.generate.GeneratedCase`: ``case`` with its output, or ``error``). The plain twin
    of the ``generate-outputs`` task (:func:`evaltasks.tasks.generate_outputs`); pass their ``case``\\ s to
    :func:`~evaltasks.engine.evaluate.evaluate_sync` to score them.

    Raises:
        CredentialsError: the target rejected the credentials (HTTP 401).
    """
    from evaltasks.targets.generate import generate_batch

    store = None
    if index_dir is not None:
        from evaltasks.targets.store import OutputStore

        store = OutputStore.in_index_dir(index_dir)
    early = current_run_context().early_generation  # the calls started while Prefect started, in this process
    return list(
        generate_batch(target, list(cases), store=store, refresh=refresh, samples=samples, stop=STOP, early=early)
    )


def start_early_generation(plan: Any, index_dir: str | None, *, refresh: bool) -> EarlyGeneration | None:
    """Start calling ``plan``'s targets (a :class:`~evaltasks.engine.run.RunPlan`; skipped targets left out) on its
    cases now, through the output store of ``index_dir`` (``refresh``: stored outputs not read), for the run's
    generate stage to take (:mod:`evaltasks.targets.early`; hand it over in the run's
    :class:`~evaltasks.engine.progress.RunContext` ``early_generation``). None without a target to run. Close it
    when the run ends.

    With ``perturbations`` and a metric that reads ``variants``, only the first target's calls start: the stage
    generates a target's perturbed variants itself, after its cases, and the next target's early calls would run
    beside them (a callable with ``max_concurrency: 1`` called twice at once when two targets share it).
    """
    targets = [t for t in plan.targets if t.name not in plan.skipped_targets]
    if plan.suite.suite.perturbations is not None and needs_field(plan.suite.metrics, "variants"):
        targets = targets[:1]
    if not targets or not plan.dataset.cases:
        return None
    from evaltasks.targets.early import EarlyGeneration
    from evaltasks.targets.store import OutputStore

    resume_generation()  # a stop of an earlier run in this process is not this run's
    store = None if index_dir is None else OutputStore.in_index_dir(index_dir)
    samples = [samples_of(t) for t in targets]
    early = EarlyGeneration(targets, plan.dataset.cases, samples, store=store, refresh=refresh, stop=STOP)
    early.start()
    return early


class TargetTallies:
    """Each target's summary and :class:`TargetRun` figures, folded from a streamed run's batches (the flow keeps
    no case results: :func:`evaltasks.engine.pipeline.target_runs` is the in-memory twin).

    Args:
        generated: the generate stage's result (which positions are whose).
        thresholds: metric name -> threshold, in metric order.
        clusters, cluster_column: the dataset's ``dataset.cluster`` values in the dataset's case order and the
            column's name (each sample of a case in the case's cluster), for cluster-bootstrap intervals.
    """

    def __init__(
        self,
        generated: Generated,
        thresholds: dict[str, float],
        clusters: Sequence[str | None] | None = None,
        cluster_column: str | None = None,
    ) -> None:
        from evaltasks.engine.summary import SummaryBuilder

        self.bounds = generated.bounds()
        self.tallies = [TargetTally(part) for part in generated.parts]
        by_id = None
        if clusters is not None:  # the samples' ids -> their case's cluster (ids are the same for every target)
            part = generated.parts[0]
            by_id = {case_id: clusters[i // part.samples] for i, case_id in enumerate(part.ids)}
            for other in generated.parts[1:]:
                by_id.update({case_id: clusters[i // other.samples] for i, case_id in enumerate(other.ids)})
        self.builders = [
            SummaryBuilder(thresholds, clusters=by_id, cluster_column=cluster_column) for _ in generated.parts
        ]

    def add(self, rows: Sequence[int], results: Sequence[TestCaseResult]) -> None:
        """Fold in a batch's ``results`` at case positions ``rows``."""
        for t, group in split_by_target(rows, results, self.bounds):
            self.tallies[t].add(group)
            self.builders[t].add(group)

    def finish(self, counts: Any = None) -> list[TargetRun]:
        """One :class:`TargetRun` per target, its summary with the run's embedding ``counts``."""
        return [tally.run(builder.finish(counts)) for tally, builder in zip(self.tallies, self.builders, strict=True)]


def stop_generation() -> None:
    """Stop every generation running in this process (:data:`STOP`): called when the run is interrupted. A later
    run in the same process (a server's) starts with :func:`resume_generation`."""
    STOP.set()


def interruptible(work: Callable[[], _T]) -> _T:
    """``work()`` run in a thread of its own while this thread waits for it: a KeyboardInterrupt (Ctrl+C) in this
    thread stops every generation of the process (:func:`stop_generation`: the target's calls are abandoned
    within a second) and is raised at once, instead of after the calls in flight finish. What ``work`` raises is
    raised here."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="evaltasks-generate", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.25)
    except BaseException:
        stop_generation()
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def resume_generation() -> None:
    """Clear :data:`STOP` before a run generates (a process that hosts several runs)."""
    STOP.clear()
