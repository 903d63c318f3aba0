"""FunctionJudge: a user's own judge, a function from chat messages to the answer's text (the ``judge=`` hook of
the Python API; docs/judges.md#llm-judges)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from evaltasks.judges.base import Choice, JudgeError, JudgeReply, JudgeRequest
from evaltasks.judges.parsing import parse_answer


@dataclass
class FunctionJudge:
    """A user's own judge: a function from chat messages to the answer's text (the ``judge=`` hook).

    Args:
        function: called as ``function(messages)`` with a list of ``{"role", "content"}`` dicts; returns the
            answer's text (JSON text when the request has a schema). It is called from several threads at once.
        model: the name reported for it (default: the function's qualified name).

    ``n > 1`` requests call the function ``n`` times. There are no token log-probabilities
    (``supports_logprobs`` False) and no costs; the answer is parsed and validated as for any judge (a
    :class:`JudgeError` when it does not parse). An exception the function raises becomes a :class:`JudgeError`
    naming it, so that case is ``errored``.
    """

    function: Callable[[list[dict[str, str]]], str]
    model: str = ""
    supports_logprobs: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if not callable(self.function):
            raise TypeError(f"judge must be a function from messages to text, got {type(self.function).__name__}")
        if not self.model:
            self.model = (
                "function:"
                + getattr(self.function, "__module__", "?")
                + "."
                + getattr(self.function, "__qualname__", type(self.function).__name__)
            )

    def complete(self, request: JudgeRequest) -> JudgeReply:
        """Call the function ``request.n`` times; parse and validate each answer against ``request.schema``.

        Raises:
            JudgeError: the function raised, returned a non-string, or its answer does not satisfy the schema.
        """
        choices = []
        for calls in range(1, max(1, request.n) + 1):  # a failed request reports the calls it made
            try:
                text = self.function([dict(m) for m in request.messages])
            except Exception as exc:  # noqa: BLE001 - the user's judge failed on this case
                raise JudgeError(
                    f"the judge function {self.model} raised {type(exc).__name__}: {exc}", requests=calls
                ) from exc
            if not isinstance(text, str):
                raise JudgeError(
                    f"the judge function {self.model} returned {type(text).__name__}, not text", requests=calls
                )
            try:
                parsed = parse_answer(text, request.schema) if request.schema is not None else None
            except JudgeError as exc:
                raise JudgeError(str(exc), requests=calls) from None
            choices.append(Choice(text=text, parsed=parsed))
        return JudgeReply(choices=tuple(choices), model=self.model, requests=len(choices))
