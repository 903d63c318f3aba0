"""prefect-ray's task runner, its workers reporting to this process's Prefect server (see ``_cluster``)."""

from __future__ import annotations

import logging
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

    def __enter__(self) -> RayTaskRunner:
        """Connect (``ray.init``), with token authentication on where ``ray start`` would turn it on
        (:func:`use_token_auth_like_ray_start`)."""
        use_token_auth_like_ray_start()
        super().__enter__()
        return self

    def submit(self, task: Any, parameters: dict[str, Any], wait_for: Any = None, dependencies: Any = None) -> Any:
        """Submit ``task`` with the users' modules registered by value with Ray's pickler."""
        pickle_users_modules_by_value(ray.cloudpickle)
        return super().submit(task, parameters, wait_for=wait_for, dependencies=dependencies)

    def worker_hosts(self) -> set[str]:
        """The addresses of the cluster's live nodes."""
        return {str(node["NodeManagerAddress"]) for node in ray.nodes() if node.get("Alive")}


def use_token_auth_like_ray_start() -> bool:
    """Turn Ray's token authentication on for this driver where ``ray start --head`` turns it on for its cluster:
    ``RAY_AUTH_MODE`` unset and a token available (``RAY_AUTH_TOKEN``, the file ``RAY_AUTH_TOKEN_PATH`` names, or
    ``~/.ray/auth_token``, which a local cluster of Ray 2.5x+ writes). Ray's driver does not, so such a cluster
    refused it ("Authentication token is missing or incorrect") and the run exited 3; a token sent to a cluster
    without authentication is ignored (docs/scaling.md#token-authentication). True when it did.

    The rule is Ray's own (``ray._private.authentication.authentication_token_setup``,
    ``maybe_enable_token_auth_if_token_available``, called here without the warning it logs for ``ray start``);
    a Ray without token authentication has no such function and nothing is done.
    """
    try:
        from ray._private.authentication import authentication_token_setup as token_setup
    except ImportError:
        return False
    quiet = logging.getLogger(token_setup.__name__)
    was_disabled, quiet.disabled = quiet.disabled, True  # its "Token authentication is enabled for this Ray cluster"
    try:
        return bool(token_setup.maybe_enable_token_auth_if_token_available(warn_if_disabled=False))
    finally:
        quiet.disabled = was_disabled
