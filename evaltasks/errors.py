"""The exception hierarchy of evaltasks.

Every error the library raises on purpose derives from :class:`EvalTasksError`, so callers can catch one
class. User mistakes found before scoring (config, dataset, credentials) are :class:`InputError` subclasses;
the CLI maps them to exit code 2 and prints them without a traceback.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from typing import Any

from evaltasks._redact import redact

QUOTE_MAX_CHARS = 120  # what a message quotes of one user value
MESSAGE_MAX_CHARS = 1000  # one problem's message as shown


class _Quoter(reprlib.Repr):
    """``reprlib.Repr`` that looks at a bounded part of a value: a few items per container, 3 levels, the
    start of long strings; an integer too long to print (Python refuses over 4,300 digits) is described."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother = 3, QUOTE_MAX_CHARS, QUOTE_MAX_CHARS
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = self.maxfrozenset = self.maxdeque = 6

    def repr_int(self, x: int, level: int) -> str:
        try:
            return super().repr_int(x, level)
        except ValueError:
            return f"<an integer of {x.bit_length()} bits>"


_QUOTER = _Quoter()


def json_type_name(value: Any) -> str:
    """The JSON/YAML name of ``value``'s type (null, boolean, number, object, array, string), as problems name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else type(value).__name__


def quote(value: Any, limit: int = QUOTE_MAX_CHARS) -> str:
    """``repr(value)`` for an error message, bounded: at most ``limit`` characters (cut with ``...``), built
    from a bounded part of the value (``reprlib``), so a huge or deeply shared value costs what a small one
    does. ``quote("ab")`` is ``'ab'``; ``quote(list(range(100)))`` is ``[0, 1, 2, 3, 4, 5, ...]``."""
    text = _QUOTER.repr(value)
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def bounded(text: str, limit: int = MESSAGE_MAX_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters, ending in ``...`` when cut."""
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


class EvalTasksError(Exception):
    """Base class of every error raised by evaltasks.

    Its message never holds a secret: string arguments are redacted when the error is made
    (:func:`evaltasks._redact.redact`), so an endpoint that echoes the API key in an error body reaches no
    reason, Prefect state or report (docs/reports.md#secrets-in-reports).
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*(redact(arg) if isinstance(arg, str) else arg for arg in args))


@dataclass(frozen=True)
class Problem:
    """One validation problem, located precisely.

    Attributes:
        source: the file (or ``"<python>"`` for objects passed in code) where the problem is.
        location: ``"line N"`` (CSV, JSONL: 1-based physical line), ``"item N"`` (JSON, YAML: 0-based index),
            a config path such as ``"metrics[1].unit"``, or ``""`` when the whole source is at fault.
        field: the offending field name, or ``""``.
        message: what is wrong, in one sentence, not starting with the field's name: ``str()`` renders
            ``"<source>, <location>: field '<field>' <message>"`` (e.g. ``field 'unit' must be one of …``),
            the message cut to :data:`MESSAGE_MAX_CHARS` characters.
    """

    source: str
    location: str
    field: str
    message: str

    def __str__(self) -> str:
        where = ", ".join(part for part in (self.source, self.location) if part)
        field = f"field '{bounded(self.field, QUOTE_MAX_CHARS)}' " if self.field else ""
        message = bounded(self.message)
        return f"{where}: {field}{message}" if where else f"{field}{message}"


class InputError(EvalTasksError, ValueError):
    """Invalid input found before any scoring. Carries every problem found (the first 20 are shown).

    It subclasses :class:`ValueError` so that the Python API raises ``ValueError`` as documented.

    ``complete=False`` says the collector stopped early (a cap on how many problems it gathers), so the
    count is a lower bound: the message says "at least N problem(s)".
    """

    max_shown = 20

    def __init__(self, problems: list[Problem] | str, *, title: str = "invalid input", complete: bool = True) -> None:
        if isinstance(problems, str):
            problems = [Problem("", "", "", problems)]
        self.problems: list[Problem] = list(problems)
        self.title = title
        self.complete = complete
        super().__init__(self._render())

    def _render(self) -> str:
        shown = self.problems[: self.max_shown]
        count = f"{len(self.problems)}" if self.complete else f"at least {len(self.problems)}"
        lines = [f"{self.title}: {count} problem(s)"]
        lines += [f"  - {problem}" for problem in shown]
        if len(self.problems) > len(shown):
            lines.append(f"  ... and {'' if self.complete else 'at least '}{len(self.problems) - len(shown)} more")
        return "\n".join(lines)


class ConfigError(InputError):
    """The suite file (or metric parameters) is invalid."""

    def __init__(self, problems: list[Problem] | str, *, title: str = "invalid suite", complete: bool = True) -> None:
        super().__init__(problems, title=title, complete=complete)


class DatasetError(InputError):
    """The dataset is missing, unreadable, or has bad rows."""

    def __init__(self, problems: list[Problem] | str, *, title: str = "invalid dataset", complete: bool = True) -> None:
        super().__init__(problems, title=title, complete=complete)


class CredentialsError(InputError):
    """A provider needs credentials that are missing or were rejected (e.g. ``OPENAI_API_KEY``)."""

    def __init__(self, message: str) -> None:
        self.message = redact(message)
        super().__init__(self.message, title="missing or rejected credentials")

    def __reduce__(self) -> tuple[type[CredentialsError], tuple[str]]:
        """Pickled as its message (a worker process's error reaches the run's process as it was raised)."""
        return type(self), (self.message,)


class ProviderError(EvalTasksError):
    """An embedding provider failed at run time.

    Attributes:
        transient: True when retrying may help (rate limit, timeout, connection error, 5xx).
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class IndexCorruptError(EvalTasksError):
    """A reference index on disk is truncated or inconsistent; it is rebuilt, never read."""


class GateFailed(EvalTasksError):
    """The suite's gate failed (docs/prefect.md#prefect): raised by calling the ``evaluate-suite`` flow from Python,
    whose run then ends Failed with :attr:`message` (e.g. ``gate failed: pass rate 50.00% below 90.00%``).

    Attributes:
        message: the verdict, as the flow run's state message.
        result: what the flow returns when the gate holds (``{"suite", "passed", "results_path", "summary",
            ...}``), so a caller that expected a failing verdict still has the numbers.
    """

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.message = message
        self.result = result

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.result))
