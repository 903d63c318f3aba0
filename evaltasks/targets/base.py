"""What a target is: the system under test, run on a test case to produce the output a suite evaluates.

A target is one of three kinds (docs/targets.md#targets): ``python`` (the user's callable), ``chat`` (an
OpenAI-compatible chat model with a prompt template) or ``http`` (a POST to the user's running app). The
generate stage (:mod:`evaltasks.engine.pipeline`) calls :meth:`Target.generate` on each case whose output is not
in the output store, and fills the case's ``actual_output`` (and the optional fields) from the
:class:`TargetOutput`.

This module holds the contract every kind implements; it imports nothing heavy and never Prefect.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from evaltasks.errors import EvalTasksError
from evaltasks.test_case import EvalTestCase, ToolCall, TraceStep

TargetKind = Literal["python", "chat", "http"]


class TargetOutput(BaseModel):
    """What a target returned for one test case.

    Attributes:
        output: the generated answer (becomes the case's ``actual_output``).
        retrieval_context: the texts the target's retriever returned, if any (fills the case's field).
        context: background texts, if any (fills the case's field).
        tools_called: names of the tools the target called, in call order, if any (fills the case's field).
        cost: US dollars the generation cost, if known.
        input_tokens: prompt tokens used, if known.
        output_tokens: completion tokens produced, if known.
        metadata: anything else the target reports (JSON-serialisable), kept in results.json.
        execution_trace: the agent's steps for this case, if it traced them (fills the case's field;
            docs/agents.md#execution-traces).
        tool_calls: the tools called with their arguments, if any (fills the case's field).
        agent_confidence: the target's own confidence in its answer, in [0, 1] (fills the case's field).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    output: str
    retrieval_context: list[str] | None = None
    context: list[str] | None = None
    tools_called: list[str] | None = None
    cost: float | None = Field(default=None, ge=0)
    input_tokens: int | None = Field(default=None, ge=0)
    output_tokens: int | None = Field(default=None, ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)
    execution_trace: list[TraceStep] | None = None
    tool_calls: list[ToolCall] | None = None
    agent_confidence: float | None = Field(default=None, ge=0, le=1)


class TargetError(EvalTasksError):
    """A case's generation failed for good (a wrong return type, a 4xx other than 401/429, an output path that
    is missing): the case is ``errored`` with this message and the run goes on."""


class TransientTargetError(TargetError):
    """A generation failure that retrying may cure (429, 5xx, a timeout, a dropped connection).

    Attributes:
        retry_after: seconds the endpoint asked to wait (``Retry-After``), if it said.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@runtime_checkable
class Target(Protocol):
    """The system under test (implemented by ``PythonTarget``, ``ChatTarget``, ``HttpTarget``).

    Attributes:
        name: the target's name in reports (``targets:`` entries' ``name``; a single ``target:`` is named after
            its kind unless it names itself).
        kind: ``python``, ``chat`` or ``http``.
        cache: False when every run must generate again (``cache: false``: apps that are not deterministic).
    """

    name: str
    kind: TargetKind
    cache: bool

    def fingerprint(self) -> str:
        """Hex SHA-256 of what decides this target's outputs, independent of the case: chat: the kind, model and
        parameters (the rendered prompt is part of :meth:`case_key`); python: the callable's source digest and
        ``version``; http: the URL and ``version``."""
        ...

    def case_key(self, case: EvalTestCase) -> str:
        """Hex SHA-256 of :meth:`fingerprint` and what this target sends for ``case`` (chat: the rendered
        messages; python/http: the case's inputs and ``vars``): the output store's key."""
        ...

    def estimate_cost(self, case: EvalTestCase) -> float:
        """US dollars generating ``case`` may cost at most (0.0 when the target is free or unpriced)."""
        ...

    def generate(self, case: EvalTestCase) -> TargetOutput:
        """Run the target on ``case`` (its fields and ``vars``, the dataset row's columns).

        Raises:
            TransientTargetError: a failure worth retrying (429, 5xx, timeout, dropped connection).
            TargetError: any other failure of this case.
            CredentialsError: the endpoint rejected the credentials (401): the run stops.
        """
        ...
