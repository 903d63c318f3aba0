"""prefect-ray's task runner, its workers reporting to this process's Prefect server (see ``_cluster``)."""

from __future__ import annotations

from typing import Any

import ray
import ray.cloudpickle
from prefect_ray import RayTaskRunner as _RayTaskRunner

from evaltasks.flows._cluster import WorkersReportHere
from evaltasks.metrics.registry import pickle_users_modules_by_value


class RayTaskRunner(WorkersReportHere, _RayTaskRunner):
    """:class:`prefect_ray.RayTaskRunner` whose workers report to this process's temporary Prefect server, and
    whose tasks carry the users' own modules (a suite folder's metrics and python targets) by value, as the other
    runners' do: Ray pickles with its own copy of cloudpickle, whose by-value registry is its own."""

    def submit(self, task: Any, parameters: dict[str, Any], wait_for: Any = None, dependencies: Any = None) -> Any:
        """Submit ``task`` with the users' modules registered by value with Ray's pickler."""
        pickle_users_modules_by_value(ray.cloudpickle)
        return super().submit(task, parameters, wait_for=wait_for, dependencies=dependencies)

    def worker_hosts(self) -> set[str]:
        """The addresses of the cluster's live nodes."""
        return {str(node["NodeManagerAddress"]) for node in ray.nodes() if node.get("Alive")}
