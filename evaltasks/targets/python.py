"""The ``python`` target: the user's own callable, run on each test case (docs/targets.md#python-targets)."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evaltasks.errors import CredentialsError, quote
from evaltasks.targets._keys import canonical_digest, case_inputs
from evaltasks.targets.base import TargetError, TargetKind, TargetOutput, TransientTargetError
from evaltasks.test_case import EvalTestCase

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_ATTEMPTS = 4
_TOKENS_KEYS = frozenset({"input", "output"})


def check_common(timeout: float, max_attempts: int, repeat: int, max_concurrency: int) -> None:
    """Validate the fields every target kind shares. Raises ValueError naming the field."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not (timeout > 0 and math.isfinite(timeout))
    ):
        raise ValueError(f"timeout must be a positive number of seconds, got {quote(timeout)}")
    for field, value in (("max_attempts", max_attempts), ("repeat", repeat), ("max_concurrency", max_concurrency)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{field} must be an integer >= 1, got {quote(value)}")


def source_digest(function: Callable[..., Any], extra_files: Sequence[Path] = ()) -> str:
    """Hex SHA-256 of the source that decides what ``function`` returns: the whole file that defines it (so an
    edit of a helper in the same file counts) and each of ``extra_files`` (the suite folder's other modules it
    imported), in order. A callable without a source file (a built-in, code typed in a REPL) is digested by its
    qualified name only: give such a target a ``version``."""
    hasher = hashlib.sha256()
    target = inspect.unwrap(function)
    if not (inspect.isfunction(target) or inspect.ismethod(target)) and callable(target):
        target = type(target)  # a callable object: its class's file
    try:
        file = inspect.getsourcefile(target)
    except TypeError:
        file = None
    files = ([Path(file)] if file else []) + [Path(p) for p in extra_files]
    for path in dict.fromkeys(p.resolve() for p in files):
        try:
            hasher.update(path.read_bytes())
        except OSError:
            hasher.update(str(path).encode())
        hasher.update(b"\0")
    hasher.update(_qualified(function).encode())
    hasher.update(b"\0" + bound_state(function).encode())
    return hasher.hexdigest()


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def bound_state(function: Callable[..., Any]) -> str:
    """What decides ``function``'s output besides its file: the code of the function itself (two lambdas or
    closures of one file differ by it), and the settings bound to it: a ``functools.partial``'s arguments, the
    values a closure captured, a bound method's or a callable object's attributes. Only plain values count as
    settings (strings, numbers, booleans, None, and tuples or frozensets of those: :func:`_setting`; an object's
    numbers are left out, being often counters); a mutable
    or rich value (a dict, a list, a client) is named by its type only, so state a callable changes while it runs
    (a call counter's dict, a cache) never changes its key. Two targets that differ only in such values need a
    ``version``."""
    parts: list[str] = []
    for _ in range(8):  # a partial of a partial...: a few levels, never a cycle
        if isinstance(function, functools.partial):
            keywords = sorted((k, _setting(v)) for k, v in function.keywords.items())
            parts.append(f"partial{[_setting(a) for a in function.args]!r}{keywords!r}")
            function = function.func
        elif inspect.ismethod(function):
            parts.append(f"self={_settings_of(function.__self__)}")
            function = function.__func__
        else:
            break
    code = getattr(function, "__code__", None)
    if code is not None:
        # a nested function, lambda or comprehension is a code object among the constants: without its address,
        # which differs in every process (the fingerprint would, and the output store would never be read)
        parts.append(hashlib.sha256(code.co_code + _ADDRESS.sub("", repr(code.co_consts)).encode()).hexdigest())
        parts.append(f"closure={[_cell(c) for c in (getattr(function, '__closure__', None) or ())]!r}")
    elif callable(function) and not inspect.isclass(function) and not inspect.isbuiltin(function):
        parts.append(f"object={_settings_of(function)}")
    return _ADDRESS.sub("", "|".join(parts))


def _setting(value: Any, numbers: bool = True) -> str:
    """``repr`` of a plain value (str, bytes, bool, None, numbers unless ``numbers`` is False, or a
    tuple/frozenset of those); the type's name for anything else."""
    plain: tuple[type, ...] = (str, bytes, bool, type(None), *((int, float) if numbers else ()))
    if isinstance(value, plain):
        return repr(value)
    if isinstance(value, (tuple, frozenset)) and all(isinstance(v, plain) for v in value):
        return repr(sorted(value, key=repr) if isinstance(value, frozenset) else value)
    return f"<{type(value).__qualname__}>"


def _settings_of(value: Any) -> str:
    """An object's attributes (``vars``) as ``name=setting`` pairs, numbers left out (an object's numbers are
    often counters it updates as it runs, which must not change its key); its type's name when it has none."""
    try:
        attributes = vars(value)
    except TypeError:
        return _setting(value, numbers=False)
    return repr(sorted((name, _setting(v, numbers=False)) for name, v in attributes.items()))


def _cell(cell: Any) -> str:
    """A closure cell's value as :func:`_setting` writes it (an empty cell: ``<empty>``)."""
    try:
        return _setting(cell.cell_contents)
    except ValueError:
        return "<empty>"


def local_sources(function: Callable[..., Any], directory: Path) -> list[Path]:
    """The suite folder's source files that ``function``'s module imports, directly or through one another
    (``import helpers``, ``from bot import retrieval``, ``from . import util``), read statically with
    :mod:`ast`: the same files whatever was imported before, so a fingerprint does not depend on import order.
    A package imported whole brings every ``.py`` file under it. Sorted; empty when the function's file is not
    in ``directory``."""
    import ast

    root = directory.resolve()
    try:
        start = inspect.getsourcefile(inspect.unwrap(function))
    except TypeError:
        start = None
    if not start or not Path(start).resolve().is_relative_to(root):
        return []
    seen: set[Path] = set()
    queue = [Path(start).resolve()]
    while queue:
        file = queue.pop()
        if file in seen or not file.is_file():
            continue
        seen.add(file)
        try:
            tree = ast.parse(file.read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            names: list[tuple[str, int]] = []
            if isinstance(node, ast.Import):
                names = [(alias.name, 0) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                names = [(base, node.level)] + [
                    (f"{base}.{a.name}" if base else a.name, node.level) for a in node.names
                ]
            for dotted, level in names:
                folder = file.parent
                for _ in range(max(level - 1, 0)):
                    folder = folder.parent
                queue.extend(_module_files(root if level == 0 else folder, dotted))
    return sorted(p for p in seen if p.is_relative_to(root))


def _module_files(folder: Path, dotted: str) -> list[Path]:
    """The files of module ``dotted`` found under ``folder`` (a module file, or a package's ``.py`` files)."""
    if not dotted:
        return [folder / "__init__.py"]
    path = folder.joinpath(*dotted.split("."))
    if path.with_suffix(".py").is_file():
        return [path.with_suffix(".py")]
    if path.is_dir():
        return sorted(path.rglob("*.py"))
    return []


def _qualified(function: Callable[..., Any]) -> str:
    module = getattr(function, "__module__", None) or "?"
    name = getattr(function, "__qualname__", None) or type(function).__qualname__
    return f"{module}:{name}"


def to_output(value: Any, label: str) -> TargetOutput:
    """A target's return value as a :class:`TargetOutput`: a ``str`` is the output; a mapping holds its fields
    (``output`` required; ``tokens`` may be ``{input: n, output: m}``); a TargetOutput is taken as it is; a
    number or boolean is its JSON text (``42``, ``true``), as an http target's answer is.

    Raises:
        TargetError: any other type (naming it), or a mapping with unknown or ill-typed fields.
    """
    if isinstance(value, TargetOutput):
        return value
    if isinstance(value, str):
        return TargetOutput(output=value)
    if isinstance(value, (int, float)):  # bool included: true, false
        return TargetOutput(output=json.dumps(value))
    if isinstance(value, Mapping):
        fields = dict(value)
        tokens = fields.pop("tokens", None)
        if tokens is not None:
            if not isinstance(tokens, Mapping) or not set(tokens) <= _TOKENS_KEYS:
                raise TargetError(
                    f"{label} returned tokens {quote(tokens)}: expected a mapping {{input: n, output: m}}"
                )
            fields.setdefault("input_tokens", tokens.get("input"))
            fields.setdefault("output_tokens", tokens.get("output"))
        try:
            return TargetOutput.model_validate(fields)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, error['loc'])) or 'value'}: {error['msg']}" for error in exc.errors()
            )
            raise TargetError(f"{label} returned a mapping that is not a valid output: {problems}") from None
    raise TargetError(
        f"{label} returned a value of type {type(value).__name__} ({quote(value, 60)}); expected a str, a mapping "
        "with 'output', or a TargetOutput"
    )


class PythonTarget:
    """The user's callable as a target: called with the :class:`~evaltasks.EvalTestCase` (the row's columns in
    ``case.vars``), sync or async; returns a ``str``, a mapping with ``output`` (and optionally
    ``retrieval_context``, ``context``, ``tools_called``, ``execution_trace``, ``tool_calls``, ``agent_confidence``,
    ``cost``, ``tokens``, ``metadata``) or a
    :class:`TargetOutput`.

    Args:
        function: the callable (an ``async def`` function, or one returning an awaitable, is run to completion on
            the target's own event loop, one loop for all its calls).
        name: the target's name in reports (default ``python``).
        version: a label to change when code outside the callable's file changes what it returns (part of the
            fingerprint).
        cache: False to generate every run (an app that is not deterministic).
        repeat: outputs generated per case (``repeat: K``).
        timeout: seconds a case may take, retries included.
        max_attempts: tries per case: the first + retries of transient failures.
        max_concurrency: cases run at once (default 1: the callable need not be thread-safe).
        source_files: other files whose source decides the output (the suite folder's modules the callable's
            module imports), digested with its own file.
        spec: how the suite named it (``bot.answer:respond``), for messages.

    Failures: an exception the callable raises fails the case with its type and message; ``TimeoutError`` and
    ``ConnectionError`` (and :class:`TransientTargetError`) are retried; :class:`CredentialsError` stops the run.

    Raises:
        ValueError: ``function`` is not callable, or a field is out of range.
    """

    kind: TargetKind = "python"

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str = "python",
        version: str | None = None,
        cache: bool = True,
        repeat: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_concurrency: int = 1,
        source_files: Sequence[Path] = (),
        spec: str | None = None,
    ) -> None:
        if not callable(function):
            raise ValueError(f"a python target needs a callable, got {type(function).__name__} ({quote(function)})")
        check_common(timeout, max_attempts, repeat, max_concurrency)
        self.function = function
        self.name = name
        self.version = version
        self.cache = cache
        self.repeat = repeat
        self.timeout = float(timeout)
        self.max_attempts = max_attempts
        self.max_concurrency = max_concurrency
        self.spec = spec or _qualified(function)
        self._source = source_digest(function, source_files)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_loop"], state["_loop_lock"] = None, None  # a worker process starts its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._loop_lock = threading.Lock()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The target's event loop, running in a daemon thread of its own (started on the first async call): every
        call of an async callable runs on this one loop, so what the user's module keeps across calls (an
        ``AsyncOpenAI`` or ``httpx.AsyncClient`` made at import) stays bound to a loop that is still running."""
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name=f"target-{self.name}-loop", daemon=True).start()
                self._loop = loop
            return self._loop

    def __repr__(self) -> str:
        return f"PythonTarget({self.spec!r}, name={self.name!r})"

    def fingerprint(self) -> str:
        """Hex SHA-256 of the kind, the callable's source digest (:func:`source_digest`) and ``version``."""
        return canonical_digest({"kind": self.kind, "source": self._source, "version": self.version})

    def case_key(self, case: EvalTestCase) -> str:
        """Hex SHA-256 of :meth:`fingerprint` and the case's inputs (every field but ``actual_output``)."""
        return canonical_digest({"target": self.fingerprint(), "case": case_inputs(case)})

    def estimate_cost(self, case: EvalTestCase) -> float:
        """0.0: what the user's code spends is not known in advance."""
        return 0.0

    def generate(self, case: EvalTestCase) -> TargetOutput:
        """Call the function on ``case`` and convert what it returns (:func:`to_output`).

        Raises:
            TransientTargetError: it raised ``TimeoutError``, ``ConnectionError`` or TransientTargetError.
            TargetError: it raised anything else, or returned a value of the wrong type.
            CredentialsError: it raised one (the run stops).
        """
        label = f"the python target {self.name} ({self.spec})"
        try:
            value = self.function(case)
            if inspect.isawaitable(value):
                value = asyncio.run_coroutine_threadsafe(_awaited(value), self._event_loop()).result()
        except (TargetError, CredentialsError):
            raise
        except (TimeoutError, ConnectionError) as exc:
            raise TransientTargetError(f"{label} raised {type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - the user's code failed on this case: the case errs
            raise TargetError(f"{label} raised {type(exc).__name__}: {exc}") from exc
        return to_output(value, label)


async def _awaited(value: Any) -> Any:
    return await value
