"""Planning and finishing a suite run, without Prefect (the flow and the CLI share these steps).

:func:`plan_run` does every check that can fail on user input — suite, dataset, each case against each
metric, provider credentials — before anything is scored, so the CLI can exit 2 fast.
:func:`finish_run` applies the gate and writes ``results.json``, ``junit.xml`` and ``summary.md``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaltasks._version import __version__
from evaltasks.datasets import LoadedDataset, load_dataset
from evaltasks.errors import DatasetError
from evaltasks.evaluate import collect_embedding_needs, validate_cases
from evaltasks.metrics.base import EmbeddingNeed
from evaltasks.reports import SCHEMA_VERSION, write_reports
from evaltasks.results import EvaluationResult
from evaltasks.suite import LoadedSuite, load_suite


@dataclass
class RunPlan:
    """A validated run: suite, dataset and the embedding work it needs.

    Attributes:
        suite: the loaded suite with its metric instances.
        dataset: the loaded dataset (cases, ids, locations).
        needs: provider namespace -> unique references and outputs to embed.
    """

    suite: LoadedSuite
    dataset: LoadedDataset
    needs: dict[str, EmbeddingNeed] = field(default_factory=dict)

    @property
    def work_items(self) -> int:
        """Case × metric results the run will produce (for progress bars)."""
        return len(self.dataset.cases) * len(self.suite.metrics)


@dataclass
class RunOutcome:
    """What a finished run produced: the result, the gate verdict and the report paths."""

    result: EvaluationResult
    passed: bool
    paths: dict[str, Path]
    header: dict[str, Any]

    def summary_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: gate verdict, report paths and the run summary."""
        return {
            "suite": self.header["suite"],
            "passed": self.passed,
            "results_path": str(self.paths["results.json"]),
            "summary": self.result.summary.model_dump(),
        }


def plan_run(suite_path: str | Path) -> RunPlan:
    """Load and validate a suite and its dataset, and check every case against every metric.

    Raises:
        ConfigError: the suite is invalid.
        DatasetError: the dataset is invalid, or cases lack what a metric needs (each problem located).
        CredentialsError: a provider's credentials are missing.
    """
    suite = load_suite(suite_path)
    dataset = load_dataset(suite.suite.dataset, suite.path.parent)
    problems = validate_cases(
        dataset.cases, suite.metrics, source=str(suite.path.parent / suite.suite.dataset.path),
        locations=dataset.locations,
    )
    if problems:
        raise DatasetError(problems)
    needs = collect_embedding_needs(dataset.cases, suite.metrics)
    return RunPlan(suite=suite, dataset=dataset, needs=needs)


def estimate_cost(plan: RunPlan, index_dir: str | Path | None) -> float:
    """Estimated US dollars of a run: the references not yet in the index plus every output, per provider."""
    from evaltasks.index import ReferenceIndex

    index = ReferenceIndex(index_dir)
    total = 0.0
    for need in plan.needs.values():
        if need.provider.estimate_cost(["x"]) == 0.0:
            continue  # free provider (local): no need to read the index
        total += need.provider.estimate_cost(index.missing_texts(need.provider, list(need.references)))
        total += need.provider.estimate_cost(list(need.outputs))
    return total


def index_plan(plan: RunPlan, index_dir: str | Path | None) -> dict[str, dict[str, int]]:
    """Embed every reference of ``plan`` into the index (``evaltasks index build``); counts per namespace."""
    from evaltasks.index import ReferenceIndex

    index = ReferenceIndex(index_dir)
    counts = {}
    for namespace, need in plan.needs.items():
        lookup = index.get_or_embed(need.provider, list(need.references))
        counts[namespace] = {"references_computed": lookup.computed, "references_reused": lookup.reused}
    return counts


def gate_passed(result: EvaluationResult, min_pass_rate: float) -> bool:
    """The gate: pass rate (passed cases / all cases) >= ``min_pass_rate``; an empty run fails."""
    return result.summary.cases > 0 and result.summary.pass_rate >= min_pass_rate - 1e-12


def finish_run(plan: RunPlan, result: EvaluationResult, output_dir: str | Path, started: float) -> RunOutcome:
    """Apply the gate and write the three reports into ``output_dir``."""
    min_pass_rate = plan.suite.suite.gate.min_pass_rate
    passed = gate_passed(result, min_pass_rate)
    header: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "evaltasks_version": __version__,
        "suite": plan.suite.suite.name,
        "suite_path": str(plan.suite.path),
        "suite_sha256": plan.suite.sha256,
        "dataset": str(plan.dataset.path),
        "dataset_sha256": plan.dataset.sha256,
        "passed": passed,
        "gate": {"min_pass_rate": min_pass_rate},
        "duration_s": round(time.time() - started, 3),
        "embedding_models": [m.model_dump() for m in result.embedding_models],
        "reference_sets": [info.model_dump() for info in result.reference_sets],
    }
    paths = write_reports(
        Path(output_dir), result, header, passed=passed, min_pass_rate=min_pass_rate,
        duration_s=header["duration_s"],
    )
    return RunOutcome(result=result, passed=passed, paths={k: v for k, v in paths.items()}, header=header)
