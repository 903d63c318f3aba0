"""The metric registry: the names a suite file's ``metric:`` stands for, and the classes behind them.

Each built-in metric declares its entry beside its class, with :func:`register_metric`, in its own module of a
family package (:mod:`~evaltasks.metrics.deterministic`, :mod:`~evaltasks.metrics.vector`,
:mod:`~evaltasks.metrics.judge`). :data:`METRICS` is the registry, read-only, in name order. The registry checks
itself when it is first read (:func:`check_registry`): every module of the family packages is imported, every
metric class defined there is registered, and no two classes share a name (that one is refused at registration).
The suite file's JSON Schema is generated from it (:func:`evaltasks.inputs.suite.suite_json_schema`: one branch
per registered metric, with its constructor's arguments). Adding a metric is one module and its tests.

A suite file also names installed packages' metrics (entry points of the group ``evaltasks.metrics``) and a user's
own class (``module.path:Class``); :func:`get_metric_class` resolves the three kinds of name.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import pkgutil
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from evaltasks.errors import EvalTasksError
from evaltasks.metrics.base import BaseMetric

_PACKAGE = __name__.rpartition(".")[0]  # evaltasks.metrics
_MetricClass = TypeVar("_MetricClass", bound=type[BaseMetric])


class MetricRegistryError(EvalTasksError, ValueError):
    """A built-in metric's registration is wrong: a name registered twice, a class that is not a concrete
    :class:`BaseMetric` subclass, a metric class of a family module left unregistered. A mistake in evaltasks'
    own code (or a copy of it), never in a user's suite: it is raised when the module registers or when the
    registry is first read."""


class _Registry(Mapping[str, type[BaseMetric]]):
    """The built-in metrics, name -> class, read-only, in name order (:data:`METRICS`).

    Reading it the first time imports every metric module of the family packages and checks the registry
    (:func:`check_registry`), so it is complete whichever metric module was imported first.
    """

    def __init__(self) -> None:
        self._classes: dict[str, type[BaseMetric]] = {}
        self._sorted: dict[str, type[BaseMetric]] | None = None
        self._lock = threading.Lock()  # guards the classes (held briefly: a module registering waits for nothing else)
        self._loading = threading.RLock()  # one reader imports the metric modules; re-entrant for that reader
        self._state = "new"  # "new" -> "loading" -> "loaded"

    def add(self, name: str, cls: type[BaseMetric]) -> None:
        """Register ``cls`` as ``name`` (see :func:`register_metric`). Raises MetricRegistryError."""
        with self._lock:
            known = self._classes.get(name)
            if known is not None and known is not cls and not _same_definition(known, cls):
                raise MetricRegistryError(
                    f"metric name '{name}' is registered twice: by {_qualified(known)} and by {_qualified(cls)}; "
                    "each metric needs a name of its own"
                )
            for other, registered in self._classes.items():
                if other != name and registered is cls:
                    raise MetricRegistryError(f"{_qualified(cls)} is registered twice: as '{other}' and as '{name}'")
            self._classes[name] = cls
            self._sorted = None

    def classes(self) -> list[type[BaseMetric]]:
        """The registered classes, as they are now (no loading, no check)."""
        with self._lock:
            return list(self._classes.values())

    def _entries(self) -> dict[str, type[BaseMetric]]:
        with self._loading:
            if self._state == "new":
                self._state = "loading"
                try:
                    _import_metric_modules()
                    check_registry()
                except BaseException:
                    self._state = "new"
                    raise
                self._state = "loaded"
        with self._lock:
            if self._sorted is None:
                self._sorted = dict(sorted(self._classes.items()))
            return self._sorted

    def __getitem__(self, name: str) -> type[BaseMetric]:
        return self._entries()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries())

    def __len__(self) -> int:
        return len(self._entries())

    def __repr__(self) -> str:
        return f"METRICS({', '.join(self._entries())})"


_registry = _Registry()
METRICS: Mapping[str, type[BaseMetric]] = _registry
"""The built-in metrics: registered name (the class name) -> class, in name order; read-only."""


def register_metric(name: str) -> Callable[[_MetricClass], _MetricClass]:
    """Class decorator: register a built-in metric class under ``name`` (the name a suite's ``metric:`` uses;
    evaltasks' metrics use their class name). Put it on the class, in the metric's own module of a family
    package::

        @register_metric("LengthCheckMetric")
        class LengthCheckMetric(BaseMetric): ...

    A user's own metric is not registered: a suite names it as ``module.path:Class`` or through an installed
    package's entry point (:func:`get_metric_class`).

    Raises:
        MetricRegistryError: ``name`` is empty, holds a ``:`` or is taken by another class; the class is not a
            concrete :class:`BaseMetric` subclass, is already registered under another name, or is defined
            outside ``evaltasks.metrics``.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][\w.-]*", name):
        raise MetricRegistryError(f"a metric's registered name must be an identifier-like string, got {name!r}")

    def register(cls: _MetricClass) -> _MetricClass:
        if not (isinstance(cls, type) and issubclass(cls, BaseMetric)) or inspect.isabstract(cls):
            raise MetricRegistryError(
                f"metric '{name}': only a concrete subclass of BaseMetric can be registered, got {cls!r}"
            )
        if not cls.__module__.startswith(_PACKAGE + "."):
            raise MetricRegistryError(
                f"metric '{name}': {_qualified(cls)} is not one of evaltasks' metrics; a suite names your own "
                "metric as 'module.path:Class' or through an entry point of the group 'evaltasks.metrics'"
            )
        _registry.add(name, cls)
        return cls

    return register


def metric_modules() -> list[str]:
    """The names of the metric modules: every module of every family package of ``evaltasks.metrics`` (a
    sub-package), except private ones (``_``-prefixed); sorted. Nothing is imported but the family packages."""
    modules = []
    for family in pkgutil.iter_modules([str(Path(__file__).parent)], _PACKAGE + "."):
        if not family.ispkg or family.name.rpartition(".")[2].startswith("_"):
            continue
        package = importlib.import_module(family.name)
        modules += [
            m.name
            for m in pkgutil.iter_modules(package.__path__, family.name + ".")
            if not m.name.rpartition(".")[2].startswith("_") and not m.ispkg
        ]
    return sorted(modules)


def metric_classes() -> list[type[BaseMetric]]:
    """The metric classes the metric modules define (:func:`metric_modules`, imported): concrete
    :class:`BaseMetric` subclasses defined there that no other of them subclasses (a shared base such as
    ``EmbeddingMetric`` is not a metric of its own); sorted by module and name."""
    defined = []
    for module_name in metric_modules():
        module = importlib.import_module(module_name)
        # the MRO, not issubclass: an ABC's first subclass check of each unrelated class is slow (~1 ms)
        defined += [
            value
            for value in vars(module).values()
            if isinstance(value, type) and BaseMetric in value.__mro__ and value.__module__ == module_name
        ]
    leaves = [
        cls
        for cls in defined
        if not inspect.isabstract(cls) and not any(other is not cls and cls in other.__mro__ for other in defined)
    ]
    return sorted(set(leaves), key=lambda cls: (cls.__module__, cls.__qualname__))


def check_registry() -> None:
    """Check that the registry is complete: every metric class of the metric modules (:func:`metric_classes`) is
    registered, and every registered class is one of them. Run when :data:`METRICS` is first read.

    Raises:
        MetricRegistryError: naming each class missing from the registry (with its module) or registered
            without being a metric module's metric.
    """
    found = metric_classes()
    registered = _registry.classes()
    missing = [cls for cls in found if not any(cls is r for r in registered)]
    stray = [cls for cls in registered if not any(cls is f for f in found)]
    problems = [f'{_qualified(cls)} is not registered: put @register_metric("{cls.__name__}") on it' for cls in missing]
    problems += [
        f"{_qualified(cls)} is registered but is not the metric of a module of a family package "
        f"({_PACKAGE}.<family>.<module>)"
        for cls in stray
    ]
    if problems:
        raise MetricRegistryError("the metric registry is inconsistent: " + "; ".join(problems))


def _import_metric_modules() -> None:
    """Import every metric module (their decorators register their metrics)."""
    for module_name in metric_modules():
        importlib.import_module(module_name)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _same_definition(a: type, b: type) -> bool:
    """Whether ``a`` and ``b`` are the same class statement run twice (its module reloaded)."""
    return _qualified(a) == _qualified(b)


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
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            raise KeyError(
                f"metric '{name}': entry point '{entry_point.value}' of distribution '{dist}' failed to "
                f"load: {type(exc).__name__}: {exc}"
            ) from None
        return _check_metric_class(loaded, f"entry point '{name}' ({entry_point.value}, distribution '{dist}')")
    if isinstance(name, str) and re.match(USER_METRIC_PATTERN, name):
        return _import_metric_class(name, base_dir)
    import difflib

    known = [*METRICS, *metric_entry_points()]
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise KeyError(
        f"unknown metric '{name}'{hint}; known metrics: {', '.join(known)}; or your own class as 'module:Class'"
    ) from None


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


def _check_not_hidden(
    spec: str, top: str, directory: Path, imported_by: str | None = None, what: str = "metric"
) -> None:
    """Raise KeyError when ``directory`` holds ``top.py`` (or ``top/``) but the module ``top`` resolves
    elsewhere (an installed package, the standard library, a built-in), which would silently hide the user's
    file. Looks the module up without importing it (:func:`importlib.util.find_spec`). ``imported_by``: the
    user's module file that imports ``top`` (a helper next to the metric's module), None for the metric's own
    module. ``what``: the kind of object named, for the message (``metric``, ``target``)."""
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
    fix = (
        f"rename {local.name} and the module in '{what}'"
        if imported_by is None
        else f"{imported_by} imports '{top}': rename {local.name} and that import"
    )
    raise KeyError(
        f"{what} '{spec}': the suite's folder has {local.name}, but module '{top}' is the installed "
        f"module {where}, which hides it (installed packages and the standard library come first); "
        f"{fix}"
    )


def _check_imports_not_hidden(spec: str, module: Any, directory: Path, what: str = "metric") -> None:
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
        _check_not_hidden(spec, top, directory, imported_by=Path(file).name, what=what)


def _pickle_by_value(directory: Path, before: set[str]) -> None:
    """Register every module imported since ``before`` (a snapshot of ``sys.modules``) whose file lies in
    ``directory`` with :func:`cloudpickle.register_pickle_by_value`: a metric instance sent to a task-runner
    worker (Prefect's process pool and Dask pickle with cloudpickle) carries its class's code, so the worker
    need not import the user's module (its ``sys.path`` and ``PYTHONPATH`` need not contain the folder)."""
    import sysconfig

    import cloudpickle

    # Installed packages stay by reference even when the environment lives inside the suite's folder (a
    # project's ./.venv next to its suite.yaml): only the user's own modules travel by value.
    installed = {
        Path(p).resolve() for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, *sysconfig.get_paths().values()) if p
    }
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
            with contextlib.suppress(ValueError):  # not importable by that name (no sys.modules entry of its own)
                cloudpickle.register_pickle_by_value(module)
                with _by_value_lock:
                    _BY_VALUE[module.__name__] = module


_BY_VALUE: dict[str, Any] = {}
"""The users' modules registered by :func:`_pickle_by_value`, by name (for picklers other than cloudpickle's own
copy: :func:`pickle_users_modules_by_value`)."""
_by_value_lock = threading.Lock()


def pickle_users_modules_by_value(pickler: Any) -> None:
    """Register the users' modules that travel by value (metrics' and targets' modules of a suite's folder, see
    :func:`_pickle_by_value`) with ``pickler``, a cloudpickle module other than the ``cloudpickle`` package that
    Prefect's process pool and Dask use: Ray serializes tasks with its own copy (``ray.cloudpickle``), whose
    registry is its own. Call it before submitting work to such a runner (the Ray task runner does, on each
    submit); a module registered already is registered again, harmlessly."""
    with _by_value_lock:
        modules = list(_BY_VALUE.values())
    for module in modules:
        with contextlib.suppress(ValueError):
            pickler.register_pickle_by_value(module)


def _import_metric_class(spec: str, base_dir: str | Path | None) -> type[BaseMetric]:
    """The class named by ``module.path:Class`` (see :func:`get_metric_class`). Raises KeyError."""

    def is_metric(value: Any) -> bool:
        return isinstance(value, type) and issubclass(value, BaseMetric)

    return _check_metric_class(import_user_attribute(spec, base_dir, what="metric", candidate=is_metric), f"'{spec}'")


def import_user_attribute(
    spec: str, base_dir: str | Path | None, *, what: str, candidate: Callable[[Any], bool] = callable
) -> Any:
    """The object named by ``module.path:attribute`` (a user's metric class, a target's function), imported as
    users' own metrics are (:func:`get_metric_class`, rule 3): ``base_dir`` (the suite file's directory) LAST on
    ``sys.path``, a module of ``base_dir`` hidden by an installed one refused, the modules imported from
    ``base_dir`` pickled by value.

    Args:
        spec: ``module.path:attribute`` (:data:`USER_METRIC_PATTERN`).
        base_dir: the suite file's directory, or None.
        what: what ``spec`` names, for messages (``metric``, ``target``).
        candidate: which of the module's own attributes a "did you mean" may suggest.

    Raises:
        KeyError: with one message for the user: the module not found (with where it was looked for), failing
            to import, hidden by an installed module, or lacking the attribute.
    """
    module_name, _, attribute = spec.partition(":")
    directory = Path(base_dir).resolve() if base_dir is not None else None
    before = set(sys.modules)
    if directory is not None:
        add_import_dir(directory)
        _check_not_hidden(spec, module_name.split(".")[0], directory, what=what)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            where = f"the suite's directory {directory} and " if directory is not None else ""
            raise KeyError(
                f"{what} '{spec}': module '{exc.name}' not found (looked in {where}sys.path; install "
                "its package or add its directory to PYTHONPATH)"
            ) from None
        raise KeyError(
            f"{what} '{spec}': importing module '{module_name}' failed: {type(exc).__name__}: {exc}"
        ) from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001
        raise KeyError(
            f"{what} '{spec}': importing module '{module_name}' failed: {type(exc).__name__}: {exc}"
        ) from None
    if directory is not None:
        _check_imports_not_hidden(spec, module, directory, what=what)
        _pickle_by_value(directory, before)
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            import difflib

            names = [
                n for n, v in vars(module).items() if candidate(v) and getattr(v, "__module__", None) == module.__name__
            ]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise KeyError(
                f"{what} '{spec}': module '{module_name}' ({getattr(module, '__file__', None)}) has no "
                f"attribute '{attribute}'{hint}"
            )
        value = getattr(value, part)
    return value


def _check_metric_class(value: Any, label: str) -> type[BaseMetric]:
    """``value`` if it is a :class:`BaseMetric` subclass. Raises KeyError saying what it is otherwise."""
    if isinstance(value, type) and issubclass(value, BaseMetric):
        return value
    what = (
        f"the class {value.__module__}.{value.__qualname__}"
        if isinstance(value, type)
        else (f"a value of type {type(value).__name__} ({value!r:.80})")
    )
    raise KeyError(f"metric {label} is not a subclass of evaltasks.BaseMetric: it is {what}")


def is_builtin(cls: type[BaseMetric]) -> bool:
    """Whether ``cls`` is one of evaltasks' own metrics (:data:`METRICS`)."""
    return any(cls is builtin for builtin in METRICS.values())


__all__ = [
    "ENTRY_POINT_GROUP",
    "METRICS",
    "USER_METRIC_PATTERN",
    "MetricRegistryError",
    "add_import_dir",
    "check_registry",
    "get_metric_class",
    "import_user_attribute",
    "is_builtin",
    "metric_classes",
    "metric_entry_points",
    "metric_modules",
    "register_metric",
]
