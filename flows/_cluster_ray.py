"""prefect-ray's task runner, its workers reporting to this process's Prefect server (see ``_cluster``)."""

from __future__ import annotations

from prefect_ray import RayTaskRunner as _RayTaskRunner

from evaltasks.flows._cluster import WorkersReportHere


class RayTaskRunner(WorkersReportHere, _RayTaskRunner):
    """:class:`prefect_ray.RayTaskRunner` whose workers report to this process's temporary Prefect server."""
