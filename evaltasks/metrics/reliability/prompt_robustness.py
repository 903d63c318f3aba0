"""PromptRobustnessMetric: does the system answer perturbed inputs as it answers the original?

Source: eval-ai-library 0.8.2's ``PromptRobustnessMetric`` (no documentation page exists): outputs to
equivalent inputs compared by normalised edit similarity, ``similarity_threshold`` 0.6. Where evaltasks differs
(docs/metrics/reliability.md#promptrobustnessmetric): the variants are made and run by evaltasks (the suite's
``perturbations:``, the case's ``variants``), each variant is compared with the original (the library compares
every pair of a group it never forms: its ``evaluate`` scores any single case 1.0), and ``compare: verdict``
compares pass/fail instead of text. A case without variants is an input error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from evaltasks.embeddings.base import VectorTable
from evaltasks.metrics.base import BaseMetric, UnitFloat, check_threshold
from evaltasks.metrics.registry import register_metric
from evaltasks.metrics.reliability._similarity import similarity
from evaltasks.results import MetricResult
from evaltasks.test_case import EvalTestCase

COMPARE = ("output", "verdict")


def _verdict_metric(spec: BaseMetric | Mapping[str, Any] | None) -> BaseMetric | None:
    """The metric whose pass/fail ``compare: verdict`` compares: given, or built from a suite-style entry
    ``{metric: Name, ...arguments}``. Raises ValueError for anything else, or for a metric that needs
    embeddings or a judge (it is scored inside this metric, where neither is wired)."""
    if spec is None or isinstance(spec, BaseMetric):
        return _deterministic(spec)
    if not isinstance(spec, Mapping) or not isinstance(spec.get("metric"), str):
        raise ValueError(f"verdict_metric must be a metric or a mapping {{metric: Name, ...}}, got {spec!r}")
    from evaltasks.metrics.registry import get_metric_class

    arguments = {k: v for k, v in spec.items() if k != "metric"}
    try:
        cls = get_metric_class(spec["metric"])
    except KeyError as exc:
        raise ValueError(f"verdict_metric: {exc.args[0]}") from None
    try:
        return _deterministic(cls(**arguments))
    except TypeError as exc:
        raise ValueError(f"verdict_metric {spec['metric']}: {exc}") from None


def _deterministic(metric: BaseMetric | None) -> BaseMetric | None:
    """``metric``, unless it needs embeddings or a judge (ValueError)."""
    from evaltasks.metrics.judge.base import JudgeMetric

    if metric is not None and (isinstance(metric, JudgeMetric) or metric.embedding_namespace is not None):
        raise ValueError(
            f"verdict_metric {metric.name} needs embeddings or a judge; use a deterministic metric "
            "(ExactMatchMetric, ContainsMetric, ...)"
        )
    return metric


@register_metric("PromptRobustnessMetric")
class PromptRobustnessMetric(BaseMetric):
    """Score = variants that agree with the original / variants, over the case's ``variants``.

    With ``compare: output`` (default) a variant agrees when the edit similarity of its output and the
    original's (whitespace-stripped, lower-cased, ``1 - Levenshtein distance / longer length``; rapidfuzz) is at
    least ``similarity_threshold``. With ``compare: verdict`` it agrees when ``verdict_metric`` passes (or fails)
    it as it passes (or fails) the original: robustness of correctness rather than of wording.

    Args:
        threshold: minimum passing score, default 0.7 (eval-ai-library's).
        similarity_threshold: similarity from which two outputs agree, in [0, 1], default 0.6 (the library's).
        compare: ``output`` or ``verdict``.
        verdict_metric: with ``compare: verdict``, the metric whose verdicts are compared: a metric, or in a
            suite a mapping like a metric entry (``{metric: ExactMatchMetric, case_sensitive: false}``). It must
            score without embeddings or a judge (a deterministic metric).
        name: the name in results (default ``"PromptRobustnessMetric"``).

    Raises:
        ValueError: a threshold outside [0, 1], an unknown ``compare``, ``verdict`` without ``verdict_metric``
            (or a ``verdict_metric`` that cannot be built).

    A case needs ``variants`` (:meth:`validate_case`: the suite's ``perturbations:`` with a target fill them).
    ``evaluation_log`` keys: ``compare``, ``variants``, ``agreeing``, and per variant ``details``
    (``perturbation``, ``input``, ``agrees``, and ``similarity`` or ``verdict``).
    """

    required_fields: ClassVar[tuple[str, ...]] = ("variants",)
    version: ClassVar[str] = "1"

    def __init__(
        self,
        threshold: float = 0.7,
        similarity_threshold: UnitFloat = 0.6,
        compare: Literal["output", "verdict"] = "output",
        verdict_metric: BaseMetric | Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
    ) -> None:
        super().__init__(threshold, name=name)
        try:
            self.similarity_threshold = check_threshold(similarity_threshold)
        except ValueError:
            raise ValueError(f"similarity_threshold must be a number in [0, 1], got {similarity_threshold!r}") from None
        if compare not in COMPARE:
            raise ValueError(f"compare must be 'output' or 'verdict', got {compare!r}")
        self.compare = compare
        self.verdict_metric = _verdict_metric(verdict_metric)
        if compare == "verdict" and self.verdict_metric is None:
            raise ValueError("compare: verdict needs a verdict_metric (the metric whose pass/fail is compared)")

    def config(self) -> dict[str, Any]:
        """Constructor arguments (the verdict metric by its cache key)."""
        return {
            "threshold": self.threshold,
            "name": self.name,
            "similarity_threshold": self.similarity_threshold,
            "compare": self.compare,
            "verdict_metric": self.verdict_metric.cache_key() if self.verdict_metric is not None else None,
        }

    def validate_case(self, case: EvalTestCase) -> list[tuple[str, str]]:
        """A case needs at least one variant; with ``compare: verdict``, what the verdict metric needs."""
        problems = []
        if not case.variants:
            problems.append(
                ("variants", "has no perturbed variants (give the suite `perturbations:` and a target to run them)")
            )
        if self.verdict_metric is not None:
            problems += self.verdict_metric.validate_case(case)
        return problems

    def score_batch(
        self, cases: Sequence[EvalTestCase], vectors: Mapping[str, VectorTable] | None = None
    ) -> list[MetricResult]:
        """Compare each case's variants with it. Raises ValueError for a case without variants."""
        for case in cases:
            if not case.variants:
                raise ValueError(self.validate_case(case)[0][1])
        verdicts = self._verdicts(cases) if self.compare == "verdict" else None
        results = []
        for c, case in enumerate(cases):
            variants = case.variants or []
            details = []
            for v, variant in enumerate(variants):
                detail: dict[str, Any] = {"perturbation": variant.perturbation, "input": variant.input}
                if verdicts is not None:
                    original, theirs = verdicts[c][0], verdicts[c][v + 1]
                    detail.update(verdict=theirs, agrees=theirs == original)
                else:
                    sim = similarity(case.actual_output, variant.actual_output)
                    detail.update(similarity=sim, agrees=sim >= self.similarity_threshold)
                details.append(detail)
            agreeing = sum(1 for d in details if d["agrees"])
            basis = (
                f"{self.verdict_metric.name} verdict as the original's ({'pass' if verdicts[c][0] else 'fail'})"
                if verdicts is not None and self.verdict_metric is not None
                else f"output similar to the original's (edit similarity >= {self.similarity_threshold:g})"
            )
            reason = f"{agreeing} of {len(variants)} perturbed variants give the same {basis}."
            log = {"compare": self.compare, "variants": len(variants), "agreeing": agreeing, "details": details}
            results.append(MetricResult.scored(self.name, agreeing / len(variants), self.threshold, reason, log))
        return results

    def _verdicts(self, cases: Sequence[EvalTestCase]) -> list[list[bool]]:
        """Per case, the verdict metric's pass/fail of the original then of each variant (one batch for all).
        Raises ValueError when the verdict metric did not score one of them."""
        assert self.verdict_metric is not None
        flat: list[EvalTestCase] = []
        for case in cases:
            flat.append(case)
            flat += [
                case.model_copy(update={"input": v.input, "actual_output": v.actual_output, "generation": v.generation})
                for v in case.variants or []
            ]
        scored = self.verdict_metric.score_batch(flat)
        unscored = [r for r in scored if r.score is None]
        if unscored:
            raise ValueError(f"verdict_metric {self.verdict_metric.name} did not score a variant: {unscored[0].reason}")
        out, i = [], 0
        for case in cases:
            n = 1 + len(case.variants or [])
            out.append([r.success for r in scored[i : i + n]])
            i += n
        return out
