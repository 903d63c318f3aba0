"""The test case: one model output to evaluate, with what it is compared against."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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


def assign_ids(cases: list[EvalTestCase], explicit: list[str | None] | None = None) -> list[str]:
    """Stable ids for ``cases``: the explicit id (or ``name``) when given, else the first 12 hex digits of
    sha256 of the input (of the output when there is no input). A repeated id gets ``#2``, ``#3``… in order.
    """
    import hashlib

    seen: dict[str, int] = {}
    ids = []
    for i, case in enumerate(cases):
        base = (explicit[i] if explicit else None) or case.name
        if not base:
            text = case.input if case.input is not None else case.actual_output
            base = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
        seen[base] = seen.get(base, 0) + 1
        ids.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return ids
