"""The run options are declared once, as :class:`~evaltasks.engine.options.RunOptions`' fields: ``evaltasks run``'s
flags and the ``evaluate-suite`` flow's parameters (with their descriptions) are generated from it.

Checked on the real parser of the command (argparse), the real flow (its Prefect parameter schema, a real flow run
on the session's Prefect server) and a flow run of a probe flow declared the same way, whose return value is the
RunOptions object the function received.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from prefect import flow

from evaltasks.cli._main import parser
from evaltasks.cli.run import run_options
from evaltasks.engine.options import RunOptions, option_fields, with_run_options
from tests.suite_helpers import length_suite

COMMAND_FLAGS = {"--quiet", "--task-runner", "--no-server"}  # the command's own flags, not run options


def _run_parser() -> argparse.ArgumentParser:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    run: argparse.ArgumentParser = sub.choices["run"]
    return run


def _words(text: str) -> str:
    return " ".join(text.split())


def _every_option_given(suite: Path, out: Path, baseline: Path, history: Path) -> list[str]:
    """A command line that sets every run option to a value other than its default."""
    return [
        "run",
        str(suite),
        "--output-dir",
        str(out),
        "--index-dir",
        str(out.parent / "idx"),
        "--batch-size",
        "2",
        "--no-cache",
        "--reports-url",
        "https://reports.example/run",
        "--concurrency-limit",
        "evaltasks-probe",
        "--skip-missing-credentials",
        "--baseline",
        str(baseline),
        "--regression-tolerance",
        "0.05",
        "--baseline-label",
        "main at 1a2b3c4",
        "--max-cost",
        "1.5",
        "--history-dir",
        str(history),
        "--no-target",
    ]


def test_every_option_has_exactly_one_flag_and_one_flow_parameter() -> None:
    from evaltasks.flows.evaluate_suite import evaluate_suite

    fields = [f.name for f, _, _ in option_fields()]
    assert len(fields) == 13 and len(set(fields)) == 13
    actions = [a for a in _run_parser()._actions if a.option_strings and a.dest != "help"]
    for field, spec, _ in option_fields():
        matching = [a for a in actions if a.dest == field.name]
        assert [a.option_strings for a in matching] == [[spec.flag]], field.name
    assert {flag for a in actions for flag in a.option_strings} == {
        s.flag for _, s, _ in option_fields()
    } | COMMAND_FLAGS
    properties = evaluate_suite.parameters.properties
    assert list(properties) == ["suite_path", *fields, "plan"]  # each once, in the declaration's order
    assert evaluate_suite.parameters.required == ["suite_path"]
    for field, _, _ in option_fields():
        assert properties[field.name]["default"] == field.default, field.name
    signature = inspect.signature(evaluate_suite.fn)
    assert [p.default for p in signature.parameters.values()][1:-1] == [f.default for f, _, _ in option_fields()]


def test_help_texts_come_from_the_declaration() -> None:
    from evaltasks.flows.evaluate_suite import evaluate_suite

    run = _run_parser()
    help_text = _words(run.format_help())
    properties = evaluate_suite.parameters.properties
    docstring = _words(inspect.getdoc(evaluate_suite.fn) or "")
    for field, spec, _ in option_fields():
        (action,) = [a for a in run._actions if a.dest == field.name]
        assert action.help == spec.help and action.metavar == spec.metavar
        assert _words(spec.help) in help_text
        described = f"False (``{spec.flag}``): {spec.help}." if spec.negated else f"{spec.help} (``{spec.flag}``)."
        assert properties[field.name]["description"] == described
        assert f"{field.name}: {_words(described)}" in docstring
    assert "{run_options}" not in docstring
    assert "--regression-tolerance T score or pass-rate drops up to T (absolute, default 0.01)" in help_text
    assert "{docs_ref" not in help_text  # the history flag's pointer to the docs is the docs' section, resolved


def test_no_flag_given_is_the_declarations_defaults() -> None:
    args = _run_parser().parse_args(["suite.yaml"])
    assert run_options(args) == RunOptions()
    assert RunOptions().flow_parameters() == {f.name: f.default for f, _, _ in option_fields()}


@flow(name="run-options-probe")
@with_run_options
def _probe(suite_path: str, plan: str | None = None, **options: Any) -> RunOptions:
    """A flow declared as evaluate-suite is: its run options from RunOptions.

    Args:
        suite_path: the suite.
        {run_options}
        plan: unused.
    """
    return RunOptions(**options)


def test_a_parsed_command_line_reaches_a_flow_run_as_the_same_options(prefect_harness, tmp_path: Path) -> None:
    """Every option given on the command line: parsed by the real parser, passed as flow parameters as
    ``evaltasks run`` passes them, validated and bound by Prefect; the function receives the same RunOptions, also
    from the parameters' JSON (as a deployment or a retried flow run passes them)."""
    args = _run_parser().parse_args(
        _every_option_given(tmp_path / "s.yaml", tmp_path / "out", tmp_path / "b.json", tmp_path / "h")[1:]
    )
    options = run_options(args)
    assert all(getattr(options, f.name) != f.default for f, _, _ in option_fields())  # every option set
    assert (options.batch_size, options.cache, options.max_cost, options.target) == (2, False, 1.5, False)
    received = _probe(suite_path="s.yaml", **options.flow_parameters())
    assert received == options
    as_json = json.loads(json.dumps(options.flow_parameters()))
    assert _probe(suite_path="s.yaml", **as_json, plan="x") == options
    assert _probe("s.yaml", str(tmp_path / "out")).output_dir == str(tmp_path / "out")  # positional, as before
    with pytest.raises(Exception, match="batch_size"):
        _probe(suite_path="s.yaml", batch_size="many")  # Prefect validates each option against its type


def test_the_evaluate_suite_flow_run_records_and_applies_the_parsed_options(prefect_harness, tmp_path: Path) -> None:
    """A real evaluate-suite flow run from a parsed command line with every option: the parameters Prefect recorded
    are the RunOptions parsed, and the run applied them (reports in --output-dir, the run in --history-dir, the
    baseline named by --baseline-label and compared with --regression-tolerance)."""
    from prefect.client.orchestration import get_client

    from evaltasks.engine.history import HistoryStore
    from evaltasks.flows.evaluate_suite import evaluate_suite

    base = evaluate_suite(
        suite_path=str(length_suite(tmp_path / "b", [3, 9], name="options")),
        output_dir=str(tmp_path / "base"),
        index_dir=str(tmp_path / "idx"),
    )
    suite = length_suite(tmp_path / "s", [3, 3], name="options")
    args = _run_parser().parse_args(
        _every_option_given(suite, tmp_path / "out", Path(base["results_path"]), tmp_path / "h")[1:]
    )
    options = run_options(args)
    state = evaluate_suite(suite_path=args.suite, **options.flow_parameters(), return_state=True)
    assert state.is_completed(), state

    async def recorded() -> dict[str, Any]:
        async with get_client() as client:
            return dict((await client.read_flow_run(state.state_details.flow_run_id)).parameters)

    parameters = asyncio.run(recorded())
    assert parameters.pop("suite_path") == str(suite) and parameters.pop("plan") is None
    assert RunOptions(**parameters) == options
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert results["comparison"]["baseline"] == "main at 1a2b3c4"
    assert results["comparison"]["tolerance"] == 0.05
    records = HistoryStore(tmp_path / "h").read("options")
    assert [record.model_dump()["passed"] for record in records] == [True]  # the run, recorded in --history-dir
