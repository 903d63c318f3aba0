"""The checks a command makes before it starts Prefect or scores anything: each returns the one-line message of
a usage mistake (the command exits 2 with it) or None. Also the environment defaults set before Prefect is
imported (:func:`quiet_prefect_defaults`)."""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import sys
import tempfile
from pathlib import Path

from evaltasks._env import TEMPORARY_SERVER_DEFAULTS, env_value, set_default_env


def quiet_prefect_defaults() -> None:
    """Defaults (overridable by the environment) that keep Prefect quiet: no shutdown tracebacks, no telemetry
    (neither the server's analytics nor the client's, whose first-run notice printed on the terminal).

    A variable set to a blank value (an unset ``${{ vars.X }}`` in a CI workflow) counts as unset.
    """
    set_default_env("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
    set_default_env("PREFECT_LOGGING_LEVEL", "WARNING")
    # Prefect's client-side telemetry: its first import in a terminal prints a notice about it (and sends
    # events) unless DO_NOT_TRACK is set; evaltasks turns analytics off (docs/prefect.md#the-temporary-server-and-prefects-settings), so before Prefect is imported
    set_default_env("DO_NOT_TRACK", "1")
    set_default_env("TOKENIZERS_PARALLELISM", "false")
    set_default_env("DASK_LOGGING__DISTRIBUTED", "warning")
    for name, value in TEMPORARY_SERVER_DEFAULTS.items():  # start-up timeout and analytics, as evaltasks.tasks
        set_default_env(name, value)
    reread_prefect_settings()


def reread_prefect_settings() -> None:
    """Make Prefect read its settings again, and configure its logging again, when it was imported before
    :func:`quiet_prefect_defaults` changed the environment; does nothing when Prefect is not imported yet (a
    command's own process: Prefect then reads them when it is imported, as it always does).

    Prefect reads ``PREFECT_*`` into its global settings when it is imported and configures its logging handlers
    (levels, and the ``sys.stderr`` they write to) when ``prefect.main`` is; a program that imported Prefect and
    then calls :func:`evaltasks.cli.main` would otherwise run with neither the defaults above nor its current
    streams. Uses Prefect's own hooks: ``prefect.context.refresh_global_settings_context`` (what Prefect runs after
    its plugins change the environment) and ``prefect.logging.configuration.setup_logging(incremental=False)``.
    """
    if "prefect.context" not in sys.modules:
        return
    import prefect.context

    prefect.context.refresh_global_settings_context()
    if "prefect.main" in sys.modules:  # the import that configures Prefect's logging
        import prefect.logging.configuration

        prefect.logging.configuration.setup_logging(incremental=False)


def check_output_dir(path: Path, label: str = "--output-dir") -> str | None:
    """A message when reports (or, with another ``label``, a run's history) cannot be written to ``path``
    (checked before anything is scored)."""
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return f"{label} {path}: {existing} is a file, not a directory"
    if existing.exists() and not os.access(existing, os.W_OK | os.X_OK):
        return f"{label} {path}: {existing} is not writable"
    return _name_too_long(path, existing, label)


def _name_too_long(path: Path, existing: Path, label: str) -> str | None:
    """A message when a component of ``path`` is longer than its file system allows (``PC_NAME_MAX`` of the
    nearest existing directory ``existing``, else 255 bytes of UTF-8), which would fail only when reports are
    written."""
    try:
        limit = os.pathconf(existing, "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
    except (OSError, ValueError):
        limit = 255
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > limit:
            shown = part if len(part) <= 40 else part[:37] + "..."
            return (
                f"{label} {path}: the name {shown!r} is {size} bytes, longer than the {limit} bytes a file or "
                "directory name can have here"
            )
    return None


def use_default_output_dir(args: argparse.Namespace, suite_name: str) -> bool:
    """Without ``--output-dir``, set ``args.output_dir`` to the suite's own reports directory
    (:func:`evaltasks.engine.run.default_output_dir`); True when it did."""
    if args.output_dir is not None:
        return False
    from evaltasks.engine.run import default_output_dir  # startup: the engine loads pydantic and numpy

    args.output_dir = str(default_output_dir(suite_name))
    return True


def check_prefect_home() -> str | None:
    """A message when Prefect's home directory cannot be written (checked before anything imports Prefect).

    The directory is ``$PREFECT_HOME`` (default ``~/.prefect``): Prefect keeps its profiles, task cache and
    the temporary server's SQLite database there, and without write access its temporary server never
    starts (the run used to wait minutes, then blame the server). Writability is checked by creating an
    anonymous temporary file in the directory, or in its nearest existing ancestor when Prefect would create
    it (so nothing is left behind and a missing home is not created here): permission bits alone do not
    bind root, a read-only or immutable file system does. Returns None when Prefect can use the directory.
    """
    home = Path(env_value("PREFECT_HOME") or "~/.prefect").expanduser()
    existing = home
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file, not a directory" if existing == home else f"cannot be created, {existing} is a file"
        return f"PREFECT_HOME {home}: {what}; set PREFECT_HOME to a writable directory"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        what = "is not writable" if existing == home else f"cannot be created in {existing}"
        return f"PREFECT_HOME {home}: {what} ({exc.strerror or exc}); set PREFECT_HOME to a writable directory"
    return None


def check_deployment_name(name: str, flag: str) -> str | None:
    """A message when ``name`` cannot name a served Prefect deployment; ``flag`` says where it came from.

    Prefect's rules (``prefect.types.names``): not blank, none of the characters in ``BANNED_CHARACTERS``
    (``/ % & > <``). ``Flow.serve`` also looks the name up as a file path, so a name longer than a file
    name may be (255 bytes of UTF-8) fails there with ENAMETOOLONG.
    """
    from prefect.types.names import BANNED_CHARACTERS  # startup: Prefect only once a command needs it

    if not name.strip("' \""):
        return f"{flag}: a deployment name cannot be blank"
    banned = sorted({c for c in name if c in BANNED_CHARACTERS})
    if banned:
        return (
            f"{flag} '{name}': a Prefect deployment name cannot contain {' '.join(BANNED_CHARACTERS)} "
            f"(found {' '.join(banned)})"
        )
    if len(name.encode("utf-8")) > 255:
        return f"{flag}: a Prefect deployment name has at most 255 bytes (UTF-8), got {len(name.encode('utf-8'))}"
    return None


def check_cron(cron: str) -> str | None:
    """A message when ``cron`` is not a schedule Prefect accepts (its ``CronSchedule`` validation)."""
    from prefect.client.schemas.schedules import CronSchedule  # startup: Prefect only once a command needs it
    from pydantic import ValidationError

    try:
        CronSchedule(cron=cron, timezone="UTC")
    except ValidationError as exc:
        reason = str(exc.errors()[0].get("msg", "invalid")).removeprefix("Value error, ")
        return (
            f"--cron '{cron}': {reason}; a cron schedule has five fields, minute hour day-of-month "
            f'month day-of-week (UTC), e.g. "0 6 * * *"'
        )
    return None


def check_prefect_server() -> str | None:
    """A message when no Prefect server is configured (``PREFECT_API_URL``) or it does not answer ``/health``.

    A served deployment needs a lasting server: without one Prefect would start a temporary server that
    lives only as long as this process and never schedules a run. The health request fails fast (10 s).
    """
    from prefect.client.orchestration import get_client  # startup: Prefect only once a command needs it
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        return (
            "serve needs a running Prefect server and PREFECT_API_URL is not set: run `prefect server start` "
            "in another terminal and `prefect config set PREFECT_API_URL=http://127.0.0.1:4200/api` "
            "(or `prefect cloud login` for Prefect Cloud)"
        )
    with get_client(sync_client=True, httpx_settings={"timeout": 10.0}) as client:
        failure = client.api_healthcheck()
    if failure is not None:
        reason = (str(failure).strip().splitlines() or [type(failure).__name__])[0]
        reason = reason.split(" - For more information")[0].rstrip(".")  # httpx's one-line reason, no help link
        return (
            f"the Prefect server at {url} (PREFECT_API_URL) cannot be reached: {reason}; "
            "start it (`prefect server start`) or correct PREFECT_API_URL"
        )
    return None


# HOST:PORT of a cluster: a name or IPv4 address, or an IPv6 one in brackets ([::1]:6379); the port is checked apart
_HOST_PORT = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(\d{1,5})")
_DASK_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss")  # distributed's comm backends with HOST:PORT addresses
_WORKERS = re.compile(r"0*[1-9][0-9]*")  # ASCII digits: str.isdigit() also takes '²', which int() refuses


def _cluster_address(arg: str, schemes: tuple[str, ...]) -> bool:
    """Whether ``arg`` is ``HOST:PORT`` or ``SCHEME://HOST:PORT`` with one of ``schemes`` and a port in 1-65535."""
    scheme, sep, rest = arg.rpartition("://")
    if sep and scheme not in schemes:
        return False
    match = _HOST_PORT.fullmatch(rest)
    return match is not None and 1 <= int(match.group(1)) <= 65535


def check_task_runner(spec: str) -> str | None:
    """A message when ``spec`` names no usable task runner (checked without importing Prefect): an unknown kind,
    a missing integration package, or a worker count or cluster address that cannot work."""
    kind, _, arg = spec.partition(":")
    needs = {"threads": None, "processes": None, "dask": "prefect_dask", "ray": "prefect_ray"}
    if kind not in needs:
        return f"unknown task runner '{spec}': use threads, processes, dask, dask:ADDRESS or ray"
    module = needs[kind]
    if module and importlib.util.find_spec(module) is None:
        return f"task runner '{kind}' needs the {module.replace('_', '-')} package (pip install 'evaltasks[{kind}]')"
    if kind in ("threads", "processes") and arg and not _WORKERS.fullmatch(arg):
        return f"task runner '{spec}': the number of workers must be a positive integer"
    if kind == "dask" and arg and not (_WORKERS.fullmatch(arg) or _cluster_address(arg, _DASK_SCHEMES)):
        return (
            f"task runner '{spec}': give a positive number of local workers (dask:2) or a scheduler's address "
            "(dask:tcp://HOST:PORT)"
        )
    if kind == "ray" and arg and not (arg in ("auto", "local") or _cluster_address(arg, ("ray",))):
        return f"task runner '{spec}': give a Ray cluster's address (ray:HOST:PORT, ray:ray://HOST:PORT or ray:auto)"
    return None


def check_run_setup(args: argparse.Namespace) -> str | None:
    """A message for a setup mistake of ``run`` found before Prefect starts: a ``--max-cost`` below 0 (or NaN), or
    a reference index directory (``--index-dir``, else ``$EVALTASKS_INDEX_DIR``, else ``.evaltasks/index``) that
    is, or lies under, a file (it failed only once the flow opened the index, after Prefect's error lines)."""
    if args.max_cost is not None and not (args.max_cost >= 0 and not math.isnan(args.max_cost)):
        return f"--max-cost must be a number of USD of at least 0, got {args.max_cost:g}"
    from evaltasks.index import default_index_dir  # startup: the index package loads numpy

    directory = Path(args.index_dir) if args.index_dir else default_index_dir()
    from evaltasks.settings import get_settings

    configured = get_settings(only=["index_dir"]).index_dir is not None
    label = (
        "--index-dir" if args.index_dir else ("$EVALTASKS_INDEX_DIR" if configured else "the reference index directory")
    )
    existing = directory
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        return f"{label} {directory}: {existing} is a file, not a directory"
    return None


def configured_server() -> bool:
    """Whether ``PREFECT_API_URL`` names a server (the user's own: the CLI connects to it, starts none)."""
    from prefect.settings import PREFECT_API_URL  # startup: Prefect only once a command needs it

    return bool(PREFECT_API_URL.value())


def check_configured_server() -> str | None:
    """A message when ``PREFECT_API_URL`` names a server that does not answer (serve's check,
    :func:`check_prefect_server`): e.g. the variable is still exported after that server was stopped. None
    when it answers or none is configured."""
    if not configured_server():
        return None
    problem = check_prefect_server()
    return None if problem is None else problem + " (or unset it: evaltasks run then starts its own temporary server)"


def check_concurrency_limit(name: str) -> str | None:
    """A message when the Prefect server the run uses (``PREFECT_API_URL``, else its temporary server, which must
    answer already) holds no global concurrency limit ``name`` (``--concurrency-limit``): the embedding tasks would
    fail on it one by one, after Prefect's error lines (docs/prefect.md#concurrency)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    try:
        with get_client(sync_client=True) as client:
            limit = client.read_global_concurrency_limit_by_name(name)
        if limit.limit < 1:  # every task asks for one slot: Prefect refuses a request above the limit (422)
            return (
                f"--concurrency-limit {name}: its limit is {limit.limit}, so no embedding task could take a slot: "
                f"raise it (`prefect gcl update {name} --limit 4`) or run without the flag"
            )
    except ObjectNotFound:
        create = f"`prefect gcl create {name} --limit 4`"
        if configured_server():
            return (
                f"--concurrency-limit {name}: the Prefect server at PREFECT_API_URL has no global concurrency limit "
                f"named {name}: create it ({create}) or run without the flag"
            )
        return (
            f"--concurrency-limit {name}: this run's temporary Prefect server has no global concurrency limit named "
            f"{name}: a limit is shared by the runs of one Prefect server, so start one (`prefect server start`), "
            f"create the limit there ({create}) and set PREFECT_API_URL, or run without the flag"
        )
    return None


def check_settings() -> str | None:
    """The one-line problem with an ``EVALTASKS_*`` variable (:class:`~evaltasks.settings.Settings`; exit 2), or
    None: checked before any work, so no command starts on a value it would reject later (docs: settings.md)."""
    from evaltasks.settings import SettingsError, get_settings  # startup: pydantic-settings, after the hand-over

    try:
        get_settings()
    except SettingsError as exc:
        return str(exc)
    return None
