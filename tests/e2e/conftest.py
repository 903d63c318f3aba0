"""Whole-system runs: a subprocess ``evaltasks run`` end to end, the examples, deployments, clusters.

Every test here is ``slow`` (pyproject.toml's markers): ``pytest -m "not slow"`` leaves this folder out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before tests/conftest.py sorts the slow tests first
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.slow)
