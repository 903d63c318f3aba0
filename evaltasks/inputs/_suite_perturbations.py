"""A suite's ``perturbations:`` block: perturbed variants of each input, run through the target
(PromptRobustnessMetric; docs/metrics/reliability.md#perturbations)::

    perturbations:
      kinds: [typos, casing, spacing, punctuation]   # default: all four
      count: 3                                       # variants per case
      seed: 0
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PerturbationKind = Literal["typos", "casing", "spacing", "punctuation"]
ALL_KINDS: tuple[PerturbationKind, ...] = ("typos", "casing", "spacing", "punctuation")


class PerturbationSpec(BaseModel):
    """How each case's input is perturbed: ``count`` variants, each one or two of ``kinds`` applied at random
    (eval-ai-library's noise generator), reproducible from ``seed`` and the input."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kinds: list[PerturbationKind] = Field(
        default_factory=lambda: list(ALL_KINDS),
        min_length=1,
        description="The perturbations a variant may use: typos, casing, spacing, punctuation.",
    )
    count: int = Field(default=3, ge=1, le=20, description="Variants per case, each run through the target.")
    seed: int = Field(
        default=0, description="Seeds the random choices (with each input): reruns get the same variants."
    )
