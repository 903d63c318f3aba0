"""Targets side by side: each target of a run compared with the first, and the cases their verdicts split
(docs/targets.md#side-by-side).

A run with several targets (``targets:`` in the suite) scores every metric on every target's outputs. Each target
after the first is compared with the first (the reference) exactly as a run is compared with its baseline
(:mod:`evaltasks.engine.compare`, whose :class:`~evaltasks.engine.compare.ComparisonBuilder` does the work here:
no second copy of the statistics): cases paired by id, pass rates by the exact McNemar test, mean scores by a
paired test with a paired bootstrap interval, each with a verdict (``regressed``, ``improved``, ``inconclusive``
with its minimum detectable effect, ``no significant change``) at the suite's ``gate.alpha`` and
``gate.min_effect``. "Regressed" reads "worse than the reference", "improved" "better than the reference".

A case is **split** when the targets that evaluated it (skipped results left out) gave it different statuses
(``passed``, ``failed``, ``errored``); the report lists each split case with every target's answer.

With ``repeat: K`` a case's later samples have the ids ``ID~2``, ``ID~3``… (and their ``generation.sample``): each
is paired with the same sample of the other target, and, unless the dataset has a ``cluster`` column, a case's
samples form one cluster of the paired bootstrap and the paired mean-score test (they are not independent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from evaltasks.engine.compare import CHANGE_TEXT_LIMIT, Comparison, ComparisonBuilder, Verdict
from evaltasks.engine.options import DEFAULT_TOLERANCE
from evaltasks.engine.statistics import worst_verdict
from evaltasks.results import EvaluationResult, Status, TargetRun, TestCaseResult

SPLITS_KEPT = 1000
"""Split cases kept in a :class:`SideBySide` (results.json's ``side_by_side.splits``); ``split_cases`` counts all."""


def _cut(text: str | None) -> str | None:
    return text[:CHANGE_TEXT_LIMIT] if isinstance(text, str) else None


class TargetVersus(BaseModel):
    """One target of a side-by-side run.

    Attributes:
        target: the target's run (name, kind, fingerprint, its own summary: the metric table of its cases,
            requests, latency, cost).
        comparison: the target against the reference (the first target), in the baseline comparison's shape
            (:class:`~evaltasks.engine.compare.Comparison`, whose ``baseline`` names the reference and whose
            ``verdict`` reads "than the reference"); None for the reference itself.
    """

    target: TargetRun
    comparison: Comparison | None = None


class TargetAnswer(BaseModel):
    """One target's answer to a split case.

    Attributes:
        target: the target's name.
        status: the case's status on this target (``passed``, ``failed``, ``errored``, ``skipped``).
        output: the target's output (cut to :data:`~evaltasks.engine.compare.CHANGE_TEXT_LIMIT` characters;
            results.json's cases hold it whole).
        failing: the metrics that failed or errored on this answer, with their scores (None: errored).
        error: the first errored metric's error (e.g. why the generation failed), None when none errored.
    """

    target: str
    status: Status
    output: str | None = None
    failing: dict[str, float | None] = Field(default_factory=dict)
    error: str | None = None


class SplitCase(BaseModel):
    """A case the targets' verdicts split: the targets that evaluated it gave it different statuses.

    Attributes:
        case_id: the case id (``ID~K`` for a later sample of ``repeat: K``).
        input, expected_output: the case's question and expected answer or reference (cut as the outputs).
        answers: one per target that has the case, in the targets' order.
    """

    case_id: str
    input: str | None = None
    expected_output: str | None = None
    answers: list[TargetAnswer] = Field(default_factory=list)


class SideBySide(BaseModel):
    """The targets of a run side by side (results.json's ``side_by_side``; docs/targets.md#side-by-side).

    Attributes:
        reference: the first target's name, which the others are compared with.
        alpha, min_effect, tolerance: the tests' significance level, the smallest change that counts, and the
            per-case change list's tolerance (the suite's ``gate`` and ``--regression-tolerance``).
        targets: one :class:`TargetVersus` per target, in the suite's order (the reference first).
        verdict: the worst of the comparisons' verdicts (regressed > improved > inconclusive > no significant
            change): ``regressed`` when some target is significantly worse than the reference.
        split_cases: how many cases the targets' verdicts split; splits: the first :data:`SPLITS_KEPT` of them,
            in the reference's case order.
    """

    reference: str
    alpha: float = 0.05
    min_effect: float = 0.01
    tolerance: float = DEFAULT_TOLERANCE
    targets: list[TargetVersus] = Field(default_factory=list)
    verdict: Verdict = "no significant change"
    split_cases: int = 0
    splits: list[SplitCase] = Field(default_factory=list)


def _case_of(case: TestCaseResult) -> str:
    """The id of the dataset case ``case`` is a sample of: its id without the ``~N`` of a later sample of
    ``repeat: K`` (:func:`~evaltasks.engine.generation.sample_id`)."""
    sample = case.generation.sample if case.generation is not None else 0
    return case.id.rsplit("~", 1)[0] if sample and "~" in case.id else case.id


def _slim(case: TestCaseResult) -> TestCaseResult:
    """``case`` as the builder keeps it: its texts cut (its metric results shared, not copied)."""
    slim = TestCaseResult.from_metrics(
        case.id, _cut(case.input), _cut(case.actual_output) or "", case.metrics, _cut(case.expected_output)
    )
    slim.generation = case.generation
    return slim


def _baseline_doc(summary: Mapping[str, Any], cases: Iterable[TestCaseResult]) -> dict[str, Any]:
    """The reference target as a baseline results.json (the parsed shape :class:`ComparisonBuilder` reads)."""
    return {
        "summary": summary,
        "cases": [
            {
                "id": case.id,
                "status": case.status,
                "input": case.input,
                "expected_output": case.expected_output,
                "actual_output": case.actual_output,
                "metrics": [
                    {
                        "name": m.name,
                        "score": m.score,
                        "status": m.status,
                        "evaluation_log": {"unstable": True} if m.evaluation_log.get("unstable") is True else {},
                    }
                    for m in case.metrics
                ],
            }
            for case in cases
        ],
    }


def _answer(target: str, case: TestCaseResult) -> TargetAnswer:
    failing = {m.name: m.score for m in case.metrics if m.status in ("failed", "errored")}
    error = next((m.error for m in case.metrics if m.status == "errored" and m.error), None)
    return TargetAnswer(target=target, status=case.status, output=case.actual_output, failing=failing, error=error)


class SideBySideBuilder:
    """Builds a :class:`SideBySide` from a run's cases fed in batches (a streamed run): :meth:`add` each batch
    (any order; a case's target is its ``generation.target``, cases without a generation are ignored), then
    :meth:`finish` with the run's :class:`~evaltasks.results.TargetRun` list. Of each case only what the
    comparison needs is kept: its id, status, metric results and its texts cut to
    :data:`~evaltasks.engine.compare.CHANGE_TEXT_LIMIT` characters.

    Args:
        targets: the targets' names in the suite's order (the first is the reference); cases of other targets
            are ignored.
        alpha, min_effect, tolerance, allow_errors: as :class:`~evaltasks.engine.compare.ComparisonBuilder`'s.
        clusters: the dataset's ``cluster`` values, a mapping case id -> value or a list in the reference
            target's case order (one value per case id); None: each case (with all its samples) alone.

    Raises ValueError when ``tolerance`` is negative.
    """

    def __init__(
        self,
        targets: Sequence[str],
        *,
        alpha: float = 0.05,
        min_effect: float = 0.01,
        tolerance: float = DEFAULT_TOLERANCE,
        allow_errors: bool = False,
        clusters: Sequence[str | None] | Mapping[str, str | None] | None = None,
    ) -> None:
        if tolerance < 0:
            raise ValueError(f"tolerance must be >= 0, got {tolerance}")
        self.alpha, self.min_effect, self.tolerance, self.allow_errors = alpha, min_effect, tolerance, allow_errors
        self._cases: dict[str, dict[str, TestCaseResult]] = {name: {} for name in targets}
        self._ids: dict[str, str] = {}  # case id -> its dataset case's (samples share it)
        self._clusters = clusters

    def add(self, cases: Iterable[TestCaseResult]) -> None:
        """Keep a batch of the run's cases (those of the targets given)."""
        for case in cases:
            if case.generation is None:
                continue
            kept = self._cases.get(case.generation.target)
            if kept is None:
                continue
            kept[case.id] = _slim(case)
            self._ids.setdefault(case.id, _case_of(case))

    def _cluster_of(self, reference: str) -> dict[str, str | None] | None:
        """Pairing key -> cluster for the paired bootstrap: the dataset's cluster of the key's case; without
        one, the case id when the run has samples (a case's samples together); None (each case alone) when there
        is neither."""
        source = self._clusters
        if source is None:
            if all(key == case_id for key, case_id in self._ids.items()):
                return None
            return dict(self._ids)
        if not isinstance(source, Mapping):
            order = list(dict.fromkeys(self._ids[key] for key in self._cases[reference]))
            source = {case_id: source[i] for i, case_id in enumerate(order) if i < len(source)}
        return {key: source.get(case_id) for key, case_id in self._ids.items()}

    def finish(self, targets: Sequence[TargetRun]) -> SideBySide | None:
        """The side-by-side comparison of ``targets`` (the run's, in the suite's order, the first the reference;
        each one's ``summary`` gives its metric table); None with fewer than 2 targets."""
        targets = [t for t in targets if t.name in self._cases]
        if len(targets) < 2:
            return None
        reference = targets[0]
        ref_cases = self._cases[reference.name]
        baseline = _baseline_doc(reference.summary.model_dump(), ref_cases.values())
        clusters = self._cluster_of(reference.name)
        side = SideBySide(
            reference=reference.name,
            alpha=self.alpha,
            min_effect=self.min_effect,
            tolerance=self.tolerance,
            targets=[TargetVersus(target=reference)],
        )
        for target in targets[1:]:
            builder = ComparisonBuilder(
                baseline,
                tolerance=self.tolerance,
                label=reference.name,
                alpha=self.alpha,
                min_effect=self.min_effect,
                clusters=clusters,
                allow_errors=self.allow_errors,
            )
            builder.add(self._cases[target.name].values())
            side.targets.append(TargetVersus(target=target, comparison=builder.finish(target.summary)))
        side.verdict = worst_verdict(v.comparison.verdict for v in side.targets if v.comparison is not None)
        keys = list(ref_cases) + [k for t in targets[1:] for k in self._cases[t.name] if k not in ref_cases]
        for key in dict.fromkeys(keys):
            held = [(t.name, self._cases[t.name][key]) for t in targets if key in self._cases[t.name]]
            if len({case.status for _, case in held if case.status != "skipped"}) < 2:
                continue
            side.split_cases += 1
            if len(side.splits) < SPLITS_KEPT:
                first = held[0][1]
                side.splits.append(
                    SplitCase(
                        case_id=key,
                        input=first.input,
                        expected_output=first.expected_output,
                        answers=[_answer(name, case) for name, case in held],
                    )
                )
        return side


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def target_rows(side: SideBySide) -> list[dict[str, Any]]:
    """``side`` as table rows (Prefect's ``<suite>-targets`` artifact; docs/prefect.md#prefect): per target an
    ``all cases`` row, then one row per metric of its summary, each with the target's ``kind``, its ``pass_rate``
    and ``mean_score``, and against the reference the ``verdict`` (``reference`` for the reference itself),
    ``pass_rate_delta`` / ``mean_delta`` (fractions and score units, target minus reference) and the tests'
    ``pass_rate_p`` / ``mean_p``; the ``all cases`` row also the generation's ``latency_ms_median``,
    ``latency_ms_p95``, ``cost``, ``requests`` and ``cached``. Numbers rounded to 6 decimals, None where there is
    no value."""
    rows: list[dict[str, Any]] = []
    for versus in side.targets:
        run, comparison = versus.target, versus.comparison
        s = run.summary
        metrics = {m.name: m for m in comparison.metrics} if comparison is not None else {}
        overall = comparison.pass_rate_test if comparison is not None else None
        rows.append(
            {
                "target": run.name,
                "kind": run.kind,
                "metric": "all cases",
                "verdict": comparison.verdict if comparison is not None else "reference",
                "pass_rate": _rounded(s.pass_rate if s.cases > s.skipped_cases else None),
                "pass_rate_delta": _rounded(overall.delta if overall is not None else None),
                "pass_rate_p": _rounded(overall.p_value if overall is not None else None),
                "mean_score": None,
                "mean_delta": None,
                "mean_p": None,
                "latency_ms_median": _rounded(run.latency_ms_median),
                "latency_ms_p95": _rounded(run.latency_ms_p95),
                "cost": _rounded(run.cost),
                "requests": run.requests,
                "cached": run.cached,
            }
        )
        for name, m in s.metrics.items():
            c = metrics.get(name)
            rate_test, score_test = (c.pass_rate_test, c.score_test) if c is not None else (None, None)
            rows.append(
                {
                    "target": run.name,
                    "kind": run.kind,
                    "metric": name,
                    "verdict": (c.verdict or "") if c is not None else ("reference" if comparison is None else ""),
                    "pass_rate": _rounded(m.pass_rate),
                    "pass_rate_delta": _rounded(c.pass_rate_delta if c is not None else None),
                    "pass_rate_p": _rounded(rate_test.p_value if rate_test is not None else None),
                    "mean_score": _rounded(m.mean_score),
                    "mean_delta": _rounded(c.mean_delta if c is not None else None),
                    "mean_p": _rounded(score_test.p_value if score_test is not None else None),
                    **dict.fromkeys(("latency_ms_median", "latency_ms_p95", "cost", "requests", "cached")),
                }
            )
    return rows


def compare_targets(
    result: EvaluationResult,
    *,
    alpha: float = 0.05,
    min_effect: float = 0.01,
    tolerance: float = DEFAULT_TOLERANCE,
    allow_errors: bool = False,
    clusters: Sequence[str | None] | Mapping[str, str | None] | None = None,
) -> SideBySide | None:
    """The targets of ``result`` side by side: each target after the first compared with the first, cases paired
    by id (rules in the module docstring), and the cases their verdicts split with each target's answer.

    ``result.targets`` names the targets (their order, summaries and generation figures) and ``result.test_results``
    holds every target's cases, each naming its target in ``generation.target``. ``alpha``, ``min_effect``,
    ``allow_errors``: the suite's ``gate``; ``tolerance``: the per-case change list's (score units); ``clusters``:
    as :class:`SideBySideBuilder`'s. Returns None when ``result`` has fewer than 2 targets.

    Raises ValueError when ``tolerance`` is negative.
    """
    if len(result.targets) < 2:
        return None
    builder = SideBySideBuilder(
        [t.name for t in result.targets],
        alpha=alpha,
        min_effect=min_effect,
        tolerance=tolerance,
        allow_errors=allow_errors,
        clusters=clusters,
    )
    builder.add(result.test_results)
    return builder.finish(result.targets)


__all__ = [
    "SPLITS_KEPT",
    "SideBySide",
    "SideBySideBuilder",
    "SplitCase",
    "TargetAnswer",
    "TargetVersus",
    "compare_targets",
    "target_rows",
]
