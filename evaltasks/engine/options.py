"""What a suite run is asked to do besides which suite: :class:`RunOptions`, declared once.

Each field carries its command-line flag and its help text (:func:`option`); ``evaltasks run``'s flags
(:func:`evaltasks.cli.run.add_run_options`) and the ``evaluate-suite`` flow's parameters and their descriptions
(:func:`flow_signature`, :func:`flow_parameter_docs`) are generated from these fields, so a new option is one
field here. Standard library only: the command line builds its parser from it before anything heavy is imported.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from evaltasks._version import docs_ref

DEFAULT_OUTPUT_ROOT = "eval-results"
DEFAULT_TOLERANCE = 0.01  # score and pass-rate drops up to this (absolute) are not regressions


@dataclass(frozen=True)
class OptionSpec:
    """How a :class:`RunOptions` field is set from the command line.

    Attributes:
        flag: the ``evaltasks run`` flag, e.g. ``--output-dir``.
        help: what the option does (the flag's ``--help`` line and the flow parameter's description).
        metavar: the flag's value in ``--help`` (default: argparse's, the field name in capitals).
        negated: a boolean field the flag sets to False (``--no-cache`` for ``cache``); else the flag sets it True.
    """

    flag: str
    help: str
    metavar: str | None = None
    negated: bool = False


def option(default: Any, *, flag: str, help: str, metavar: str | None = None, negated: bool = False) -> Any:
    """A :class:`RunOptions` field with ``default`` and its :class:`OptionSpec` (in the field's metadata)."""
    return field(default=default, metadata={"option": OptionSpec(flag, help, metavar, negated)})


_PATH_FIELDS = ("output_dir", "index_dir", "baseline", "history_dir")


@dataclass(frozen=True)
class RunOptions:
    """What a suite run is asked to do besides which suite: the ``evaluate-suite`` flow's other parameters and
    ``evaltasks run``'s flags of the same names (docs/cli.md#cli). One object from the CLI through the flow to the
    engine. Path options given as :class:`os.PathLike` are kept as strings (flow parameters are JSON)."""

    output_dir: str = option(
        DEFAULT_OUTPUT_ROOT,
        flag="--output-dir",
        help="where reports go (default ./eval-results/SUITE_NAME, the suite's name made path-safe)",
    )
    index_dir: str | None = option(
        None, flag="--index-dir", help="reference index directory (default $EVALTASKS_INDEX_DIR or .evaltasks/index)"
    )
    batch_size: int | None = option(
        None,
        flag="--batch-size",
        help="test cases per scoring task (default 5000, more for large datasets: at most 100 per metric)",
    )
    cache: bool = option(
        True,
        flag="--no-cache",
        negated=True,
        help="score everything: neither read nor write Prefect's task cache, and send every judge request again "
        "(embeddings still come from the index)",
    )
    reports_url: str | None = option(
        None,
        flag="--reports-url",
        metavar="URL",
        help="where the reports will be published (adds a Prefect link artifact)",
    )
    concurrency_limit: str | None = option(
        None,
        flag="--concurrency-limit",
        metavar="NAME",
        help="a Prefect global concurrency limit that embedding calls occupy (prefect gcl create)",
    )
    skip_missing_credentials: bool = option(
        False,
        flag="--skip-missing-credentials",
        help="skip metrics whose provider credentials are missing (left out of the gate, with a warning) instead "
        "of exiting 2: for pull requests from forks",
    )
    baseline: str | None = option(
        None,
        flag="--baseline",
        metavar="RESULTS_JSON",
        help="compare with an earlier run's results.json (e.g. the base branch's): deltas, changes and "
        "regressions in the reports",
    )
    regression_tolerance: float = option(
        DEFAULT_TOLERANCE,
        flag="--regression-tolerance",
        metavar="T",
        help=f"score or pass-rate drops up to T (absolute, default {DEFAULT_TOLERANCE:g}) are not regressions",
    )
    baseline_label: str | None = option(
        None,
        flag="--baseline-label",
        metavar="TEXT",
        help="how reports name the baseline (default: its path), e.g. 'main at 1a2b3c4'",
    )
    max_cost: float | None = option(
        None,
        flag="--max-cost",
        metavar="USD",
        help="refuse to start (exit 2) when the estimated provider cost (embeddings and judge requests) exceeds "
        "USD; judge requests stop once the spend reaches it (the rest skipped)",
    )
    history_dir: str | None = option(
        None,
        flag="--history-dir",
        metavar="DIR",
        help=f"record the run in this history directory and test it for drift ({docs_ref('Run history and drift')}; "
        "default: the suite's history.dir, else $EVALTASKS_HISTORY_DIR)",
    )

    target: bool = option(
        True,
        flag="--no-target",
        negated=True,
        help=f"grade the dataset's own actual_output instead of running the suite's target(s) ({docs_ref('Targets')})",
    )

    def __post_init__(self) -> None:
        for name in _PATH_FIELDS:
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                object.__setattr__(self, name, os.fspath(value))

    def flow_parameters(self) -> dict[str, Any]:
        """The options as the flow's keyword parameters: ``evaluate_suite(suite_path, **options.flow_parameters())``."""
        return dataclasses.asdict(self)


def option_fields() -> list[tuple[dataclasses.Field[Any], OptionSpec, Any]]:
    """Each :class:`RunOptions` field, in declaration order, with its :class:`OptionSpec` and its resolved type
    (e.g. ``int | None``)."""
    hints = typing.get_type_hints(RunOptions)
    return [(f, f.metadata["option"], hints[f.name]) for f in dataclasses.fields(RunOptions)]


def scalar_type(hint: Any) -> Any:
    """The type of an option's value without ``None``: ``int`` for ``int | None``, ``str`` for ``str``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (inner,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return inner
    return hint


def flow_signature(
    before: list[inspect.Parameter], after: list[inspect.Parameter], returns: Any = inspect.Signature.empty
) -> inspect.Signature:
    """A flow's signature: the parameters ``before``, one keyword parameter per :class:`RunOptions` field (its
    type and default), then ``after``. Prefect reads a flow's parameters (their schema, validation and binding)
    from this signature."""
    options = [
        inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=f.default, annotation=hint)
        for f, _, hint in option_fields()
    ]
    return inspect.Signature([*before, *options, *after], return_annotation=returns)


def flow_parameter_docs(indent: str = "        ") -> str:
    """The ``Args:`` lines of the :class:`RunOptions` parameters for a flow's docstring (Prefect shows them as the
    parameters' descriptions), each from the field's help text and naming its ``evaltasks run`` flag."""
    lines = []
    for f, spec, _ in option_fields():
        text = f"False (``{spec.flag}``): {spec.help}" if spec.negated else f"{spec.help} (``{spec.flag}``)"
        lines.append(f"{indent}{f.name}: {text}.")
    return "\n".join(lines)


_F = typing.TypeVar("_F", bound=typing.Callable[..., Any])
OPTIONS_PLACEHOLDER = "{run_options}"


def with_run_options(fn: _F) -> _F:
    """Declare ``fn``'s run options from :class:`RunOptions`: ``fn`` takes them as ``**options`` (e.g.
    ``def flow(suite_path: str, plan: X | None = None, **options: Any)``) and gets the signature
    :func:`flow_signature` (its parameters without a default, the options, then its parameters with a default),
    which Prefect reads for the flow's parameters; the line ``{run_options}`` of its docstring becomes the options'
    ``Args:`` lines (:func:`flow_parameter_docs`, indented as that line). Returns ``fn`` itself."""
    signature = inspect.signature(fn, eval_str=True)
    fixed = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    fn.__signature__ = flow_signature(  # type: ignore[attr-defined]
        [p for p in fixed if p.default is inspect.Parameter.empty],
        [p for p in fixed if p.default is not inspect.Parameter.empty],
        signature.return_annotation,
    )
    if fn.__doc__:
        lines = fn.__doc__.split("\n")
        fn.__doc__ = "\n".join(
            flow_parameter_docs(line[: len(line) - len(line.lstrip())]) if line.strip() == OPTIONS_PLACEHOLDER else line
            for line in lines
        )
    return fn
