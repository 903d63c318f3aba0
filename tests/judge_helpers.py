"""Helpers shared by the judge-metric tests: a scripted ``judge=`` function that records what it was asked, a
metric scored with a given judge runtime, and the judge options that point the real OpenAI-SDK client at a
loopback :class:`tests.chat_server.ChatServer`.

Nothing here replaces a product component: :class:`Recorder` is wrapped in the product's own
:class:`~evaltasks.judges.FunctionJudge` (the Python API's ``judge=`` hook), and the server is driven through the
real client (:func:`~evaltasks.judges.get_judge`).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evaltasks.judges import FunctionJudge, JudgeRuntime
from evaltasks.metrics.judge.base import JudgeMetric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase


class Recorder:
    """A ``judge=`` function that answers with ``answer(messages)`` and records every call's messages.

    Args:
        answer: the answer's text for the messages, or a fixed text.

    Attributes:
        calls: the messages of every call, in call order (thread-safe appends).
    """

    def __init__(self, answer: Callable[[list[dict[str, str]]], str] | str) -> None:
        self.answer = answer
        self.calls: list[list[dict[str, str]]] = []
        self._lock = threading.Lock()

    def __call__(self, messages: list[dict[str, str]]) -> str:
        with self._lock:
            self.calls.append(messages)
        return self.answer(messages) if callable(self.answer) else self.answer

    def judge(self) -> FunctionJudge:
        """This function as the product's :class:`FunctionJudge`."""
        return FunctionJudge(self, model="scripted")

    def systems(self) -> list[str]:
        """The system message of every call."""
        return [system(m) for m in self.calls]


def system(messages: Sequence[dict[str, str]]) -> str:
    """The content of the system message ("" without one)."""
    return next((m["content"] for m in messages if m["role"] == "system"), "")


def user(messages: Sequence[dict[str, str]]) -> str:
    """The content of the last user message ("" without one)."""
    return next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")


def score_with(
    metric: JudgeMetric,
    cases: Sequence[EvalTestCase],
    judge: Any = None,
    *,
    store_dir: Path | None = None,
    refresh: bool = False,
    budget: Any = None,
) -> list[MetricResult]:
    """``metric.score_batch(cases)`` with the run's judge runtime set as the engine sets it: ``judge`` (a
    ``judge=`` hook, or None for the configured OpenAI client), the answer store in ``store_dir``, ``refresh``
    (``--no-cache``) and ``budget``."""
    metric.judge_runtime = JudgeRuntime(store_dir=store_dir, refresh=refresh, budget=budget, judge=judge)
    return metric.score_batch(list(cases))


def server_options(server: Any, **more: Any) -> dict[str, Any]:
    """``judge_options`` that send a metric's requests to ``server`` (a running ChatServer) through the real
    OpenAI SDK, plus ``more``."""
    return {"base_url": server.base_url, "api_key": server.api_key, **more}


def case(input: str = "What is the capital of France?", actual_output: str = "Paris.", **fields: Any) -> EvalTestCase:
    """A test case (the defaults: a question and its right answer)."""
    return EvalTestCase(input=input, actual_output=actual_output, **fields)


def ln(p: float) -> float:
    """The natural log of a probability (log-probabilities in scripted answers)."""
    return math.log(p)


def as_json(value: Any) -> str:
    """``value`` as the JSON text a judge answers."""
    return json.dumps(value)
