"""Dask and Ray task runners whose workers report to this process's Prefect server.

A task submitted to Dask or Ray carries the flow run's Prefect settings with it, and the worker runs it under
them. When ``PREFECT_API_URL`` is unset, the flow process talks to a temporary server of its own, and those
settings name no server: every worker process would then start a temporary server of its own (tens of seconds
each on a 2-core machine) and record its task runs there, where nobody sees them. The runners here submit each
task with ``PREFECT_API_URL`` set to the flow process's temporary server instead, so workers on the same
machine report to it; workers on other machines need a server they can reach (``PREFECT_API_URL``:
docs/scaling.md, "Layout for 10,000,000 cases").
"""

from __future__ import annotations

import sys
from typing import Any

from prefect.settings import PREFECT_API_URL, temporary_settings


def temporary_server_api_url() -> str | None:
    """The API URL of the temporary Prefect server this process runs, or None.

    None also when ``PREFECT_API_URL`` is set (the settings already name a server) or no temporary server runs
    here (none was needed yet: Prefect starts it with the first API call).
    """
    if PREFECT_API_URL.value():
        return None
    running = sys.modules.get("prefect.server.api.server")
    if running is None:
        return None
    servers = list(running.SubprocessASGIServer._instances.values())
    return str(servers[0].api_url) if servers else None


class WorkersReportHere:
    """Mixin for a Prefect task runner: tasks are submitted with ``PREFECT_API_URL`` naming this process's
    temporary server (:func:`temporary_server_api_url`), so the serialized settings the workers run under do."""

    def submit(self, task: Any, parameters: dict[str, Any], wait_for: Any = None, dependencies: Any = None) -> Any:
        """Submit ``task`` as the base runner does, under settings that name this process's server."""
        url = temporary_server_api_url()
        if url is None:
            return super().submit(task, parameters, wait_for=wait_for, dependencies=dependencies)  # type: ignore[misc]
        with temporary_settings(updates={PREFECT_API_URL: url}):
            return super().submit(task, parameters, wait_for=wait_for, dependencies=dependencies)  # type: ignore[misc]
