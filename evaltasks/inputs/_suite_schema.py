"""The JSON Schema side of the suite format: the options and arguments a suite file may give, as editors see them.

:func:`metric_arguments_schema` describes one metric's suite entry from its constructor (type hints through
pydantic, defaults, the ``Args:`` of its docstring); :func:`metric_spec_schema` and :func:`judge_block_schema` are
the ``json_schema_extra`` hooks of the suite models (:mod:`evaltasks.inputs.suite`), whose
:func:`~evaltasks.inputs.suite.suite_json_schema` puts them together (docs/suite.md#suite-file).
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from typing import Any

from pydantic import TypeAdapter

from evaltasks.metrics import METRICS, USER_METRIC_PATTERN, BaseMetric, get_metric_class, metric_entry_points

# The openai provider's request-shaping options, described in the JSON Schema (every option is in docs/embeddings.md#embedding-providers;
# values are checked by the provider, and a wrong one is a ConfigError located at the metric).
OPENAI_OPTIONS_SCHEMA: dict[str, Any] = {
    "max_inputs_per_request": {
        "type": "integer",
        "minimum": 1,
        "description": "Inputs per embeddings request (default 2048; on Azure OpenAI 16; a "
        "'Too many inputs' answer sets the limit it states, once).",
    },
    "max_tokens_per_request": {
        "type": "integer",
        "minimum": 1,
        "default": 300000,
        "description": "Token budget of one embeddings request.",
    },
    "max_input_tokens": {
        "type": "integer",
        "minimum": 1,
        "default": 8191,
        "description": "Per-input limit; longer texts are truncated and flagged.",
    },
    "dimensions": {"type": "integer", "minimum": 1, "description": "Output dimensions (text-embedding-3-*)."},
}


# The judge client's options (docs/judges.md#llm-judges), described in the JSON Schema of the suite's `judge:` block
# and of a judge metric's `judge_options`; values are checked by the client. `api_key` is refused in a suite file
# (a committed secret): it comes from OPENAI_API_KEY / AZURE_OPENAI_API_KEY.
JUDGE_OPTIONS_SCHEMA: dict[str, Any] = {
    "base_url": {
        "type": "string",
        "description": "An OpenAI-compatible endpoint (vLLM, Ollama, LiteLLM); "
        "default $OPENAI_BASE_URL, else OpenAI's.",
    },
    "azure_endpoint": {"type": "string", "description": "Azure OpenAI endpoint (default $AZURE_OPENAI_ENDPOINT)."},
    "api_version": {"type": "string", "description": "Azure OpenAI API version (default $OPENAI_API_VERSION)."},
    "organization": {"type": "string"},
    "project": {"type": "string"},
    "temperature": {
        "type": "number",
        "minimum": 0,
        "maximum": 2,
        "default": 0,
        "description": "The judge model's sampling temperature.",
    },
    "max_concurrency": {
        "type": "integer",
        "minimum": 1,
        "default": 8,
        "description": "Judge requests in flight at once.",
    },
    "requests_per_minute": {"type": "number", "exclusiveMinimum": 0},
    "tokens_per_minute": {"type": "number", "exclusiveMinimum": 0},
    "prices": {
        "type": "object",
        "description": "{model: {input: USD, output: USD}} per million tokens, extending the built-in table.",
        "additionalProperties": {
            "type": "object",
            "properties": {"input": {"type": "number", "minimum": 0}, "output": {"type": "number", "minimum": 0}},
        },
    },
    "price_per_million_input_tokens": {"type": "number", "minimum": 0},
    "price_per_million_output_tokens": {"type": "number", "minimum": 0},
    "structured_outputs": {"enum": ["auto", "json_schema", "json_object", "off"], "default": "auto"},
    "logprobs": {"enum": ["auto", True, False], "default": "auto"},
    "timeout": {"type": "number", "exclusiveMinimum": 0, "default": 60, "description": "Seconds per request."},
    "max_retries": {"type": "integer", "minimum": 0, "default": 5},
    "content_retries": {"type": "integer", "minimum": 0, "default": 2},
    "seed": {"type": "integer"},
}
_NO_API_KEY: dict[str, Any] = {"not": {"required": ["api_key"]}}


# Constructor arguments whose suite form differs from their Python type (or is checked more strictly there).
SUITE_ARGUMENT_SCHEMAS: dict[str, dict[str, Any]] = {
    "threshold": {"type": "number", "minimum": 0, "maximum": 1},
    "name": {"type": "string", "minLength": 1, "description": "Name in results; default: the class name."},
    "reference_set": {"type": "string", "description": "The name of a set declared under `reference_sets:`."},
    "provider_options": {
        "type": "object",
        "additionalProperties": True,
        "properties": OPENAI_OPTIONS_SCHEMA,
        "description": "Embedding provider options of this metric (override the suite's `embeddings:`).",
    },
    "judge_options": {
        "type": "object",
        "additionalProperties": True,
        "properties": JUDGE_OPTIONS_SCHEMA,
        **_NO_API_KEY,
        "description": "Judge client options of this metric (override the suite's `judge:` block; docs/judges.md#llm-judges). "
        "No api_key: it comes from the environment.",
    },
    "samples": {
        "type": "integer",
        "minimum": 1,
        "description": "Times each case is judged; the score is the "
        "mean, and a case whose samples fall on both sides of the threshold is unstable. Default: the "
        "suite's `judge: {samples}`, else 1.",
    },
    "prompts": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "Prompt name -> template file (relative to the suite file) replacing the built-in one.",
    },
}


# :role:`a.b.C`, :role:`~a.b.C` (shown as C), :role:`Title <a.b.C>` (shown as Title)
_SPHINX_ROLE = re.compile(r":[\w:.-]+:`(~?)([^`<]*?)(?:\s*<[^`>]*>)?`")


def plain_description(text: str) -> str:
    """``text`` (reST from a docstring) as the Markdown-ish plain text editors show in hovers: ````x```` ->
    `` `x` ``, ``:role:`~a.b.C``` -> `` `C` ``, ``:role:`a.b.C``` -> `` `a.b.C` ``."""
    text = _SPHINX_ROLE.sub(lambda m: "`" + (m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2)) + "`", text)
    return text.replace("``", "`")


def _docstring_args(doc: str | None) -> dict[str, str]:
    """``name -> description`` from the ``Args:`` section of a Google-style docstring (continuation lines
    joined); {} when there is none."""
    described: dict[str, str] = {}
    lines = inspect.cleandoc(doc or "").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Args:")
    except StopIteration:
        return described
    current, indent = None, None
    for line in lines[start + 1 :]:
        depth = len(line) - len(line.lstrip())
        if not line.strip() or depth == 0:
            break
        indent = depth if indent is None else indent
        match = re.match(r"(\w+)(?: \(.*?\))?: (.*)$", line.strip()) if depth == indent else None
        if match:  # an entry: "name: description" at the section's indentation
            current = match.group(1)
            described[current] = match.group(2).strip()
        elif current is not None:  # a continuation line, indented deeper
            described[current] += " " + line.strip()
    return described


def metric_arguments_schema(cls: type[BaseMetric]) -> dict[str, Any]:
    """The JSON Schema of one suite metric entry naming ``cls``: ``metric`` (its name is set by the caller), and
    each constructor parameter as a property (from its type hint through a pydantic TypeAdapter, its default,
    its description from the class docstring's ``Args:``); parameters without a default are ``required``; other
    keys are refused unless the constructor takes ``**kwargs``. A type with no JSON form allows any value."""
    try:
        hints = typing.get_type_hints(cls.__init__, include_extras=True)  # Annotated constraints included
    except Exception:  # noqa: BLE001 - unresolvable annotations: any value
        hints = {}
    descriptions = _docstring_args(cls.__doc__)
    properties: dict[str, Any] = {}
    required = ["metric"]
    extra = False
    for parameter in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            extra = extra or parameter.kind is parameter.VAR_KEYWORD
            continue
        if parameter.name in SUITE_ARGUMENT_SCHEMAS:
            prop = dict(SUITE_ARGUMENT_SCHEMAS[parameter.name])
        else:
            try:
                prop = TypeAdapter(hints[parameter.name]).json_schema() if parameter.name in hints else {}
            except Exception:  # noqa: BLE001 - e.g. an arbitrary class: no JSON form
                prop = {}
            if "$defs" in prop or "$ref" in prop:  # references would not resolve inside the suite schema
                prop = {}
            prop.pop("title", None)
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
        elif parameter.default is not None or parameter.name not in SUITE_ARGUMENT_SCHEMAS:
            try:
                json.dumps(parameter.default)
                prop["default"] = parameter.default
            except (TypeError, ValueError):
                pass
        if parameter.name in descriptions:
            prop["description"] = plain_description(descriptions[parameter.name])
        properties[parameter.name] = prop
    return {
        "title": cls.__name__,
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": extra,
    }


def metric_spec_schema(schema: dict[str, Any]) -> None:
    """MetricSpec's JSON Schema: a union keyed on ``metric`` (docs/suite.md#suite-file).

    One ``oneOf`` branch per built-in metric (its own arguments, from :func:`metric_arguments_schema`), one per
    entry point installed where the schema is generated (its class's arguments, or any when it fails to load),
    and one for ``module.path:Class`` (your own metric: any arguments; the CLI checks them).
    """
    branches = []
    names = list(METRICS)
    for name, cls in METRICS.items():
        branch = metric_arguments_schema(cls)
        branch["properties"] = {"metric": {"const": name}, **branch["properties"]}
        branches.append(branch)
    for name in metric_entry_points():
        if name in METRICS or re.match(USER_METRIC_PATTERN, name):
            continue
        try:
            branch = metric_arguments_schema(get_metric_class(name))
        except KeyError:
            branch = {"type": "object", "properties": {}, "required": ["metric"], "additionalProperties": True}
        branch["title"] = name
        branch["properties"] = {"metric": {"const": name}, **branch["properties"]}
        branches.append(branch)
        names.append(name)
    branches.append(
        {
            "title": "module:Class",
            "type": "object",
            "required": ["metric"],
            "additionalProperties": True,
            "properties": {
                "metric": {
                    "type": "string",
                    "pattern": USER_METRIC_PATTERN,
                    "description": "Your own BaseMetric subclass, as module.path:Class.",
                },
                "name": SUITE_ARGUMENT_SCHEMAS["name"],
            },
        }
    )
    metric = schema["properties"]["metric"]
    metric.pop("type", None)
    metric["anyOf"] = [{"type": "string", "enum": names}, {"type": "string", "pattern": USER_METRIC_PATTERN}]
    schema["additionalProperties"] = True
    schema["oneOf"] = branches


def judge_block_schema(schema: dict[str, Any]) -> None:
    """The ``judge:`` block's JSON Schema: ``model``, ``samples`` and the client options; no ``api_key``."""
    schema["properties"] = {**schema.get("properties", {}), **JUDGE_OPTIONS_SCHEMA}
    schema.update(_NO_API_KEY)


def plain_descriptions(node: Any) -> None:
    """Render every ``description`` in a JSON Schema with :func:`plain_description`, in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                node[key] = plain_description(value)
            else:
                plain_descriptions(value)
    elif isinstance(node, list):
        for item in node:
            plain_descriptions(item)
