"""The generate stage's reliability bookkeeping (docs/metrics/reliability.md#reliability-metrics): every sample of
a case gets the case's outputs as ``multi_outputs`` (a failed sample left out), the fields a target fills for
validation, and the perturbed variants' cost counted once per case in the run's spend."""

from __future__ import annotations

import pytest

from evaltasks import EvalTestCase, ExactMatchMetric, OutcomeConsistencyMetric, PromptRobustnessMetric
from evaltasks.engine.generation import GENERATED_FIELDS, Generated, TargetCases, fill_multi_outputs, filled_fields
from evaltasks.reliability_metrics import PerturbationSpec
from evaltasks.targets import PythonTarget
from evaltasks.test_case import Generation, Variant


def _target(repeat: int = 1) -> PythonTarget:
    return PythonTarget(lambda case: "x", repeat=repeat)


def _sample(text: str, sample: int, cost: float | None = None, variants: list[Variant] | None = None) -> EvalTestCase:
    return EvalTestCase(
        actual_output=text, generation=Generation(target="python", sample=sample, cost=cost), variants=variants
    )


def test_every_sample_carries_its_case_outputs_and_a_failed_sample_is_left_out() -> None:
    part = TargetCases(_target(3), [_sample(t, i % 3) for i, t in enumerate("abcdef")], list("123456"), samples=3)
    part.failed[4] = "timed out"  # the second sample of the second case
    fill_multi_outputs(part)
    assert [c.multi_outputs for c in part.cases] == [["a", "b", "c"]] * 3 + [["d", "f"]] * 3
    single = TargetCases(_target(), [_sample("a", 0)], ["1"], samples=1)
    fill_multi_outputs(single)
    assert single.cases[0].multi_outputs is None


def test_the_fields_a_target_fills() -> None:
    assert filled_fields([_target()]) == GENERATED_FIELDS and "agent_confidence" in GENERATED_FIELDS
    assert "multi_outputs" in filled_fields([_target(2)])
    assert "multi_outputs" not in filled_fields([_target(2), _target(1)])  # every target must repeat
    assert "variants" in filled_fields([_target()], PerturbationSpec())
    assert filled_fields([], PerturbationSpec()) == GENERATED_FIELDS  # no target: nothing generated
    assert [m.required_fields for m in (OutcomeConsistencyMetric(), PromptRobustnessMetric())] == [
        ("multi_outputs",),
        ("variants",),
    ]
    assert "variants" not in ExactMatchMetric.required_fields


def test_variant_costs_count_once_per_case() -> None:
    paid = Variant(perturbation="typos", input="q", actual_output="a", generation=Generation(target="python", cost=0.5))
    stored = Variant(
        perturbation="casing",
        input="Q",
        actual_output="a",
        generation=Generation(target="python", cost=0.25, cached=True),
    )
    cases = [_sample("a", s, cost=1.0, variants=[paid, stored]) for s in range(2)]
    generated = Generated([TargetCases(_target(2), cases, ["1", "1~2"], samples=2)])
    assert generated.spent == pytest.approx(2 * 1.0 + 0.5)  # both samples, the paid variant once
