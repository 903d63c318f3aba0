"""Intervals and paired significance tests (README, "Uncertainty and regressions").

Every computation goes through scipy (``scipy.stats.binomtest`` and its ``proportion_ci(method="wilson")``,
``scipy.stats.bootstrap``); the tests check the numbers against statsmodels. Bootstraps are seeded
(:data:`SEED`), so a rerun on the same results gives the same intervals.
"""

from __future__ import annotations

LEVEL = 0.95
RESAMPLES = 2000
SEED = 0
