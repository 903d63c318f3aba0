"""Reading a baseline: a ``results.json`` of an earlier run, checked before a comparison
(:mod:`evaltasks.engine.compare`) pairs its cases with a run's.

The baseline is read as plain JSON (any ``results.json`` of schema versions :data:`BASELINE_SCHEMA_VERSIONS`), so
a baseline written by an older evaltasks still compares; every problem is named by file, case and field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evaltasks.errors import InputError, Problem, quote


def load_baseline(path: str | Path, name: str | None = None) -> dict[str, Any]:
    """Read a baseline ``results.json``: the one check of a baseline, shared by ``evaltasks run --baseline`` and
    the Action's cached baseline (``action/baseline.py``).

    Args:
        path: the file to read.
        name: how errors name the file (default ``path``): the Action reads a copy but names its cache entry.

    Raises:
        InputError: the file is missing, unreadable, not JSON, lacks ``summary``/``cases``, or has the problems
            :func:`baseline_problems` finds (named in the message with the file).
    """
    source = str(path) if name is None else name
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError([Problem(source, "", "", "baseline results file not found")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError([Problem(source, "", "", f"cannot read the baseline: {exc}")]) from None
    except json.JSONDecodeError as exc:
        raise InputError([Problem(source, f"line {exc.lineno}", "", f"baseline is not JSON: {exc.msg}")]) from None
    except RecursionError:
        raise InputError([Problem(source, "", "", "baseline is not JSON: nested too deeply")]) from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("summary"), dict)
        or not isinstance(data.get("cases"), list)
    ):
        raise InputError([Problem(source, "", "", "not an evaltasks results.json (needs 'summary' and 'cases')")])
    data = reference_target_cases(data)
    problems = baseline_problems(data, source)
    if problems:
        raise InputError(problems, title="invalid baseline")
    return data


def reference_target_cases(data: dict[str, Any]) -> dict[str, Any]:
    """A results.json of a run with several targets (``targets``, schema version 3) as a baseline: only the first
    target's cases (its ``summary`` is already the run's), so that ids are unique again and a run is compared
    with the baseline's reference target (docs/targets.md#the-generate-stage). Other results.json as they are."""
    targets = data.get("targets")
    if not isinstance(targets, list) or len(targets) < 2 or not isinstance(targets[0], dict):
        return data
    first = targets[0].get("name")
    cases = [
        case
        for case in data["cases"]
        if not isinstance(case, dict)
        or not isinstance(case.get("generation"), dict)
        or case["generation"].get("target") == first
    ]
    return {**data, "cases": cases}


# results.json versions a comparison reads (evaltasks/reports/json_report.py SCHEMA_VERSION is the newest)
BASELINE_SCHEMA_VERSIONS = (1, 2, 3, 4)
BASELINE_PROBLEMS_SHOWN = 20


def _number_problem(value: Any) -> str | None:
    """Why ``value`` is not a finite number or null (JSON's NaN and Infinity, which Python reads, included)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number or null, got {quote(value)}"
    if not math.isfinite(value):
        return f"must be a finite number or null, got {value}"
    return None


def _summary_problems(summary: Mapping[str, Any], source: str) -> list[Problem]:
    """Non-finite or non-numeric ``pass_rate`` / per-metric ``mean_score`` and ``pass_rate`` of a baseline's
    summary (the comparison reports their deltas)."""
    problems = []
    why = _number_problem(summary.get("pass_rate"))
    if why:
        problems.append(Problem(source, "summary", "pass_rate", why))
    metrics = summary.get("metrics")
    for name, entry in metrics.items() if isinstance(metrics, Mapping) else ():
        for field in ("mean_score", "pass_rate"):
            why = _number_problem(entry.get(field)) if isinstance(entry, Mapping) else None
            if why:
                problems.append(Problem(source, "summary", f"metrics.{name}.{field}", why))
    return problems


def baseline_problems(data: Mapping[str, Any], source: str) -> list[Problem]:
    """What makes a parsed results.json (a mapping whose ``cases`` is a list) unusable as a baseline, each named
    by file, case and field: a ``schema_version`` this evaltasks does not read (a newer one's), a case that is
    not an object or has no ``id``, a case id used twice (its cases could not be paired), ``metrics`` that is
    not a list, a metric score (or a summary's pass rate or mean score) that is not a finite number or null.
    At most :data:`BASELINE_PROBLEMS_SHOWN` problems."""
    problems: list[Problem] = []
    version = data.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version not in BASELINE_SCHEMA_VERSIONS:
        problems.append(
            Problem(
                source,
                "",
                "schema_version",
                f"is {quote(version)}: this evaltasks reads results.json "
                f"versions {', '.join(map(str, BASELINE_SCHEMA_VERSIONS))} (written by a newer one?)",
            )
        )
    summary = data.get("summary")
    problems += _summary_problems(summary if isinstance(summary, Mapping) else {}, source)
    seen: dict[str, int] = {}
    for i, case in enumerate(data["cases"]):
        if len(problems) >= BASELINE_PROBLEMS_SHOWN:
            break
        if not isinstance(case, Mapping):
            problems.append(Problem(source, f"cases[{i}]", "", f"is not an object (got {quote(case)})"))
            continue
        if case.get("id") is None:
            problems.append(Problem(source, f"cases[{i}]", "id", "is missing: cases are paired by id"))
            continue
        case_id = str(case.get("id"))
        if case_id in seen:
            problems.append(
                Problem(
                    source,
                    f"cases[{i}]",
                    "id",
                    f"{quote(case_id)} is also cases[{seen[case_id]}]: ids must be unique to pair cases",
                )
            )
        seen.setdefault(case_id, i)
        metrics = case.get("metrics")
        if metrics is not None and not isinstance(metrics, list):
            problems.append(
                Problem(source, f"cases[{i}] (id {quote(case_id)})", "metrics", f"must be a list, got {quote(metrics)}")
            )
            continue
        for m in metrics or []:
            why = _number_problem(m.get("score")) if isinstance(m, Mapping) else None
            if why:
                problems.append(
                    Problem(source, f"cases[{i}] (id {quote(case_id)})", f"metrics.{m.get('name')}.score", why)
                )
    return problems[:BASELINE_PROBLEMS_SHOWN]
