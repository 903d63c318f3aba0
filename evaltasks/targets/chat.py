"""The ``chat`` target: an OpenAI-compatible chat model and a prompt template (docs/targets.md#chat-targets).

The prompt is a file of the user's repository with a ``### system`` and a ``### user`` part, like the judge
prompts (:func:`evaltasks.judges.prompts.parse_parts`): Jinja2 in the sandbox, undefined variables are errors
(naming the file and line), no HTML escaping, no ``include``. The variables are the case's fields (``input``,
``expected_output``, ``context``...) and the row's columns (:func:`~evaltasks.targets._keys.template_variables`).
An empty system part sends no system message.

Requests go through the judges' client (:meth:`evaltasks.judges.openai.OpenAIJudge.chat_completion`, the
process's shared one for the model and options): the same environment rules (the key only from
``OPENAI_API_KEY`` / ``AZURE_OPENAI_API_KEY``), rate limits, concurrency limit and retries (``max_attempts`` - 1
client retries of 408/409/429/5xx, timeouts and dropped connections, honouring ``Retry-After`` up to the
client's cap). A failure after them fails the case; 401/403 stop the run. Tokens come from the response's usage,
the cost from the judges' price table (:mod:`evaltasks.judges.prices`).

The store key of a case is the target's fingerprint (kind, model, endpoint, parameters) and the rendered
messages: a prompt edit regenerates exactly the cases whose rendered messages changed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from evaltasks.errors import CredentialsError
from evaltasks.targets._keys import CASE_INPUT_FIELDS, canonical_digest, template_variables
from evaltasks.targets.base import TargetError, TargetKind, TargetOutput
from evaltasks.targets.python import DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT, check_common
from evaltasks.test_case import EvalTestCase, ToolCall

DEFAULT_MAX_TOKENS = 1024
"""``max_tokens`` sent when the target sets none (it bounds the cost estimate of ``--max-cost``)."""


class PromptFileError(ValueError):
    """A chat target's prompt file is missing, unreadable, or not a valid two-part template."""


def _template_line(exc: BaseException) -> int | None:
    """The line (within its part) of the template frame where ``exc`` was raised (Jinja rewrites tracebacks to
    template lines, in frames whose file is ``<template>``), or None."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


class ChatTarget:
    """An OpenAI-compatible chat model answering each case through a prompt template.

    Args:
        model: the model (Azure OpenAI: the deployment).
        prompt: the template file (see the module docstring).
        name, cache, repeat, timeout, max_attempts: the shared target fields (docs/targets.md#suite-fields);
            ``timeout`` also bounds each HTTP request.
        temperature, max_tokens, seed, response_format: sent with every request when set (``max_tokens``
            default :data:`DEFAULT_MAX_TOKENS`).
        tools: OpenAI function definitions (``[{type: function, function: {name, parameters...}}]``); the names
            of the functions the model calls fill ``tools_called``, their arguments go to the metadata.
        options: the judge client's options (docs/judges.md#judge-client: ``base_url``, ``azure_endpoint``,
            ``api_version``, ``max_concurrency``, ``requests_per_minute``, ``tokens_per_minute``, ``prices``...);
            ``timeout`` and ``max_retries`` come from the target's fields.

    Raises:
        PromptFileError: the prompt file cannot be read or is not a valid template.
        ValueError: a field out of range, or ``api_key`` in ``options``.
    """

    kind: TargetKind = "chat"

    def __init__(
        self,
        *,
        model: str,
        prompt: str | Path,
        name: str = "chat",
        cache: bool = True,
        repeat: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        temperature: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        response_format: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        from evaltasks.judges.openai import resolve_endpoint

        options = dict(options or {})
        if "api_key" in options:
            raise ValueError("api_key must not be given to a chat target: set OPENAI_API_KEY in the environment")
        max_concurrency = options.get("max_concurrency", 8)
        check_common(timeout, max_attempts, repeat, max_concurrency)
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        self.model = model
        self.prompt_path = Path(prompt)
        self.name = name
        self.cache = cache
        self.repeat = repeat
        self.timeout = float(timeout)
        self.max_attempts = max_attempts
        self.max_concurrency = max_concurrency
        self.params: dict[str, Any] = {
            key: value
            for key, value in (
                ("temperature", temperature),
                ("seed", seed),
                ("response_format", dict(response_format) if response_format is not None else None),
                ("tools", [dict(tool) for tool in tools] if tools is not None else None),
            )
            if value is not None
        }
        self.max_tokens = max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS
        self.options = {**options, "timeout": float(timeout), "max_retries": max_attempts - 1}
        self.endpoint = resolve_endpoint(options)
        self._load_prompt()
        self._client: Any = None
        self._lock = threading.Lock()

    def _load_prompt(self) -> None:
        from evaltasks.judges.prompts import PromptError, parse_parts, sandbox

        try:
            text = self.prompt_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PromptFileError(
                f"cannot read the prompt file {self.prompt_path}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        try:
            self.template, self._system_line, self._user_line = parse_parts(
                self.prompt_path.stem, text, str(self.prompt_path)
            )
        except PromptError as exc:
            raise PromptFileError(str(exc)) from None
        environment = sandbox()
        self._compiled = (environment.from_string(self.template.system), environment.from_string(self.template.user))

    def __repr__(self) -> str:
        return f"ChatTarget(model={self.model!r}, prompt={str(self.prompt_path)!r}, name={self.name!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_client", "_lock", "_compiled"):
            state[key] = None  # rebuilt in the worker process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        from evaltasks.judges.prompts import sandbox

        self.__dict__.update(state)
        self._lock = threading.Lock()
        environment = sandbox()
        self._compiled = (environment.from_string(self.template.system), environment.from_string(self.template.user))

    # -- variables and rendering ---------------------------------------------------------------------------
    def undefined_variables(self, columns: Collection[str]) -> list[str]:
        """One message per variable the prompt uses that is neither a case field nor one of ``columns`` (the
        dataset's), naming the prompt file and the line of its first use: the check a run makes when it loads
        the dataset, before any request."""
        import jinja2.meta
        import jinja2.nodes

        from evaltasks.judges.prompts import sandbox

        environment = sandbox()
        known = set(CASE_INPUT_FIELDS) | set(columns) | set(environment.globals)
        problems = []
        for part, first in ((self.template.system, self._system_line), (self.template.user, self._user_line)):
            tree = environment.parse(part)
            for name in sorted(jinja2.meta.find_undeclared_variables(tree) - known):
                line = min((node.lineno for node in tree.find_all(jinja2.nodes.Name) if node.name == name), default=1)
                problems.append(
                    f"{self.prompt_path}, line {line + first}: '{name}' is undefined (the dataset has no such "
                    f"column; columns: {', '.join(sorted(columns)) or 'none'})"
                )
        return problems

    def render(self, case: EvalTestCase) -> list[dict[str, str]]:
        """The chat messages for ``case`` (a system message unless the system part renders empty, then the user
        message).

        Raises:
            TargetError: an undefined variable or a template error, naming the prompt file and line.
        """
        import jinja2

        variables = template_variables(case)
        messages = []
        for role, compiled, first in (
            ("system", self._compiled[0], self._system_line),
            ("user", self._compiled[1], self._user_line),
        ):
            try:
                text = compiled.render(variables)
            except jinja2.TemplateError as exc:
                line = _template_line(exc)
                where = f", line {line + first}" if line is not None else ""
                reason = exc.message if isinstance(exc, jinja2.UndefinedError) else str(exc)
                raise TargetError(f"{self.prompt_path}{where}: {reason}") from None
            if role == "user" or text.strip():
                messages.append({"role": role, "content": text})
        return messages

    # -- the Target protocol -------------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """Hex SHA-256 of the kind, model, endpoint, ``max_tokens`` and the parameters sent (the rendered prompt is
        part of :meth:`case_key`)."""
        return canonical_digest(
            {
                "kind": self.kind,
                "model": self.model,
                "endpoint": self.endpoint,
                "max_tokens": self.max_tokens,
                "params": self.params,
            }
        )

    def case_key(self, case: EvalTestCase) -> str:
        """Hex SHA-256 of :meth:`fingerprint` and the messages rendered for ``case``. Raises TargetError when the
        prompt does not render for it."""
        return canonical_digest({"target": self.fingerprint(), "messages": self.render(case)})

    def estimate_cost(self, case: EvalTestCase) -> float:
        """US dollars generating ``case`` can cost at most: an upper bound of the prompt's tokens (each message +
        4, + 3, + the tools' JSON) and ``max_tokens`` completion tokens, at the model's price (0 when unpriced).
        A case whose prompt does not render costs 0 (it is not sent)."""
        from evaltasks.embeddings._tokens import upper_bound_tokens
        from evaltasks.judges.prices import resolve_price

        try:
            messages = self.render(case)
        except TargetError:
            return 0.0
        prompt = sum(upper_bound_tokens(m["content"]) + 4 for m in messages) + 3
        if "tools" in self.params:
            prompt += upper_bound_tokens(json.dumps(self.params["tools"], separators=(",", ":")))
        price = resolve_price(
            self.model,
            self.options.get("prices"),
            self.options.get("price_per_million_input_tokens"),
            self.options.get("price_per_million_output_tokens"),
        )
        return price.cost(prompt, self.max_tokens)

    def client(self) -> Any:
        """The shared chat client (:func:`evaltasks.judges.runtime.openai_client`), built on first use.

        Raises:
            CredentialsError: no API key is set (the run stops, or skips the target where that is asked).
        """
        with self._lock:
            if self._client is None:
                from evaltasks.judges.runtime import openai_client

                try:
                    self._client = openai_client(self.model, self.options)
                except CredentialsError as exc:
                    reason = exc.message.replace("the judge model", "the model", 1)
                    raise CredentialsError(f"the chat target {self.name}: {reason}") from None
            return self._client

    def missing_credentials(self) -> str | None:
        """Why this target cannot send (its API key is not set), or None when it can; sends nothing. A run that
        skips what lacks credentials (a pull request from a fork) skips the target's cases with this warning."""
        try:
            self.client()
        except CredentialsError as exc:
            return exc.message
        return None

    def generate(self, case: EvalTestCase) -> TargetOutput:
        """Send the rendered prompt and read the first choice: its text (``""`` when the model only called
        tools), the tools it called (names in ``tools_called``; with their arguments in ``tool_calls``, the
        arguments' JSON text parsed, None when it is not a JSON object), the usage and cost.

        Raises:
            TargetError: the prompt does not render; the endpoint refused the request or still failed after the
                client's retries; the answer has neither text nor tool calls.
            CredentialsError: no key, or the key was rejected (401/403).
        """
        from evaltasks.judges.base import JudgeError

        messages = self.render(case)
        try:
            completion = self.client().chat_completion(messages, max_tokens=self.max_tokens, params=self.params)
        except JudgeError as exc:
            raise TargetError(f"the chat target {self.name}: {exc}") from None
        choices = list(getattr(completion.response, "choices", None) or [])
        if not choices:
            raise TargetError(f"the chat target {self.name}: the response has no choices")
        message = choices[0].message
        text = getattr(message, "content", None)
        calls = list(getattr(message, "tool_calls", None) or [])
        names = [str(call.function.name) for call in calls if getattr(call, "function", None) is not None]
        if not isinstance(text, str) and not names:
            raise TargetError(
                f"the chat target {self.name}: the answer has no text and no tool calls "
                f"(finish_reason {getattr(choices[0], 'finish_reason', None)!r})"
            )
        metadata: dict[str, Any] = {"model": str(getattr(completion.response, "model", None) or self.model)}
        finish = getattr(choices[0], "finish_reason", None)
        if finish is not None:
            metadata["finish_reason"] = str(finish)
        if calls:
            metadata["tool_calls"] = [
                {"name": str(call.function.name), "arguments": str(call.function.arguments)}
                for call in calls
                if getattr(call, "function", None) is not None
            ]
        return TargetOutput(
            output=text if isinstance(text, str) else "",
            tools_called=names if "tools" in self.params or names else None,
            tool_calls=[_tool_call(call) for call in calls if getattr(call, "function", None) is not None]
            if "tools" in self.params or names
            else None,
            cost=completion.cost if self.client().price.known else None,  # an unpriced model's cost is unknown
            input_tokens=completion.prompt_tokens,
            output_tokens=completion.completion_tokens,
            metadata=metadata,
        )


def _tool_call(call: Any) -> ToolCall:
    """A chat completion's tool call as a :class:`ToolCall`: arguments parsed from their JSON text (None when
    they are not a JSON object: a model may write malformed arguments)."""
    try:
        arguments = json.loads(str(call.function.arguments))
    except ValueError:
        arguments = None
    return ToolCall(name=str(call.function.name), arguments=arguments if isinstance(arguments, dict) else None)
