"""The suite file: a validated YAML description of one evaluation (dataset, metrics, gate).

Example (paths are relative to the suite file)::

    name: truthfulqa-davinci
    dataset:
      path: answers.csv            # .csv, .jsonl, .json, .yaml/.yml; format from the extension
      fields: {input: question, actual_output: model_answer, references: correct_answers}
      list_separator: ";"
    metrics:
      - metric: ReferenceMatchMetric   # built-in name, entry-point name or module:Class; other keys: its arguments
        threshold: 0.7
        embedding_provider: local
    gate:
      min_pass_rate: 0.9           # fraction of cases that must pass every metric; default 1.0

The same pydantic model validates suites and produces the JSON Schema shipped for editors
(``evaltasks/schema/suite.schema.json``, also printed by ``evaltasks schema``).
"""

from __future__ import annotations

import difflib
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evaltasks.errors import ConfigError, CredentialsError, InputError, Problem, quote
from evaltasks.inputs._suite_judge import JudgeBlock, checked_judge_block
from evaltasks.inputs._suite_metrics import _build_metrics, judge_api_key_problem
from evaltasks.inputs._suite_schema import JUDGE_OPTIONS_SCHEMA as JUDGE_OPTIONS_SCHEMA  # here before 1.1
from evaltasks.inputs._suite_schema import (
    OPENAI_OPTIONS_SCHEMA,
    metric_spec_schema,
    plain_descriptions,
)
from evaltasks.inputs._suite_schema import SUITE_ARGUMENT_SCHEMAS as SUITE_ARGUMENT_SCHEMAS
from evaltasks.inputs._suite_schema import metric_arguments_schema as metric_arguments_schema
from evaltasks.inputs._suite_schema import plain_description as plain_description
from evaltasks.inputs._suite_targets import ChatSpec, HttpSpec, TargetSpec, build_targets, target_specs
from evaltasks.inputs.files import decode_text, load_yaml
from evaltasks.metrics import BaseMetric
from evaltasks.metrics.reliability._perturbations import PerturbationSpec
from evaltasks.targets.base import Target

DATASET_FORMATS = (".csv", ".jsonl", ".json", ".yaml", ".yml")


class FieldMap(BaseModel):
    """Which dataset column (CSV) or key (JSON, JSONL, YAML) fills each test-case field.

    ``actual_output`` defaults to the column ``actual_output``; each optional field defaults to the column of
    the same name when the dataset has one.
    """

    model_config = ConfigDict(extra="forbid")

    actual_output: str = "actual_output"
    input: str | None = None
    expected_output: str | None = None
    references: str | None = None
    context: str | None = None
    retrieval_context: str | None = None
    tools_called: str | None = None
    expected_tools: str | None = None
    planning_steps: str | None = None
    execution_trace: str | None = Field(
        default=None, description="Column with the agent's steps: a JSON list (in CSV a cell holding one)."
    )
    tool_calls: str | None = Field(default=None, description="Column with the calls made: [{name, arguments}].")
    expected_tool_calls: str | None = Field(default=None, description="Column with the calls expected.")
    multi_outputs: str | None = Field(default=None, description="Several outputs of one input (OutcomeConsistency).")
    agent_confidence: str | None = Field(default=None, description="The system's confidence, 0-1 (CalibrationMetric).")
    id: str | None = Field(default=None, description="Column with the case id; default: hash of the input.")
    turns: str | None = Field(
        default=None,
        description="Key of a conversation row's list of turns (default: turns); each turn's keys are mapped "
        "as the fields above. JSONL, JSON or YAML only (docs/conversations.md#conversation-datasets).",
    )
    chatbot_role: str | None = Field(
        default=None, description="Key of a conversation row's chatbot_role (default: chatbot_role)."
    )


class DatasetSpec(BaseModel):
    """Where the test cases come from."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Dataset file, relative to the suite file (.csv, .jsonl, .json, .yaml, .yml).")
    fields: FieldMap = Field(default_factory=FieldMap)
    list_separator: str | None = Field(
        default=None,
        description="Splits list fields given as strings; items stripped, empties dropped. "
        "Without it a CSV list cell must hold a JSON array.",
    )
    cluster: str | None = Field(
        default=None,
        min_length=1,
        description="A column grouping cases that are not independent (e.g. answers about one passage): "
        "intervals and paired comparisons then resample whole groups (cluster bootstrap).",
    )

    # Field validators (not a model validator), so that errors are located at dataset.path / .list_separator.
    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        if "\0" in value:  # the OS refuses it (Python raises a bare ValueError when opening it)
            raise ValueError("must not contain a NUL character")
        if Path(value).suffix.lower() not in DATASET_FORMATS:
            raise ValueError(f"must end in one of {', '.join(DATASET_FORMATS)}: '{value}'")
        return value

    @model_validator(mode="after")
    def _conversations_not_csv(self) -> DatasetSpec:
        if self.fields.turns is not None and Path(self.path).suffix.lower() == ".csv":
            raise ValueError(
                "dataset.fields.turns: a conversation dataset must be JSONL, JSON or YAML: a CSV cell cannot hold "
                "a list of turns (docs/conversations.md#conversation-datasets)"
            )
        return self

    @field_validator("list_separator")
    @classmethod
    def _check_separator(cls, value: str | None) -> str | None:
        if value == "":
            raise ValueError("must not be empty")
        return value


class MetricSpec(BaseModel):
    """One metric: its registered class name, an optional result name, and constructor arguments."""

    model_config = ConfigDict(extra="allow", json_schema_extra=lambda schema: metric_spec_schema(schema))

    metric: str = Field(
        description="A built-in metric's class name, an installed entry point's name (group "
        "evaltasks.metrics), or your own class as module.path:Class."
    )
    name: str | None = Field(default=None, description="Name in results; default: the class name.")


class Gate(BaseModel):
    """When a run passes."""

    model_config = ConfigDict(extra="forbid")

    min_pass_rate: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="Fraction of evaluated cases that must pass (skipped cases are not evaluated).",
    )
    allow_errors: bool = Field(
        default=False,
        description="Leave errored cases (a provider still failing after retries) out of the gate instead of "
        "counting them as failures.",
    )
    fail_on: Literal["min_pass_rate", "regression", "either"] = Field(
        default="min_pass_rate",
        description="What fails the run: min_pass_rate (the pass rate is below min_pass_rate), regression (a "
        "statistically significant regression against the baseline, larger than min_effect; min_pass_rate is "
        "only reported), or either.",
    )
    alpha: float = Field(
        default=0.05,
        gt=0.0,
        lt=1.0,
        description="Significance level of the comparison with a baseline (exact McNemar test for pass rates, "
        "paired bootstrap for mean scores); intervals of changes are at level 1 - alpha.",
    )
    min_effect: float = Field(
        default=0.01,
        ge=0.0,
        le=1.0,
        description="The smallest change (pass-rate fraction or score units) that counts as a regression or an "
        "improvement; a comparison too small to detect it is inconclusive.",
    )

    @field_validator("min_pass_rate", "alpha", "min_effect", mode="before")
    @classmethod
    def _a_number(cls, value: Any) -> Any:
        if isinstance(value, bool):  # YAML's true/false would otherwise read as 1.0/0.0
            raise ValueError(f"must be a number, got {quote(value)}")
        return value


class HistorySpec(BaseModel):
    """Where runs of the suite are recorded, and how drift is detected (docs/history.md#run-history-and-drift)."""

    model_config = ConfigDict(extra="forbid")

    dir: str | None = Field(
        default=None,
        min_length=1,
        description="The history directory, relative to the suite file; default $EVALTASKS_HISTORY_DIR or "
        ".evaltasks/history.",
    )
    window: int = Field(
        default=5,
        ge=1,
        description="How many previous runs are pooled when testing a run for drift.",
    )
    drift: bool = Field(
        default=True,
        description="Test each run against the pooled previous runs and emit a Prefect event "
        "(evaltasks.suite.regressed) when it is significantly worse.",
    )


class Suite(BaseModel):
    """A whole suite file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Suite name, used in reports and artifact keys.")
    description: str | None = None
    dataset: DatasetSpec = Field(
        description="The dataset: {path, fields, list_separator, cluster}, or just its path (`dataset: cases.jsonl`)."
    )
    metrics: list[MetricSpec] = Field(min_length=1)
    gate: Gate = Field(default_factory=Gate)
    history: HistorySpec | None = Field(
        default=None,
        description="Record each run in a history store and test it for drift against the previous runs; "
        "without this block runs are recorded only with --history-dir or $EVALTASKS_HISTORY_DIR.",
    )
    reference_sets: dict[str, list[str] | str | dict[str, Any]] = Field(
        default_factory=dict,
        description="Named reference sets: a path (.txt one per line; .csv/.jsonl/.json/.yaml with `column`), "
        "a list of strings, or {path, column, search: auto|flat|hnsw|ivf, hnsw_m, ef_construction, ef_search, "
        "search_auto_above, nlist, nprobe, ivf_sq8: true|false, ivf_pq, ivf_rerank, ivf_quantizer: flat|hnsw, "
        "target_recall}. "
        "A ReferenceMatchMetric uses one with `reference_set: NAME`.",
    )
    embeddings: dict[Literal["local", "openai"], dict[str, Any]] = Field(
        default_factory=dict,
        description="Default provider options per embedding provider, e.g. {openai: {base_url: ..., "
        "dimensions: 512, max_inputs_per_request: 16}, local: {device: cpu, batch_size: 64}}; a metric's "
        "provider_options override them.",
        json_schema_extra={
            "properties": {
                "openai": {
                    "type": "object",
                    "additionalProperties": True,
                    "properties": OPENAI_OPTIONS_SCHEMA,
                }
            }
        },
    )
    judge: JudgeBlock = Field(
        default_factory=JudgeBlock,
        description="Defaults for every judge metric: model, samples and the judge client's options (base_url, "
        "temperature, max_concurrency, prices, ...); a metric's own model, samples and judge_options override "
        "them. No api_key: it comes from the environment.",
    )
    target: TargetSpec | None = Field(
        default=None,
        description="The system under test, run on each case to generate the output the metrics score: one of "
        "python (module.path:function), chat ({model, prompt, ...}) or http ({url, body, output, ...}), with name, "
        "version, cache, repeat, timeout, max_attempts, max_concurrency (docs/targets.md#targets).",
    )
    targets: list[TargetSpec] | None = Field(
        default=None,
        description="Several targets side by side, each as in `target`; the first is the reference.",
        json_schema_extra={"minItems": 1},
    )
    perturbations: PerturbationSpec | None = Field(
        default=None,
        description="Perturbed variants of each input (typos, casing, spacing, punctuation), run through the "
        "target for PromptRobustnessMetric (docs/metrics/reliability.md#perturbations).",
    )

    @field_validator("dataset", mode="before")
    @classmethod
    def _dataset_path(cls, value: Any) -> Any:
        if isinstance(value, str):  # `dataset: cases.jsonl` is the path alone
            return {"path": value}
        if not isinstance(value, dict):
            raise ValueError(f"must be the dataset's path or a mapping with path and fields, got {quote(value)}")
        return value

    @field_validator("targets", mode="before")
    @classmethod
    def _some_targets(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError(
                "must list at least one target; leave `targets:` out to grade the dataset's own actual_output"
            )
        return value

    @model_validator(mode="after")
    def _one_target_block(self) -> Suite:
        if self.target is not None and self.targets is not None:
            raise ValueError("give either target (one) or targets (several), not both")
        return self

    @field_validator("history", mode="before")
    @classmethod
    def _history_block(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"must be a mapping with dir, window and drift (or left out), got {quote(value)}")
        return value

    @field_validator("judge")
    @classmethod
    def _no_api_key(cls, value: JudgeBlock) -> JudgeBlock:
        problem = judge_api_key_problem(value.model_extra)
        if problem:
            raise ValueError(problem)
        return value


@dataclass
class LoadedSuite:
    """A validated suite: the model, its metric instances, and where it lives.

    Attributes:
        suite: the validated :class:`Suite`.
        metrics: constructed metric instances, in suite order.
        path: the suite file (resolved).
        sha256: sha256 of the suite file's bytes.
        warnings: what the run should tell its user: metrics skipped for missing credentials, data files whose
            resolved path leaves the suite's directory.
    """

    suite: Suite
    metrics: list[BaseMetric]
    path: Path
    sha256: str
    warnings: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    run_metrics: list[BaseMetric] = field(default_factory=list)
    """The suite's run-level metrics (CalibrationMetric: they score the run, not a case; left out of ``metrics``;
    docs/metrics/reliability.md#calibrationmetric), in suite order."""
    targets: list[Target] = field(default_factory=list)
    """The suite's targets (:class:`~evaltasks.targets.base.Target`), in order (the first is the reference); empty
    when the suite has none and grades the dataset's own outputs."""

    @property
    def dataset_path(self) -> Path:
        """The dataset path resolved relative to the suite file (``..`` and symlinks resolved)."""
        return (self.path.parent / self.suite.dataset.path).resolve()

    def input_files(self) -> list[Path]:
        """Every file the suite was loaded from: the suite file (first), the dataset, reference-set files
        (resolved)."""
        files = [self.path]
        for _, name in _data_files(self.suite):
            try:
                files.append((self.path.parent / name).resolve())
            except (OSError, RuntimeError, ValueError):  # a symlink loop: left to the loader, which reports it
                files.append(self.path.parent / name)
        return files


def suite_json_schema() -> dict[str, Any]:
    """The JSON Schema of the suite format (draft 2020-12), generated from :class:`Suite`; descriptions (taken
    from docstrings) are rendered as plain text (:func:`plain_description`)."""
    schema = Suite.model_json_schema()
    dataset = schema["properties"]["dataset"]
    description = dataset.pop("description")
    schema["properties"]["dataset"] = {"description": description, "anyOf": [dataset, {"type": "string"}]}
    plain_descriptions(schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "evaltasks suite"
    return schema


def _loc(parts: tuple[Any, ...]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _known_keys(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def _model_for(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    mapping: dict[tuple[str, ...], type[BaseModel]] = {
        (): Suite,
        ("dataset",): DatasetSpec,
        ("dataset", "fields"): FieldMap,
        ("gate",): Gate,
        ("history",): HistorySpec,
        ("target",): TargetSpec,
        ("targets",): TargetSpec,
        ("target", "chat"): ChatSpec,
        ("targets", "chat"): ChatSpec,
        ("target", "http"): HttpSpec,
        ("targets", "http"): HttpSpec,
        ("perturbations",): PerturbationSpec,
    }
    return mapping.get(tuple(p for p in loc if not isinstance(p, int)))


def _problems_from_validation(source: str, exc: ValidationError) -> list[Problem]:
    problems = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            model = _model_for(loc[:-1])
            close = difflib.get_close_matches(str(loc[-1]), _known_keys(model), n=1) if model else []
            message = "unknown key" + (f" (did you mean '{close[0]}'?)" if close else "")
        elif err["type"] == "missing":
            message = "is required"
        elif err["type"] == "value_error" and "error" in err.get("ctx", {}):
            message = str(err["ctx"]["error"])  # our own validators' message, without pydantic's "Value error, "
        else:  # pydantic's "Input should be ..." in the words of evaltasks' own messages, with the value given
            message = message.replace("Input should be", "must be", 1)
            if not isinstance(err.get("input"), (dict, list)) and "input" in err:
                message += f", got {quote(err['input'])}"
        if len(loc) >= 2 and loc[-1] == "[key]":  # a mapping key is wrong, e.g. embeddings: {openia: ...}
            problems.append(Problem(source, _loc(loc[:-2]), str(loc[-2]), message))
        elif loc and isinstance(loc[-1], int):  # a whole list item is wrong, e.g. metrics[0]
            problems.append(Problem(source, _loc(loc), "", message))
        else:
            problems.append(Problem(source, _loc(loc[:-1]) if loc else "", str(loc[-1]) if loc else "", message))
    return problems


def load_suite(path: str | Path, *, skip_missing_credentials: bool = False) -> LoadedSuite:
    """Read, parse and validate a suite file, constructing its metrics.

    Args:
        path: the suite YAML file.
        skip_missing_credentials: a metric whose provider credentials are missing becomes a
            :class:`~evaltasks.metrics.base.SkippedMetric` (its results ``skipped``, left out of the gate, a
            warning in :attr:`LoadedSuite.warnings`) instead of a problem: for pull requests from forks, which
            get no secrets.

    The file is data: it must be UTF-8, and its YAML is read by :func:`load_yaml` (safe loader; tags such as
    ``!!python/object/apply`` and duplicate keys are problems). Data files whose resolved path leaves the
    suite's directory are allowed and named in :attr:`LoadedSuite.warnings`.

    Raises:
        ConfigError: every problem found (unreadable or non-UTF-8 file, invalid YAML with its line, unsafe tags,
            duplicate keys, unknown or missing keys with "did you mean", wrong types, unknown metric, invalid or
            unknown metric arguments, repeated metric names, a target that cannot be built: docs/targets.md#targets).
    """
    path = Path(path)
    source = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError([Problem(source, "", "", "suite file not found")]) from None
    except OSError as exc:
        raise ConfigError([Problem(source, "", "", f"cannot read the suite file: {exc.strerror or exc}")]) from None
    data = load_yaml(decode_text(raw, source, ConfigError), source, ConfigError)
    if not isinstance(data, dict):
        raise ConfigError([Problem(source, "", "", "must be a YAML mapping with name, dataset and metrics")])
    problems: list[Problem] = []
    try:
        suite: Suite | None = Suite.model_validate(data)
    except RecursionError:
        raise ConfigError([Problem(source, "", "", "nested too deeply")]) from None
    except ValidationError as exc:
        problems.extend(_problems_from_validation(source, exc))
        suite = None
    raw_metrics = data.get("metrics")
    defaults = suite.embeddings if suite is not None else {}
    reference_sets = _load_reference_sets(source, suite, path.parent, problems) if suite is not None else {}
    warnings: list[str] = []
    notices = _outside_notices(suite, path) if suite is not None else []
    judge_defaults = checked_judge_block(source, suite.judge, problems) if suite is not None else None
    credentials: list[str] = []
    metrics = (
        _build_metrics(
            source,
            _metric_specs(raw_metrics),
            problems,
            defaults,
            reference_sets,
            path.parent,
            skipped=warnings if skip_missing_credentials else None,
            judge_defaults=judge_defaults,
            credentials=credentials,
        )
        if isinstance(raw_metrics, list)
        else []
    )
    targets: list[Target] = []
    if suite is not None and (suite.target is not None or suite.targets is not None):
        try:
            targets = build_targets(target_specs(suite.target, suite.targets), path.parent, source)
        except ConfigError as exc:
            problems.extend(exc.problems)
    metrics, run_metrics = _run_level_split(source, metrics, problems)
    if credentials and not problems and suite is not None:
        raise CredentialsError("; ".join(credentials))
    problems += [Problem(source, "", "", message) for message in credentials]
    if problems or suite is None:
        raise ConfigError(problems)
    return LoadedSuite(
        suite=suite,
        metrics=metrics,
        path=path.resolve(),
        sha256=hashlib.sha256(raw).hexdigest(),
        warnings=warnings,
        notices=notices,
        targets=targets,
        run_metrics=run_metrics,
    )


def _run_level_split(
    source: str, metrics: list[BaseMetric], problems: list[Problem]
) -> tuple[list[BaseMetric], list[BaseMetric]]:
    """The suite's per-case metrics and its run-level ones (CalibrationMetric), apart; a run-level metric that
    cannot work with the others adds its problem, located at its ``metrics[i]`` entry."""
    from evaltasks.metrics.run_level import is_run_level, run_metric_problems, split_run_level

    per_case, run_level = split_run_level(metrics)
    positions = [i for i, m in enumerate(metrics) if is_run_level(m)]
    for i, message in run_metric_problems(run_level, per_case):
        problems.append(Problem(source, f"metrics[{positions[i]}]", "outcome_metric", message))
    return per_case, run_level


def _metric_specs(raw_metrics: list[Any]) -> list[tuple[int, MetricSpec]]:
    """(index, spec) of each well-formed ``metrics:`` entry; the others are already reported by the suite model."""
    specs = []
    for i, entry in enumerate(raw_metrics):
        try:
            specs.append((i, MetricSpec.model_validate(entry)))
        except ValidationError:
            continue
    return specs


def _data_files(suite: Suite) -> list[tuple[str, str]]:
    """(where in the suite, path as written) of every data file: the dataset, then each reference-set file."""
    files = [("dataset.path", suite.dataset.path)]
    for name, spec in suite.reference_sets.items():
        file = spec if isinstance(spec, str) else spec.get("path") if isinstance(spec, dict) else None
        if isinstance(file, str):
            files.append((f"reference_sets.{name}", file))
    return files


def _outside_notices(suite: Suite, suite_path: Path) -> list[str]:
    """A notice for each data file (dataset, reference set) whose resolved path leaves the suite's directory.

    Such paths are allowed (``..``, symlinks, absolute paths), but a reviewer should see that a suite reads
    files from elsewhere; the run prints these notices and records them in results.json (``notices``). They
    are not warnings: an ``evals/`` + ``data/`` layout is normal and must not flag every pull request. A path that cannot
    be resolved (a symlink loop) is left to the loader, which reports it.
    """
    base = suite_path.resolve().parent
    notices = []
    for label, file in _data_files(suite):
        try:
            resolved = (base / file).resolve()
        except (OSError, RuntimeError, ValueError):
            continue
        if not resolved.is_relative_to(base):
            notices.append(
                f"{label} '{file}' resolves to {_shown(resolved)}, outside the suite's directory {_shown(base)}"
            )
    return notices


def _shown(path: Path) -> str:
    """``path`` relative to the working directory (``../data/x.csv``, ``evals``), as a notice names it: reports
    and the Action's ``::notice`` lines then carry no local absolute path. ``.`` for the working directory;
    absolute only where no relative path exists (another drive)."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


def _load_reference_sets(source: str, suite: Suite, base_dir: Path, problems: list[Problem]) -> dict[str, Any]:
    """Load every declared reference set; a set that fails adds its problems and is left out.

    A file that cannot be resolved (symlink loop) or parsed (nesting beyond the recursion limit) is a problem
    located at ``reference_sets.NAME``, field ``path``, not a crash.
    """
    from evaltasks.inputs.reference_sets import load_reference_set

    sets = {}
    for name, spec in suite.reference_sets.items():
        try:
            sets[name] = load_reference_set(name, spec, base_dir, source)
        except InputError as exc:
            problems.extend(exc.problems)
        except (ValueError, TypeError) as exc:
            problems.append(Problem(source, f"reference_sets.{name}", "", str(exc)))
        except (RuntimeError, OSError) as exc:  # RecursionError is a RuntimeError
            problems.append(Problem(source, f"reference_sets.{name}", "path", f"cannot load the reference set: {exc}"))
    return sets
