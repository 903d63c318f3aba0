"""VerdictMetric: the smallest judge metric, for the integration tests of judge metrics in suites, runs and reports.

It asks one question per case (its prompt ``verdict`` lives in ``tests/data/judge_prompts/VerdictMetric/``) and
takes the judge's ``score`` as the case's score, so a test that scripts the judge's answers knows every score.
A suite names it as ``judge_metric:VerdictMetric`` with this folder on ``PYTHONPATH``.

``offline: true`` answers with :func:`rule_judge` (a ``judge=`` function: score 1 when the answer contains the
word "correct", else 0) through :func:`~evaltasks.judges.get_judge`, so it is behind the run's answer store and
budget like any judge: a suite run through the real CLI needs no chat server. Each call appends a line to the
file ``$EVALTASKS_TEST_JUDGE_LOG`` when set, so a test counts the requests a CLI subprocess sent.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from evaltasks.judges import FunctionJudge, JudgeRuntime, get_judge
from evaltasks.judges.base import Judge, JudgeRequest, as_messages
from evaltasks.judges.prompts import PromptTemplate, load_template
from evaltasks.metrics.judge.base import Asker, Judged, JudgeMetric
from evaltasks.test_case import EvalTestCase

PROMPTS = Path(__file__).resolve().parent / "data" / "judge_prompts"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["score", "reason"],
    "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}, "reason": {"type": "string"}},
}
MAX_TOKENS = 64
_LOG_LOCK = threading.Lock()


def rule_judge(messages: list[dict[str, str]]) -> str:
    """The offline judge: ``{"score": 1, ...}`` when the user message's answer line contains "correct", else 0;
    logs the call to ``$EVALTASKS_TEST_JUDGE_LOG`` (one JSON line with the user message)."""
    user = messages[-1]["content"]
    answer = user.rsplit("Answer:", 1)[-1]
    log = os.environ.get("EVALTASKS_TEST_JUDGE_LOG")
    if log:
        with _LOG_LOCK, open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"user": user}) + "\n")
    score = 1 if "correct" in answer.lower() else 0
    return json.dumps({"score": score, "reason": "contains 'correct'" if score else "does not contain 'correct'"})


class VerdictMetric(JudgeMetric):
    """Score = the judge's ``score`` for the case (one request per case and sample).

    Args:
        threshold: minimum passing score.
        criteria: what the judge checks (goes into the system part of the prompt).
        model, samples, judge_options, prompts, name: as :class:`~evaltasks.metrics.judge.base.JudgeMetric`.
        offline: answer with :func:`rule_judge` unless the run has a ``judge=`` hook.
    """

    prompt_names = ("verdict",)

    def __init__(
        self,
        threshold: float = 0.5,
        criteria: str = "the answer is correct",
        model: str | None = None,
        *,
        samples: int = 1,
        judge_options: dict[str, Any] | None = None,
        prompts: dict[str, str] | None = None,
        name: str | None = None,
        offline: bool = False,
    ) -> None:
        self.criteria, self.offline = criteria, offline
        super().__init__(threshold, model, samples=samples, judge_options=judge_options, prompts=prompts, name=name)

    def template(self, prompt: str) -> PromptTemplate:
        """The user's override, else the template in tests/data/judge_prompts."""
        return self._templates.get(prompt) or load_template(PROMPTS / type(self).__name__ / f"{prompt}.md", prompt)

    def config(self) -> dict[str, Any]:
        """JudgeMetric's configuration, ``criteria`` and ``offline``."""
        return {**super().config(), "criteria": self.criteria, "offline": self.offline}

    def judge(self) -> Judge:
        """With ``offline``: :func:`rule_judge` behind the run's store and budget; else JudgeMetric's judge."""
        runtime = self.judge_runtime or JudgeRuntime()
        if self.offline and runtime.judge is None:
            return get_judge(self.model, self.judge_options, replace(runtime, judge=FunctionJudge(rule_judge, "rule")))
        return super().judge()

    def _variables(self, case: EvalTestCase) -> dict[str, Any]:
        return {"criteria": self.criteria, "input": case.input or "", "actual_output": case.actual_output}

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """One request; the answer's score and reason."""
        reply = asker.ask("verdict", self._variables(case), SCHEMA, max_tokens=MAX_TOKENS)
        return Judged(float(reply.parsed["score"]), str(reply.parsed["reason"]), {"method": "verdict"})

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """Exactly the one request :meth:`judge_case` sends."""
        messages = self.template("verdict").render(self._variables(case))
        return [
            JudgeRequest(
                messages=as_messages(messages),
                schema=SCHEMA,
                schema_name="verdict",
                temperature=float(self.judge_options.get("temperature", 0.0)),
                max_tokens=MAX_TOKENS,
            )
        ]
