"""``evaltasks calibrate SUITE --labels COLUMN``: suggest each metric's threshold from human pass/fail labels
(:mod:`evaltasks.engine.calibration`; docs/calibration.md#threshold-calibration)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from evaltasks.cli._command import Invocation, add_command
from evaltasks.cli._exits import EXIT_INVALID, EXIT_PASSED, EXIT_SIGINT, aborted, error
from evaltasks.cli._terminal import with_stage_progress
from evaltasks.errors import InputError


def add_parser(sub: Any) -> None:
    """Add ``calibrate`` and its flags to the command parser ``sub``."""
    calibrate = add_command(
        sub,
        "calibrate",
        "find each metric's threshold that agrees best with human pass/fail labels (the suite file is not edited)",
        None,
        "Threshold calibration",
    )
    calibrate.add_argument("suite", help="the suite YAML file")
    calibrate.add_argument(
        "--labels",
        required=True,
        metavar="COLUMN",
        help="the dataset column of labels: pass/fail, passed/failed, true/false, yes/no, 1/0",
    )
    calibrate.add_argument("--json", action="store_true", help="print the result as JSON")
    calibrate.add_argument(
        "--index-dir", default=None, help="reference index directory (default $EVALTASKS_INDEX_DIR or .evaltasks/index)"
    )


def command(args: argparse.Namespace, invocation: Invocation) -> int:
    """Score the suite's dataset through the Python API (no Prefect) and print each metric's calibrated
    thresholds.

    Exit 0 with the report; 2 (no traceback) for an invalid suite, dataset, label column or label; 130 on
    Ctrl+C (one line); 3 (:func:`~evaltasks.cli._exits.aborted`) for anything else.
    """
    try:
        from evaltasks.engine.calibration import calibrate_suite, format_report  # startup: numpy and the metrics

        report = with_stage_progress(lambda: calibrate_suite(args.suite, args.labels, index_dir=args.index_dir))
        print(report.model_dump_json(indent=2) if args.json else format_report(report), flush=True)
    except InputError as exc:
        error(str(exc))
        return EXIT_INVALID
    except BrokenPipeError:  # `evaltasks calibrate ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except KeyboardInterrupt:  # Ctrl+C: nothing was written, one line
        error("calibrate interrupted by SIGINT: nothing written")
        return EXIT_SIGINT
    except Exception:  # anything else aborts the command (exit 3, the traceback in a file)  # noqa: BLE001
        return aborted(".")
    return EXIT_PASSED
