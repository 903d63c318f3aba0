"""Tolerant parsing of a judge's JSON answer, then validation against the request's JSON Schema.

Endpoints without structured outputs answer JSON wrapped in prose or Markdown fences; this finds the JSON value
in such text. What is found must then satisfy the schema (``jsonschema``, Draft 2020-12): an answer that does
not is an error of that answer (:class:`~evaltasks.judges.base.JudgeError`), never a silent default score.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from evaltasks.errors import bounded
from evaltasks.judges.base import JudgeError

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def _candidates(text: str) -> list[str]:
    """Texts that may hold the JSON value, most likely first: the whole text, each fenced block, then the
    span from each ``{`` / ``[`` to the end (``raw_decode`` stops at the value's end)."""
    found = [text.strip()]
    found += [m.group(1).strip() for m in _FENCE.finditer(text)]
    for opener in ("{", "["):
        start = text.find(opener)
        while start != -1 and len(found) < 64:
            found.append(text[start:])
            start = text.find(opener, start + 1)
    return found


def extract_json(text: str) -> Any:
    """The first JSON value found in ``text`` (see :func:`_candidates`).

    Raises:
        JudgeError: no JSON value in it (the message quotes the start of the text).
    """
    decoder = json.JSONDecoder()
    for candidate in _candidates(text):
        if not candidate:
            continue
        try:
            value, _ = decoder.raw_decode(candidate)
        except ValueError:
            continue
        return value
    raise JudgeError(f"the judge's answer is not JSON: {bounded(text.strip(), 200)!r}")


def parse_answer(text: str, schema: Mapping[str, Any] | None) -> Any:
    """The JSON value in ``text``, checked against ``schema`` (None: any JSON value).

    Raises:
        JudgeError: no JSON in the text, or the value does not satisfy the schema (the message names the
            failing path, e.g. ``verdicts/2/verdict: 'maybe' is not one of ['yes', 'no']``).
    """
    value = extract_json(text)
    if schema is not None:
        import jsonschema

        validator = jsonschema.Draft202012Validator(dict(schema))
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(the answer)"
            raise JudgeError(f"the judge's answer does not match the schema at {where}: {bounded(error.message, 200)}")
    return value
