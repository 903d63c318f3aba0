"""Every ``EVALTASKS_*`` environment variable, read and checked in one place (docs: settings.md).

:class:`Settings` declares each variable once: its name (``EVALTASKS_`` + the field's name in capitals), type,
default, the rule its value must follow and what it does. Code reads a setting through :func:`get_settings`
(``get_settings(only=["stop_grace_s"]).stop_grace_s``: a reader checks the variables it reads, so an unrelated bad
value never breaks it), never through ``os.environ``. A value that breaks its rule raises :class:`SettingsError`,
whose message names the variable; every ``evaltasks`` command checks them all before it starts (one line, exit 2).

As everywhere in evaltasks (:mod:`evaltasks._env`), a variable that is empty or only whitespace counts as unset,
and values are stripped. Variables named ``EVALTASKS_*`` that no field declares are ignored (the GitHub Action and
the test suite set their own).

Two readers do not import this module, on purpose, and read the same names through the constants of
:mod:`evaltasks._env` with the standard library: the parent process of ``evaltasks run``
(:mod:`evaltasks.supervisor`) and the client of ``evaltasks server`` (:mod:`evaltasks.server.client`). Both run
before anything heavy is imported, and importing pydantic-settings costs them 0.1 s or more. :mod:`evaltasks._redact`
neither: it runs inside the construction of every evaltasks error, where reading a setting must never fail.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from evaltasks._env import SETTINGS_PREFIX, flag_value
from evaltasks._redact import redact, variable_names
from evaltasks.errors import InputError

__all__ = ["SETTINGS_PREFIX", "Settings", "SettingsError", "get_settings", "variable_name"]


class SettingsError(InputError):
    """An ``EVALTASKS_*`` variable holds a value its setting does not accept. The message names the variable,
    quotes its value and says what it must be, on one line (an :class:`~evaltasks.errors.InputError`: the CLI exits
    2 without a traceback)."""

    def __init__(self, message: str) -> None:
        """``message``: one line naming the variable (redacted, as every evaltasks error is)."""
        self.message = redact(message)
        super().__init__(self.message, title="invalid setting")

    def __str__(self) -> str:
        """The message alone, on one line."""
        return self.message

    def __reduce__(self) -> tuple[type[SettingsError], tuple[str]]:
        """Pickled as its message (a worker process's error reaches the run's process as it was raised)."""
        return type(self), (self.message,)


class Settings(BaseSettings):
    """The ``EVALTASKS_*`` environment variables (``Settings()`` reads ``os.environ``; use :func:`get_settings`).

    Each field is the variable ``EVALTASKS_<FIELD IN CAPITALS>``; its description is the text of the table in
    docs/settings.md (a test checks they agree). ``commands`` in a field's ``json_schema_extra`` names the commands
    that read it; ``internal`` marks a variable evaltasks sets itself for the processes it starts.
    """

    model_config = SettingsConfigDict(
        env_prefix=SETTINGS_PREFIX, extra="ignore", frozen=True, env_ignore_empty=True, str_strip_whitespace=True
    )

    index_dir: Path | None = Field(
        default=None,
        description="The reference index directory when `--index-dir` is not given (default `.evaltasks/index`, "
        "relative to the working directory).",
        json_schema_extra={"commands": "run, calibrate, index, Python API"},
    )
    index_max_segments: int = Field(
        default=32,
        ge=1,
        description="How many segments a namespace of the index may hold before a write compacts it "
        "(a positive integer).",
        json_schema_extra={"commands": "run, index, Python API"},
    )
    history_dir: Path | None = Field(
        default=None,
        description="Where runs are recorded when neither the suite's `history.dir` nor `--history-dir` says "
        "(default: no history unless the suite has a `history:` block, then `.evaltasks/history`).",
        json_schema_extra={"commands": "run, history"},
    )
    stop_grace_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a run may take to stop after its first SIGINT/SIGTERM before every process of it "
        "is killed (a positive number).",
        json_schema_extra={"commands": "run, server"},
    )
    no_server: bool = Field(
        default=False,
        description="Run in this process even when an `evaltasks server` runs, as `--no-server` does "
        "(`0`, `false`, `no`, `off`: no; any other value: yes).",
        json_schema_extra={"commands": "run"},
    )
    cache_dir: Path | None = Field(
        default=None,
        description="Where evaltasks keeps migrated empty Prefect databases, under `prefect-db/` (default "
        "`$XDG_CACHE_HOME/evaltasks` or `~/.cache/evaltasks`).",
        json_schema_extra={"commands": "run, serve, server"},
    )
    secret_variables: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Names of more environment variables whose values are secrets, redacted from every "
        "report, log and message (comma- or space-separated).",
        json_schema_extra={"commands": "every command, Python API"},
    )
    run_state: Path | None = Field(
        default=None,
        description="Internal: the folder where the metrics running in each process of a run record "
        "themselves, set by `evaltasks run` and `evaltasks server` for the run's processes.",
        json_schema_extra={"commands": "run, server", "internal": True},
    )
    serve_verdict: bool = Field(
        default=False,
        description="Internal: `1` makes each flow run print its verdict line on stdout, set by "
        "`evaltasks serve` for the flow runs it serves.",
        json_schema_extra={"commands": "serve", "internal": True},
    )
    server_claim_fd: int | None = Field(
        default=None,
        description="Internal: the pipe on which Prefect's temporary server process tells the run that it holds "
        "its port, set by the run for that process (docs/server.md).",
        json_schema_extra={"commands": "run", "internal": True},
    )

    @model_validator(mode="before")
    @classmethod
    def _blank_is_unset(cls, data: Any) -> Any:
        """Drop values that are blank strings: they count as unset (the field keeps its default)."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if not (isinstance(value, str) and not value.strip())}
        return data

    @field_validator("stop_grace_s")
    @classmethod
    def _finite(cls, value: float) -> float:
        """Infinity is not a number of seconds a run waits."""
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("no_server", mode="before")
    @classmethod
    def _flag(cls, value: Any) -> Any:
        """``0``, ``false``, ``no``, ``off`` (any case) are False, any other text True (as the server's client
        reads it: :func:`evaltasks._env.flag_value`)."""
        return flag_value(value) if isinstance(value, str) else value

    @field_validator("serve_verdict", mode="before")
    @classmethod
    def _one(cls, value: Any) -> Any:
        """Only ``1`` turns it on (what ``evaltasks serve`` sets)."""
        return value == "1" if isinstance(value, str) else value

    @field_validator("secret_variables", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        """Comma- or whitespace-separated names, in order, without repeats."""
        if isinstance(value, str):
            return tuple(variable_names(value))
        return value


def variable_name(field: str) -> str:
    """The environment variable of the :class:`Settings` field ``field``: ``stop_grace_s`` ->
    ``EVALTASKS_STOP_GRACE_S``."""
    return SETTINGS_PREFIX + field.upper()


def get_settings(environ: Mapping[str, str] | None = None, *, only: Iterable[str] | None = None) -> Settings:
    """The settings of ``environ`` (default ``os.environ``, read now), validated.

    ``only``: read just these fields (the others keep their defaults), for a reader that must not fail because of
    an unrelated variable (the cleanup of a run that ends on a bad setting). Cached per distinct set of
    ``EVALTASKS_*`` values, so reading a setting in a loop costs a scan of the environment, and a variable set
    later (the run's processes get ``EVALTASKS_RUN_STATE`` once forked; tests set variables) is seen at the next
    call. Raises :class:`SettingsError` naming the first variable whose value is refused.
    """
    source = os.environ if environ is None else environ
    names = None if only is None else {variable_name(field) for field in only}
    return _settings_of(
        tuple(
            sorted(
                (name, value)
                for name, value in source.items()
                if name.startswith(SETTINGS_PREFIX) and (names is None or name in names)
            )
        )
    )


@functools.lru_cache(maxsize=32)
def _settings_of(variables: tuple[tuple[str, str], ...]) -> Settings:
    """:class:`Settings` from ``(name, value)`` pairs of ``EVALTASKS_*`` variables (only those: the environment of
    the process is not read here)."""
    fields = {name[len(SETTINGS_PREFIX) :].lower(): value for name, value in variables}
    fields = {field: value for field, value in fields.items() if field in Settings.model_fields}
    try:
        return Settings.model_validate(fields)  # validation only: BaseSettings' own sources are not read
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        value = fields.get(field, "")
        reason = str(error["msg"]).removeprefix("Value error, ")
        raise SettingsError(f"{variable_name(field)}={value!r}: {reason[:1].lower()}{reason[1:]}") from None


_TYPE_NAMES = {
    "int": "integer",
    "int | None": "integer",
    "float": "number",
    "bool": "yes/no",
    "Path | None": "path",
    "tuple[str, ...]": "names",
}


def default_text(field: str) -> str:
    """The default of the :class:`Settings` field ``field`` as the docs table shows it: ``unset`` for None, ``no``
    for False, ``none`` for an empty list, else the value (``10`` for 10.0)."""
    default = Settings.model_fields[field].default
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return "yes" if default else "no"
    if isinstance(default, tuple):
        return ", ".join(default) or "none"
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def markdown_table() -> str:
    """The table of docs/settings.md, one row per :class:`Settings` field in declaration order: variable, type,
    default (:func:`default_text`), what it does, the commands that read it. Ends with a newline."""
    rows = ["| Variable | Type | Default | What it does | Read by |", "|---|---|---|---|---|"]
    for field, info in Settings.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        annotation = str(info.annotation).replace("pathlib.", "").replace("typing.", "")
        for raw, name in _TYPE_NAMES.items():
            if annotation in (raw, f"<class '{raw}'>"):
                annotation = name
        rows.append(
            f"| `{variable_name(field)}` | {annotation} | `{default_text(field)}` | {info.description} | "
            f"{extra.get('commands', '')} |"
        )
    return "\n".join(rows) + "\n"
