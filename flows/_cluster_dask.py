"""prefect-dask's task runner, its workers reporting to this process's Prefect server (see ``_cluster``)."""

from __future__ import annotations

from prefect_dask import DaskTaskRunner as _DaskTaskRunner

from evaltasks.flows._cluster import WorkersReportHere


class DaskTaskRunner(WorkersReportHere, _DaskTaskRunner):
    """:class:`prefect_dask.DaskTaskRunner` whose workers report to this process's temporary Prefect server."""
