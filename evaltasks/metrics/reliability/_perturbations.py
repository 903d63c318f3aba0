"""Perturbed copies of an input (the suite's ``perturbations:``): typos, casing, spacing, punctuation.

The transforms and the order in which they draw from the random generator are eval-ai-library's
``PerturbationGenerator.add_noise`` (``eval_lib/reliability_metrics/perturbation_generator.py``): one or two of
the enabled kinds per variant, chosen at random, applied in the chosen order. What evaltasks adds: the kinds can
be restricted, and each case's variants come from a generator seeded with the suite's seed and the case's input,
so a case's variants do not change when other cases are added or reordered (docs/metrics/reliability.md#perturbations).
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

KINDS = ("typos", "casing", "spacing", "punctuation")
"""The perturbation kinds, in eval-ai-library's order of its transforms."""


class PerturbationGenerator:
    """Noise perturbations of text (eval-ai-library's ``PerturbationGenerator``, its deterministic part).

    Args:
        seed: the random generator's seed (None: not reproducible).
        kinds: the kinds a variant may use (default all of :data:`KINDS`).

    Raises:
        ValueError: an unknown kind, or no kind.
    """

    def __init__(self, seed: int | str | None = None, kinds: Sequence[str] = KINDS) -> None:
        unknown = [k for k in kinds if k not in KINDS]
        if unknown or not kinds:
            raise ValueError(f"perturbation kinds must be some of {', '.join(KINDS)}, got {list(kinds)!r}")
        self._rng = random.Random(seed)
        table: dict[str, Callable[[str], str]] = {
            "typos": self._add_typos,
            "casing": self._change_case,
            "spacing": self._add_extra_spaces,
            "punctuation": self._remove_punctuation,
        }
        self.kinds = [k for k in KINDS if k in kinds]
        self._transforms = [(k, table[k]) for k in self.kinds]

    def add_noise(self, text: str) -> str:
        """``text`` with one or two random transforms applied (eval-ai-library's ``add_noise``)."""
        return self.perturb(text)[1]

    def perturb(self, text: str) -> tuple[str, str]:
        """``(kinds applied joined by '+', perturbed text)``: one or two of the enabled transforms, in random
        order (the library draws ``randint(1, 2)`` then ``sample``)."""
        count = self._rng.randint(1, 2)
        chosen = self._rng.sample(self._transforms, min(count, len(self._transforms)))
        result = text
        for _, transform in chosen:
            result = transform(result)
        return "+".join(kind for kind, _ in chosen), result

    def _add_typos(self, text: str) -> str:
        """One or two character typos (swap, delete, insert) at letters past the first character."""
        if len(text) < 5:
            return text
        chars = list(text)
        for _ in range(self._rng.randint(1, min(2, len(chars) // 5))):
            pos = self._rng.randint(1, len(chars) - 2)
            if chars[pos].isalpha():
                action = self._rng.choice(["swap", "delete", "insert"])
                if action == "swap" and pos + 1 < len(chars):
                    chars[pos], chars[pos + 1] = chars[pos + 1], chars[pos]
                elif action == "delete":
                    chars.pop(pos)
                elif action == "insert":
                    chars.insert(pos, self._rng.choice(string.ascii_lowercase))
        return "".join(chars)

    def _change_case(self, text: str) -> str:
        """The whole text lower-cased, or only its first character."""
        if self._rng.choice(["lower", "first_lower"]) == "lower":
            return text.lower()
        return text[0].lower() + text[1:] if text else text

    def _add_extra_spaces(self, text: str) -> str:
        """Words re-joined by single spaces, each preceded by two more with probability 0.2."""
        return " ".join(("  " + w) if self._rng.random() < 0.2 else w for w in text.split())

    def _remove_punctuation(self, text: str) -> str:
        """A trailing ``.``, ``?`` or ``!`` removed."""
        return text[:-1] if text and text[-1] in ".?!" else text


def case_variants(text: str, count: int, seed: int, kinds: Sequence[str] = KINDS) -> list[tuple[str, str]]:
    """``count`` perturbed copies of ``text``: ``(kinds applied, text)`` each, from a generator seeded with
    ``seed`` and ``text`` itself (the same input always gets the same variants)."""
    generator = PerturbationGenerator(f"{seed}\0{text}", kinds)
    return [generator.perturb(text) for _ in range(count)]


PerturbationKind = Literal["typos", "casing", "spacing", "punctuation"]
ALL_KINDS: tuple[PerturbationKind, ...] = ("typos", "casing", "spacing", "punctuation")


class PerturbationSpec(BaseModel):
    """A suite's ``perturbations:`` block (and ``evaluate_sync(perturbations=...)``): each case's input perturbed
    into ``count`` variants, each with one or two of ``kinds`` applied at random (eval-ai-library's noise
    generator), reproducible from ``seed`` and the input::

        perturbations:
          kinds: [typos, casing, spacing, punctuation]   # default: all four
          count: 3                                       # variants per case
          seed: 0
    """

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
