"""The ``evaltasks`` command line.

``evaltasks run SUITE [--output-dir DIR] [--index-dir DIR]`` evaluates a suite through the Prefect flow.
Exit codes: 0 the gate holds (this run's results.json says ``passed: true``: checked by the run's parent process,
:mod:`evaltasks.supervisor`); 1 the gate fails; 2 invalid config, input, credentials or usage (found before
scoring, printed without a traceback); 3 the run aborted (I/O error or internal bug: a short message, and
the full traceback written to a file whose path is printed); 130 / 143 interrupted by SIGINT / SIGTERM (one
line; see :func:`_run_interruptible`).

``evaltasks schema`` prints the suite file's JSON Schema. ``evaltasks calibrate SUITE --labels COLUMN``
suggests thresholds from human labels (:mod:`evaltasks.engine.calibration`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaltasks._version import DOCS_URL, __version__, docs_ref

if TYPE_CHECKING:
    from evaltasks.server.client import ServerPaths

EXIT_PASSED, EXIT_GATE_FAILED, EXIT_INVALID, EXIT_ABORTED = 0, 1, 2, 3
EXIT_SIGINT, EXIT_SIGTERM = 130, 143  # 128 + the signal's number, as shells report a process a signal ended


def _quiet_prefect_defaults() -> None:
    """Defaults (overridable by the environment) that keep Prefect quiet: no shutdown tracebacks, no telemetry
    (neither the server's analytics nor the client's, whose first-run notice printed on the terminal).

    A variable set to a blank value (an unset ``${{ vars.X }}`` in a CI workflow) counts as unset.
    """
    from evaltasks._env import TEMPORARY_SERVER_DEFAULTS, set_default_env

    set_default_env("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
    set_default_env("PREFECT_LOGGING_LEVEL", "WARNING")
    # Prefect's client-side telemetry: its first import in a terminal prints a notice about it (and sends
    # events) unless DO_NOT_TRACK is set; evaltasks turns analytics off (docs/prefect.md#the-temporary-server-and-prefects-settings), so before Prefect is imported
    set_default_env("DO_NOT_TRACK", "1")
    set_default_env("TOKENIZERS_PARALLELISM", "false")
    set_default_env("DASK_LOGGING__DISTRIBUTED", "warning")
    for name, value in TEMPORARY_SERVER_DEFAULTS.items():  # start-up timeout and analytics, as evaltasks.tasks
        set_default_env(name, value)


def _estimate_with_task_cache(plan: Any, args: argparse.Namespace) -> float:
    """The run's estimate (:func:`~evaltasks.engine.run.estimate_cost`) without the judge results that
    Prefect's task cache already holds (:func:`~evaltasks.tasks.task_cached_rows`): they are served, not sent,
    whatever ``--index-dir`` says. Imports Prefect, so only when the plain estimate is above ``--max-cost``."""
    _quiet_prefect_defaults()  # before Prefect is imported
    from evaltasks.engine.run import estimate_cost
    from evaltasks.tasks import task_cached_rows

    cached = task_cached_rows(plan.suite.metrics, plan.dataset.cases, args.batch_size)
    return estimate_cost(plan, args.index_dir, cached=cached)


def _check_output_dir(path: Path, label: str = "--output-dir") -> str | None:
    """A message when reports (or, with another ``label``, a run's history) cannot be written to ``path``
    (checked before anything is scored)."""
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return f"{label} {path}: {existing} is a file, not a directory"
    if existing.exists() and not os.access(existing, os.W_OK | os.X_OK):
        return f"{label} {path}: {existing} is not writable"
    return _name_too_long(path, existing, label)


def _name_too_long(path: Path, existing: Path, label: str) -> str | None:
    """A message when a component of ``path`` is longer than its file system allows (``PC_NAME_MAX`` of the
    nearest existing directory ``existing``, else 255 bytes of UTF-8), which would fail only when reports are
    written."""
    try:
        limit = os.pathconf(existing, "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
    except (OSError, ValueError):
        limit = 255
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > limit:
            shown = part if len(part) <= 40 else part[:37] + "..."
            return (f"{label} {path}: the name {shown!r} is {size} bytes, longer than the {limit} bytes a file or "
                    "directory name can have here")
    return None


def _use_default_output_dir(args: argparse.Namespace, suite_name: str) -> bool:
    """Without ``--output-dir``, set ``args.output_dir`` to the suite's own reports directory
    (:func:`evaltasks.engine.run.default_output_dir`); True when it did."""
    if args.output_dir is not None:
        return False
    from evaltasks.engine.run import default_output_dir

    args.output_dir = str(default_output_dir(suite_name))
    return True


def _check_prefect_home() -> str | None:
    """A message when Prefect's home directory cannot be written (checked before anything imports Prefect).

    The directory is ``$PREFECT_HOME`` (default ``~/.prefect``): Prefect keeps its profiles, task cache and
    the temporary server's SQLite database there, and without write access its temporary server never
    starts (the run used to wait minutes, then blame the server). Writability is checked by creating an
    anonymous temporary file in the directory, or in its nearest existing ancestor when Prefect would create
    it (so nothing is left behind and a missing home is not created here): permission bits alone do not
    bind root, a read-only or immutable file system does. Returns None when Prefect can use the directory.
    """
    from evaltasks._env import env_value

    home = Path(env_value("PREFECT_HOME") or "~/.prefect").expanduser()
    existing = home
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file, not a directory" if existing == home else f"cannot be created, {existing} is a file"
        return f"PREFECT_HOME {home}: {what}; set PREFECT_HOME to a writable directory"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        what = "is not writable" if existing == home else f"cannot be created in {existing}"
        return (f"PREFECT_HOME {home}: {what} ({exc.strerror or exc}); "
                "set PREFECT_HOME to a writable directory")
    return None


def _check_deployment_name(name: str, flag: str) -> str | None:
    """A message when ``name`` cannot name a served Prefect deployment; ``flag`` says where it came from.

    Prefect's rules (``prefect.types.names``): not blank, none of the characters in ``BANNED_CHARACTERS``
    (``/ % & > <``). ``Flow.serve`` also looks the name up as a file path, so a name longer than a file
    name may be (255 bytes of UTF-8) fails there with ENAMETOOLONG.
    """
    from prefect.types.names import BANNED_CHARACTERS

    if not name.strip("' \""):
        return f"{flag}: a deployment name cannot be blank"
    banned = sorted({c for c in name if c in BANNED_CHARACTERS})
    if banned:
        return (f"{flag} '{name}': a Prefect deployment name cannot contain {' '.join(BANNED_CHARACTERS)} "
                f"(found {' '.join(banned)})")
    if len(name.encode("utf-8")) > 255:
        return (f"{flag}: a Prefect deployment name has at most 255 bytes (UTF-8), "
                f"got {len(name.encode('utf-8'))}")
    return None


def _check_cron(cron: str) -> str | None:
    """A message when ``cron`` is not a schedule Prefect accepts (its ``CronSchedule`` validation)."""
    from prefect.client.schemas.schedules import CronSchedule
    from pydantic import ValidationError

    try:
        CronSchedule(cron=cron, timezone="UTC")
    except ValidationError as exc:
        reason = str(exc.errors()[0].get("msg", "invalid")).removeprefix("Value error, ")
        return (f"--cron '{cron}': {reason}; a cron schedule has five fields, minute hour day-of-month "
                f"month day-of-week (UTC), e.g. \"0 6 * * *\"")
    return None


def _check_prefect_server() -> str | None:
    """A message when no Prefect server is configured (``PREFECT_API_URL``) or it does not answer ``/health``.

    A served deployment needs a lasting server: without one Prefect would start a temporary server that
    lives only as long as this process and never schedules a run. The health request fails fast (10 s).
    """
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        return ("serve needs a running Prefect server and PREFECT_API_URL is not set: run `prefect server start` "
                "in another terminal and `prefect config set PREFECT_API_URL=http://127.0.0.1:4200/api` "
                "(or `prefect cloud login` for Prefect Cloud)")
    with get_client(sync_client=True, httpx_settings={"timeout": 10.0}) as client:
        failure = client.api_healthcheck()
    if failure is not None:
        reason = (str(failure).strip().splitlines() or [type(failure).__name__])[0]
        reason = reason.split(" - For more information")[0].rstrip(".")  # httpx's one-line reason, no help link
        return (f"the Prefect server at {url} (PREFECT_API_URL) cannot be reached: {reason}; "
                "start it (`prefect server start`) or correct PREFECT_API_URL")
    return None


def _check_task_runner(spec: str) -> str | None:
    """A message when ``spec`` names no usable task runner (checked without importing Prefect)."""
    import importlib.util

    kind = spec.partition(":")[0]
    needs = {"threads": None, "processes": None, "dask": "prefect_dask", "ray": "prefect_ray"}
    if kind not in needs:
        return f"unknown task runner '{spec}': use threads, processes, dask, dask:ADDRESS or ray"
    count = spec.partition(":")[2]
    if kind in ("threads", "processes") and count and (not count.isdigit() or int(count) < 1):
        return f"task runner '{spec}': the number of workers must be a positive integer"
    module = needs[kind]
    if module and importlib.util.find_spec(module) is None:
        return f"task runner '{kind}' needs the {module.replace('_', '-')} package (pip install 'evaltasks[{kind}]')"
    return None


def _check_run_setup(args: argparse.Namespace) -> str | None:
    """A message for a setup mistake of ``run`` found before Prefect starts: a ``--max-cost`` below 0 (or NaN), or
    a reference index directory (``--index-dir``, else ``$EVALTASKS_INDEX_DIR``, else ``.evaltasks/index``) that
    is, or lies under, a file (it failed only once the flow opened the index, after Prefect's error lines)."""
    import math

    if args.max_cost is not None and not (args.max_cost >= 0 and not math.isnan(args.max_cost)):
        return f"--max-cost must be a number of USD of at least 0, got {args.max_cost:g}"
    from evaltasks.index import default_index_dir

    directory = Path(args.index_dir) if args.index_dir else default_index_dir()
    label = "--index-dir" if args.index_dir else ("$EVALTASKS_INDEX_DIR" if os.environ.get("EVALTASKS_INDEX_DIR")
                                                  else "the reference index directory")
    existing = directory
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return f"{label} {directory}: {existing} is a file, not a directory"
    return None


def _check_configured_server() -> str | None:
    """A message when ``PREFECT_API_URL`` names a server that does not answer (serve's check,
    :func:`_check_prefect_server`): e.g. the variable is still exported after that server was stopped. None
    when it answers or none is configured."""
    if not _configured_server():
        return None
    problem = _check_prefect_server()
    return None if problem is None else problem + " (or unset it: evaltasks run then starts its own temporary server)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evaltasks", description="Evaluate LLM outputs with Prefect.",
                                     epilog=_DOCS_EPILOG)
    parser.add_argument("--version", action="version", version=f"evaltasks {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(_COMMANDS) + "}")
    run = _command(sub, "run", "evaluate a suite and write results.json, junit.xml, summary.md",
                   "Evaluate the suite's dataset with its metrics through the Prefect flow, print the verdict and "
                   "a summary, and write results.json, junit.xml and summary.md. Exit 0 when the gate holds, 1 "
                   "when it fails, 2 for invalid input, 3 when the run aborted.", "CLI")
    run.add_argument("suite", help="the suite YAML file")
    run.add_argument("--output-dir", default=None,
                     help="where reports go (default ./eval-results/SUITE_NAME, the suite's name made path-safe)")
    run.add_argument("--index-dir", default=None,
                     help="reference index directory (default $EVALTASKS_INDEX_DIR or .evaltasks/index)")
    run.add_argument("--batch-size", type=int, default=None,
                     help="test cases per scoring task (default 5000, more for large datasets: at most 100 per metric)")
    run.add_argument("--no-cache", action="store_true",
                     help="score everything: neither read nor write Prefect's task cache, and send every judge "
                          "request again (embeddings still come from the index)")
    run.add_argument("--quiet", action="store_true",
                     help="print only the verdict, the gate and the reports lines (no progress display, table or "
                          "cases)")
    run.add_argument("--max-cost", type=float, default=None, metavar="USD",
                     help="refuse to start (exit 2) when the estimated provider cost (embeddings and judge "
                          "requests) exceeds USD; judge requests stop once the spend reaches it (the rest skipped)")
    run.add_argument("--task-runner", default="threads", metavar="SPEC",
                     help="threads[:N] (default), processes[:N], dask[:N], dask:tcp://HOST:PORT (evaltasks[dask]), "
                          "ray[:ADDRESS] (evaltasks[ray])")
    run.add_argument("--concurrency-limit", default=None, metavar="NAME",
                     help="a Prefect global concurrency limit that embedding calls occupy (prefect gcl create)")
    run.add_argument("--reports-url", default=None, metavar="URL",
                     help="where the reports will be published (adds a Prefect link artifact)")
    run.add_argument("--baseline", default=None, metavar="RESULTS_JSON",
                     help="compare with an earlier run's results.json (e.g. the base branch's): deltas, "
                          "changes and regressions in the reports")
    run.add_argument("--baseline-label", default=None, metavar="TEXT",
                     help="how reports name the baseline (default: its path), e.g. 'main at 1a2b3c4'")
    run.add_argument("--regression-tolerance", type=float, default=None, metavar="T",
                     help="score or pass-rate drops up to T (absolute, default 0.01) are not regressions")
    run.add_argument("--skip-missing-credentials", action="store_true",
                     help="skip metrics whose provider credentials are missing (left out of the gate, with a "
                          "warning) instead of exiting 2: for pull requests from forks")
    run.add_argument("--history-dir", default=None, metavar="DIR",
                     help="record the run in this history directory and test it for drift ({docs_ref('Run history "
                          "and drift')}; default: the suite's history.dir, else $EVALTASKS_HISTORY_DIR)")
    run.add_argument("--no-server", action="store_true",
                     help="run in this process even when an `evaltasks server` runs (also EVALTASKS_NO_SERVER=1)")
    server = _command(sub, "server", "keep a Prefect server and a warm runner that runs use (Unix only); "
                                     "without an action it runs in the foreground",
                      "Keep a Prefect server and a warm runner (models loaded) in the background, so that each "
                      "`evaltasks run` of this user starts in a fraction of the time (Unix only). Without an "
                      "action it runs in the foreground until Ctrl+C.",
                      "Faster repeated runs: `evaltasks server`")
    server.add_argument("action", nargs="?", choices=("start", "stop", "status"), default=None,
                        help="start (in the background), stop, status")
    serve = _command(sub, "serve", "serve the suite's flow as a scheduled Prefect deployment",
                     "Register the suite's flow as a Prefect deployment on a cron schedule and run each scheduled "
                     "run here, printing its verdict line, until Ctrl+C (needs PREFECT_API_URL).", "Prefect")
    serve.add_argument("suite", help="the suite YAML file")
    serve.add_argument("--cron", default="0 6 * * *", help='cron schedule (default "0 6 * * *", UTC)')
    serve.add_argument("--name", default=None, help="deployment name (default: the suite name)")
    serve.add_argument("--output-dir", default=None,
                       help="where each run writes its reports (default ./eval-results/SUITE_NAME)")
    serve.add_argument("--index-dir", default=None, help="reference index directory")
    _command(sub, "schema", "print the JSON Schema of suite files",
             "Print the JSON Schema of suite files (for an editor's validation and completion of suite YAML).",
             "Suite file")
    calibrate = _command(sub, "calibrate", "find each metric's threshold that agrees best with human "
                                           "pass/fail labels (the suite file is not edited)", None,
                         "Threshold calibration")
    calibrate.add_argument("suite", help="the suite YAML file")
    calibrate.add_argument("--labels", required=True, metavar="COLUMN",
                           help="the dataset column of labels: pass/fail, passed/failed, true/false, yes/no, 1/0")
    calibrate.add_argument("--json", action="store_true", help="print the result as JSON")
    calibrate.add_argument("--index-dir", default=None,
                           help="reference index directory (default $EVALTASKS_INDEX_DIR or .evaltasks/index)")
    history = _command(sub, "history", "print the run history of a suite", "Print the recorded runs of a suite, "
                       "oldest first: pass rate with its interval, each metric's mean, the gate, the verdict and "
                       "what drifted.", "Run history and drift")
    history.add_argument("suite", help="the suite YAML file")
    history.add_argument("--history-dir", default=None, metavar="DIR",
                         help="the history directory (default: the suite's history.dir, else "
                              "$EVALTASKS_HISTORY_DIR, else .evaltasks/history)")
    history.add_argument("--last", type=int, default=20, metavar="N", help="the last N runs (default 20)")
    history.add_argument("--json", action="store_true", help="print the records as JSON Lines instead")
    index = _command(sub, "index", "manage the reference index", None, "Reference index")
    index_sub = index.add_subparsers(dest="index_command", required=True, metavar="{" + ",".join(_INDEX_COMMANDS) + "}")
    for name, help_text in (("build", "embed a suite's references into the index"),
                            ("info", "show the index's namespaces"),
                            ("verify", "read every byte of the index's segment files and check their sha256: "
                                       "exit 1 naming each damaged file"),
                            ("compact", "merge each namespace's segments into one (old files deleted after)"),
                            ("prune", "drop vectors that none of the given suites references (outputs "
                                      "stored by runs included: the next run embeds them again)")):
        command = index_sub.add_parser(name, help=help_text, description=help_text)
        if name == "build":
            command.add_argument("suite", help="the suite YAML file")
        if name == "prune":
            command.add_argument("suites", nargs="+", metavar="SUITE", help="suites whose references are kept")
            command.add_argument("--dry-run", action="store_true", help="report what would be dropped")
        command.add_argument("--index-dir", default=None,
                             help="reference index directory (default $EVALTASKS_INDEX_DIR or .evaltasks/index)")
    return parser


_COMMANDS = ("run", "server", "serve", "schema", "calibrate", "history", "index")
_INDEX_COMMANDS = ("build", "info", "verify", "compact", "prune")
_DOCS_EPILOG = (f"docs: {DOCS_URL}" if DOCS_URL else "docs: the docs/ folder of the evaltasks repository, "
                "https://github.com/evaltasks/evaltasks/tree/main/docs")


def _command(sub: Any, name: str, help_text: str, description: str | None, section: str) -> argparse.ArgumentParser:
    """Add command ``name`` to ``sub``: ``help_text`` in the command list, ``description`` (default
    ``help_text``) at the top of its own ``--help``, and where its docs are (:func:`~evaltasks._version.docs_ref`
    of ``section``) at the bottom."""
    return sub.add_parser(name, help=help_text, description=description or help_text[:1].upper() + help_text[1:] + ".",
                          epilog=f"More: {docs_ref(section)}.")


def _error(message: str) -> None:
    from evaltasks._redact import redact

    print(f"evaltasks: error: {redact(message)}", file=sys.stderr)


_exit_status: int | None = None  # the command's exit code, once main() has returned it (see _exit_at_once)
# True in a run that `evaltasks server` forked (evaltasks.server.daemon): its runner supervises the run's process, and
# the run needs no heartbeats, as on a temporary server (see _without_heartbeats).
served_by_runner = False


def _prepare_served_run() -> None:
    """In a run that ``evaltasks server`` forked, before Prefect's settings are read again: Prefect's quiet defaults
    (:func:`_quiet_prefect_defaults`) and :data:`served_by_runner` (no heartbeats: its runner supervises it)."""
    global served_by_runner
    _quiet_prefect_defaults()
    served_by_runner = True


def _serve_in_foreground(paths: ServerPaths) -> int:
    """``evaltasks server``: run the server in this process; its forked children run :func:`main` (the server
    runs CLI commands without importing the CLI: docs/architecture.md#architecture). Returns the exit code."""
    from evaltasks.server.client import ServedCommand
    from evaltasks.server.daemon import serve

    return serve(paths, ServedCommand(prepare=_prepare_served_run, main=main, interrupted=EXIT_SIGINT))


def _exit_at_once() -> None:
    """Exit handler of the ``evaltasks`` command: end the process now with the code :func:`main` returned.

    Registered before anything else, it runs after every other exit handler (Prefect's server stop, its event
    and log flush, logging's shutdown, which it calls again here for handlers registered earlier). What it skips
    is the interpreter's teardown of every loaded module (torch, Prefect, transformers: about two seconds of a
    quickstart run, measured in docs/performance.md), which writes nothing. Does nothing when main() did not
    return (an uncaught exception: the interpreter reports it as usual).
    """
    if _exit_status is None:
        return
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: the descriptor was closed when the interpreter started
                stream.flush()
        except (OSError, ValueError):  # closed, or a closed pipe (`evaltasks schema | head`)
            pass
    os._exit(_exit_status)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``evaltasks`` command; returns the exit code.

    Called without ``argv`` (the ``evaltasks`` command, ``python -m evaltasks``) the command owns its process:
    once its exit handlers have run, the process ends without tearing down its modules (:func:`_exit_at_once`).
    Called with ``argv`` (in-process callers, tests) it leaves the process as it was.
    """
    import gc

    global _exit_status
    if argv is None:
        import atexit

        atexit.register(_exit_at_once)

    # Python's default thresholds (700, 10, 10) ran ~750 collections (0.5 s) while a run imported Prefect and
    # started; a command owns its process, so it collects less often (restored for in-process callers).
    command_started = time.time()
    from evaltasks._env import drop_blank_env

    # Prefect reads every PREFECT_* variable itself and refuses a blank one (an unset `${{ vars.X }}` in CI
    # expands to ""): blank counts as unset, as everywhere in evaltasks.
    drop_blank_env("PREFECT_")
    thresholds = gc.get_threshold()
    gc.set_threshold(10_000, 10, 100)
    try:
        status = _main(argv, command_started)
        if argv is None:
            _exit_status = status
            from evaltasks.supervisor import announce_exit

            announce_exit(status)  # in a supervised run's child: the code it exits with (no-op elsewhere)
        return status
    finally:
        gc.set_threshold(*thresholds)


def _open_standard_streams() -> None:
    """Point a closed standard file descriptor (``evaltasks run ... >&-``) at the null device, as daemons do, so
    that Prefect's server process, logging and the last flush find one; writes to it are discarded."""
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, mode)
            if null != fd:
                os.dup2(null, fd)  # inheritable, as a standard descriptor is
                os.close(null)
            else:  # the lowest free descriptor was this one: opened close-on-exec, which child processes lose
                os.set_inheritable(fd, True)
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False))


def _main(argv: list[str] | None, command_started: float) -> int:
    args = _parser().parse_args(argv)
    args.command_started = command_started
    if args.command in ("run", "serve", "server", "index", "calibrate"):
        try:
            os.getcwd()
        except FileNotFoundError:
            _error("the current directory no longer exists (it was deleted): cd to an existing directory and run again")
            return EXIT_INVALID
    if argv is None:  # the command owns its process
        _open_standard_streams()
    if args.command == "server" or (args.command == "run" and argv is None and not args.no_server):
        from evaltasks.server import client as _client  # standard library only: decides before Prefect, rich or numpy load

        if args.command == "server":
            return _client.server_command(args, _serve_in_foreground)
        served = _client.run_served(sys.argv[1:], command_started)  # docs/server.md#faster-repeated-runs-evaltasks-server
        if served is not None:
            return served
    if args.command == "schema":
        from evaltasks.inputs.suite import suite_json_schema

        try:
            print(json.dumps(suite_json_schema(), indent=2))
            sys.stdout.flush()
        except BrokenPipeError:  # `evaltasks schema | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PASSED
    if args.command == "index":
        return _index(args)
    if args.command == "calibrate":
        return _calibrate(args)
    if args.command == "history":
        return _history(args)
    if args.command in ("run", "serve"):  # both start Prefect, which cannot start without a writable home
        problem = _check_prefect_home()
        if problem:
            _error(problem)
            return EXIT_INVALID
    if args.command == "serve":
        return _serve(args)
    if argv is None:  # the command owns its process: run the suite in a supervised child (evaltasks.supervisor)
        from evaltasks import supervisor

        if supervisor.available():
            code = supervisor.supervise()
            if code is not None:  # the parent, once the run has ended
                return code
    return _run_interruptible(args)


def _flow_outcome(state: Any) -> dict[str, Any]:
    """The evaluate-suite flow's returned dict from its final ``state``: the Completed result, or the
    ``result`` of the :class:`~evaltasks.errors.GateFailed` a failed gate ends the run with (the gate's verdict
    is in the dict). Any other failure is raised as the flow raised it."""
    from evaltasks.errors import GateFailed

    try:
        return state.result()
    except GateFailed as exc:
        return exc.result


def _history(args: argparse.Namespace) -> int:
    """``evaltasks history SUITE``: the suite's run records as a table (or JSON Lines), oldest first; exit 2
    when the suite cannot be read or has no history. Reads the suite file only (no dataset, no Prefect)."""
    from pydantic import ValidationError

    from evaltasks.engine.history import DEFAULT_HISTORY_DIR, HistoryStore, resolve_history_dir
    from evaltasks.errors import ConfigError, InputError, Problem
    from evaltasks.inputs.files import decode_text, load_yaml
    from evaltasks.inputs.suite import HistorySpec

    if args.last < 1:
        _error("--last must be at least 1")
        return EXIT_INVALID
    try:  # the suite's name and history: block only (its metrics and data are not needed)
        raw = Path(args.suite).read_bytes()
        data = load_yaml(decode_text(raw, args.suite, ConfigError), args.suite, ConfigError)
        name = data.get("name") if isinstance(data, dict) else None
        if not isinstance(name, str) or not name:
            raise ConfigError([Problem(args.suite, "name", "", "a suite needs a name")])
        spec = HistorySpec.model_validate(data["history"]) if data.get("history") is not None else None
    except OSError as exc:
        _error(f"cannot read the suite file {args.suite}: {exc.strerror or exc}")
        return EXIT_INVALID
    except ValidationError as exc:
        _error(f"{args.suite}: invalid history block: {exc.errors()[0]['msg']}")
        return EXIT_INVALID
    except InputError as exc:
        _error(str(exc))
        return EXIT_INVALID
    suite = argparse.Namespace(name=name, history=spec)
    directory = resolve_history_dir(args.suite, spec, args.history_dir) or Path(DEFAULT_HISTORY_DIR)
    import logging

    # the store also logs what it skips (for a flow run's logs); here the lines below print it once, prefixed
    logging.getLogger("evaltasks.history").addHandler(logging.NullHandler())
    store = HistoryStore(directory)
    records = store.read(suite.name, last=args.last)
    for warning in store.warnings:
        print(f"evaltasks: warning: {warning}", file=sys.stderr)
    if not records:
        _error(f"no run history of suite {suite.name!r} in {store.path(suite.name)} (runs record it with "
               "--history-dir DIR, $EVALTASKS_HISTORY_DIR or a history: block in the suite)")
        return EXIT_INVALID
    if args.json:
        for record in records:
            print(record.model_dump_json())
        return EXIT_PASSED
    from rich.console import Console

    from evaltasks.reports.history_table import print_history

    print_history(Console(), f"Run history of {suite.name} ({store.path(suite.name)})", records)
    return EXIT_PASSED


def _serve(args: argparse.Namespace) -> int:
    """``evaltasks serve SUITE --cron``: validate the suite and flags, then serve the flow until interrupted.

    Exit 2 (one line, nothing served) for an invalid suite, ``--output-dir``, ``--cron`` or deployment name
    (``--name``, default the suite's name), and when no Prefect server is configured or it cannot be
    reached; exit 3 (:func:`_aborted`) for anything else that fails; 0 on Ctrl+C.
    """
    from evaltasks.errors import InputError

    _leave_price_warnings_to_the_run()
    try:
        from evaltasks.engine.run import plan_run

        plan = plan_run(args.suite)
        _use_default_output_dir(args, plan.suite.suite.name)
        problem = _check_output_dir(Path(args.output_dir))
        if not problem:
            _quiet_prefect_defaults()
            flag = "--name" if args.name else "the suite name (the default --name)"
            name = args.name or plan.suite.suite.name
            problem = _check_cron(args.cron) or _check_deployment_name(name, flag) or _check_prefect_server()
        if problem:
            _error(problem)
            return EXIT_INVALID
        from evaltasks.flows.evaluate_suite import SERVED_VERDICT_ENV, evaluate_suite

        os.environ[SERVED_VERDICT_ENV] = "1"  # each flow run prints its verdict line here
        parameters = {
            "suite_path": str(Path(args.suite).resolve()),
            "output_dir": str(Path(args.output_dir).resolve()),
            "index_dir": str(Path(args.index_dir).resolve()) if args.index_dir else None,
        }
        print(f"serving deployment 'evaluate-suite/{name}' on cron '{args.cron}' (Ctrl+C to stop)", flush=True)
        evaluate_suite.serve(name=name, cron=args.cron, parameters=parameters, print_starting_message=False)
    except InputError as exc:
        _error(str(exc))
        return EXIT_INVALID
    except KeyboardInterrupt:
        return EXIT_PASSED
    except Exception:  # noqa: BLE001
        return _aborted(args)
    return EXIT_PASSED


def _index_check_status(entries: list[dict[str, Any]], searches: list[dict[str, Any]] | None = None) -> int:
    """The exit code of ``index info`` and ``index verify`` over :meth:`ReferenceIndex.check`'s ``entries`` and
    :func:`~evaltasks.index.search.check_searches`' ``searches``: 1 with an error line ("N of M reference index
    namespaces are broken", "N of M reference-set searches are broken") when any has problems, else 0."""
    code = EXIT_PASSED
    broken = sum(bool(entry["problems"]) for entry in entries)
    if broken:
        _error(f"{broken} of {len(entries)} reference index namespaces are broken")
        code = EXIT_GATE_FAILED
    broken_searches = sum(bool(entry["problems"]) for entry in searches or [])
    if broken_searches:
        _error(f"{broken_searches} of {len(searches or [])} reference-set searches are broken")
        code = EXIT_GATE_FAILED
    return code


def _print_searches(searches: list[dict[str, Any]], directory: Path) -> None:
    """One line for the reference-set searches in ``directory``, then one per broken search."""
    if not searches:
        return
    unchecked = sum(not entry["checked"] for entry in searches)
    print(f"reference-set searches: {len(searches)} in {directory}"
          + (f" ({unchecked} written by an older version: no checksums to verify)" if unchecked else ""))
    for entry in searches:
        if entry["problems"]:
            fate = ("removed: the next run that uses the set rebuilds it" if entry.get("removed")
                    else "`evaltasks index verify` removes it; the next run rebuilds it")
            print(f"  BROKEN search {entry['key']}: {'; '.join(entry['problems'])}; {fate}")


def _index_compact(index: Any) -> int:
    """``evaltasks index compact``: merge each namespace's segments, dropping damaged rows and segments (each
    drop a warning line; the next run embeds those texts again); exit 1 naming each namespace that cannot be
    read at all (its ``meta.json``), as ``index verify`` does, else 0."""
    from evaltasks.index import recording_warnings

    counts = {e.get("namespace"): e.get("count") for e in index.info()}
    failed: dict[str, str] = {}
    with recording_warnings() as notes:
        done = index.compact(failed=failed)
    for note in notes:
        print(f"evaltasks: warning: {note}", file=sys.stderr)
    for namespace, (before, after) in done.items():
        count = next((e.get("count") for e in index.info() if e.get("namespace") == namespace), "?")
        dropped = counts.get(namespace, count) - count if isinstance(count, int) else 0
        note = f"; {dropped} damaged vectors dropped: the next run embeds them again" if dropped else ""
        print(f"{namespace}: 1 segment, nothing to compact" if (before, after) == (1, 1) and not dropped else
              f"{namespace}: format 1 converted to 1 segment ({count} vectors)" if before == 0 else
              f"{namespace}: {before} segment{'s' if before != 1 else ''} -> {after} ({count} vectors{note})")
    for path, why in failed.items():
        print(f"BROKEN ({path}): {why}; not compacted (delete the folder: the next run rebuilds it)")
    if failed:
        _error(f"{len(failed)} reference index namespaces could not be compacted")
        return EXIT_GATE_FAILED
    return EXIT_PASSED


def _index(args: argparse.Namespace) -> int:
    """``evaltasks index build|info|verify|compact|prune``."""
    from evaltasks.errors import InputError
    from evaltasks.index import ReferenceIndex
    from evaltasks.index.search import CHECKSUMS_SUFFIX, check_searches

    index = ReferenceIndex(args.index_dir)
    try:
        if args.index_command == "info":
            entries = index.check()  # verifies each namespace's files: exit 1 when any is broken
            if not entries:
                print(f"no reference index at {index.root}")
            for entry in entries:
                size = sum(p.stat().st_size for p in Path(entry["path"]).glob("*") if p.is_file())
                print(f"{entry.get('namespace', entry['path'])}: {entry.get('count', '?')} vectors × "
                      f"{entry.get('dimensions', '?')} dims, {size / 1e6:.1f} MB, updated {entry.get('updated', '?')}")
                if entry["problems"]:
                    print(f"  BROKEN ({entry['path']}): {'; '.join(entry['problems'])}; a run never reads damaged "
                          "vectors (it embeds them again); `evaltasks index compact` drops them now")
            searches = check_searches(index.root / "sets")  # every byte, as the namespaces: nothing removed
            _print_searches(searches, index.root / "sets")
            return _index_check_status(entries, searches)
        if args.index_command == "verify":
            entries = index.check()
            if not entries:
                print(f"no reference index at {index.root}")
            for entry in entries:
                if entry["problems"]:
                    print(f"BROKEN ({entry['path']}): {'; '.join(entry['problems'])}")
                else:
                    parts = len(entry.get("segments", []))
                    where = f"{parts} segment{'s' if parts != 1 else ''}" if entry.get("format") == 2 \
                        else "vectors.faiss"
                    print(f"{entry.get('namespace', entry['path'])}: ok, {entry.get('count', '?')} vectors in {where}")
            searches = check_searches(index.root / "sets", remove_broken=True)
            _print_searches(searches, index.root / "sets")
            return _index_check_status(entries, searches)
        if args.index_command == "compact":
            return _index_compact(index)
        from evaltasks.engine.run import index_plan, plan_run

        if args.index_command == "build":
            counts = index_plan(plan_run(args.suite), args.index_dir)
            for namespace, c in counts.items():
                print(f"{namespace}: {c['references_computed']} references embedded, "
                      f"{c['references_reused']} already in the index")
            return EXIT_PASSED
        keep: dict[str, list[str]] = {}
        keep_sets: set[str] = set()
        for suite in args.suites:
            plan = plan_run(suite)
            for namespace, need in plan.needs.items():
                keep.setdefault(namespace, []).extend(need.references)
            keep_sets |= {m.search_key for m in plan.suite.metrics if getattr(m, "search_key", None)}
        stale = [entry["key"] for entry in check_searches(index.root / "sets", verify=False)
                 if entry["key"] not in keep_sets]
        if args.dry_run:  # what the same command without --dry-run would drop, nothing changed
            stored = {entry.get("namespace"): entry.get("count", 0) for entry in index.info()}
            for namespace, count in index.prune(keep, dry_run=True).items():
                print(f"{namespace}: would drop {count} of {stored.get(namespace, count)} vectors (kept: "
                      f"{stored.get(namespace, count) - count}, the texts the suites reference)")
            for key in stale:
                print(f"would drop the unused reference-set search {key} ({index.root / 'sets'})")
            print("dry run: nothing was dropped")
            return EXIT_PASSED
        for namespace, count in index.prune(keep).items():
            print(f"{namespace}: dropped {count} vectors")
        for key in stale:  # the set's vectors, its FAISS index (when approximate) and their checksums
            for suffix in (".npy", ".faiss", CHECKSUMS_SUFFIX):
                (index.root / "sets" / f"{key}{suffix}").unlink(missing_ok=True)
        if stale:
            print(f"dropped {len(stale)} unused reference-set searches")
        return EXIT_PASSED
    except InputError as exc:
        _error(str(exc))
        return EXIT_INVALID
    except Exception:  # noqa: BLE001
        args.output_dir = "."
        return _aborted(args)


def _calibrate(args: argparse.Namespace) -> int:
    """``evaltasks calibrate SUITE --labels COLUMN``: score the suite's dataset through the Python API (no
    Prefect) and print each metric's calibrated thresholds (:mod:`evaltasks.engine.calibration`).

    Exit 0 with the report; 2 (no traceback) for an invalid suite, dataset, label column or label; 130 on
    Ctrl+C (one line); 3 (:func:`_aborted`) for anything else.
    """
    from evaltasks.errors import InputError

    try:
        from evaltasks.engine.calibration import calibrate_suite, format_report

        report = _with_stage_progress(lambda: calibrate_suite(args.suite, args.labels, index_dir=args.index_dir))
        print(report.model_dump_json(indent=2) if args.json else format_report(report), flush=True)
    except InputError as exc:
        _error(str(exc))
        return EXIT_INVALID
    except BrokenPipeError:  # `evaltasks calibrate ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except KeyboardInterrupt:  # Ctrl+C: nothing was written, one line
        _error("calibrate interrupted by SIGINT: nothing written")
        return EXIT_SIGINT
    except Exception:  # noqa: BLE001
        args.output_dir = "."
        return _aborted(args)
    return EXIT_PASSED


def _run(args: argparse.Namespace) -> int:
    from evaltasks.errors import InputError

    from evaltasks.engine.compare import DEFAULT_TOLERANCE

    if args.batch_size is not None and args.batch_size < 1:
        _error("--batch-size must be at least 1")
        return EXIT_INVALID
    if args.regression_tolerance is None:
        args.regression_tolerance = DEFAULT_TOLERANCE
    if not 0.0 <= args.regression_tolerance <= 1.0:
        _error(f"--regression-tolerance must be in [0, 1], got {args.regression_tolerance}")
        return EXIT_INVALID
    problem = _check_task_runner(args.task_runner) or _check_run_setup(args)
    if problem:
        _error(problem)
        return EXIT_INVALID
    _leave_price_warnings_to_the_run()
    try:
        from evaltasks.engine.run import plan_run

        plan = plan_run(args.suite, skip_missing_credentials=args.skip_missing_credentials)  # before Prefect
        if _use_default_output_dir(args, plan.suite.suite.name) and _interrupt is not None:
            _interrupt.use_output_dir(Path(args.output_dir))
        for warning in plan.suite.warnings:
            print(f"evaltasks: warning: {warning}", file=sys.stderr)
        for notice in plan.suite.notices:
            print(f"evaltasks: note: {notice}", file=sys.stderr)
        parsed_baseline = None
        if args.baseline is not None:
            from evaltasks.engine.run import read_baseline

            parsed_baseline = read_baseline(args.baseline)  # a bad baseline is a usage error: found now
        problem = _check_output_dir(Path(args.output_dir))
        if problem is None:  # the history is written after the reports: a run must not end without it
            from evaltasks.engine.history import resolve_history_dir

            history = resolve_history_dir(args.suite, plan.suite.suite.history, args.history_dir)
            problem = None if history is None else _check_output_dir(history, "history directory")
        if problem:
            _error(problem)
            return EXIT_INVALID
        if args.max_cost is not None:
            from evaltasks.engine.run import check_judge_prices, estimate_cost

            check_judge_prices(plan)  # an unpriced judge model costs "$0": the budget could not stop it
            estimate = estimate_cost(plan, args.index_dir, refresh=args.no_cache)
            if estimate > args.max_cost and not args.no_cache:  # Prefect's task cache may hold the results
                estimate = _estimate_with_task_cache(plan, args)
            if estimate > args.max_cost:
                from evaltasks.metrics.judge.base import JudgeMetric

                judged = any(isinstance(metric, JudgeMetric) for metric in plan.suite.metrics)
                how = " (judge requests at their worst case: every answer as long as max_tokens allows)" if judged else ""
                _error(f"the run is estimated to cost ${estimate:.4f}{how}, above --max-cost ${args.max_cost:.4f}")
                return EXIT_INVALID
    except InputError as exc:
        _error(str(exc))
        return EXIT_INVALID
    except Exception:  # noqa: BLE001
        return _aborted(args)

    # Hand the flow this validated plan (its `plan` parameter) instead of letting it parse everything again, and
    # drop our references, so a run of 10^6 cases holds the dataset once.
    from evaltasks.engine.run import PlannedRun, RunOptions

    options = RunOptions(
        output_dir=args.output_dir, index_dir=args.index_dir, batch_size=args.batch_size, cache=not args.no_cache,
        reports_url=args.reports_url, concurrency_limit=args.concurrency_limit,
        skip_missing_credentials=args.skip_missing_credentials, baseline=args.baseline,
        regression_tolerance=args.regression_tolerance, baseline_label=args.baseline_label, max_cost=args.max_cost,
        history_dir=args.history_dir,
    )
    suite_name, work_items, min_pass_rate = plan.suite.suite.name, plan.work_items, plan.suite.suite.gate.min_pass_rate
    metric_count = len(plan.suite.metrics)
    shown_warnings = set(plan.suite.warnings)  # printed above; the run may add more (e.g. a corrupt index)
    model_needs = [need for need in plan.needs.values() if callable(getattr(need.provider, "load", None))]
    planned = PlannedRun.of(plan, parsed_baseline)
    del plan, parsed_baseline

    _quiet_prefect_defaults()
    try:
        from evaltasks.server.temporary import spawn_temporary_server

        # Prefect's temporary server starts now, guarded (evaltasks.server.temporary): its seconds of start-up
        # overlap the imports and the model load below; the flow waits for it before its first API call.
        starting = spawn_temporary_server()
        problem = None if starting is not None else _check_configured_server()  # before the flow starts
    except Exception:  # noqa: BLE001
        return _aborted(args)
    if problem:
        _error(problem)
        return EXIT_INVALID
    # read the index only now, while the server starts: a large namespace takes seconds to read
    model_providers = [need.provider for need in model_needs if _has_missing_texts(need, args.index_dir)]
    del model_needs
    import contextlib

    from rich.console import Console

    from evaltasks.engine import progress as _progress
    from evaltasks.reports.console import notable_cases, print_summary

    console = Console(stderr=True)
    progress = _stage_progress(console, args.quiet)
    stages = _Stages(progress, f"scoring {work_items // max(metric_count, 1):,} cases × {metric_count} "
                               f"metric{'' if metric_count == 1 else 's'}", work_items)
    try:
        with progress, contextlib.ExitStack() as scope:
            # the user's own server (PREFECT_API_URL) is connected to, not started
            stages.stage("starting Prefect" if starting is not None or not _configured_server() else
                         "connecting to Prefect")
            _progress.set_progress_callback(stages.advance)
            _progress.set_stage_callback(stages.stage)
            if _interrupt is not None:
                _progress.set_stop_callback(_interrupt.stopping)
            from evaltasks.flows.evaluate_suite import evaluate_suite, make_task_runner

            if args.task_runner == "threads":  # its own line while Prefect starts: the two overlap
                _load_models_in_background(model_providers, stages)
            from evaltasks.server.temporary import guard_temporary_server

            if starting is not None:
                starting.wait()
            temporary = starting is not None or guard_temporary_server()  # in its own session, dying with us
            _hide_tracebacks()
            if _interrupt is not None:
                _interrupt.watch_logs()
            scope.enter_context(_terminal_logging(console, live=not args.quiet and console.is_terminal))
            stages.stage(f"evaluating {suite_name}")  # until the flow names its stages
            flow = evaluate_suite
            if args.task_runner != "threads":
                flow = evaluate_suite.with_options(task_runner=make_task_runner(args.task_runner))
            if temporary or served_by_runner:
                flow = _without_heartbeats(flow)
            state = flow(suite_path=str(Path(args.suite)), **options.flow_parameters(), plan=planned,
                         return_state=True)
            outcome = _flow_outcome(state)
    except InputError as exc:
        _error(str(exc))
        return EXIT_INVALID
    except Exception:  # noqa: BLE001
        return _aborted(args)
    finally:  # KeyboardInterrupt (SIGINT, SIGTERM): handled by _run_interruptible
        _progress.set_progress_callback(None)
        _progress.set_stop_callback(None)
        _progress.set_stage_callback(None)

    for warning in [*outcome.get("warnings", []), *_regression_warning(outcome)]:
        if warning not in shown_warnings:
            print(f"evaltasks: warning: {warning}", file=sys.stderr)
    # --quiet: the verdict line, the gate line and the reports line only (docs/cli.md#cli)
    from evaltasks.engine.compare import Comparison
    from evaltasks.results import EvaluationSummary

    try:
        summary = EvaluationSummary.model_validate(outcome["summary"])
        cases = None if args.quiet else notable_cases(Path(args.output_dir) / "results.json", summary)
        print_summary(
            summary, passed=outcome["passed"], cases=cases, brief=args.quiet,
            min_pass_rate=min_pass_rate, console=Console(),
            gate_pass_rate=outcome.get("gate", {}).get("pass_rate"),
            comparison=Comparison.model_validate(outcome["comparison"]) if outcome.get("comparison") else None,
            fail_on=outcome.get("gate", {}).get("fail_on"),
            gate_message=outcome.get("gate", {}).get("message"),
        )
        # two durations, each named (docs/cli.md#cli): the flow run's own work (results.json duration_s)
        # and the whole command, start-up included
        reports = f"reports: {Path(args.output_dir) / 'results.json'}, junit.xml, summary.md"
        timing = f"(flow run {outcome.get('duration_s') or 0:.1f} s, total {time.time() - args.command_started:.1f} s)"
        import shutil

        fits = not sys.stdout.isatty() or len(reports) + 1 + len(timing) <= shutil.get_terminal_size().columns
        print(reports + (" " if fits else "\n") + timing)  # a terminal's line break never splits a number
        sys.stdout.flush()
    except (BrokenPipeError, SystemExit):  # `evaltasks run ... | head -1`: the reader left; the verdict stands.
        # (rich's Console answers a broken pipe with SystemExit(1), which would read as a failed gate; Python
        # docs, "Note on SIGPIPE": point stdout at devnull so the interpreter's last flush does not fail again)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_PASSED if outcome["passed"] else EXIT_GATE_FAILED


def _price_warning_filter(record: Any) -> bool:
    """Logging filter: False for the judges' "no price for judge model" record (:func:`_leave_price_warnings_to_the_run`)."""
    return not (isinstance(record.msg, str) and record.msg.startswith("no price for judge model"))


def _leave_price_warnings_to_the_run() -> None:
    """Keep the judges' log record about an unpriced judge model off the terminal: ``evaltasks run`` reports it
    itself, as an ``evaltasks: warning:`` line from the run's warnings (``judge_price_warnings``) or as the
    ``--max-cost`` error, and without a handler it printed as a bare, unprefixed line before anything else."""
    import logging

    judges = logging.getLogger("evaltasks.judges")
    if _price_warning_filter not in judges.filters:
        judges.addFilter(_price_warning_filter)


def _regression_warning(outcome: dict[str, Any]) -> list[str]:
    """The flow's one line about the regressions since the baseline (``regression_summary``), when any, for
    ``evaltasks run`` to print in its own format (the flow's log record of it stays off the terminal)."""
    if not (outcome.get("comparison") or {}).get("regressions"):
        return []
    from evaltasks.engine.compare import Comparison
    from evaltasks.flows.evaluate_suite import regression_summary

    return [regression_summary(Comparison.model_validate(outcome["comparison"]))]


class _Interrupt:
    """What ``evaltasks run`` does on SIGINT (Ctrl+C) or SIGTERM; see :func:`_run_interruptible`."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.output_dir: Path | None = None  # known once the suite is read (default: one directory per suite)
        self.reports_before: tuple[tuple[int, int], ...] | None = None
        self.reported = False
        self.signum: int | None = None
        self.delivered = False  # the handler has run (a second signal ends the process)
        self.previous_unraisablehook = sys.unraisablehook
        if args.output_dir is not None:
            self.use_output_dir(Path(args.output_dir))

    def use_output_dir(self, path: Path) -> None:
        """The run's reports directory: what it holds now is "the previous reports" of :meth:`message` (and, in a
        supervised run, of its parent: :func:`evaltasks.supervisor.note_reports`)."""
        from evaltasks.supervisor import note_reports

        self.output_dir, self.reports_before = path, _report_stamps(path)
        note_reports(path)

    def handler(self, signum: int, frame: Any) -> None:
        """Signal handler: the first signal stops the run (KeyboardInterrupt in the main thread); a second one,
        while it stops, ends the process at once (the temporary server dies with it)."""
        if self.delivered and self.signum is not None:
            self.report()
            os._exit(_exit_code(self.signum))
        self.delivered = True
        if self.signum is None:  # else Prefect's handler saw this signal first and passed it on
            self.begin(signum)
        raise KeyboardInterrupt

    def unraisable(self, unraisable: Any) -> None:
        """``sys.unraisablehook`` while the run goes on: deliver again a signal whose handler ran inside a
        finalizer.

        Python runs signal handlers between bytecodes, also inside a finalizer (an object's ``__del__``, a
        weakref callback, run by the garbage collector at any allocation), and drops what a finalizer raises
        (the "Exception ignored in" message). A KeyboardInterrupt from :meth:`handler`, or Prefect's
        TerminationSignal (its SIGTERM handler during a flow run), raised there would be lost and the run would
        go on to the end. The signal is sent again, once per loss, from a thread once this hook has returned
        (an ``os.kill`` here would run the handler inside the hook, where a raise is lost too): its handler runs
        at the main thread's next bytecode boundary, outside that finalizer, or is lost and sent again until it
        lands outside one. Anything else goes to the hook that was installed before.
        """
        import signal
        import threading

        kind = unraisable.exc_type
        if kind is None or not (issubclass(kind, KeyboardInterrupt) or kind.__name__ == "TerminationSignal"):
            self.previous_unraisablehook(unraisable)
            return
        signum = getattr(unraisable.exc_value, "signal", None) or self.signum or signal.SIGINT
        self.delivered = False  # the same signal again, not a second one (which would end the process)
        returned = threading.Event()
        threading.Thread(target=self._redeliver, args=(signum, returned), name="evaltasks-redeliver-signal",
                         daemon=True).start()
        returned.set()  # the last bytecodes of this hook (no handler runs between them and the return)

    @staticmethod
    def _redeliver(signum: int, hook_returned: Any) -> None:
        """Thread body of :meth:`unraisable`: once the hook has returned, send ``signum`` to this process."""
        hook_returned.wait()
        time.sleep(0.001)
        os.kill(os.getpid(), signum)

    def begin(self, signum: int) -> None:
        """Record ``signum`` (log records stop reaching the terminal: :meth:`console_filter`), stop the encodes."""
        self.signum = signum
        local = sys.modules.get("evaltasks.embeddings.local")
        if local is not None:
            local.cancel_queued_encodes()

    def stopping(self, terminated: bool) -> None:
        """The flow stops on a signal (Prefect's SIGTERM handler ran before this one's): begin the interrupt
        now, so the failures of the tasks it cancels never reach the terminal."""
        import signal

        if self.signum is None:
            self.begin(signal.SIGTERM if terminated else signal.SIGINT)

    def console_filter(self, record: Any) -> bool:
        """Logging filter on the terminal's handlers: nothing passes once the run is interrupted.

        During a flow run Prefect's own SIGTERM handler comes first (it marks the run crashed, then delivers
        the signal to this one); its first record about it starts the interrupt here.
        """
        if self.signum is None and "aborted by a termination signal" in str(record.msg):
            import signal

            self.begin(signal.SIGTERM)
        return self.signum is None

    def watch_logs(self, remove: bool = False) -> None:
        """Install :meth:`console_filter` on the console handlers Prefect configured (``remove``: take it off)."""
        import logging

        for logger in (logging.getLogger(), logging.getLogger("prefect")):
            for handler in logger.handlers:
                handler.removeFilter(self.console_filter)
                if not remove:
                    handler.addFilter(self.console_filter)

    def report(self) -> None:
        """Print :meth:`message` to stderr, once."""
        if not self.reported:
            self.reported = True
            print(self.message(), file=sys.stderr, flush=True)

    def message(self) -> str:
        """The one line printed: which signal, what the reports directory holds, where finished work is kept."""
        import signal

        from evaltasks.index import default_index_dir

        args, out = self.args, self.output_dir
        after = _report_stamps(out) if out is not None else None
        if after is not None and after != self.reports_before:
            reports = f"the reports in {out} are complete (written before the interrupt)"
        elif after is not None:
            reports = f"no reports written ({out} keeps the previous ones)"
        else:
            reports = "no reports written"
        index = args.index_dir or str(default_index_dir())
        kept = [f"references embedded so far are kept in {index}"] if Path(index).is_dir() else []
        kept += [] if args.no_cache else ["finished tasks in Prefect's task cache (a re-run reuses them)"]
        return f"evaltasks: interrupted by {signal.Signals(self.signum or 2).name}: " + "; ".join([reports, *kept])


_interrupt: _Interrupt | None = None  # the running `evaltasks run`'s, while _run_interruptible runs it


def _exit_code(signum: int) -> int:
    """:data:`EXIT_SIGTERM` (143) for SIGTERM, else :data:`EXIT_SIGINT` (130): the only signals a run handles."""
    import signal

    return EXIT_SIGTERM if signum == signal.SIGTERM else EXIT_SIGINT


def _report_stamps(directory: Path) -> tuple[tuple[int, int], ...] | None:
    """(inode, mtime in ns) of results.json, junit.xml and summary.md in ``directory``; None unless all exist."""
    try:
        return tuple(
            (stat.st_ino, stat.st_mtime_ns)
            for stat in (os.stat(directory / name) for name in ("results.json", "junit.xml", "summary.md"))
        )
    except OSError:
        return None


def _run_interruptible(args: argparse.Namespace) -> int:
    """:func:`_run`, stopped cleanly by SIGINT (Ctrl+C; exit 130) or SIGTERM (exit 143).

    GitHub Actions cancels a job with SIGINT, then SIGTERM 7.5 s later, then SIGKILL. The first signal stops
    the run: queued and running encodes stop (within one chunk, see ``evaltasks.embeddings.local``), Prefect
    marks the flow run crashed on its temporary server (which the terminal's Ctrl+C no longer reaches: see
    ``evaltasks.server.temporary``), log records stop reaching the terminal, and one line says what the reports
    directory holds: reports are replaced as a set or not at all, so it keeps the previous set unless the new
    one was complete before the signal. The temporary server stops when the process exits; a second signal
    ends the process at once. A run that has not ended 10 s after the first signal is ended by its parent process
    (:mod:`evaltasks.supervisor`, which relays the signals here). Returns the exit code.
    """
    import signal

    global _interrupt
    interrupt = _interrupt = _Interrupt(args)
    previous = {signum: signal.signal(signum, interrupt.handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    sys.unraisablehook = interrupt.unraisable
    try:
        return _run(args)
    except BaseException as exc:
        if interrupt.signum is None:  # Prefect's SIGTERM handler raised its own exception, or a stray Ctrl+C
            if isinstance(exc, KeyboardInterrupt):
                interrupt.begin(signal.SIGINT)
            elif type(exc).__name__ == "TerminationSignal":
                interrupt.begin(signal.SIGTERM)
            else:
                raise
        interrupt.report()
        return _exit_code(interrupt.signum or signal.SIGINT)  # our handler stays: a second signal exits at once
    finally:
        if interrupt.signum is None:  # not interrupted: leave the process as it was (in-process callers)
            _interrupt = None
            interrupt.watch_logs(remove=True)
            sys.unraisablehook = interrupt.previous_unraisablehook
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _has_missing_texts(need: Any, index_dir: str | None) -> bool:
    """Whether some reference or output of ``need`` (an :class:`~evaltasks.metrics.base.EmbeddingNeed`) is not
    in the index yet, so the run will load its model (a cheap read of the namespace; a model on disk is not loaded).
    An unreadable index counts as missing texts (the flow reports it)."""
    import warnings

    from evaltasks.index import ReferenceIndex

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a corrupt namespace is reported by the flow, once
            return bool(ReferenceIndex(index_dir).missing_texts(need.provider, [*need.references, *need.outputs]))
    except Exception:  # noqa: BLE001 - whatever is wrong, the flow finds it; preload as before
        return True


def _load_models_in_background(providers: list[Any], stages: _Stages | None = None) -> Any:
    """Load the local embedding models in a thread while Prefect's temporary server starts.

    The server takes seconds to start and the model seconds to import and load (torch, transformers); done
    one after the other they added up (~5 s of a run's start-up). The flow's tasks then find the model
    loaded (or wait for the load to finish: the provider's lock). A load that fails here is left to the flow,
    which raises it as usual. Prefect's server module is imported first, in this thread, so the two threads
    never import the same modules at the same time. ``stages``: the progress display, which shows ``loading the
    model NAME`` on a line of its own while each loads. Returns the thread (None without providers).
    """
    import contextlib
    import threading

    if not providers:
        return None
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        import prefect.server.api.server  # noqa: F401 - see the docstring

    def load() -> None:
        for provider in providers:
            name = getattr(provider, "model_name", None) or type(provider).__name__
            try:
                with stages.side(f"loading the model {name}") if stages is not None else contextlib.nullcontext():
                    provider.load()
            except Exception:  # noqa: BLE001 - the flow loads it again and reports the error
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
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    def call(**parameters: Any) -> Any:
        with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            return flow(**parameters)

    return call


def _without_traceback(record: Any) -> bool:
    """Logging filter: drop an input error's record; strip the traceback from any other record.

    For invalid input the CLI prints the message itself and exits 2; for an abort it prints a short message
    and writes the full traceback to a file (exit 3). Either way the terminal shows no traceback.
    """
    from evaltasks.engine.progress import printed_by_cli
    from evaltasks.errors import InputError

    if record.exc_info and isinstance(record.exc_info[1], InputError):
        return False
    if printed_by_cli(record):  # printed as `evaltasks: warning: ...` instead
        return False
    if isinstance(record.msg, str) and "encountered an exception " in record.msg and any(
            f"encountered an exception {name}:" in record.msg for name in _input_error_names()):
        return False  # Prefect's "Task run ... Finished in state Failed(...)" line for an input error (a rejected key)
    if record.exc_info or record.exc_text:
        record.exc_info, record.exc_text = None, None
        if isinstance(record.msg, str) and "Traceback (most recent call last)" in record.msg:
            record.msg = record.msg.split("Traceback (most recent call last)")[0].rstrip() or "error (traceback omitted)"
    return True


def _input_error_names() -> set[str]:
    """The class names of :class:`~evaltasks.errors.InputError` and its subclasses (as Prefect's state messages
    name an exception)."""
    from evaltasks.errors import InputError

    names, todo = set(), [InputError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names


class _Stages:
    """The terminal's stage-aware progress display (rich, on stderr): the stage the run is in, in words, with
    its own count, bar and elapsed time (docs/cli.md#cli).

    The CLI reports the stages it knows (``starting Prefect``; its own model load, :meth:`side`, a line of its
    own while it overlaps the server's start), the flow and its task runs report theirs through
    :mod:`evaltasks.engine.progress` (``loading the model NAME``, ``embedding N texts``, ``scoring N cases × M metrics``,
    with counts). A count reported while the current stage has none (a flow that names no scoring stage) starts
    the scoring stage the CLI knows from the plan (``scoring``: its words; ``work_items``: case × metric
    results). Thread-safe (rich's Progress is); a disabled Progress (``--quiet``) shows nothing.
    """

    def __init__(self, progress: Any, scoring: str, work_items: int) -> None:
        self.progress, self.scoring, self.work_items = progress, scoring, work_items
        self.task: Any = None
        self.sides: dict[str, Any] = {}

    def stage(self, description: str, total: int | None = None) -> None:
        """Show ``description`` as the current stage (its own line, count from 0 of ``total``; None: no count)."""
        if self.task is not None:
            self.progress.remove_task(self.task)
        side = self.sides.pop(description, None)
        if side is not None:  # the flow now waits for what the CLI's own line showed: one line for it
            self.progress.remove_task(side)
        self.task = self.progress.add_task(description, total=total)

    def advance(self, count: int) -> None:
        """Count ``count`` units of the current stage (the scoring stage when the current one has no count)."""
        if self.task is None or next(t for t in self.progress.tasks if t.id == self.task).total is None:
            self.stage(self.scoring, self.work_items)
        self.progress.advance(self.task, count)

    def side(self, description: str) -> Any:
        """A context manager: ``description`` on a line of its own (no count) while its block runs, beside the
        current stage (the CLI's model load while Prefect starts)."""
        import contextlib

        @contextlib.contextmanager
        def shown() -> Any:
            self.sides[description] = self.progress.add_task(description, total=None)
            try:
                yield
            finally:
                task = self.sides.pop(description, None)
                if task is not None:
                    self.progress.remove_task(task)

        return shown()


def _with_stage_progress(work: Any) -> Any:
    """``work()``'s result, with the stages it reports through :mod:`evaltasks.engine.progress` (``embedding N
    texts (MODEL)``, ``scoring N cases × M metrics`` with its count) shown on a terminal's stderr while it runs;
    nothing on a pipe. Imports no Prefect (``evaltasks calibrate``)."""
    from rich.console import Console

    from evaltasks.engine import progress as _progress

    display = _stage_progress(Console(stderr=True), quiet=False)
    stages = _Stages(display, "scoring", 0)
    try:
        with display:
            _progress.set_stage_callback(stages.stage)
            _progress.set_progress_callback(stages.advance)
            return work()
    finally:
        _progress.set_stage_callback(None)
        _progress.set_progress_callback(None)


def _configured_server() -> bool:
    """Whether ``PREFECT_API_URL`` names a server (the user's own: the CLI connects to it, starts none)."""
    from prefect.settings import PREFECT_API_URL

    return bool(PREFECT_API_URL.value())


def _stage_progress(console: Any, quiet: bool) -> Any:
    """The rich Progress of :class:`_Stages` on ``console``: the stage in words, a bar (pulsing while the stage
    has no count), ``done/total`` (blank without a count), the stage's elapsed time; gone when the run ends.
    ``quiet``, or ``console`` not a terminal (a pipe, a CI log): a disabled Progress (shows nothing; rich's
    transient display would leave a lone blank line at the top of a piped log)."""
    from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class CountColumn(ProgressColumn):
        """``done/total`` with thousands separators; blank for a stage without a count."""

        def render(self, task: Any) -> Text:
            if task.total is None:
                return Text("")
            return Text(f"{int(task.completed):,}/{int(task.total):,}", style="progress.download")

    return Progress(TextColumn("{task.description}", markup=False, style="bold"), BarColumn(), CountColumn(),
                    TimeElapsedColumn(), console=console, disable=quiet or not console.is_terminal, transient=True)


def _terminal_logging(console: Any, live: bool) -> Any:
    """A context manager for the flow's run: where log records go, restored when it ends (docs/cli.md#cli).

    - The terminal shows Prefect's level (``PREFECT_LOGGING_LEVEL``: WARNING unless the user set it), while
      the flow run's and task runs' loggers pass INFO (DEBUG when the terminal shows DEBUG) to Prefect's API
      handler on them: the run's own lines ("Pass rate … PASSED") reach the flow run's logs on the server
      whatever the terminal shows. Done on the logger and handler objects of this process, after Prefect
      configured them (setting ``PREFECT_LOGGING_*`` variables instead would reach the environment of every
      later run and child process).
    - ``live`` (the progress display is on the terminal): the console handlers print through ``console`` (rich's
      file proxy, as the display's own redirect of ``sys.stderr`` does), so a log line is printed above the
      progress display on a line of its own instead of into it.
    """
    import contextlib
    import logging

    @contextlib.contextmanager
    def scoped() -> Any:
        from rich.file_proxy import FileProxy

        class ThroughConsole(FileProxy):
            """rich's file proxy, which a rich Console writing to it cannot see through (rich unwraps its
            ``rich_proxied_file`` and would write to the terminal directly)."""

            @property
            def rich_proxied_file(self) -> Any:
                return self

        undo: list[Any] = []
        terminal = logging.getLogger("prefect").getEffectiveLevel()
        for name in ("prefect.flow_runs", "prefect.task_runs"):
            logger = logging.getLogger(name)
            undo.append((logger.setLevel, logger.level))
            logger.setLevel(min(terminal, logging.INFO))
        handlers = {id(h): h for lg in (logging.getLogger(), logging.getLogger("prefect")) for h in lg.handlers}
        for handler in handlers.values():
            own = getattr(handler, "console", None)  # Prefect's console handler prints through a rich Console
            if own is None and not (type(handler) is logging.StreamHandler
                                    and getattr(handler, "stream", None) in (sys.stderr, sys.__stderr__)):
                continue  # not the terminal's (the API handler, a file, pytest's capture)
            if handler.level < terminal:
                undo.append((handler.setLevel, handler.level))
                handler.setLevel(terminal)
            if live and own is not None:
                undo.append((setattr, own, "file", own.file))
                own.file = ThroughConsole(console, own.file)
            elif live:
                undo.append((handler.setStream, handler.stream))
                handler.setStream(ThroughConsole(console, handler.stream))
        try:
            yield
        finally:
            for action, *values in reversed(undo):
                action(*values)

    return scoped()


def _hide_tracebacks() -> None:
    """Install :func:`_without_traceback` on the console handlers Prefect configured."""
    import logging

    loggers = [logging.getLogger(), logging.getLogger("prefect")]
    for logger in loggers:
        for handler in logger.handlers:
            if _without_traceback not in handler.filters:
                handler.addFilter(_without_traceback)


def _aborted(args: argparse.Namespace) -> int:
    from evaltasks._redact import redact

    exc = sys.exc_info()[1]
    text = redact(traceback.format_exc())  # a library's exception may quote an echoed API key
    try:
        from evaltasks._atomic import atomic_writer

        out = Path(args.output_dir or "eval-results")  # None: the run aborted before its suite was read
        out.mkdir(parents=True, exist_ok=True)
        log = out / "evaltasks-error.log"
        with atomic_writer(log) as handle:  # replaces a symlink placed there instead of writing through it
            handle.write(text)
    except OSError:
        fd, name = tempfile.mkstemp(prefix="evaltasks-error-", suffix=".log")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        log = Path(name)
    _error(f"the run aborted: {type(exc).__name__}: {exc}\n  full traceback: {log}")
    return EXIT_ABORTED


if __name__ == "__main__":
    sys.exit(main())
