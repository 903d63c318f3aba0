"""The judge a judge metric uses in one run: answer store -> budget -> client (docs/judges.md#llm-judges).

:func:`get_judge` returns the judge a judge metric sends its requests to: the configured OpenAI-SDK client
(or the run's ``judge=`` function), behind the run's on-disk answer store and budget (:class:`JudgeRuntime`,
:class:`RunJudge`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaltasks._env import env_value
from evaltasks.judges.base import Judge, JudgeReply, JudgeRequest

if TYPE_CHECKING:
    from evaltasks.judges.openai import OpenAIJudge

log = logging.getLogger("evaltasks.judges")

DEFAULT_JUDGE_MODEL = "gpt-4o-mini"
"""The judge model when neither the metric nor the suite's ``judge:`` block names one (eval-ai-library's docs
use OpenAI models; this is the cheapest current one)."""


@dataclass
class JudgeRuntime:
    """Where the judge metrics of one run keep their answers and spend, set by the engine before scoring.

    Attributes:
        store_dir: the on-disk answer store (default: ``judgements/`` in the reference index's directory);
            None: no store.
        refresh: True (``--no-cache``): stored answers are not read (fresh requests), new answers still stored.
        budget: the run's spend limit (``--max-cost``), shared by every judge of the run; None: unlimited.
        judge: a judge that replaces every metric's configured one (the Python API's ``judge=`` hook).
    """

    store_dir: Path | None = None
    refresh: bool = False
    budget: Any = None
    judge: Judge | None = None


def get_judge(model: str, options: dict[str, Any], runtime: JudgeRuntime | None = None) -> Judge:
    """The judge for ``model`` with the client ``options`` (a metric's ``judge_options`` over the suite's
    ``judge:`` block), behind ``runtime``'s store and budget.

    The judge that answers is ``runtime.judge`` (the ``judge=`` hook) when set, else the process's shared
    :class:`~evaltasks.judges.openai.OpenAIJudge` for (``model``, ``options``, the variables it reads). With a
    store or a budget in ``runtime`` it is wrapped in a :class:`RunJudge` (store -> budget -> judge); without
    either it is returned as it is.

    Raises:
        CredentialsError: the OpenAI client needs an API key that is not set.
        ValueError: invalid options.
    """
    runtime = runtime or JudgeRuntime()
    inner = runtime.judge if runtime.judge is not None else _shared_client(model, options)
    if runtime.store_dir is None and runtime.budget is None:
        return inner
    return RunJudge(inner, runtime)


_clients: dict[tuple[str, str], Judge] = {}
_CLIENT_VARIABLES = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "AZURE_OPENAI_API_KEY",
    "AZURE_OPENAI_ENDPOINT",
    "OPENAI_API_VERSION",
)
_clients_lock = threading.Lock()


def _shared_client(model: str, options: dict[str, Any] | None) -> Judge:
    """The process's :class:`~evaltasks.judges.openai.OpenAIJudge` for ``model`` and ``options`` (one per
    distinct pair, so metrics with the same judge share its connections and limits)."""
    from evaltasks.judges.openai import OpenAIJudge

    options = dict(options or {})
    try:
        marker = json.dumps(options, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        marker = repr(sorted(options.items(), key=lambda kv: str(kv[0])))
    # The variables the client reads are part of the key: a changed OPENAI_BASE_URL gets a new client.
    environment = hashlib.sha256(repr([env_value(name) for name in _CLIENT_VARIABLES]).encode()).hexdigest()
    key = (model, marker + environment)
    with _clients_lock:
        if key not in _clients:
            _clients[key] = OpenAIJudge(model, options)
        return _clients[key]


def openai_client(model: str, options: dict[str, Any] | None) -> OpenAIJudge:
    """The process's shared :class:`~evaltasks.judges.openai.OpenAIJudge` for ``model`` and ``options``: the one
    chat client of judge metrics and chat targets (:mod:`evaltasks.targets.chat`), so both share its connections,
    rate limits and concurrency limit. Raises CredentialsError (no API key) or ValueError (bad options)."""
    from evaltasks.judges.openai import OpenAIJudge

    client = _shared_client(model, options)
    assert isinstance(client, OpenAIJudge)
    return client


class RunJudge:
    """A judge as one run uses it: every request goes answer store -> budget -> the judge.

    A stored answer (:class:`~evaltasks.judges.store.AnswerStore`, keyed by the request, the judge's model and
    endpoint) is returned as it is (``cached`` True, 0 requests, tokens and cost); with ``runtime.refresh`` the
    store is not read but new answers are still written. Requests to the OpenAI client reserve their worst case
    on ``runtime.budget`` (:class:`~evaltasks.judges.budget.Budget`); a user's ``judge=`` function has no
    prices and is never limited by the budget. Identical requests sent at once in this process wait for the
    first one's answer instead of sending it again.

    Args:
        inner: the judge that answers misses.
        runtime: the run's store, refresh flag and budget.
    """

    def __init__(self, inner: Judge, runtime: JudgeRuntime) -> None:
        from evaltasks.judges.store import AnswerStore

        self.inner = inner
        self.runtime = runtime
        self.store = AnswerStore(runtime.store_dir) if runtime.store_dir is not None else None
        self.endpoint = str(getattr(inner, "endpoint", "") or "")
        self._pending: dict[str, threading.Lock] = {}
        self._pending_lock = threading.Lock()

    @property
    def model(self) -> str:
        """The inner judge's model."""
        return self.inner.model

    @property
    def supports_logprobs(self) -> bool:
        """The inner judge's ``supports_logprobs``."""
        return self.inner.supports_logprobs

    def probing_logprobs(self) -> Any:
        """The inner judge's ``probing_logprobs`` context (one caller at a time while an endpoint's logprobs
        are unknown: :meth:`evaltasks.judges.openai.OpenAIJudge.probing_logprobs`), else one that does nothing."""
        probe = getattr(self.inner, "probing_logprobs", None)
        return probe() if probe is not None else contextlib.nullcontext()

    def complete(self, request: JudgeRequest) -> JudgeReply:
        """The stored answer to ``request``, else the inner judge's (stored when it arrives).

        Raises:
            JudgeError, BudgetExhausted, CredentialsError: from the inner judge or the budget.
        """
        key = request.key(self.inner.model, self.endpoint)
        if self.store is None:
            return self._send(request)
        if not self.runtime.refresh:
            hit = self.store.get(key, request)
            if hit is not None:
                if request.top_logprobs > 0 and hit.logprobs is not None:
                    note = getattr(self.inner, "note_logprobs", None)
                    if note is not None:  # the endpoint gave logprobs: no need to probe it one case at a time
                        note()
                return hit
        with self._pending_lock:
            lock = self._pending.setdefault(key, threading.Lock())
        with lock:
            if not self.runtime.refresh:
                hit = self.store.get(key, request)  # answered by a thread that held the lock before us
                if hit is not None:
                    return hit
            reply = self._send(request)
            try:
                self.store.put(key, reply, model=self.inner.model, endpoint=self.endpoint)
            except OSError as exc:
                log.warning("could not store a judge answer in %s: %s", self.store.directory, exc)
        return reply

    def discard(self, request: JudgeRequest) -> None:
        """Forget the stored answer to ``request``: the metric rejected it (a verdict list of the wrong length, a
        score out of range), so a later run sends the request again instead of erroring on the same answer.
        A store that cannot be written is logged, not raised."""
        if self.store is None:
            return
        try:
            self.store.discard(request.key(self.inner.model, self.endpoint))
        except OSError as exc:
            log.warning("could not remove a rejected judge answer from %s: %s", self.store.directory, exc)

    def stored(self, request: JudgeRequest) -> JudgeReply | None:
        """The stored answer to ``request`` (as :meth:`complete` would serve it), or None: none stored, the run
        refreshes (``--no-cache``), or the judge keeps no store. Sends nothing; for estimates."""
        if self.store is None or self.runtime.refresh:
            return None
        return self.store.get(request.key(self.inner.model, self.endpoint), request)

    def estimate_cost(self, request: JudgeRequest) -> float:
        """US dollars ``request`` can cost at most in this run (for ``--max-cost`` before a run starts): 0 when
        its answer is stored (and the run does not refresh) or the judge has no prices (a ``judge=`` function),
        else the client's worst case (:meth:`evaltasks.judges.openai.OpenAIJudge.estimate_cost`: prompt tokens
        bounded from above, ``max_tokens`` × ``n`` completion tokens)."""
        estimate = getattr(self.inner, "estimate_cost", None)
        if estimate is None:
            return 0.0
        if self.stored(request) is not None:
            return 0.0
        return float(estimate(request))

    def _send(self, request: JudgeRequest) -> JudgeReply:
        from evaltasks.judges.openai import OpenAIJudge

        if isinstance(self.inner, OpenAIJudge):
            return self.inner.send(request, self.runtime.budget)
        return self.inner.complete(request)


__all__ = ["DEFAULT_JUDGE_MODEL", "JudgeRuntime", "RunJudge", "get_judge"]
