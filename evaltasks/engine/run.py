"""Planning and finishing a suite run, without Prefect (the flow and the CLI share these steps).

:func:`plan_run` does every check that can fail on user input — suite, dataset, each case against each
metric, provider credentials — before anything is scored, so the CLI can exit 2 fast; the CLI hands that plan
to the flow as its ``plan`` parameter (a :class:`PlannedRun`) so nothing is parsed twice.
:class:`RunOptions` holds what a run is asked to do (the flow's parameters besides the suite).
:func:`finish_run` applies the gate and writes ``results.json``, ``junit.xml`` and ``summary.md``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

from evaltasks.engine.compare import DEFAULT_TOLERANCE, Comparison, load_baseline
from evaltasks.inputs.datasets import LoadedDataset, load_dataset
from evaltasks.engine.evaluate import collect_embedding_needs, validate_cases
from evaltasks.engine.history import path_slug
from evaltasks.metrics.base import EmbeddingNeed
from evaltasks.results import EvaluationResult, budget_message
from evaltasks.inputs.suite import LoadedSuite, load_suite


@dataclass
class RunPlan:
    """A validated run: suite, dataset and the embedding work it needs.

    Attributes:
        suite: the loaded suite with its metric instances.
        dataset: the loaded dataset (cases, ids, locations).
        needs: provider namespace -> unique references and outputs to embed.
    """

    suite: LoadedSuite
    dataset: LoadedDataset
    needs: dict[str, EmbeddingNeed] = field(default_factory=dict)
    input_state: tuple[Any, ...] = ()  # file_state of suite.input_files() before they were read
    skip_missing_credentials: bool = False  # how the suite was loaded (plan_run's argument)

    def unchanged(self) -> bool:
        """Whether none of the suite's files (suite, dataset, reference sets) changed since they were read:
        same size, modification time and inode as :attr:`input_state`, taken before reading."""
        return bool(self.input_state) and file_state(self.suite.input_files()) == self.input_state

    @property
    def work_items(self) -> int:
        """Case × metric results the run will produce (for progress bars)."""
        return len(self.dataset.cases) * len(self.suite.metrics)


DEFAULT_OUTPUT_ROOT = "eval-results"


def default_output_dir(suite_name: str) -> Path:
    """The reports directory of a suite when none is given: ``eval-results/<suite name>`` (relative).

    One directory per suite, so running two suites keeps both reports. The name is made safe for a path by
    :func:`~evaltasks.engine.history.path_slug`: every run of characters other than letters, digits (any script:
    ``оценка`` stays), ``_``, ``.`` and ``-`` becomes ``-``, leading and trailing dots and dashes are dropped (so
    ``..`` cannot climb out), and at most 100 characters and 255 bytes are kept (cut between characters); a name
    with nothing left is ``suite``. E.g. ``"TruthfulQA / davinci"`` -> ``eval-results/TruthfulQA-davinci``.
    """
    return Path(DEFAULT_OUTPUT_ROOT) / path_slug(suite_name)


def file_state(paths: Iterable[Path]) -> tuple[Any, ...]:
    """``(path, size, mtime_ns, inode)`` of each file; ``None`` in place of a file that cannot be read. Two
    equal states: the files were not changed or replaced in between (as far as the file system can tell)."""
    state: list[Any] = []
    for path in paths:
        try:
            st = os.stat(path)
            state.append((str(path), st.st_size, st.st_mtime_ns, st.st_ino))
        except OSError:
            state.append(None)
    return tuple(state)


def plan_run(suite_path: str | Path, *, skip_missing_credentials: bool = False,
             planned: RunPlan | None = None) -> RunPlan:
    """Load and validate a suite and its dataset, and check every case against every metric.

    ``skip_missing_credentials``: metrics whose provider credentials are missing are skipped (see
    :func:`~evaltasks.inputs.suite.load_suite`) instead of raising CredentialsError.
    ``planned``: a plan this process made earlier (``evaltasks run`` validates before Prefect starts and hands
    its plan to the flow, :class:`PlannedRun`): returned as it is when it is of the same suite file, loaded with
    the same ``skip_missing_credentials``, and none of its files changed since they were read
    (:meth:`RunPlan.unchanged`); otherwise the files are parsed again.

    Raises:
        ConfigError: the suite is invalid.
        DatasetError: the dataset is invalid, or cases lack what a metric needs (each problem located).
        CredentialsError: a provider's credentials are missing.
    """
    if (planned is not None and planned.skip_missing_credentials == skip_missing_credentials
            and planned.suite.path == Path(suite_path).resolve() and planned.unchanged()):
        return planned
    suite_state = file_state([Path(suite_path).resolve()])
    suite = load_suite(suite_path, skip_missing_credentials=skip_missing_credentials)
    # the state of the files before the dataset is read (reference sets were read by load_suite just now)
    input_state = suite_state + file_state(suite.input_files()[1:])
    source = os.path.normpath(suite.path.parent / suite.suite.dataset.path)
    dataset = load_dataset(  # the rows' type problems and the metrics' (validate_case) in one DatasetError
        suite.suite.dataset, suite.path.parent,
        check=lambda cases, locations: validate_cases(cases, suite.metrics, source=source, locations=locations),
    )
    needs = collect_embedding_needs(dataset.cases, suite.metrics)
    return RunPlan(suite=suite, dataset=dataset, needs=needs, input_state=input_state,
                   skip_missing_credentials=skip_missing_credentials)


@dataclass(frozen=True)
class ParsedBaseline:
    """A baseline results.json read once (:func:`read_baseline`): its resolved ``path``, parsed ``data`` and
    the :func:`file_state` of the file before it was read."""

    path: Path
    data: dict[str, Any]
    state: tuple[Any, ...]


def read_baseline(path: str | Path) -> ParsedBaseline:
    """:func:`~evaltasks.engine.compare.load_baseline` of ``path``, with what :func:`load_parsed_baseline`
    needs to reuse it. Raises InputError as ``load_baseline`` does."""
    source = Path(path).resolve()
    state = file_state([source])
    return ParsedBaseline(source, load_baseline(path), state)


class PlannedRun(BaseModel):
    """The flow's ``plan`` parameter: a plan (and baseline) the caller already parsed in this process, so that
    the flow does not parse the files again (``evaltasks run`` validates everything before Prefect starts).

    Prefect records flow parameters as JSON on its server (capped at 512 KiB), and a deployment or a retried
    flow run passes JSON: what is recorded is this model's fields only, a short description (the suite file,
    its sha256, the number of cases and metrics); the parsed objects are private and never serialized. Read
    back from JSON it holds nothing, and the flow plans from its ``suite_path`` as without it.

    Build it with :meth:`of`; the flow :meth:`take`\ s the plan and the baseline once each, so the run that
    uses them is the only holder of the dataset.
    """

    model_config = ConfigDict(frozen=True)

    suite_path: str
    suite_sha256: str = ""
    cases: int = 0
    metrics: int = 0
    _plan: RunPlan | None = PrivateAttr(default=None)
    _baseline: ParsedBaseline | None = PrivateAttr(default=None)

    @classmethod
    def of(cls, plan: RunPlan, baseline: ParsedBaseline | None = None) -> PlannedRun:
        """A hand-over of ``plan`` (from :func:`plan_run`) and the run's parsed ``baseline`` (if any)."""
        planned = cls(suite_path=str(plan.suite.path), suite_sha256=plan.suite.sha256,
                      cases=len(plan.dataset.cases), metrics=len(plan.suite.metrics))
        planned.__pydantic_private__.update(_plan=plan, _baseline=baseline)
        return planned

    def take(self) -> RunPlan | None:
        """The plan handed over (None once taken, or when read back from JSON); pass it to :func:`plan_run`'s
        ``planned``, which checks that its files are unchanged."""
        plan, self.__pydantic_private__["_plan"] = self._plan, None
        return plan

    def take_baseline(self) -> ParsedBaseline | None:
        """The parsed baseline handed over (None once taken); for :func:`load_parsed_baseline`."""
        baseline, self.__pydantic_private__["_baseline"] = self._baseline, None
        return baseline


@dataclass(frozen=True)
class RunOptions:
    """What a suite run is asked to do besides which suite: the ``evaluate-suite`` flow's other parameters
    (described there, :func:`evaltasks.flows.evaluate_suite.evaluate_suite`), as ``evaltasks run``'s options
    set them (README, "CLI"). One object from the CLI through the flow to the engine."""

    output_dir: str = DEFAULT_OUTPUT_ROOT
    index_dir: str | None = None
    batch_size: int | None = None  # cases per score-batch task run (None: evaltasks.engine.stream.auto_batch_size)
    cache: bool = True
    reports_url: str | None = None
    concurrency_limit: str | None = None
    skip_missing_credentials: bool = False
    baseline: str | None = None
    regression_tolerance: float = DEFAULT_TOLERANCE
    baseline_label: str | None = None
    max_cost: float | None = None
    history_dir: str | None = None

    def flow_parameters(self) -> dict[str, Any]:
        """The options as the flow's keyword parameters: ``evaluate_suite(suite_path, **options.flow_parameters())``."""
        return dataclasses.asdict(self)


def estimate_cost(plan: RunPlan, index_dir: str | Path | None, *, refresh: bool = False,
                  cached: Mapping[str, Collection[int]] | None = None) -> float:
    """Estimated US dollars of a run: the references and outputs not yet in the index, per provider, plus the
    judge requests of its judge metrics (:func:`~evaltasks.engine.evaluate.estimate_judge_cost`; answers already in
    the store ``<index>/judgements`` are free unless ``refresh``, ``--no-cache``, and so are the case rows
    ``cached`` names per judge metric: results Prefect's task cache holds, :func:`evaltasks.tasks.task_cached_rows`)."""
    from evaltasks.judges.binding import bind_judges, estimate_judge_cost
    from evaltasks.index import ReferenceIndex, default_index_dir

    index = ReferenceIndex(index_dir)
    if bind_judges(plan.suite.metrics, index_dir or default_index_dir(), refresh=refresh):
        total = estimate_judge_cost(plan.dataset.cases, plan.suite.metrics, cached=cached)
    else:
        total = 0.0
    for need in plan.needs.values():
        if need.provider.estimate_cost(["x"]) == 0.0:
            continue  # free provider (local): no need to read the index
        total += need.provider.estimate_cost(index.missing_texts(need.provider, [*need.references, *need.outputs]))
    return total


def judge_price_warnings(plan: RunPlan) -> list[str]:
    """One warning per judge model of ``plan`` without a price (:func:`~evaltasks.engine.evaluate.unpriced_judge_models`):
    its costs are reported as $0. For the run's reports (results.json ``warnings``, summary.md, the PR comment)."""
    from evaltasks.judges.binding import unpriced_judge_models

    return [f"no price for judge model {model}: its costs count as $0 (undercounted) and --max-cost cannot limit "
            f"its spend; add judge: {{prices: {{{model}: {{input: …, output: …}}}}}} (US dollars per million tokens)"
            for model in unpriced_judge_models(plan.suite.metrics)]


def check_judge_prices(plan: RunPlan) -> None:
    """For ``--max-cost``: every judge model of ``plan`` must have a price, or the budget could not limit it.

    Raises:
        InputError: a judge model has no price (one problem per model).
    """
    from evaltasks.errors import InputError, Problem
    from evaltasks.judges.binding import unpriced_judge_models

    models = unpriced_judge_models(plan.suite.metrics)
    if models:
        raise InputError([Problem("", "", "", f"--max-cost cannot limit judge model {model}: it has no price; add "
                                  f"judge: {{prices: {{{model}: {{input: …, output: …}}}}}} (US dollars per million "
                                  "tokens)") for model in models], title=f"invalid --max-cost for {plan.suite.path}")


def index_plan(plan: RunPlan, index_dir: str | Path | None) -> dict[str, dict[str, int]]:
    """Embed every reference of ``plan`` into the index (``evaltasks index build``); counts per namespace."""
    from evaltasks.index import ReferenceIndex

    index = ReferenceIndex(index_dir)
    counts = {}
    for namespace, need in plan.needs.items():
        lookup = index.get_or_embed(need.provider, list(need.references))
        counts[namespace] = {"references_computed": lookup.computed, "references_reused": lookup.reused}
    return counts


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
    """
    summary = result.summary
    if nothing_evaluated(result) or summary.cases == 0 or summary.budget_skipped:
        return False
    if fail_on not in ("min_pass_rate", "regression", "either"):
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


def gate_message(result: EvaluationResult, gate: Any, comparison: Comparison | None) -> str | None:
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


def load_parsed_baseline(path: str | Path, parsed: ParsedBaseline | None = None) -> dict[str, Any]:
    """:func:`~evaltasks.engine.compare.load_baseline` of ``path``, or ``parsed``'s data when ``parsed``
    (:func:`read_baseline`: the CLI validates ``--baseline`` before the run) is of the same file and the file
    is unchanged since it was read. Raises InputError as ``load_baseline`` does.
    """
    if parsed is not None and parsed.path == Path(path).resolve() and file_state([parsed.path]) == parsed.state:
        return parsed.data
    return load_baseline(path)
