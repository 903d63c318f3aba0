"""The perturbation generator (docs/metrics/reliability.md#perturbations): eval-ai-library's noise transforms and
their random draws, so a seeded generator gives the library's own variants; kinds restricted; each case's
variants reproducible from the seed and its input alone."""

from __future__ import annotations

import pytest

from evaltasks.metrics.reliability._perturbations import KINDS, case_variants
from evaltasks.reliability_metrics import PerturbationGenerator

TEXT = "Find all meetings next week."

# eval-ai-library 0.8.2's PerturbationGenerator(seed).add_noise(TEXT), three calls per seed, as its code printed
# them (eval_lib/reliability_metrics/perturbation_generator.py run on this text).
LIBRARY = {
    0: ["Find all meeting next week", "find all meetings next week", "  Find   all meetings next week."],
    1: ["Find all meeting next week.", "Find all meeting snext week", "Find   all meetings next week"],
    3: ["find all meetings next week.", "Find   all meeting next week.", "find all meetings next week."],
    4: ["  Find all   meetings   next week.", "Find all emetings next week", "find al lmetings next week."],
}


@pytest.mark.parametrize("seed", sorted(LIBRARY))
def test_a_seeded_generator_gives_the_library_s_variants(seed: int) -> None:
    generator = PerturbationGenerator(seed)
    assert [generator.add_noise(TEXT) for _ in range(3)] == LIBRARY[seed]


def test_each_kind_does_what_its_name_says() -> None:
    for seed in range(30):
        kinds, text = PerturbationGenerator(seed, ["casing"]).perturb(TEXT)
        assert kinds == "casing" and text in (TEXT.lower(), "f" + TEXT[1:])
        kinds, text = PerturbationGenerator(seed, ["punctuation"]).perturb(TEXT)
        assert (kinds, text) == ("punctuation", TEXT[:-1])
        kinds, text = PerturbationGenerator(seed, ["spacing"]).perturb(TEXT)
        assert kinds == "spacing" and text.split() == TEXT.split()
        kinds, text = PerturbationGenerator(seed, ["typos"]).perturb(TEXT)
        assert kinds == "typos" and abs(len(text) - len(TEXT)) <= 2 and text[0] == "F"


def test_case_variants_depend_on_the_seed_and_the_input_only() -> None:
    first = case_variants(TEXT, 4, seed=1)
    assert case_variants(TEXT, 4, seed=1) == first  # reproducible
    assert case_variants(TEXT, 4, seed=2) != first
    assert len(first) == 4 and all(set(k.split("+")) <= set(KINDS) for k, _ in first)
    two = case_variants(TEXT, 4, seed=1, kinds=["casing", "spacing"])
    assert all(set(k.split("+")) <= {"casing", "spacing"} for k, _ in two)
    with pytest.raises(ValueError, match="perturbation kinds"):
        PerturbationGenerator(0, ["shouting"])
