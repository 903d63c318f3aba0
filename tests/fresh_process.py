"""Run evaltasks in a fresh Python process and report what it did (for warm-call tests).

A warm call is one in a new process: nothing of an earlier call is in memory (no loaded model, no provider that
learnt its endpoint's dimensions), only what is on disk (the index). The child prints one JSON line: its
results, and which heavy modules it imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HEAVY_MODULES = ("torch", "sentence_transformers", "transformers")

_EVALUATE = """
import json, sys
from evaltasks import EvalTestCase, ReferenceMatchMetric, evaluate_sync
rows, metric_kwargs, index_dir = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
cases = [EvalTestCase(input=r["input"], actual_output=r["actual_output"], references=r["references"]) for r in rows]
result = evaluate_sync(cases, [ReferenceMatchMetric(**metric_kwargs)], index_dir=index_dir)
print(json.dumps({
    "scores": [c.metrics[0].score for c in result.test_results],
    "embeddings": result.summary.embeddings.model_dump(), "cost": result.summary.evaluation_cost,
    "imported": [m for m in json.loads(sys.argv[4]) if m in sys.modules],
}))
"""

_CLI = """
import json, sys
from evaltasks.cli import main
code = main(json.loads(sys.argv[1]))
print(json.dumps({"exit": code, "imported": [m for m in json.loads(sys.argv[2]) if m in sys.modules]}))
"""


def run_script(script: str, args: list[str], env: dict[str, str] | None, cwd: Path | None) -> dict[str, Any]:
    """``python -c script *args`` in a new process (in ``cwd``, with ``env`` or this process's environment); it must
    exit 0 and print one JSON line last, which is returned."""
    proc = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env if env is not None else dict(os.environ),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def evaluate_in_fresh_process(
    rows: list[dict[str, Any]], metric_kwargs: dict[str, Any], index_dir: Path, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """``evaluate_sync`` of ``rows`` (``input``, ``actual_output``, ``references``) with one
    ``ReferenceMatchMetric(**metric_kwargs)`` and ``index_dir`` in a new process.

    Returns ``{"scores", "embeddings" (EmbeddingCounts as a dict), "cost", "imported"}`` (``imported``: the
    :data:`HEAVY_MODULES` the process had imported when the call returned).
    """
    return run_script(
        _EVALUATE, [json.dumps(rows), json.dumps(metric_kwargs), str(index_dir), json.dumps(HEAVY_MODULES)], env, None
    )


def cli_in_fresh_process(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> dict[str, Any]:
    """``evaltasks.cli.main(argv)`` (the ``evaltasks`` command's entry point) in a new process.

    Returns ``{"exit": its exit code, "imported": the HEAVY_MODULES imported when it returned}``.
    """
    return run_script(_CLI, [json.dumps(argv), json.dumps(HEAVY_MODULES)], env, cwd)
