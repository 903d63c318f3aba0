"""Prefect flows of evaltasks (installed as ``evaltasks.flows``; the source lives in ``flows/``)."""

from evaltasks.flows.evaluate_suite import evaluate_suite

__all__ = ["evaluate_suite"]
