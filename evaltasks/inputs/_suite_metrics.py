"""Building a suite's metrics from its ``metrics:`` entries: each entry's class found and constructed with its
arguments, the suite-wide defaults (embedding provider options, the ``judge:`` block) applied, and every
failure turned into a located :class:`~evaltasks.errors.Problem` (or, for missing credentials when skipping, a
:class:`~evaltasks.metrics.base.SkippedMetric`). Used by :func:`evaltasks.inputs.suite.load_suite`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from evaltasks.errors import CredentialsError, InputError, Problem, quote
from evaltasks.inputs._suite_judge import JudgeBlock
from evaltasks.metrics import BaseMetric, get_metric_class, is_builtin
from evaltasks.metrics.base import SkippedMetric
from evaltasks.metrics.judge.base import JudgeMetric


class MetricSpec(Protocol):
    """What building reads of one ``metrics:`` entry (:class:`evaltasks.inputs.suite.MetricSpec`, which this
    module does not import: the suite module imports this one)."""

    @property
    def metric(self) -> str: ...
    @property
    def name(self) -> str | None: ...
    @property
    def model_extra(self) -> dict[str, Any] | None: ...
    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> MetricSpec: ...


def judge_api_key_problem(options: Any) -> str | None:
    """The message when a suite file's judge options hold ``api_key`` (a secret committed with the suite),
    else None."""
    if isinstance(options, dict) and "api_key" in options:
        return (
            "api_key must not be written in a suite file: set OPENAI_API_KEY (Azure OpenAI: "
            "AZURE_OPENAI_API_KEY) in the environment instead"
        )
    return None


def build_metric(spec: MetricSpec, base_dir: Path | None = None) -> BaseMetric:
    """Construct the metric a :class:`MetricSpec` describes (``module:Class`` imported with ``base_dir``, the
    suite's directory, on ``sys.path``: :func:`~evaltasks.metrics.get_metric_class`). Raises KeyError (unknown
    or unimportable metric) or what its constructor raises (ValueError/TypeError for bad arguments)."""
    cls = get_metric_class(spec.metric, base_dir)
    kwargs = dict(spec.model_extra or {})
    if spec.name is not None:
        kwargs["name"] = spec.name
    return cls(**kwargs)


def _skipped_metric(spec: MetricSpec, reason: str) -> SkippedMetric:
    """The stand-in for a metric that cannot run: same name and threshold (its class default if unset)."""
    import inspect

    threshold = (spec.model_extra or {}).get("threshold")
    if threshold is None:
        parameter = inspect.signature(get_metric_class(spec.metric)).parameters.get("threshold")
        threshold = parameter.default if parameter is not None and parameter.default is not inspect._empty else 0.0
    skipped = SkippedMetric(spec.name or spec.metric, float(threshold), f"skipped: {reason}")
    # the cases it stands in for are the metric's: a conversation metric's stand-in still refuses single-turn cases
    vars(skipped)["case_kind"] = getattr(get_metric_class(spec.metric), "case_kind", "single")
    return skipped


@dataclass
class _Build:
    """What building a suite's metrics shares across entries: where problems go and the suite-wide defaults
    (see :func:`_build_metrics` for each field's meaning)."""

    source: str
    problems: list[Problem]
    provider_defaults: Mapping[Any, dict[str, Any]]
    reference_sets: dict[str, Any]
    base_dir: Path
    skipped: list[str] | None
    judge_defaults: JudgeBlock | None
    credentials: list[str] | None


def _build_metrics(
    source: str,
    specs: Sequence[tuple[int, MetricSpec]],
    problems: list[Problem],
    provider_defaults: Mapping[Any, dict[str, Any]],
    reference_sets: dict[str, Any] | None = None,
    base_dir: Path = Path("."),
    skipped: list[str] | None = None,
    judge_defaults: JudgeBlock | None = None,
    credentials: list[str] | None = None,
) -> list[BaseMetric]:
    """Construct the metric of every well-formed entry (``specs``: its index in ``metrics:`` and its spec),
    adding a located problem for each one that fails.

    When ``skipped`` is a list, a metric whose credentials are missing becomes a :class:`SkippedMetric` and a
    warning is appended to ``skipped`` instead of a problem. Judge metrics get ``judge_defaults`` (the suite's
    ``judge:`` block) under their own ``model``, ``samples`` and ``judge_options``, and their ``prompts`` files
    resolved against ``base_dir``. A judge's missing API key is not a problem of the suite file: its message
    goes to ``credentials`` (once) when that is a list; a bad option that comes from the ``judge:`` block is
    located there (``judge``, field: the option), once.
    """
    build = _Build(
        source, problems, provider_defaults, reference_sets or {}, base_dir, skipped, judge_defaults, credentials
    )
    metrics: list[BaseMetric] = []
    names: dict[str, int] = {}
    for i, spec in specs:
        where = f"metrics[{i}]"
        metric = _entry_metric(build, where, spec)
        if metric is None:
            continue
        if not isinstance(getattr(metric, "name", None), str) or not isinstance(
            getattr(metric, "threshold", None), float
        ):
            problems.append(
                Problem(
                    source,
                    where,
                    "metric",
                    f"{spec.metric}() did not set its name and threshold: does "
                    "its __init__ call super().__init__(threshold, name=name)?",
                )
            )
            continue
        if metric.name in names:
            problems.append(
                Problem(
                    source,
                    where,
                    "name",
                    f"'{metric.name}' is already used by metrics[{names[metric.name]}]; give one a `name:`",
                )
            )
        names.setdefault(metric.name, i)
        metrics.append(metric)
    return metrics


def _entry_metric(build: _Build, where: str, spec: MetricSpec) -> BaseMetric | None:
    """The metric one well-formed entry (``where``: ``metrics[i]``) describes, or None after adding its
    problem: its paths and reference set resolved, its class found, a judge's entry checked, then built."""
    resolved = _resolved_spec(build, where, spec)
    if resolved is None:
        return None
    spec = resolved
    try:
        cls = get_metric_class(spec.metric, build.base_dir)
    except KeyError as exc:
        build.problems.append(Problem(build.source, where, "metric", str(exc.args[0])))
        return None
    judged = issubclass(cls, JudgeMetric)
    if judged:
        judge_problem = _prepare_judge_spec(spec, build.base_dir)
        if judge_problem is not None:
            build.problems.append(Problem(build.source, where, *judge_problem))
            return None
    return _constructed(build, where, spec, cls, judged)


def _resolved_spec(build: _Build, where: str, spec: MetricSpec) -> MetricSpec | None:
    """``spec`` with a local ``model_name`` path made absolute (against the suite's directory) and its
    ``reference_set`` name replaced by the loaded set; None after adding a problem for an unknown set."""
    base_dir, reference_sets = build.base_dir, build.reference_sets
    model_name = (spec.model_extra or {}).get("model_name")
    if (isinstance(model_name, str) and model_name.startswith((".", "~"))) or (
        isinstance(model_name, str) and (base_dir / model_name).exists()
    ):
        spec.model_extra["model_name"] = str((base_dir / Path(model_name).expanduser()).resolve())  # type: ignore[index]
    set_name = (spec.model_extra or {}).get("reference_set")
    if set_name is not None:
        if not isinstance(set_name, str) or set_name not in reference_sets:
            close = difflib.get_close_matches(str(set_name), list(reference_sets), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            build.problems.append(
                Problem(build.source, where, "reference_set", f"unknown reference set {quote(set_name)}{hint}")
            )
            return None
        spec = spec.model_copy(update={})
        spec.model_extra["reference_set"] = reference_sets[set_name]  # type: ignore[index]
    return spec


def _construct(build: _Build, spec: MetricSpec, judged: bool) -> BaseMetric:
    """Build the metric, give it the suite's provider (and judge) defaults and resolve its provider, so that
    missing credentials and bad options raise here (CredentialsError, ValueError, TypeError, ...)."""
    metric = build_metric(spec, build.base_dir)
    if hasattr(metric, "provider_options"):
        defaults = build.provider_defaults.get(getattr(metric, "embedding_provider", ""), {})
        metric.provider_options = {**defaults, **metric.provider_options}
    getattr(metric, "provider", None)  # resolves the embedding provider: missing credentials show here
    if judged:
        _apply_judge_defaults(metric, spec, build.judge_defaults)  # type: ignore[arg-type]
    return metric


def _constructed(build: _Build, where: str, spec: MetricSpec, cls: type[BaseMetric], judged: bool) -> BaseMetric | None:
    """The built metric (a :class:`SkippedMetric` for missing credentials when skipping), or None after adding
    the located problem its construction raised. A built-in metric's unexpected exception propagates."""
    source, problems = build.source, build.problems
    try:
        return _construct(build, spec, judged)
    except TypeError as exc:
        unknown = [k for k in (spec.model_extra or {}) if k not in _parameters(spec)]
        missing = re.search(r"missing \d+ required (?:keyword-only |positional )?arguments?: '(\w+)'", str(exc))
        field = unknown[0] if unknown else missing.group(1) if missing else ""
        alone = not unknown and missing is not None and "missing 1 required" in str(exc)
        problems.append(Problem(source, where, field, "is required" if alone else _unknown_argument(spec, exc)))
        return None
    except CredentialsError as exc:
        return _without_credentials(build, where, spec, judged, exc)
    except ValueError as exc:
        _value_problem(build, where, spec, judged, exc)
        return None
    except (Exception, SystemExit) as exc:
        if is_builtin(cls):
            raise
        message = f"constructing {spec.metric} failed: {type(exc).__name__}: {exc}"
        problems.append(Problem(source, where, "", message))
        return None


def _without_credentials(
    build: _Build, where: str, spec: MetricSpec, judged: bool, exc: CredentialsError
) -> BaseMetric | None:
    """A metric whose credentials are missing: a judge's message goes to ``credentials`` (once), else a located
    problem (None), or, when skipping, a :class:`SkippedMetric` and a warning in ``skipped``."""
    message = "; ".join(p.message for p in exc.problems)
    if build.skipped is None and judged and build.credentials is not None:
        if message not in build.credentials:
            build.credentials.append(message)
        return None
    if build.skipped is None:
        build.problems.append(
            Problem(build.source, where, "judge_options" if judged else "embedding_provider", message)
        )
        return None
    metric = _skipped_metric(spec, message)
    build.skipped.append(f"{where} {metric.name} is skipped (excluded from the gate): {message}")
    return metric


def _value_problem(build: _Build, where: str, spec: MetricSpec, judged: bool, exc: ValueError) -> None:
    """Add the problem a metric's ValueError describes, located at the argument it names (a judge's bad option
    that comes from the suite's ``judge:`` block is located there, once)."""
    source, problems, judge_defaults = build.source, build.problems, build.judge_defaults
    field = _argument_named(spec, str(exc)) or ("judge_options" if judged else "")
    message = "; ".join(p.message for p in exc.problems) if isinstance(exc, InputError) else str(exc)
    option = _judge_option_named(message) if judged and judge_defaults is not None else None
    if (
        option is not None
        and judge_defaults is not None
        and option in judge_defaults.options()
        and option not in ((spec.model_extra or {}).get("judge_options") or {})
    ):
        block = Problem(source, "judge", option, message)  # the suite's judge: block's option
        if block not in problems:
            problems.append(block)
        return
    if field and message.startswith(field):  # the problem names the field: "field 'unit' must be …"
        message = message[len(field) :].lstrip(":").lstrip()
    problems.append(Problem(source, where, field, message))


_JUDGE_OPTION_MESSAGE = re.compile(
    r"^(?:unknown judge option\(s\) '([^']+)'|judge option (\w+) |(prices|price_per_million_\w+)\b)"
)


def _judge_option_named(message: str) -> str | None:
    """The judge client option a client's ValueError is about (its messages name it first), else None."""
    found = _JUDGE_OPTION_MESSAGE.match(message)
    return next((g for g in found.groups() if g), None) if found else None


def _prepare_judge_spec(spec: MetricSpec, base_dir: Path) -> tuple[str, str] | None:
    """Check a judge metric's entry before construction and resolve its ``prompts`` files against
    ``base_dir`` (the suite's directory), in place. Returns ``(field, message)`` for the first problem: an
    ``api_key`` in ``judge_options``, or a prompt file that does not exist."""
    extra = spec.model_extra or {}
    problem = judge_api_key_problem(extra.get("judge_options"))
    if problem:
        return "judge_options", problem
    prompts = extra.get("prompts")
    if isinstance(prompts, dict):
        resolved = {}
        for name, file in prompts.items():
            if not isinstance(file, str) or not file:
                return "prompts", f"{name}: must be a path to a template file, got {quote(file)}"
            path = (base_dir / Path(file).expanduser()).resolve()
            if not path.is_file():
                return "prompts", f"{name}: prompt file not found: '{file}' (resolved to {path})"
            resolved[name] = str(path)
        extra["prompts"] = resolved
    return None


def _apply_judge_defaults(metric: JudgeMetric, spec: MetricSpec, defaults: JudgeBlock | None) -> None:
    """Give ``metric`` the suite's ``judge:`` block where its entry does not set ``model`` / ``samples``, and
    the block's client options under its own ``judge_options``; then check its judge's credentials (no
    network: the client is only constructed).

    Raises:
        CredentialsError: the judge needs an API key that is not set.
        ValueError: invalid judge options.
    """
    extra = spec.model_extra or {}
    if defaults is not None:
        if "model" not in extra and defaults.model is not None:
            metric.model = defaults.model
        if "samples" not in extra and defaults.samples is not None:
            metric.samples = defaults.samples
        metric.judge_options = {**defaults.options(), **metric.judge_options}
    metric.judge()  # constructs the client (shared per process): a missing key raises here


def _argument_named(spec: MetricSpec, message: str) -> str:
    """The suite argument a metric's ValueError is about (its message starts with the name), else ``""``."""
    for key in spec.model_extra or {}:
        if message.startswith(f"{key} ") or message.startswith(f"{key}:"):
            return key
    return ""


def _parameters(spec: MetricSpec) -> list[str]:
    """The constructor arguments of the metric class ``spec`` names."""
    import inspect

    return [p for p in inspect.signature(get_metric_class(spec.metric).__init__).parameters if p != "self"]


def _unknown_argument(spec: MetricSpec, exc: TypeError) -> str:
    params = _parameters(spec)
    unknown = [k for k in (spec.model_extra or {}) if k not in params]
    if unknown:
        close = difflib.get_close_matches(unknown[0], params, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown argument '{unknown[0]}' for {spec.metric}{hint}; accepted: {', '.join(params)}"
    return str(exc)
