"""Dask and Ray task runners whose workers report to this process's Prefect server.

A task submitted to Dask or Ray carries the flow run's Prefect settings with it, and the worker runs it under
them. When ``PREFECT_API_URL`` is unset, the flow process talks to a temporary server of its own, and those
settings name no server: every worker process would then start a temporary server of its own (tens of seconds
each on a 2-core machine) and record its task runs there, where nobody sees them. The runners here submit each
task with ``PREFECT_API_URL`` set to the flow process's temporary server instead when every worker runs on this
machine (the temporary server listens on 127.0.0.1). Workers on other machines need a server they can reach
(``PREFECT_API_URL``: docs/scaling.md); without one they are left as before, and the run logs a warning.
"""

from __future__ import annotations

import socket
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


def is_this_machine(host: str) -> bool:
    """Whether ``host`` (a name or an IP address) is an address of this machine: a socket can be bound to it."""
    try:
        addresses = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except OSError:
        return False
    for family, kind, _, _, address in addresses:
        try:
            with socket.socket(family, kind) as probe:
                probe.bind((address[0], 0))
            return True
        except OSError:
            continue
    return False


class WorkersReportHere:
    """Mixin for a Prefect task runner: tasks are submitted with ``PREFECT_API_URL`` naming this process's
    temporary server (:func:`temporary_server_api_url`) when all workers run on this machine
    (:meth:`worker_hosts`), so the serialized settings the workers run under do."""

    def worker_hosts(self) -> set[str]:
        """The hosts (names or IP addresses) the cluster's workers run on."""
        raise NotImplementedError

    def _workers_here(self) -> bool:
        known = getattr(self, "_evaltasks_workers_here", None)
        if known is None:
            hosts = self.worker_hosts()
            known = all(is_this_machine(host) for host in hosts)
            if not known:
                self.logger.warning(  # type: ignore[attr-defined]
                    "workers on %s cannot report to this run's temporary Prefect server (127.0.0.1): each starts "
                    "one of its own; set PREFECT_API_URL to a server they can reach (docs/scaling.md)",
                    ", ".join(sorted(host for host in hosts if not is_this_machine(host))),
                )
            self._evaltasks_workers_here = known
        return known

    def submit(self, task: Any, parameters: dict[str, Any], wait_for: Any = None, dependencies: Any = None) -> Any:
        """Submit ``task`` as the base runner does, under settings that name this process's server."""
        url = temporary_server_api_url()
        if url is None or not self._workers_here():
            return super().submit(task, parameters, wait_for=wait_for, dependencies=dependencies)  # type: ignore[misc]
        with temporary_settings(updates={PREFECT_API_URL: url}):
            return super().submit(task, parameters, wait_for=wait_for, dependencies=dependencies)  # type: ignore[misc]
