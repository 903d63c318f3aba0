"""results.json: the machine-readable contract read by the GitHub Action and other tools.

Top-level keys: ``schema_version``, ``evaltasks_version``, ``suite``, ``suite_sha256``, ``dataset``,
``dataset_sha256``, ``passed`` (the gate held), ``gate`` (with ``fail_on``, ``alpha``, ``min_effect``, the
comparison's ``verdict`` and the failure ``message`` since version 2), ``embedding_models``, ``comparison`` (with a baseline), ``summary``
(with 95 % intervals and ``statistics`` since version 2), ``targets`` (runs with targets, since version 3: one
:class:`~evaltasks.results.TargetRun` each; each case's ``generation`` too), ``cases``. The JSON Schema is shipped as
``evaltasks/schema/results.schema.json``. Cases are written one at a time (a stream), so memory does not grow
with the report.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from evaltasks._atomic import atomic_writer
from evaltasks.engine.outcome import SCHEMA_VERSION
from evaltasks.results import EvaluationSummary, TestCaseResult


def results_head(header: Mapping[str, Any], summary: EvaluationSummary) -> str:
    """The top of results.json: the header keys, ``summary``, and the opening of ``cases``."""
    parts = ["{\n"]
    for key, value in header.items():
        parts.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},\n")
    parts.append(f'  "summary": {summary.model_dump_json()},\n')
    parts.append('  "cases": [')
    return "".join(parts)


RESULTS_TAIL = "\n  ]\n}\n"


def results_case(case: TestCaseResult, first: bool) -> str:
    """One element of ``cases`` with its separator."""
    return ("\n    " if first else ",\n    ") + case.model_dump_json()


def write_results_json(
    path: Path, header: Mapping[str, Any], summary: EvaluationSummary, cases: Iterable[TestCaseResult]
) -> None:
    """Stream ``results.json`` to ``path`` atomically (temporary file, then rename)."""
    with atomic_writer(path) as out:
        out.write(results_head(header, summary))
        for i, case in enumerate(cases):
            out.write(results_case(case, i == 0))
        out.write(RESULTS_TAIL)


def results_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of results.json at :data:`SCHEMA_VERSION`: ``summary``, ``cases`` and
    ``comparison`` generated from their pydantic models (:class:`~evaltasks.results.EvaluationSummary`,
    :class:`~evaltasks.results.TestCaseResult`, :class:`~evaltasks.engine.compare.Comparison`, serialization mode),
    the header written here. Shipped as ``evaltasks/schema/results.schema.json`` (a test checks the file equals
    this); other top-level keys are allowed, so a reader of version 2 accepts additions."""
    from pydantic import BaseModel
    from pydantic.json_schema import models_json_schema

    from evaltasks.engine.compare import Comparison
    from evaltasks.results import EmbeddingModelInfo, ReferenceSetInfo, TargetRun

    models: list[type[BaseModel]] = [
        EvaluationSummary,
        TestCaseResult,
        Comparison,
        EmbeddingModelInfo,
        ReferenceSetInfo,
        TargetRun,
    ]
    _, generated = models_json_schema([(m, "serialization") for m in models], ref_template="#/$defs/{model}")
    ref = "#/$defs/{}".format
    strings = {"type": "array", "items": {"type": "string"}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://evaltasks.dev/schema/results.schema.json",
        "title": "evaltasks results.json",
        "description": f"An evaltasks run's results (schema version {SCHEMA_VERSION}); docs/reports.md#outputs.",
        "type": "object",
        "required": ["schema_version", "evaltasks_version", "suite", "passed", "gate", "summary", "cases"],
        "properties": {
            "schema_version": {"const": SCHEMA_VERSION},
            "evaltasks_version": {"type": "string"},
            "suite": {"type": "string"},
            "suite_path": {"type": "string"},
            "suite_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "dataset": {"type": "string"},
            "dataset_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "passed": {"type": "boolean", "description": "The gate held."},
            "gate": {
                "type": "object",
                "required": ["min_pass_rate", "allow_errors", "pass_rate", "fail_on", "alpha", "min_effect", "verdict"],
                "properties": {
                    "min_pass_rate": {"type": "number", "minimum": 0, "maximum": 1},
                    "allow_errors": {"type": "boolean"},
                    "pass_rate": {
                        "type": ["number", "null"],
                        "minimum": 0,
                        "maximum": 1,
                        "description": "The pass rate the gate compares (null: no case evaluated).",
                    },
                    "fail_on": {"enum": ["min_pass_rate", "regression", "either"]},
                    "alpha": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                    "min_effect": {"type": "number", "minimum": 0, "maximum": 1},
                    "verdict": {
                        "enum": ["regressed", "improved", "no significant change", "inconclusive", None],
                        "description": "The comparison's verdict; null without a baseline.",
                    },
                    "message": {
                        "type": ["string", "null"],
                        "description": "Why the gate failed, naming the verdict (the Prefect flow run's "
                        "state message); null when it held.",
                    },
                },
            },
            "warnings": strings,
            "notices": strings,
            "started_at": {"type": "string", "format": "date-time"},
            "finished_at": {"type": "string", "format": "date-time"},
            "duration_s": {"type": "number", "minimum": 0},
            "embedding_models": {"type": "array", "items": {"$ref": ref("EmbeddingModelInfo")}},
            "reference_sets": {"type": "array", "items": {"$ref": ref("ReferenceSetInfo")}},
            "targets": {
                "type": "array",
                "items": {"$ref": ref("TargetRun")},
                "description": "With targets (since version 3): one entry per target, the first the reference.",
            },
            "comparison": {"$ref": ref("Comparison")},
            "summary": {"$ref": ref("EvaluationSummary")},
            "cases": {"type": "array", "items": {"$ref": ref("TestCaseResult")}},
        },
        "$defs": generated["$defs"],
    }
