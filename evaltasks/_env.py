"""Environment variables as evaltasks reads them: an empty (or blank) variable counts as unset.

CI systems export variables that are defined but empty (an unset GitHub Actions ``${{ vars.X }}`` expands to
``""``). Taken literally, ``OPENAI_BASE_URL=""`` would send every request to a blank endpoint, so every read
of a variable by the library goes through :func:`env_value`, and values meant for a client library are passed
to it explicitly, so it never falls back to reading the empty variable itself.
"""

from __future__ import annotations

import os

# The prefix of evaltasks' own variables, all declared in evaltasks.settings.Settings (docs: settings.md). The names
# below are those read by the two standard-library readers that do not import pydantic-settings (evaltasks.supervisor,
# evaltasks.server.client; the reason is in evaltasks.settings) and by the code that sets them for child processes.
SETTINGS_PREFIX = "EVALTASKS_"
STOP_GRACE_S_VARIABLE = SETTINGS_PREFIX + "STOP_GRACE_S"  # Settings.stop_grace_s
NO_SERVER_VARIABLE = SETTINGS_PREFIX + "NO_SERVER"  # Settings.no_server
RUN_STATE_VARIABLE = SETTINGS_PREFIX + "RUN_STATE"  # Settings.run_state
SERVE_VERDICT_VARIABLE = SETTINGS_PREFIX + "SERVE_VERDICT"  # Settings.serve_verdict

# What evaltasks gives Prefect's temporary server unless the user set it: 120 s to start (Prefect's 20 s is too
# tight on a busy machine) and no analytics (their heartbeat fails with "database is locked" while the server
# starts). The CLI and :mod:`evaltasks.tasks` both apply these.
TEMPORARY_SERVER_DEFAULTS: dict[str, str] = {
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}


def env_value(*names: str) -> str | None:
    """The value of the first of ``names`` that is set and not blank, stripped of surrounding whitespace;
    None when none is (unset, ``""`` or only whitespace)."""
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip():
            return value.strip()
    return None


def flag_value(text: str) -> bool:
    """A yes/no variable's value: ``0``, ``false``, ``no`` and ``off`` (any case, surrounding whitespace ignored)
    are False, any other text True."""
    return text.strip().lower() not in ("0", "false", "no", "off")


def set_default_env(name: str, value: str) -> None:
    """Set the variable ``name`` to ``value`` unless it already has a non-blank value (a blank one counts as
    unset, as in :func:`env_value`, and is replaced)."""
    if env_value(name) is None:
        os.environ[name] = value


def drop_blank_env(prefix: str) -> list[str]:
    """Remove the variables whose names start with ``prefix`` and whose values are blank, so that a library
    reading them itself (Prefect reads every ``PREFECT_*`` variable) sees them as unset, not as ``""``.

    Returns the names removed, sorted.
    """
    blank = sorted(name for name, value in os.environ.items() if name.startswith(prefix) and not value.strip())
    for name in blank:
        del os.environ[name]
    return blank
