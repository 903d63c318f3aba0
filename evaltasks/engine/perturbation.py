"""The generate stage's perturbed variants: each case's input perturbed (the suite's ``perturbations:``), the
target run on each variant, and the outputs attached to the case's ``variants`` (PromptRobustnessMetric;
docs/metrics/reliability.md#perturbations). This module never imports Prefect.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from evaltasks.engine import progress as _progress
from evaltasks.engine.generation import TargetCases
from evaltasks.engine.stream import chunks, stream_batches
from evaltasks.metrics.reliability._perturbations import case_variants
from evaltasks.test_case import EvalTestCase, Variant

if TYPE_CHECKING:
    from evaltasks.metrics.reliability._perturbations import PerturbationSpec
    from evaltasks.targets.generate import GeneratedCase

Submit = Callable[[Sequence[EvalTestCase]], Callable[[], "list[GeneratedCase]"]]
"""Starts generating one output per case of a batch; returns what collects them."""


def add_variants(
    part: TargetCases,
    cases: Sequence[EvalTestCase],
    spec: PerturbationSpec,
    submit: Submit,
    batch_size: int,
) -> int:
    """Run ``part``'s target on ``spec.count`` perturbed variants of each of ``cases`` (``submit``: batches of
    ``batch_size`` variants, one in flight; each output counted on the stage's progress) and give every sample of
    each case its :class:`Variant` list. A case
    one of whose variants failed to generate is recorded in ``part.failed`` with the reason (not scored).

    Returns:
        the number of variants generated (stored ones included).
    """
    made: list[tuple[int, str, EvalTestCase]] = []
    for row, case in enumerate(cases):
        for kinds, text in case_variants(case.input or "", spec.count, spec.seed, spec.kinds):
            made.append((row, kinds, case.model_copy(update={"input": text})))
    outputs: list[Any] = []
    for _, done in stream_batches(
        chunks(range(len(made)), max(1, batch_size)),
        lambda rows: submit([made[i][2] for i in rows]),
        1,
    ):
        outputs.extend(done)
        _progress.advance(len(done))
    per_case: list[list[Variant]] = [[] for _ in cases]
    failures: dict[int, str] = {}
    for (row, kinds, variant_case), generated in zip(made, outputs, strict=True):
        if generated.error is not None:
            failures.setdefault(row, f"the perturbed variant {variant_case.input!r} failed: {generated.error}")
            continue
        per_case[row].append(
            Variant(
                perturbation=kinds,
                input=variant_case.input or "",
                actual_output=generated.case.actual_output,
                generation=generated.case.generation,
            )
        )
    k = part.samples
    for i, case in enumerate(part.cases):
        row = i // k
        part.cases[i] = case.model_copy(update={"variants": per_case[row]})
        if row in failures and i not in part.failed:
            part.failed[i] = failures[row]
    part.requests += sum(int(g.requested) for g in outputs)
    return len(outputs)
