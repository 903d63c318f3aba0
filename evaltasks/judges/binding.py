"""How a run wires its judge metrics: the answer store, the ``judge=`` hook, the budget, and the cost estimate.

The engine calls :func:`bind_judges` once per run (after embedding, so the budget starts with the embedding
spend), :func:`estimate_judge_cost` and :func:`unpriced_judge_models` before a run with ``--max-cost``, and
:func:`as_reused` on batches Prefect's task cache served. The judges package sits below the metrics, so this
module never imports them: a judge metric is anything that has what :class:`JudgedMetric` describes
(:class:`~evaltasks.metrics.judge.base.JudgeMetric` and its subclasses do).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from evaltasks.judges import JudgeRuntime, RunJudge
from evaltasks.judges.base import Judge, JudgeReply, JudgeRequest, Message
from evaltasks.judges.budget import Budget
from evaltasks.judges.function import FunctionJudge
from evaltasks.results import MetricResult

if TYPE_CHECKING:
    from evaltasks.judges.prices import Price
    from evaltasks.test_case import EvalTestCase

JUDGEMENTS_DIR = "judgements"
"""The judge answer store's folder inside the reference index directory (docs/judges.md#llm-judges)."""


@runtime_checkable
class BudgetedJudge(Protocol):
    """A judge that takes the run's budget with each request (the OpenAI client,
    :class:`~evaltasks.judges.openai.OpenAIJudge`): it reserves the request's worst case on the budget before
    sending and settles the billed cost after, and it has prices, so ``--max-cost`` can limit it.

    Attributes:
        model: the judge model's name.
        price: the model's price per token (:class:`~evaltasks.judges.prices.Price`; ``known`` False: priced
            at $0, so a budget cannot stop it).
    """

    model: str
    price: Price

    def send(self, request: JudgeRequest, budget: Budget | None = None) -> JudgeReply:
        """Answer ``request`` within ``budget`` (None: unlimited).

        Raises:
            BudgetExhausted: the budget does not allow the request's worst case.
            JudgeError: the request failed for good.
        """
        ...

    def estimate_cost(self, request: JudgeRequest) -> float:
        """US dollars ``request`` can cost at most (prompt tokens bounded from above, ``max_tokens`` × ``n``)."""
        ...


@runtime_checkable
class JudgedMetric(Protocol):
    """What the run's wiring needs from a judge metric (:class:`~evaltasks.metrics.judge.base.JudgeMetric`).

    Attributes:
        name: the metric's name in results.
        samples: how many times each case is judged (K >= 1).
        shared_prompts: the prompts (schema names) every sample shares: one request, whichever sample sends it.
        judge_runtime: the run's store, refresh flag, budget and hook; set by :func:`bind_judges`.
    """

    name: str
    samples: int
    shared_prompts: tuple[str, ...]
    judge_runtime: JudgeRuntime | None

    def judge(self) -> Judge:
        """The judge this metric sends to in this run (behind the run's store and budget).

        Raises:
            CredentialsError: the client needs an API key that is not set.
        """
        ...

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The requests judging ``case`` once would send (the first sample's)."""
        ...


JudgeHook = Judge | Callable[[list[Message]], str] | None
"""The ``judge=`` hook of the Python API: a :class:`~evaltasks.judges.base.Judge`, a function from chat messages
(``{"role", "content"}`` dicts) to the answer's text, or None (each metric's configured client)."""


def as_judge(judge: Any) -> Judge | None:
    """The ``judge=`` hook (:data:`JudgeHook`) as a :class:`~evaltasks.judges.base.Judge`: a Judge as is, a
    function from messages to text wrapped in :class:`~evaltasks.judges.function.FunctionJudge`, None as None.

    Raises:
        TypeError: ``judge`` is neither.
    """
    if judge is None or isinstance(judge, Judge):
        return judge
    return FunctionJudge(judge)


def bind_judges(
    metrics: Sequence[object],
    index_dir: str | Path | None,
    *,
    refresh: bool = False,
    budget: Budget | None = None,
    judge: Any = None,
) -> int:
    """Give every judge metric of ``metrics`` (:class:`JudgedMetric`) the run's
    :class:`~evaltasks.judges.JudgeRuntime`: the answer store ``<index_dir>/judgements`` (none when
    ``index_dir`` is None), ``refresh`` (``--no-cache``: stored answers are not read), the run's ``budget`` and
    the ``judge=`` hook (:data:`JudgeHook`). Other metrics are left as they are. Returns how many metrics were
    bound.

    Raises:
        TypeError: ``judge`` is neither a Judge nor a function.
    """
    hook = as_judge(judge)
    store = Path(index_dir) / JUDGEMENTS_DIR if index_dir is not None else None
    bound = 0
    for metric in metrics:
        if isinstance(metric, JudgedMetric):
            metric.judge_runtime = JudgeRuntime(store_dir=store, refresh=refresh, budget=budget, judge=hook)
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
            log = {
                **log,
                "judge_cached": used,
                "judge_task_cached": used,
                "judge_requests": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
            }
            r = r.model_copy(update={"evaluation_log": log, "evaluation_cost": 0.0})
        out.append(r)
    return out


def judge_budget(max_cost: float | None, spent: float, ledger: str | Path) -> Budget | None:
    """The run's judge budget for ``--max-cost``: a :class:`~evaltasks.judges.budget.Budget` of ``max_cost`` US
    dollars with ``spent`` (the run's embedding spend) already counted, its ledger at ``ledger`` (a file that
    process and Dask workers share: a Budget pickles as its limit and ledger); None without a limit."""
    if max_cost is None:
        return None
    budget = Budget(max_cost, ledger)
    if spent:
        budget.add_spent(spent)
    return budget


def _client_of(metric: JudgedMetric) -> Judge:
    """The client ``metric`` sends to in this run (the OpenAI judge or the ``judge=`` hook), without the run's
    store and budget around it.

    Raises:
        CredentialsError: the client has no API key.
    """
    judge = metric.judge()
    return judge.inner if isinstance(judge, RunJudge) else judge


def unpriced_judge_models(metrics: Sequence[object]) -> list[str]:
    """The judge models of ``metrics``' judge metrics that have no price (in neither the built-in table nor the
    judge's ``prices``: :func:`~evaltasks.judges.prices.resolve_price`), in metric order, each once: their costs
    count as $0 and ``--max-cost`` cannot limit them. A ``judge=`` function has no prices and is not listed.

    Raises:
        CredentialsError: a judge metric's client has no API key.
    """
    models: list[str] = []
    for metric in metrics:
        if not isinstance(metric, JudgedMetric):
            continue
        inner = _client_of(metric)
        price = getattr(inner, "price", None)
        if price is not None and not price.known and inner.model not in models:
            models.append(inner.model)
    return models


def estimate_judge_cost(
    cases: Sequence[EvalTestCase], metrics: Sequence[object], *, cached: Mapping[str, Collection[int]] | None = None
) -> float:
    """Estimated US dollars of the judge requests of a run (for ``--max-cost``): each judge metric's
    ``estimate_requests`` per case (:meth:`~evaltasks.metrics.judge.base.JudgeMetric.estimate_requests`), once
    per sample (each sample is its own request; a request of the metric's ``shared_prompts`` once), each priced
    by its judge's ``estimate_cost`` (:meth:`~evaltasks.judges.RunJudge.estimate_cost`: the worst case at the
    client's prices; 0 for answers already in the run's store unless it refreshes, and for a ``judge=``
    function). ``cached``: per metric name, the case rows whose results come from Prefect's task cache (nothing
    is sent for them). Bind the runtime (:func:`bind_judges`) first.

    Raises:
        CredentialsError: a judge metric's client has no API key.
    """
    total = 0.0
    for metric in metrics:
        if not isinstance(metric, JudgedMetric):
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
