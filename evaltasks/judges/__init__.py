"""LLM judges: the chat client, the answer store, the budget, the prompt templates (docs/judges.md#llm-judges).

:func:`get_judge` returns the judge a judge metric sends its requests to: the configured OpenAI-SDK client
(or the run's ``judge=`` function), behind the run's on-disk answer store and budget (:class:`JudgeRuntime`).
The judge protocol and its messages are in :mod:`evaltasks.judges.base`, the run's judge in
:mod:`evaltasks.judges.runtime`, a user's function as a judge in :mod:`evaltasks.judges.function`.
"""

from evaltasks.judges.base import (
    BudgetExhausted,
    Choice,
    Judge,
    JudgeError,
    JudgeReply,
    JudgeRequest,
    Message,
    TokenLogprob,
)
from evaltasks.judges.function import FunctionJudge
from evaltasks.judges.runtime import DEFAULT_JUDGE_MODEL, JudgeRuntime, RunJudge, get_judge

__all__ = [
    "DEFAULT_JUDGE_MODEL",
    "BudgetExhausted",
    "Choice",
    "FunctionJudge",
    "Judge",
    "JudgeError",
    "JudgeReply",
    "JudgeRequest",
    "JudgeRuntime",
    "Message",
    "RunJudge",
    "TokenLogprob",
    "get_judge",
]
