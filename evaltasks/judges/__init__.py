"""LLM judges: the chat client, the answer store, the budget, the prompt templates (README, "LLM judges").

:func:`get_judge` returns the judge a judge metric sends its requests to: the configured OpenAI-SDK client
(or the run's ``judge=`` function), behind the run's on-disk answer store and budget (:class:`JudgeRuntime`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaltasks.judges.base import (
    BudgetExhausted, Choice, FunctionJudge, Judge, JudgeError, JudgeReply, JudgeRequest, Message, TokenLogprob,
)

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

    Raises:
        CredentialsError: the OpenAI client needs an API key that is not set.
        ValueError: invalid options.
    """
    runtime = runtime or JudgeRuntime()
    if runtime.judge is not None:
        return runtime.judge
    raise NotImplementedError("the OpenAI judge client is not built yet")


__all__ = [
    "DEFAULT_JUDGE_MODEL", "BudgetExhausted", "Choice", "FunctionJudge", "Judge", "JudgeError", "JudgeReply",
    "JudgeRequest", "JudgeRuntime", "Message", "TokenLogprob", "get_judge",
]
