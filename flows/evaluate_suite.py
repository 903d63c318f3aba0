"""The ``evaluate-suite`` flow: load a suite and its dataset, evaluate, write reports, publish artifacts.

Run it with ``evaltasks run SUITE``, call ``evaluate_suite(...)`` from Python, or deploy it from
``prefect.yaml`` (entry point ``flows/evaluate_suite.py:evaluate_suite``).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from prefect import flow, get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from evaltasks import _progress
from evaltasks.embeddings import VectorTable
from evaltasks.errors import ProviderError
from evaltasks.evaluate import assemble, model_infos, prepare_reference_searches
from evaltasks.index import ReferenceIndex, default_index_dir
from evaltasks.results import EmbeddingCounts, MetricResult
from evaltasks.compare import DEFAULT_TOLERANCE
from evaltasks.run import RunOutcome, finish_run, plan_run
from evaltasks.tasks import artifact_key, embed_outputs, embed_references, publish_artifacts, score_batch

DEFAULT_BATCH_SIZE = 1000
EMBED_CHUNK = 4096


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def flow_run_name() -> str:
    """``<suite name>@<first 8 hex of the suite file's sha256>``, e.g. ``truthfulqa-davinci@4aeaad91``."""
    from prefect.runtime import flow_run

    suite_path = Path(str(flow_run.parameters.get("suite_path", "")))
    try:
        raw = suite_path.read_bytes()
        data = yaml.safe_load(raw)
        name = data.get("name") if isinstance(data, dict) else None
        return f"{name or suite_path.stem}@{hashlib.sha256(raw).hexdigest()[:8]}"
    except (OSError, yaml.YAMLError):
        return f"{suite_path.stem or 'suite'}@unreadable"


def make_task_runner(spec: str = "threads") -> Any:
    """A Prefect task runner from a short spec.

    ``threads`` / ``threads:N`` (default; N workers), ``processes`` / ``processes:N``, ``dask`` (a new local
    cluster; ``dask:N`` with N worker processes) or ``dask:tcp://HOST:PORT`` (an existing cluster), and
    ``ray`` / ``ray:ADDRESS`` where prefect-ray is installed. Models and FAISS searches are loaded lazily once
    per worker process, never pickled with each task.

    Raises:
        ValueError: an unknown spec, or a runner whose integration package is not installed.
    """
    kind, _, arg = spec.partition(":")
    if kind == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=int(arg) if arg else None)
    if kind == "processes":
        from prefect.task_runners import ProcessPoolTaskRunner

        return ProcessPoolTaskRunner(max_workers=int(arg) if arg else None)
    if kind == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as exc:
            raise ValueError("task runner 'dask' needs prefect-dask: pip install 'evaltasks[dask]'") from exc
        if arg.startswith(("tcp://", "tls://", "inproc://")) or "://" in spec[5:]:
            return DaskTaskRunner(address=spec[5:])
        workers = int(arg) if arg else 2
        return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "processes": True})
    if kind == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError as exc:
            raise ValueError("task runner 'ray' needs prefect-ray: pip install prefect-ray") from exc
        return RayTaskRunner(address=spec[4:] or None)
    raise ValueError(f"unknown task runner '{spec}': use threads, processes, dask, dask:ADDRESS or ray")


@flow(name="evaluate-suite", flow_run_name=flow_run_name, log_prints=False)
def evaluate_suite(
    suite_path: str,
    output_dir: str = "eval-results",
    index_dir: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    cache: bool = True,
    reports_url: str | None = None,
    concurrency_limit: str | None = None,
    skip_missing_credentials: bool = False,
    baseline: str | None = None,
    regression_tolerance: float = DEFAULT_TOLERANCE,
) -> dict[str, Any]:
    """Evaluate the suite at ``suite_path`` and write results.json, junit.xml and summary.md.

    Args:
        suite_path: the suite YAML file (a path: flow parameters are capped at 512 KiB, datasets are not).
        output_dir: where the reports go.
        index_dir: the reference index directory (default ``$EVALTASKS_INDEX_DIR`` or ``.evaltasks/index``).
        batch_size: test cases per ``score-batch`` task run.
        cache: reuse cached task results (``embed-outputs``, ``score-batch``); False recomputes them.
        reports_url: where the written reports are published (adds a link artifact).
        concurrency_limit: a Prefect global concurrency limit (``prefect gcl create NAME --limit N``) that
            every embedding task occupies one slot of, so runs sharing a server share a provider's capacity.
        skip_missing_credentials: a metric whose provider credentials are missing is ``skipped`` (left out of
            the gate, with a warning) instead of failing the run: for pull requests from forks.
        baseline: a previous run's results.json (e.g. the base branch's) to compare with: deltas, changes and
            regressions go into results.json (``comparison``) and summary.md.
        regression_tolerance: score drops up to this (absolute) are not regressions.

    Another task runner: ``evaluate_suite.with_options(task_runner=make_task_runner("dask:4"))(...)``.

    Returns:
        ``{"suite", "passed", "results_path", "summary"}`` (the summary as in results.json).

    Raises:
        ConfigError, DatasetError, CredentialsError: invalid input (nothing is scored).
    """
    return run_suite(
        suite_path, output_dir, index_dir, batch_size, cache, reports_url, concurrency_limit,
        skip_missing_credentials, baseline, regression_tolerance,
    ).summary_dict()


def run_suite(
    suite_path: str,
    output_dir: str,
    index_dir: str | None,
    batch_size: int,
    cache: bool,
    reports_url: str | None = None,
    concurrency_limit: str | None = None,
    skip_missing_credentials: bool = False,
    baseline: str | None = None,
    regression_tolerance: float = DEFAULT_TOLERANCE,
) -> RunOutcome:
    """The body of :func:`evaluate_suite` (call it inside a flow run); returns the full outcome."""
    logger = get_run_logger()
    started = time.time()
    plan = plan_run(suite_path, skip_missing_credentials=skip_missing_credentials)
    for warning in plan.suite.warnings:
        logger.warning("%s", warning)
    index_dir = str(index_dir or default_index_dir())
    cases = plan.dataset.cases
    metrics = plan.suite.metrics
    logger.info("Suite %r: %d cases × %d metrics", plan.suite.suite.name, len(cases), len(metrics))

    embed_outputs_task = embed_outputs.with_options(refresh_cache=True) if not cache else embed_outputs
    score_task = score_batch.with_options(refresh_cache=True) if not cache else score_batch

    counts = EmbeddingCounts()
    tables: dict[str, VectorTable] = {}
    failed: dict[str, str] = {}
    dims: dict[str, int] = {}
    for namespace, need in plan.needs.items():
        provider = need.provider
        ref_futures = [
            embed_references.submit(
                provider.provider, provider.model_name, chunk, index_dir, need.options, concurrency_limit
            )
            for chunk in _chunks(list(need.references), EMBED_CHUNK)
        ]
        outputs = [t for t in need.outputs if t not in need.references]  # a text equal to a reference: once
        out_futures = [
            embed_outputs_task.submit(
                provider.provider, provider.model_name, namespace, chunk, need.options,
                concurrency_limit=concurrency_limit,
            )
            for chunk in _chunks(outputs, EMBED_CHUNK)
        ]
        parts: list[VectorTable] = []
        try:
            for future in ref_futures:
                table, ref_counts = future.result()
                parts.append(table)
                counts = counts.add(ref_counts)
            for future in out_futures:
                table = future.result()
                reused = future.state.name == "Cached"
                parts.append(table.with_costs(np.zeros(len(table))) if reused else table)  # paid for earlier
                counts = counts.add(EmbeddingCounts(
                    outputs_computed=0 if reused else len(table), outputs_reused=len(table) if reused else 0,
                ))
        except ProviderError as exc:  # a provider still failing after retries errors its metrics, not the run
            logger.error("Embedding with %s failed: %s", namespace, exc)
            failed[namespace] = str(exc)
            continue
        tables[namespace] = need.share_costs(VectorTable.concat(parts))
        if len(tables[namespace]):
            dims[namespace] = int(tables[namespace].vectors.shape[1])
    logger.info("Embeddings: %s", counts.model_dump())
    set_infos = prepare_reference_searches(metrics, tables, plan.needs, ReferenceIndex(index_dir), len(cases))

    batches = _chunks(list(range(len(cases))), max(1, batch_size))
    futures = []
    for metric in metrics:
        namespace = metric.embedding_namespace
        key = metric.cache_key()
        for rows in batches:
            batch = [cases[i] for i in rows]
            vectors = None
            if namespace in tables:
                texts = [t for case in batch for group in metric.embedding_texts(case) for t in group]
                vectors = {namespace: tables[namespace].subset(texts)}
            futures.append(score_task.submit(metric, batch, vectors, key, failed or None))
    progress_id = create_progress_artifact(
        progress=0.0, key=artifact_key(plan.suite.suite.name, "progress"),
        description=f"Scored case × metric results of suite {plan.suite.suite.name}, in percent",
    )
    total, done = max(len(futures), 1), 0
    per_metric: list[list[MetricResult]] = []
    for m in range(len(metrics)):
        results: list[MetricResult] = []
        for future in futures[m * len(batches) : (m + 1) * len(batches)]:
            batch_results = future.result()
            results.extend(batch_results)
            _progress.advance(len(batch_results))
            done += 1
            update_progress_artifact(progress_id, progress=100.0 * done / total)
        per_metric.append(results)

    result = assemble(
        cases, plan.dataset.ids, metrics, per_metric, counts, model_infos(plan.needs, dims), set_infos
    )
    outcome = finish_run(plan, result, output_dir, started, baseline, regression_tolerance)
    for regression in outcome.comparison.regressions if outcome.comparison else []:
        logger.warning("Regression since the baseline: %s", regression)
    publish_artifacts(
        result, plan.suite.suite.name, passed=outcome.passed, min_pass_rate=plan.suite.suite.gate.min_pass_rate,
        reports_url=reports_url, comparison=outcome.comparison, warnings=plan.suite.warnings,
    )
    logger.info(
        "Pass rate %.2f%% (gate %.2f%%): %s", 100 * result.summary.pass_rate,
        100 * plan.suite.suite.gate.min_pass_rate, "PASSED" if outcome.passed else "FAILED",
    )
    return outcome
