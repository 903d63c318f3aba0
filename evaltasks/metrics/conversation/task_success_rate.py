"""TaskSuccessRateMetric: whether the assistant helped the user complete their task, in one turn or a
conversation (LLM judge).

Source: eval-ai-library's page https://library.eval-ai.com/agent-metrics/task-success (single-turn and
multi-turn; the user's goal inferred, one or two success criteria generated, a five-level verdict per criterion,
aggregated with temperature-controlled softmax; threshold 0.7, temperature 0.5) and its 0.8.2 code
(``agent_metrics/task_success_metric``: ``task_description`` and ``success_criteria`` given skip their
requests; the weights; ``score_agg``). Differences (docs/metrics/conversation.md#tasksuccessratemetric):

- a missing verdict is an error, not padding: the answer must hold one verdict per criterion, in order; another
  number is asked again within ``content_retries``, then errors the case (the library pads a short list with
  ``none`` verdicts, "Missing evaluation", and cuts a long one);
- an unknown or mis-cased verdict is off the schema, asked again, then errors the case (the library weighs it
  0.0);
- one request per case: the goal, the criteria and the verdicts come in one answer, in that order, the criteria
  written from the goal before the dialogue is judged (the library sends four: goal, criteria, verdicts and a
  "summarise" request for the reason, built here in code).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from annotated_types import MinLen

from evaltasks.errors import bounded, quote
from evaltasks.judges.base import JudgeError, JudgeRequest
from evaltasks.metrics.base import NonEmptyStr, UnitFloat
from evaltasks.metrics.conversation._dialogue import ConversationJudgeMetric, conversation_turns, turn_problems
from evaltasks.metrics.judge._aggregation import VERDICT_WEIGHTS, VERDICTS, score_agg
from evaltasks.metrics.judge._verdicts import REASON, checked_verdicts, first_request, max_tokens_for
from evaltasks.metrics.judge.answer_relevancy import check_temperature
from evaltasks.metrics.judge.base import Asker, Judged
from evaltasks.metrics.registry import register_metric
from evaltasks.test_case import EvalTestCase

VERDICT = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": list(VERDICTS)}, "reason": REASON},
    "required": ["verdict", "reason"],
    "additionalProperties": False,
}


def schema(with_criteria: bool) -> dict[str, Any]:
    """The judge's answer: ``user_goal``, the ``criteria`` it wrote (``with_criteria``; at least one, checked by
    :meth:`TaskSuccessRateMetric.criteria`, not by the schema, which strict structured outputs keep simple) and
    one verdict per criterion."""
    properties: dict[str, Any] = {"user_goal": REASON}
    if with_criteria:
        properties["criteria"] = {"type": "array", "items": {"type": "string"}}
    properties["verdicts"] = {"type": "array", "items": VERDICT}
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


@register_metric("TaskSuccessRateMetric")
class TaskSuccessRateMetric(ConversationJudgeMetric):
    """Whether the user's task was completed: one verdict per success criterion (fully 1.0, mostly 0.9,
    partial 0.7, minor 0.3, none 0.0), score = score_agg(weights, temperature)
    (docs/metrics/conversation.md#tasksuccessratemetric).

    Args:
        threshold: minimum passing score, default 0.7.
        model: the judge model (default: the suite's ``judge: {model}``, else ``gpt-4o-mini``).
        temperature: aggregation strictness in [0, 1]: 0.1 strict, 0.5 the mean, 1.0 lenient; NOT the judge
            model's sampling temperature.
        task_description: the user's task, when known; None: the judge infers it.
        success_criteria: the criteria to judge, when known; None: the judge writes one or two from the goal.
        samples: times each case is judged (mean, spread and ``unstable`` reported).
        judge_options: the judge client's options (docs/judges.md#llm-judges).
        prompts: ``{"criteria": path}`` (criteria written by the judge) and/or ``{"verdicts": path}`` (criteria
            given) replace the built-in prompt templates.
        name: the name in results.

    Raises:
        ValueError: invalid threshold, temperature, ``task_description`` (not a non-empty string),
            ``success_criteria`` (not a non-empty list of non-empty strings), samples, judge options or prompt
            files.

    A case is a single-turn case with an ``input`` (a conversation of one turn) or a
    :class:`~evaltasks.test_case.ConversationalEvalTestCase` whose turns have an ``input``. One request per
    case. ``evaluation_log``: ``user_goal``, ``task_description_source``, ``success_criteria``,
    ``success_criteria_source`` (``user_provided`` or ``llm_inferred``), ``verdicts`` (``criterion``,
    ``verdict``, ``weight``, ``reason``), ``number_of_turns``, ``temperature`` and the judge's account.
    """

    version: ClassVar[str] = "1"
    case_kind: ClassVar[str] = "any"
    required_fields: ClassVar[tuple[str, ...]] = ("input", "actual_output")
    prompt_names: ClassVar[tuple[str, ...]] = ("criteria", "verdicts")

    def __init__(
        self,
        threshold: UnitFloat = 0.7,
        model: str | None = None,
        temperature: UnitFloat = 0.5,
        task_description: str | None = None,
        success_criteria: Annotated[list[NonEmptyStr], MinLen(1)] | None = None,
        *,
        samples: int = 1,
        judge_options: dict[str, Any] | None = None,
        prompts: dict[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, model, samples=samples, judge_options=judge_options, prompts=prompts, name=name)
        self.temperature = check_temperature(temperature)
        if task_description is not None and (not isinstance(task_description, str) or not task_description.strip()):
            raise ValueError(f"task_description must be a non-empty string, got {quote(task_description)}")
        if success_criteria is not None and (
            not isinstance(success_criteria, list)
            or not success_criteria
            or not all(isinstance(c, str) and c.strip() for c in success_criteria)
        ):
            raise ValueError(
                f"success_criteria must be a non-empty list of non-empty strings, got {quote(success_criteria)}"
            )
        self.task_description = task_description
        self.success_criteria = [c.strip() for c in success_criteria] if success_criteria is not None else None

    def config(self) -> dict[str, Any]:
        """threshold, name, temperature, task_description, success_criteria and the judge configuration."""
        return {
            **super().config(),
            "temperature": self.temperature,
            "task_description": self.task_description,
            "success_criteria": self.success_criteria,
        }

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A single-turn case needs an ``input``; a conversation, an ``input`` in every turn."""
        return turn_problems(case, type(self).__name__, single=True)

    def variables(self, case: EvalTestCase) -> dict[str, Any]:
        """The turns, the given task ("" when inferred) and the given criteria ([] when written by the judge)."""
        return {
            **super().variables(case),
            "task_description": self.task_description or "",
            "success_criteria": list(self.success_criteria or []),
        }

    def _request(self) -> tuple[str, dict[str, Any], int]:
        """The prompt, the answer's schema and the completion tokens allowed."""
        if self.success_criteria is not None:
            return "verdicts", schema(False), max_tokens_for(len(self.success_criteria))
        return "criteria", schema(True), max_tokens_for(2, base=500)

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The one request."""
        prompt, answer_schema, max_tokens = self._request()
        return [first_request(self, prompt, self.variables(case), answer_schema, max_tokens=max_tokens)]

    def criteria(self, answer: dict[str, Any]) -> list[str]:
        """The criteria the verdicts judge: the given ones, else those the judge wrote in ``answer``.

        Raises:
            JudgeError: the judge wrote no criterion, or an empty one (the answer is asked again).
        """
        if self.success_criteria is not None:
            return list(self.success_criteria)
        written = [str(c).strip() for c in answer["criteria"]]
        if not written:
            raise JudgeError("the judge wrote no success criterion; expected one or two")
        if not all(written):
            raise JudgeError("the judge wrote an empty success criterion")
        return written

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """Ask for the goal, (criteria) and one verdict per criterion; aggregate their weights.

        Raises:
            JudgeError: still not one verdict per criterion after ``content_retries``, or a failed request.
        """
        prompt, answer_schema, max_tokens = self._request()
        reply = asker.ask(
            prompt,
            self.variables(case),
            answer_schema,
            max_tokens=max_tokens,
            check=lambda r: checked_verdicts(r.parsed, len(self.criteria(r.parsed)), "criterion", "criteria"),
        )
        criteria = self.criteria(reply.parsed)
        verdicts = checked_verdicts(reply.parsed, len(criteria), "criterion", "criteria")
        weights = [VERDICT_WEIGHTS[v["verdict"]] for v in verdicts]
        score = score_agg(weights, self.temperature)
        for criterion, verdict, weight in zip(criteria, verdicts, weights):
            verdict.update(criterion=criterion, weight=weight)
        tally = ", ".join(f"{k} {n}" for k in VERDICTS if (n := sum(v["verdict"] == k for v in verdicts)))
        parts = [
            f"Task success: {score:.4f} from {len(criteria)} criteri{'on' if len(criteria) == 1 else 'a'} ({tally})."
        ]
        for v in sorted(verdicts, key=lambda v: v["weight"])[:2]:
            if v["verdict"] not in ("fully", "mostly"):
                parts.append(f"{v['verdict']}: {bounded(v['criterion'], 80)!r}: {bounded(v['reason'], 160)}")
        log = {
            "user_goal": self.task_description or reply.parsed["user_goal"],
            "task_description_source": "user_provided" if self.task_description else "llm_inferred",
            "success_criteria": criteria,
            "success_criteria_source": "user_provided" if self.success_criteria is not None else "llm_inferred",
            "verdicts": verdicts,
            "number_of_turns": len(conversation_turns(case)),
            "temperature": self.temperature,
        }
        return Judged(score, " ".join(parts), log)
