"""JudgeMetric: the base of the LLM-judged metrics (GEval, AnswerRelevancy, Faithfulness, ...).

A judge metric scores one case by asking a judge model one or more questions built from prompt templates
(:mod:`evaltasks.judges.prompts`) and computing the score from the judge's validated JSON answers; the score
definitions are eval-ai-library's (each metric's module cites its page). This base does what they share:
the judge model and client options, prompt overrides, sending a batch's cases concurrently, repeats
(``samples: K``), and turning judge failures into ``errored`` and budget stops into ``skipped`` results.

Metrics never import Prefect; caching across runs is the judge's answer store (:class:`JudgeRuntime`), under
Prefect's task cache.
"""

from __future__ import annotations

import math
import statistics
import threading
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import quote
from evaltasks.judges import DEFAULT_JUDGE_MODEL, JudgeRuntime, get_judge
from evaltasks.judges.base import BudgetExhausted, Judge, JudgeError, JudgeReply, JudgeRequest, as_messages
from evaltasks.judges.prompts import (
    PromptError,
    PromptTemplate,
    builtin_template,
    check_variables,
    load_template,
    variables,
)
from evaltasks.metrics.base import BaseMetric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

DEFAULT_MAX_CONCURRENCY = 8
"""Judge requests in flight at once per metric batch when ``judge_options`` sets no ``max_concurrency``."""

SAMPLES_TEMPERATURE = 1.0
"""The judge's sampling temperature for ``samples`` > 1 when ``judge_options`` sets none above 0: K requests at
temperature 0 would be K copies of one answer (K times the cost, a spread of 0, never ``unstable``)."""


@dataclass
class Judged:
    """One sample's outcome for one case, as a metric's :meth:`JudgeMetric.judge_case` returns it.

    Attributes:
        score: in [0, 1].
        reason: why, in a sentence or two (shown in reports).
        log: what the metric's ``evaluation_log`` should hold (verdicts, statements, method...).
    """

    score: float
    reason: str
    log: dict[str, Any] = field(default_factory=dict)


class Asker:
    """Sends one case's requests for one sample and keeps their account (requests, tokens, cost, cache hits).

    Made by :meth:`JudgeMetric.score_batch`; a metric's :meth:`JudgeMetric.judge_case` calls :meth:`ask`.

    Attributes:
        judge: the judge the requests go to.
        sample: which repeat this is (0-based; part of every request's store key).
        requests, cached, prompt_tokens, completion_tokens, cost: totals over this asker's replies (cost in USD).
    """

    def __init__(self, metric: JudgeMetric, judge: Judge, sample: int) -> None:
        self.metric, self.judge, self.sample = metric, judge, sample
        self.requests = self.cached = self.prompt_tokens = self.completion_tokens = 0
        self.cost = 0.0
        self.last: JudgeRequest | None = None  # the request of the latest answer received (None after a failure)

    def ask(
        self,
        prompt: str,
        variables: Mapping[str, Any],
        schema: Mapping[str, Any] | None,
        *,
        schema_name: str | None = None,
        temperature: float | None = None,
        max_tokens: int = 1024,
        top_logprobs: int = 0,
        n: int = 1,
        sample: int | None = None,
        check: Callable[[JudgeReply], Any] | None = None,
    ) -> JudgeReply:
        """Render the metric's prompt ``prompt`` with ``variables`` and send it.

        Args:
            prompt: a name of the metric's ``prompt_names``.
            variables: the template's variables.
            schema: JSON Schema the answer must satisfy (None: free text).
            schema_name: its name in ``response_format`` (default: ``prompt``).
            temperature: the judge model's sampling temperature (default: :meth:`JudgeMetric.request_temperature`;
                a request every sample shares, ``sample`` given: ``judge_options.temperature``, else 0).
            max_tokens, top_logprobs, n: as :class:`~evaltasks.judges.JudgeRequest`.
            sample: the request's ``sample`` (default: this asker's); a request every sample shares (GEval's
                generated steps) passes 0, so it is one stored answer whichever sample sends it.
            check: called with the reply; a :class:`JudgeError` it raises rejects the answer (a verdict list of
                the wrong length): the answer is removed from the store and the request is sent again, up to
                ``content_retries`` times (:meth:`JudgeMetric.content_retries`), the one rule for every metric.

        Raises:
            PromptError: the template does not render; JudgeError, BudgetExhausted: from the judge, or from
            ``check`` on the last answer allowed.
        """
        self.last = None  # a prompt that does not render rejects no answer
        messages = self.metric.template(prompt).render(variables)
        if temperature is None:
            temperature = self.metric.request_temperature(shared=sample is not None)
        request = JudgeRequest(
            messages=as_messages(messages),
            schema=schema,
            schema_name=schema_name or prompt,
            temperature=temperature,
            max_tokens=max_tokens,
            top_logprobs=top_logprobs,
            n=n,
            sample=self.sample if sample is None else sample,
        )
        retries = self.metric.content_retries() if check is not None else 0
        for attempt in range(retries + 1):
            reply = self._send(request)
            if check is None:
                return reply
            try:
                check(reply)
                return reply
            except JudgeError as exc:
                if attempt >= retries:
                    raise JudgeError(f"{exc} (after {attempt + 1} answer{'' if attempt == 0 else 's'})") from None
                self.discard_last()  # not served again: the next attempt reaches the judge
        raise AssertionError("unreachable")

    def _send(self, request: JudgeRequest) -> JudgeReply:
        """``request`` through the judge, its account added to this asker's (a failed one's spend included)."""
        self.last = None
        try:
            reply = self.judge.complete(request)
        except JudgeError as exc:  # a request that failed for good may still have been billed
            self.requests += exc.requests
            self.prompt_tokens += exc.prompt_tokens
            self.completion_tokens += exc.completion_tokens
            self.cost += exc.cost
            raise
        self.requests += reply.requests
        self.cached += int(reply.cached)
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        self.cost += reply.cost
        self.last = request
        return reply

    def discard_last(self) -> None:
        """Remove the latest answer received from the judge's answer store (the metric rejected it), so a later
        run asks again; nothing when the latest request failed or the judge keeps no store."""
        discard = getattr(self.judge, "discard", None)
        if self.last is not None and discard is not None:
            discard(self.last)


class JudgeMetric(BaseMetric):
    """Base class of the LLM-judged metrics.

    Args:
        threshold: minimum passing score, in [0, 1].
        model: the judge model (Azure: the deployment name); None: the suite's ``judge: {model}``, else
            ``gpt-4o-mini``.
        samples: how many times each case is judged (K >= 1); the score is the mean of the K scores (rounded to
            10 decimals), the spread is logged, and a case whose samples fall on both sides of the threshold is
            ``unstable``. With K > 1 each sample is asked at the judge's ``temperature``, or at 1.0 where that
            is 0 (:meth:`request_temperature`).
        judge_options: the judge client's options (docs/judges.md#llm-judges: ``base_url``, ``api_key``,
            ``azure_endpoint``, ``api_version``, ``temperature`` of the judge model, ``max_concurrency``,
            ``requests_per_minute``, ``tokens_per_minute``, prices, ``structured_outputs``, ``logprobs``...);
            a suite's ``judge:`` block gives defaults.
        prompts: prompt name -> path of a template file replacing the built-in one (see
            :mod:`evaltasks.judges.prompts`); names must be among the metric's ``prompt_names``, and a file may
            use only the variables the built-in template of that prompt uses.
        name: the name in results (default: the class name).

    Raises:
        ValueError: a threshold outside [0, 1], ``samples`` not an integer >= 1, an empty ``model``,
            ``judge_options`` that is not a mapping, an unknown prompt name, or a prompt file that is not a
            valid template (a syntax error at its line in the file, an unknown variable, ``include`` and the
            like: :class:`~evaltasks.judges.prompts.PromptError`).

    Subclasses set ``prompt_names`` (their built-in templates live in
    ``evaltasks/judges/prompts/<ClassName>/<name>.md``) and implement :meth:`judge_case` (one sample of one
    case) and :meth:`estimate_requests` (for ``--max-cost``).

    ``evaluation_log`` keys every judge metric adds: ``judge_model``, ``judge_requests`` (HTTP requests sent
    this run, retries included), ``judge_cached`` (answers served from the store), ``prompt_tokens``,
    ``completion_tokens``; with ``samples`` > 1: ``samples`` (the K scores), ``score_stdev`` (their sample
    standard deviation) and ``unstable`` (True when some are below the threshold and some are not).
    ``evaluation_cost``: US dollars billed for the case's requests in this run (0 for stored answers).
    """

    required_fields: ClassVar[tuple[str, ...]] = ("input", "actual_output")
    prompt_names: ClassVar[tuple[str, ...]] = ()
    shared_prompts: ClassVar[tuple[str, ...]] = ()
    """Prompts whose request every sample shares (sent with ``sample`` 0, once per metric: GEval's generated
    steps): :func:`~evaltasks.engine.evaluate.estimate_judge_cost` prices them once, not once per sample."""

    def __init__(
        self,
        threshold: float,
        model: str | None = None,
        *,
        samples: int = 1,
        judge_options: dict[str, Any] | None = None,
        prompts: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        if model is not None and (not isinstance(model, str) or not model.strip()):
            raise ValueError(f"model must be a non-empty string, got {quote(model)}")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ValueError(f"samples must be an integer >= 1, got {quote(samples)}")
        if judge_options is not None and not isinstance(judge_options, dict):
            raise ValueError(f"judge_options must be a mapping, got {type(judge_options).__name__}")
        if prompts is not None and not isinstance(prompts, dict):
            raise ValueError(f"prompts must be a mapping of prompt name to file, got {type(prompts).__name__}")
        self.model = model or DEFAULT_JUDGE_MODEL
        self.samples = samples
        self.judge_options: dict[str, Any] = dict(judge_options or {})
        self._templates: dict[str, PromptTemplate] = {}
        for prompt, path in (prompts or {}).items():
            if prompt not in self.prompt_names:
                raise ValueError(
                    f"prompts: unknown prompt {quote(prompt)} for {type(self).__name__}; its prompts: "
                    f"{', '.join(self.prompt_names) or 'none'}"
                )
            try:
                self._templates[prompt] = load_template(Path(path), prompt)
                builtin = self._builtin(prompt)
                if builtin is not None:  # an override may use only what the metric passes to that prompt
                    check_variables(self._templates[prompt], variables(builtin), type(self).__name__)
            except PromptError as exc:
                raise ValueError(str(exc)) from None
        self.judge_runtime: JudgeRuntime | None = None  # set by the engine for a run (store, budget, hook)

    # -- configuration -----------------------------------------------------------------------------------
    def template(self, prompt: str) -> PromptTemplate:
        """The template of ``prompt``: the user's override, else the built-in one. Raises PromptError."""
        found = self._templates.get(prompt)
        return found if found is not None else builtin_template(type(self).__name__, prompt)

    def _builtin(self, prompt: str) -> PromptTemplate | None:
        """The built-in template of ``prompt``, or None when the metric has none (a user's own subclass)."""
        try:
            return builtin_template(type(self).__name__, prompt)
        except PromptError:
            return None

    def judge_config(self) -> dict[str, Any]:
        """``model``, ``samples``, ``judge_options`` (without ``api_key``), the resolved ``endpoint`` (the options'
        ``base_url`` / ``azure_endpoint``, else ``OPENAI_BASE_URL`` / ``AZURE_OPENAI_ENDPOINT``, else the public
        API: another server is another cache key) and the text of every prompt template in use (so an edited
        template changes the cache key), for :meth:`config`."""
        from evaltasks.judges.openai import resolve_endpoint

        return {
            "model": self.model,
            "samples": self.samples,
            "endpoint": resolve_endpoint(self.judge_options),
            "judge_options": {k: v for k, v in sorted(self.judge_options.items()) if k != "api_key"},
            "prompts": {p: (t.system, t.user) for p in self.prompt_names for t in [self.template(p)]},
        }

    def config(self) -> dict[str, Any]:
        """threshold, name and :meth:`judge_config`; subclasses add their own parameters."""
        return {"threshold": self.threshold, "name": self.name, **self.judge_config()}

    def request_temperature(self, *, shared: bool = False) -> float:
        """The judge's sampling temperature for this metric's requests: ``judge_options.temperature`` (default
        0), except that with ``samples`` > 1 a per-sample request (not ``shared`` by every sample) is sent at
        :data:`SAMPLES_TEMPERATURE` (1.0) when that is 0, so the K samples are K draws, not one answer K times
        (docs/judges.md#llm-judges, ``samples: K``)."""
        temperature = float(self.judge_options.get("temperature", 0.0))
        if self.samples > 1 and not shared and temperature <= 0.0:
            return SAMPLES_TEMPERATURE
        return temperature

    def content_retries(self) -> int:
        """How many times an answer the metric rejects (a verdict list of the wrong length) is asked again: the
        judge option ``content_retries`` (default 2, as the client's re-requests of an answer that does not
        parse), for every judge, a ``judge=`` function included."""
        value = self.judge_options.get("content_retries", 2)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 2

    def judge(self) -> Judge:
        """The judge this metric's requests go to in this run. Raises CredentialsError without an API key."""
        return get_judge(self.model, self.judge_options, self.judge_runtime)

    # -- what subclasses implement -------------------------------------------------------------------------
    @abstractmethod
    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """Judge one sample of ``case`` with ``asker.ask(...)``; return its score in [0, 1] and reason.

        Raises:
            JudgeError: an answer is unusable (e.g. a verdict list of the wrong length): the case is errored.
        """

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The requests one sample of ``case`` will most likely send (for ``--max-cost``): the first step
        exactly, later steps (which depend on earlier answers) approximated. Default: none."""
        return []

    # -- scoring -----------------------------------------------------------------------------------------
    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Judge every case ``samples`` times, up to ``max_concurrency`` requests at once; one result per case.

        A case is ``errored`` when one of its samples raised JudgeError or PromptError (the reason says why), else
        ``skipped`` when the budget stopped one of its samples, else scored with the mean of its samples (rounded
        to 10 decimals, so 0.55 from samples 0.5 and 0.6 passes a 0.55 threshold). An answer the metric rejects
        (JudgeError or PromptError after it arrived) is removed from the answer store, so a later run asks again.

        Raises:
            CredentialsError: no API key for the judge.
        """
        if not cases:
            return []
        judge = self.judge()
        jobs = [(i, s) for i in range(len(cases)) for s in range(self.samples)]
        outcomes: dict[tuple[int, int], Judged | BaseException] = {}
        askers: dict[tuple[int, int], Asker] = {}
        lock = threading.Lock()

        def run(job: tuple[int, int]) -> None:
            asker = Asker(self, judge, job[1])
            try:
                outcome: Judged | BaseException = self._checked(self.judge_case(cases[job[0]], asker))
            except (JudgeError, PromptError) as exc:
                asker.discard_last()  # the metric rejected an answer that passed its schema: not served again
                outcome = exc
            except BudgetExhausted as exc:
                outcome = exc
            with lock:
                outcomes[job], askers[job] = outcome, asker

        workers = min(len(jobs), int(self.judge_options.get("max_concurrency", DEFAULT_MAX_CONCURRENCY)))
        if workers <= 1:
            for job in jobs:
                run(job)
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"judge-{self.name}") as pool:
                list(pool.map(run, jobs))
        return [
            self._result(
                [outcomes[(i, s)] for s in range(self.samples)], [askers[(i, s)] for s in range(self.samples)], judge
            )
            for i in range(len(cases))
        ]

    def _checked(self, judged: Judged) -> Judged:
        """``judged`` if its score is a finite number in [0, 1]. Raises JudgeError otherwise."""
        score = judged.score
        if (
            isinstance(score, bool)
            or not isinstance(score, (int, float))
            or not math.isfinite(score)
            or not 0.0 <= score <= 1.0
        ):
            raise JudgeError(f"{type(self).__name__} computed a score outside [0, 1]: {quote(score)}")
        return judged

    def _result(self, outcomes: list[Judged | BaseException], askers: list[Asker], judge: Judge) -> MetricResult:
        """Fold one case's samples into its :class:`MetricResult`."""
        account = {
            "judge_model": judge.model,
            "judge_requests": sum(a.requests for a in askers),
            "judge_cached": sum(a.cached for a in askers),
            "prompt_tokens": sum(a.prompt_tokens for a in askers),
            "completion_tokens": sum(a.completion_tokens for a in askers),
        }
        cost = math.fsum(a.cost for a in askers)
        errors = [o for o in outcomes if isinstance(o, (JudgeError, PromptError))]
        if errors:
            result = MetricResult.errored(self.name, self.threshold, f"{type(errors[0]).__name__}: {errors[0]}")
            return result.model_copy(update={"evaluation_cost": cost, "evaluation_log": account})
        stops = [o for o in outcomes if isinstance(o, BudgetExhausted)]
        if stops:
            result = MetricResult.skipped(self.name, self.threshold, f"skipped: {stops[0]}")
            return result.model_copy(update={"evaluation_cost": cost, "evaluation_log": account})
        judged = [o for o in outcomes if isinstance(o, Judged)]
        scores = [j.score for j in judged]
        score = round(math.fsum(scores) / len(scores), 10)  # 0.5499999999999999 is 0.55
        log = {**judged[0].log, **account}
        reason = judged[0].reason
        if len(scores) > 1:
            unstable = min(scores) < self.threshold <= max(scores)
            log.update(
                samples=[round(float(s), 6) for s in scores],
                score_stdev=round(statistics.stdev(scores), 6),
                unstable=unstable,
                samples_temperature=self.request_temperature(),
            )
            reason = (
                f"Mean of {len(scores)} samples {score:.4f} (sd {statistics.stdev(scores):.4f}"
                f"{'; unstable: samples on both sides of the threshold' if unstable else ''}). "
                f"First sample: {reason}"
            )
        return MetricResult.scored(self.name, score, self.threshold, reason, log, cost)
