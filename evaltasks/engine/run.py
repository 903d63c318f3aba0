"""Planning and finishing a suite run, without Prefect (the flow and the CLI share these steps).

:func:`plan_run` does every check that can fail on user input — suite, dataset, each case against each
metric, provider credentials — before anything is scored, so the CLI can exit 2 fast; the CLI hands that plan
to the flow as its ``plan`` parameter (a :class:`PlannedRun`) so nothing is parsed twice.
:class:`RunOptions` (declared in :mod:`evaltasks.engine.options`) holds what a run is asked to do.
:mod:`evaltasks.engine.lifecycle` holds the rest of a run's life (the gate, the reports, the history).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

from evaltasks.engine.baseline import load_baseline
from evaltasks.engine.evaluate import collect_embedding_needs, validate_cases
from evaltasks.engine.generation import filled_fields
from evaltasks.engine.history import path_slug
from evaltasks.engine.options import DEFAULT_OUTPUT_ROOT
from evaltasks.engine.options import RunOptions as RunOptions  # its import path before engine.options
from evaltasks.errors import DatasetError, Problem
from evaltasks.inputs.datasets import LoadedDataset, load_dataset
from evaltasks.inputs.suite import LoadedSuite, load_suite
from evaltasks.metrics.base import EmbeddingNeed


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
    use_targets: bool = True  # plan_run's ``use_targets``: the suite's targets generate the outputs
    skipped_targets: dict[str, str] = field(default_factory=dict)  # name -> why (credentials missing, skipped)

    def unchanged(self) -> bool:
        """Whether none of the suite's files (suite, dataset, reference sets) changed since they were read:
        same size, modification time and inode as :attr:`input_state`, taken before reading."""
        return bool(self.input_state) and file_state(self.suite.input_files()) == self.input_state

    @property
    def targets(self) -> list[Any]:
        """The targets this run generates its outputs with (the suite's ``target:``/``targets:``; none with
        ``--no-target``, docs/targets.md#targets). A target skipped for missing credentials is left out while
        another runs, so the first target that runs is the reference (the GitHub Action does the same); when
        every target is skipped they all stay, and their cases are reported skipped."""
        targets = list(getattr(self.suite, "targets", None) or []) if self.use_targets else []
        return [t for t in targets if t.name not in self.skipped_targets] or targets

    @property
    def samples(self) -> int:
        """Cases scored per dataset row: the targets' samples (``repeat``) summed; 1 without targets."""
        from evaltasks.engine.generation import samples_of

        return sum(samples_of(t) for t in self.targets) or 1

    @property
    def work_items(self) -> int:
        """Case × metric results the run will produce (for progress bars)."""
        return len(self.dataset.cases) * self.samples * len(self.suite.metrics)


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


def plan_run(
    suite_path: str | Path,
    *,
    skip_missing_credentials: bool = False,
    planned: RunPlan | None = None,
    use_targets: bool = True,
) -> RunPlan:
    """Load and validate a suite and its dataset, and check every case against every metric.

    ``skip_missing_credentials``: metrics whose provider credentials are missing are skipped (see
    :func:`~evaltasks.inputs.suite.load_suite`) instead of raising CredentialsError.
    ``planned``: a plan this process made earlier (``evaltasks run`` validates before Prefect starts and hands
    its plan to the flow, :class:`PlannedRun`): returned as it is when it is of the same suite file, loaded with
    the same ``skip_missing_credentials``, and none of its files changed since they were read
    (:meth:`RunPlan.unchanged`); otherwise the files are parsed again.
    ``use_targets``: False (``--no-target``): the suite's targets are not run, the dataset's outputs are graded;
    with targets, the fields a target fills (``actual_output``…) are not required of the dataset.

    Raises:
        ConfigError: the suite is invalid.
        DatasetError: the dataset is invalid, or cases lack what a metric needs (each problem located).
        CredentialsError: a provider's credentials are missing.
    """
    if (
        planned is not None
        and planned.skip_missing_credentials == skip_missing_credentials
        and planned.use_targets == use_targets
        and planned.suite.path == Path(suite_path).resolve()
        and planned.unchanged()
    ):
        return planned
    suite_state = file_state([Path(suite_path).resolve()])
    suite = load_suite(suite_path, skip_missing_credentials=skip_missing_credentials)
    # the state of the files before the dataset is read (reference sets were read by load_suite just now)
    input_state = suite_state + file_state(suite.input_files()[1:])
    source = os.path.normpath(suite.path.parent / suite.suite.dataset.path)
    generated = use_targets and bool(getattr(suite, "targets", None))
    try:
        dataset = load_dataset(  # the rows' type problems and the metrics' (validate_case) in one DatasetError
            suite.suite.dataset,
            suite.path.parent,
            check=lambda cases, locations: _checked(
                validate_cases(cases, [*suite.metrics, *suite.run_metrics], source=source, locations=locations)
                if _fitting(suite, cases, locations, generated)
                else [],
                generated,
                filled_fields(suite.targets, suite.suite.perturbations) if generated else None,
            ),
            generated=generated,
        )
    except DatasetError as exc:
        if use_targets or not getattr(suite, "targets", None):
            raise
        raise _without_targets(exc) from None
    skipped_targets = _check_targets(suite, dataset, skip_missing_credentials) if generated else {}
    needs = collect_embedding_needs(dataset.cases, suite.metrics)
    return RunPlan(
        suite=suite,
        dataset=dataset,
        needs=needs,
        input_state=input_state,
        skip_missing_credentials=skip_missing_credentials,
        use_targets=use_targets,
        skipped_targets=skipped_targets,
    )


def _without_targets(exc: DatasetError) -> DatasetError:
    """``exc`` of a ``--no-target`` run whose dataset lacks outputs, its ``actual_output`` problems saying why the
    column is needed: the suite has a target, and ``--no-target`` grades the dataset's own outputs instead."""
    hint = " (--no-target grades the dataset's own actual_output instead of running the suite's target)"
    problems = [
        Problem(p.source, p.location, p.field, p.message + hint) if p.field == "actual_output" else p
        for p in exc.problems
    ]
    return DatasetError(problems, complete=exc.complete)


def _check_targets(suite: LoadedSuite, dataset: LoadedDataset, skip_missing_credentials: bool) -> dict[str, str]:
    """Before any request: the variables the targets' templates use that the dataset does not provide, and the
    targets whose credentials are missing. Returns the targets to skip (name -> why), each with a warning added
    to ``suite.warnings``, when ``skip_missing_credentials``.

    Raises:
        ConfigError: a template variable no case field or dataset column provides (located in the suite).
        CredentialsError: a target's credentials are missing (unless ``skip_missing_credentials``).
    """
    from evaltasks.errors import ConfigError, CredentialsError
    from evaltasks.inputs._suite_targets import variable_problems

    single = suite.suite.target is not None
    problems = variable_problems(suite.targets, dataset.cases, str(suite.path), single=single)
    if problems:
        raise ConfigError(problems)
    skipped: dict[str, str] = {}
    for target in suite.targets:
        check = getattr(target, "missing_credentials", None)
        reason = check() if callable(check) else None
        if reason is None:
            continue
        if not skip_missing_credentials:
            raise CredentialsError(reason)
        skipped[target.name] = f"target {target.name} skipped: {reason}"
    every = len(skipped) == len(suite.targets)
    for why in skipped.values():  # RunPlan.targets leaves a skipped target out while another one runs
        left = "its cases are skipped" if every else "left out of the run"
        suite.warnings.append(f"{why} ({left}; --skip-missing-credentials)")
    return skipped


def _fitting(suite: LoadedSuite, cases: Sequence[Any], locations: Sequence[str], generated: bool) -> bool:
    """True when the dataset's kind of cases fits the suite: no target on conversations, and each metric's
    ``case_kind`` fits (docs/conversations.md#metrics).

    Raises:
        ConfigError: a target on a conversation dataset (at ``target``), or a metric whose ``case_kind`` does not
            fit the cases (at ``metrics[i]``, naming the metric and the first row that does not fit).
    """
    from evaltasks.engine.pipeline import TARGET_ON_CONVERSATIONS
    from evaltasks.engine.validation import case_kind_problems
    from evaltasks.errors import ConfigError, Problem
    from evaltasks.test_case import ConversationalEvalTestCase

    source = str(suite.path)
    if generated and any(isinstance(case, ConversationalEvalTestCase) for case in cases):
        where = "target" if suite.suite.target is not None else "targets"
        raise ConfigError([Problem(source, where, "", TARGET_ON_CONVERSATIONS + "; --no-target grades them")])
    kinds = case_kind_problems(cases, suite.metrics, locations)
    if kinds:
        raise ConfigError([Problem(source, f"metrics[{m}]", "metric", why) for m, why in kinds])
    return True


def _checked(problems: list[Any], generated: bool, fields: frozenset[str] | None = None) -> list[Any]:
    """``problems`` of the dataset's cases; with targets (``generated``), those about a field a target fills
    (``fields``: :func:`~evaltasks.engine.generation.filled_fields`) left out
    (:func:`~evaltasks.engine.generation.drop_generated_problems`)."""
    if not generated:
        return problems
    from evaltasks.engine.generation import drop_generated_problems

    return drop_generated_problems(problems, *([fields] if fields is not None else []))


@dataclass(frozen=True)
class ParsedBaseline:
    """A baseline results.json read once (:func:`read_baseline`): its resolved ``path``, parsed ``data`` and
    the :func:`file_state` of the file before it was read."""

    path: Path
    data: dict[str, Any]
    state: tuple[Any, ...]


def read_baseline(path: str | Path) -> ParsedBaseline:
    """:func:`~evaltasks.engine.baseline.load_baseline` of ``path``, with what :func:`load_parsed_baseline`
    needs to reuse it. Raises InputError as ``load_baseline`` does."""
    source = Path(path).resolve()
    state = file_state([source])
    return ParsedBaseline(source, load_baseline(path), state)


class PlannedRun(BaseModel):
    r"""The flow's ``plan`` parameter: a plan (and baseline) the caller already parsed in this process, so that
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
        planned = cls(
            suite_path=str(plan.suite.path),
            suite_sha256=plan.suite.sha256,
            cases=len(plan.dataset.cases),
            metrics=len(plan.suite.metrics),
        )
        private = planned.__pydantic_private__
        assert private is not None  # a model with private attributes has them
        private.update(_plan=plan, _baseline=baseline)
        return planned

    def take(self) -> RunPlan | None:
        """The plan handed over (None once taken, or when read back from JSON); pass it to :func:`plan_run`'s
        ``planned``, which checks that its files are unchanged."""
        plan = self._plan
        self._plan = None
        return plan

    def take_baseline(self) -> ParsedBaseline | None:
        """The parsed baseline handed over (None once taken); for :func:`load_parsed_baseline`."""
        baseline = self._baseline
        self._baseline = None
        return baseline


def estimate_cost(
    plan: RunPlan,
    index_dir: str | Path | None,
    *,
    refresh: bool = False,
    cached: Mapping[str, Collection[int]] | None = None,
) -> float:
    """Estimated US dollars of a run: its targets' generations (:meth:`~evaltasks.targets.base.Target.estimate_cost`
    of every case and sample, docs/targets.md#the-generate-stage), the references and outputs not yet in the
    index, per provider, plus the judge requests of its judge metrics (:func:`~evaltasks.engine.evaluate.estimate_judge_cost`; answers already in
    the store ``<index>/judgements`` are free unless ``refresh``, ``--no-cache``, and so are the case rows
    ``cached`` names per judge metric: results Prefect's task cache holds, :func:`evaltasks.tasks.task_cached_rows`)."""
    from evaltasks.engine.generation import estimate_generation_cost
    from evaltasks.index import ReferenceIndex, default_index_dir
    from evaltasks.judges.binding import bind_judges, estimate_judge_cost

    index = ReferenceIndex(index_dir)
    running = [t for t in plan.targets if t.name not in plan.skipped_targets]
    generation = estimate_generation_cost(running, plan.dataset.cases)  # stored outputs counted too
    if bind_judges(plan.suite.metrics, index_dir or default_index_dir(), refresh=refresh):
        judged = estimate_judge_cost(plan.dataset.cases, plan.suite.metrics, cached=cached)
        total = generation + judged * plan.samples  # each target's samples are judged
    else:
        total = generation
    for need in plan.needs.values():
        if need.provider.estimate_cost(["x"]) == 0.0:
            continue  # free provider (local): no need to read the index
        total += need.provider.estimate_cost(index.missing_texts(need.provider, [*need.references, *need.outputs]))
    return total


def judge_price_warnings(plan: RunPlan) -> list[str]:
    """One warning per judge model of ``plan`` without a price (:func:`~evaltasks.engine.evaluate.unpriced_judge_models`):
    its costs are reported as $0; and one per chat target whose model has none (:func:`unpriced_target_models`).
    For the run's reports (results.json ``warnings``, summary.md, the PR comment)."""
    from evaltasks.judges.binding import unpriced_judge_models

    return [
        f"no price for judge model {model}: its costs count as $0 (undercounted) and --max-cost cannot limit "
        f"its spend; add judge: {{prices: {{{model}: {{input: …, output: …}}}}}} (US dollars per million tokens)"
        for model in unpriced_judge_models(plan.suite.metrics)
    ] + [
        f"no price for the chat target {name}'s model {model}: its costs are unknown (not counted) and --max-cost "
        f"cannot limit them; add prices: {{{model}: {{input: …, output: …}}}} to its chat block"
        for name, model in unpriced_target_models(plan)
    ]


def check_judge_prices(plan: RunPlan) -> None:
    """For ``--max-cost``: every judge model and every chat target's model of ``plan`` must have a price, or the
    budget could not limit it.

    Raises:
        InputError: a judge or target model has no price (one problem per model).
    """
    from evaltasks.errors import InputError, Problem
    from evaltasks.judges.binding import unpriced_judge_models

    problems = [
        Problem(
            "",
            "",
            "",
            f"--max-cost cannot limit judge model {model}: it has no price; add "
            f"judge: {{prices: {{{model}: {{input: …, output: …}}}}}} (US dollars per million "
            "tokens)",
        )
        for model in unpriced_judge_models(plan.suite.metrics)
    ]
    problems += [
        Problem(
            "",
            "",
            "",
            f"--max-cost cannot limit the chat target {name} (model {model}): it has no price; add "
            f"prices: {{{model}: {{input: …, output: …}}}} to its chat block (US dollars per million tokens)",
        )
        for name, model in unpriced_target_models(plan)
    ]
    if problems:
        raise InputError(problems, title=f"invalid --max-cost for {plan.suite.path}")


def unpriced_target_models(plan: RunPlan) -> list[tuple[str, str]]:
    """``(target name, model)`` of each chat target ``plan`` runs whose model has no price (in neither the built-in
    table nor its ``prices``: :func:`~evaltasks.judges.prices.resolve_price`): its cost is unknown and ``--max-cost``
    cannot limit it."""
    from evaltasks.judges.prices import resolve_price

    unpriced = []
    for target in plan.targets:
        if target.kind != "chat" or target.name in plan.skipped_targets:
            continue
        model, options = getattr(target, "model", ""), getattr(target, "options", None) or {}
        price = resolve_price(
            model,
            options.get("prices"),
            options.get("price_per_million_input_tokens"),
            options.get("price_per_million_output_tokens"),
        )
        if not price.known:
            unpriced.append((target.name, model))
    return unpriced


def index_plan(plan: RunPlan, index_dir: str | Path | None) -> dict[str, dict[str, int]]:
    """Embed every reference of ``plan`` into the index (``evaltasks index build``); counts per namespace."""
    from evaltasks.index import ReferenceIndex

    index = ReferenceIndex(index_dir)
    counts = {}
    for namespace, need in plan.needs.items():
        lookup = index.get_or_embed(need.provider, list(need.references))
        counts[namespace] = {"references_computed": lookup.computed, "references_reused": lookup.reused}
    return counts


def load_parsed_baseline(path: str | Path, parsed: ParsedBaseline | None = None) -> dict[str, Any]:
    """:func:`~evaltasks.engine.baseline.load_baseline` of ``path``, or ``parsed``'s data when ``parsed``
    (:func:`read_baseline`: the CLI validates ``--baseline`` before the run) is of the same file and the file
    is unchanged since it was read. Raises InputError as ``load_baseline`` does.
    """
    if parsed is not None and parsed.path == Path(path).resolve() and file_state([parsed.path]) == parsed.state:
        return parsed.data
    return load_baseline(path)
