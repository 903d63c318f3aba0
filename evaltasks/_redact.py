"""Secrets never reach a report (docs/reports.md#secrets-in-reports): one registry of the values to hide, and
:func:`redact`, which replaces each of them with ``***``.

The secrets are:

- the values of :data:`SECRET_VARIABLES` (``OPENAI_API_KEY``, ``AZURE_OPENAI_API_KEY``, ``PREFECT_API_KEY``) and of
  every variable named in ``EVALTASKS_SECRET_VARIABLES`` (comma- or space-separated names: e.g. a header value
  your own metric reads from the environment), read from ``os.environ`` at each call, so a worker process
  (the ``processes`` runner, Dask, Ray) that inherits the environment redacts the same values;
- every value passed to :func:`register`: the judge client and the OpenAI embedding provider register the key
  they were given (``api_key`` in Python), in the process that builds them (a worker process too).

A value shorter than :data:`MIN_LENGTH` characters is never redacted (a key of ``ollama`` or ``x`` would
replace every such word in every reason); real API keys are far longer. Besides the value itself, its common
encodings are replaced: JSON-escaped, URL-encoded (``%XX`` and ``+`` for spaces) and HTML-escaped.

Redaction happens where an exception becomes text (:class:`~evaltasks.errors.EvalTasksError` messages, errored
and skipped reasons, the index's warnings, the CLI's error lines and its traceback file) and where a target's
answer enters the run (:func:`redact_nested`, :mod:`evaltasks.targets.generate`), before any result is returned
from a task, so no Prefect state, result or report carries a secret; :func:`install_log_redaction`
covers log records (Prefect's console and API log handlers included) by redacting each record as it is made.

Standard library only: this is the lowest layer (docs/architecture.md#architecture).
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import threading
import urllib.parse
from collections.abc import Iterable

SECRET_VARIABLES = ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "PREFECT_API_KEY")
# Names of more variables whose values are secrets (evaltasks.settings.Settings.secret_variables). Read here with the
# standard library, not through evaltasks.settings: redaction runs inside the construction of every evaltasks error,
# so it must never fail on an unrelated bad setting, and this module is the lowest layer (imported by `import
# evaltasks`, which loads no pydantic).
EXTRA_VARIABLES = "EVALTASKS_SECRET_VARIABLES"
MIN_LENGTH = 8  # shorter values are not redacted: too many false hits in ordinary text
MASK = "***"

_registered: set[str] = set()
_lock = threading.Lock()
_cache: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # (the raw values, their forms to replace)


def register(value: object) -> None:
    """Add ``value`` (a secret: an API key, a header value) to the values :func:`redact` hides, for this
    process. Values that are not strings, or shorter than :data:`MIN_LENGTH` once stripped, are ignored."""
    if isinstance(value, str) and len(value.strip()) >= MIN_LENGTH:
        with _lock:
            _registered.add(value.strip())


def secret_variable_names(environ: os._Environ[str] | dict[str, str] | None = None) -> list[str]:
    """The names of the environment variables holding secrets: :data:`SECRET_VARIABLES` plus those named in
    ``EVALTASKS_SECRET_VARIABLES`` (comma- or whitespace-separated), in that order, without repeats."""
    env = os.environ if environ is None else environ
    named = env.get(EXTRA_VARIABLES)
    if not named:
        return list(SECRET_VARIABLES)
    return list(dict.fromkeys([*SECRET_VARIABLES, *variable_names(named)]))


def variable_names(text: str) -> list[str]:
    """The names in ``text``, separated by commas or whitespace, in order, without repeats."""
    return list(dict.fromkeys(name for name in re.split(r"[,\s]+", text) if name))


# An Authorization header's value: a scheme, then the credentials, which an app may echo without the scheme
_SCHEMED = re.compile(r"(?:Bearer|Basic|Token|Bot|Digest|ApiKey)\s+(\S+)", re.IGNORECASE)


def secret_values(environ: os._Environ[str] | dict[str, str] | None = None) -> list[str]:
    """The secrets now known (the registered ones and those of :func:`secret_variable_names` in the
    environment), each at least :data:`MIN_LENGTH` characters, longest first. A value of an Authorization
    header's form (``Bearer TOKEN``, ``Basic ...``: :data:`_SCHEMED`) counts with its credentials alone too."""
    env = os.environ if environ is None else environ
    values = {value.strip() for name in secret_variable_names(env) if (value := env.get(name))}
    with _lock:
        values |= _registered
    values |= {match.group(1) for v in values if (match := _SCHEMED.fullmatch(v))}
    return sorted((v for v in values if len(v) >= MIN_LENGTH), key=lambda v: (-len(v), v))


def _forms(values: Iterable[str]) -> tuple[str, ...]:
    """Each value and its JSON-escaped, URL-encoded and HTML-escaped forms, longest first, without repeats."""
    forms: set[str] = set()
    for value in values:
        forms.update(
            (
                value,
                json.dumps(value)[1:-1],
                json.dumps(value, ensure_ascii=False)[1:-1],
                urllib.parse.quote(value, safe=""),
                urllib.parse.quote_plus(value),
                html.escape(value),
            )
        )
    return tuple(sorted(forms, key=lambda v: (-len(v), v)))


def _current_forms() -> tuple[str, ...]:
    global _cache
    values = tuple(secret_values())
    cached_values, forms = _cache
    if values != cached_values:
        forms = _forms(values)
        _cache = (values, forms)
    return forms


def redact(text: str) -> str:
    """``text`` with every secret (and each of its encodings) replaced by ``***``. Not a string: returned as
    it is. About a microsecond when no secret is set; meant for messages, not for every case's text."""
    if not isinstance(text, str) or not text:
        return text
    return _masked(text, _current_forms())


def _masked(text: str, forms: tuple[str, ...]) -> str:
    """``text`` with each of ``forms`` replaced by ``***``; the same object when none occurs in it."""
    for form in forms:
        if form in text:
            text = text.replace(form, MASK)
    return text


def secrets_configured() -> bool:
    """Whether any secret is known now (:func:`secret_values`): a cheap test before walking a large value."""
    return bool(_current_forms())


def redact_nested(value: object) -> object:
    """``value`` (JSON-like: dicts, lists, tuples, strings, other scalars) with :func:`redact` applied to every
    string in it, keys included; the very same object when no string in it holds a secret (or none is set)."""
    forms = _current_forms()  # once for the whole value: finding them reads the environment
    return _redact_nested(value, forms) if forms else value


def _redact_nested(value: object, forms: tuple[str, ...]) -> object:
    if isinstance(value, str):
        return _masked(value, forms)
    if isinstance(value, dict):
        items = [(_redact_nested(k, forms), _redact_nested(v, forms)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)):
            return value
        redacted: dict[object, object] = {}
        for key, item in items:  # a key redacted into another key's name is kept apart: "*** (2)"
            unique, n = key, 1
            while unique in redacted:
                n += 1
                unique = f"{key} ({n})"
            redacted[unique] = item
        return redacted
    if isinstance(value, (list, tuple)):
        members = [_redact_nested(item, forms) for item in value]
        if all(r is item for r, item in zip(members, value, strict=True)):
            return value
        return type(value)(members)
    return value


def _redact_record(record: logging.LogRecord) -> None:
    """Replace ``record``'s message (and its formatted exception) with the redacted text, when it holds a
    secret."""
    if not _current_forms():
        return
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a record whose arguments do not format is left for logging to report
        return
    clean = redact(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
    elif record.exc_text:
        record.exc_text = redact(record.exc_text)


_installed = False


def install_log_redaction() -> None:
    """Make every log record of this process (evaltasks', Prefect's, any library's) redacted when it is made
    (a wrapper around :func:`logging.getLogRecordFactory`), so every handler, Prefect's API log handler
    (the run's logs in its database) included, only sees redacted text. Idempotent."""
    global _installed
    with _lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: object, **kwargs: object) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            _redact_record(record)
            return record

        logging.setLogRecordFactory(factory)
        _installed = True
