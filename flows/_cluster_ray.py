"""prefect-ray's task runner, its workers reporting to this process's Prefect server (see ``_cluster``)."""

from __future__ import annotations

import ray
from prefect_ray import RayTaskRunner as _RayTaskRunner

from evaltasks.flows._cluster import WorkersReportHere


class RayTaskRunner(WorkersReportHere, _RayTaskRunner):
    """:class:`prefect_ray.RayTaskRunner` whose workers report to this process's temporary Prefect server."""

    def worker_hosts(self) -> set[str]:
        """The addresses of the cluster's live nodes."""
        return {str(node["NodeManagerAddress"]) for node in ray.nodes() if node.get("Alive")}
