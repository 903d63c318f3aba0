"""Result models: one metric on one test case, one test case, and a whole evaluation.

Statuses (the same words everywhere, ``results.json`` included):

- ``passed``: scored and ``score >= threshold``;
- ``failed``: scored and ``score < threshold``;
- ``errored``: a run-time failure (a provider still failing after its retries, or a metric raising on the
  case: ``ExceptionType: message``); ``error`` says why;
- ``skipped``: not evaluated (e.g. missing credentials on a fork); ``reason`` says why.

A test case is ``errored`` if any metric errored, else ``failed`` if any failed, else ``passed`` if any
passed, else ``skipped``. The pass rate is passed cases / evaluated cases, where skipped cases are not
evaluated: a metric skipped for missing credentials (a pull request from a fork) is excluded from the gate.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from evaltasks._redact import redact
from evaltasks.test_case import Generation, Variant

_Model = TypeVar("_Model", bound=BaseModel)

Status = Literal["passed", "failed", "errored", "skipped"]
STATUS_CODES: dict[str, int] = {"passed": 0, "failed": 1, "errored": 2, "skipped": 3}
"""One byte per status in the compact per-case arrays of :mod:`evaltasks.engine.summary`."""

_set_attribute = object.__setattr__


def _construct(cls: type[_Model], values: dict[str, Any]) -> _Model:
    """An instance of the pydantic model ``cls`` holding ``values`` (every field, already checked), unvalidated.

    What ``BaseModel.model_construct`` does (the four attributes it sets, pydantic 2.x) without its per-field
    loop over aliases and defaults: ~0.6 µs instead of ~10 µs, which is a fifth of a 100,000-case
    LengthCheck run. Only for models without aliases, extra fields, private attributes or
    ``model_post_init`` (checked once per class by :func:`_check_constructible`). ``values`` must name every
    field, in declaration order (the two callers below; tests compare what they build with validated models).
    """
    model = cls.__new__(cls)
    _set_attribute(model, "__dict__", values)
    _set_attribute(model, "__pydantic_fields_set__", set(values))
    _set_attribute(model, "__pydantic_extra__", None)
    _set_attribute(model, "__pydantic_private__", None)
    return model


def _check_constructible(cls: type[BaseModel]) -> None:
    """Raise TypeError if :func:`_construct` would build ``cls`` differently from ``model_construct``."""
    aliased = [n for n, f in cls.__pydantic_fields__.items() if f.alias or f.validation_alias]
    if aliased or cls.__private_attributes__ or cls.__pydantic_post_init__ or cls.model_config.get("extra") == "allow":
        raise TypeError(
            f"{cls.__name__} has aliases, private attributes, a post-init or extra fields: use model_construct"
        )


class MetricResult(BaseModel):
    """The outcome of one metric on one test case.

    Attributes:
        name: the metric's name (its class name unless configured otherwise).
        score: in [0, 1]; ``None`` only when errored or skipped.
        threshold: the minimum passing score, in [0, 1].
        success: ``score >= threshold`` (False when errored or skipped).
        reason: one human sentence with the measured numbers.
        evaluation_cost: US dollars spent on provider calls; 0.0 for local work.
        evaluation_log: the measured details (metric-specific keys).
        status: ``passed``, ``failed``, ``errored`` or ``skipped``.
        error: why the metric errored, when it did.

    Results are immutable (a frozen model: assigning an attribute raises ``pydantic.ValidationError``), so a
    metric may hand out one result object for every case with the same verdict (most built-in deterministic
    metrics do, per batch): never mutate a result or its ``evaluation_log``; build a new one instead
    (``model_copy(update=...)``: a shallow copy, so pass a new ``evaluation_log`` dict to change the log).
    """

    model_config = ConfigDict(frozen=True)

    name: str
    score: float | None
    threshold: float
    success: bool
    reason: str
    evaluation_cost: float = 0.0
    evaluation_log: dict[str, Any] = Field(default_factory=dict)
    status: Status = "passed"
    error: str | None = None

    @classmethod
    def scored(
        cls,
        name: str,
        score: float,
        threshold: float,
        reason: str,
        evaluation_log: dict[str, Any],
        evaluation_cost: float = 0.0,
    ) -> MetricResult:
        """Build the result of a completed scoring; ``success``/``status`` follow ``score >= threshold``.

        Built without pydantic's validation (a large share of a LengthCheck run's time); the fields are
        checked here instead. Raises TypeError for a non-string name or reason or a non-dict log, ValueError for
        a score or threshold that is not a finite number in [0, 1] (docs/metrics/custom.md#your-own-metrics: NaN, inf, 1.5
        and -0.5 included; the message names ``name`` and the value, e.g. ``BrandVoiceMetric returned score
        nan: a score must be a number in [0, 1]``), so a metric producing one gets those cases errored.
        """
        if not isinstance(name, str) or not isinstance(reason, str) or not isinstance(evaluation_log, dict):
            raise TypeError("name and reason must be strings, evaluation_log a dict")
        score, threshold, evaluation_cost = float(score), float(threshold), float(evaluation_cost)
        if not (0.0 <= score <= 1.0 and 0.0 <= threshold <= 1.0):  # False for NaN too
            raise ValueError(score_problem(name, score, threshold))
        success = score >= threshold
        return _construct(
            cls,
            {
                "name": name,
                "score": score,
                "threshold": threshold,
                "success": success,
                "reason": reason,
                "evaluation_cost": evaluation_cost,
                "evaluation_log": evaluation_log,
                "status": "passed" if success else "failed",
                "error": None,
            },
        )

    @classmethod
    def errored(cls, name: str, threshold: float, error: str) -> MetricResult:
        """Build the result of a metric that failed at run time (``score`` None, ``success`` False). ``error``
        is redacted (:func:`evaltasks._redact.redact`): an exception's text never carries a secret into a
        report."""
        error = redact(error)
        return cls(
            name=name,
            score=None,
            threshold=threshold,
            success=False,
            reason=f"Errored: {error}",
            status="errored",
            error=error,
        )

    @classmethod
    def skipped(cls, name: str, threshold: float, reason: str) -> MetricResult:
        """Build the result of a metric that was not evaluated (``score`` None, ``success`` False); ``reason``
        redacted, as in :meth:`errored`."""
        reason = redact(reason)
        return cls(name=name, score=None, threshold=threshold, success=False, reason=reason, status="skipped")


def score_problem(name: str, score: Any, threshold: Any) -> str | None:
    """Why a result named ``name`` with this ``score`` (None allowed: errored or skipped) and ``threshold`` is
    invalid (each must be a finite number in [0, 1]; docs/metrics/custom.md#your-own-metrics), or None when it is valid."""
    for field, value in (("score", score), ("threshold", threshold)):
        if value is None and field == "score":
            continue
        valid = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0
        if not valid:
            shown = value if isinstance(value, float) else repr(value)[:80]  # nan, inf, 1.5 as Python prints them
            return f"{name} returned {field} {shown}: a {field} must be a number in [0, 1]"
    return None


def result_problem(name: str, result: MetricResult) -> str | None:
    """Why ``result`` (returned by the metric named ``name``) is invalid, or None: its score or threshold is not
    a finite number in [0, 1] (:func:`score_problem`), or its ``success``/``status`` contradict its score (a
    result without a score must be ``errored`` or ``skipped`` and not successful; a scored one must have
    ``success == (score >= threshold)`` and the matching ``passed``/``failed`` status)."""
    problem = score_problem(name, result.score, result.threshold)
    if problem is not None:
        return problem
    score, success, status = result.score, result.success, result.status
    if score is None:
        if success or status not in ("errored", "skipped"):
            return (
                f"{name} returned a result without a score marked {status} (success={success}): a result "
                "without a score must be errored or skipped; build results with MetricResult.scored"
            )
        return None
    expected = score >= result.threshold
    if success is not expected or status != ("passed" if expected else "failed"):
        return (
            f"{name} returned score {score} with threshold {result.threshold} marked {status} "
            f"(success={success}): build results with MetricResult.scored, which derives both"
        )
    return None


def case_status(metrics: list[MetricResult]) -> Status:
    """The status of a test case from its metric results (rule in the module docstring)."""
    statuses = {m.status for m in metrics}
    for status in ("errored", "failed", "passed"):
        if status in statuses:
            return status
    return "skipped"


class Turn(BaseModel):
    """One turn of a conversation as reports show it (docs/conversations.md#reports).

    Attributes:
        input: what the user said, if anything.
        actual_output: what the assistant answered.
        expected_output: the answer expected at this turn, if any.
    """

    input: str | None = None
    actual_output: str
    expected_output: str | None = None


class TestCaseResult(BaseModel):
    """All metric results of one test case, in metric order.

    Attributes:
        id: the case id (dataset ``id`` column, else a hash of the input, ``#2``… for duplicates).
        input: the prompt, if any.
        actual_output: the evaluated output.
        status: the case status (see module docstring).
        success: True when every metric passed.
        metrics: one :class:`MetricResult` per metric.
        expected_output: what the output is judged against, for reports: the case's expected output, else its
            first reference, else None (results.json of evaltasks before 0.9 lack it).
        generation: how a target produced ``actual_output`` (target, latency, tokens, cost); None when the
            output came with the data (docs/targets.md#targets).
        variants: the perturbed inputs the target also answered and its answers (the suite's ``perturbations:``,
            PromptRobustnessMetric; docs/metrics/reliability.md#perturbations); None without.
        turns: a conversation's turns in order (``input`` and ``actual_output`` are then its last turn's); None
            for a single-turn case (docs/conversations.md#reports).
        chatbot_role: a conversation's ``chatbot_role``, if it has one.
    """

    __test__ = False  # not a pytest test class

    id: str
    input: str | None = None
    actual_output: str
    status: Status
    success: bool
    metrics: list[MetricResult]
    expected_output: str | None = None
    generation: Generation | None = None
    variants: list[Variant] | None = None
    turns: list[Turn] | None = None
    chatbot_role: str | None = None

    @classmethod
    def from_metrics(
        cls,
        id: str,
        input: str | None,
        actual_output: str,
        metrics: list[MetricResult],
        expected_output: str | None = None,
        generation: Generation | None = None,
        variants: list[Variant] | None = None,
        turns: list[Turn] | None = None,
        chatbot_role: str | None = None,
    ) -> TestCaseResult:
        """Build a case result, deriving ``status`` and ``success`` from the metric results.

        ``expected_output``: the case's expected output, else its first reference (see :func:`expected_text`).
        ``generation``: how a target produced ``actual_output`` (the case's ``generation``; None: from the data).
        ``variants``: the case's perturbed variants and their outputs (None: none).
        ``turns``, ``chatbot_role``: a conversation's (:func:`conversation_turns`); None for a single-turn case.

        Raises TypeError when an argument has the wrong type (built without pydantic's validation, which
        costs more than the rest of a LengthCheck run: the fields are checked here instead).
        """
        if (
            not isinstance(id, str)
            or not isinstance(actual_output, str)
            or not (input is None or isinstance(input, str))
            or not (expected_output is None or isinstance(expected_output, str))
            or not (generation is None or isinstance(generation, Generation))
            or not (variants is None or isinstance(variants, list))
            or not (turns is None or all(isinstance(turn, Turn) for turn in turns))
            or not (chatbot_role is None or isinstance(chatbot_role, str))
        ):
            raise TypeError("id and actual_output must be strings, input and expected_output strings or None")
        metrics = list(metrics)
        for m in metrics:
            if type(m) is not MetricResult and not isinstance(m, MetricResult):
                raise TypeError("metrics must be MetricResult instances")
        status = metrics[0].status if len(metrics) == 1 else case_status(metrics)
        return _construct(
            cls,
            {
                "id": id,
                "input": input,
                "actual_output": actual_output,
                "status": status,
                "success": status == "passed" and all(m.status == "passed" for m in metrics),
                "metrics": metrics,
                "expected_output": expected_output,
                "generation": generation,
                "variants": variants,
                "turns": None if turns is None else list(turns),
                "chatbot_role": chatbot_role,
            },
        )


def conversation_turns(case: Any) -> list[Turn] | None:
    """The turns of ``case`` as reports show them (a :class:`~evaltasks.test_case.ConversationalEvalTestCase`'s
    ``turns``, each expected output or else first reference); None for a single-turn case."""
    turns = getattr(case, "turns", None)
    if not turns:
        return None
    return [
        _construct(
            Turn,
            {
                "input": turn.input,
                "actual_output": turn.actual_output,
                "expected_output": expected_text(turn.expected_output, turn.references),
            },
        )
        for turn in turns
    ]


def expected_text(expected_output: str | None, references: list[str] | None) -> str | None:
    """What a report shows as the expected answer of a case: ``expected_output``, else the first of
    ``references``, else None."""
    if expected_output is not None:
        return expected_output
    return references[0] if references else None


_check_constructible(MetricResult)
_check_constructible(TestCaseResult)
_check_constructible(Turn)


class Interval(BaseModel):
    """A confidence interval of a statistic (docs/statistics.md#uncertainty-and-regressions).

    Attributes:
        low, high: the bounds, in the statistic's units (fractions for pass rates, score units for means and
            their differences); ``low <= high``.
        level: the confidence level, e.g. 0.95.
        method: how it was computed: ``wilson`` (Wilson score interval of a binomial proportion),
            ``bootstrap`` (percentile bootstrap over cases), ``cluster bootstrap`` (percentile bootstrap over
            the groups of ``dataset.cluster``), ``paired bootstrap`` / ``cluster paired bootstrap`` (of a mean
            difference over paired cases), ``normal`` (normal approximation, for very large samples).
    """

    low: float
    high: float
    level: float = 0.95
    method: str


def percent_text(value: float | None, digits: int = 2, missing: str = "n/a") -> str:
    """A fraction as a percentage with ``digits`` decimals (``0.75`` → ``75.00%``); ``missing`` for None."""
    return missing if value is None else f"{100 * value:.{digits}f}%"


class StatisticsInfo(BaseModel):
    """How a run's intervals were computed.

    Attributes:
        level: the confidence level of every interval in the summary (0.95).
        bootstrap_resamples: resamples of each bootstrap; seed: the random generator's seed (reruns give the
            same intervals).
        cluster: the ``dataset.cluster`` column, when the dataset has one; clusters: how many groups it has.
    """

    level: float = 0.95
    bootstrap_resamples: int
    seed: int
    cluster: str | None = None
    clusters: int | None = None


class MetricSummary(BaseModel):
    """Aggregates of one metric over the run.

    Attributes:
        mean_score: mean of the scores of scored (passed or failed) cases; None when none was scored.
        pass_rate: passed / cases this metric evaluated (skipped cases excluded); None when it evaluated none
            (e.g. skipped for missing credentials).
        threshold: the metric's threshold.
        passed, failed, errored, skipped: counts of cases by status for this metric.
        pass_rate_interval: 95 % interval of ``pass_rate`` (Wilson; a cluster bootstrap with
            ``dataset.cluster``); None when ``pass_rate`` is.
        mean_score_interval: 95 % interval of ``mean_score`` (bootstrap; cluster bootstrap with
            ``dataset.cluster``); None when ``mean_score`` is.
    """

    mean_score: float | None
    pass_rate: float | None
    threshold: float
    passed: int = 0
    failed: int = 0
    errored: int = 0
    skipped: int = 0
    pass_rate_interval: Interval | None = None
    mean_score_interval: Interval | None = None


class EmbeddingCounts(BaseModel):
    """Embedding work of a run, counted in unique texts.

    Attributes:
        references_computed: unique reference texts a provider embedded in this run.
        references_reused: unique reference texts found already in the reference index.
        outputs_computed: unique outputs embedded in this run.
        outputs_reused: unique outputs found in the index (embedded by an earlier call or run).
    """

    references_computed: int = 0
    references_reused: int = 0
    outputs_computed: int = 0
    outputs_reused: int = 0

    def add(self, other: EmbeddingCounts) -> EmbeddingCounts:
        """Return the field-wise sum of two counts."""
        return EmbeddingCounts(**{k: getattr(self, k) + getattr(other, k) for k in type(self).model_fields})


class EmbeddingModelInfo(BaseModel):
    """An embedding model used in a run: provider, model name, fingerprint, dimensions."""

    provider: str
    model: str
    fingerprint: str
    dimensions: int | None = None


class ReferenceSetInfo(BaseModel):
    """A reference set searched in a run.

    Attributes:
        name: the set's name; metric: the metric that searched it.
        count: references in the set; sha256: its content hash.
        search: ``flat`` (exact), ``hnsw-…`` or ``ivf…`` (approximate).
        recall_at_1: measured recall@1 against exact search on the run's outputs (1.0 for flat; None when the
            run had no output to measure on).
        recall_at_10: measured recall@10 (the share of the exact top 10 found in the search's top 10, ties
            counted as found) on the same outputs (1.0 for flat; None with nothing measured).
        nprobe: IVF lists searched per query, the breadth every batch used (widened toward ``target_recall``);
            None for other kinds.
        ef_search: HNSW query breadth every batch used (widened toward ``target_recall``); None for other kinds.
        target_recall: the recall@10 the breadth was widened toward (None: breadth as configured); it may not
            have been reached (compare ``recall_at_10``; the run then warns).
    """

    name: str
    metric: str
    count: int
    sha256: str
    search: str
    recall_at_1: float | None = None
    recall_at_10: float | None = None
    nprobe: int | None = None
    ef_search: int | None = None
    target_recall: float | None = None


class JudgeAccount(BaseModel):
    """Judge work of one judge metric over a run, or of the whole run (docs/judges.md#llm-judges).

    Attributes:
        model: the judge model ("" for the run total).
        requests: HTTP requests sent to the judge in this run (retries included).
        reused: answers served instead of sent: from the on-disk answer store, or with the results of a batch
            Prefect's task cache served (an earlier run's results, whatever store this run has).
        task_cached: how many of ``reused`` came with Prefect's task cache (none of them read the store).
        prompt_tokens, completion_tokens: tokens billed in this run.
        cost: US dollars billed in this run.
        unstable: cases whose samples (``samples: K``) fell on both sides of the threshold (run total: cases
            unstable in at least one metric).
        unstable_cases: the ids of those cases, in case order.
    """

    model: str = ""
    requests: int = 0
    reused: int = 0
    task_cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    unstable: int = 0
    unstable_cases: list[str] = Field(default_factory=list)

    def add(self, case_id: str, result: MetricResult) -> None:
        """Count one judge metric result of case ``case_id`` in (its ``evaluation_log`` and cost)."""
        log = result.evaluation_log
        self.requests += int(log.get("judge_requests", 0))
        self.reused += int(log.get("judge_cached", 0))
        self.task_cached += int(log.get("judge_task_cached", 0))
        self.prompt_tokens += int(log.get("prompt_tokens", 0))
        self.completion_tokens += int(log.get("completion_tokens", 0))
        self.cost += result.evaluation_cost
        if log.get("unstable") is True:
            self.unstable += 1
            self.unstable_cases.append(case_id)


def is_judged(result: MetricResult) -> bool:
    """Whether ``result`` came from a judge metric (its ``evaluation_log`` names the judge model)."""
    return "judge_model" in result.evaluation_log


def is_budget_skip(result: MetricResult) -> bool:
    """Whether ``result`` was not judged because the run's ``--max-cost`` budget ran out: a ``skipped`` judge
    result (a judge metric skips a case for no other reason; a metric skipped for missing credentials is not a
    judge result: its ``evaluation_log`` names no judge model). Such results fail the gate
    (docs/judges.md#llm-judges)."""
    return result.status == "skipped" and "judge_model" in result.evaluation_log


class RunMetricResult(BaseModel):
    """The outcome of a run-level metric: one result for the whole run, no per-case score (CalibrationMetric;
    docs/metrics/reliability.md#calibrationmetric).

    Attributes:
        name: the metric's name.
        score: the run's score (CalibrationMetric: the Brier skill score, at most 1, negative when worse than
            always forecasting the base rate); None when errored.
        threshold: the minimum passing score.
        success: ``score >= threshold`` (False when errored).
        status: ``passed``, ``failed`` or ``errored``.
        reason: one human sentence with the measured numbers.
        details: the measured figures (metric-specific keys; CalibrationMetric: ``brier``, ``brier_skill``,
            ``ece``, ``auroc``, ``cases``, ``excluded``, ``base_rate``, ``mean_confidence``, ``outcome``).
        error: why it could not be computed, when errored.
    """

    name: str
    score: float | None
    threshold: float
    success: bool
    status: Status
    reason: str
    details: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class EvaluationSummary(BaseModel):
    """Run-level aggregates.

    Attributes:
        cases, passed_cases, failed_cases, errored_cases, skipped_cases: case counts by status.
        pass_rate: passed_cases / (cases - skipped_cases); 0.0 when no case was evaluated.
        metrics: per-metric aggregates keyed by metric name, in metric order.
        embeddings: embedding work counts.
        evaluation_cost: total US dollars spent on provider calls.
        judges: judge work per judge metric (keyed by metric name, in metric order); empty without judges.
        judge_total: judge work of the whole run (None without judge metrics).
        budget_skipped: case × metric results not judged because the ``--max-cost`` budget ran out
            (:func:`is_budget_skip`); any fails the gate.
        pass_rate_interval: 95 % interval of ``pass_rate`` (as for a metric's, see :class:`MetricSummary`).
        statistics: how the intervals were computed (None when none was).
        run_metrics: the run-level metrics' results (CalibrationMetric), keyed by metric name; they score the
            run as a whole, so no case carries them.
    """

    cases: int
    passed_cases: int
    failed_cases: int
    errored_cases: int
    skipped_cases: int
    pass_rate: float
    metrics: dict[str, MetricSummary]
    embeddings: EmbeddingCounts = Field(default_factory=EmbeddingCounts)
    evaluation_cost: float = 0.0
    judges: dict[str, JudgeAccount] = Field(default_factory=dict)
    judge_total: JudgeAccount | None = None
    budget_skipped: int = 0
    pass_rate_interval: Interval | None = None
    statistics: StatisticsInfo | None = None
    run_metrics: dict[str, RunMetricResult] = Field(default_factory=dict)


def budget_message(summary: EvaluationSummary) -> str | None:
    """Why the gate failed when the run's ``--max-cost`` budget ran out (``"the --max-cost budget ran out: N of
    M case × metric results were not judged"``), else None."""
    if not summary.budget_skipped:
        return None
    return (
        f"the --max-cost budget ran out: {summary.budget_skipped} of {summary.cases * len(summary.metrics)} "
        "case × metric results were not judged"
    )


class TargetRun(BaseModel):
    """One target's part of a run with targets (docs/targets.md#targets).

    Attributes:
        name: the target's name (``targets:`` order; the first is the reference of a side-by-side comparison).
        kind: ``python``, ``chat`` or ``http``.
        fingerprint: hex SHA-256 of what decides the target's outputs (``Target.fingerprint``).
        summary: this target's run-level aggregates (its cases only).
        requests: generations sent in this run (calls to the target, retries not counted).
        cached: outputs read from the output store (no call made).
        errored: cases whose generation failed (their metrics are errored).
        latency_ms_median: median latency of the cases' generations, milliseconds (None: none generated).
        latency_ms_p95: 95th percentile of the same (linear interpolation, numpy's default).
        cost: US dollars the generations cost (stored outputs count 0).
        samples: outputs generated per case (the target's ``repeat``; each one scored as its own case).
        flaky_cases: with ``samples`` above 1, the ids of the cases whose samples' verdicts differ.
        generated_cases: when some outputs came from the output store, the ids of the cases (at most 50) whose
            outputs were generated anew in this run: what an edit of the target changed (empty otherwise).
    """

    name: str
    kind: str
    fingerprint: str
    summary: EvaluationSummary
    requests: int = 0
    cached: int = 0
    errored: int = 0
    latency_ms_median: float | None = None
    latency_ms_p95: float | None = None
    cost: float = 0.0
    samples: int = 1
    flaky_cases: list[str] = Field(default_factory=list)
    generated_cases: list[str] = Field(default_factory=list)


class EvaluationResult(BaseModel):
    """What :func:`evaluate` returns.

    Attributes:
        test_results: one :class:`TestCaseResult` per test case, in input order.
        summary: run-level aggregates.
        embedding_models: each embedding model used, with its fingerprint.
        targets: with targets, one :class:`TargetRun` per target in the suite's order; ``test_results`` then hold
            every target's cases, target after target (each case's ``generation.target`` names it, case ids
            repeat across targets), and ``summary`` is the first target's. Empty without targets.
    """

    test_results: list[TestCaseResult]
    summary: EvaluationSummary
    embedding_models: list[EmbeddingModelInfo] = Field(default_factory=list)
    reference_sets: list[ReferenceSetInfo] = Field(default_factory=list)
    targets: list[TargetRun] = Field(default_factory=list)
