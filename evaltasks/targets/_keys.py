"""Content digests shared by the target kinds: fingerprints and output-store keys."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from evaltasks.test_case import EvalTestCase

CASE_INPUT_FIELDS = (
    "input",
    "expected_output",
    "name",
    "references",
    "context",
    "retrieval_context",
    "expected_tools",
    "vars",
)
"""The case fields a python or http target may read: part of its case key (``actual_output``, which the target
fills, and ``generation`` are not)."""


def canonical_digest(value: Any) -> str:
    """Hex SHA-256 of ``value`` as canonical JSON (sorted keys, no spaces, UTF-8; values JSON cannot hold are
    written with ``repr``)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def case_inputs(case: EvalTestCase) -> dict[str, Any]:
    """The fields of ``case`` a target may read (:data:`CASE_INPUT_FIELDS`), as plain JSON values."""
    return {name: getattr(case, name) for name in CASE_INPUT_FIELDS}


def template_variables(case: EvalTestCase) -> dict[str, Any]:
    """The variables a template (a chat prompt, an http body) sees for ``case``: the case's own fields
    (``input``, ``expected_output``, ``context``..., None when unset), each of the row's columns (``vars``) that
    does not name a case field that is set, and ``vars`` itself."""
    variables: dict[str, Any] = {name: value for name, value in case_inputs(case).items() if name != "vars"}
    for name, value in (case.vars or {}).items():
        if variables.get(name) is None:
            variables[name] = value
    variables["vars"] = dict(case.vars or {})
    return variables
