"""``evaltasks run SUITE``: evaluate a suite through the Prefect flow (docs/cli.md#cli).

Exit codes: 0 the gate holds (this run's results.json says ``passed: true``: checked by the run's parent process,
:mod:`evaltasks.supervisor`); 1 the gate fails; 2 invalid config, input, credentials or usage (found before
scoring, printed without a traceback); 3 the run aborted (I/O error or internal bug: a short message, and
the full traceback written to a file whose path is printed); 130 / 143 interrupted by SIGINT / SIGTERM (one
line; see :func:`~evaltasks.cli._signals.run_interruptible`).

The run's options are :class:`~evaltasks.engine.options.RunOptions`' fields: their flags are generated from it
(:func:`add_run_options`) and parsed back into it (:func:`run_options`), which the flow receives as its parameters.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaltasks import supervisor
from evaltasks.cli._checks import (
    check_concurrency_limit,
    check_configured_server,
    check_output_dir,
    check_prefect_home,
    check_run_setup,
    check_settings,
    check_task_runner,
    configured_server,
    quiet_prefect_defaults,
    use_default_output_dir,
)
from evaltasks.cli._command import Invocation, add_command
from evaltasks.cli._exits import EXIT_GATE_FAILED, EXIT_INVALID, EXIT_PASSED, UsageProblem, aborted, error
from evaltasks.cli._signals import Interrupt, run_interruptible
from evaltasks.cli._terminal import (
    Stages,
    hide_tracebacks,
    leave_price_warnings_to_the_run,
    reporting_to,
    stage_progress,
    terminal_logging,
    warn,
)
from evaltasks.engine.options import DEFAULT_TOLERANCE, RunOptions, option_fields, scalar_type
from evaltasks.errors import GateFailed, InputError

if TYPE_CHECKING:
    from evaltasks.engine.outcome import RunReport


def add_parser(sub: Any) -> None:
    """Add ``run`` to the command parser ``sub``: the suite, one flag per :class:`RunOptions` field
    (:func:`add_run_options`), then the flags of the command itself."""
    run = add_command(
        sub,
        "run",
        "evaluate a suite and write results.json, junit.xml, summary.md",
        "Evaluate the suite's dataset with its metrics through the Prefect flow, print the verdict and "
        "a summary, and write results.json, junit.xml and summary.md. Exit 0 when the gate holds, 1 "
        "when it fails, 2 for invalid input, 3 when the run aborted.",
        "CLI",
    )
    run.add_argument("suite", help="the suite YAML file")
    add_run_options(run)
    run.add_argument(
        "--quiet",
        action="store_true",
        help="print only the verdict, the gate and the reports lines (no progress display, table or cases)",
    )
    run.add_argument(
        "--task-runner",
        default="threads",
        metavar="SPEC",
        help="threads[:N] (default), processes[:N], dask[:N], dask:tcp://HOST:PORT (evaltasks[dask]), "
        "ray[:ADDRESS] (evaltasks[ray])",
    )
    run.add_argument(
        "--no-server",
        action="store_true",
        help="run in this process even when an `evaltasks server` runs (also EVALTASKS_NO_SERVER=1)",
    )


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """One flag per :class:`RunOptions` field, generated from the field: its flag, help text and metavar, its
    type (``int | None`` -> ``type=int``), and for a boolean a switch (``--no-cache`` sets ``cache`` False). A flag
    not given leaves its destination (the field's name) None, or the field's default for a switch."""
    for field, spec, hint in option_fields():
        if hint is bool:
            parser.add_argument(
                spec.flag, dest=field.name, action="store_false" if spec.negated else "store_true", help=spec.help
            )
            continue
        scalar = scalar_type(hint)
        parser.add_argument(
            spec.flag,
            dest=field.name,
            default=None,
            metavar=spec.metavar,
            help=spec.help,
            **({} if scalar is str else {"type": scalar}),
        )


def run_options(args: argparse.Namespace) -> RunOptions:
    """The :class:`RunOptions` the parsed command line ``args`` asks for: each flag given, the field's default
    for the others."""
    given = {field.name: getattr(args, field.name) for field, _, _ in option_fields()}
    return RunOptions(**{name: value for name, value in given.items() if value is not None})


def command(args: argparse.Namespace, invocation: Invocation) -> int:
    """Run the suite: through ``evaltasks server`` when one runs (and the command owns its process), else here,
    in a child process the command supervises (:mod:`evaltasks.supervisor`) where it can. Returns the exit code."""
    if invocation.owns_process and not args.no_server:
        from evaltasks.server import client  # standard library only: decides before Prefect, rich or numpy load

        served = client.run_served(
            sys.argv[1:], invocation.started
        )  # docs/server.md#faster-repeated-runs-evaltasks-server
        if served is not None:
            return served
    problem = check_settings() or check_prefect_home()  # Prefect cannot start without a writable home
    if problem:
        error(problem)
        return EXIT_INVALID
    if invocation.owns_process and supervisor.available():  # run the suite in a supervised child
        code = supervisor.supervise()
        if code is not None:  # the parent, once the run has ended
            return code
    supervised = invocation.owns_process or invocation.served_by_runner  # a parent ends it at the grace period
    interrupt = Interrupt(args.output_dir, args.index_dir, args.cache, supervised=supervised)
    return run_interruptible(lambda stop: _run(args, invocation, stop), interrupt)


@dataclass(frozen=True)
class _PlanView:
    """What the command keeps of the plan it hands to the flow (the flow then holds the only copy of the dataset)."""

    suite_name: str
    work_items: int
    metric_count: int
    min_pass_rate: float
    shown_warnings: frozenset[str]  # printed before the run; the run may add more (e.g. a corrupt index)
    model_needs: tuple[Any, ...]  # embedding needs whose provider loads a local model

    @classmethod
    def of(cls, plan: Any) -> _PlanView:
        """The view of ``plan`` (a :class:`~evaltasks.engine.run.RunPlan`)."""
        return cls(
            plan.suite.suite.name,
            plan.work_items,
            len(plan.suite.metrics),
            plan.suite.suite.gate.min_pass_rate,
            frozenset(plan.suite.warnings),
            tuple(need for need in plan.needs.values() if callable(getattr(need.provider, "load", None))),
        )

    @property
    def scoring(self) -> str:
        """The scoring stage in words: ``scoring N cases × M metrics``."""
        cases = self.work_items // max(self.metric_count, 1)
        return f"scoring {cases:,} cases × {self.metric_count} metric{'' if self.metric_count == 1 else 's'}"


def _aborted(args: argparse.Namespace, interrupt: Interrupt) -> int:
    """For the exception being handled: exit 3 with its traceback in a file (:func:`aborted`), unless a signal
    stopped the run meanwhile. Then the exception is the interrupt's and is raised again, for
    :func:`~evaltasks.cli._signals.run_interruptible` to end the run as interrupted (130 or 143): a library may
    turn the KeyboardInterrupt our handler raised into an error of its own (pydantic-core reports one raised while
    it serialised a model as a ``PydanticSerializationError``)."""
    if interrupt.signum is not None:
        raise  # noqa: PLE0704 - re-raises the exception being handled, as the docstring says
    return aborted(args.output_dir)


def _run(args: argparse.Namespace, invocation: Invocation, interrupt: Interrupt) -> int:
    """Check the flags and the suite (exit 2 before Prefect starts), run the flow, print the verdict."""
    problem = _check_flags(args)
    if problem:
        error(problem)
        return EXIT_INVALID
    leave_price_warnings_to_the_run()
    try:
        checked = _plan(args, interrupt)
    except InputError as exc:
        error(str(exc))
        return EXIT_INVALID
    except Exception:  # anything else aborts the run (exit 3, the traceback in a file)  # noqa: BLE001
        return _aborted(args, interrupt)
    if checked is None:
        return EXIT_INVALID
    from evaltasks.engine.run import PlannedRun  # startup: the engine loads pydantic and numpy

    # Hand the flow this validated plan (its `plan` parameter) instead of letting it parse everything again, and
    # drop our references, so a run of 10^6 cases holds the dataset once.
    view, planned = _PlanView.of(checked[0]), PlannedRun.of(*checked)
    quiet_prefect_defaults()
    early = None
    try:
        from evaltasks.server.temporary import spawn_temporary_server  # startup: subprocess, only for a run

        # Prefect's temporary server starts now, guarded (evaltasks.server.temporary): its seconds of start-up
        # overlap the imports and the model load below; the flow waits for it before its first API call.
        starting = spawn_temporary_server()
        problem = None if starting is not None else check_configured_server()  # before the flow starts
        if problem is None:  # the target's calls start now too (docs/targets.md#generation-starts-while-prefect-starts)
            early = _start_early_generation(args, checked[0])
    except Exception:  # anything else aborts the run (exit 3, the traceback in a file)  # noqa: BLE001
        return _aborted(args, interrupt)
    finally:
        del checked
    if problem:
        error(problem)
        return EXIT_INVALID
    try:
        outcome = _evaluate(args, invocation, interrupt, planned, view, starting, early)
    except (InputError, UsageProblem) as exc:
        error(str(exc))
        return EXIT_INVALID
    except Exception:  # anything else aborts the run (exit 3, the traceback in a file)  # noqa: BLE001
        return _aborted(args, interrupt)
    finally:
        if early is not None:
            early.close()
    return _report(args, invocation, outcome, view)


def _start_early_generation(args: argparse.Namespace, plan: Any) -> Any:
    """The plan's target calls, started while Prefect starts (:func:`~evaltasks.engine.generation.start_early_generation`)
    when the flow's task runs will run in this process (the thread-pool task runner, ``threads`` or
    ``threads:N``); else None."""
    if args.task_runner.partition(":")[0] != "threads" or not plan.targets:
        return None
    from evaltasks.engine.generation import start_early_generation
    from evaltasks.index import default_index_dir  # the flow's default, the same folder

    return start_early_generation(plan, str(args.index_dir or default_index_dir()), refresh=not args.cache)


def _check_flags(args: argparse.Namespace) -> str | None:
    """A message for a flag out of its range, an unusable ``--task-runner`` or an index directory under a file."""
    if args.batch_size is not None and args.batch_size < 1:
        return "--batch-size must be at least 1"
    tolerance = DEFAULT_TOLERANCE if args.regression_tolerance is None else args.regression_tolerance
    if not 0.0 <= tolerance <= 1.0:
        return f"--regression-tolerance must be in [0, 1], got {tolerance}"
    return check_task_runner(args.task_runner) or check_run_setup(args)


def _plan(args: argparse.Namespace, interrupt: Interrupt) -> tuple[Any, Any] | None:
    """The run's plan and parsed ``--baseline`` (:func:`~evaltasks.engine.run.plan_run`,
    :func:`~evaltasks.engine.run.read_baseline`), once the reports and history directories and ``--max-cost``
    are checked; the suite's warnings and notes printed. None after printing a usage mistake.

    Raises:
        InputError: an invalid suite, dataset, credentials, baseline or unpriced judge model.
    """
    from evaltasks.engine.history import resolve_history_dir  # startup: the engine loads pydantic and numpy
    from evaltasks.engine.run import plan_run, read_baseline

    plan = plan_run(  # before Prefect
        args.suite, skip_missing_credentials=args.skip_missing_credentials, use_targets=args.target
    )
    if use_default_output_dir(args, plan.suite.suite.name):
        interrupt.use_output_dir(Path(args.output_dir))
    for warning in plan.suite.warnings:
        warn(warning)
    for notice in [*plan.suite.notices, *plan.dataset.notices]:
        warn(notice, "note")
    parsed_baseline = None if args.baseline is None else read_baseline(args.baseline)  # a usage error: found now
    problem = check_output_dir(Path(args.output_dir))
    if problem is None:  # the history is written after the reports: a run must not end without it
        history = resolve_history_dir(args.suite, plan.suite.suite.history, args.history_dir)
        problem = None if history is None else check_output_dir(history, "history directory")
    if problem is None and args.max_cost is not None:
        problem = _over_budget(plan, args)
    if problem:
        error(problem)
        return None
    return plan, parsed_baseline


def _over_budget(plan: Any, args: argparse.Namespace) -> str | None:
    """The message when the run's estimated cost is above ``--max-cost`` (judge results Prefect's task cache holds
    are free unless ``--no-cache``).

    Raises:
        InputError: a judge model has no price (the budget could not stop it: an unpriced model costs "$0").
    """
    from evaltasks.engine.run import check_judge_prices, estimate_cost  # startup: pydantic, numpy, the metrics
    from evaltasks.metrics.judge.base import JudgeMetric

    check_judge_prices(plan)
    estimate = estimate_cost(plan, args.index_dir, refresh=not args.cache)
    if estimate > args.max_cost and args.cache:  # Prefect's task cache may hold the results
        estimate = _estimate_with_task_cache(plan, args)
    if estimate <= args.max_cost:
        return None
    judged = any(isinstance(metric, JudgeMetric) for metric in plan.suite.metrics)
    how = " (judge requests at their worst case: every answer as long as max_tokens allows)" if judged else ""
    how += " (the target's generations included, stored ones too)" if plan.targets else ""
    return f"the run is estimated to cost ${estimate:.4f}{how}, above --max-cost ${args.max_cost:.4f}"


def _estimate_with_task_cache(plan: Any, args: argparse.Namespace) -> float:
    """The run's estimate (:func:`~evaltasks.engine.run.estimate_cost`) without the judge results that
    Prefect's task cache already holds (:func:`~evaltasks.tasks.task_cached_rows`): they are served, not sent,
    whatever ``--index-dir`` says. Imports Prefect, so only when the plain estimate is above ``--max-cost``."""
    quiet_prefect_defaults()  # before Prefect is imported
    from evaltasks.engine.run import estimate_cost  # startup: imports Prefect (the tasks)
    from evaltasks.tasks import task_cached_rows

    cached = task_cached_rows(plan.suite.metrics, plan.dataset.cases, args.batch_size)
    return estimate_cost(plan, args.index_dir, cached=cached)


def _evaluate(
    args: argparse.Namespace,
    invocation: Invocation,
    interrupt: Interrupt,
    planned: Any,
    view: _PlanView,
    starting: Any,
    early: Any = None,
) -> RunReport:
    """Run the evaluate-suite flow on ``planned`` with the stage display on the terminal; its returned dict.
    ``starting``: the temporary server being started (None: the user's own server, or one started later).
    ``early``: the target calls already started, handed to the flow's task runs through the run context."""
    # read the index only now, while the server starts: a large namespace takes seconds to read
    models = [need.provider for need in view.model_needs if _has_missing_texts(need, args.index_dir)]
    from rich.console import Console  # startup: rich and Prefect only once a run starts

    console = Console(stderr=True)
    progress = stage_progress(console, args.quiet)
    stages = Stages(progress, view.scoring, view.work_items)
    with progress, reporting_to(stages, interrupt.stopping, early), contextlib.ExitStack() as scope:
        # the user's own server (PREFECT_API_URL) is connected to, not started
        stages.stage("starting Prefect" if starting is not None or not configured_server() else "connecting to Prefect")
        from evaltasks.flows.evaluate_suite import evaluate_suite, make_task_runner  # startup: imports Prefect

        if args.task_runner == "threads":  # its own line while Prefect starts: the two overlap
            load_models_in_background(models, stages)
        from evaltasks.server.temporary import guard_temporary_server  # startup: subprocess, only for a run

        if starting is not None:
            starting.wait()
        temporary = starting is not None or guard_temporary_server()  # in its own session, dying with us
        problem = check_concurrency_limit(args.concurrency_limit) if args.concurrency_limit else None
        if problem:
            raise UsageProblem(problem)
        hide_tracebacks()
        interrupt.watch_logs()
        scope.enter_context(terminal_logging(console, live=not args.quiet and console.is_terminal))
        stages.stage(f"evaluating {view.suite_name}")  # until the flow names its stages
        flow = evaluate_suite
        if args.task_runner != "threads":
            flow = evaluate_suite.with_options(task_runner=make_task_runner(args.task_runner))
        if temporary or invocation.served_by_runner:
            flow = _without_heartbeats(flow)
        state = flow(
            suite_path=str(Path(args.suite)), **run_options(args).flow_parameters(), plan=planned, return_state=True
        )
        return _flow_outcome(state)


def _report(args: argparse.Namespace, invocation: Invocation, outcome: RunReport, view: _PlanView) -> int:
    """Print the run's new warnings, the verdict and summary (``--quiet``: the verdict line, the gate line and the
    reports line only; docs/cli.md#cli), and the reports line with both durations; the exit code of the gate."""
    from rich.console import Console  # startup: rich only once a run has ended

    from evaltasks.reports.console import notable_cases, print_summary, stored_splits

    for warning in [*outcome.warnings, *_regression_warning(outcome)]:
        if warning not in view.shown_warnings:
            warn(warning)
    try:
        cases = None if args.quiet else notable_cases(Path(args.output_dir) / "results.json", outcome.summary)
        side = outcome.side_by_side
        if side is not None and side.split_cases and not side.splits and not args.quiet:
            splits = stored_splits(Path(args.output_dir) / "results.json")  # the flow's outcome leaves them out
            outcome = outcome.model_copy(update={"side_by_side": side.model_copy(update={"splits": splits})})
        print_summary(outcome, cases=cases, brief=args.quiet, console=Console())
        for line in [] if args.quiet else target_lines(outcome):
            print(line)
        # two durations, each named (docs/cli.md#cli): the flow run's own work (results.json duration_s)
        # and the whole command, start-up included
        reports = f"reports: {Path(args.output_dir) / 'results.json'}, junit.xml, summary.md"
        timing = f"(flow run {outcome.duration_s or 0:.1f} s, total {time.time() - invocation.started:.1f} s)"
        fits = not sys.stdout.isatty() or len(reports) + 1 + len(timing) <= shutil.get_terminal_size().columns
        print(reports + (" " if fits else "\n") + timing)  # a terminal's line break never splits a number
        sys.stdout.flush()
    except (BrokenPipeError, SystemExit):  # `evaltasks run ... | head -1`: the reader left; the verdict stands.
        # (rich's Console answers a broken pipe with SystemExit(1), which would read as a failed gate; Python
        # docs, "Note on SIGPIPE": point stdout at devnull so the interpreter's last flush does not fail again)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_PASSED if outcome.passed else EXIT_GATE_FAILED


GENERATED_SHOWN = 5
"""Case ids named on a target's line when a run generated some outputs anew beside stored ones."""


def target_lines(outcome: RunReport) -> list[str]:
    """One line per target of the run: what generating its outputs took, e.g. ``target bot: 4 outputs, 1
    request, 3 from the output store, 0 failed; latency median 120 ms, p95 180 ms; cost $0.0012``
    (docs/targets.md#the-generate-stage). None without targets."""
    lines = []
    for t in outcome.targets:
        outputs = t.summary.cases
        line = (
            f"target {t.name}: {outputs:,} output{'' if outputs == 1 else 's'}, {t.requests:,} "
            f"request{'' if t.requests == 1 else 's'}, {t.cached:,} from the output store, {t.errored:,} failed"
        )
        if t.latency_ms_median is not None and t.latency_ms_p95 is not None:
            line += f"; latency median {t.latency_ms_median:,.0f} ms, p95 {t.latency_ms_p95:,.0f} ms"
        if t.cost:
            line += f"; cost ${t.cost:.4f}"
        if t.flaky_cases:
            line += f"; {len(t.flaky_cases)} flaky of {t.samples} samples each"
        if t.generated_cases:  # beside stored outputs: which ones the change made the target answer anew
            shown = ", ".join(t.generated_cases[:GENERATED_SHOWN])
            more = len(t.generated_cases) - GENERATED_SHOWN
            line += f"; generated anew: {shown}" + (f" and {more:,} more" if more > 0 else "")
        lines.append(line)
    return lines


def _flow_outcome(state: Any) -> RunReport:
    """The evaluate-suite flow's returned dict from its final ``state``, read as a
    :class:`~evaltasks.engine.outcome.RunReport`: the Completed result, or the ``result`` of the
    :class:`~evaltasks.errors.GateFailed` a failed gate ends the run with (the gate's verdict is in the dict).
    Any other failure is raised as the flow raised it."""
    from evaltasks.engine.outcome import RunReport  # startup: pydantic models, once a run has ended

    try:
        return RunReport.model_validate(state.result())
    except GateFailed as exc:
        return RunReport.model_validate(exc.result)


def _regression_warning(outcome: RunReport) -> list[str]:
    """The flow's one line about the regressions since the baseline (``regression_summary``), when any, for
    ``evaltasks run`` to print in its own format (the flow's log record of it stays off the terminal)."""
    if outcome.comparison is None or not outcome.comparison.regressions:
        return []
    from evaltasks.engine.lifecycle import regression_summary  # startup: loaded once a run has ended

    return [regression_summary(outcome.comparison)]


def _has_missing_texts(need: Any, index_dir: str | None) -> bool:
    """Whether some reference or output of ``need`` (an :class:`~evaltasks.metrics.base.EmbeddingNeed`) is not
    in the index yet, so the run will load its model (a cheap read of the namespace; a model on disk is not loaded).
    An unreadable index counts as missing texts (the flow reports it)."""
    from evaltasks.index import ReferenceIndex  # startup: the index loads numpy and FAISS

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a corrupt namespace is reported by the flow, once
            return bool(ReferenceIndex(index_dir).missing_texts(need.provider, [*need.references, *need.outputs]))
    except Exception:  # whatever is wrong, the flow finds it; preload as before  # noqa: BLE001
        return True


def load_models_in_background(providers: list[Any], stages: Stages | None = None) -> Any:
    """Load the local embedding models in a thread while Prefect's temporary server starts.

    The server takes seconds to start and the model seconds to import and load (torch, transformers); done
    one after the other they added up (~5 s of a run's start-up). The flow's tasks then find the model
    loaded (or wait for the load to finish: the provider's lock). A load that fails here is left to the flow,
    which raises it as usual. Prefect's server module is imported first, in this thread, so the two threads
    never import the same modules at the same time. ``stages``: the progress display, which shows ``loading the
    model NAME`` on a line of its own while each loads. Returns the thread (None without providers).
    """
    if not providers:
        return None
    from prefect.settings import PREFECT_API_URL  # startup: imports Prefect

    if not PREFECT_API_URL.value():
        import prefect.server.api.server  # noqa: F401 - see the docstring

    def load() -> None:
        for provider in providers:
            name = getattr(provider, "model_name", None) or type(provider).__name__
            try:
                with stages.side(f"loading the model {name}") if stages is not None else contextlib.nullcontext():
                    provider.load()
            except Exception:  # the flow loads it again and reports the error  # noqa: BLE001
                pass

    thread = threading.Thread(target=load, name="evaltasks-model-load", daemon=True)
    thread.start()
    return thread


def _without_heartbeats(flow: Any) -> Any:
    """``flow`` (a Prefect flow) as a callable whose flow runs send no heartbeats
    (``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` None while it runs).

    Heartbeats let a lasting server find crashed flow runs; a temporary server ends with this process, so they
    serve nothing there, and stopping their thread cost each run up to a second after its flow had finished
    (the thread sleeps in one-second steps and the flow run waits for it). Used with the temporary server and
    in runs of ``evaltasks server``, whose runner supervises each run's process; a server the user configured
    (``PREFECT_API_URL``) keeps them.
    """
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings  # startup: Prefect

    def call(**parameters: Any) -> Any:
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            return flow(**parameters)

    return call
