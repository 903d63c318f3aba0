"""JsonSchemaMetric: is the output JSON that a JSON Schema accepts?

Source: eval-ai-library's ``JsonSchemaMetric`` documentation page
(https://library.eval-ai.com/metrics/deterministic/json-schema); the exact rules are
docs/metrics/deterministic.md#jsonschemametric. Differences from eval-ai-library: an invalid schema is rejected at construction, an output
wrapped in one Markdown code fence is unwrapped first, and the reason names the failing JSON path.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from itertools import islice
from typing import Any, ClassVar, cast

from jsonschema import (
    Draft3Validator,
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
)
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import validator_for
from referencing import Registry
from referencing.exceptions import Unresolvable  # jsonschema's $ref resolver (its dependency since 4.18)
from referencing.jsonschema import specification_with

from evaltasks.embeddings.base import VectorTable
from evaltasks.errors import bounded, quote
from evaltasks.metrics.base import BaseMetric
from evaltasks.metrics.registry import register_metric
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

LOGGED_ERRORS = 10  # schema errors kept in evaluation_log["errors"]
COUNTED_ERRORS = 1000  # schema errors counted per case; more are reported as "more than 1000"
ERROR_MAX_CHARS = 300  # one error message as logged (jsonschema quotes the failing value, which may be huge)
_JSON_SPACE = " \t\n\r"  # JSON's whitespace (RFC 8259): what json.loads skips around a value
_VALUE_START = frozenset('{["-0123456789tfn')  # the first character of any JSON value (RFC 8259)
_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_+.-]*[ \t]*\r?\n(.*)```", re.DOTALL)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (RFC 8259 has no NaN or Infinity)")


_decode = json.JSONDecoder(parse_constant=_reject_constant).decode

_KNOWN_VALIDATORS = (
    Draft3Validator,
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
)  # the drafts jsonschema validates

# Keywords whose values are data, not subschemas: a "$ref" key inside them is no reference.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


def _local_refs(node: Any, inside_root: bool = True) -> list[str]:
    """Every ``$ref`` of ``schema`` that points into the schema itself (starts with ``#``), in document order.
    Subschemas with their own ``$id`` (another base URI) and data keywords (``const``, ``enum``, ``default``,
    ``examples``) are not searched."""
    refs: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            if item is not node and isinstance(item.get("$id"), str):
                continue
            if isinstance(item.get("$ref"), str) and item["$ref"].startswith("#"):
                refs.append(item["$ref"])
            stack.extend(reversed([v for k, v in item.items() if k not in _DATA_KEYWORDS]))
    return refs


def schema_validator_class(schema: Mapping[str, Any]) -> type[Any]:
    """The ``jsonschema`` validator class of the draft ``schema``'s ``$schema`` names (draft 2020-12 when it
    names none).

    Raises:
        ValueError: ``$schema`` is not a string, or is a URI that names no draft ``jsonschema`` knows (the
            message names the URI and lists the known drafts' URIs).
    """
    if "$schema" not in schema:
        return cast("type[Any]", Draft202012Validator)
    uri = schema["$schema"]
    cls = validator_for(schema, default=None) if isinstance(uri, str) else None
    if cls is None:
        known = sorted({v.META_SCHEMA["$schema"] for v in _KNOWN_VALIDATORS})
        raise ValueError(f"schema's $schema {quote(uri)} names no known JSON Schema draft; known: {', '.join(known)}")
    return cast("type[Any]", cls)


def check_local_refs(schema: Mapping[str, Any], cls: type[Any]) -> None:
    """Resolve every ``$ref`` of ``schema`` that points into the schema itself (``#...``), with the
    ``referencing`` registry ``jsonschema`` validates with (the root resource in ``cls``'s draft).

    Raises:
        ValueError: one does not resolve (the message names it). References to other documents are left to
            validation, which never fetches them (the case is ``errored``).
    """
    refs = _local_refs(schema)
    if not refs:
        return
    specification = specification_with(cls.ID_OF(cls.META_SCHEMA))
    resolver = Registry().resolver_with_root(specification.create_resource(schema))
    for ref in refs:
        try:
            resolver.lookup(ref)
        except Unresolvable:
            raise ValueError(f"schema has a $ref that points nowhere in the schema: {quote(ref)}") from None


def unfence(text: str) -> tuple[str, bool]:
    """(the JSON text, whether it was fenced): ``text`` without ONE surrounding Markdown code fence
    (```` ```json ```` or ```` ``` ````, any language tag, the fence on its own lines, JSON whitespace around it:
    spaces, tabs, newlines), else ``text`` unchanged."""
    found = _FENCE.fullmatch(text.strip(_JSON_SPACE))
    return (found.group(1), True) if found else (text, False)


@register_metric("JsonSchemaMetric")
class JsonSchemaMetric(BaseMetric):
    """Score 1.0 when the output parses as JSON and ``schema`` accepts it, else 0.0.

    Rules: an output wrapped in one Markdown code fence is unwrapped first; the text is parsed by ``json``
    (RFC 8259: ``NaN`` and ``Infinity``, which Python's parser accepts, are invalid, a bare one reported as
    "Expecting value" at its first character; duplicate keys keep the last value); it is validated by the
    ``jsonschema`` validator of the draft the schema's ``$schema`` names
    (draft 2020-12 when it names none; a URI that names no draft is refused). ``format`` keywords are annotations, not
    assertions (no format checker, as in eval-ai-library and JSON Schema 2020-12's default): use
    :class:`~evaltasks.metrics.deterministic.format_check.FormatCheckMetric` or ``pattern`` to check formats.

    Args:
        threshold: minimum passing score, default 1.0.
        schema: the JSON Schema, a mapping (required); checked against its draft's meta-schema here.
        name: the name in results (default ``"JsonSchemaMetric"``).

    Raises:
        TypeError: ``schema`` is missing.
        ValueError: ``schema`` is not a mapping, or is not a valid schema (the message names the path in the
            schema and the problem), its ``$schema`` names no known draft, a ``$ref`` into the schema itself
            (``#/$defs/x``) does not resolve, a threshold outside [0, 1].

    A case errors (status ``errored``) when its JSON is nested too deeply to parse or validate, or the schema
    has a ``$ref`` to another document (remote references are never fetched).

    ``evaluation_log`` keys: ``valid_json``, ``fenced`` (a code fence was removed), ``errors`` (at most 10
    messages, ``"<JSON path>: <problem>"``, the invalid-JSON message when it did not parse), ``error_count``
    (schema errors, counted up to 1000).
    """

    version: ClassVar[str] = "1"

    def __init__(self, threshold: float = 1.0, *, schema: Mapping[str, Any], name: str | None = None) -> None:
        super().__init__(threshold, name=name)
        if schema is None:
            raise TypeError("JsonSchemaMetric requires schema (a JSON Schema object)")
        if not isinstance(schema, Mapping):
            raise ValueError(f"schema must be a JSON Schema object (a mapping), got {quote(schema)}")
        schema = copy.deepcopy(dict(schema))
        cls = schema_validator_class(schema)
        try:
            cls.check_schema(schema)
        except SchemaError as exc:
            raise ValueError(f"schema is invalid at {exc.json_path}: {bounded(exc.message, ERROR_MAX_CHARS)}") from None
        check_local_refs(schema, cls)
        self.schema = schema
        self._validator = cls(schema)

    def __getstate__(self) -> dict[str, Any]:
        """The pickled state: the validator is left out (jsonschema's ``$ref`` registry holds local functions,
        which ``pickle`` refuses) and rebuilt from ``schema`` on unpickling, e.g. in a Dask worker."""
        return {k: v for k, v in vars(self).items() if k != "_validator"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore a pickled metric and rebuild its validator (the schema was checked when it was built)."""
        vars(self).update(state)
        self._validator = validator_for(self.schema, default=Draft202012Validator)(self.schema)

    def config(self) -> dict[str, Any]:
        """Constructor arguments (threshold, name, schema)."""
        return {"threshold": self.threshold, "name": self.name, "schema": self.schema}

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Parse and validate each case's output; no embeddings involved. Outputs that cannot be JSON at all
        (their first non-space character starts no JSON value) share one (immutable) result object per position
        of that character."""
        results: list[MetricResult] = []
        append, scored, name, threshold = results.append, MetricResult.scored, self.name, self.threshold
        starts, space = _VALUE_START, _JSON_SPACE
        not_json: dict[tuple[int, int], MetricResult] = {}  # (line, column) -> result
        for case in cases:
            text = case.actual_output
            body = text.lstrip(space)
            first = body[:1]
            if first not in starts and first != "`":
                # cannot be JSON: json.loads would report "Expecting value" at the first non-space character
                pos = len(text) - len(body)
                where = (text.count("\n", 0, pos) + 1, pos - text.rfind("\n", 0, pos))
                result = not_json.get(where)
                if result is None:
                    reason, log = self._not_json(f"Expecting value at line {where[0]}, column {where[1]}", False)
                    result = not_json[where] = scored(name, 0.0, threshold, reason, log)
                append(result)
                continue
            append(self._score(text))
        return results

    def _score(self, text: str) -> MetricResult:
        """The result of one output that may be JSON (the slow path: unfence, parse, validate)."""
        name, threshold = self.name, self.threshold
        document, fenced = unfence(text) if text.lstrip(_JSON_SPACE)[:1] == "`" else (text, False)
        try:
            data = _decode(document)
        except json.JSONDecodeError as exc:
            reason, log = self._not_json(f"{exc.msg} at line {exc.lineno}, column {exc.colno}", fenced)
            return MetricResult.scored(name, 0.0, threshold, reason, log)
        except ValueError as exc:  # NaN/Infinity, or an integer beyond Python's digit limit
            reason, log = self._not_json(str(exc), fenced)
            return MetricResult.scored(name, 0.0, threshold, reason, log)
        except RecursionError:
            return MetricResult.errored(name, threshold, "the output's JSON is nested too deeply to parse")
        try:
            errors = list(islice(self._validator.iter_errors(data), COUNTED_ERRORS + 1))
        except RecursionError:
            return MetricResult.errored(name, threshold, "the output's JSON is nested too deeply to validate")
        except Unresolvable as exc:
            return MetricResult.errored(name, threshold, f"the schema has a $ref that cannot be resolved: {exc}")
        messages = [f"{e.json_path}: {bounded(e.message, ERROR_MAX_CHARS)}" for e in errors[:LOGGED_ERRORS]]
        log = {"valid_json": True, "fenced": fenced, "errors": messages, "error_count": len(errors)}
        inside = " (inside the code fence)" if fenced else ""
        if not errors:
            return MetricResult.scored(
                name, 1.0, threshold, f"The output{inside} is JSON that matches the schema.", log
            )
        best = best_match(errors)
        count = (
            f"more than {COUNTED_ERRORS} errors"
            if len(errors) > COUNTED_ERRORS
            else ("1 error" if len(errors) == 1 else f"{len(errors)} errors")
        )
        reason = (
            f"The output{inside} is JSON that does not match the schema ({count}): "
            f"{best.json_path}: {bounded(best.message, ERROR_MAX_CHARS)}."
        )
        return MetricResult.scored(name, 0.0, threshold, reason, log)

    @staticmethod
    def _not_json(problem: str, fenced: bool) -> tuple[str, dict[str, Any]]:
        """(reason, evaluation_log) of an output that is not JSON because of ``problem``."""
        inside = " (inside the code fence)" if fenced else ""
        return (
            f"The output{inside} is not valid JSON: {problem}.",
            {"valid_json": False, "fenced": fenced, "errors": [problem], "error_count": 0},
        )
