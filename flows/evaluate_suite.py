"""The ``evaluate-suite`` flow: load a suite and its dataset, evaluate, write reports, publish artifacts.

Run it with ``evaltasks run SUITE``, call ``evaluate_suite(...)`` from Python, or deploy it from
``prefect.yaml`` (entry point ``flows/evaluate_suite.py:evaluate_suite``).
"""

import contextlib
import hashlib
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from filelock import Timeout as FileLockTimeout
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State
from prefect.context import FlowRunContext
from prefect.exceptions import TerminationSignal
from prefect.states import Completed, Failed
from prefect.utilities.annotations import quote

from evaltasks.embeddings.local import cancel_queued_encodes
from evaltasks.engine import pipeline
from evaltasks.engine import progress as _progress
from evaltasks.engine.embedding import collect_embedding_needs, model_infos
from evaltasks.engine.generation import Generated, TargetTallies, stop_generation
from evaltasks.engine.history import (
    REGRESSED_EVENT,
    DriftReport,
    ScoreMoments,
    event_payload,
    event_resource,
    resolve_history_dir,
)
from evaltasks.engine.lifecycle import RunOutcome, finish_streamed_run, record_history, regression_summary
from evaltasks.engine.options import with_run_options
from evaltasks.engine.pipeline import JudgeWiring
from evaltasks.engine.run import ParsedBaseline, PlannedRun, RunOptions, RunPlan, check_judge_prices, plan_run
from evaltasks.engine.run_metrics import RunMetricTally
from evaltasks.engine.stream import ProgressMeter, auto_batch_size, gc_frozen
from evaltasks.errors import GateFailed
from evaltasks.flows._prefect_executor import PrefectExecutor
from evaltasks.index import ReferenceIndex, default_index_dir, recording_warnings
from evaltasks.judges.binding import JUDGEMENTS_DIR
from evaltasks.reports.outcome import open_report_writer
from evaltasks.reports.verdict import verdict_line
from evaltasks.tasks import artifact_key, publish_artifacts, publish_history_artifact

HISTORY_ARTIFACT_RUNS = 20  # runs the <suite>-history artifact shows (this one included)


@task(name="load-dataset", cache_policy=NO_CACHE, persist_result=False)
def load_suite_and_dataset(
    suite_path: str, skip_missing_credentials: bool = False, planned: RunPlan | None = None, use_targets: bool = True
) -> Any:
    """The run's plan (:func:`evaltasks.engine.run.plan_run`: suite, dataset, metrics), loaded in a ``load-dataset``
    task run so that the load shows on the flow run's timeline. Called, not submitted: it runs in the flow's
    thread and its result (the whole dataset) is neither pickled nor persisted. Under ``evaltasks run`` the CLI
    has read the suite before the flow run started and passes its plan (``planned``, wrapped in Prefect's
    ``quote`` so that Prefect does not walk the dataset): unless a file changed since, the task run takes no time.

    Raises:
        ConfigError, DatasetError, CredentialsError: invalid input (as :func:`~evaltasks.engine.run.plan_run`).
    """
    return plan_run(
        suite_path, skip_missing_credentials=skip_missing_credentials, planned=planned, use_targets=use_targets
    )


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
    ``ray`` (a new local Ray instance) / ``ray:ADDRESS`` (an existing cluster, e.g. ``127.0.0.1:6379``) with
    ``evaltasks[ray]``. Models and FAISS searches are loaded lazily once per worker process, never pickled with
    each task. Dask and Ray workers report their task runs to ``PREFECT_API_URL``, else to this process's
    temporary server (workers on this machine only: others need a server they can reach).

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
            from evaltasks.flows._cluster_dask import DaskTaskRunner
        except ImportError as exc:
            raise ValueError("task runner 'dask' needs prefect-dask: pip install 'evaltasks[dask]'") from exc
        if arg and not arg.isdigit():  # a scheduler's address: SCHEME://HOST:PORT, or HOST:PORT (tcp://)
            return DaskTaskRunner(address=arg)
        workers = int(arg) if arg else 2
        return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "processes": True})
    if kind == "ray":
        try:
            from evaltasks.flows._cluster_ray import RayTaskRunner
        except ImportError as exc:
            raise ValueError("task runner 'ray' needs prefect-ray and ray: pip install 'evaltasks[ray]'") from exc
        return RayTaskRunner(address=spec[4:] or None)
    raise ValueError(f"unknown task runner '{spec}': use threads, processes, dask, dask:ADDRESS or ray")


@flow(name="evaluate-suite", flow_run_name=flow_run_name, log_prints=False)
@with_run_options
def evaluate_suite(
    suite_path: str,
    plan: PlannedRun | None = None,
    **options: Any,
) -> dict[str, Any] | State:
    """Evaluate the suite at ``suite_path`` and write results.json, junit.xml and summary.md.

    A run whose gate fails ends Failed, with the verdict line as its state message (:func:`run_verdict`, e.g.
    ``FAILED: pass rate 50.00% (2 of 4 cases), gate 90.00%``): a direct call then raises
    :class:`~evaltasks.errors.GateFailed` (its message results.json ``gate.message``), whose ``result`` is the
    dict below; ``evaluate_suite(..., return_state=True)`` returns the state instead (docs/prefect.md#prefect). A
    passing run ends Completed with its verdict line (``PASSED: …``) as the message.
    The run is tagged ``suite:<name>`` (and ``branch:<name>`` in the Action's environment, :func:`start_tags`),
    then ``verdict:passed``/``verdict:failed`` and, with a baseline, ``comparison:<verdict>``.

    Args:
        suite_path: the suite YAML file (a path: flow parameters are capped at 512 KiB, datasets are not).
        {run_options}
        plan: the suite (and ``baseline``) already parsed by the caller in this process
            (:meth:`PlannedRun.of <evaltasks.engine.run.PlannedRun.of>`; ``evaltasks run`` passes its
            validation's), used unless a file changed since. Prefect records only its short description (suite
            file, sha256, counts); from a deployment, or read back from JSON, it holds nothing and the flow
            parses the suite itself.

    Another task runner: ``evaluate_suite.with_options(task_runner=make_task_runner("dask:4"))(...)``.

    Returns:
        ``{"suite", "passed", "results_path", "summary", ..., "drift"}`` (the summary as in results.json;
        ``drift``: the run tested against the previous runs in its history, or None).

    Raises:
        GateFailed: the gate failed (the run ends Failed; the exception's ``result`` is the dict above).
        ConfigError, DatasetError, CredentialsError: invalid input (nothing is scored); CredentialsError also
            when a judge endpoint rejects the key (HTTP 401/403) during the run.
        InputError: ``max_cost`` with a judge model that has no price (nothing is scored).
    """
    run_options = RunOptions(**options)  # the parameters besides these two: RunOptions' fields (with_run_options)
    outcome = run_suite(suite_path, run_options, plan)
    result = outcome.summary_dict()
    verdict = run_verdict(outcome)
    _print_served_verdict(verdict, run_options.output_dir)
    if outcome.passed:
        return Completed(message=verdict, data=result)
    message = outcome.gate.message or "gate failed"  # lifecycle.gate_message: names the verdict
    return Failed(message=verdict, data=GateFailed(message, result))


SERVED_VERDICT_ENV = "EVALTASKS_SERVE_VERDICT"
"""Set to ``1`` by ``evaltasks serve`` for the flow runs it starts (they inherit its environment, and Prefect's
runner streams their output to its terminal): each then prints its verdict line (:func:`_print_served_verdict`)."""


def _print_served_verdict(verdict: str, output_dir: str | None) -> None:
    """Under ``evaltasks serve`` (:data:`SERVED_VERDICT_ENV`), print one line per run to stdout: the flow run's
    name, the ``verdict`` line and where the reports are, e.g. ``quickstart@1a2b3c4d: PASSED: pass rate 75.00%
    (6 of 8 cases), gate 70.00% (reports: /srv/eval-results/quickstart/results.json)``. Otherwise nothing."""
    from evaltasks.settings import get_settings

    if not get_settings(only=["serve_verdict"]).serve_verdict:
        return
    context = FlowRunContext.get()
    name = context.flow_run.name if context is not None and context.flow_run is not None else "evaluate-suite"
    reports = f" (reports: {Path(output_dir) / 'results.json'})" if output_dir else ""
    print(f"{name}: {verdict}{reports}", flush=True)


def run_verdict(outcome: RunOutcome) -> str:
    """The run's verdict line (:func:`evaltasks.reports.verdict.verdict_line`, with the comparison when there is
    a baseline), from the gate that results.json records (``gate``): the flow run's final state message."""
    return verdict_line(outcome.report)


def _tag(value: str) -> str:
    """A tag's value: words joined by hyphens (``no significant change`` -> ``no-significant-change``)."""
    return "-".join(str(value).split())


def start_tags(suite_name: str) -> list[str]:
    """The tags a run gets once its suite is read: ``suite:<name>``, and ``branch:<name>`` when
    ``$GITHUB_HEAD_REF`` (a pull request's branch) or ``$GITHUB_REF_NAME`` is set (the Action's environment)."""
    from evaltasks._env import env_value

    tags = [f"suite:{_tag(suite_name)}"]
    branch = env_value("GITHUB_HEAD_REF") or env_value("GITHUB_REF_NAME")
    if branch:
        tags.append(f"branch:{_tag(branch)}")
    return tags


def _verdict_tags(passed: bool, comparison_verdict: str | None) -> list[str]:
    """``verdict:passed`` / ``verdict:failed``, and ``comparison:<verdict>`` with a baseline (e.g.
    ``comparison:regressed``, ``comparison:no-significant-change``)."""
    tags = [f"verdict:{'passed' if passed else 'failed'}"]
    if comparison_verdict:
        tags.append(f"comparison:{_tag(comparison_verdict)}")
    return tags


def _tag_run(tags: list[str], logger: Any) -> None:
    """Add ``tags`` to the current flow run on the server (its own tags kept); a server that refuses is logged,
    never fails the run. Outside a flow run, nothing."""
    from prefect.client.orchestration import get_client

    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return
    try:
        with get_client(sync_client=True) as client:
            current = client.read_flow_run(context.flow_run.id).tags or []
            merged = [*current, *(tag for tag in tags if tag not in current)]
            client.update_flow_run(context.flow_run.id, tags=merged)
    except Exception as exc:  # noqa: BLE001 - tags are a convenience; the run's reports are what counts
        logger.warning("Could not tag the flow run with %s: %s", ", ".join(tags), exc)
        return
    context.flow_run.tags = merged


def run_suite(suite_path: str, options: RunOptions | None = None, planned: PlannedRun | None = None) -> RunOutcome:
    """The body of :func:`evaluate_suite` (call it inside a flow run): the suite at ``suite_path`` run with
    ``options`` (default :class:`~evaltasks.engine.run.RunOptions`), on ``planned``'s plan and baseline when
    given and unchanged; returns the full outcome (its ``drift`` is set by the history step, which results.json,
    written before it, does not have)."""
    options = options or RunOptions()
    logger = get_run_logger()
    started = time.time()
    plan = load_suite_and_dataset(  # quote(): Prefect does not walk the plan's dataset; the task gets the plan
        suite_path,
        options.skip_missing_credentials,
        quote(planned.take() if planned is not None else None),  # type: ignore[call-overload]
        options.target,
    )
    parsed_baseline = planned.take_baseline() if planned is not None else None
    logger.info(
        "Loaded suite %r and its dataset (%d cases) in %.1f s",
        plan.suite.suite.name,
        len(plan.dataset.cases),
        time.time() - started,
    )
    _tag_run(start_tags(plan.suite.suite.name), logger)
    if options.max_cost is not None:
        check_judge_prices(plan)  # an unpriced judge model costs "$0": the budget could not stop it
    try:
        with gc_frozen(), recording_warnings():  # index corruption found by the run goes into its reports
            return _run_plan(plan, logger, started, options, parsed_baseline)
    except (KeyboardInterrupt, TerminationSignal) as exc:
        # The process is stopping (Ctrl+C, SIGTERM): stop the encodes now, or Prefect's task runner waits for
        # the running one (minutes for a large chunk) before the run can end. The caller hears of it first, so
        # the cancelled tasks' failures are not reported as errors.
        _progress.stopping(terminated=isinstance(exc, TerminationSignal))
        cancel_queued_encodes()
        stop_generation()  # generate-outputs task runs end within a second; stored outputs stay stored
        raise


def _progress_meter(plan: RunPlan) -> ProgressMeter:
    """The run's progress: a Prefect progress artifact created at 0 % before anything is embedded, whose units
    are the texts embedded (or found in the index), then the case × metric results scored, as the stages the
    terminal shows (docs/prefect.md#prefect); each unit is also counted on the terminal (:mod:`evaltasks.engine.progress`)."""
    texts = sum(
        len(need.references) + sum(1 for t in need.outputs if t not in need.references)  # a text equal
        for need in plan.needs.values()
    )  # to a reference: once
    texts += len(plan.dataset.cases) * plan.samples if plan.targets else 0  # the outputs generated, one unit each
    progress_id: Any = create_progress_artifact(  # the artifact's id (called in a sync flow: not awaited)
        progress=0.0,
        key=artifact_key(plan.suite.suite.name, "progress"),
        description=f"Outputs generated, texts embedded, then case × metric results scored, of suite "
        f"{plan.suite.suite.name}, in percent",
    )

    def report(percent: float) -> None:
        update_progress_artifact(progress_id, progress=percent)

    return ProgressMeter(plan.work_items + texts, report, _progress.advance)


def _run_plan(
    plan: RunPlan,
    logger: Any,
    started: float,
    options: RunOptions,
    parsed_baseline: ParsedBaseline | None = None,
) -> RunOutcome:
    """Run ``plan`` with ``options``: the pipeline's stages (:mod:`evaltasks.engine.pipeline`) as Prefect task
    runs (:class:`~evaltasks.flows._prefect_executor.PrefectExecutor`): embed, search, bind the judges, score
    (batches of ``score-batch`` task runs, a bounded window in flight) with each batch streamed into the reports;
    then Prefect's surfaces (progress, artifacts, tags) and the history. ``parsed_baseline``:
    ``options.baseline`` already read (:func:`~evaltasks.engine.run.read_baseline`)."""
    for warning in plan.suite.warnings:  # `evaltasks run` printed these already (evaltasks.engine.progress)
        logger.warning("%s", warning, extra=_progress.PRINTED_BY_CLI)
    index_dir = str(options.index_dir or default_index_dir())
    cases, metrics = plan.dataset.cases, plan.suite.metrics
    logger.info("Suite %r: %d cases × %d metrics", plan.suite.suite.name, len(cases), len(metrics))
    # load and validate were plan_run's (the load-dataset task run)
    index = ReferenceIndex(index_dir)
    meter = _progress_meter(plan)
    executor = PrefectExecutor(
        cache=options.cache,
        concurrency_limit=options.concurrency_limit,
        logger=logger,
        on_chunk=lambda texts: meter.add(texts, now=True),
    )  # one update per chunk
    ids, needs, generated = plan.dataset.ids, plan.needs, None
    if plan.targets:  # the generate stage: generate-outputs task runs, before the embed stage reads the outputs
        generated = _generate(plan, executor, index_dir, options, logger)
        meter.add(len(generated.cases), now=True)
        cases, ids = generated.cases, generated.ids
        needs = collect_embedding_needs(cases, metrics)
    embeddings = pipeline.embed(needs, index, executor, logger)
    set_infos = pipeline.search(metrics, embeddings, needs, index, len(cases))
    # Judge metrics: answers stored beside the index, fresh requests with cache=False (--no-cache), and one
    # budget for the run whose ledger file every worker process shares (docs/judges.md#llm-judges).
    ledger = Path(index_dir) / JUDGEMENTS_DIR / "budgets" / f"{uuid.uuid4().hex}.json"
    wiring = JudgeWiring(index_dir=index_dir, refresh=not options.cache, max_cost=options.max_cost, ledger=ledger)
    budget = pipeline.bind(metrics, wiring, embeddings.spent + (generated.spent if generated is not None else 0.0))
    # Batches are folded into the reports in case order as they finish, so memory holds a few batches of
    # results, never the whole run (10^6 cases stream through).
    writer = open_report_writer(
        plan,
        options.output_dir,
        options.baseline,
        options.regression_tolerance,
        options.baseline_label,
        parsed_baseline,
    )
    # the scores' spread, for the history's drift test (only when the run records a history: it costs a pass
    # over every result)
    history = resolve_history_dir(plan.suite.path, plan.suite.suite.history, options.history_dir)
    moments = ScoreMoments(metric.name for metric in metrics) if history is not None else None
    column = plan.suite.suite.dataset.cluster
    # run-level metrics (CalibrationMetric) fold the case results as they stream by: one result per target
    run_tally = RunMetricTally(plan.suite.run_metrics, cases, generated.bounds() if generated is not None else None)
    tallies = None
    if generated is not None:  # each target's summary (the first's is the run's) and generation figures
        clusters = plan.dataset.columns.get(column) if column else None
        tallies = TargetTallies(generated, {m.name: m.threshold for m in metrics}, clusters, column)
    try:
        batch_size = options.batch_size or auto_batch_size(len(cases))
        for rows, batch_results in pipeline.score(cases, ids, metrics, embeddings, executor, batch_size, generated):
            # with several targets, the baseline is compared with the first (the reference) target's cases
            writer.add(batch_results, compare=generated is None or rows[0] < len(generated.parts[0].cases))
            if moments is not None:
                moments.add(batch_results)
            if tallies is not None:
                tallies.add(rows, batch_results)
            run_tally.add(rows, batch_results)
            del batch_results
            # the last batch: 100 %, also when a provider's failure left texts uncounted
            meter.add(len(rows) * len(metrics), finished=rows[-1] == len(cases) - 1)
        targets = tallies.finish(embeddings.counts) if tallies is not None else []
        targets = [t.model_copy(update={"summary": run_tally.attach(t.summary, i)}) for i, t in enumerate(targets)]
        summary = targets[0].summary if targets else None
        if summary is None and run_tally.metrics:
            summary = run_tally.attach(writer.summarize(embeddings.counts))
        outcome = finish_streamed_run(
            plan,
            writer,
            started,
            embeddings=embeddings.counts,
            embedding_models=model_infos(needs, embeddings.dims),
            reference_sets=set_infos,
            summary=summary,
            targets=targets,
        )
    finally:
        writer.close()
        if budget is not None:
            for path in (ledger, ledger.with_name(ledger.name + ".lock")):
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
    _publish_outcome(plan, outcome, options, logger, history, moments)
    return outcome


def _generate(plan: RunPlan, executor: PrefectExecutor, index_dir: str, options: RunOptions, logger: Any) -> Generated:
    """The generate stage of ``plan``'s targets (:func:`evaltasks.engine.pipeline.generate`: one
    ``generate-outputs`` task run per batch), outputs stored under ``index_dir`` (``--no-cache``: none read);
    logs each target's requests, stored outputs and failures."""
    started = time.monotonic()
    generated = pipeline.generate(
        plan.targets,
        plan.dataset.cases,
        plan.dataset.ids,
        plan.suite.metrics,
        executor,
        index_dir=index_dir,
        refresh=not options.cache,
        skip=plan.skipped_targets,
        perturbations=plan.suite.suite.perturbations,
    )
    for part in generated.parts:
        logger.info(
            "Target %r: %d outputs (%d requests, %d from the output store, %d failed) in %.1f s",
            part.target.name,
            len(part.cases),
            part.requests,
            part.cached,
            len(part.failed),
            time.monotonic() - started,
        )
    return generated


def _publish_outcome(
    plan: RunPlan,
    outcome: RunOutcome,
    options: RunOptions,
    logger: Any,
    history: Path | None,
    moments: ScoreMoments | None,
) -> None:
    """After the reports: the regressions' warning, the run's artifacts and verdict tags, the pass-rate log line,
    and the history (``history``, with the scores' ``moments``; the drift report set on ``outcome.drift``)."""
    report = outcome.report
    if outcome.comparison is not None and outcome.comparison.regressions:
        # one line for all of them (a suite of 30 metrics regressed 61 times): the reports hold each one
        logger.warning(
            "%s", regression_summary(outcome.comparison), extra=_progress.PRINTED_BY_CLI
        )  # the CLI prints it
    publish_artifacts(report, outcome.highlights, reports_url=options.reports_url)
    _tag_run(_verdict_tags(outcome.passed, outcome.comparison.verdict if outcome.comparison else None), logger)
    logger.info(
        "Pass rate %.2f%% (gate %.2f%%): %s",
        100 * report.summary.pass_rate,
        100 * outcome.gate.min_pass_rate,
        "PASSED" if outcome.passed else "FAILED",
    )
    if history is not None and moments is not None:
        _record_history(plan, outcome, moments, history, logger)


def _record_history(
    plan: RunPlan, outcome: RunOutcome, moments: ScoreMoments, directory: Path, logger: Any
) -> DriftReport | None:
    """Append the run to the history in ``directory`` and test it for drift
    (:func:`~evaltasks.engine.lifecycle.record_history`), emit ``evaltasks.suite.regressed`` for each regressed
    test, and publish the ``<suite>-history`` artifact; returns the drift report (None without previous runs or
    with ``history.drift: false``). A history that cannot be written is logged, never fails the run."""
    from prefect.events import emit_event
    from prefect.runtime import deployment

    name = plan.suite.suite.name
    context = FlowRunContext.get()
    try:
        step = record_history(
            plan,
            outcome,
            moments,
            directory,
            shown=HISTORY_ARTIFACT_RUNS - 1,
            flow_run_id=str(context.flow_run.id) if context and context.flow_run else None,
            deployment=deployment.name if deployment.id else None,
            warn=lambda warning: logger.warning("History: %s", warning),
        )
    except (OSError, FileLockTimeout) as exc:
        logger.error("Could not record the run in the history at %s: %s", directory, exc)
        return None
    logger.info("Run recorded in the history %s", step.path)
    drift = step.drift
    for test in drift.regressed if drift is not None else []:
        window = drift.window if drift is not None else 0
        payload = event_payload(test, window, step.record.results_path)
        logger.warning(
            "Drift: %s %s %s -> %s against the previous %d runs (%s, p = %.3g)",
            name,
            test.label,
            test.before,
            test.after,
            window,
            test.test,
            test.p_value,
        )
        emit_event(event=REGRESSED_EVENT, resource=event_resource(name), payload=payload)
    publish_history_artifact(name, [*step.previous, step.record], drift)
    return drift
