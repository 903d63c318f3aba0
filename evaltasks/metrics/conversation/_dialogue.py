"""What the conversation metrics share: the turns a judge sees, the checks of a conversation case, and the two
shapes of their judges' answers.

- :class:`ConversationJudgeMetric`: a judge metric of :class:`~evaltasks.test_case.ConversationalEvalTestCase`
  cases (``case_kind = "conversation"``). Every turn is shown to the judge in one request, in its user part,
  as ``<turn n="i"><user>...</user><assistant>...</assistant></turn>`` blocks (the variables ``user_turns`` and
  ``assistant_turns``, one string per turn), so a turn's text cannot forge another turn or leave its block
  (docs/metrics/judge.md#prompts).
- :class:`LabelMetric`: one holistic label for the whole conversation, each label a weight (eval-ai-library's
  ConversationalFlowRate, RepetitivePatternDetection and FailureRate). The label is an enum of the answer's
  JSON Schema, so an unknown or mis-cased label (``"Fully"``, ``"maybe"``) is an answer off the schema: asked
  again within ``content_retries``, then the case is ``errored``; it never maps to a default score, as
  eval-ai-library's ``weights.get(label, default)`` does (docs/metrics/conversation.md#labels-and-verdict-counts).

The verdict weights and their aggregation are the judge family's (:mod:`evaltasks.metrics.judge._aggregation`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from evaltasks.errors import bounded
from evaltasks.judges.base import JudgeRequest
from evaltasks.judges.prompts import PromptTemplate, builtin_template
from evaltasks.metrics.judge._verdicts import REASON, first_request
from evaltasks.metrics.judge.base import Asker, Judged, JudgeMetric
from evaltasks.test_case import ConversationalEvalTestCase, EvalTestCase

LABEL_MAX_TOKENS = 400
"""Completion tokens allowed for a one-label answer (the label, a few listed items and a reason)."""


def conversation_turns(case: EvalTestCase) -> list[EvalTestCase]:
    """The turns a judge sees: a conversation's ``turns``; a single-turn case is a conversation of one turn
    (TaskSuccessRateMetric, ``case_kind = "any"``)."""
    return list(case.turns) if isinstance(case, ConversationalEvalTestCase) else [case]


def turn_variables(case: EvalTestCase) -> dict[str, Any]:
    """The template variables of ``case``'s turns: ``user_turns`` (each turn's ``input``, "" when absent) and
    ``assistant_turns`` (each turn's ``actual_output``), in turn order, as long as each other."""
    turns = conversation_turns(case)
    return {
        "user_turns": [t.input or "" for t in turns],
        "assistant_turns": [t.actual_output for t in turns],
    }


def turn_problems(case: EvalTestCase, metric: str, *, single: bool = False) -> list[tuple[str, str]]:
    """The ``(field, message)`` problems that keep ``case`` from being judged as a conversation by ``metric``:
    not a conversation (unless ``single``: then a single-turn case needs its ``input``), or a turn without
    ``input`` (``turns[2].input``: the user's message the assistant answered)."""
    if not isinstance(case, ConversationalEvalTestCase):
        if single:
            return [("input", "is missing")] if case.input is None else []
        return [("turns", f"is missing: {metric} scores conversations (rows with a turns list)")]
    return [(f"turns[{i}].input", "is missing") for i, turn in enumerate(case.turns) if turn.input is None]


def label_schema(labels: Sequence[str], lists: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON Schema of a one-label answer ``{"verdict": one of labels, <list>: [string, ...], "reason"}``:
    every property required, no others (OpenAI's strict structured outputs). ``lists``: the names of the
    answer's list-of-strings fields (the prompt says what goes in each)."""
    properties: dict[str, Any] = {"verdict": {"type": "string", "enum": list(labels)}}
    for name in lists:
        properties[name] = {"type": "array", "items": {"type": "string"}}
    properties["reason"] = REASON
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


class ConversationJudgeMetric(JudgeMetric):
    """Base of the conversation metrics: a :class:`JudgeMetric` whose cases are conversations.

    Subclasses set ``prompt_names`` and implement ``judge_case``; ``prompt_class`` names the folder of their
    built-in templates when it is not the class's own name (an alias class sharing another's prompts).
    """

    case_kind: ClassVar[str] = "conversation"
    required_fields: ClassVar[tuple[str, ...]] = ("turns",)
    prompt_class: ClassVar[str | None] = None

    def template(self, prompt: str) -> PromptTemplate:
        """The user's override of ``prompt``, else the built-in one (of ``prompt_class``). Raises PromptError."""
        found = self._templates.get(prompt)
        return found if found is not None else builtin_template(self.prompt_class or type(self).__name__, prompt)

    def _builtin(self, prompt: str) -> PromptTemplate | None:
        """The built-in template of ``prompt`` (of ``prompt_class``), or None when there is none."""
        from evaltasks.judges.prompts import PromptError

        try:
            return builtin_template(self.prompt_class or type(self).__name__, prompt)
        except PromptError:
            return None

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case must be a conversation whose every turn has an ``input``."""
        return turn_problems(case, type(self).__name__)

    def variables(self, case: EvalTestCase) -> dict[str, Any]:
        """The template variables of ``case`` (its turns; subclasses add theirs)."""
        return turn_variables(case)


class LabelMetric(ConversationJudgeMetric):
    """A conversation metric scored by one holistic label: score = ``weights[label]``.

    Subclasses set ``weights`` (label -> weight, in the order the prompt lists them), ``lists`` (extra answer
    fields, each a list of strings, logged under their names) and ``what`` (the reason's lead, e.g.
    ``"Conversational flow"``). One request per case (prompt ``verdict``).
    """

    prompt_names: ClassVar[tuple[str, ...]] = ("verdict",)
    weights: ClassVar[Mapping[str, float]] = {}
    lists: ClassVar[tuple[str, ...]] = ()
    what: ClassVar[str] = ""

    def schema(self) -> dict[str, Any]:
        """The answer's JSON Schema (the labels an enum)."""
        return label_schema(list(self.weights), self.lists)

    def estimate_requests(self, case: EvalTestCase) -> list[JudgeRequest]:
        """The one verdict request."""
        return [first_request(self, "verdict", self.variables(case), self.schema(), max_tokens=LABEL_MAX_TOKENS)]

    def judge_case(self, case: EvalTestCase, asker: Asker) -> Judged:
        """Ask for the label; score = its weight. An unknown label never gets here: it is off the schema (asked
        again within ``content_retries``, then JudgeError)."""
        reply = asker.ask("verdict", self.variables(case), self.schema(), max_tokens=LABEL_MAX_TOKENS)
        answer = reply.parsed
        label = answer["verdict"]
        score = float(self.weights[label])
        extra = {name: list(answer[name]) for name in self.lists}
        reason = f"{self.what}: {label} ({score:g}). {bounded(answer['reason'], 300)}"
        log = {"verdict": label, "reason": answer["reason"], **extra, "number_of_turns": len(conversation_turns(case))}
        return Judged(score, reason, log)
