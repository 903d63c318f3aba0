"""A suite's ``target:`` / ``targets:`` blocks: their pydantic specs and the targets built from them.

One entry names one kind (``python``, ``chat`` or ``http``) beside the fields every kind shares
(docs/targets.md#suite-fields)::

    target:
      python: bot.answer:respond        # module.path:function, resolved like users' own metrics
      version: "3"
    # targets:                           # side by side; the first is the reference
    #   - {name: current,   chat: {model: gpt-4o-mini, prompt: prompts/answer.md}}
    #   - {name: candidate, chat: {model: gpt-4o-mini, prompt: prompts/answer-v2.md}}

Used by :func:`evaltasks.inputs.suite.load_suite` (:func:`build_targets`); the specs are part of the suite's
JSON Schema.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from evaltasks.errors import ConfigError, Problem, quote
from evaltasks.targets.base import Target
from evaltasks.test_case import EvalTestCase

KINDS = ("python", "chat", "http")
PYTHON_PATTERN = r"^[\w.]+:[\w.]+$"


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not a boolean, got {quote(value)}")
    return value


def _version_text(value: Any) -> Any:
    """A ``version`` written as a number (YAML reads ``version: 2`` as an integer) taken as its text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


def _python_spec(value: Any) -> Any:
    """Check a ``python:`` spec is ``module.path:function``; a clear message otherwise (not the pattern)."""
    if isinstance(value, str) and not re.fullmatch(PYTHON_PATTERN, value):
        raise ValueError(
            f"must name your callable as module.path:function, e.g. bot.answer:respond (bot/answer.py, next to "
            f"the suite file, defines respond), got {quote(value)}"
        )
    return value


class ChatSpec(BaseModel):
    """A ``chat`` target: an OpenAI-compatible chat model and a prompt template (docs/targets.md#chat-targets).

    The client options (``base_url`` ... ``price_per_million_output_tokens``) are the judge client's, with the
    same environment rules (docs/judges.md#judge-client); the API key comes only from the environment.
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, description="The model (Azure OpenAI: the deployment).")
    prompt: str = Field(
        min_length=1,
        description="Template file, relative to the suite file, with a `### system` and a `### user` part "
        "(Jinja2; the row's columns and the case's fields as variables).",
    )
    temperature: float | None = Field(default=None, ge=0, le=2, description="Sampling temperature (0-2).")
    max_tokens: int | None = Field(default=None, ge=1, description="Most tokens per answer (default 1024).")
    seed: int | None = Field(default=None, description="Sent with every request, for reproducible sampling.")
    response_format: dict[str, Any] | None = Field(
        default=None, description="Sent as the request's response_format, e.g. {type: json_object}."
    )
    tools: list[dict[str, Any]] | None = Field(
        default=None,
        description="OpenAI function definitions offered to the model; the tools it calls fill tools_called.",
    )
    base_url: str | None = Field(default=None, min_length=1, description="An OpenAI-compatible endpoint.")
    organization: str | None = None
    project: str | None = None
    azure_endpoint: str | None = Field(default=None, min_length=1, description="An Azure OpenAI endpoint.")
    api_version: str | None = Field(default=None, min_length=1, description="The Azure OpenAI API version.")
    max_concurrency: int | None = Field(default=None, ge=1, description="Requests in flight at once (default 8).")
    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    prices: dict[str, dict[str, float]] | None = Field(
        default=None, description="{model: {input, output}}, US dollars per million tokens."
    )
    price_per_million_input_tokens: float | None = Field(default=None, ge=0)
    price_per_million_output_tokens: float | None = Field(default=None, ge=0)

    _numbers = field_validator(
        "temperature",
        "max_tokens",
        "seed",
        "max_concurrency",
        "requests_per_minute",
        "tokens_per_minute",
        mode="before",
    )(_not_bool)

    def client_options(self) -> dict[str, Any]:
        """The judge client's options this entry sets (docs/judges.md#judge-client)."""
        names = (
            "base_url",
            "organization",
            "project",
            "azure_endpoint",
            "api_version",
            "max_concurrency",
            "requests_per_minute",
            "tokens_per_minute",
            "prices",
            "price_per_million_input_tokens",
            "price_per_million_output_tokens",
        )
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}


class HttpSpec(BaseModel):
    """An ``http`` target: a POST to the user's running app (docs/targets.md#http-targets)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, description="The app's endpoint (http or https).")
    body: Any = Field(
        default=None,
        description="The JSON body; its strings are Jinja2 templates over the row's columns and the case's "
        "fields (a string that is exactly one {{ variable }} keeps the value's JSON type). Default "
        '{"input": "{{ input }}"}.',
    )
    output: str = Field(
        default="output", min_length=1, description="JSON path of the answer in the response, e.g. data.choices.0.text."
    )
    retrieval_context: str | None = Field(default=None, min_length=1, description="JSON path of a list of texts.")
    tools_called: str | None = Field(default=None, min_length=1, description="JSON path of a list of tool names.")
    execution_trace: str | None = Field(
        default=None, min_length=1, description="JSON path of the agent's steps (a list of trace step objects)."
    )
    tool_calls: str | None = Field(
        default=None, min_length=1, description="JSON path of the calls made (a list of {name, arguments})."
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="{Header-Name: ENV_VAR_NAME}: each header's value is read from that environment variable.",
    )
    timeout: float | None = Field(default=None, gt=0, description="Seconds per case (overrides the entry's).")
    version: str | None = Field(default=None, description="Change it when the app changes (fingerprint).")

    _numbers = field_validator("timeout", mode="before")(_not_bool)
    _version = field_validator("version", mode="before")(_version_text)


class TargetSpec(BaseModel):
    """One target: exactly one of ``python``, ``chat``, ``http``, plus the fields every kind shares."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, description="Name in reports; default: the kind.")
    python: str | None = Field(
        default=None,
        description="Your callable as module.path:function (sync or async).",
        json_schema_extra={"pattern": PYTHON_PATTERN},
    )
    chat: ChatSpec | None = None
    http: HttpSpec | None = None
    version: str | None = Field(
        default=None, description="Change it when the code or app behind the target changes (fingerprint)."
    )
    cache: bool = Field(default=True, description="False: generate every run (the app is not deterministic).")
    repeat: int = Field(default=1, ge=1, description="Outputs generated (and scored) per case.")
    timeout: float = Field(default=60.0, gt=0, description="Seconds a case may take, retries included.")
    max_attempts: int = Field(default=4, ge=1, description="Tries per case: the first + retries of transient errors.")
    max_concurrency: int | None = Field(
        default=None, ge=1, description="Cases generated at once (python default 1, http 8, chat: its client's)."
    )

    _numbers = field_validator("repeat", "timeout", "max_attempts", "max_concurrency", mode="before")(_not_bool)
    _version = field_validator("version", mode="before")(_version_text)
    _python = field_validator("python", mode="before")(_python_spec)

    @model_validator(mode="after")
    def _one_kind(self) -> TargetSpec:
        given = [kind for kind in KINDS if getattr(self, kind) is not None]
        if len(given) != 1:
            raise ValueError(
                f"must name exactly one kind of target (python, chat or http), got {', '.join(given) or 'none'}"
            )
        return self

    @property
    def kind(self) -> Literal["python", "chat", "http"]:
        """The kind this entry names."""
        return "python" if self.python is not None else "chat" if self.chat is not None else "http"


def target_specs(target: TargetSpec | None, targets: Sequence[TargetSpec] | None) -> list[tuple[str, TargetSpec]]:
    """(location in the suite, spec) of each target: ``target`` or ``targets[i]``."""
    if target is not None:
        return [("target", target)]
    return [(f"targets[{i}]", spec) for i, spec in enumerate(targets or [])]


def build_targets(
    raw: Sequence[tuple[str, TargetSpec]] | TargetSpec | Sequence[TargetSpec],
    suite_dir: Path,
    suite_file: str,
) -> list[Target]:
    """The targets the suite's validated ``target:`` / ``targets:`` entries describe, in order.

    Args:
        raw: the entries: (location, spec) pairs (:func:`target_specs`), one spec, or a list of specs (located
            ``targets[i]``).
        suite_dir: the suite file's folder: a ``python`` module is imported from it (last on ``sys.path``) and a
            ``chat`` prompt is read relative to it.
        suite_file: the suite file, for messages.

    Raises:
        ConfigError: every problem found, located at ``target`` / ``targets[i]`` and the field: a callable that
            cannot be imported or is not callable, a module hidden by an installed one, a prompt that is missing
            or not a valid template, a URL that is not http(s), two targets with the same name.
    """
    if isinstance(raw, TargetSpec):
        entries = [("target", raw)]
    else:
        entries = [item if isinstance(item, tuple) else (f"targets[{i}]", item) for i, item in enumerate(raw)]
    problems: list[Problem] = []
    built: list[Target] = []
    names: dict[str, str] = {}
    for where, spec in entries:
        name = spec.name or spec.kind
        if name in names:
            problems.append(
                Problem(suite_file, where, "name", f"'{name}' is already used by {names[name]}; give one a `name:`")
            )
            continue
        names[name] = where
        try:
            built.append(_build_one(spec, name, suite_dir, suite_file, where))
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return built


def variable_problems(
    targets: Sequence[Target], cases: Sequence[EvalTestCase], suite_file: str, *, single: bool
) -> list[Problem]:
    """The variables the targets' templates (a chat prompt, an http body) use that no case field and no column of
    the dataset (any row's ``vars``) provides: one located problem each (``target`` when ``single``, else
    ``targets[i]``; field ``chat.prompt`` / ``http.body``), for the run to report when it loads the dataset,
    before any request (docs/targets.md#chat-targets)."""
    columns: set[str] = set()
    for case in cases:
        columns.update(case.vars or {})
    problems = []
    for i, target in enumerate(targets):
        check = getattr(target, "undefined_variables", None)
        if check is None:
            continue
        where = "target" if single else f"targets[{i}]"
        field = "chat.prompt" if target.kind == "chat" else "http.body"
        problems += [Problem(suite_file, where, field, message) for message in check(columns)]
    return problems


def _common(spec: TargetSpec, name: str) -> dict[str, Any]:
    """The keyword arguments every target class takes, from the entry's shared fields."""
    return {
        "name": name,
        "cache": spec.cache,
        "repeat": spec.repeat,
        "timeout": spec.timeout,
        "max_attempts": spec.max_attempts,
    }


def _build_one(spec: TargetSpec, name: str, suite_dir: Path, suite_file: str, where: str) -> Target:
    """The target of one entry. Raises ConfigError (located at ``where``)."""
    if spec.python is not None:
        return _python_target(spec, name, suite_dir, suite_file, where)
    if spec.chat is not None:
        return _chat_target(spec, spec.chat, name, suite_dir, suite_file, where)
    assert spec.http is not None
    return _http_target(spec, spec.http, name, suite_file, where)


def _python_target(spec: TargetSpec, name: str, suite_dir: Path, suite_file: str, where: str) -> Target:
    from evaltasks.metrics.registry import import_user_attribute
    from evaltasks.targets.python import PythonTarget, local_sources

    assert spec.python is not None
    try:
        function = import_user_attribute(spec.python, suite_dir, what="target")
    except KeyError as exc:
        raise ConfigError([Problem(suite_file, where, "python", str(exc.args[0]))]) from None
    if not callable(function):
        raise ConfigError(
            [
                Problem(
                    suite_file,
                    where,
                    "python",
                    f"'{spec.python}' is not callable: it is a value of type {type(function).__name__}",
                )
            ]
        )
    return PythonTarget(
        function,
        **_common(spec, name),
        version=spec.version,
        max_concurrency=spec.max_concurrency or 1,
        source_files=local_sources(function, suite_dir),
        spec=spec.python,
    )


def _chat_target(spec: TargetSpec, chat: ChatSpec, name: str, suite_dir: Path, suite_file: str, where: str) -> Target:
    from evaltasks.targets.chat import ChatTarget, PromptFileError

    options = chat.client_options()
    if spec.max_concurrency is not None:
        options.setdefault("max_concurrency", spec.max_concurrency)
    try:
        return ChatTarget(
            model=chat.model,
            prompt=(suite_dir / chat.prompt),
            **_common(spec, name),
            temperature=chat.temperature,
            max_tokens=chat.max_tokens,
            seed=chat.seed,
            response_format=chat.response_format,
            tools=chat.tools,
            options=options,
        )
    except PromptFileError as exc:
        raise ConfigError([Problem(suite_file, where, "chat.prompt", str(exc))]) from None
    except ValueError as exc:
        raise ConfigError([Problem(suite_file, where, "chat", str(exc))]) from None


def _http_target(spec: TargetSpec, http: HttpSpec, name: str, suite_file: str, where: str) -> Target:
    from evaltasks.targets.http import HttpTarget

    common = _common(spec, name)
    if http.timeout is not None:
        common["timeout"] = http.timeout
    try:
        return HttpTarget(
            url=http.url,
            body=http.body,
            output=http.output,
            retrieval_context=http.retrieval_context,
            tools_called=http.tools_called,
            execution_trace=http.execution_trace,
            tool_calls=http.tool_calls,
            headers=http.headers,
            version=http.version if http.version is not None else spec.version,
            max_concurrency=spec.max_concurrency or 8,
            **common,
        )
    except ValueError as exc:
        raise ConfigError([Problem(suite_file, where, "http", str(exc))]) from None
