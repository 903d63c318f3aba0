"""VerdictMetric: the smallest judge metric, for the integration tests of judge metrics in suites, runs and reports.

It asks one question per case (its prompt ``verdict`` lives in ``tests/data/judge_prompts/VerdictMetric/``) and
takes the judge's ``score`` as the case's score, so a test that scripts the judge's answers knows every score.
A suite names it as ``judge_metric:VerdictMetric`` with this folder on ``PYTHONPATH``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaltasks.judges.base import JudgeRequest, as_messages
from evaltasks.judges.prompts import PromptTemplate, load_template
from evaltasks.metrics.judge import Asker, Judged, JudgeMetric
from evaltasks.test_case import EvalTestCase

PROMPTS = Path(__file__).resolve().parent / "data" / "judge_prompts"
SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["score", "reason"],
    "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}, "reason": {"type": "string"}},
}
MAX_TOKENS = 64


class VerdictMetric(JudgeMetric):
    """Score = the judge's ``score`` for the case (one request per case and sample).

    Args:
        threshold: minimum passing score.
        criteria: what the judge checks (goes into the system part of the prompt).
        model, samples, judge_options, prompts, name: as :class:`~evaltasks.metrics.judge.JudgeMetric`.
    """

    prompt_names = ("verdict",)

    def __init__(self, threshold: float = 0.5, criteria: str = "the answer is correct", model: str | None = None, *,
                 samples: int = 1, judge_options: dict[str, Any] | None = None,
                 prompts: dict[str, str] | None = None, name: str | None = None) -> None:
        self.criteria = criteria
        super().__init__(threshold, model, samples=samples, judge_options=judge_options, prompts=prompts, name=name)

    def template(self, prompt: str) -> PromptTemplate:
        """The user's override, else the template in tests/data/judge_prompts."""
        return self._templates.get(prompt) or load_template(PROMPTS / type(self).__name__ / f"{prompt}.md", prompt)

    def config(self) -> dict[str, Any]:
        """JudgeMetric's configuration and ``criteria``."""
        return {**super().config(), "criteria": self.criteria}

    def _variables(self, case: EvalTestCase) -> dict[str, Any]:
        return {"criteria": self.criteria, "input": case.input or "", "actual_output": case.actual_output}

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """One request; the answer's score and reason."""
        reply = asker.ask("verdict", self._variables(case), SCHEMA, max_tokens=MAX_TOKENS)
        return Judged(float(reply.parsed["score"]), str(reply.parsed["reason"]), {"method": "verdict"})

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """Exactly the one request :meth:`judge_case` sends."""
        messages = self.template("verdict").render(self._variables(case))
        return [JudgeRequest(messages=as_messages(messages), schema=SCHEMA, schema_name="verdict",
                             temperature=float(self.judge_options.get("temperature", 0.0)), max_tokens=MAX_TOKENS)]
