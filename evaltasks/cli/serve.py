"""``evaltasks serve SUITE --cron``: serve the suite's flow as a scheduled Prefect deployment (docs/prefect.md#prefect)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from evaltasks.cli._checks import (
    check_cron,
    check_deployment_name,
    check_output_dir,
    check_prefect_home,
    check_prefect_server,
    quiet_prefect_defaults,
    use_default_output_dir,
)
from evaltasks.cli._command import Invocation, add_command
from evaltasks.cli._exits import EXIT_INVALID, EXIT_PASSED, aborted, error
from evaltasks.cli._terminal import leave_price_warnings_to_the_run
from evaltasks.errors import InputError


def add_parser(sub: Any) -> None:
    """Add ``serve`` and its flags to the command parser ``sub``."""
    serve = add_command(
        sub,
        "serve",
        "serve the suite's flow as a scheduled Prefect deployment",
        "Register the suite's flow as a Prefect deployment on a cron schedule and run each scheduled "
        "run here, printing its verdict line, until Ctrl+C (needs PREFECT_API_URL).",
        "Prefect",
    )
    serve.add_argument("suite", help="the suite YAML file")
    serve.add_argument("--cron", default="0 6 * * *", help='cron schedule (default "0 6 * * *", UTC)')
    serve.add_argument("--name", default=None, help="deployment name (default: the suite name)")
    serve.add_argument(
        "--output-dir", default=None, help="where each run writes its reports (default ./eval-results/SUITE_NAME)"
    )
    serve.add_argument("--index-dir", default=None, help="reference index directory")


def command(args: argparse.Namespace, invocation: Invocation) -> int:
    """Validate the suite and flags, then serve the flow until interrupted.

    Exit 2 (one line, nothing served) for an unwritable Prefect home, an invalid suite, ``--output-dir``,
    ``--cron`` or deployment name (``--name``, default the suite's name), and when no Prefect server is
    configured or it cannot be reached; exit 3 (:func:`~evaltasks.cli._exits.aborted`) for anything else that
    fails; 0 on Ctrl+C.
    """
    problem = check_prefect_home()  # Prefect cannot start without a writable home
    if problem:
        error(problem)
        return EXIT_INVALID
    leave_price_warnings_to_the_run()
    try:
        name = _checked_name(args)
        if name is None:
            return EXIT_INVALID
        from evaltasks.flows.evaluate_suite import SERVED_VERDICT_ENV, evaluate_suite  # startup: Prefect

        os.environ[SERVED_VERDICT_ENV] = "1"  # each flow run prints its verdict line here
        parameters = {
            "suite_path": str(Path(args.suite).resolve()),
            "output_dir": str(Path(args.output_dir).resolve()),
            "index_dir": str(Path(args.index_dir).resolve()) if args.index_dir else None,
        }
        print(f"serving deployment 'evaluate-suite/{name}' on cron '{args.cron}' (Ctrl+C to stop)", flush=True)
        evaluate_suite.serve(name=name, cron=args.cron, parameters=parameters, print_starting_message=False)
    except InputError as exc:
        error(str(exc))
        return EXIT_INVALID
    except KeyboardInterrupt:
        return EXIT_PASSED
    except Exception:  # anything else aborts the command (exit 3, the traceback in a file)  # noqa: BLE001
        return aborted(args.output_dir)
    return EXIT_PASSED


def _checked_name(args: argparse.Namespace) -> str | None:
    """The deployment's name once the suite, ``--output-dir``, ``--cron``, the name and the Prefect server are
    checked (``args.output_dir`` set to the suite's default when not given); None after printing the problem.

    Raises:
        InputError: the suite is invalid.
    """
    from evaltasks.engine.run import plan_run  # startup: the engine loads pydantic and numpy

    plan = plan_run(args.suite)
    use_default_output_dir(args, plan.suite.suite.name)
    name = args.name or plan.suite.suite.name
    problem = check_output_dir(Path(args.output_dir))
    if not problem:
        quiet_prefect_defaults()
        flag = "--name" if args.name else "the suite name (the default --name)"
        problem = check_cron(args.cron) or check_deployment_name(name, flag) or check_prefect_server()
    if problem:
        error(problem)
        return None
    return name
