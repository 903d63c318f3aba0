"""Metrics and the registry that maps a metric's class name to its class.

Three families, one module per metric: :mod:`~evaltasks.metrics.deterministic` (rules over text),
:mod:`~evaltasks.metrics.vector` (embeddings) and :mod:`~evaltasks.metrics.judge` (an LLM judge). Adding a metric =
one module in its family + one line in :data:`METRICS` (and its family's ``__init__``) + its tests.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

from evaltasks.metrics.base import BaseMetric, EmbeddingNeed
from evaltasks.metrics.deterministic import (
    ContainsMetric,
    EndsWithMetric,
    ExactMatchMetric,
    FormatCheckMetric,
    JsonSchemaMetric,
    LanguageDetectionMetric,
    LengthCheckMetric,
    NonEmptyMetric,
    RegexMatchMetric,
    RestrictedRefusalMetric,
    StartsWithMetric,
    ToolCorrectnessMetric,
)
from evaltasks.metrics.judge import (
    AnswerRelevancyMetric,
    BiasMetric,
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    CustomEvalMetric,
    FaithfulnessMetric,
    GEvalMetric,
    ToxicityMetric,
)
from evaltasks.metrics.vector import ReferenceMatchMetric, SemanticSimilarityMetric

METRICS: dict[str, type[BaseMetric]] = {
    "LengthCheckMetric": LengthCheckMetric,
    "LanguageDetectionMetric": LanguageDetectionMetric,
    "ReferenceMatchMetric": ReferenceMatchMetric,
    "ExactMatchMetric": ExactMatchMetric,
    "ContainsMetric": ContainsMetric,
    "StartsWithMetric": StartsWithMetric,
    "EndsWithMetric": EndsWithMetric,
    "NonEmptyMetric": NonEmptyMetric,
    "RegexMatchMetric": RegexMatchMetric,
    "FormatCheckMetric": FormatCheckMetric,
    "JsonSchemaMetric": JsonSchemaMetric,
    "AnswerRelevancyMetric": AnswerRelevancyMetric,
    "FaithfulnessMetric": FaithfulnessMetric,
    "ContextualRelevancyMetric": ContextualRelevancyMetric,
    "ContextualPrecisionMetric": ContextualPrecisionMetric,
    "ContextualRecallMetric": ContextualRecallMetric,
    "BiasMetric": BiasMetric,
    "ToxicityMetric": ToxicityMetric,
    "RestrictedRefusalMetric": RestrictedRefusalMetric,
    "ToolCorrectnessMetric": ToolCorrectnessMetric,
    "GEvalMetric": GEvalMetric,
    "CustomEvalMetric": CustomEvalMetric,
    "SemanticSimilarityMetric": SemanticSimilarityMetric,
}


ENTRY_POINT_GROUP = "evaltasks.metrics"
USER_METRIC_PATTERN = r"^[\w.]+:[\w.]+$"  # ``module.path:Class`` (a user's metric class)


def metric_entry_points() -> dict[str, Any]:
    """Installed metrics: entry-point name -> :class:`importlib.metadata.EntryPoint` of the group
    :data:`ENTRY_POINT_GROUP` (``evaltasks.metrics``), the first of each name."""
    from importlib.metadata import entry_points

    found: dict[str, Any] = {}
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry_point.name, entry_point)
    return found


def get_metric_class(name: str, base_dir: str | Path | None = None) -> type[BaseMetric]:
    """The metric class ``name`` stands for, resolved in this order (docs/metrics/custom.md#your-own-metrics):

    1. a built-in metric's class name (:data:`METRICS`);
    2. the name of an entry point in the group ``evaltasks.metrics`` (an installed package's metric);
    3. ``module.path:Class``: ``module.path`` imported from ``sys.path``; ``base_dir`` (the suite file's
       directory), when given, is put LAST on ``sys.path`` (installed packages and the standard library win,
       so a file there never shadows a module evaltasks needs: :func:`add_import_dir`), and the modules
       imported from it are pickled by value (:func:`_pickle_by_value`), so task-runner worker processes
       need not import them.

    Raises:
        KeyError: with one message for the user: an unknown name (with a close match), a module not found
            (with where it was looked for), a module that fails to import, a missing attribute, a class that is
            not a :class:`BaseMetric` subclass (saying what it is), an entry point that fails to load (naming
            its distribution), a module of ``base_dir`` hidden by an installed or standard-library module of
            the same name (naming both files).
    """
    cls = METRICS.get(name)
    if cls is not None:
        return cls
    entry_point = metric_entry_points().get(name) if isinstance(name, str) else None
    if entry_point is not None:
        dist = getattr(entry_point.dist, "name", None) or "unknown distribution"
        try:
            loaded = entry_point.load()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a plugin's import error is the user's config problem
            raise KeyError(f"metric '{name}': entry point '{entry_point.value}' of distribution '{dist}' failed to "
                           f"load: {type(exc).__name__}: {exc}") from None
        return _check_metric_class(loaded, f"entry point '{name}' ({entry_point.value}, distribution '{dist}')")
    if isinstance(name, str) and re.match(USER_METRIC_PATTERN, name):
        return _import_metric_class(name, base_dir)
    import difflib

    known = [*METRICS, *metric_entry_points()]
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise KeyError(f"unknown metric '{name}'{hint}; known metrics: {', '.join(known)}; or your own class as "
                   "'module:Class'") from None


def add_import_dir(directory: str | Path) -> None:
    """Put ``directory`` at the END of ``sys.path``, unless it is already there: installed packages and the
    standard library come first, so a user's ``prefect.py`` or ``fasttext.py`` next to a suite never replaces
    the module evaltasks imports. ``PYTHONPATH`` is left alone (its entries come before site-packages in every
    process started later); worker processes get users' classes by value (:func:`_pickle_by_value`)."""
    path = str(Path(directory).resolve())
    if path not in sys.path:
        sys.path.append(path)


def _local_candidate(directory: Path, top: str) -> Path | None:
    """The file or package folder named ``top`` in ``directory`` (``top.py`` or ``top/``), if there is one."""
    for candidate in (directory / f"{top}.py", directory / top):
        if candidate.is_file() or (candidate.is_dir() and candidate.name == top):
            return candidate
    return None


def _check_not_hidden(spec: str, top: str, directory: Path, imported_by: str | None = None) -> None:
    """Raise KeyError when ``directory`` holds ``top.py`` (or ``top/``) but the module ``top`` resolves
    elsewhere (an installed package, the standard library, a built-in), which would silently hide the user's
    file. Looks the module up without importing it (:func:`importlib.util.find_spec`). ``imported_by``: the
    user's module file that imports ``top`` (a helper next to the metric's module), None for the metric's own
    module."""
    local = _local_candidate(directory, top)
    if local is None:
        return
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return  # the import below reports it
    if found is None:
        return
    locations = [found.origin] if found.origin else []
    locations += list(found.submodule_search_locations or [])
    if any(loc and Path(loc).resolve().is_relative_to(directory) for loc in locations):
        return
    if found.origin in ("built-in", "frozen"):
        where = f"({found.origin})"
    elif found.has_location and found.origin:
        where = f"at {found.origin}"
    else:
        where = f"at {locations[0]}" if locations else f"({found.origin})"
    fix = (f"rename {local.name} and the module in 'metric'" if imported_by is None else
           f"{imported_by} imports '{top}': rename {local.name} and that import")
    raise KeyError(f"metric '{spec}': the suite's folder has {local.name}, but module '{top}' is the installed "
                   f"module {where}, which hides it (installed packages and the standard library come first); "
                   f"{fix}")


def _check_imports_not_hidden(spec: str, module: Any, directory: Path) -> None:
    """:func:`_check_not_hidden` for every top-level module that the user's ``module`` (a file in ``directory``)
    imports by absolute name (``import six``, ``from six import x``): a helper next to it that an installed
    module of the same name hides would be silently replaced (read from the source with :mod:`ast`)."""
    import ast

    file = getattr(module, "__file__", None)
    if not file or not Path(file).resolve().is_relative_to(directory):
        return
    try:
        tree = ast.parse(Path(file).read_bytes())
    except (OSError, SyntaxError, ValueError):
        return
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    for top in sorted(names):
        _check_not_hidden(spec, top, directory, imported_by=Path(file).name)


def _pickle_by_value(directory: Path, before: set[str]) -> None:
    """Register every module imported since ``before`` (a snapshot of ``sys.modules``) whose file lies in
    ``directory`` with :func:`cloudpickle.register_pickle_by_value`: a metric instance sent to a task-runner
    worker (Prefect's process pool and Dask pickle with cloudpickle) carries its class's code, so the worker
    need not import the user's module (its ``sys.path`` and ``PYTHONPATH`` need not contain the folder)."""
    import cloudpickle
    import sysconfig

    # Installed packages stay by reference even when the environment lives inside the suite's folder (a
    # project's ./.venv next to its suite.yaml): only the user's own modules travel by value.
    installed = {Path(p).resolve() for p in (sys.prefix, sys.exec_prefix, sys.base_prefix,
                                             *sysconfig.get_paths().values()) if p}
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if not (module is not None and file):
            continue
        path = Path(file).resolve()
        if any(part in ("site-packages", "dist-packages") for part in path.parts):
            continue
        if any(path.is_relative_to(root) for root in installed if not directory.is_relative_to(root)):
            continue
        if path.is_relative_to(directory):
            try:
                cloudpickle.register_pickle_by_value(module)
            except ValueError:
                pass  # not importable by that name (e.g. a module with no entry in sys.modules of its own)


def _import_metric_class(spec: str, base_dir: str | Path | None) -> type[BaseMetric]:
    """The class named by ``module.path:Class`` (see :func:`get_metric_class`). Raises KeyError."""
    module_name, _, attribute = spec.partition(":")
    directory = Path(base_dir).resolve() if base_dir is not None else None
    before = set(sys.modules)
    if directory is not None:
        add_import_dir(directory)
        _check_not_hidden(spec, module_name.split(".")[0], directory)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            where = f"the suite's directory {directory} and " if directory is not None else ""
            raise KeyError(f"metric '{spec}': module '{exc.name}' not found (looked in {where}sys.path; install "
                           "its package or add its directory to PYTHONPATH)") from None
        raise KeyError(f"metric '{spec}': importing module '{module_name}' failed: "
                       f"{type(exc).__name__}: {exc}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's module raised while importing
        raise KeyError(f"metric '{spec}': importing module '{module_name}' failed: "
                       f"{type(exc).__name__}: {exc}") from None
    if directory is not None:
        _check_imports_not_hidden(spec, module, directory)
        _pickle_by_value(directory, before)
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            import difflib

            names = [n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, BaseMetric)
                     and v.__module__ == module.__name__]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise KeyError(f"metric '{spec}': module '{module_name}' ({getattr(module, '__file__', None)}) has no "
                           f"attribute '{attribute}'{hint}")
        value = getattr(value, part)
    return _check_metric_class(value, f"'{spec}'")


def _check_metric_class(value: Any, label: str) -> type[BaseMetric]:
    """``value`` if it is a :class:`BaseMetric` subclass. Raises KeyError saying what it is otherwise."""
    if isinstance(value, type) and issubclass(value, BaseMetric):
        return value
    what = f"the class {value.__module__}.{value.__qualname__}" if isinstance(value, type) else (
        f"a value of type {type(value).__name__} ({value!r:.80})")
    raise KeyError(f"metric {label} is not a subclass of evaltasks.BaseMetric: it is {what}")


def is_builtin(cls: type[BaseMetric]) -> bool:
    """Whether ``cls`` is one of evaltasks' own metrics (:data:`METRICS`)."""
    return any(cls is builtin for builtin in METRICS.values())


__all__ = [
    "METRICS", "BaseMetric", "EmbeddingNeed", "get_metric_class", *METRICS,
]
