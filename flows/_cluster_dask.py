"""prefect-dask's task runner, its workers reporting to this process's Prefect server (see ``_cluster``)."""

from __future__ import annotations

from urllib.parse import urlsplit

from prefect_dask.task_runners import DaskTaskRunner as _DaskTaskRunner

from evaltasks.flows._cluster import WorkersReportHere


class DaskTaskRunner(WorkersReportHere, _DaskTaskRunner):
    """:class:`prefect_dask.DaskTaskRunner` whose workers report to this process's temporary Prefect server."""

    def worker_hosts(self) -> set[str]:
        """The hosts of the workers registered with the scheduler now (a local cluster's: 127.0.0.1)."""
        try:
            workers = self.client.scheduler_info(n_workers=-1)["workers"]
        except TypeError:  # distributed before 2025.1 lists every worker without being asked
            workers = self.client.scheduler_info()["workers"]
        return {urlsplit(address).hostname or address for address in workers}
