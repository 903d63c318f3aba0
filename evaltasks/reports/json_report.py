"""results.json: the machine-readable contract read by the GitHub Action and other tools.

Top-level keys: ``schema_version``, ``evaltasks_version``, ``suite``, ``suite_sha256``, ``dataset``,
``dataset_sha256``, ``passed`` (the gate held), ``gate``, ``embedding_models``, ``summary``, ``cases``.
Cases are written one at a time (a stream), so memory does not grow with the report.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evaltasks._atomic import atomic_writer
from evaltasks.results import EvaluationSummary, TestCaseResult

SCHEMA_VERSION = 1


def results_head(header: dict[str, Any], summary: EvaluationSummary) -> str:
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
    path: Path, header: dict[str, Any], summary: EvaluationSummary, cases: Iterable[TestCaseResult]
) -> None:
    """Stream ``results.json`` to ``path`` atomically (temporary file, then rename)."""
    with atomic_writer(path) as out:
        out.write(results_head(header, summary))
        for i, case in enumerate(cases):
            out.write(results_case(case, i == 0))
        out.write(RESULTS_TAIL)
