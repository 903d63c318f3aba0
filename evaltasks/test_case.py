"""The test case: one model output to evaluate, with what it is compared against; a conversation of such turns."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Generation(BaseModel):
    """How a target produced a case's output (set by the generate stage; docs/targets.md#targets).

    Attributes:
        target: the target's name.
        latency_ms: wall time of the call that produced the output, in milliseconds (a stored output keeps the
            latency of the call that produced it).
        cost: US dollars the generation cost, if known.
        input_tokens: prompt tokens used, if known.
        output_tokens: completion tokens produced, if known.
        cached: True when the output came from the output store (no request made in this run).
        sample: which of ``repeat: K`` samples this is (0-based).
        metadata: what the target reported besides its output (JSON-serialisable).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: str
    latency_ms: float | None = Field(default=None, ge=0)
    cost: float | None = Field(default=None, ge=0)
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    cached: bool = False
    sample: int = Field(default=0, ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)


class TraceStep(BaseModel):
    """One step of an agent's execution trace (eval-ai-library's ``TraceStep``; docs/agents.md#execution-traces).

    Attributes:
        type: what the step is: ``tool_call``, ``llm_call``, ``reasoning``, ``retrieval`` or ``agent_step``
            (other strings are kept as they are).
        step_id: the step's id, unique within the trace (``parent_step_id`` of its children).
        name: the tool's, model's or agent's name.
        input: what the step received (a tool call's arguments, a prompt...), JSON-serialisable.
        output: what it returned, JSON-serialisable.
        status: ``success`` or ``error`` (None: not reported).
        error: the error message of a failed step.
        error_type: the error's kind (an exception class name, an HTTP status...).
        duration_ms: wall time of the step in milliseconds, children included.
        timestamp: when it started, seconds since the epoch.
        parent_step_id: the enclosing step's ``step_id`` (None: a top-level step).
        metadata: anything else the tracer recorded.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    step_id: str | None = None
    name: str | None = None
    input: Any = None
    output: Any = None
    status: str | None = None
    error: str | None = None
    error_type: str | None = None
    duration_ms: float | None = Field(default=None, ge=0)
    timestamp: float | None = None
    parent_step_id: str | None = None
    metadata: dict[str, Any] | None = None


class ToolCall(BaseModel):
    """One tool call with its arguments (ToolCorrectnessMetric's ``match_arguments``).

    Attributes:
        name: the tool's name.
        arguments: the arguments it was called with (None: not recorded).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    arguments: dict[str, Any] | None = None


class Variant(BaseModel):
    """A perturbed copy of a case's input and the target's output for it (the suite's ``perturbations:``;
    PromptRobustnessMetric compares it with the original).

    Attributes:
        perturbation: which perturbation made it (``typos``, ``casing``, ``spacing``, ``punctuation``).
        input: the perturbed input.
        actual_output: what the target answered to it.
        generation: how the target produced it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    perturbation: str
    input: str
    actual_output: str
    generation: Generation | None = None


class EvalTestCase(BaseModel):
    """One model output and its context (compatible with eval-ai-library's ``EvalTestCase``).

    Attributes:
        actual_output: the text the model produced (required, a string; may be empty).
        input: the prompt or question, if any.
        expected_output: the expected answer, if any: ExactMatchMetric and SemanticSimilarityMetric compare the
            output with it (and require it).
        name: an identifier for reports; datasets fill it with the row id.
        references: reference texts for :class:`~evaltasks.ReferenceMatchMetric` when the metric has none of
            its own; ``None`` means "no references".
        context: background texts the answer should rest on (deepeval and eval-ai-library docs style), if any.
        retrieval_context: the texts a retriever returned for ``input`` (eval_lib's field), if any.
        tools_called: names of the tools the agent called, in call order (eval_lib's field), if any.
        expected_tools: names of the tools the agent should have called, in order (eval_lib's field); required
            by :class:`~evaltasks.ToolCorrectnessMetric`, where ``[]`` means "no tool expected".
        vars: the dataset row's columns (name -> value), for a target's prompt template, body or callable.
        generation: how a target produced ``actual_output`` (None: the output came with the data).
        reasoning: the model's stated reasoning, if any (eval-ai-library's field).
        execution_trace: the agent's steps (docs/agents.md#execution-traces), from a dataset column or a target.
        tool_calls: the tools called with their arguments, in call order (ToolCorrectnessMetric's
            ``match_arguments``); None: read from ``execution_trace``'s ``tool_call`` steps where there is one.
        expected_tool_calls: the calls expected, with the arguments that must match.
        agent_confidence: the system's own confidence that its answer is right, in [0, 1] (CalibrationMetric).
        planning_steps: the plan the agent stated before acting (PlanningQualityMetric).
        multi_outputs: several outputs for this same input (a target's ``repeat: K`` samples, or a dataset
            column), for OutcomeConsistencyMetric.
        variants: perturbed inputs and the target's outputs for them (the suite's ``perturbations:``).
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    actual_output: str
    input: str | None = None
    expected_output: str | None = None
    name: str | None = None
    references: list[str] | None = Field(default=None)
    context: list[str] | None = None
    retrieval_context: list[str] | None = None
    tools_called: list[str] | None = None
    expected_tools: list[str] | None = None
    vars: dict[str, Any] | None = None
    generation: Generation | None = None
    reasoning: str | None = None
    execution_trace: list[TraceStep] | None = None
    tool_calls: list[ToolCall] | None = None
    expected_tool_calls: list[ToolCall] | None = None
    agent_confidence: float | None = Field(default=None, ge=0, le=1)
    planning_steps: list[str] | None = None
    multi_outputs: list[str] | None = None
    variants: list[Variant] | None = None


class ConversationalEvalTestCase(EvalTestCase):
    """A multi-turn conversation evaluated as one case (eval-ai-library's ``ConversationalEvalTestCase``;
    docs/conversations.md#conversations).

    It travels through the pipeline as one test case: batching, caching, statistics and the gate treat it as
    any other. ``input`` and ``actual_output`` are the last turn's unless given, so single-turn reports and
    metrics that read them see the conversation's final exchange.

    Attributes:
        turns: the conversation's turns in order (at least one), each an :class:`EvalTestCase` holding the
            user's ``input`` and the assistant's ``actual_output``.
        chatbot_role: the role the assistant was told to play (RoleAdherenceMetric), if any.
        name: an identifier for reports.

    Raises:
        pydantic.ValidationError: no turns, or a turn that is not a test case.
    """

    turns: list[EvalTestCase] = Field(min_length=1)
    chatbot_role: str | None = None
    actual_output: str = ""

    @model_validator(mode="before")
    @classmethod
    def _last_turn(cls, data: Any) -> Any:
        """Fill ``input`` and ``actual_output`` from the last turn when they are not given."""
        if isinstance(data, dict) and data.get("turns"):
            last = data["turns"][-1]
            fields = last if isinstance(last, dict) else getattr(last, "__dict__", {})
            data = dict(data)
            if data.get("input") is None:
                data["input"] = fields.get("input")
            if not data.get("actual_output"):
                data["actual_output"] = fields.get("actual_output") or ""
        return data


def turns_text(turns: list[tuple[str | None, str]]) -> str:
    """The text a conversation's derived id is hashed from: its turns' ``(input, actual_output)`` pairs as
    compact JSON (``[["Hi","Hello!"],[null,"Bye"]]``); docs/conversations.md#ids-and-caching."""
    import json

    return json.dumps([[user, answer] for user, answer in turns], ensure_ascii=False, separators=(",", ":"))


def assign_ids(cases: list[EvalTestCase], explicit: list[str | None] | None = None) -> list[str]:
    """Stable ids for ``cases``: the explicit id (or ``name``) when given, else the first 12 hex digits of
    sha256 of the input (of the output when there is no input); of a conversation, of every turn's input and
    output (:func:`turns_text`), so two conversations sharing their last turn keep distinct ids. A repeated id
    gets ``#2``, ``#3``… in order.
    """
    import hashlib

    seen: dict[str, int] = {}
    ids = []
    for i, case in enumerate(cases):
        base = (explicit[i] if explicit else None) or case.name
        if not base:
            if isinstance(case, ConversationalEvalTestCase):
                text = turns_text([(turn.input, turn.actual_output) for turn in case.turns])
            else:
                text = case.input if case.input is not None else case.actual_output
            base = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
        seen[base] = seen.get(base, 0) + 1
        ids.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return ids
